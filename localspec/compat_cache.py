"""Remembered verdicts: a file's header checked once, a pair's compatibility checked once.

Entries are keyed by each file's resolved path, size and modification time, so
a changed or replaced file is checked again. Reading a 250k-token vocabulary
takes about a second; with the cache, starting `run` on a known pair does not.
"""

from __future__ import annotations

import json
from pathlib import Path

from .atomic import write_text_atomic
from .compat import Check, CompatReport, VocabInfo, check_compatible
from .gguf_file import read_gguf_header
from .paths import cache_dir

CACHE_FILE_NAME = "verdicts.json"


def _fingerprint(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def _load() -> dict:
    try:
        return json.loads((cache_dir() / CACHE_FILE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _store(entries: dict) -> None:
    try:
        write_text_atomic(cache_dir() / CACHE_FILE_NAME, json.dumps(entries))
    except OSError:
        pass  # a cache that cannot be written only costs time


def _file_key(path: Path) -> str:
    return f"file:{_fingerprint(path)}"


def check_file(path: Path) -> None:
    """Raise InputError unless `path` is a complete GGUF file (remembered once seen whole)."""
    if not path.is_file():
        read_gguf_header(path)  # raises the one-line reason: missing, or a directory
    entries = _load()
    if entries.get(_file_key(path)):
        return
    read_gguf_header(path)
    entries[_file_key(path)] = True
    _store(entries)


def check_pair_cached(target: Path, draft: Path) -> CompatReport:
    """`check_compatible` on the two files' vocabularies, remembered per file version.

    On a miss each header is read once, which both validates the file and gives
    its vocabulary; a remembered verdict implies both files were whole.
    """
    for path in (target, draft):
        if not path.is_file():
            read_gguf_header(path)  # raises the one-line reason: missing, or a directory
    entries = _load()
    key = f"pair:{_fingerprint(target)}::{_fingerprint(draft)}"
    if key in entries:
        return CompatReport(tuple(Check(*item) for item in entries[key]))
    target_header, draft_header = read_gguf_header(target), read_gguf_header(draft)
    report = check_compatible(VocabInfo.from_header(target_header), VocabInfo.from_header(draft_header))
    entries[key] = [[c.name, c.passed, c.detail] for c in report.checks]
    entries[_file_key(target)] = entries[_file_key(draft)] = True
    _store(entries)
    return report
