"""Reading the user's text files, and locking a file while it is read, changed and written back.

`read_user_text` is how every file a person may have edited is read (profiles,
config.toml): UTF-8 or a one-line error that names the file and says what is
wrong (a byte order mark, UTF-16, a byte that is not UTF-8, unreadable);
`parse_toml` and `parse_user_json` the same for its TOML or JSON. `read_cache_json` reads the caches localspec
writes for itself the other way: leniently, whatever is wrong only said why.

`locked(path)` holds an advisory lock beside `path` (`.NAME.lock`, via the
cross-platform `filelock` library) so that two processes changing one file
take turns instead of one silently undoing the other's change. Every writer
of a read-modify-write takes it; a plain reader does not need it, since
writes are atomic (`localspec.config.atomic`). `discard_lock` deletes the lock
of a file that was removed.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import math
import sys
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from ..errors import InputError, LocalspecError
from ..textin import RepeatedKey, clean_data

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOCK_TIMEOUT_S = 30.0  # a profile write takes milliseconds: this long means a stuck process


MAX_PIPED_BYTES = 64 << 20  # what is read at most from a pipe (stdin, `--tools <(jq ...)`): far past any context


def read_user_text(path: Path, *, pipes_ok: bool = False) -> str:
    """The text of `path`, which must be a regular file in UTF-8 without a byte order mark; with `pipes_ok`,
    also a pipe or a device (a flag's `<(jq ...)` or /dev/stdin: named for this very read); either up to
    MAX_PIPED_BYTES."""
    return user_text(read_user_bytes(path, pipes_ok=pipes_ok), path)


def user_text(data: bytes, origin: Path | str) -> str:
    """`data`, a file a person wrote, as text: UTF-8 without a byte order mark, else a one-line error naming
    `origin` (and the line of a byte that is not UTF-8)."""
    if data.startswith(codecs.BOM_UTF8):
        raise InputError(f"{origin}: starts with a byte order mark (BOM): save it as UTF-8 without BOM")
    refuse_utf16(data, origin)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"{origin}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}): save it as UTF-8"
        ) from None


def read_user_bytes(path: Path, *, pipes_ok: bool = False) -> bytes:
    """The bytes of `path` as `read_user_text` reads them (a regular file, or with `pipes_ok` a pipe or a
    device; at most MAX_PIPED_BYTES), or a one-line error saying what it is not."""
    try:
        piped = pipes_ok and path.exists() and (path.is_fifo() or path.is_char_device())
        if path.exists() and not path.is_file() and not piped:  # a folder, or a FIFO that would block the read
            raise InputError(f"{path}: not a regular file")
        with path.open("rb") as stream:  # (a file too is read up to the bound: /dev/zero's like, 70 MB of NULs)
            data = read_piped(stream, path)
    except OSError as exc:  # missing, unreadable, a name too long, a folder it may not search
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return data


def read_piped(stream: BinaryIO, origin: Path | str) -> bytes:
    """What a pipe holds, up to MAX_PIPED_BYTES (`yes | ...` would otherwise fill the memory before anything
    is checked); more is InputError naming `origin`."""
    data = stream.read(MAX_PIPED_BYTES + 1)
    if len(data) > MAX_PIPED_BYTES:
        raise InputError(f"{origin}: more than {MAX_PIPED_BYTES >> 20} MiB, more than any context can hold")
    return data


def refuse_utf16(data: bytes, path: Path | str) -> None:
    """InputError when a file's bytes start with a UTF-16 byte order mark: text from files is UTF-8."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise InputError(f"{path}: is UTF-16, not UTF-8: save it as UTF-8")


def is_unix_time(value: Any) -> bool:
    """Whether a value read back from a file or database is a Unix time as `time.time()` writes them:
    a finite number, not before 1970 nor after the year 3000."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value < 3.3e10)


TOO_LONG_A_NUMBER = "a number with more than 4300 digits"


def parse_toml(text: str, path: Path | str) -> dict[str, Any]:
    """TOML text parsed, or a one-line error naming `path` (invalid TOML, or nested too deep to read)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        last_line = text.rstrip("\n").count("\n") + 1  # (TOML breaks lines at \n alone)
        reason = str(exc).replace("(at end of document)", f"(at the end of the file, line {last_line})")
        raise InputError(f"{path}: invalid TOML: {reason}") from None
    except RecursionError:
        raise InputError(f"{path}: invalid TOML: nested too deeply to read") from None
    except ValueError:  # Python's limit on the digits of an integer read from text
        raise InputError(f"{path}: invalid TOML: {TOO_LONG_A_NUMBER}") from None


class _NotAJSONNumber(ValueError):
    """NaN, Infinity or -Infinity: Python's json reads them, JSON has no such numbers."""


def refuse_json_constant(name: str) -> Any:
    """`json.loads`'s parse_constant for JSON as it is written: NaN and Infinity are ValueError."""
    raise _NotAJSONNumber(f"{name} is not a JSON number")


def finite_json_float(text: str) -> float:
    """`json.loads`'s parse_float for JSON a person wrote: a number too large for a float (1e999) is
    ValueError, not infinity (which no JSON number is, and which later steps would take for null)."""
    value = float(text)
    if not math.isfinite(value):
        raise _NotAJSONNumber(f"{text} is too large for a number")
    return value


def object_without_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads`'s object_pairs_hook for JSON from outside (a person's, a client's): a key given twice in one
    object is RepeatedKey (Python would keep the last silently: a schema's second "type" replaced its first)."""
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise RepeatedKey(f"the key {json.dumps(key, ensure_ascii=False)} appears twice in one object: keep one")
        value[key] = item
    return value


def parse_user_json(text: str, origin: Path | str) -> Any:
    """JSON text a person wrote parsed, or a one-line error naming `origin` (with line and column);
    lone surrogates its escapes spell (`"\\ud800"`) become U+FFFD, as in all text from outside. A key
    repeated in one object is an error (which of the two was meant?)."""
    try:
        value = json.loads(text, parse_constant=refuse_json_constant, parse_float=finite_json_float,
                           object_pairs_hook=object_without_repeated_keys)
        return clean_data(value)[0]
    except _NotAJSONNumber as exc:
        raise InputError(f"{origin}: not valid JSON ({exc})") from None
    except RepeatedKey as exc:
        raise InputError(f"{origin}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{origin}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise InputError(f"{origin}: not valid JSON (nested too deeply to read)") from None
    except ValueError:  # Python's limit on the digits of an integer read from text
        raise InputError(f"{origin}: not valid JSON ({TOO_LONG_A_NUMBER})") from None


def read_cache_json(path: Path) -> tuple[Any, str | None]:
    """A cache file's JSON value and None, or None and why it could not be read (None, None: no such file).

    A cache is not a user's file: the caller drops what it cannot use and rebuilds it, saying why
    only when asked (--verbose).
    """
    try:
        value = json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse_json_constant)  # (never written)
        return (value, None) if value is not None else (None, "it holds null")
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        return None, str(exc)
    except RecursionError:
        return None, "nested too deeply to read"


def file_version(path: Path) -> str:
    """One version of a file: its resolved path, size and modification time (what caches key remembered facts by).

    Raises OSError when the file cannot be looked at.
    """
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def lock_path(path: Path) -> Path:
    """The lock file beside `path`: `.NAME.lock` in the same folder."""
    return path.with_name(f".{path.name}.lock")


def discard_lock(path: Path) -> None:
    """Delete the lock file of `path` once `path` itself is gone (a removed profile's), so that lock files do
    not pile up beside what remains; whatever cannot be deleted is left."""
    with contextlib.suppress(OSError):
        lock_path(Path(path)).unlink(missing_ok=True)


@contextlib.contextmanager
def locked(path: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the advisory lock of `path` (its folder is created if needed) for the body's duration.

    Not reentrant: take it once around the whole read-modify-write. A lock that
    another process holds for longer than `timeout_s` is a one-line error naming the lock file.
    """
    import filelock  # imported where a lock is taken: most commands never take one before their output

    path = Path(path)
    lock_file = lock_path(path)
    lock = filelock.FileLock(str(lock_file), timeout=timeout_s)
    try:
        if lock_file.parent.exists() and not lock_file.parent.is_dir():  # (mkdir would say "File exists")
            raise InputError(f"{lock_file.parent}: not a folder (localspec keeps {path.name} in it)")
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except filelock.Timeout:
        raise LocalspecError(
            f"{path}: another localspec process has been changing it for {timeout_s:.0f} s"
            f" (if none is running, delete {lock_file})"
        ) from None
    except OSError as exc:
        raise InputError(f"{lock_file}: cannot lock {path.name} ({exc.strerror or exc})") from None
    try:
        yield
    finally:
        lock.release()
