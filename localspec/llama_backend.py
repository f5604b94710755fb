"""One-time set-up of llama.cpp: backend initialisation and its log output.

llama.cpp logs every load to stderr; localspec keeps stderr for its own one-line
messages, so the log is kept quiet unless asked for, and the last error lines are
remembered so that a failed load can say why.
"""

from __future__ import annotations

import ctypes
import sys
from collections import deque

import llama_cpp

_GGML_LOG_LEVEL_ERROR = 4  # ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
_GGML_LOG_LEVEL_CONT = 5

_state = {"initialised": False, "verbose": False, "last_level": 0}
_recent_errors: deque[str] = deque(maxlen=8)


@llama_cpp.llama_log_callback
def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    if level == _GGML_LOG_LEVEL_CONT:
        level = _state["last_level"]
    _state["last_level"] = level
    message = text.decode("utf-8", errors="replace")
    if level == _GGML_LOG_LEVEL_ERROR and message.strip():
        _recent_errors.append(message.strip())
    if _state["verbose"]:
        sys.stderr.write(message)


def init_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp once per process and route its log through localspec."""
    _state["verbose"] = verbose
    if _state["initialised"]:
        return
    llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    _state["initialised"] = True


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
