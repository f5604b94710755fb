"""The standard streams made safe for a command-line tool: stdout is a command's result, stderr its diagnostics.

`guard_standard_streams`, run before any command:
- gives each closed standard descriptor (`<&-`, `>&-`, `2>&-`) /dev/null, so that no
  file the process opens later takes its number (llama.cpp writes its log lines
  to descriptor 2 whatever Python's streams are);
- makes stderr forgiving: a diagnostic that cannot be written (stderr closed, a
  full disk) is dropped. It never turns a command that did its work into a
  failure, and never lands on stdout instead (`print(file=None)` writes there);
- makes stdout strict: closed, or failing as a full disk does, it is one error
  (`StdoutError`) at the first write, instead of a result lost with a success
  status; a reader that went away still raises BrokenPipeError (status 141);
- writes what a stream's encoding cannot hold as an escape (`caf\\xe9` under
  PYTHONIOENCODING=ascii, a file name's undecodable byte) instead of failing
  with a traceback, as Python itself does on stderr.

`finish_stdout` flushes what stdout still holds before the process exits, where
those two failures can still be reported.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from ..errors import LocalspecError

EXIT_READER_GONE = 128 + 13  # 141: as a process ended by SIGPIPE
_reader_gone = False  # a write to stdout found its reader gone (click may then exit 1 on its own: `--help | true`)


class StdoutError(LocalspecError):
    """stdout is closed, or cannot be written (a full disk)."""


def stdout_error(exc: OSError | None = None) -> StdoutError:
    """The one error for a stdout that is closed (`exc` None) or failed with `exc`."""
    if exc is None:
        return StdoutError("stdout is closed: nowhere to write the output")
    return StdoutError(f"cannot write to stdout ({exc.strerror or exc})")


def guard_standard_streams() -> None:
    """Fill closed standard descriptors with /dev/null; wrap sys.stderr and sys.stdout (see the module docstring)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for stream in (sys.stdout, sys.stderr):
        _escape_what_cannot_be_encoded(stream)
    if not isinstance(sys.stderr, _ForgivingStderr):
        sys.stderr = _ForgivingStderr(sys.stderr)
    if not isinstance(sys.stdout, _StrictStdout):
        sys.stdout = _StrictStdout(sys.stdout)


def _escape_what_cannot_be_encoded(stream: Any) -> None:
    """Have `stream` write a character its encoding cannot hold as a backslash escape, where it would raise."""
    if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (OSError, ValueError):  # (a stream closed under it)
            pass


def stdout_is_closed() -> bool:
    """Whether the process started with stdout closed (`>&-`)."""
    return sys.stdout is None or (isinstance(sys.stdout, _StrictStdout) and sys.stdout.closed_at_start)


def reader_went_away() -> bool:
    """Whether a write to stdout found that its reader had gone."""
    return _reader_gone


def silence_stdout() -> None:
    """Point descriptor 1 at /dev/null: what stdout still buffers goes nowhere, without a second failure at exit."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass


def finish_stdout(exit_code: int, report: Any) -> int:
    """Flush stdout before exiting with `exit_code`: the status to exit with (141 where the reader went away,
    1 where stdout failed, after `report(message)`; `exit_code` where it had failed already)."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        return exit_code or EXIT_READER_GONE
    except (StdoutError, OSError) as exc:
        silence_stdout()
        if exit_code == 0:
            report(str(exc if isinstance(exc, StdoutError) else stdout_error(exc)))
            return 1
    return exit_code


class _ForgivingStderr:
    """sys.stderr whose writes never fail: a diagnostic that cannot be written is dropped."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if self._stream is not None:
            try:
                self._stream.write(text)
            except (OSError, ValueError):  # (ValueError: written after it was closed)
                pass
        return len(text)

    def flush(self) -> None:
        if self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                pass

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, fileno, buffer...
        if self._stream is None:
            if name in ("encoding", "errors"):
                return "utf-8" if name == "encoding" else "replace"
            raise AttributeError(name)
        return getattr(self._stream, name)


class _StrictStdout:
    """sys.stdout whose failures are one `StdoutError` (BrokenPipeError passes: the reader went away)."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self.closed_at_start = stream is None

    def write(self, text: str) -> int:
        if text == "":  # (click probes a stream so; nothing to fail on)
            return 0
        return self._do(lambda stream: stream.write(text))

    def flush(self) -> None:
        if self._stream is not None:  # (nothing to flush into a closed stdout)
            self._do(lambda stream: stream.flush())

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    @property
    def buffer(self) -> Any:
        return self._do(lambda stream: stream.buffer)

    def _do(self, action: Any) -> Any:
        if self._stream is None:
            raise stdout_error()
        try:
            return action(self._stream)
        except BrokenPipeError:
            global _reader_gone
            _reader_gone = True
            raise
        except OSError as exc:  # (what it still holds is dropped by `finish_stdout`, not at exit with a traceback)
            raise stdout_error(exc) from None

    def __getattr__(self, name: str) -> Any:  # encoding, errors, fileno...
        if self._stream is None:
            if name in ("encoding", "errors"):
                return "utf-8" if name == "encoding" else "strict"
            raise AttributeError(name)
        return getattr(self._stream, name)
