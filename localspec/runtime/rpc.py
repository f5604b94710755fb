"""llama.cpp's RPC backend (ggml-rpc): lend this machine's devices to others, use other machines' devices.

A worker runs llama.cpp's own RPC server (`ggml_backend_rpc_start_server`) over
its local devices; a client registers each worker (`ggml_backend_rpc_add_server`)
and its devices then take a model's layers as local GPUs would. llama-cpp-python
binds none of this, so the functions are looked up through ggml's backend
registry, as llama.cpp's own tools do.

The protocol has no authentication and no encryption: workers belong on a
trusted network. ggml-rpc aborts the whole process when a worker cannot be
reached or stops answering, so each worker is checked before it is registered,
and an abort later on becomes one line naming the worker (`fatal.py`).
"""

from __future__ import annotations

import ctypes
import socket
import threading
import time
from typing import Any, Callable, Iterable

from ..errors import InputError, LocalspecError
from . import fatal
from .devices import backend_name, device_handles, device_name, device_type, ggml

REINSTALL = 'CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir llama-cpp-python'
DEFAULT_PORT = 50052
CONNECT_TIMEOUT_SECONDS = 3.0
HANDSHAKE_TIMEOUT_SECONDS = 15.0  # registering a worker: its handshake and device queries, milliseconds on a LAN
_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_START_SERVER = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)
)
_workers: dict[str, list[int]] = {}  # endpoint -> its device handles, once registered


def parse_endpoints(values: Iterable[str]) -> tuple[str, ...]:
    """HOST:PORT items, each possibly a comma-separated list, checked and in order (duplicates once)."""
    endpoints: list[str] = []
    for value in values:
        for item in str(value).split(","):
            item = item.strip()
            if not item:
                raise InputError(f"RPC worker addresses {str(value)!r}: an empty one (a comma too many?)")
            host, colon, port = item.rpartition(":")
            digits = port.isascii() and port.isdigit()  # not "²" or "٣": digits to Unicode, not to a port number
            if not colon or not host or " " in host or not digits:
                raise InputError(f"RPC worker address {item!r} is not HOST:PORT (e.g. 192.168.1.20:{DEFAULT_PORT})")
            if not 0 < int(port) < 65536:
                raise InputError(f"RPC worker address {item!r}: port {int(port)} is out of range (1-65535)")
            if item not in endpoints:
                endpoints.append(item)
    return tuple(endpoints)


def _rpc_registry() -> int | None:
    return ggml().ggml_backend_reg_by_name(b"RPC")


def require_rpc() -> int:
    """The RPC backend's registry, or an error saying how to reinstall llama-cpp-python with it."""
    registry = _rpc_registry()
    if not registry:
        raise LocalspecError(
            f"this llama.cpp build has no RPC backend: reinstall it with {REINSTALL} (pip's wheel cache ignores CMAKE_ARGS)"
        )
    return registry


def _function(name: str, prototype: type) -> ctypes._CFuncPtr:
    address = ggml().ggml_backend_reg_get_proc_address(require_rpc(), name.encode())
    if not address:
        raise LocalspecError(f"this llama.cpp build's RPC backend has no {name}")
    return prototype(address)


def check_reachable(endpoint: str, timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
    """Refuse a worker that does not accept a connection within `timeout` seconds."""
    host, _, port = endpoint.rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # [::1]: an IPv6 address written as in URLs
        host = host[1:-1]
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except UnicodeError:  # a label too long, or text the IDNA codec cannot encode
        raise LocalspecError(f"RPC worker {endpoint}: {host!r} is not a valid host name") from None
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc)).lower()
        raise LocalspecError(f"RPC worker {endpoint} is unreachable ({reason}): is `localspec worker` running there?") from None


def worker_devices(endpoints: Iterable[str]) -> list[int]:
    """The devices of these workers, registering each with llama.cpp the first time."""
    handles: list[int] = []
    for endpoint in endpoints:
        if endpoint not in _workers:
            _register(endpoint)
        handles.extend(_workers[endpoint])
    return handles


