"""The suffix memory on disk: what is added is found, what is removed is gone, crashes and damage are survived."""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from localspec.app.memory_store import MemoryStore
from localspec.engine.suffix_index import MultiIndex
from localspec.errors import InputError, LocalspecError

ROOT = Path(__file__).resolve().parents[1]


def document(number: int, length: int = 40) -> list[int]:
    """Tokens no other document shares (at a few hundred tokens): a lookup of any 8 of them finds only this one."""
    return (np.random.default_rng(number).permutation(50_000)[:length] + 1).tolist()


def found(index: MultiIndex, tokens: list[int]) -> bool:
    """Whether the index proposes the rest of `tokens` from their first 10."""
    proposal = index.lookup(tokens[:10], 8, min_length=8)
    return proposal is not None and proposal.tokens == tokens[10:18]


def files_holding(root: Path, tokens: list[int]) -> list[Path]:
    """Files under `root` whose bytes hold `tokens` as int32 (the way segments and bases store them)."""
    needle = np.asarray(tokens[:12], dtype="<i4").tobytes()
    return [path for path in root.rglob("*") if path.is_file() and needle in path.read_bytes()]


def test_added_text_is_found_in_segments_and_after_compaction(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "memory")
    for number in range(5):
        store.add(document(number), "run", tag=f"conversation:{number}")
    index = store.index()
    assert all(found(index, document(number)) for number in range(5))
    assert not found(index, document(99))
    assert store.compact() is True
    assert not list((tmp_path / "memory" / "segments").glob("*.seg"))  # merged and deleted
    reopened = MemoryStore(tmp_path / "memory")
    index = reopened.index()
    assert all(found(index, document(number)) for number in range(5))
    assert [entry["tag"] for entry in reopened.documents()] == [f"conversation:{number}" for number in range(5)]
    assert store.compact() is False  # nothing left to merge
    assert store.problems == [] and reopened.problems == []


def test_a_compaction_follows_adds_once_enough_is_unmerged(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, compact_segments=4)
    for number in range(9):
        store.add(document(number), "chat")
    assert len(list((tmp_path / "segments").glob("*.seg"))) == 1  # two compactions of four
    assert all(found(store.index(), document(number)) for number in range(9))
    assert store.compact(when_needed=True) is False and store.compact() is True  # one is not enough; merged if asked
    assert not list((tmp_path / "segments").glob("*.seg"))


@pytest.mark.parametrize("compacted", [False, True])
def test_remove_makes_lookups_miss_and_the_tokens_leave_the_disk(tmp_path: Path, compacted: bool) -> None:
    store = MemoryStore(tmp_path)
    store.add(document(1), "chat", tag="conversation:1")
    store.add(document(2), "chat", tag="conversation:2")
    store.add(document(1, 60)[20:], "serve", tag="conversation:1")  # a second document under the same tag
    if compacted:
        store.compact()
    assert found(store.index(), document(1))
    assert store.remove("conversation:1") == 80
    index = store.index()
    assert not found(index, document(1)) and not found(index, document(1, 60)[20:])
    assert found(index, document(2))
    assert files_holding(tmp_path, document(1)) == [] and files_holding(tmp_path, document(1, 60)[30:]) == []
    assert [entry["tag"] for entry in store.documents()] == ["conversation:2"]
    assert store.remove("conversation:1") == 0 and store.remove("no such tag") == 0


class CountingStore(MemoryStore):
    """A store that counts the bases it writes (each one a rebuild of the whole base)."""

    rebuilds = 0

    def _write_generation(self, kept, merged):  # type: ignore[no-untyped-def]
        self.rebuilds += 1
        return super()._write_generation(kept, merged)


