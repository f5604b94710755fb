"""`localspec info`, per-model offload settings, and where llama.cpp put each model."""

from __future__ import annotations

import json
import os

import pytest
from cli_helpers import cli, one_error_line

from localspec.app.plan import resolve
from localspec.config.paths import user_profiles_dir
from localspec.config.resolve import resolve_settings
from localspec.runtime.placement import parse_load_log


def write_profile(name: str, text: str) -> None:
    path = user_profiles_dir() / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


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
    # Whether a lone token is computed like a batch follows from llamafile's kernels being built in.
    assert report["cpu_batch_invariant"] == ("LLAMAFILE" not in report["cpu_features"])
    invariance = next(line for line in text.splitlines() if line.startswith("same seed, same text"))
    assert "exact" in invariance and ("alike alone and in a batch" in invariance) == report["cpu_batch_invariant"]


def test_the_profile_named_by_localspec_profile_is_the_one_info_and_profile_list_call_the_default() -> None:
    """Commands without -p run LOCALSPEC_PROFILE's profile: `info` and `profile list` said the configured one."""
    write_profile("mine", '[target]\npath = "x.gguf"\n')
    environment = {"LOCALSPEC_PROFILE": "mine"}
    assert "default profile: mine (from LOCALSPEC_PROFILE)" in cli("info", env=environment).output
    report = json.loads(cli("info", "--json", env=environment).output)
    assert report["default_profile"] == "mine" and report["default_profile_from"] == "LOCALSPEC_PROFILE"
    listed = json.loads(cli("profile", "list", "--json", env=environment).output)
    assert [row["name"] for row in listed if row["default"]] == ["mine"]
    assert [row["name"] for row in json.loads(cli("profile", "list", "--json").output) if row["default"]] == ["demo"]


def test_a_localspec_home_that_is_a_file_is_one_line_for_every_command_and_info_still_reports(tmp_path) -> None:
    """Each command had failed its own way (`memory stats`: "the memory is empty", exit 0; a lock "File exists")."""
    a_file = tmp_path / "home"
    a_file.write_text("x\n")
    environment = {"LOCALSPEC_HOME": str(a_file)}
    for command in (("memory", "stats"), ("profile", "default", "demo"), ("history", "list"), ("profile", "list")):
        one_error_line(cli(*command, env=environment), 2, f"LOCALSPEC_HOME={a_file}: not a folder")
    reported = cli("info", env=environment)
    assert reported.exit_code == 0 and f"data folder: unknown (LOCALSPEC_HOME={a_file}: not a folder)" in reported.stdout
    assert a_file.read_text() == "x\n"



def test_a_relative_localspec_home_is_refused_naming_the_absolute_one(tmp_path, monkeypatch) -> None:
    """(was: taken from the current folder, so that each folder had its own profiles, history and memory)"""
    monkeypatch.chdir(tmp_path)
    for command in (("history", "list"), ("profile", "list")):
        one_error_line(cli(*command, env={"LOCALSPEC_HOME": "home"}), 2,
                       "LOCALSPEC_HOME=home: not an absolute path", f"use {tmp_path / 'home'}")
    said = one_error_line(cli("run", "hi", env={"LOCALSPEC_HOME": "home", "LOCALSPEC_PROFILE": "tiny"}), 2)
    assert said.startswith("error: LOCALSPEC_HOME=home: not an absolute path")  # (was blamed on LOCALSPEC_PROFILE)
    info = cli("info", env={"LOCALSPEC_HOME": "home", "LOCALSPEC_PROFILE": "tiny"})  # (was: "no such profile")
    assert "default profile: tiny (from LOCALSPEC_PROFILE; not looked up: the profiles folder is unknown)" \
        in info.stdout
    assert not (tmp_path / "home").exists()


def test_localspec_home_expands_variables_and_a_blank_one_is_unset(tmp_path, monkeypatch) -> None:
    """(was: "LOCALSPEC_HOME: the path is empty" for a blank one, which the README says is as if unset, and a
    `$VARIABLE` taken as a relative folder's name, unlike a profile's paths)"""
    monkeypatch.setenv("LOCALSPEC_TEST_BASE", str(tmp_path))
    monkeypatch.delenv("LOCALSPEC_TEST_UNSET", raising=False)
    folders = json.loads(cli("info", "--json", env={"LOCALSPEC_HOME": "$LOCALSPEC_TEST_BASE/home"}).output)["folders"]
    assert folders["profiles"] == str(tmp_path / "home" / "profiles")
    one_error_line(cli("profile", "list", env={"LOCALSPEC_HOME": "$LOCALSPEC_TEST_UNSET/home"}), 2,
                   "LOCALSPEC_HOME=$LOCALSPEC_TEST_UNSET/home: $LOCALSPEC_TEST_UNSET is not set in this environment")
    assert cli("profile", "list", env={"LOCALSPEC_HOME": "  "}).exit_code == 0
    one_error_line(cli("profile", "list", env={"LOCALSPEC_HOME": "~no-such-user-here/x"}), 2,
                   "error: LOCALSPEC_HOME=~no-such-user-here/x: cannot expand ~ (no such user)")