_registering: list[str] = []  # the worker whose handshake is under way (an abort then is its answer's fault)


def _register(endpoint: str) -> None:
    require_rpc()
    check_reachable(endpoint)
    fatal.install(explain=explain_abort)
    _registering[:] = [endpoint]
    try:
        registry = _answered_within(HANDSHAKE_TIMEOUT_SECONDS, _function("ggml_backend_rpc_add_server", _ADD_SERVER),
                                    endpoint.encode())
    finally:
        _registering.clear()
    if registry is _NO_ANSWER:
        raise LocalspecError(
            f"RPC worker {endpoint} took the connection but did not answer llama.cpp's RPC handshake within"
            f" {HANDSHAKE_TIMEOUT_SECONDS:.0f} s: something else listens there, or the worker is busy with another client")
    if not registry:
        raise LocalspecError(f"RPC worker {endpoint} offers no devices")
    library = ggml()
    library.ggml_backend_register(registry)
    _workers[endpoint] = [library.ggml_backend_reg_dev_get(registry, i) for i in range(library.ggml_backend_reg_dev_count(registry))]


_NO_ANSWER = object()


def _answered_within(seconds: float, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` (a llama.cpp call), or _NO_ANSWER where it has not returned within `seconds`: ggml-rpc
    waits without a timeout for a peer that took the connection and never answers (a web server waits for the
    rest of its request line), and nothing can interrupt a C call. It runs in a thread left behind then, which
    ends with the process."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(function(*args)), daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else _NO_ANSWER


def registered_workers() -> dict[str, str]:
    """Device name -> the worker's address, for every device of the workers registered so far."""
    return {device_name(handle): endpoint for endpoint, handles in _workers.items() for handle in handles}


def local_accelerators() -> list[int]:
    """The local GPUs llama.cpp would offload to (discrete ones, else integrated ones); no RPC device."""
    local = [handle for handle in device_handles() if backend_name(handle) != "RPC"]
    by_type = {kind: [h for h in local if device_type(h) == kind] for kind in ("GPU", "integrated GPU")}
    return by_type["GPU"] or by_type["integrated GPU"]


def explain_abort(message: str) -> str | None:
    """One line for an abort inside ggml-rpc, naming the workers that no longer accept connections."""
    if "RPC" not in message and "connect" not in message.lower():
        return None
    reason = message.split(": ", 1)[-1].strip()
    if _registering:
        return (f"RPC worker {_registering[0]} did not answer llama.cpp's RPC handshake as a worker does ({reason}):"
                " is `localspec worker` (or llama.cpp's rpc-server, of the same version) listening there?")
    gone: list[str] = []
    for attempt in range(3):  # a worker that just died may take a moment to stop accepting connections
        gone = []
        for endpoint in _workers:
            try:
                check_reachable(endpoint, timeout=1.0)
            except LocalspecError:
                gone.append(endpoint)
        if gone:
            break
        time.sleep(0.2)
    if gone:
        return f"RPC worker {', '.join(gone)} stopped answering during generation ({reason})"
    return f"an RPC worker failed ({reason}; workers: {', '.join(_workers) or 'none'})"


def lent_devices() -> list[int]:
    """What a worker lends: this machine's GPUs as llama.cpp would use them, else its CPU."""
    cpus = [handle for handle in device_handles() if device_type(handle) == "CPU"]
    return local_accelerators() or cpus[:1]


def serve(host: str, port: int, threads: int, cache_dir: str | None) -> None:
    """Run llama.cpp's RPC server over `lent_devices()`. Blocks for good."""
    start = _function("ggml_backend_rpc_start_server", _START_SERVER)
    chosen = lent_devices()
    array = (ctypes.c_void_p * len(chosen))(*chosen)
    start(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None, threads, len(chosen), array)
