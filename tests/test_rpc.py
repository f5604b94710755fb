"""RPC workers on loopback: the demo target spread over two `localspec worker`s.

Everything that registers a worker runs in a subprocess: ggml-rpc keeps one
connection per worker for the life of the process and aborts it when a worker
goes away, which a test process must not share.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import cli, one_error_line

pytestmark = pytest.mark.slow

PROMPT = "Explain in a few sentences why the sea is salty."


def _has_rpc() -> bool:
    check = "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_rpc() else 1)"
    return subprocess.run([sys.executable, "-c", check], capture_output=True).returncode == 0


requires_rpc = pytest.mark.skipif(not _has_rpc(), reason="llama-cpp-python built without RPC (scripts/ensure_llama_build.sh)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def localspec(*args: str, **kwargs) -> subprocess.Popen:
    # errors="replace": `_wait_for_output` reads the first bytes raw, which may end inside a character of the
    # reply (how many are read depends on how long this process took to wake); the rest still decodes.
    return subprocess.Popen([sys.executable, "-m", "localspec", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", env=os.environ.copy(), **kwargs)


def start_workers(n: int) -> tuple[list[str], list[subprocess.Popen]]:
    """n workers on free loopback ports, each lending the CPU with one thread, listening when this returns."""
    endpoints, processes = [], []
    for _ in range(n):
        port = free_port()
        process = localspec("worker", "--port", str(port), "--threads", "1")
        deadline = time.monotonic() + 30
        while "listening" not in process.stdout.readline():
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        endpoints.append(f"127.0.0.1:{port}")
        processes.append(process)
    return endpoints, processes


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
        process.wait()


@pytest.fixture
def two_workers():
    endpoints, processes = start_workers(2)
    yield endpoints, processes
    stop(processes)


def pair_args(target: Path, draft: Path) -> list[str]:
    return ["--target", str(target), "--draft", str(draft), "--temperature", "0", "--max-tokens", "40", "--json"]


@requires_rpc
def test_target_over_two_workers_gives_the_local_greedy_output(two_workers, smollm_f32: Path, smollm_q4_1: Path) -> None:
    endpoints, _ = two_workers
    for mode in ([], ["--no-speculative"]):
        local = cli("run", *pair_args(smollm_f32, smollm_q4_1), *mode, PROMPT)
        assert local.exit_code == 0, local.stderr
        remote = localspec("run", *pair_args(smollm_f32, smollm_q4_1), *mode, "--rpc", ",".join(endpoints), PROMPT)
        output, errors = remote.communicate(timeout=300)
        assert remote.returncode == 0, errors
        local_report, remote_report = json.loads(local.output), json.loads(output)
        assert remote_report["tokens"] == local_report["tokens"] and len(remote_report["tokens"]) >= 10
        # The target's layers sit on both workers, read back from llama.cpp; the draft stays local.
        target = remote_report["placement"]["target"]
        assert target["offloaded_layers"] == target["total_layers"]
        assert sorted(target["workers"].values()) == sorted(endpoints)
        assert all(target["layers"][device] > 0 for device in target["workers"])
        if not mode:
            assert remote_report["placement"]["draft"]["offloaded_layers"] == 0
        assert local_report["placement"]["target"]["offloaded_layers"] == 0


def _wait_for_output(process: subprocess.Popen, timeout: float) -> None:
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "no output before the worker was killed"
    os.read(process.stdout.fileno(), 64)


@requires_rpc
def test_a_worker_killed_mid_generation_is_one_line_naming_it(two_workers, smollm_f32: Path, smollm_q4_1: Path) -> None:
    endpoints, workers = two_workers
    run = localspec("run", "--target", str(smollm_f32), "--draft", str(smollm_q4_1), "--max-tokens", "2000",
                    "--rpc", ",".join(endpoints), "Write a very long story about a dragon and a lighthouse.")
    _wait_for_output(run, timeout=120)
    workers[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    _, errors = run.communicate(timeout=60)
    assert time.monotonic() - killed < 15
    assert run.returncode == 1
    lines = [line for line in errors.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in errors, errors
    assert endpoints[1] in lines[0] and "stopped answering" in lines[0] and endpoints[0] not in lines[0]


@requires_rpc
def test_chat_keeps_the_conversation_when_a_worker_dies(two_workers, smollm_f32: Path, smollm_q4_1: Path) -> None:
    endpoints, workers = two_workers
    chat = localspec("chat", "--target", str(smollm_f32), "--draft", str(smollm_q4_1), "--max-tokens", "2000",
                     "--rpc", ",".join(endpoints), stdin=subprocess.PIPE)
    chat.stdin.write("Write a very long story about a dragon and a lighthouse.\n")
    chat.stdin.flush()
    _wait_for_output(chat, timeout=120)
    workers[0].send_signal(signal.SIGKILL)
    _, errors = chat.communicate(timeout=60)
    assert chat.returncode == 1
    assert f"RPC worker {endpoints[0]} stopped answering" in errors and "chat --continue" in errors
    stored = json.loads(cli("history", "show", "1", "--json").output)
    user, reply = stored["messages"][-2:]
    assert user["role"] == "user" and "dragon" in user["content"]
    assert reply["role"] == "assistant" and reply.get("interrupted") is True


@requires_rpc
def test_a_worker_nothing_listens_on_is_refused_at_start_up(tiny_pair) -> None:
    address = f"127.0.0.1:{free_port()}"
    result = cli("run", "--target", str(tiny_pair[0]), "--rpc", address, "--raw", "hi")
    one_error_line(result, 1, f"RPC worker {address} is unreachable", "localspec worker")
    one_error_line(cli("run", "--target", str(tiny_pair[0]), "--rpc", "no-port-here", "hi"), 2, "not HOST:PORT",
                   "[--rpc no-port-here]")
    one_error_line(cli("run", "--target", str(tiny_pair[0]), "--rpc", "h:\u00b2", "hi"), 2, "not HOST:PORT")
    one_error_line(cli("run", "--target", str(tiny_pair[0]), "--rpc", "h:99999", "hi"), 2, "port 99999 is out of range (1-65535)")
    on_cpu = cli("run", "--target", str(tiny_pair[0]), "--rpc", address, "--n-gpu-layers", "0", "--raw", "hi")
    assert f"--n-gpu-layers 0 keeps every layer of the target on this machine's CPU: its RPC workers" \
           f" ({address}) take none" in on_cpu.stderr  # (was: said nothing where the worker answered)
    one_error_line(cli("run", "--target", str(tiny_pair[0]), "--rpc", "a" * 70 + ":1", "--raw", "hi"), 1, "is not a valid host name")


@requires_rpc
@pytest.mark.slow  # the handshake's 15 s, in a process of its own: its stuck llama.cpp call ends with it
@requires_rpc
def test_a_port_that_takes_the_connection_but_never_answers_is_one_line_not_a_hang(tiny_pair) -> None:
    """A web server (or anything that waits for its own request first) on the worker's port: ggml-rpc waited for
    the handshake's answer for good, and Ctrl-C then printed a callback traceback."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections are taken (the kernel's queue), never read or answered
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "localspec", "info", "--rpc", address], capture_output=True,
                              text=True, timeout=120)
        assert time.monotonic() - started < 60
    finally:
        silent.close()
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert f"RPC worker {address} took the connection but did not answer llama.cpp's RPC handshake" in lines[0]



