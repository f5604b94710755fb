"""The memory of earlier text as a user meets it: run and chat add to it, `memory` shows and edits it,
`history remove` takes a conversation out of it, serve keeps one only when told to (per API key)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import cli, one_error_line
from click.testing import CliRunner

from localspec.app.history import HistoryStore
from localspec.app.prompt_cache import prompts_folder
from localspec.app.memory import LOCAL_OWNER, conversation_tag, memory_root, serve_owner, stores_of
from localspec.cli import main
from localspec.config.paths import history_file

PROMPT = "the cat sat on the mat and the dog"
RUN = ("run", "-p", "tiny", "--seed", "3", "--max-tokens", "24", "--threads", "1", "--json")


def local_memory():
    stores = stores_of(LOCAL_OWNER)
    assert len(stores) == 1, stores
    return stores[0]


def memory_stats() -> dict:
    result = cli("memory", "stats", "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
def test_a_second_run_drafts_from_what_the_first_wrote_and_says_the_same(tiny_profile: str) -> None:
    first = cli(*RUN, PROMPT)
    assert first.exit_code == 0, first.stderr
    store = local_memory()
    [document] = store.documents()
    assert document["source"] == "run" and document["tokens"] > 24
    second = cli(*RUN, PROMPT)
    assert json.loads(second.stdout)["tokens"] == json.loads(first.stdout)["tokens"]  # coupled: same seed, same text
    [stats] = memory_stats().values()
    assert stats["lookups"] > 0 and stats["hits"] > 0 and stats["accepted"] > 0
    assert stats["documents"] == 2  # each run is a document


def test_no_memory_neither_drafts_from_nor_adds_to_it(tiny_profile: str) -> None:
    assert cli(*RUN, "--no-memory", PROMPT).exit_code == 0
    assert stores_of(LOCAL_OWNER) == [] or local_memory().documents() == []


def test_memory_add_list_remove_and_clear(tiny_profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "a.txt").write_text("the cat sat on the mat " * 20)
    (notes / "sub" / "b.md").write_bytes(b"caf\xe9 and the dog " * 10)  # invalid UTF-8: replaced, one warning
    (notes / "image.bin").write_bytes(b"\x89PNG\0\0\0" * 50)  # binary: skipped
    (notes / "marked.bin").write_bytes(b"\xff\xfe" + b"\1\0\0\0" * 50)  # binary after a UTF-16 mark: skipped
    (notes / ".hidden").write_text("secret")

    added = cli("memory", "add", "-p", "tiny", str(notes))
    assert added.exit_code == 0, added.stderr
    assert "added 2 files" in added.stderr and added.stderr.count("not valid UTF-8") == 1
    listed = json.loads(cli("memory", "list", "--json").stdout)
    assert sorted(Path(row["tag"].removeprefix("file:")).name for row in listed) == ["a.txt", "b.md"]
    assert {row["source"] for row in listed} == {"file"}

    again = cli("memory", "add", "-p", "tiny", str(notes / "a.txt"))  # adding a file again replaces it
    assert again.exit_code == 0 and len(json.loads(cli("memory", "list", "--json").stdout)) == 2

    removed = cli("memory", "remove", str(notes / "sub"))
    assert removed.exit_code == 0, removed.stderr
    assert [Path(row["tag"]).name for row in json.loads(cli("memory", "list", "--json").stdout)] == ["a.txt"]
    one_error_line(cli("memory", "remove", str(notes / "sub")), 2, "none of these files")

    # From a script (no terminal to answer at) it takes --yes: a silent "no" would look like success.
    one_error_line(cli("memory", "clear"), 2, "give --yes")
    monkeypatch.setattr("localspec.cli.memory._at_a_terminal", lambda: True)
    for answer in ("n\n", ""):  # no, or no answer at all: nothing cleared, and it says so by its exit status
        declined = CliRunner().invoke(main, ["memory", "clear"], input=answer)
        assert declined.exit_code == 1 and "nothing cleared" in declined.stderr, declined.stderr
    assert len(json.loads(cli("memory", "list", "--json").stdout)) == 1
    cleared = cli("memory", "clear", "--yes")
    assert cleared.exit_code == 0 and json.loads(cli("memory", "list", "--json").stdout) == []
    assert local_memory().index().lookup([*range(260, 266)], 4, min_length=2) is None


def test_memory_add_tokenizes_a_long_text_in_pieces_cut_at_line_ends(tiny_pair: tuple[Path, Path],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """(was: one call for the whole file: a megabyte of digits took a minute on the tiny vocabulary, and Ctrl-C
    waited for it) The pieces' tokens are the whole text's: the tiny vocabulary puts a space before each text
    it is given, which a cut must not add."""
    from localspec.cli import memory
    from localspec.runtime.model import Vocabulary

    monkeypatch.setattr(memory, "PIECE_CHARS", 64)
    lines = "the cat sat on the mat\n" * 9 + "a dog\n\n\nran off\n" * 3
    with Vocabulary(tiny_pair[0]) as vocabulary:
        pieces: list[str] = []
        real = vocabulary.tokenize
        monkeypatch.setattr(vocabulary, "tokenize", lambda piece, **kw: pieces.append(piece) or real(piece, **kw))
        assert list(memory._tokens_of(vocabulary, lines)) == real(lines, add_special=False)
        assert sum(piece.endswith("\n") for piece in pieces) >= 4 and all(len(piece) <= 65 for piece in pieces)
        pieces.clear()
        run = "7" * 150  # no line's end: cut where the piece ends
        tokens = memory._tokens_of(vocabulary, run)
        assert [len(piece) for piece in pieces if piece != "\n"] == [64, 64, 22] and tokens.dtype == np.int32


def test_memory_add_with_an_empty_target_is_refused(tiny_profile: str, tmp_path: Path) -> None:
    notes = tmp_path / "a.txt"
    notes.write_text("the cat sat\n")
    one_error_line(cli("memory", "add", "-p", "tiny", "--target", "", str(notes)), 2, "the path is empty")
    assert not memory_root().exists()  # (was: added for the profile's target's vocabulary)


def test_memory_add_and_remove_of_many_files_rebuild_the_base_at_most_twice(
    tiny_profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from localspec.app.memory_store import MemoryStore

    rebuilds: list[int] = []
    write_generation = MemoryStore._write_generation

    def counted(self: MemoryStore, *args):  # type: ignore[no-untyped-def]
        rebuilds.append(1)
        return write_generation(self, *args)

    monkeypatch.setattr(MemoryStore, "_write_generation", counted)
    kept = tmp_path / "kept.txt"  # stays in the base: every removal below rebuilds it
    kept.write_text("a dog ran in the park " * 5)
    notes = tmp_path / "notes"
    notes.mkdir()
    for number in range(4):
        (notes / f"{number}.txt").write_text(f"note {number}: the cat sat on the mat " * 5)
    assert cli("memory", "add", "-p", "tiny", str(kept), str(notes)).exit_code == 0
    assert len(rebuilds) == 1  # merged once
    rebuilds.clear()
    again = cli("memory", "add", "-p", "tiny", str(notes))
    assert again.exit_code == 0 and "added 4 files" in again.stderr
    assert len(rebuilds) == 1  # the new tokens in and the old ones out, in one: not once per file
    assert len(local_memory().documents()) == 5
    rebuilds.clear()
    removed = cli("memory", "remove", str(notes / "0.txt"), str(notes))
    assert removed.exit_code == 0 and len(rebuilds) == 1
    assert [Path(doc["tag"]).name for doc in local_memory().documents()] == ["kept.txt"]


def test_memory_add_says_what_the_bound_evicted(tiny_profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from localspec.cli import memory as memory_command

    def small_store(model):  # type: ignore[no-untyped-def]
        store = open_store(model)
        store.max_tokens = 300
        return store

    open_store = memory_command.open_store
    monkeypatch.setattr(memory_command, "open_store", small_store)
    files = []
    for number in range(3):
        files.append(tmp_path / f"{number}.txt")
        files[-1].write_text(f"note {number}: the cat sat on the mat " * 3)
    first = cli("memory", "add", "-p", "tiny", str(files[0]))
    assert first.exit_code == 0 and "evicted" not in first.stderr, first.stderr
    size = sum(document["tokens"] for document in local_memory().documents())
    assert 101 <= size <= 150  # (so that two files fit in 300 tokens, not three)
    more = cli("memory", "add", "-p", "tiny", str(files[1]), str(files[2]))
    assert more.exit_code == 0, more.stderr
    kept = local_memory().documents()
    assert [Path(document["tag"]).name for document in kept] == ["1.txt", "2.txt"]
    assert f"added 2 files, {sum(document['tokens'] for document in kept)} tokens" in more.stderr
    assert f"the memory keeps the newest 300 tokens: {size:,} were evicted, the oldest first\n" in more.stderr


TEXTS = [
    "the cat sat on the mat",
    "  leading spaces,\ttabs\nand newlines\n\n",
    "café, naïve, 東京, emoji 🙂, and \u00a0non-breaking",
    "def f(x):\n    return {'a': [1, 2.5e-3]}  # code",
    "<|im_start|>user <s> </s> [INST] looks special, is plain text",
    "",
]


def assert_vocabulary_tokenizes_like_the_model(path: Path) -> None:
    from localspec.runtime.model import Model, Vocabulary

    with Model(path) as model, Vocabulary(path) as vocabulary:
        for text in TEXTS:
            assert vocabulary.tokenize(text, add_special=False) == model.tokenize(text, add_special=False), text
            assert vocabulary.tokenize(text, add_special=True) == model.tokenize(text, add_special=True), text


def test_the_vocabulary_alone_tokenizes_like_the_tiny_model(tiny_pair: tuple[Path, Path]) -> None:
    assert_vocabulary_tokenizes_like_the_model(tiny_pair[0])


@pytest.mark.slow
def test_the_vocabulary_alone_tokenizes_like_the_demo_target(smollm_f32: Path) -> None:
    assert_vocabulary_tokenizes_like_the_model(smollm_f32)


def test_memory_add_keeps_the_targets_tokens(tiny_profile: str, tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    from localspec.runtime.model import Model

    text = "".join(TEXTS) * 3
    (tmp_path / "mixed.txt").write_text(text, encoding="utf-16")  # (was: skipped as binary for its zero bytes)
    result = cli("memory", "add", "-p", "tiny", str(tmp_path / "mixed.txt"))
    assert result.exit_code == 0, result.stderr
    with Model(tiny_pair[0]) as model:
        tokens = model.tokenize(text, add_special=False)
    [document] = local_memory().documents()
    assert document["tokens"] == len(tokens) and f"{len(tokens)} tokens" in result.stderr
    proposal = local_memory().index().lookup(tokens[:12], 8, min_length=12)
    assert proposal is not None and proposal.tokens == tokens[12:20]


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_memory_add_for_another_target_and_for_the_demo_without_deriving_it(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    from localspec.config.paths import cache_dir
    from localspec.models.compat import vocab_identity
    from localspec.models.demo import demo_draft_path

    (tmp_path / "notes.txt").write_text("the cat sat on the mat " * 20)
    assert cli("memory", "add", "--target", str(tiny_pair[0]), str(tmp_path / "notes.txt")).exit_code == 0
    assert (memory_root() / vocab_identity(tiny_pair[0]) / LOCAL_OWNER).is_dir()
    demo = cli("memory", "add", str(tmp_path / "notes.txt"))  # the demo profile: its F32 target is not derived for this
    assert demo.exit_code == 0, demo.stderr
    assert (memory_root() / vocab_identity(demo_draft_path()) / LOCAL_OWNER).is_dir()
    assert not list(cache_dir().glob("*.gguf")) and "preparing" not in demo.stderr


def test_memory_add_of_nothing_readable_is_one_line(tiny_profile: str, tmp_path: Path) -> None:
    one_error_line(cli("memory", "add", "-p", "tiny", str(tmp_path / "missing.txt")), 2, "no such file")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    one_error_line(cli("memory", "add", "-p", "tiny", str(tmp_path / "loop1")), 2, "loop1: cannot read it (")
    (tmp_path / "empty").mkdir()
    one_error_line(cli("memory", "add", "-p", "tiny", str(tmp_path / "empty")), 2, "no text files")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "empty.txt").write_text("")
    (junk / "blank.txt").write_text(" \n\t\n")
    (junk / "image.bin").write_bytes(b"\x89PNG\0\0\0" * 50)
    one_error_line(cli("memory", "add", "-p", "tiny", str(junk)), 2, "no text files to add", "3 files skipped")
    assert not memory_root().exists()  # nothing created
    if Path("/proc/self/status").is_file():  # a file that says it is empty: never read (/proc/kmsg never ends)
        one_error_line(cli("memory", "add", "-p", "tiny", "/proc/self/status"), 2, "no text files", "1 file skipped")

    (tmp_path / "kept.txt").write_text("the cat sat on the mat " * 10)
    assert cli("memory", "add", "-p", "tiny", str(tmp_path / "kept.txt")).exit_code == 0
    before = {path: path.stat().st_mtime_ns for path in local_memory().root.rglob("*")}
    one_error_line(cli("memory", "add", "-p", "tiny", str(junk / "image.bin")), 2, "no text files to add")
    assert {path: path.stat().st_mtime_ns for path in local_memory().root.rglob("*")} == before  # untouched


def test_memory_add_of_a_folder_skips_an_entry_it_may_not_look_into(tiny_profile: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A link into a folder this user may not enter failed the whole add (`is_file` raised PermissionError)."""
    (tmp_path / "notes.txt").write_text("the cat sat on the mat")
    (tmp_path / "private").symlink_to(tmp_path / "elsewhere")
    is_file = Path.is_file

    def no_entry(path: Path) -> bool:
        if path.name == "private":
            raise PermissionError(13, "Permission denied")
        return is_file(path)

    monkeypatch.setattr(Path, "is_file", no_entry)
    added = cli("memory", "add", "-p", "tiny", str(tmp_path))
    assert added.exit_code == 0, added.stderr
    assert "added 1 file" in added.stderr and "1 file skipped" in added.stderr


