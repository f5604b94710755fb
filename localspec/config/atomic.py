"""Write files so that a reader never sees half of one: temp file in the same folder, then rename.

The temp file's contents are flushed to disk before the rename and the folder
after it (where the system allows it), so a power cut right after a write
leaves the whole new file, not the old one, none, or a truncated one. A file
replaced keeps its permissions; a new one gets the usual ones (what the umask
leaves of rw-rw-rw-), or rw------- when it is private.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator

from ..errors import InputError


@contextlib.contextmanager
def atomic_path(destination: str | Path, *, private: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to `destination`; on success rename it into place.

    If the body raises (or the process dies), `destination` is untouched and the
    temporary file is removed (or left with a name no reader mistakes for the real one).
    A destination that exists but is not a regular file (a device, a folder) is refused.
    `private`: readable by its owner only (else it keeps the permissions of the file it replaces).
    """
    given = Path(destination)
    try:
        destination = given.resolve()  # through symlinks: replace the file a link points to, not the link
    except RuntimeError:  # a loop of links (OSError from Python 3.13)
        raise InputError(f"{given}: cannot write it (a loop of symbolic links)") from None
    except OSError as exc:
        raise InputError(f"{given}: cannot write it ({exc.strerror or exc})") from None
    if given.is_symlink() and not destination.exists():  # (writing through it would make folders elsewhere)
        raise InputError(f"{given}: a link to {destination}, which does not exist, so it is not written through")
    if destination.exists() and not destination.is_file():  # (named as given, as a reader of it names it)
        what = "is a directory" if destination.is_dir() else "not a regular file"
        raise InputError(f"{given}: {what}, so it is not replaced")
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".partial", dir=destination.parent)
    except OSError as exc:  # (a folder it may not write in: named, not the temporary file it could not make)
        raise InputError(f"{destination}: cannot write it ({exc.strerror or exc})") from None
    os.close(fd)
    temp_path = Path(temp_name)
    try:
        yield temp_path
        os.chmod(temp_path, _mode_for(destination, private))
        _flush_file(temp_path)
        os.replace(temp_path, destination)
        _flush_folder(destination.parent)
    except OSError as exc:  # (a write that failed names no file: a full disk's ENOSPC)
        if exc.filename not in (None, str(temp_path), temp_path):
            raise
        raise InputError(f"{destination}: cannot write it ({exc.strerror or exc})") from None
    finally:
        temp_path.unlink(missing_ok=True)


def _mode_for(destination: Path, private: bool) -> int:
    """The permissions the new file gets (see the module docstring)."""
    if private:
        return 0o600
    try:
        return stat.S_IMODE(destination.stat().st_mode)
    except OSError:  # a new file
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


def _flush_file(path: Path) -> None:
    """fsync the file at `path`: whatever wrote it (llama.cpp's quantizer too) may have left it in the page cache."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _flush_folder(folder: Path) -> None:
    """fsync `folder`, making a rename in it durable (POSIX; where a folder cannot be opened, nothing)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some file systems refuse to sync a folder: the rename is still atomic
    finally:
        os.close(descriptor)


def write_text_atomic(destination: str | Path, text: str, *, private: bool = False) -> None:
    """Replace `destination` with `text` in one step (`private`: see `atomic_path`)."""
    with atomic_path(destination, private=private) as temp_path:
        temp_path.write_text(text, encoding="utf-8")