@requires_rpc
@pytest.mark.slow  # a process of its own: the failed handshake aborts llama.cpp's call
def test_a_port_that_answers_the_handshake_with_garbage_is_named_not_workers_none() -> None:
    """(was: "an RPC worker failed (Remote RPC server crashed or returned malformed response; workers: none)")"""
    garbage = socket.socket()
    garbage.bind(("127.0.0.1", 0))
    garbage.listen(8)
    address = f"127.0.0.1:{garbage.getsockname()[1]}"

    def answer_with_garbage() -> None:
        for _ in range(4):  # (the reachability check's connection, then the handshake's)
            try:
                connection, _ = garbage.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(2)
                with contextlib.suppress(OSError):
                    connection.recv(64)
                    connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 4)

    threading.Thread(target=answer_with_garbage, daemon=True).start()
    try:
        done = subprocess.run([sys.executable, "-m", "localspec", "info", "--rpc", address], capture_output=True,
                              text=True, timeout=120)
    finally:
        garbage.close()
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert f"RPC worker {address} did not answer llama.cpp's RPC handshake as a worker does" in lines[0]

SLOW_TO_SET_UP = textwrap.dedent("""
    import sys, time
    import localspec.cli.worker as worker
    real = worker.serve
    def slow(*args):
        time.sleep(1.5)  # a device's backend that takes its time (a GPU's), set up before llama.cpp listens
        real(*args)
    worker.serve = slow
    from localspec.cli import main
    main(["worker", "--port", sys.argv[1], "--threads", "1"])
""")


