"""The suffix memory on disk: token documents from run, chat, serve and files, kept for drafting.

One store is one folder (the caller picks it: one per vocabulary and owner):

    segments/seg-<time>-<pid>-<random>.seg   one per `add`: a small JSON header and the tokens, written once
    gen-<time>-<pid>-<random>/               a compacted base: tokens.npy (SEPARATOR-joined), suffixes.npy
                                             (the reversed suffix array), documents.json (the document table)
    CURRENT.json                             which generation is the base, and which segments it already holds
    usage.json                               lookups, hits, tokens proposed and accepted

Crashes and concurrency: `add` writes a new file under a temporary name and
renames it into place, so two processes adding at once both keep their
document, and a process killed mid-write leaves only a temporary file that
nobody reads (it may hold the user's text: deleted by a compaction once it is
an hour old, by `remove` once it is a minute old, by `clear` at once).
Compaction (under a file lock) merges the segments into a new generation
folder, written whole before it is renamed into place, then replaces
CURRENT.json in one step; only then are the merged segments and the old
generation deleted, and readers skip any segment CURRENT.json lists as merged,
so a crash between the steps loses and doubles nothing. A reader that finds a
file gone (replaced under it) reads again once.

Damage (a file whose contents are not what the store wrote: lengths that
disagree, a pointer to nothing) is reported once in `problems`, one line naming the file, and the
store goes on with what remains and repairs itself at once: a suffix array is
rebuilt from its tokens, a damaged document table drops its base (tokens whose
documents are unknown could not be removed by tag), a damaged segment is
deleted. A missing folder is an empty memory. A file the system will not let
this process read (permissions, an I/O error) is not damage: the read fails with
a LocalspecError and nothing is repaired, so nothing of it is lost.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..config.atomic import atomic_path, write_text_atomic
from ..config.files import is_unix_time, lock_path, locked, read_cache_json
from ..engine.suffix_index import (
    SEPARATOR,
    MultiIndex,
    SuffixIndex,
    join_documents,
    reversed_suffix_array,
    suffix_array_fault,
)
from ..errors import InputError, LocalspecError

SOURCES = ("run", "chat", "serve", "file")
FORMAT_VERSION = 1
POINTER = "CURRENT.json"
USAGE = "usage.json"
SEGMENTS = "segments"
FOLDER_MODE = 0o700  # the memory holds the user's text: every folder and file for this user alone
FILE_MODE = 0o600
SEGMENT_MAGIC = b"LSMSEG1\n"
MAX_HEADER_BYTES = 1 << 16
COMPACT_TOKENS = 131_072  # unmerged tokens that trigger a compaction (the in-memory index over them builds in ~10 ms)
COMPACT_SEGMENTS = 64  # unmerged files that trigger one
_A_FOLDER = "a folder where the file should be"
_PARTIAL_BASE_PREFIX = ".gen-"  # a base being written (a folder, renamed into place when whole)
STALE_TEMPORARY_S = 3600.0  # a temporary file this old belongs to a process that died
REMOVED_TEMPORARY_S = 60.0  # `remove` deletes younger ones too: writing one takes seconds at most
USAGE_KEYS = ("lookups", "hits", "proposed", "accepted")
USAGE_LOCK_TIMEOUT_S = 5.0  # counters are not worth a longer wait
_NAME = re.compile(r"(seg|gen)-\d{20}-\d+-[0-9a-f]{8}")


class _Damaged(Exception):
    """A file of the store that cannot be used; the message says why."""


class _Newer(_Damaged):
    """A segment written by a newer localspec (a format above FORMAT_VERSION): not read, and not deleted."""


def _unreadable(path: Path, exc: OSError) -> LocalspecError:
    """A file of the store the system will not let this process read: the memory cannot be used as it is."""
    return LocalspecError(f"{path}: cannot be read ({exc.strerror or exc}); the memory is left as it is")


class _Cleared(Exception):
    """A segment's temporary file vanished while it was written: a `clear()` emptied the memory meanwhile."""


class _Replaced(Exception):
    """A file vanished while it was read: a compaction replaced it. Read again."""


@dataclass(frozen=True)
class _Segment:
    name: str
    source: str
    tag: str | None
    added: float
    size: int  # tokens
    tokens: np.ndarray | None  # None when only the header was read


@dataclass(frozen=True)
class _Base:
    """The compacted base a pointer names (generation None: no base, only the list of merged segments)."""

    generation: str | None
    tokens: np.ndarray
    suffixes: np.ndarray
    merged: frozenset[str]
    documents: int


_NO_BASE = _Base(None, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), frozenset(), 0)


