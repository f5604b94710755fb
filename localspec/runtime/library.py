"""llama.cpp's shared library: loaded once, on first use, with its log routed through localspec.

Nothing imports `llama_cpp` at module level: commands that never load weights
(`--help`, `profile list`, `models scan`) start without the library. The first
call to `llama()` imports it, initialises the backend and installs the log
callback.

llama.cpp logs every load to stderr; localspec keeps stderr for its own one-line
messages, so the log is kept quiet unless asked for, and the first error lines
are remembered so that a failed load can say why. llama.cpp logs a load from
the thread that loads, so two models loading at once in two threads each
capture their own log and errors.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
from collections import defaultdict, deque
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

_GGML_LOG_LEVEL_ERROR = 4  # ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
_GGML_LOG_LEVEL_CONT = 5

_state: dict = {"library": None, "callback": None, "verbose": False}
_setting_up = threading.Lock()
_last_level: dict[int, int] = defaultdict(int)  # by thread: the level a continued line goes on with
_captures: list[tuple[int, list[str]]] = []  # (thread, pieces) of each `captured_log` block open
# By thread that called `clear_errors`; 0: llama.cpp's own threads (and any other), which `last_error` falls back to.
_recent_errors: dict[int, deque[str]] = defaultdict(lambda: deque(maxlen=8))
_SHARED = 0
_interrupted: set[int] = set()  # threads whose Ctrl-C came during a llama.cpp call, inside its log callback


def llama(verbose: bool | None = None) -> ModuleType:
    """The `llama_cpp` module, imported and initialised on the first call.

    `verbose` (when given) decides whether llama.cpp's own log reaches stderr.
    """
    if verbose is not None:
        _state["verbose"] = verbose
    if _state["library"] is None:
        with _setting_up:  # (two threads loading models at once must not both set it up)
            if _state["library"] is None:
                import llama_cpp

                callback = llama_cpp.llama_log_callback(_on_log)
                llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
                llama_cpp.llama_backend_init()
                _state["callback"] = callback  # ctypes callbacks must outlive their registration
                _state["library"] = llama_cpp
    return _state["library"]


def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    try:
        _record(level, text)
    except KeyboardInterrupt:  # Ctrl-C landed in this callback, where ctypes would print and drop it:
        _interrupted.add(threading.get_ident())  # raised once the llama.cpp call returns (`raise_pending_interrupt`)


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C during a llama.cpp call and deliver it once the call returns.

    A KeyboardInterrupt raised while llama.cpp calls back into Python (its log: many lines a second
    while a model loads) can be raised as the callback is entered, where no `try` in it catches it;
    ctypes then prints it as ignored and drops it, and the run goes on. So on the main thread (where
    Python handles signals) SIGINT is only noted during the call, and raised again after it with the
    handler that was in place (a KeyboardInterrupt, as a rule). Other threads: as they are."""
    if threading.current_thread() is not threading.main_thread() or _state.get("holding"):
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    _state["holding"] = True
    try:
        yield
    finally:
        _state["holding"] = False
        # (None: a handler set outside Python, which Python cannot set again: its own default then)
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
        if caught:
            signal.raise_signal(signal.SIGINT)


def raise_pending_interrupt() -> None:
    """Raise the KeyboardInterrupt that reached this thread's log callback during the llama.cpp call just made."""
    if _interrupted and threading.get_ident() in _interrupted:
        _interrupted.discard(threading.get_ident())
        raise KeyboardInterrupt


def _record(level: int, text: bytes) -> None:
    thread = threading.get_ident()
    if level == _GGML_LOG_LEVEL_CONT:
        level = _last_level[thread]
    _last_level[thread] = level
    message = text.decode("utf-8", errors="replace")
    if level == _GGML_LOG_LEVEL_ERROR and message.strip():
        _recent_errors[thread if thread in _recent_errors else _SHARED].append(message.strip())
    for pieces in _captures_for(thread):
        pieces.append(message)
    if _state["verbose"]:
        sys.stderr.write(message)


def _captures_for(thread: int) -> list[list[str]]:
    """Where a log line of `thread` goes: its own captures; from a thread of llama.cpp's own (not one Python
    started, whose work it does for whichever call is running), every capture; else none."""
    own = [pieces for capturing, pieces in _captures if capturing == thread]
    if own or not _captures:
        return own
    if any(python_thread.ident == thread for python_thread in threading.enumerate()):
        return []  # a Python thread that captures nothing (decoding for another request, say)
    return [pieces for _, pieces in _captures]


@contextmanager
def captured_log() -> Iterator[list[str]]:
    """Collect every piece of llama.cpp's log (all levels) that this thread's calls write while the block runs."""
    entry: tuple[int, list[str]] = (threading.get_ident(), [])
    _captures.append(entry)
    try:
        yield entry[1]
    finally:
        _captures.remove(entry)
    raise_pending_interrupt()


def clear_errors() -> None:
    """Forget this thread's earlier errors (and those of llama.cpp's own threads), so that `last_error` speaks
    of its next call only."""
    _recent_errors[threading.get_ident()] = deque(maxlen=8)
    _recent_errors.pop(_SHARED, None)


def forget_thread_errors() -> None:
    """Drop this thread's error record (a thread that is about to end: a later thread given its id by the
    system, one of llama.cpp's own say, must fall back to the shared record, not find this one)."""
    _recent_errors.pop(threading.get_ident(), None)


def last_error() -> str:
    """The first error llama.cpp logged in this thread since `clear_errors` (else in a thread of its own), or "";
    clears the record.

    llama.cpp logs the cause first (e.g. "unknown model architecture") and
    generic lines ("failed to load model") after it, so the first says most.
    """
    errors = _recent_errors.pop(threading.get_ident(), None) or _recent_errors.pop(_SHARED, None)
    first = errors[0] if errors else ""
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
