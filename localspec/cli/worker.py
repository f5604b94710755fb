"""`localspec worker`: lend this machine's devices to other machines' runs (llama.cpp's RPC server)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

import click

from ..config.paths import file_in_the_way, user_path
from ..errors import InputError, LocalspecError
from ..runtime.devices import describe_device
from ..runtime.library import default_threads
from ..runtime.rpc import DEFAULT_PORT, lent_devices, require_rpc, serve
from ..settings import MAX_THREADS
from .common import is_loopback
from .options import WholeNumbers
from .stdio import stdout_is_closed

# llama.cpp's server first sets up a backend on every device it lends (a GPU's takes seconds), then listens:
# "listening" is said once a connection is taken, or after this long if its setup is slower still.
START_SECONDS = 60.0


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=WholeNumbers(1, 65535), help="Port to listen on.")
@click.option("--threads", type=WholeNumbers(min=1, max=MAX_THREADS), default=None,
              help="CPU threads when lending the CPU [all cores].")
@click.option("--cache", "cache_dir", metavar="DIR", type=click.Path(), default=None,
              help="Keep received tensors in DIR, so the next load of the same model reads them from disk.")
def worker(host: str, port: int, threads: int | None, cache_dir: str | None) -> None:
    """Lend this machine's GPUs (else its CPU) to runs elsewhere given `--rpc HOST:PORT`.

    Runs llama.cpp's own RPC server until Ctrl-C. The protocol has no
    authentication and no encryption: use it on a trusted network only.

    \b
    Examples:
      localspec worker                               # this machine only (127.0.0.1:50052)
      localspec worker --host 0.0.0.0 --port 50052   # reachable from the network
      localspec run --rpc 192.168.1.20:50052 "Hi"    # on the machine that runs the model
    """
    require_rpc()
    host = _listen_address(host)
    _check_can_listen(host, port)
    if cache_dir is not None:  # llama.cpp writes into it but does not create it
        cache_dir = str(user_path(cache_dir, "--cache"))  # (an empty one is an error, not "no cache")
        blocking = file_in_the_way(Path(cache_dir))  # (the folder itself, or one of its parents: a file, a pipe)
        if blocking is not None:
            what = "not a folder" if blocking == Path(cache_dir) else f"{blocking} is a file, not a folder"
            raise InputError(f"cannot use {cache_dir} for the tensor cache ({what})")
        try:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # (a folder not theirs, one under a file)
            reason = (exc.strerror or str(exc)).lower()
            raise InputError(f"cannot use {cache_dir} for the tensor cache ({reason})") from None
    if not is_loopback(host):
        click.echo(f"warning: listening on {host}: the RPC protocol has no authentication or encryption; "
                   "anyone who reaches this port can use this machine's devices. Use it on a trusted network only.", err=True)
    stdout = _stdout_kept_for_localspec()
    server = threading.Thread(target=serve, args=(host, port, threads or default_threads(), cache_dir), daemon=True)
    server.start()
    if not _listening(server, host, port):
        raise LocalspecError(f"llama.cpp's RPC server could not start on {host}:{port}")
    lent = ", ".join(f"{device.name} ({device.description})" for device in map(describe_device, lent_devices()))
    if stdout is not None:  # (a line scripts wait for; a worker started with `>&-` serves without it)
        with contextlib.suppress(OSError):  # (a reader gone: the worker serves on)
            stdout.write(f"localspec worker listening on {host}:{port}, lending {lent}; Ctrl-C stops it\n")
            stdout.flush()
    try:
        while server.is_alive():
            server.join(0.5)
    except KeyboardInterrupt:
        click.echo("worker stopped", err=True)
        return
    raise LocalspecError("llama.cpp's RPC server stopped")


def _stdout_kept_for_localspec() -> TextIO | None:
    """stdout for localspec's own line alone: the process's descriptor 1, where llama.cpp's RPC server prints its
    banner and a line per client, is pointed at stderr from now on (None: stdout was closed at start)."""
    if stdout_is_closed():
        return None
    sys.stdout.flush()
    kept = os.fdopen(os.dup(1), "w", encoding="utf-8", errors="replace")
    os.dup2(2, 1)
    return kept


def _listening(server: threading.Thread, host: str, port: int) -> bool:
    """Whether llama.cpp's server is up: False once its thread has ended (it could not bind, or a device's
    backend failed); True once it takes a connection (llama.cpp prints that one as a client that came and went),
    or after START_SECONDS of setup, however slow the machine."""
    address = ("127.0.0.1" if host == "0.0.0.0" else host, port)
    deadline = time.monotonic() + START_SECONDS
    while server.is_alive() and time.monotonic() < deadline:
        try:
            with socket.create_connection(address, timeout=1.0):
                return True
        except OSError:  # refused: not listening yet
            server.join(0.05)
    return server.is_alive()


def _listen_address(host: str) -> str:
    """The IPv4 address to listen on: llama.cpp's RPC server takes nothing else (a name is resolved here)."""
    if ":" in host:
        raise InputError(f"--host {host}: llama.cpp's RPC server listens on IPv4 addresses only")
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    except (OSError, UnicodeError):
        raise InputError(f"--host {host}: not an IPv4 address or a name this machine resolves to one") from None


def _check_can_listen(host: str, port: int) -> None:
    """Refuse an address this machine cannot listen on (taken, or not its own) before llama.cpp tries."""
    try:
        with socket.socket(socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise LocalspecError(f"cannot listen on {host}:{port} ({(exc.strerror or str(exc)).lower()})") from None
