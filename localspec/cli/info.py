"""`localspec info`: versions, devices, build features and folders, for a bug report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import click

from .. import __version__
from ..app.repack import load_verdicts
from ..config.paths import cache_dir, data_dir, file_in_the_way, models_dir, user_profiles_dir
from ..config.profiles import profile_file
from ..config.resolve import PROFILE_VARIABLE, profile_without_a_flag
from ..errors import InputError
from ..runtime.devices import build_info, devices
from ..runtime.library import default_threads
from ..runtime.repack import build_fingerprint
from ..runtime.rpc import REINSTALL, parse_endpoints, worker_devices
from ..shown import one_line, shown_name, shown_plainly
from ..textin import clean_text
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
        "cpu_repack": load_verdicts(build_fingerprint()),
        "folders": {name: _folder(where) for name, where in
                    (("profiles", user_profiles_dir), ("cache", cache_dir), ("models", models_dir), ("data", data_dir))},
        **_default_profile(),
    }
    if as_json:  # (a path's bytes that are not UTF-8 shown as U+FFFD, as in `run --json`: JSON is text)
        report["folders"] = {name: clean_text(folder)[0] for name, folder in report["folders"].items()}
        report["default_profile"] = clean_text(report["default_profile"])[0]
        click.echo(json.dumps(report, indent=2))
        return
    def out(text: str) -> None:  # folder names and device descriptions are not markup
        stdout_console.print(text, markup=False)

    out(f"localspec {report['localspec']}, llama-cpp-python {report['llama_cpp_python']}{_llama_cpp_text(report['llama_cpp'])}")
    out(f"backends: {', '.join(report['backends']) or '-'}")
    out(f"GPU offload: {_gpu_text(report)}; "
        f"RPC workers: {'yes (layers can go to workers: --rpc)' if report['rpc'] else f'no (to add them: {REINSTALL})'}")
    out(f"CPU features: {' '.join(report['cpu_features']) or '-'}; default threads: {report['default_threads']}")
    out("same seed, same text as --no-speculative on the CPU: " + (
        "exact (built without llamafile's kernels: a token is computed alike alone and in a batch)"
        if report["cpu_batch_invariant"]
        else "exact, every target pass a batch (llama.cpp's default build: its llamafile kernels compute a lone"
             " token unlike a batch, so a one-token pass gets a second row, a guess in speculative runs; they make"
             " verify batches faster; the second row makes a one-token pass slower: --no-same-text computes a lone"
             " token at full speed, target-only decoding 1.3-1.6x as fast on the demo target, the text then as"
             " --no-speculative's but at near-ties; to build without them, add -DGGML_LLAMAFILE=OFF to CMAKE_ARGS and"
             " pip install --force-reinstall --no-cache-dir llama-cpp-python)"))
    for device in report["devices"]:
        memory = f"{human_size(device['memory_free'])} free of {human_size(device['memory_total'])}"
        kind = "RPC worker" if device["name"].startswith("RPC") else device["type"]  # (llama.cpp types them GPU)
        out(f"device {device['name']} ({kind}): {device['description']}, {memory}")
    out(f"repacked CPU weights (--repack auto): {_repack_text(report['cpu_repack'])}")
    for name, folder in report["folders"].items():
        out(f"{name} folder: {shown_name(folder)}")
    source = report["default_profile_from"]
    notes = [f"from {source}"] if source == PROFILE_VARIABLE else []
    if report["default_profile_missing"]:
        notes.append("no such profile: commands without -p fail")
    elif report["default_profile_missing"] is None:
        notes.append("not looked up: the profiles folder is unknown")
    out(f"default profile: {one_line(shown_plainly(report['default_profile']))}" + (f" ({'; '.join(notes)})" if notes else ""))


def _folder(where: Callable[[], Path]) -> str:
    """A folder's path (and why it cannot be made, where a file stands in its way: XDG_CACHE_HOME naming a file),
    or why it is unknown (a LOCALSPEC_HOME that is a file): info still reports the rest."""
    try:
        folder = where()
    except InputError as exc:
        return f"unknown ({exc})"
    try:
        blocking = file_in_the_way(folder)
    except OSError as exc:  # (a name too long)
        return f"{folder} (cannot reach it: {exc.strerror or exc})"
    return str(folder) if blocking is None else f"{folder} (cannot be made: {blocking} is a file, not a folder)"


def _default_profile() -> dict[str, str | bool | None]:
    """The profile commands run without -p, where its name comes from (`profile_without_a_flag`) and whether
    no profile has that name (None: it cannot be told, the profiles folder being unknown); a broken config.toml
    is reported here, not fatal: info is what a bug report starts from."""
    try:
        name, source = profile_without_a_flag()
    except InputError as exc:
        return {"default_profile": f"unknown ({exc})", "default_profile_from": None, "default_profile_missing": False}
    try:
        user_profiles_dir()
    except InputError:  # (LOCALSPEC_HOME unusable: the profiles folder's line says why; no profile can be looked up)
        return {"default_profile": name, "default_profile_from": source, "default_profile_missing": None}
    try:
        missing = profile_file(name) is None
    except InputError:  # (not a name a profile can have)
        missing = True
    return {"default_profile": name, "default_profile_from": source, "default_profile_missing": missing}


def _llama_cpp_text(build: dict[str, str]) -> str:
    """', llama.cpp 0.5.0 (ggml 0.25.3, commit 0c1e570)', or '' when the library exposes none of it."""
    if not build:
        return ""
    inner = ", ".join(f"{name} {build[key]}" for key, name in (("ggml", "ggml"), ("commit", "commit")) if build.get(key))
    return f", llama.cpp {build.get('version', '?')}" + (f" ({inner})" if inner else "")


def _gpu_text(report: dict) -> str:
    """What is true about GPUs: which ones layers can go to, or that there is none (and whether the build has a GPU backend)."""
    if report["gpu_offload"]:
        return f"yes ({', '.join(report['gpu_devices'])})"
    gpu_backends = [name for name in report["backends"] if name not in ("CPU", "BLAS") and not name.startswith("RPC")]
    if gpu_backends:
        text = f"no (the build has {', '.join(gpu_backends)} but llama.cpp sees no GPU device)"
    else:
        text = "no (a CPU build: no GPU device)"
    workers = [device["name"] for device in report["devices"] if device["name"].startswith("RPC")]
    return f"{text}, but layers can go to the RPC workers' devices ({', '.join(workers)})" if workers else text


def _repack_text(verdicts: dict[str, dict]) -> str:
    """What the probes found per kind of weights, e.g. 'F32+Q4_0+Q8_0 on (batched decodes work ...)'."""
    if not verdicts:
        return "not probed yet (probed on a model's first load)"
    return "; ".join(_verdict_text(weights, entry) for weights, entry in verdicts.items())


def _verdict_text(weights: str, entry: dict) -> str:
    text = f"{weights} {'on' if entry['works'] else 'off'} ({entry['detail']})"
    if "one_token" in entry:
        text += f", for a draft one token per decode {'on' if entry['one_token'] else 'off'} ({entry['one_token_detail']})"
    return text