@requires_rpc
def test_the_worker_says_it_listens_only_once_llama_cpp_does() -> None:
    """The worker said "listening" after a fixed half second, whatever llama.cpp was doing: a run started on that
    line (as a script starts it) found the worker unreachable."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", SLOW_TO_SET_UP, str(port)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        deadline = time.monotonic() + 60
        while "listening" not in process.stdout.readline():
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # (was refused)
    finally:
        stop([process])


def test_worker_refuses_a_taken_port_or_an_unusable_cache_and_warns_off_loopback() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = localspec("worker", "--port", str(port))
        _, errors = refused.communicate(timeout=60)
    assert refused.returncode == 1 and errors.strip() == f"error: cannot listen on 127.0.0.1:{port} (address already in use)"
    blocked = localspec("worker", "--port", str(free_port()), "--cache", "/proc/version/cache")
    _, errors = blocked.communicate(timeout=60)
    assert blocked.returncode == 2 and errors == (  # (was the OS's "not a directory")
        "error: cannot use /proc/version/cache for the tensor cache (/proc/version is a file, not a folder)\n")
    for a_file in ("/proc/version", "/dev/null"):  # (were "file exists", and click's "Directory … is a file.")
        refused = localspec("worker", "--port", str(free_port()), "--cache", a_file)
        _, errors = refused.communicate(timeout=60)
        assert refused.returncode == 2 and errors == f"error: cannot use {a_file} for the tensor cache (not a folder)\n"
    empty = localspec("worker", "--port", str(free_port()), "--cache", "")
    _, errors = empty.communicate(timeout=60)
    assert empty.returncode == 2 and errors.strip() == "error: --cache: the path is empty"
    exposed = localspec("worker", "--host", "0.0.0.0", "--port", str(free_port()))
    try:
        warning = exposed.stderr.readline()
        assert warning.startswith("warning: listening on 0.0.0.0") and "no authentication" in warning
    finally:
        stop([exposed])


@requires_rpc
def test_the_workers_stdout_holds_its_one_line_and_llama_cpps_banner_goes_to_stderr() -> None:
    """(was: llama.cpp's "Starting RPC server", "Accepted client connection" … on stdout beside the line scripts
    wait for)"""
    [endpoint], [process] = start_workers(1)
    host, port = endpoint.split(":")
    socket.create_connection((host, int(port)), timeout=5).close()
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    rest, errors = process.communicate(timeout=30)
    assert rest == "" and "Starting RPC server" in errors and "Accepted client connection" in errors


@requires_rpc
def test_info_lists_the_workers_devices(two_workers) -> None:
    endpoints, _ = two_workers
    info = localspec("info", "--json", "--rpc", ",".join(endpoints))
    output, errors = info.communicate(timeout=60)
    assert info.returncode == 0, errors
    report = json.loads(output)
    remote = [device for device in report["devices"] if device["description"] in endpoints]
    assert len(remote) == 2 and all(device["memory_total"] > 0 for device in remote)
    assert report["rpc"] is True
    shown = localspec("info", "--rpc", ",".join(endpoints))
    output, errors = shown.communicate(timeout=60)
    lines = [line for line in output.splitlines() if line.startswith("device RPC")]
    assert len(lines) == 2 and all("(RPC worker)" in line for line in lines), output  # (was: "(GPU)" for a CPU)


def test_without_rpc_support_the_error_says_how_to_reinstall(monkeypatch, tiny_pair) -> None:
    from localspec.runtime import rpc

    monkeypatch.setattr(rpc, "_rpc_registry", lambda: None)
    line = one_error_line(cli("run", "--target", str(tiny_pair[0]), "--rpc", "127.0.0.1:1", "--raw", "hi"), 1, "no RPC backend")
    assert 'CMAKE_ARGS="-DGGML_RPC=on"' in line and "--no-cache-dir" in line


def test_a_bad_rpc_address_is_refused_before_the_demo_target_is_derived(tmp_path: Path, monkeypatch) -> None:
    """`run --rpc foo` on a fresh install first spent seconds writing the demo's 540 MB F32 target."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    one_error_line(cli("run", "--rpc", "foo", "hi"), 2, "'foo' is not HOST:PORT")
    one_error_line(cli("run", "--rpc", "127.0.0.1:50052,", "hi"), 2,  # (was "address '' is not HOST:PORT")
                   "RPC worker addresses '127.0.0.1:50052,': an empty one (a comma too many?)")
    assert not list((tmp_path / "cache").rglob("*.gguf"))
