"""llama.cpp's shared library: loaded once, on first use, with its log routed through localspec.

Nothing imports `llama_cpp` at module level: commands that never load weights
(`--help`, `profile list`, `models scan`) start without the library. The first
call to `llama()` imports it, initialises the backend and installs the log
callback.

llama.cpp logs every load to stderr; localspec keeps stderr for its own one-line
messages, so the log is kept quiet unless asked for, and the first error lines
are remembered so that a failed load can say why.
"""

from __future__ import annotations

import functools

import ctypes
import os
import sys
from collections import deque
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

_GGML_LOG_LEVEL_ERROR = 4  # ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
_GGML_LOG_LEVEL_CONT = 5

_state: dict = {"library": None, "callback": None, "verbose": False, "last_level": 0, "captures": []}
_recent_errors: deque[str] = deque(maxlen=8)


def llama(verbose: bool | None = None) -> ModuleType:
    """The `llama_cpp` module, imported and initialised on the first call.

    `verbose` (when given) decides whether llama.cpp's own log reaches stderr.
    """
    if verbose is not None:
        _state["verbose"] = verbose
    if _state["library"] is None:
        import llama_cpp

        callback = llama_cpp.llama_log_callback(_on_log)
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _state["callback"] = callback  # ctypes callbacks must outlive their registration
        _state["library"] = llama_cpp
    return _state["library"]


def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    if level == _GGML_LOG_LEVEL_CONT:
        level = _state["last_level"]
    _state["last_level"] = level
    message = text.decode("utf-8", errors="replace")
    if level == _GGML_LOG_LEVEL_ERROR and message.strip():
        _recent_errors.append(message.strip())
    for capture in _state["captures"]:
        capture.append(message)
    if _state["verbose"]:
        sys.stderr.write(message)


@contextmanager
def captured_log() -> Iterator[list[str]]:
    """Collect every piece of llama.cpp's log (all levels) written while the block runs."""
    pieces: list[str] = []
    _state["captures"].append(pieces)
    try:
        yield pieces
    finally:
        _state["captures"].remove(pieces)


def clear_errors() -> None:
    """Forget earlier errors, so that `last_error` speaks of the next call only."""
    _recent_errors.clear()


def last_error() -> str:
    """The first error llama.cpp logged since `clear_errors`, or ""; clears the record.

    llama.cpp logs the cause first (e.g. "unknown model architecture") and
    generic lines ("failed to load model") after it, so the first says most.
    """
    first = _recent_errors[0] if _recent_errors else ""
    _recent_errors.clear()
    return first.split(": ", 1)[-1]


@functools.lru_cache(maxsize=1)
def lone_token_computed_like_a_batch() -> bool:
    """Whether llama.cpp's CPU backend computes a token alike alone and inside a batch.

    Its llamafile matrix kernels (on unless built with -DGGML_LLAMAFILE=OFF) take
    over from two rows up and round differently from the single-row kernels.
    """
    return b"LLAMAFILE = 1" not in llama().llama_print_system_info()


def default_threads() -> int:
    """Threads for decoding: every core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