def test_remove_tags_rebuilds_the_base_once_for_all_of_them(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    lengths = {number: 20 + 5 * number for number in range(1, 6)}
    for number, length in lengths.items():
        store.add(document(number, length), "file", tag=f"file:{number}")
    store.compact()
    store.add(document(6), "file", tag="file:2")  # unmerged, under a tag the base holds too
    store.add(document(7), "file", tag="file:7")
    store.rebuilds = 0
    gone = ["file:1", "file:2", "file:3", "file:9"]
    assert store.remove_tags(gone) == lengths[1] + lengths[2] + lengths[3] + 40
    assert store.rebuilds == 1
    index = store.index()
    for number in (1, 2, 3, 6):
        assert not found(index, document(number, lengths.get(number, 40)))
        assert files_holding(tmp_path, document(number, lengths.get(number, 40))) == []
    assert found(index, document(4, lengths[4])) and found(index, document(5, lengths[5]))
    assert [entry["tag"] for entry in store.documents()] == ["file:4", "file:5", "file:7"]
    store.add(document(8), "file", tag="file:8")
    store.rebuilds = 0
    assert store.remove_tags(iter(["file:8"])) == 40 and store.rebuilds == 0  # only a segment: no rebuild
    assert store.remove_tags([]) == 0 and store.remove("file:8") == 0 and store.rebuilds == 0
    assert store.problems == []


def test_clear_empties_everything(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    store.add(document(1), "file", tag="/src/a.py")
    store.compact()
    store.add(document(2), "run")
    store.record_use(1, 1, 5, 4)
    store.clear()
    assert not found(store.index(), document(1)) and not found(store.index(), document(2))
    assert store.documents() == [] and store.stats()["tokens"] == 0 and store.stats()["lookups"] == 0
    assert files_holding(tmp_path, document(1)) == [] and files_holding(tmp_path, document(2)) == []
    store.add(document(3), "run")
    assert found(store.index(), document(3))


def leave_killed_writers_files(root: Path, tokens: list[int], age_s: float) -> list[Path]:
    """The temporary files processes killed mid-write leave (a segment, a generation folder), `age_s` seconds old."""
    data = np.asarray(tokens, dtype="<i4").tobytes()
    suffix = secrets.token_hex(4)
    segment = root / "segments" / f".seg-{time.time_ns():020d}-1-{suffix}.seg.{suffix}.partial"
    generation = root / f".gen-{suffix}.partial"
    segment.parent.mkdir(parents=True, exist_ok=True)
    generation.mkdir()
    segment.write_bytes(b"LSMSEG1\n" + data)
    (generation / "tokens.npy").write_bytes(data)
    when = time.time() - age_s
    for path in (segment, generation / "tokens.npy", generation):
        os.utime(path, (when, when))
    return [segment, generation]


def test_clear_deletes_killed_writers_files_and_leaves_only_the_locks(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    store.add(document(1), "run")
    store.compact()
    store.record_use(1, 1, 1, 1)
    leave_killed_writers_files(tmp_path, document(2), age_s=0)
    leave_killed_writers_files(tmp_path, document(3), age_s=7200)
    store.clear()
    assert all(files_holding(tmp_path, document(number)) == [] for number in (1, 2, 3))
    left = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if not path.is_dir())
    assert left == [".CURRENT.json.lock", ".usage.json.lock"]
    store.add(document(4), "run")
    assert found(store.index(), document(4)) and store.problems == []


def test_remove_deletes_killed_writers_files_older_than_a_minute(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    store.add(document(1), "run", tag="1")
    store.compact()
    old = leave_killed_writers_files(tmp_path, document(2), age_s=90)
    young_segment, young_base = leave_killed_writers_files(tmp_path, document(3), age_s=5)
    assert store.remove("1") == 40
    assert not any(path.exists() for path in old) and files_holding(tmp_path, document(2)) == []
    # A segment that young may be a writer's at work (adds take no lock); a base is written under the lock
    # `remove` holds, so one left half-written is a killed compaction's, whatever its age.
    assert young_segment.exists() and not young_base.exists()
    assert store.remove("no such tag") == 0 and young_segment.exists()


def test_a_compaction_deletes_a_killed_compactions_half_written_base_at_once(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    store.add(document(1), "run")
    young_segment, half_written = leave_killed_writers_files(tmp_path, document(2), age_s=0)
    store.add(document(3), "run")
    assert store.compact() and not half_written.exists()
    assert files_holding(tmp_path, document(2)) == [young_segment]  # (perhaps a writer's at work: an hour)


def modes(root: Path) -> dict[str, int]:
    """The permission bits of the store's folder and of every folder and file under it."""
    return {str(path.relative_to(root)): stat.S_IMODE(path.stat().st_mode) for path in [root, *root.rglob("*")]}


def assert_private(root: Path) -> None:
    found_modes = modes(root)
    expected = {name: 0o700 if (root / name).is_dir() else 0o600 for name in found_modes}
    assert found_modes == expected


@pytest.mark.usefixtures("usual_umask")
def test_every_folder_and_file_is_private_whichever_call_makes_it(tmp_path: Path) -> None:
    first = MemoryStore(tmp_path / "vocabulary" / "compacted-first")
    assert first.compact() is False  # creates the folder (for its lock) before anything is added
    assert modes(first.root)["."] == 0o700
    assert modes(first.root.parent)["."] == 0o700  # where the owners' folders are listed (a serve key's hash)
    assert modes(first.root.parent.parent)["."] == 0o700  # where the vocabularies' folders are listed
    first.record_use(1, 1, 1, 1)
    for number in range(3):
        first.add(document(number), "run", tag=str(number))
    first.compact()
    first.add(document(3), "run", tag="3")
    assert {path.name for path in first.root.glob("gen-*/*")} == {"tokens.npy", "suffixes.npy", "documents.json"}
    assert_private(first.root)
    first.remove("1")
    assert_private(first.root)
    first.clear()
    assert_private(first.root)

    for call in (lambda store: store.record_use(1, 0, 0, 0), lambda store: store.compact(block=False),
                 lambda store: store.add(document(1), "chat")):
        store = MemoryStore(tmp_path / secrets.token_hex(4) / "memory")
        call(store)
        assert_private(store.root)

    shared = tmp_path / "made-by-someone-else"
    shared.mkdir(mode=0o755)
    (shared / "segments").mkdir(mode=0o755)
    store = MemoryStore(shared)
    store.add(document(1), "run")
    store.compact()
    assert_private(shared)


def test_a_folder_its_owner_made_read_only_stays_so(tmp_path: Path) -> None:
    """(was: made writable again, without a word, by the next document added)"""
    store = MemoryStore(tmp_path / "memory")
    store.add(document(1), "run")
    os.chmod(store.root / "segments", 0o550)
    os.chmod(store.root, 0o555)
    try:
        store.add(document(2), "run")  # (as root, written all the same: the modes are what is checked)
        assert modes(store.root)["."] == 0o500 and modes(store.root)["segments"] == 0o500  # others' bits gone
    finally:
        os.chmod(store.root, 0o700)
        os.chmod(store.root / "segments", 0o700)


def test_a_merge_drops_a_files_earlier_copy_rather_than_evict_other_text(tmp_path: Path) -> None:
    """`memory add` of a file again adds the new copy first; interrupted before it removed the old one, both
    stayed, and the next merge evicted every run's text to keep the two copies within max_tokens."""
    store = MemoryStore(tmp_path, max_tokens=120)
    store.add(document(1, 50), "file", tag="file:/a.txt", added=100.0, compact=False)
    store.add(document(2, 30), "run", tag="r", added=200.0, compact=False)
    store.add(document(3, 50), "file", tag="file:/a.txt", added=300.0, compact=False)  # (the old copy not removed)
    store.compact()
    assert [(entry["tag"], entry["tokens"]) for entry in store.documents()] == [("r", 30), ("file:/a.txt", 50)]
    assert store.evicted_tokens == 0
    index = store.index()
    assert found(index, document(2, 30)) and found(index, document(3, 50)) and not found(index, document(1, 50))

def test_eviction_keeps_the_newest_documents_within_max_tokens(tmp_path: Path) -> None:
    lengths = [30, 25, 40, 20, 35, 30, 45, 20]
    store = MemoryStore(tmp_path, max_tokens=120)
    for number, length in enumerate(lengths):
        store.add(document(number, length), "run", tag=str(number))
    store.compact()
    kept, total = [], 0  # by brute force: newest first while they fit
    for number in reversed(range(len(lengths))):
        total += lengths[number]
        if total > 120:
            break
        kept.insert(0, str(number))
    assert [entry["tag"] for entry in store.documents()] == kept == ["5", "6", "7"]
    assert store.evicted_tokens == sum(lengths[:5])  # (what `memory add` says it evicted)
    index = store.index()
    for number, length in enumerate(lengths):
        assert found(index, document(number, length)) == (str(number) in kept)
    with pytest.raises(InputError, match="more than the memory keeps"):
        store.add(document(9, 121), "file")


def test_documents_stats_and_usage_counters(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    store.add(document(1, 30), "run")
    store.compact()
    store.add(document(2, 20), "serve", tag="x")
    store.add(document(3, 10), "serve")
    assert store.add([], "run") is None
    store.record_use(lookups=10, hits=4, proposed=30, accepted=21)
    store.record_use(lookups=2, hits=1, proposed=3, accepted=3)
    stats = store.stats()
    assert {key: stats[key] for key in ("tokens", "documents", "lookups", "hits", "proposed", "accepted")} == {
        "tokens": 60, "documents": 3, "lookups": 12, "hits": 5, "proposed": 33, "accepted": 24,
    }
    assert stats["by_source"] == {"run": {"documents": 1, "tokens": 30}, "serve": {"documents": 2, "tokens": 30}}
    assert stats["bytes"] > 60 * 4
    assert [(entry["source"], entry["tag"], entry["tokens"]) for entry in store.documents()] == [
        ("run", None, 30), ("serve", "x", 20), ("serve", None, 10),
    ]
    with pytest.raises(ValueError):
        store.add([1, 2], "somewhere")
    with pytest.raises(ValueError):
        store.add([1, -2], "run")


@pytest.mark.parametrize("text, problem", [("[]", "not an object of counts"), ('{"lookups": "x"}', "lookups is not a count"),
                                           ("{", "Expecting property name"), (None, "a folder where the file should be")])
def test_damaged_usage_counters_are_reported_and_start_again(tmp_path: Path, text: str | None, problem: str) -> None:
    """They were zeroed without a word; a folder made there was reported again and again (two lines a run)."""
    store = MemoryStore(tmp_path)
    store.record_use(lookups=10, hits=4, proposed=30, accepted=21)
    usage = tmp_path / "usage.json"
    if text is None:
        usage.unlink()
        (usage / "inner").mkdir(parents=True)
    else:
        usage.write_text(text)
    assert store.stats()["lookups"] == 0
    assert len(store.problems) == 1 and problem in store.problems[0] and "usage.json: damaged" in store.problems[0]
    after = MemoryStore(tmp_path)
    assert after.stats()["lookups"] == 0 and after.problems == []  # (was: reported by every `memory stats`)
    store.record_use(lookups=2, hits=1, proposed=3, accepted=3)
    assert len(store.problems) == 1  # (said once)
    again = MemoryStore(tmp_path)
    assert again.stats()["lookups"] == 2 and again.problems == []


def test_stats_of_a_store_that_cannot_be_written_still_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(was: PermissionError out of `memory stats` where its damaged counters could not be written again)"""
    store = MemoryStore(tmp_path)
    store.add(document(1), "run")
    (tmp_path / "usage.json").write_text("[1")

    def refused(self: MemoryStore, path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(MemoryStore, "_make_lock_file", refused)
    assert store.stats()["documents"] == 1
    assert any("usage not counted (Permission denied)" in problem for problem in store.problems)


def test_a_missing_folder_is_an_empty_memory_and_reading_does_not_create_it(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "nowhere")
    assert store.index().lookup([1, 2, 3, 4], 4, 1) is None
    assert store.documents() == [] and store.stats()["tokens"] == 0 and store.remove("x") == 0
    store.clear()
    assert not (tmp_path / "nowhere").exists() and store.problems == []


def test_a_reader_survives_compactions_by_another_process(tmp_path: Path) -> None:
    reader, writer = MemoryStore(tmp_path), MemoryStore(tmp_path)
    writer.add(document(1), "run")
    writer.compact()
    old_index = reader.index()
    writer.add(document(2), "run")
    writer.compact()  # the generation the reader mapped is deleted
    assert found(old_index, document(1))  # still mapped
    index = reader.index()
    assert found(index, document(1)) and found(index, document(2)) and reader.problems == []


# Damage --------------------------------------------------------------------------------------------------------------


def compacted_store(root: Path) -> tuple[MemoryStore, Path]:
    """A store with documents 1-3 in its base and document 4 in a segment; its generation folder."""
    store = MemoryStore(root)
    for number in (1, 2, 3):
        store.add(document(number), "run", tag=str(number))
    store.compact()
    store.add(document(4), "chat", tag="4")
    (generation,) = root.glob("gen-*")
    return store, generation


def assert_reported_once_then_repaired(root: Path, name: str, still_found: list[int]) -> None:
    store = MemoryStore(root)
    index = store.index()
    assert len(store.problems) == 1 and name in store.problems[0], store.problems
    assert all(found(index, document(number)) for number in still_found)
    store.documents()
    assert len(store.problems) == 1  # once
    again = MemoryStore(root)  # repaired: a new reader finds nothing wrong
    assert all(found(again.index(), document(number)) for number in still_found)
    assert again.documents() and again.problems == []


def test_a_damaged_pointer_falls_back_to_the_newest_base(tmp_path: Path) -> None:
    compacted_store(tmp_path)
    (tmp_path / "CURRENT.json").write_text("{not json", encoding="utf-8")
    assert_reported_once_then_repaired(tmp_path, "CURRENT.json", [1, 2, 3, 4])


def test_a_missing_pointer_falls_back_to_the_newest_base(tmp_path: Path) -> None:
    compacted_store(tmp_path)
    (tmp_path / "CURRENT.json").unlink()  # (the base's documents had vanished from the list without a word)
    assert_reported_once_then_repaired(tmp_path, "CURRENT.json", [1, 2, 3, 4])


@pytest.mark.parametrize("name, still_found", [("CURRENT.json", [1, 2, 3, 4]), ("suffixes.npy", [1, 2, 3, 4]),
                                               ("tokens.npy", [4]), ("documents.json", [4])])
def test_a_folder_where_a_file_should_be_is_damage_repaired_not_an_unreadable_file(
    tmp_path: Path, name: str, still_found: list[int]
) -> None:
    _, generation = compacted_store(tmp_path)
    path = tmp_path / name if name == "CURRENT.json" else generation / name
    path.unlink()
    (path / "inner").mkdir(parents=True)  # (was: every `memory list` failed until `memory clear`)
    store = MemoryStore(tmp_path)
    assert [int(entry["tag"]) for entry in store.documents()] == still_found
    assert len(store.problems) == 1 and name in store.problems[0], store.problems
    again = MemoryStore(tmp_path)  # repaired: a new reader finds nothing wrong
    assert [int(entry["tag"]) for entry in again.documents()] == still_found and again.problems == []
    assert all(found(again.index(), document(number)) for number in still_found)


def test_a_copy_added_again_replaces_only_the_older_copies(tmp_path: Path) -> None:
    """`memory add` of a file again adds the new copy first, then removes what was added before it: a process
    killed between the two leaves both copies, never neither; one adding at the same moment keeps its own."""
    store = MemoryStore(tmp_path)
    store.add(document(1), "file", tag="f", added=100.0)
    store.add(document(2), "file", tag="g", added=100.0)
    store.compact()
    store.add(document(3), "file", tag="f", added=200.0)  # (killed here: both copies kept)
    assert found(store.index(), document(1)) and found(store.index(), document(3))
    assert store.remove_tags(["f"], added_before=200.0) == 40
    index = store.index()
    assert not found(index, document(1)) and found(index, document(3)) and found(index, document(2))
    assert store.remove_tags(["f"], added_before=200.0) == 0  # the newer copy stays, merged or not
    store.compact()
    assert store.remove_tags(["f"], added_before=200.0) == 0 and found(store.index(), document(3))
    assert [entry["tag"] for entry in store.documents()] == ["g", "f"] and store.problems == []


def damage_tokens(generation: Path) -> None:
    path = generation / "tokens.npy"
    path.write_bytes(path.read_bytes()[:100])  # truncated


def damage_table(generation: Path) -> None:
    (generation / "documents.json").write_bytes(b"\x00garbage")


def misfit_table(generation: Path) -> None:
    table = json.loads((generation / "documents.json").read_text(encoding="utf-8"))
    table["documents"][1]["length"] += 1
    (generation / "documents.json").write_text(json.dumps(table), encoding="utf-8")


@pytest.mark.parametrize("damage", [damage_tokens, damage_table, misfit_table])
def test_a_damaged_pointer_and_newest_base_fall_back_to_an_older_good_base(tmp_path: Path, damage) -> None:
    store, older = compacted_store(tmp_path)  # documents 1-3 in the base, 4 in a segment
    kept = tmp_path.parent / f"{tmp_path.name}-kept"
    shutil.copytree(older, kept)
    store.compact()  # a newer base with 1-4; the older one deleted ...
    shutil.copytree(kept, older)  # ... but for a crash before its deletion
    (newer,) = set(tmp_path.glob("gen-*")) - {older}
    damage(newer)
    (tmp_path / "CURRENT.json").write_text("{not json", encoding="utf-8")
    reader = MemoryStore(tmp_path)
    index = reader.index()
    assert all(found(index, document(number)) for number in (1, 2, 3)) and not found(index, document(4))
    assert reader.problems and "CURRENT.json" in reader.problems[0]
    again = MemoryStore(tmp_path)  # repaired: the older base is the base now
    assert [entry["tag"] for entry in again.documents()] == ["1", "2", "3"] and again.problems == []
    assert all(found(again.index(), document(number)) for number in (1, 2, 3))


def test_a_pointer_to_a_missing_base_is_reported(tmp_path: Path) -> None:
    _, generation = compacted_store(tmp_path)
    pointer = json.loads((tmp_path / "CURRENT.json").read_text(encoding="utf-8"))
    pointer["generation"] = generation.name[:-8] + "00000000"
    (tmp_path / "CURRENT.json").write_text(json.dumps(pointer), encoding="utf-8")
    assert_reported_once_then_repaired(tmp_path, "missing", [4])


def test_damaged_base_tokens_drop_the_base(tmp_path: Path) -> None:
    _, generation = compacted_store(tmp_path)
    path = generation / "tokens.npy"
    path.write_bytes(path.read_bytes()[:100])  # truncated
    assert_reported_once_then_repaired(tmp_path, "tokens.npy", [4])


def test_a_token_file_that_is_no_array_file_is_said_so_not_taken_for_a_pickle(tmp_path: Path) -> None:
    """numpy reads a file that does not start as a .npy for a pickle, and its message advises loading it unsafely."""
    _, generation = compacted_store(tmp_path)
    (generation / "tokens.npy").write_text("garbage\n")
    assert_reported_once_then_repaired(tmp_path, "tokens.npy: damaged (not an array file (it does not start as one));", [4])


@pytest.mark.parametrize("contents", ["short", "zeros", "out of range", "shuffled", "deleted"])
def test_a_damaged_suffix_array_is_rebuilt_from_the_tokens(tmp_path: Path, contents: str) -> None:
    _, generation = compacted_store(tmp_path)
    if contents == "deleted":  # (was: the base dropped, its documents lost, though its tokens were there)
        (generation / "suffixes.npy").unlink()
        assert_reported_once_then_repaired(tmp_path, "suffixes.npy: missing; rebuilt", [1, 2, 3, 4])
        return
    good = np.load(generation / "suffixes.npy")
    damaged = {"short": np.zeros(7, dtype=np.int32),  # the wrong length
               "zeros": np.zeros_like(good),  # the right shape, wrong contents
               "out of range": np.full_like(good, 10**6),
               "shuffled": np.random.default_rng(0).permutation(good)}[contents]
    np.save(generation / "suffixes.npy", damaged)
    assert_reported_once_then_repaired(tmp_path, "suffixes.npy", [1, 2, 3, 4])  # rebuilt into a new base


def test_a_document_table_that_does_not_fit_drops_the_base(tmp_path: Path) -> None:
    _, generation = compacted_store(tmp_path)
    table = json.loads((generation / "documents.json").read_text(encoding="utf-8"))
    table["documents"][1]["length"] += 1
    (generation / "documents.json").write_text(json.dumps(table), encoding="utf-8")
    store = MemoryStore(tmp_path)
    assert [entry["tag"] for entry in store.documents()] == ["4"]
    assert len(store.problems) == 1 and generation.name in store.problems[0]  # the base: its table or its tokens
    again = MemoryStore(tmp_path)
    assert [entry["tag"] for entry in again.documents()] == ["4"] and again.problems == []
    assert not found(again.index(), document(1)) and found(again.index(), document(4))


def test_damage_a_background_merge_finds_is_noted_once(tmp_path: Path) -> None:
    from localspec.app.memory import SessionMemory

    _, generation = compacted_store(tmp_path)
    tokens = np.load(generation / "tokens.npy", mmap_mode="r+")
    tokens[3] += 1  # a checksum only a merge verifies
    tokens.flush()
    del tokens
    notes: list[str] = []
    memory = SessionMemory(lambda: MemoryStore(tmp_path, compact_segments=1), notes=notes.append)
    memory.remember([7, 8, 9], [10, 11], "chat", "5")  # a second segment: merged in the background
    memory.close()
    assert len(notes) == 1 and "checksum does not match" in notes[0] and generation.name in notes[0]
    assert "table gone" not in notes[0]  # (the table was read: it and the tokens disagree)


def test_a_segment_of_another_format_is_reported_and_left_out(tmp_path: Path) -> None:
    compacted_store(tmp_path)
    name = MemoryStore(tmp_path).add(document(5), "run")
    path = tmp_path / "segments" / f"{name}.seg"
    path.write_bytes(path.read_bytes().replace(b'"format": 1', b'"format": 0'))
    assert_reported_once_then_repaired(tmp_path, f"{name}.seg", [1, 2, 3, 4])  # (was: read as if it were 1)
    assert not found(MemoryStore(tmp_path).index(), document(5))


def test_a_segment_a_newer_localspec_wrote_is_left_as_it_is_through_compactions(tmp_path: Path) -> None:
    """(A newer localspec sharing the folder keeps what it wrote: it was deleted as damaged.)"""
    compacted_store(tmp_path)
    name = MemoryStore(tmp_path).add(document(5), "run")
    path = tmp_path / "segments" / f"{name}.seg"
    path.write_bytes(path.read_bytes().replace(b'"format": 1', b'"format": 2'))
    written = path.read_bytes()
    store = MemoryStore(tmp_path)
    index = store.index()
    assert len(store.problems) == 1 and "written by a newer localspec" in store.problems[0]
    assert all(found(index, document(number)) for number in (1, 2, 3, 4)) and not found(index, document(5))
    store.add(document(6), "run")
    assert store.compact()
    assert path.read_bytes() == written
    assert found(MemoryStore(tmp_path).index(), document(6))


def test_a_file_where_the_segments_folder_goes_is_reported_and_replaced(tmp_path: Path) -> None:
    """(was: every `run` said the memory was off, `memory add` failed, and `memory list` said nothing)"""
    compacted_store(tmp_path)
    shutil.rmtree(tmp_path / "segments")
    (tmp_path / "segments").write_text("x")
    store = MemoryStore(tmp_path)
    assert store.documents() and len(store.problems) == 1 and "segments: damaged (not a folder)" in store.problems[0]
    assert store.add(document(7), "run") is not None
    assert found(MemoryStore(tmp_path).index(), document(7)) and MemoryStore(tmp_path).problems == []


def test_a_clear_while_a_document_is_written_drops_it_quietly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(was: an InputError, which turns a chat's or a server's memory off for the rest of its session)"""
    from localspec.app import memory_store

    store = MemoryStore(tmp_path)
    store.add(document(1), "run")
    write = memory_store._save_bytes

    def write_then_clear(path: Path, data: bytes) -> None:
        write(path, data)
        MemoryStore(tmp_path).clear()

    monkeypatch.setattr(memory_store, "_save_bytes", write_then_clear)
    assert store.add(document(2), "run") is None
    monkeypatch.undo()
    index = MemoryStore(tmp_path).index()
    assert not found(index, document(1)) and not found(index, document(2))


def test_a_session_left_open_stops_drafting_from_what_another_process_removed(tmp_path: Path) -> None:
    """(was: its index kept until it added a document itself: a chat left open drafted from removed text)"""
    from localspec.app.memory import SessionMemory

    MemoryStore(tmp_path).add(document(1), "chat", tag="conversation:1")
    MemoryStore(tmp_path).add(document(2), "chat", tag="conversation:2")
    memory = SessionMemory(lambda: MemoryStore(tmp_path))
    assert found(memory.index(), document(1)) and found(memory.index(), document(2))
    MemoryStore(tmp_path).remove("conversation:1")  # `history remove 1`, elsewhere
    assert not found(memory.index(), document(1)) and found(memory.index(), document(2))
    MemoryStore(tmp_path).clear()  # `memory clear`, elsewhere
    assert not found(memory.index(), document(2))
    MemoryStore(tmp_path).add(document(3), "run")  # another process's run: found too
    assert found(memory.index(), document(3))
    memory.close()


def test_a_damaged_segment_is_reported_and_left_out(tmp_path: Path) -> None:
    compacted_store(tmp_path)
    store = MemoryStore(tmp_path)
    name = store.add(document(5), "run")
    path = tmp_path / "segments" / f"{name}.seg"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    assert_reported_once_then_repaired(tmp_path, f"{name}.seg", [1, 2, 3, 4])
    assert not path.exists()


def test_garbage_in_every_file_never_raises(tmp_path: Path) -> None:
    _, generation = compacted_store(tmp_path)
    for path in [*generation.iterdir(), *(tmp_path / "segments").iterdir(), tmp_path / "CURRENT.json"]:
        path.write_bytes(b"\x00garbage")
    store = MemoryStore(tmp_path)
    assert store.index().lookup(document(1)[:10], 8, 8) is None
    assert store.documents() == [] and store.problems
    store.add(document(6), "run")
    assert found(store.index(), document(6))


def test_numbers_out_of_range_in_any_file_are_damage_not_a_crash(tmp_path: Path) -> None:
    _, generation = compacted_store(tmp_path)
    segment = MemoryStore(tmp_path).add(document(7), "run")
    path = tmp_path / "segments" / f"{segment}.seg"
    path.write_bytes(path.read_bytes().replace(b'"added": ', b'"added": 1e300, "x": '))
    pointer = json.loads((tmp_path / "CURRENT.json").read_text(encoding="utf-8"))
    (tmp_path / "CURRENT.json").write_text(json.dumps({**pointer, "tokens": float("inf")}), encoding="utf-8")
    table = json.loads((generation / "documents.json").read_text(encoding="utf-8"))
    table["documents"][0]["added"] = float("nan")
    (generation / "documents.json").write_text(json.dumps(table), encoding="utf-8")
    store = MemoryStore(tmp_path)
    listed = store.documents()
    assert all(math.isfinite(entry["added"]) for entry in listed) and store.problems
    assert MemoryStore(tmp_path).documents() == listed  # repaired: every kept time a time


def test_a_file_the_system_will_not_read_fails_the_read_and_nothing_is_repaired_away(tmp_path: Path, monkeypatch) -> None:
    compacted_store(tmp_path)  # documents 1-3 in the base, 4 in a segment
    real_load = np.load

    def refused(path, *args, **kwargs):
        if Path(path).name == "tokens.npy":
            raise PermissionError(13, "Permission denied")
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(np, "load", refused)
    store = MemoryStore(tmp_path)
    with pytest.raises(LocalspecError, match="tokens.npy: cannot be read .Permission denied.; the memory is left as it is"):
        store.documents()
    monkeypatch.setattr(np, "load", real_load)
    again = MemoryStore(tmp_path)
    assert [entry["tag"] for entry in again.documents()] == ["1", "2", "3", "4"] and again.problems == []


# Processes -----------------------------------------------------------------------------------------------------------

ADDER = textwrap.dedent(
    """
    import sys
    import time
    import numpy as np
    from pathlib import Path
    from localspec.app.memory_store import MemoryStore

    root, first, count, every = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    store = MemoryStore(root, compact_segments=every)
    if len(sys.argv) > 5:  # start together with the other adders: each leaves a file, all wait for all
        barrier, together = Path(sys.argv[5]), int(sys.argv[6])
        (barrier / str(first)).touch()
        while len(list(barrier.iterdir())) < together:
            time.sleep(0.002)
    for number in range(first, first + count):
        tokens = (np.random.default_rng(number).permutation(50_000)[:40] + 1).tolist()
        store.add(tokens, "run", tag=str(number))
        print(number, flush=True)
    """
)


def start_adder(root: Path, first: int, count: int, compact_every: int, *barrier: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", ADDER, str(root), str(first), str(count), str(compact_every), *barrier],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )


@pytest.mark.slow
def test_two_processes_adding_at_once_lose_nothing(tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    root = tmp_path / "memory"
    adders = [start_adder(root, first, 50, 6, str(barrier), "2") for first in (0, 1000)]
    for adder in adders:
        assert adder.wait(timeout=120) == 0
    assert len(list(root.glob("gen-*"))) == 1 and len(list((root / "segments").glob("*.seg"))) < 12  # compacted
    store = MemoryStore(root)
    tags = sorted(int(entry["tag"]) for entry in store.documents())
    assert tags == [*range(50), *range(1000, 1050)]
    index = store.index()
    assert all(found(index, document(number)) for number in tags)
    assert store.problems == []


@pytest.mark.slow
def test_processes_killed_while_adding_leave_a_store_that_loads(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    written: list[int] = []
    for round_number in range(6):
        adder = start_adder(tmp_path, 10_000 * round_number, 5_000, 3)
        assert adder.stdout is not None
        written.append(int(adder.stdout.readline()))  # started adding
        time.sleep(float(rng.uniform(0.02, 0.3)))
        os.kill(adder.pid, signal.SIGKILL)
        adder.wait()
        written += [int(line) for line in adder.stdout.read().split()]
    store = MemoryStore(tmp_path)
    tags = {int(entry["tag"]) for entry in store.documents()}
    assert set(written) <= tags  # every add that returned is there; one more per round may be too
    assert len(tags - set(written)) <= 6
    index = store.index()
    assert all(found(index, document(number)) for number in written)
    assert store.problems == []
    store.compact()
    after = MemoryStore(tmp_path)
    assert all(found(after.index(), document(number)) for number in written) and after.problems == []


@pytest.mark.slow
def test_opening_a_store_of_three_million_tokens_is_fast(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    store = MemoryStore(tmp_path)
    for number in range(300):
        store.add(rng.integers(0, 50_000, size=10_000).tolist(), "file", tag=f"file{number}", compact=False)
    store.add(document(7), "run", compact=False)
    started = time.perf_counter()
    store.compact()
    compacted = time.perf_counter() - started
    started = time.perf_counter()
    fresh = MemoryStore(tmp_path)
    index = fresh.index()
    opened = time.perf_counter() - started
    started = time.perf_counter()
    assert found(index, document(7))
    first_lookup = time.perf_counter() - started
    print(
        f"\n3M-token store: compacted in {compacted:.2f} s; opened in {opened * 1000:.1f} ms;"
        f" first lookup {first_lookup * 1000:.2f} ms; {fresh.stats()['bytes'] / 2**20:.0f} MiB on disk"
    )