def test_a_home_or_config_folder_under_a_file_is_one_line_not_profiles_missing(tmp_path) -> None:
    """(was: `profile list` listed the shipped profiles alone, exit 0, and only `profile add` failed)"""
    a_file = tmp_path / "afile"
    a_file.write_text("x\n")
    one_error_line(cli("profile", "list", env={"LOCALSPEC_HOME": str(a_file / "sub")}), 2,
                   f"LOCALSPEC_HOME={a_file / 'sub'}: {a_file} is a file, not a folder")
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    for command in (("history", "list"), ("run", "-p", "tiny", "hi")):  # (was: "no profile named 'tiny'", …)
        one_error_line(cli(*command, env={"LOCALSPEC_HOME": str(tmp_path / "l1")}), 2, "a symbolic link to nothing")
    for variable, what in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data")):
        command = ("profile", "list") if what == "config" else ("history", "list")
        one_error_line(cli(*command, env={"LOCALSPEC_HOME": "", variable: str(a_file)}), 2,
                       f"the {what} folder {a_file / 'localspec'} cannot be made: {a_file} is a file")
    assert a_file.read_text() == "x\n"

def test_info_still_reports_with_a_broken_config_and_says_what_is_wrong_with_it() -> None:
    from localspec.config.paths import config_file

    config_file().parent.mkdir(parents=True, exist_ok=True)
    config_file().write_text("default_profile = 5\n")
    result = cli("info")
    assert result.exit_code == 0, result.stderr
    assert "default profile: unknown (" in result.stdout and "default_profile must be a string" in result.stdout


def test_info_says_gpu_offload_only_with_a_gpu_device_and_names_llama_cpp_s_build() -> None:
    report = json.loads(cli("info", "--json").output)
    local_gpus = [d["name"] for d in report["devices"] if d["type"] in ("GPU", "integrated GPU") and not d["name"].startswith("RPC")]
    # llama_supports_gpu_offload() is true for a CPU build with the RPC backend: that is not a GPU.
    assert report["gpu_offload"] == bool(local_gpus) and report["gpu_devices"] == local_gpus
    assert "CPU" in report["backends"] and report["rpc"] == ("RPC" in report["backends"])
    assert report["llama_cpp"].get("version") and report["llama_cpp"].get("commit")
    gpu_line = next(line for line in cli("info").output.splitlines() if line.startswith("GPU offload:"))
    assert gpu_line.startswith("GPU offload: yes") == bool(local_gpus), gpu_line


def test_each_model_has_its_own_gpu_layers_flag() -> None:
    from localspec.cli.options import SETTING_OPTIONS

    by_flag = {option.flag: option.keys for option in SETTING_OPTIONS}
    assert by_flag["--n-gpu-layers"] == ("target.n_gpu_layers",)
    assert by_flag["--draft-n-gpu-layers"] == ("draft.n_gpu_layers",)


def test_offload_layers_resolve_per_model_through_profile_and_flags(tiny_pair) -> None:
    target, draft = tiny_pair
    write_profile("gpus", f'[target]\npath = "{target}"\nn_gpu_layers = 0\n[draft]\npath = "{draft}"\nn_gpu_layers = "all"\n')
    from_profile = resolve_settings("gpus", {})
    assert from_profile.values["target.n_gpu_layers"] == 0 and from_profile.values["draft.n_gpu_layers"] == "all"
    assert from_profile.sources["target.n_gpu_layers"] == from_profile.sources["draft.n_gpu_layers"] == "profile gpus (user)"
    flagged = resolve_settings("gpus", {"draft.n_gpu_layers": 3})
    assert flagged.values["draft.n_gpu_layers"] == 3 and flagged.sources["draft.n_gpu_layers"] == "flag"
    assert flagged.values["target.n_gpu_layers"] == 0
    plan = resolve("gpus", {"draft.n_gpu_layers": 3})
    assert plan.target.runtime.n_gpu_layers == 0 and plan.draft.runtime.n_gpu_layers == 3


@pytest.mark.parametrize("flag, value", [("--draft-n-gpu-layers", "-5"), ("--n-gpu-layers", "many")])
def test_a_bad_offload_value_is_one_line(tiny_pair, flag: str, value: str) -> None:
    target, draft = tiny_pair
    one_error_line(cli("run", "--target", str(target), "--draft", str(draft), flag, value, "hi"), 2, flag)


def test_a_bad_offload_value_in_a_profile_names_the_key(tiny_pair) -> None:
    write_profile("neg", f'[target]\npath = "{tiny_pair[0]}"\nn_gpu_layers = -5\n')
    one_error_line(cli("run", "-p", "neg", "hi"), 2, "target.n_gpu_layers")


def test_run_reports_where_each_model_runs(tiny_pair) -> None:
    target, draft = tiny_pair
    args = ("run", "--target", str(target), "--draft", str(draft), "--raw", "--max-tokens", "4", "--temperature", "0")
    report = json.loads(cli(*args, "--json", "hi").output)
    for role in ("target", "draft"):
        placement = report["placement"][role]
        assert placement["layers"] == {"CPU": placement["total_layers"]} and placement["total_layers"] >= 2
        assert placement["offloaded_layers"] == 0 and sum(placement["weights_bytes"].values()) > 0
    stderr = cli(*args, "--stats", "hi").stderr
    assert f"target: {report['placement']['target']['total_layers']} layers on CPU" in stderr