class MemoryStore:
    """One folder of the suffix memory: add documents, look them up, remove them, keep it within `max_tokens`."""

    def __init__(
        self, root: Path, max_tokens: int = 16_000_000, compact_tokens: int = COMPACT_TOKENS,
        compact_segments: int = COMPACT_SEGMENTS,
    ) -> None:
        self.root = Path(root)
        self.max_tokens = max_tokens
        self.compact_tokens = compact_tokens
        self.compact_segments = compact_segments
        self.problems: list[str] = []
        self.evicted_tokens = 0  # tokens this object's merges dropped, oldest first, to stay within max_tokens
        self._needs_repair = False
        self._newer_segments: set[str] = set()  # segments a newer localspec wrote: kept through compactions
        self._base_cache: _Base | None = None
        self._recent_cache: tuple[tuple[str, ...], SuffixIndex] | None = None

    # Paths ----------------------------------------------------------------------------------------------------------

    @property
    def _pointer(self) -> Path:
        return self.root / POINTER

    @property
    def _segments(self) -> Path:
        return self.root / SEGMENTS

    # Adding ---------------------------------------------------------------------------------------------------------

    def add(self, tokens: Sequence[int], source: str, tag: str | None = None, compact: bool = True,
            added: float | None = None) -> str | None:
        """Keep `tokens` as one document, added at `added` (a Unix time; default now); the new segment's name
        (None when nothing was kept: no tokens, or a `clear()` emptied the memory while the segment was written).

        With `compact`, a compaction follows when enough is unmerged, unless another process is compacting
        (adding many documents at once: pass False, then call `compact()` once).
        """
        if source not in SOURCES:
            raise ValueError(f"memory source {source!r}: expected one of {', '.join(SOURCES)}")
        array = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if array.size and (int(array.min()) < 0 or int(array.max()) >= 1 << 31):
            raise ValueError("memory tokens: ids must be non-negative int32")
        if array.size == 0:
            return None
        if array.size > self.max_tokens:
            raise InputError(f"{array.size:,} tokens: more than the memory keeps ({self.max_tokens:,})")
        data = array.astype("<i4").tobytes()
        header = {
            "format": FORMAT_VERSION, "source": source, "tag": tag, "added": time.time() if added is None else added,
            "tokens": int(array.size), "crc32": zlib.crc32(data),
        }
        name = _new_name("seg")
        self._make_root()
        self._replace_what_is_no_segments_folder()
        _make_private_folder(self._segments)
        encoded = json.dumps(header).encode("utf-8")
        try:
            with atomic_path(self._segments / f"{name}.seg", private=True) as temporary:
                _save_bytes(temporary, SEGMENT_MAGIC + len(encoded).to_bytes(4, "little") + encoded + data)
                if not temporary.exists():
                    raise _Cleared()
        except (FileNotFoundError, _Cleared):  # the temporary file was deleted under it: cleared, with the rest
            return None
        if compact and self.needs_compaction():
            self.compact(block=False, when_needed=True)
        return name

    def needs_compaction(self) -> bool:
        """Whether the unmerged segments are many or large enough to merge into the base."""
        try:
            merged = self._read_pointer()[1]
        except _Damaged:
            return True
        sizes = []
        for name in self._unmerged_names(merged):
            with contextlib.suppress(OSError):
                sizes.append((self._segments / f"{name}.seg").stat().st_size)
        return len(sizes) >= self.compact_segments or sum(sizes) // 4 >= self.compact_tokens

    # Reading --------------------------------------------------------------------------------------------------------

    def index(self) -> MultiIndex:
        """The base (memory-mapped) and an in-memory index over the unmerged segments, oldest first."""
        try:
            base = self._base(final=False)
            recent = self._recent(base.merged, final=False)
        except _Replaced:  # a compaction replaced what was being read: once more, from its new pointer
            base = self._base(final=True)
            recent = self._recent(base.merged, final=True)
        if self._needs_repair:
            self._repair()
        parts = [SuffixIndex(base.tokens, base.suffixes), recent]
        return MultiIndex(parts, names=[str(self.root / (base.generation or "base")), str(self._segments)])

    def version(self) -> tuple[Any, ...]:
        """What changes whenever documents are added or removed, by any process: the base's pointer file
        (replaced by every merge, removal or clear) and the segments' folder (a file added or deleted)."""
        stamps = []
        for path in (self._pointer, self._segments):
            try:
                status = path.stat()
                stamps.append((status.st_ino, status.st_mtime_ns, status.st_size))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    def documents(self) -> list[dict[str, Any]]:
        """Every document kept, oldest first: source, tag, tokens (how many), added (a Unix time)."""
        listed = self._listed()
        if self._needs_repair:  # damage found: repaired now, and listed as the repair left it
            self._repair()
            listed = self._listed()
        return listed

    def _listed(self) -> list[dict[str, Any]]:
        try:
            base, table = self._base_with_table()
            segments = self._read_segments(self._unmerged_names(base.merged), final=False, with_tokens=False)
        except _Replaced:  # a compaction merged segments while they were listed: once more
            base, table = self._base_with_table()
            segments = self._read_segments(self._unmerged_names(base.merged), final=True, with_tokens=False)
        listed = [_listing(entry["source"], entry["tag"], entry["length"], entry["added"]) for entry in table]
        listed += [_listing(segment.source, segment.tag, segment.size, segment.added) for segment in segments]
        return listed

    def stats(self) -> dict[str, Any]:
        """Tokens and documents kept (in all, and by source), bytes on disk, and the usage counters."""
        documents = self.documents()
        usage, damaged = self._usage()
        if damaged:  # reported, and written again from 0 (the counts read) so that it is reported once
            self.record_use(0, 0, 0, 0)
        by_source: dict[str, dict[str, int]] = {}
        for document in documents:
            entry = by_source.setdefault(document["source"], {"documents": 0, "tokens": 0})
            entry["documents"] += 1
            entry["tokens"] += document["tokens"]
        return {
            "tokens": sum(document["tokens"] for document in documents),
            "documents": len(documents),
            "by_source": by_source,
            "bytes": _bytes_under(self.root),
            **usage,
        }

    # Usage counters -------------------------------------------------------------------------------------------------

    def record_use(self, lookups: int, hits: int, proposed: int, accepted: int) -> None:
        """Add to the usage counters, under their lock (held too long: skipped, with a line in `problems`)."""
        path = self.root / USAGE
        try:
            self._make_lock_file(path)
            with locked(path, timeout_s=USAGE_LOCK_TIMEOUT_S):
                counts = self._usage()[0]
                for key, value in zip(USAGE_KEYS, (lookups, hits, proposed, accepted)):
                    counts[key] += int(value)
                if path.is_dir() and not path.is_symlink():  # (a folder made there: damage, reported by `_usage`)
                    _delete(path)
                write_text_atomic(path, json.dumps(counts), private=True)
        except (LocalspecError, OSError) as exc:  # (a store that cannot be written: a read-only folder)
            self._report(f"{path}: usage not counted ({getattr(exc, 'strerror', None) or exc})", repair=False)

    def _usage(self) -> tuple[dict[str, int], bool]:
        """The usage counters, and whether they were damaged (not JSON, not counts): then reported, and they start
        again from 0."""
        path = self.root / USAGE
        value, problem = read_cache_json(path)
        if problem is not None and path.is_dir():
            problem = _A_FOLDER
        if problem is None and value is not None and not isinstance(value, dict):
            problem = "not an object of counts"
        value = value if isinstance(value, dict) else {}
        wrong = [key for key in USAGE_KEYS if key in value and not _is_count(value[key])]
        if problem is None and wrong:
            problem = f"{wrong[0]} is not a count"
        if problem is not None:
            self._report(f"{path}: damaged ({problem}); the usage counts start again from 0", repair=False)
        return {key: value[key] if _is_count(value.get(key)) else 0 for key in USAGE_KEYS}, problem is not None

    # Compaction, removal --------------------------------------------------------------------------------------------

    def compact(self, block: bool = True, when_needed: bool = False) -> bool:
        """Merge the unmerged segments into a new base, oldest documents evicted beyond `max_tokens`.

        The whole base is rebuilt (about 0.4 s for 3M tokens), so `when_needed` merges only once
        `needs_compaction()` (or damage was found). False when nothing was done: nothing to merge, not
        needed, or, without `block`, another process holds the lock (it is compacting).
        """
        with self._lock(block) as held:
            if not held or (when_needed and not self._needs_repair and not self.needs_compaction()):
                return False
            return self._compact_locked(exclude_tags=frozenset())[0]

    def remove(self, tag: str) -> int:
        """Remove every document with `tag`; tokens removed (see `remove_tags`)."""
        return self.remove_tags([tag])

    def remove_tags(self, tags: Iterable[str], added_before: float = math.inf) -> int:
        """Remove every document whose tag is one of `tags` (and added before `added_before`: what a file
        added before its new copy, which is added first, so that a process killed between the two keeps one
        of them); tokens removed.

        Their segments are deleted; if the base holds any of them it is rebuilt without them, once for all the tags.
        """
        wanted = frozenset(tags)
        if not wanted or not self.root.is_dir():
            return 0
        with self._lock(block=True):
            self._sweep_temporaries(older_than_s=REMOVED_TEMPORARY_S)  # a killed writer's copy may hold the tags
            base, table = self._base_with_table()
            if self._needs_repair or any(entry["tag"] in wanted and entry["added"] < added_before for entry in table):
                return self._compact_locked(exclude_tags=wanted, added_before=added_before)[1]
            removed = 0
            for segment in self._read_segments(self._unmerged_names(base.merged), final=True, with_tokens=False):
                if segment.tag in wanted and segment.added < added_before:
                    with contextlib.suppress(FileNotFoundError):
                        (self._segments / f"{segment.name}.seg").unlink()
                        removed += segment.size
            self._recent_cache = None
            return removed

    def clear(self) -> None:
        """Empty the memory: every file in its folder but the lock files, temporary ones included (a document
        being added at this moment may survive)."""
        if not self.root.is_dir():
            return
        self._make_lock_file(self.root / USAGE)
        with self._lock(block=True), locked(self.root / USAGE):  # the counters' lock too: no write of them is cut
            keep = {lock_path(self._pointer).name, lock_path(self.root / USAGE).name}
            for path in self.root.iterdir():
                if path == self._segments and path.is_dir():  # emptied, kept: adds at this moment write into it
                    for inner in path.iterdir():
                        _delete(inner)
                elif path.name not in keep:
                    _delete(path)
            self._base_cache, self._recent_cache = None, None

    def _compact_locked(self, exclude_tags: frozenset[str], added_before: float = math.inf) -> tuple[bool, int]:
        """(whether a new base was written, tokens removed: the documents tagged one of `exclude_tags`, added
        before `added_before`); the caller holds the lock."""
        base, table = self._base_with_table(verify=True)
        names = self._unmerged_names(base.merged)
        segments: list[_Segment] = []
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                segment = self._read_segment_reporting(name, with_tokens=True)
                if segment is not None:
                    segments.append(segment)
        entries = [(entry, _Slice(base.tokens, entry["start"], entry["length"])) for entry in table]
        entries += [(_table_entry(segment), _Slice(segment.tokens, 0, segment.size)) for segment in segments]
        excluded = [entry["tag"] in exclude_tags and entry["added"] < added_before for entry, _ in entries]
        removed = sum(piece.length for (entry, piece), out in zip(entries, excluded) if out)
        entries = [pair for pair, out in zip(entries, excluded) if not out]
        current = _without_replaced_files(entries)
        kept = _newest_within(current, self.max_tokens)
        if not names and not removed and len(kept) == len(entries) and not self._needs_repair:
            return False, 0
        self.evicted_tokens += sum(piece.length for _, piece in current[: len(current) - len(kept)])
        merged = sorted(set(names) - self._newer_segments
                        | {name for name in base.merged if (self._segments / f"{name}.seg").exists()})
        generation = self._write_generation(kept, merged) if kept else None
        self._write_pointer(generation, kept, merged)
        self._needs_repair = False
        self._base_cache, self._recent_cache = None, None
        for name in merged:
            with contextlib.suppress(OSError):
                (self._segments / f"{name}.seg").unlink(missing_ok=True)
        self._delete_generations(keep=generation)
        self._sweep_temporaries()
        return True, removed

    def _repair(self) -> None:
        """Rewrite the base from what remains after damage was found (skipped if another process holds the lock)."""
        try:
            self.compact(block=False, when_needed=True)
        except (OSError, LocalspecError) as exc:
            self._report(f"{self.root}: could not be repaired ({exc})", repair=False)

    # The base -------------------------------------------------------------------------------------------------------

    def _base(self, final: bool) -> _Base:
        """The base CURRENT.json names (cached while it names the same generation); damage reported, not raised."""
        try:
            generation, merged, expected = self._read_pointer()
        except _Damaged as exc:
            self._report(f"{self._pointer}: damaged ({exc}); the newest base found is used")
            return self._newest_generation()
        if generation is None:
            return _Base(None, _NO_BASE.tokens, _NO_BASE.suffixes, merged, 0)
        if self._base_cache is not None and self._base_cache.generation == generation:
            return self._base_cache
        try:
            base = self._open_generation(generation, merged, expected)
        except FileNotFoundError:
            if not final:
                raise _Replaced() from None
            folder = self.root / generation
            self._report(f"{folder}: missing, though {POINTER} names it; the memory goes on without it")
            return _Base(None, _NO_BASE.tokens, _NO_BASE.suffixes, merged, 0)
        self._base_cache = base
        return base

    def _read_pointer(self) -> tuple[str | None, frozenset[str], tuple[int, int]]:
        """(generation, merged segment names, (tokens, documents) in the base) from CURRENT.json; none: empty."""
        try:
            text = self._pointer.read_bytes()
        except FileNotFoundError:
            if self._generation_folders():  # (deleted by hand, or lost: a base is there to go on with)
                raise _Damaged("missing, though a base folder is there") from None
            return None, frozenset(), (0, 0)
        except IsADirectoryError:
            raise _Damaged(_A_FOLDER) from None
        except OSError as exc:
            raise _unreadable(self._pointer, exc) from None
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:  # ValueError: not JSON, or not UTF-8
            raise _Damaged(str(exc)) from None
        if value is None:
            raise _Damaged("it holds null")
        try:
            generation = value["generation"]
            if generation is not None and not (isinstance(generation, str) and _NAME.fullmatch(generation)):
                raise _Damaged("not a generation name")
            merged = frozenset(_names(value["merged"]))
            counts = (int(value["tokens"]), int(value["documents"]))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise _Damaged(f"not a memory pointer: {exc}") from None
        if value.get("format") != FORMAT_VERSION:
            raise _Damaged(f"format {value.get('format')!r}, not {FORMAT_VERSION}")
        return generation, merged, counts

    def _open_generation(self, generation: str, merged: frozenset[str], expected: tuple[int, int]) -> _Base:
        """The generation's arrays memory-mapped and checked (shapes, the final separator); FileNotFoundError if gone.

        A damaged token file drops the base (reported); a damaged or missing suffix array is rebuilt from the tokens
        (reported).
        """
        folder = self.root / generation
        if not folder.is_dir():
            raise FileNotFoundError(folder)
        size, documents = expected
        try:
            tokens = _load_array(folder / "tokens.npy", np.int32, size)
            if size and int(tokens[-1]) != SEPARATOR:
                raise _Damaged("does not end with a separator")
        except _Damaged as exc:
            self._report(f"{folder / 'tokens.npy'}: damaged ({exc}); the memory goes on without that base")
            return _Base(None, _NO_BASE.tokens, _NO_BASE.suffixes, merged, 0)
        try:
            suffixes = _load_array(folder / "suffixes.npy", np.int32, size)
            fault = suffix_array_fault(tokens, suffixes)
            if fault is not None:
                raise _Damaged(fault)
        except FileNotFoundError:
            if not (folder / "tokens.npy").exists() or not self._still_named(generation):
                raise  # (the whole generation is going: another process merged it away)
            self._report(f"{folder / 'suffixes.npy'}: missing; rebuilt from the tokens")
            suffixes = reversed_suffix_array(np.asarray(tokens))
        except _Damaged as exc:
            self._report(f"{folder / 'suffixes.npy'}: damaged ({exc}); rebuilt from the tokens")
            suffixes = reversed_suffix_array(np.asarray(tokens))
        return _Base(generation, tokens, suffixes, merged, documents)

    def _still_named(self, generation: str) -> bool:
        """Whether CURRENT.json still names `generation` (or names none that can be read: the newest base is used)."""
        try:
            return self._read_pointer()[0] == generation
        except _Damaged:
            return True

    def _newest_generation(self) -> _Base:
        """With no usable pointer: the newest generation folder whose table and arrays read back and agree,
        else no base (a damaged folder is passed over for the next older one)."""
        for folder in sorted(self._generation_folders(), reverse=True):
            try:
                table = _read_table(folder / "documents.json")
                counts = (table["tokens"], len(table["documents"]))
                base = self._open_generation(folder.name, frozenset(table["merged"]), counts)
                if base.generation is None:  # its tokens are damaged (reported)
                    continue
                _check_table(table, base, verify=False)
                return base
            except (_Damaged, OSError):
                continue
        return _NO_BASE

    def _base_with_table(self, verify: bool = False) -> tuple[_Base, list[dict[str, Any]]]:
        """The base and its document table (checked against its arrays; with `verify`, the tokens' checksum too).

        A table that does not fit is reported and the base dropped with it.
        """
        try:
            base = self._base(final=False)
        except _Replaced:
            base = self._base(final=True)
        if base.generation is None:
            return base, []
        path = self.root / base.generation / "documents.json"
        try:
            try:
                table = _read_table(path)
            except FileNotFoundError:  # replaced by a compaction: once more, from the new pointer
                base = self._base(final=True)
                if base.generation is None:
                    return base, []
                path = self.root / base.generation / "documents.json"
                table = _read_table(path)
        except (_Damaged, FileNotFoundError) as exc:  # (the base, named by its folder)
            reason = f"{path.name} is missing" if isinstance(exc, FileNotFoundError) else f"{path.name}: {exc}"
            self._report(f"{path.parent}: damaged ({reason}); the memory goes on without that base (its tokens are"
                         " dropped: with the table gone, `history remove` and `memory remove` could not find them)")
            return _Base(None, _NO_BASE.tokens, _NO_BASE.suffixes, base.merged, 0), []
        try:
            _check_table(table, base, verify)
        except _Damaged as exc:  # (the table and the tokens disagree: which of them is wrong cannot be told)
            self._report(f"{path.parent}: damaged ({path.name} and tokens.npy disagree: {exc}); the memory goes on"
                         f" without that base (its {len(table['documents'])} documents are dropped: their tokens"
                         " cannot be trusted)")
            return _Base(None, _NO_BASE.tokens, _NO_BASE.suffixes, base.merged, 0), []
        return base, table["documents"]

    def _write_generation(self, kept: list[tuple[dict[str, Any], _Slice]], merged: list[str]) -> str:
        """A new generation folder holding the kept documents, written whole and then renamed into place; its name."""
        name = _new_name("gen")
        tokens = join_documents([piece.read() for _, piece in kept])
        table, start = [], 0
        for entry, piece in kept:
            table.append(entry | {"start": start, "length": piece.length})
            start += piece.length + 1
        contents = {
            "format": FORMAT_VERSION, "tokens": len(tokens), "checksum": zlib.crc32(tokens.astype("<i4").tobytes()),
            "documents": table, "merged": merged,
        }
        temporary = Path(tempfile.mkdtemp(prefix=_PARTIAL_BASE_PREFIX, suffix=".partial", dir=self.root))
        try:
            _save_array(temporary / "tokens.npy", tokens)
            _save_array(temporary / "suffixes.npy", reversed_suffix_array(tokens))
            _save_bytes(temporary / "documents.json", json.dumps(contents).encode("utf-8"))
            os.rename(temporary, self.root / name)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        return name

    def _write_pointer(
        self, generation: str | None, kept: list[tuple[dict[str, Any], _Slice]], merged: list[str]
    ) -> None:
        pointer = {
            "format": FORMAT_VERSION, "generation": generation, "tokens": sum(piece.length + 1 for _, piece in kept),
            "documents": len(kept), "merged": merged,
        }
        if self._pointer.is_dir() and not self._pointer.is_symlink():  # (a folder made there: damage, see `_base`)
            _delete(self._pointer)
        write_text_atomic(self._pointer, json.dumps(pointer), private=True)

    def _generation_folders(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [path for path in self.root.iterdir() if path.name.startswith("gen-") and _NAME.fullmatch(path.name)]

    def _delete_generations(self, keep: str | None) -> None:
        """Every generation folder but `keep` (one that refuses, still mapped elsewhere, goes next time)."""
        for folder in self._generation_folders():
            if folder.name != keep:
                shutil.rmtree(folder, ignore_errors=True)

    # Segments -------------------------------------------------------------------------------------------------------

    def _segment_names(self) -> list[str]:
        """Names of the complete segment files, oldest first (temporary files start with a dot and are skipped)."""
        try:
            files = os.listdir(self._segments)
        except OSError:
            self._replace_what_is_no_segments_folder()
            return []
        return sorted(name[:-4] for name in files if name.endswith(".seg") and _NAME.fullmatch(name[:-4]))

    def _recent(self, merged: frozenset[str], final: bool) -> SuffixIndex:
        """An in-memory index over the segments not merged into the base (cached while they stay the same)."""
        names = tuple(self._unmerged_names(merged))
        if self._recent_cache is not None and self._recent_cache[0] == names:
            return self._recent_cache[1]
        documents = [segment.tokens for segment in self._read_segments(names, final) if segment.tokens is not None]
        index = SuffixIndex.of_documents(documents)
        self._recent_cache = (names, index)
        return index

    def _unmerged_names(self, merged: frozenset[str]) -> list[str]:
        return [name for name in self._segment_names() if name not in merged]

    def _read_segments(self, names: Sequence[str], final: bool, with_tokens: bool = True) -> list[_Segment]:
        """The segments that read back (damaged ones reported).

        One that vanished was merged by a compaction: _Replaced (read again), or skipped when `final`.
        """
        segments = []
        for name in names:
            try:
                segment = self._read_segment_reporting(name, with_tokens)
            except FileNotFoundError:
                if not final:
                    raise _Replaced() from None
                continue
            if segment is not None:
                segments.append(segment)
        return segments

    def _read_segment_reporting(self, name: str, with_tokens: bool) -> _Segment | None:
        """The segment, or None with a line in `problems` if it is damaged (the repair that follows deletes it)."""
        path = self._segments / f"{name}.seg"
        try:
            return _read_segment(path, with_tokens)
        except _Newer as exc:
            self._newer_segments.add(name)
            self._report(f"{path}: {exc}; left as it is", repair=False)
            return None
        except _Damaged as exc:
            self._report(f"{path}: damaged ({exc}); left out")
            return None

    # Housekeeping ---------------------------------------------------------------------------------------------------

    def _report(self, line: str, repair: bool = True) -> None:
        line = " ".join(line.split())  # one line, whatever an exception's message held
        if line not in self.problems:
            self.problems.append(line)
        self._needs_repair = self._needs_repair or repair

    def _make_root(self) -> None:
        """The store's folder, created if needed (with the folders above it), private (FOLDER_MODE) either way,
        as are the folders holding it (where the owners' folders are named: `serve-<hash of its API key>`)."""
        try:
            self.root.parent.parent.parent.mkdir(parents=True, exist_ok=True)
            _make_private_folder(self.root.parent.parent)
            _make_private_folder(self.root.parent)
            _make_private_folder(self.root)
        except OSError as exc:
            raise InputError(f"{self.root}: cannot make the memory's folder ({exc.strerror or exc})") from None

    def _make_lock_file(self, path: Path) -> None:
        """The store's folder and the lock file of `path` in it, private (the lock would otherwise be created 0644)."""
        self._make_root()
        with contextlib.suppress(FileExistsError):
            os.close(os.open(lock_path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))

    @contextlib.contextmanager
    def _lock(self, block: bool) -> Iterator[bool]:
        """Hold the store's lock (yields True); without `block`, yield False at once if another process holds it."""
        self._make_lock_file(self._pointer)
        if block:
            with locked(self._pointer):
                yield True
            return
        import filelock  # as in `config.files.locked`

        lock = filelock.FileLock(str(lock_path(self._pointer)), timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def _replace_what_is_no_segments_folder(self) -> None:
        """Delete a file (or anything but a folder) where the segments' folder goes, reported: damage, which no
        document could otherwise be added past (the folder is made again by the next one added)."""
        path = self._segments
        if (path.is_symlink() or path.exists()) and not path.is_dir():
            try:
                _delete(path)
            except OSError as exc:  # (a read-only store: said, and left as it is)
                self._report(f"{path}: damaged (not a folder), and cannot be replaced ({exc.strerror or exc})",
                             repair=False)
                return
            self._report(f"{path}: damaged (not a folder); replaced by an empty one", repair=False)

    def _sweep_temporaries(self, older_than_s: float = STALE_TEMPORARY_S) -> None:
        """Delete temporary files and folders that processes killed mid-write left behind: a base being written
        (only ever written under the lock, which the caller holds) at once, whatever its age; others (a
        segment, written without the lock) by default an hour old or more."""
        now = time.time()
        for folder in (self.root, self._segments):
            with contextlib.suppress(OSError):
                for path in folder.iterdir():
                    if not (path.name.startswith(".") and path.name.endswith(".partial")):
                        continue
                    abandoned = folder == self.root and path.name.startswith(_PARTIAL_BASE_PREFIX)
                    if abandoned or path.stat().st_mtime < now - older_than_s:
                        _delete(path)


def _delete(path: Path) -> None:
    """Delete a file or a folder with everything in it (gone already: nothing to do)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class _Slice:
    """A document's tokens inside an array (a memory map or a segment's), read only when a base is written."""

    array: np.ndarray | None
    start: int
    length: int

    def read(self) -> np.ndarray:
        assert self.array is not None
        return np.asarray(self.array[self.start : self.start + self.length], dtype=np.int32)


def _without_replaced_files(
    entries: list[tuple[dict[str, Any], _Slice]]
) -> list[tuple[dict[str, Any], _Slice]]:
    """The entries but a file's copies older than its newest: `memory add` of a file again adds the new copy
    before it removes the old, and an add interrupted between the two left both, which the merge then kept
    in place of the oldest other text (a file's double filled the memory, and every run's text was evicted)."""
    newest: dict[str, float] = {}
    for entry, _ in entries:
        if entry["source"] == "file" and entry["tag"] is not None:
            newest[entry["tag"]] = max(newest.get(entry["tag"], -math.inf), entry["added"])
    return [(entry, piece) for entry, piece in entries
            if not (entry["source"] == "file" and entry["tag"] is not None and entry["added"] < newest[entry["tag"]])]


def _newest_within(
    entries: list[tuple[dict[str, Any], _Slice]], max_tokens: int
) -> list[tuple[dict[str, Any], _Slice]]:
    """The newest entries (the list is oldest first) whose tokens add up to at most `max_tokens`."""
    total, first_kept = 0, len(entries)
    for position in range(len(entries) - 1, -1, -1):
        total += entries[position][1].length
        if total > max_tokens:
            break
        first_kept = position
    return entries[first_kept:]


def _listing(source: str, tag: str | None, tokens: int, added: float) -> dict[str, Any]:
    return {"source": source, "tag": tag, "tokens": tokens, "added": added}


def _table_entry(segment: _Segment) -> dict[str, Any]:
    return {"segment": segment.name, "source": segment.source, "tag": segment.tag, "added": segment.added}


def _read_segment(path: Path, with_tokens: bool) -> _Segment:
    """A segment file read and checked (magic, header, length, checksum); FileNotFoundError if it is gone."""
    try:
        with open(path, "rb") as handle:
            lead = handle.read(len(SEGMENT_MAGIC) + 4)
            if len(lead) < len(SEGMENT_MAGIC) + 4 or not lead.startswith(SEGMENT_MAGIC):
                raise _Damaged("not a memory segment")
            header_size = int.from_bytes(lead[len(SEGMENT_MAGIC) :], "little")
            if header_size > MAX_HEADER_BYTES:
                raise _Damaged("header too large")
            header = _segment_header(handle.read(header_size))
            data = handle.read() if with_tokens else None
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise _Damaged("a folder, not a segment") from None
    except OSError as exc:
        raise _unreadable(path, exc) from None
    size = header["tokens"]
    tokens = None
    if data is not None:
        if len(data) != 4 * size:
            raise _Damaged(f"holds {len(data) / 4:g} tokens, its header says {size}")
        if zlib.crc32(data) != header["crc32"]:
            raise _Damaged("checksum mismatch")
        tokens = np.frombuffer(data, dtype="<i4").astype(np.int32)
        if size and int(tokens.min()) < 0:
            raise _Damaged("negative token ids")
    return _Segment(path.name[:-4], header["source"], header["tag"], header["added"], size, tokens)


def _segment_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode("utf-8"))
        newer = isinstance(header, dict) and type(header.get("format")) is int and header["format"] > FORMAT_VERSION
        valid = not newer and (
            isinstance(header, dict) and header.get("source") in SOURCES
            and (header.get("tag") is None or isinstance(header["tag"], str))
            and is_unix_time(header.get("added")) and isinstance(header.get("tokens"), int)
            and header["tokens"] >= 0 and isinstance(header.get("crc32"), int)
        )
    except (UnicodeDecodeError, ValueError, RecursionError):
        newer, valid = False, False
    if newer:
        raise _Newer(f"format {header['format']}, written by a newer localspec (this one reads {FORMAT_VERSION})")
    if not valid:
        raise _Damaged("header unreadable")
    if header.get("format") != FORMAT_VERSION:
        raise _Damaged(f"format {json.dumps(header.get('format'))}, where this localspec reads {FORMAT_VERSION}")
    return header


def _read_table(path: Path) -> dict[str, Any]:
    """A generation's documents.json, its shape checked; FileNotFoundError if it is gone."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise _Damaged(_A_FOLDER) from None
    except OSError as exc:
        raise _unreadable(path, exc) from None
    try:
        table = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _Damaged(f"unreadable: {exc}") from None
    try:
        if table["format"] != FORMAT_VERSION:
            raise _Damaged(f"format {table['format']!r}, not {FORMAT_VERSION}")
        int(table["tokens"]), int(table["checksum"]), _names(table["merged"])
        for entry in table["documents"]:
            if not (
                entry["source"] in SOURCES and (entry["tag"] is None or isinstance(entry["tag"], str))
                and isinstance(entry["start"], int) and isinstance(entry["length"], int)
                and is_unix_time(entry["added"])
            ):
                raise _Damaged("a document entry is malformed")
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise _Damaged(f"not a document table: {exc}") from None
    return table


def _check_table(table: dict[str, Any], base: _Base, verify: bool) -> None:
    """The table must describe the base's tokens: consecutive documents, each followed by a separator."""
    size = len(base.tokens)
    if table["tokens"] != size or len(table["documents"]) != base.documents:
        listed = f"{table['tokens']} tokens in {len(table['documents'])} documents"
        raise _Damaged(f"lists {listed}; the base holds {size} in {base.documents}")
    start = 0
    for entry in table["documents"]:
        if entry["start"] != start or entry["length"] < 0:
            raise _Damaged(f"document at {entry['start']} does not follow the one before (expected {start})")
        start += entry["length"] + 1
    if start != size:
        raise _Damaged(f"its documents end at {start}, the tokens at {size}")
    ends = np.array([entry["start"] + entry["length"] for entry in table["documents"]], dtype=np.int64)
    if ends.size and not bool((base.tokens[ends] == SEPARATOR).all()):
        raise _Damaged("a document does not end where the tokens have a separator")
    if verify and zlib.crc32(np.asarray(base.tokens).astype("<i4").tobytes()) != table["checksum"]:
        raise _Damaged("the tokens' checksum does not match")


_NPY_MAGIC = b"\x93NUMPY"  # how a .npy file starts


def _load_array(path: Path, dtype: type, size: int) -> np.ndarray:
    """A one-dimensional array of `size` entries, memory-mapped read-only (FileNotFoundError if gone)."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False) if size else np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise _Damaged(_A_FOLDER) from None
    except OSError as exc:  # the system's refusal (permissions, I/O, no memory to map it), not the file's contents
        raise _unreadable(path, exc) from None
    except (ValueError, EOFError) as exc:
        raise _Damaged(_array_problem(path, exc)) from None
    if array.ndim != 1 or array.dtype != dtype or len(array) != size:
        raise _Damaged(f"holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} ({size},)")
    return array


def _array_problem(path: Path, exc: Exception) -> str:
    """Why numpy could not read an array file, in plain words: numpy takes a file that does not start as a
    .npy file does for a pickle, and says so with advice to load it unsafely."""
    try:
        with path.open("rb") as handle:
            starts_as_an_array = handle.read(len(_NPY_MAGIC)) == _NPY_MAGIC
    except OSError:
        starts_as_an_array = True
    return f"unreadable: {exc}" if starts_as_an_array else "not an array file (it does not start as one)"


def _save_array(path: Path, array: np.ndarray) -> None:
    with _open_private(path) as handle:
        np.save(handle, array, allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())


def _save_bytes(path: Path, data: bytes) -> None:
    with _open_private(path) as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _open_private(path: Path) -> Any:
    """`path` opened for writing from empty, its mode FILE_MODE whether it is new or not."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(descriptor, FILE_MODE)  # an existing file keeps its mode through O_CREAT; a umask may narrow it
        return os.fdopen(descriptor, "wb")
    except BaseException:
        os.close(descriptor)
        raise


def _make_private_folder(folder: Path) -> None:
    """`folder` created if needed (its parent must exist) with mode FOLDER_MODE; one there already loses what it
    grants others (group, other) and keeps what it grants its owner: a folder its owner made read-only stays so,
    and the memory is then off (see `SessionMemory`)."""
    try:
        folder.mkdir(mode=FOLDER_MODE)
        created = True
    except FileExistsError:
        if not folder.is_dir():
            raise
        created = False
    mode = stat.S_IMODE(folder.stat().st_mode)
    wanted = FOLDER_MODE if created else mode & ~0o077  # (a new one: as wanted whatever the umask took away)
    if mode != wanted:
        os.chmod(folder, wanted)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _names(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(name, str) and _NAME.fullmatch(name) for name in value):
        raise ValueError("merged: not a list of segment names")
    return value


def _new_name(kind: str) -> str:
    """A name no other process picks: time (so names sort oldest first), process id, random."""
    return f"{kind}-{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"


def _bytes_under(root: Path) -> int:
    total = 0
    for path in root.rglob("*") if root.is_dir() else []:
        with contextlib.suppress(OSError):
            if path.is_file():
                total += path.stat().st_size
    return total