def test_memory_add_counts_each_file_once_and_its_tokens(
    tiny_profile: str, tiny_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    from localspec.runtime.model import Vocabulary

    notes = tmp_path / "notes"
    notes.mkdir()
    texts = {"a.txt": "the cat sat on the mat " * 7, "b.txt": "and then the dog ran off\n" * 3}
    for name, text in texts.items():
        (notes / name).write_text(text)
    (notes / "empty.txt").write_text("")
    result = cli("memory", "add", "-p", "tiny", str(notes / "a.txt"), str(notes))  # a.txt named twice
    assert result.exit_code == 0, result.stderr
    with Vocabulary(tiny_pair[0]) as vocabulary:
        lengths = sorted(len(vocabulary.tokenize(text, add_special=False)) for text in texts.values())
    assert result.stderr.splitlines() == [
        "1 file skipped: empty, binary, unreadable or over 4 MB",
        f"added 2 files, {sum(lengths)} tokens ({local_memory().root})",
    ]
    assert sorted(doc["tokens"] for doc in local_memory().documents()) == lengths


def test_stats_and_list_of_an_empty_memory() -> None:
    assert memory_stats() == {}
    result = cli("memory", "stats")
    assert result.exit_code == 0 and "empty" in result.stdout
    assert not memory_root().exists()  # looking creates nothing


def test_history_remove_takes_the_conversation_out_of_the_memory(tiny_profile: str) -> None:
    chat = CliRunner().invoke(main, ["chat", "-p", "tiny", "--seed", "1", "--max-tokens", "8", "--threads", "1"],
                              input=b"the cat sat on the mat\nand then the dog\n", catch_exceptions=False)
    assert chat.exit_code == 0, chat.stderr
    store = HistoryStore(history_file())
    conversation_id = store.latest()
    store.close()
    tagged = [doc for doc in local_memory().documents() if doc["tag"] == conversation_tag(conversation_id)]
    assert len(tagged) == 2 and {doc["source"] for doc in tagged} == {"chat"}  # one document per turn
    assert list(prompts_folder().glob("*.state"))  # the chat's last prompt, as the models read it
    removed = cli("history", "remove", str(conversation_id))
    assert removed.exit_code == 0 and "from the memory" in removed.stderr
    assert local_memory().documents() == []
    assert not prompts_folder().exists()  # (it held this conversation)


def test_serve_keeps_no_memory_unless_told_and_then_one_per_api_key(tiny_profile: str) -> None:
    from localspec.app.memory import open_store
    from localspec.app.plan import resolve
    from localspec.app.session import open_session

    plan = resolve("tiny", {"sampling.max_tokens": 6, "sampling.seed": 1})
    assert serve_owner("k1") != serve_owner("k2") != serve_owner(None)
    with open_session(plan, memory_owner=None) as session:  # what `serve` opens without --memory
        assert session.memory is None
    with open_session(plan, memory_owner=serve_owner("k1")) as session:
        generation = session.generation(session.raw_prompt_tokens(PROMPT), plan.generation)
        list(generation)
        session.remember(generation, "serve")
    assert len(open_store(plan.target.path, serve_owner("k1")).documents()) == 1
    assert open_store(plan.target.path, serve_owner("k2")).documents() == []
    assert stores_of(LOCAL_OWNER) == []


@pytest.mark.slow
def test_serve_with_memory_remembers_under_its_key_only(tiny_profile: str) -> None:
    from test_serve import Server

    plain = Server("-p", "tiny")
    try:
        plain.client().chat.completions.create(model="tiny", messages=[{"role": "user", "content": PROMPT}], max_tokens=4)
    finally:
        plain.stop()
    assert not memory_root().exists()
    keyed = Server("-p", "tiny", "--memory", "--api-key", "k1")
    try:
        keyed.client("k1").chat.completions.create(model="tiny", messages=[{"role": "user", "content": PROMPT}], max_tokens=4)
    finally:
        keyed.stop()
    owners = [folder.name for vocabulary in memory_root().iterdir() for folder in vocabulary.iterdir()]
    assert owners == [serve_owner("k1")]


def test_a_memory_that_cannot_be_written_is_turned_off_with_one_note(tiny_profile: str) -> None:
    memory_root().parent.mkdir(parents=True, exist_ok=True)
    memory_root().write_text("not a folder")  # every store under it fails
    result = cli(*RUN, PROMPT)
    assert result.exit_code == 0 and "Traceback" not in result.stderr
    assert json.loads(result.stdout)["tokens"]  # the run itself is whole
    assert result.stderr.count("the memory is off for this session") == 1 and "Errno" not in result.stderr


def test_a_session_merges_its_documents_off_the_generation_path(tmp_path: Path) -> None:
    """Past the store's threshold a remember() starts the merge in a thread of its own; close() waits for it."""
    from localspec.app.memory import SessionMemory
    from localspec.app.memory_store import MemoryStore

    store = MemoryStore(tmp_path / "memory", compact_tokens=50)
    memory = SessionMemory(lambda: store)
    for i in range(4):
        memory.remember([1, 2, 3, *range(300 + 20 * i, 320 + 20 * i)], [7, 8, 9], "run", tag=f"t{i}")
    memory.close()
    assert not store.needs_compaction() and len(store.documents()) == 4
    assert not list((tmp_path / "memory" / "segments").glob("*.seg"))  # all merged into the base


def test_a_file_name_that_is_not_utf8_is_listed_as_text(tiny_profile: str, tmp_path: Path) -> None:
    odd = tmp_path / os.fsdecode(b"caf\xe9.txt")  # an invalid byte in a name: a lone surrogate in Python
    other = tmp_path / os.fsdecode(b"caf\xe8.txt")  # ...another, which must keep a tag of its own
    spelled = tmp_path / "caf\\xe9.txt"  # ...and one whose name spells the escape out: a tag of its own too
    odd.write_text("the cat sat on the mat " * 20)
    other.write_text("the dog sat on the rug " * 20)
    spelled.write_text("the bird sat on the roof " * 20)
    assert cli("memory", "add", "-p", "tiny", str(odd), str(other), str(spelled)).exit_code == 0
    listed = cli("memory", "list")
    assert listed.exit_code == 0 and "caf\\xe9.txt" in listed.stdout and "caf\\xe8.txt" in listed.stdout, listed.stderr
    tags = [row["tag"] for row in json.loads(cli("memory", "list", "--json").stdout)]
    assert sorted(tag.rpartition("/")[2] for tag in tags) == ["caf\\\\xe9.txt", "caf\\xe8.txt", "caf\\xe9.txt"]
    assert cli("memory", "remove", str(odd)).exit_code == 0
    left = cli("memory", "list").stdout
    assert "caf\\xe8.txt" in left and "caf\\\\xe9.txt" in left  # the other files stay
    # A tag an earlier version wrote (a backslash as one) is replaced by adding the file again, and removed with it.
    store = local_memory()
    store.add(np.arange(260, 300, dtype=np.int32), source="file", tag="file:" + str(spelled.resolve()))
    assert len(json.loads(cli("memory", "list", "--json").stdout)) == 3
    assert cli("memory", "add", "-p", "tiny", str(spelled)).exit_code == 0
    assert len(json.loads(cli("memory", "list", "--json").stdout)) == 2
    store.add(np.arange(260, 300, dtype=np.int32), source="file", tag="file:" + str(spelled.resolve()))
    assert cli("memory", "remove", str(spelled)).exit_code == 0
    listed = json.loads(cli("memory", "list", "--json").stdout)
    assert [row["tag"].rpartition("/")[2] for row in listed] == ["caf\\xe8.txt"]


def test_a_file_keeps_one_tag_however_it_is_named_and_an_empty_path_is_refused(tiny_profile: str, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("the cat sat on the mat " * 20)
    (tmp_path / "link").symlink_to(folder)
    for name in (folder / "a.txt", folder / ".." / "docs" / "a.txt", tmp_path / "link" / "a.txt"):
        assert cli("memory", "add", "-p", "tiny", str(name)).exit_code == 0
    assert len(json.loads(cli("memory", "list", "--json").stdout)) == 1  # added again: replaced, not doubled
    for command in (("memory", "add", "-p", "tiny", ""), ("memory", "remove", "")):
        refused = cli(*command)
        assert refused.exit_code != 0 and "an empty path" in refused.stderr
    assert cli("memory", "remove", str(tmp_path / "link")).exit_code == 0
    assert json.loads(cli("memory", "list", "--json").stdout) == []


def test_list_shows_a_file_names_control_characters_as_escapes(tiny_profile: str, tmp_path: Path) -> None:
    """(was: the name's escape sequence written to the terminal as it is, recolouring what follows)"""
    named = tmp_path / "e\x1b[31mx.txt"
    named.write_text("the cat sat on the mat " * 20)
    assert cli("memory", "add", "-p", "tiny", str(named)).exit_code == 0
    listed = cli("memory", "list").stdout
    assert "\x1b" not in listed and "e\\x1b[31mx.txt" in listed


def test_a_ctrl_c_while_adding_says_how_many_files_went_in(tiny_profile: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """(was: exit 130 and not a word, with some of the files in the memory)"""
    from localspec.app.memory_store import MemoryStore

    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(f"the {name} sat on the mat " * 20)
    real_add, calls = MemoryStore.add, []

    def add_then_interrupt(self: MemoryStore, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(MemoryStore, "add", add_then_interrupt)
    result = cli("memory", "add", "-p", "tiny", str(tmp_path))
    assert result.exit_code == 130 and "interrupted: 2 files of 3 added" in result.stderr, result.stderr
    assert len(json.loads(cli("memory", "list", "--json").stdout)) == 2