def test_placement_parses_an_offloaded_load_log() -> None:
    """What a CUDA build logs (llama.cpp's own wording), layers split between a GPU and the CPU."""
    log = "".join(f"load_tensors: layer {i:3d} assigned to device {'CUDA0' if i >= 2 else 'CPU'}, is_swa = 0\n" for i in range(5))
    log += "load_tensors:        CUDA0 model buffer size =   100.50 MiB\nload_tensors:   CPU_Mapped model buffer size =    20.00 MiB\n"
    placement = parse_load_log(log)
    assert placement.layers == {"CUDA0": 3, "CPU": 2} and placement.offloaded_layers == 3
    assert placement.weights == {"CUDA0": int(100.5 * 2**20), "CPU_Mapped": 20 * 2**20}
    assert placement.summary() == "3/5 layers offloaded (3 on CUDA0, 2 on CPU)"


def test_info_prints_folder_names_as_they_are(monkeypatch) -> None:
    monkeypatch.setenv("LOCALSPEC_HOME", "/tmp/[/x] and [bold]")  # rich markup would raise on the closing tag
    result = cli("info")
    assert result.exit_code == 0, result.stderr
    assert "data folder: /tmp/[/x] and [bold]" in result.output


def test_a_default_profile_that_does_not_exist_is_said_so_by_info_and_profile_list() -> None:
    """`info` printed the name as if it would run (a line break in it raw), `profile list` marked nothing."""
    environment = {"LOCALSPEC_PROFILE": "no\nsuch"}
    line = next(line for line in cli("info", env=environment).output.splitlines() if line.startswith("default profile"))
    assert line == "default profile: no\\nsuch (from LOCALSPEC_PROFILE; no such profile: commands without -p fail)"
    assert json.loads(cli("info", "--json", env=environment).output)["default_profile_missing"] is True
    listed = cli("profile", "list", env=environment)
    assert listed.exit_code == 0 and "demo" in listed.stdout
    assert listed.stderr.strip() == ("note: the default profile 'no\\nsuch' (from LOCALSPEC_PROFILE) is not among them:"
                                     " commands without -p fail")
    assert json.loads(cli("info", "--json").output)["default_profile_missing"] is False


def test_profile_list_shows_a_models_control_characters_as_escapes() -> None:
    """A shared profile's path could recolour the terminal (`profile show` already escaped it)."""
    write_profile("odd", '[target]\npath = "/tmp/\\u001b[31mRED\\u001b[0m.gguf"\n')
    listed = cli("profile", "list").stdout
    assert "\x1b" not in listed and "\\x1b[31mRED" in listed


def test_info_shows_folder_names_escaped_and_as_json_text(tmp_path) -> None:
    """(was: a LOCALSPEC_HOME's escape sequences and line breaks written to the terminal as they are, and its
    bytes that are not UTF-8 written into --json as lone surrogates)"""
    home = os.fsdecode(os.fsencode(str(tmp_path)) + b"/h\x1b[31m\nX\xff")
    shown = cli("info", env={"LOCALSPEC_HOME": home}).stdout
    assert "data folder: " + str(tmp_path) + "/h\\x1b[31m\\nX\\xff\n" in shown and "\x1b[31m" not in shown
    report = json.loads(cli("info", "--json", env={"LOCALSPEC_HOME": home, "LOCALSPEC_PROFILE": "a\udcff"}).stdout)
    assert report["folders"]["data"] == str(tmp_path) + "/h\x1b[31m\nX\ufffd"
    assert report["default_profile"] == "a\ufffd"


def test_gpu_offload_names_the_rpc_workers_devices_rather_than_the_worker_as_a_gpu_backend() -> None:
    """(was: "no (the build has RPC[127.0.0.1:50076] but llama.cpp sees no GPU device)" above the worker's GPU)"""
    from localspec.cli.info import _gpu_text

    report = {"gpu_offload": False, "backends": ["CPU", "RPC", "RPC[127.0.0.1:50076]"],
              "devices": [{"name": "CPU"}, {"name": "RPC0"}]}
    assert _gpu_text(report) == "no (a CPU build: no GPU device), but layers can go to the RPC workers' devices (RPC0)"
    assert _gpu_text({**report, "devices": [{"name": "CPU"}]}) == "no (a CPU build: no GPU device)"


def test_info_says_where_a_file_stands_in_a_folders_way(tmp_path) -> None:
    """(was: "cache folder: /…/afile/localspec" without a word; the prompt cache then failed at every run)"""
    a_file = tmp_path / "afile"
    a_file.write_text("x\n")
    shown = cli("info", env={"XDG_CACHE_HOME": str(a_file)}).stdout
    assert f"cache folder: {a_file}/localspec (cannot be made: {a_file} is a file, not a folder)\n" in shown
