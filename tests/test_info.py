"""`localspec info`: what llama.cpp was built with and what it sees, as one JSON object."""

from __future__ import annotations

import json

from cli_helpers import cli


def test_info_reports_versions_devices_features_and_folders() -> None:
    result = cli("info", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.output)
    assert report["localspec"] and report["llama_cpp_python"]
    assert isinstance(report["gpu_offload"], bool) and isinstance(report["rpc"], bool)
    cpu = [d for d in report["devices"] if d["type"] == "CPU"]
    assert cpu and cpu[0]["memory_total"] > 0
    assert report["default_threads"] >= 1 and report["default_profile"] == "demo"
    assert set(report["folders"]) == {"profiles", "cache", "models", "data"}
    text = cli("info").output
    assert "device" in text and "llama-cpp-python" in text


def test_each_model_has_its_own_gpu_layers_flag() -> None:
    from localspec.cli.options import SETTING_OPTIONS

    by_flag = {option.flag: option.keys for option in SETTING_OPTIONS}
    assert by_flag["--n-gpu-layers"] == ("target.n_gpu_layers",)
    assert by_flag["--draft-n-gpu-layers"] == ("draft.n_gpu_layers",)
