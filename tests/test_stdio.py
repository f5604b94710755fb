"""What every command does when a standard stream is closed, full or gone (`localspec.cli.stdio`), in real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a process per case


def localspec(*args: str, stdout: str = "pipe", stderr: str = "pipe") -> subprocess.CompletedProcess:
    """Run `python -m localspec ARGS` with stdout and stderr each a pipe, "closed", "/dev/full" or a gone reader."""
    closed = [fd for fd, how in ((1, stdout), (2, stderr)) if how == "closed"]
    opened = []

    def target(how: str) -> int | None:
        if how == "pipe":
            return subprocess.PIPE
        if how == "gone":  # a pipe whose reader has gone, as `| head -c 1` once head has exited
            read_end, write_end = os.pipe()
            os.close(read_end)
            opened.append(write_end)
            return write_end
        if how == "closed":
            return None
        opened.append(os.open(how, os.O_WRONLY))
        return opened[-1]

    try:
        return subprocess.run([sys.executable, "-m", "localspec", *args], stdout=target(stdout), stderr=target(stderr),
                              stdin=subprocess.DEVNULL, timeout=120, preexec_fn=lambda: [os.close(fd) for fd in closed])
    finally:
        for fd in opened:
            os.close(fd)


@pytest.fixture
def tiny_run(tiny_pair: tuple[Path, Path]) -> list[str]:
    return ["run", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--raw", "--temperature", "0",
            "--threads", "1", "--max-tokens", "4"]


def test_with_stderr_closed_a_warning_never_lands_on_stdout(tiny_run: list[str]) -> None:
    """`print(file=sys.stderr)` with stderr closed wrote the invalid-UTF-8 warning into `run --json`'s output."""
    result = localspec(*tiny_run, "--json", "caf\udce9 the cat", stderr="closed")
    assert result.returncode == 0
    assert json.loads(result.stdout)["stats"]["tokens_generated"] == 4


def test_a_diagnostic_that_cannot_be_written_does_not_fail_a_command_that_did_its_work(tiny_run: list[str]) -> None:
    result = localspec(*tiny_run, "caf\udce9 the cat", stderr="/dev/full")  # the warning cannot be written
    assert result.returncode == 0 and result.stdout


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["run", "--help"], ["profile", "list"]])
@pytest.mark.parametrize("stdout, message", [("/dev/full", "error: cannot write to stdout (No space left on device)"),
                                             ("closed", "error: stdout is closed: nowhere to write the output")])
def test_output_that_cannot_be_written_is_one_line_and_status_1(args: list[str], stdout: str, message: str) -> None:
    """`--version >/dev/full` was a traceback; `profile list >&-` exited 0 with its output lost."""
    result = localspec(*args, stdout=stdout)
    assert result.returncode == 1 and result.stderr.decode().splitlines() == [message], result.stderr.decode()


@pytest.mark.parametrize("args", [["profile", "show", "demo"], ["info"], ["--version"], ["--help"]])
def test_a_reader_that_went_away_ends_any_command_with_141(args: list[str]) -> None:
    """Commands that print through rich exited 1 (rich's own choice), and --help and --version 1 (click's),
    where `run` exits 141."""
    result = localspec(*args, stdout="gone")
    assert result.returncode == 141 and result.stderr == b"", result.stderr.decode()


def test_a_closed_descriptor_is_never_reused_for_a_file_the_process_opens(tmp_path: Path) -> None:
    """With stderr closed, the next file opened took descriptor 2, and llama.cpp's log lines went into it."""
    script = ("from localspec.cli.stdio import guard_standard_streams; guard_standard_streams(); "
              f"print(open({str(tmp_path / 'f')!r}, 'w').fileno())")
    result = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: os.close(2), timeout=60)
    assert result.returncode == 0 and int(result.stdout) > 2


def test_text_the_terminals_encoding_cannot_hold_is_escaped_not_a_traceback(tmp_path: Path) -> None:
    """Under PYTHONIOENCODING=ascii a profile's stop string "café" ended `profile show` in a UnicodeEncodeError."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "PYTHONIOENCODING": "ascii"}
    setting = subprocess.run([sys.executable, "-m", "localspec", "profile", "set", "demo", 'sampling.stop=["café"]'],
                             capture_output=True, env=env, timeout=120)
    assert setting.returncode == 0, setting.stderr
    shown = subprocess.run([sys.executable, "-m", "localspec", "profile", "show", "demo"], capture_output=True,
                           env=env, timeout=120)
    assert shown.returncode == 0 and b"Traceback" not in shown.stderr
    assert b"caf\\xe9" in shown.stdout



def test_a_ctrl_c_as_the_process_exits_is_ignored_not_a_traceback(tmp_path) -> None:
    """A Ctrl-C in the instant between a command's end and the process's was raised inside whatever Python freed
    then (a model's `__del__`): "Exception ignored in ...", a traceback, and the command's status lost."""
    script = tmp_path / "interrupted_at_exit.py"
    script.write_text("import atexit, os, signal, sys, time\nfrom localspec.__main__ import main\n"
                      "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.05)))\n"
                      "sys.argv = ['localspec', '--version']\nmain()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "" and done.stdout.startswith("localspec, version"), done.stderr


@pytest.mark.parametrize("command", [["run", "--raw", "hi"], ["chat"]])
def test_run_and_chat_with_stdout_closed_say_so_before_any_model_loads(command: list[str], tiny_pair) -> None:
    """(was: `chat >&-` loaded the models and stored the user's message without a reply before failing; the tiny
    target has no chat template, which `chat` would have refused first)"""
    result = localspec(command[0], "--target", str(tiny_pair[0]), *command[1:], stdout="closed")
    assert result.returncode == 1, result.stderr.decode()
    assert result.stderr.decode() == "error: stdout is closed: nowhere to write the output\n"
