"""`localspec info`: versions, devices, build features and folders, for a bug report."""

from __future__ import annotations

import json

import click

from .. import __version__
from ..config.paths import cache_dir, data_dir, models_dir, user_profiles_dir
from ..config.resolve import DEMO_PROFILE
from ..config.user_config import default_profile_name
from ..runtime.devices import build_info, devices
from ..runtime.library import default_threads
from ..runtime.rpc import REINSTALL, parse_endpoints, worker_devices
from .common import human_size, stdout_console


@click.command()
@click.option("--rpc", "workers", multiple=True, metavar="HOST:PORT[,...]", help="Also list these RPC workers' devices.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def info(workers: tuple[str, ...], as_json: bool) -> None:
    """Show localspec's and llama.cpp's versions, the devices llama.cpp sees, and localspec's folders."""
    if workers:
        worker_devices(parse_endpoints(workers))
    report = {
        "localspec": __version__,
        **build_info(),
        "devices": [device.to_dict() for device in devices()],
        "default_threads": default_threads(),
        "folders": {"profiles": str(user_profiles_dir()), "cache": str(cache_dir()), "models": str(models_dir()),
                    "data": str(data_dir())},
        "default_profile": default_profile_name() or DEMO_PROFILE,
    }
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    out = stdout_console.print
    out(f"localspec {report['localspec']}, llama-cpp-python {report['llama_cpp_python']}")
    out(f"GPU offload: {'yes' if report['gpu_offload'] else 'no (a CPU build)'}; "
        f"RPC workers: {'yes' if report['rpc'] else f'no (to add them: {REINSTALL})'}")
    out(f"CPU features: {' '.join(report['cpu_features']) or '-'}; default threads: {report['default_threads']}")
    for device in report["devices"]:
        memory = f"{human_size(device['memory_free'])} free of {human_size(device['memory_total'])}"
        out(f"device {device['name']} ({device['type']}): {device['description']}, {memory}")
    for name, folder in report["folders"].items():
        out(f"{name} folder: {folder}")
    out(f"default profile: {report['default_profile']}")
