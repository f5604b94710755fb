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


def check_file(path: Path) -> None:
    """Raise InputError unless `path` is a complete GGUF file (remembered once seen whole)."""
    entries = _load()
    key = f"file:{_fingerprint(path) if path.is_file() else path}"
    if entries.get(key):
        return
    read_gguf_header(path)
    entries[key] = True
    _store(entries)


def check_pair_cached(target: Path, draft: Path) -> CompatReport:
    """`check_compatible` on the two files' vocabularies, remembered per file version."""
    check_file(target)
    check_file(draft)
    entries = _load()
    key = f"pair:{_fingerprint(target)}::{_fingerprint(draft)}"
    if key in entries:
        return CompatReport(tuple(Check(*item) for item in entries[key]))
    report = check_compatible(VocabInfo.from_header(read_gguf_header(target)), VocabInfo.from_header(read_gguf_header(draft)))
    entries[key] = [[c.name, c.passed, c.detail] for c in report.checks]
    _store(entries)
    return report
