"""When llama.cpp aborts (GGML_ABORT, e.g. an RPC worker gone): one line, last-chance hooks, exit 1.

ggml calls its abort callback and then `abort()`, which no Python code survives.
The callback installed here writes the error as one line (explained by the
function given to `install`, when it knows the message), runs the hooks
registered with `on_fatal` (chat saves the reply so far; what a hook returns is
added to the line), and ends the process with exit code 1 itself, so there is
neither a backtrace nor a core dump.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Callable

from .devices import ggml

_ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_state: dict = {"callback": None, "explain": None}
_hooks: list[Callable[[], str | None]] = []


def install(explain: Callable[[str], str | None] | None = None) -> None:
    """Route ggml's aborts through `_on_abort`; `explain` (where given) turns a known message into one clear line."""
    if explain is not None:
        _state["explain"] = explain
    if _state["callback"] is None:
        library = ggml()
        library.ggml_set_abort_callback.restype = ctypes.c_void_p
        library.ggml_set_abort_callback.argtypes = [_ABORT_CALLBACK]
        _state["callback"] = _ABORT_CALLBACK(_on_abort)  # kept alive: ggml holds only the pointer
        library.ggml_set_abort_callback(_state["callback"])


def on_fatal(hook: Callable[[], str | None]) -> Callable[[], None]:
    """Run `hook` if llama.cpp aborts (its answer, if any, ends the error line); returns the unregister function."""
    _hooks.append(hook)
    return lambda: _hooks.remove(hook) if hook in _hooks else None


def _on_abort(raw: bytes) -> None:
    # Whatever happens here (an explanation or a hook that fails, Ctrl-C while a worker is asked what went
    # wrong, stdout or stderr closed), the process ends with exit 1: an exception escaping this callback
    # would leave ggml to call abort().
    line = "llama.cpp aborted"
    try:
        message = (raw or b"").decode(errors="replace").strip()
        line = f"llama.cpp aborted: {message.split(': ', 1)[-1]}"
        explain = _state["explain"]
        line = (explain(message) if explain else None) or line
    except BaseException:
        pass
    for hook in list(_hooks):
        try:
            said = hook()
        except BaseException:  # the process is ending: a failing hook must not hide the error
            said = None
        if said:
            line += f"; {said}"
    for write in (lambda: sys.stdout.flush(), lambda: sys.stderr.write(f"error: {line}\n"), lambda: sys.stderr.flush()):
        try:
            write()
        except BaseException:
            pass
    os._exit(1)
