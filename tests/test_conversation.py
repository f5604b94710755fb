"""Chat state without a model: editing a conversation, trimming it to the context, and the SQLite store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from localspec.app.conversation import Conversation
from localspec.app.history import HistoryStore, HistoryUnavailable
from localspec.errors import InputError
from localspec.settings import GenerationSettings


def conversation(*turns: str, system: str | None = "Be brief.") -> Conversation:
    chat = Conversation(GenerationSettings(), system)
    for i, text in enumerate(turns):
        chat.add("user" if i % 2 == 0 else "assistant", text)
    return chat


def words(messages: list[dict[str, str]]) -> int:
    """A stand-in tokenizer: one token per word."""
    return sum(len(m["content"].split()) for m in messages)


def test_undo_drops_the_last_exchange_and_retry_the_last_reply() -> None:
    chat = conversation("hi", "hello", "how are you", "fine")
    assert chat.drop_last_reply().content == "fine" and chat.messages[-1].content == "how are you"
    assert chat.drop_last_reply() is None and len(chat.messages) == 3  # no reply at the end: nothing changes
    assert chat.undo() == 1 and [m.content for m in chat.messages] == ["hi", "hello"]
    assert chat.undo() == 2 and chat.messages == [] and chat.undo() == 0
    assert chat.drop_last_reply() is None
    greeting = conversation()
    greeting.add("assistant", "Hello!")
    assert greeting.drop_last_reply() is None and len(greeting.messages) == 1  # a reply to no user message stays


def test_the_window_leaves_out_the_oldest_exchanges_but_never_the_system_prompt() -> None:
    chat = conversation("one two three", "four five", "six seven", "eight", "nine ten eleven twelve")
    assert chat.window_start(words, limit=9) == 2  # 2 (system) + 2 + 1 + 4 = 9 without the first exchange
    assert [m["content"] for m in chat.prompt_messages(2)] == ["Be brief.", "six seven", "eight", "nine ten eleven twelve"]
    assert chat.window_start(words, limit=6, start=2) == 4 and len(chat.messages) == 5  # the conversation keeps them all
    assert chat.window_start(words, limit=100, start=4) == 4  # the window never moves back
    with pytest.raises(InputError, match="this message and the system prompt do not fit the context together"):
        chat.window_start(words, limit=3)
    with pytest.raises(InputError, match=r"the system prompt alone does not fit the context \(2 tokens, room for 1\)"):
        chat.window_start(words, limit=1)  # (it had blamed the message, however short)
    # A conversation loaded (or resumed) that ends in a message never answered: the messages since the last
    # reply are what does not fit, not the one just typed (it had blamed "this message alone").
    unanswered = conversation("one two", "three", "four five six seven eight", "hi")
    unanswered.messages[3].role = "user"
    with pytest.raises(InputError, match="the 2 messages since the last reply do not fit the context together"):
        unanswered.window_start(words, limit=7)


def test_set_takes_short_or_dotted_names_and_checks_ranges() -> None:
    chat = conversation()
    assert chat.set("temperature", "0") == "sampling.temperature" and chat.settings.sampling.temperature == 0
    assert chat.set("speculative.draft_max", "adaptive") and chat.settings.speculative.draft_max == "adaptive"
    assert chat.set("stop", '["###", "END"]') and chat.settings.stop == ("###", "END")
    with pytest.raises(InputError, match="must be >= 0"):
        chat.set("temperature", "-1")
    with pytest.raises(InputError, match="did you mean 'sampling.temperature'"):
        chat.set("temprature", "1")
    for partial, meant in [("temp", "sampling.temperature"), ("speculative.draftmax", "speculative.draft_max")]:
        with pytest.raises(InputError, match=f"did you mean '{meant}'"):  # (no suggestion for either before)
            chat.set(partial, "1")


def test_the_json_form_round_trips() -> None:
    chat = conversation("hi", "hel")
    chat.messages[-1].interrupted = True
    chat.set("top_k", "5")
    data = chat.to_json()
    assert data["messages"][0] == {"role": "system", "content": "Be brief."}
    assert data["messages"][-1] == {"role": "assistant", "content": "hel", "interrupted": True}
    again = Conversation.from_json(data, GenerationSettings())
    assert again.to_json() == data
    with pytest.raises(InputError):
        Conversation.from_json({"messages": [{"role": "robot", "content": "x"}]}, GenerationSettings())


def test_a_conversation_saved_with_max_tokens_0_resumes_with_the_default() -> None:
    """0 was allowed once (it meant nothing); a conversation saved then is not damaged."""
    data = {"messages": [{"role": "user", "content": "hi"}], "settings": {"sampling.max_tokens": 0, "sampling.top_k": 5}}
    resumed = Conversation.from_json(data, GenerationSettings())
    assert resumed.settings.max_tokens is None and resumed.settings.sampling.top_k == 5
    with pytest.raises(InputError, match="max_tokens"):
        GenerationSettings().with_values({"sampling.max_tokens": 0})


def test_a_null_setting_in_a_saved_conversation_means_its_default() -> None:
    """JSON null is "not set" for every setting: the defaults apply; None neither reaches the sampler nor crashes the resume."""
    settings = {"speculative.draft_max": None, "sampling.temperature": None, "sampling.stop": None, "sampling.top_k": 5}
    defaults = GenerationSettings().with_values({"sampling.temperature": 0.3})
    resumed = Conversation.from_json({"messages": [], "settings": settings}, defaults)
    assert resumed.settings.speculative.draft_max == GenerationSettings().speculative.draft_max
    assert resumed.settings.sampling.temperature == 0.3
    assert resumed.settings.stop == () and resumed.settings.sampling.top_k == 5
    assert GenerationSettings.from_values({"speculative.draft_max": None}) == GenerationSettings()


def test_the_store_keeps_conversations_message_by_message(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    chat = conversation("first question", "first answer")
    first = store.start(chat)
    second = store.start(conversation("another"))
    store.add(first, chat.add("user", "second question"))
    assert store.latest() == first  # updated last
    assert [row["id"] for row in store.list()] == [first, second]
    assert store.get(first) == chat.to_json()
    chat.undo()
    store.update(first, chat)
    assert store.get(first)["messages"][-1]["content"] == "first answer"
    assert store.remove(second) and not store.remove(second) and store.get(second) is None


def test_a_removed_conversations_id_is_never_given_again(tmp_path: Path) -> None:
    """SQLite gives the largest rowid + 1: removing the newest conversation gave its id to the next one."""
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    first, newest = store.start(conversation("a")), store.start(conversation("b"))
    assert store.remove(newest)
    store.close()
    again = HistoryStore(path)  # (in another process, later)
    assert again.start(conversation("c")) == newest + 1 and first < newest
    assert again.remove(newest + 1) and again.remove(first)
    assert again.start(conversation("d")) == newest + 2  # an empty history too


def test_continue_does_not_pick_a_conversation_emptied_by_undo(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    kept = store.start(conversation("a", "b"))
    emptied = conversation("c", "d")
    emptied_id = store.start(emptied)
    assert store.latest() == emptied_id
    emptied.undo()
    store.update(emptied_id, emptied)
    assert store.latest() == kept and store.get(emptied_id) is not None  # (still listed, to see or remove)


def test_continue_does_not_pick_a_conversation_whose_time_was_damaged(tmp_path: Path) -> None:
    """(was: a text `updated`, written by hand, sorts above every number in SQLite: `chat --continue` picked it,
    and failed on it, every time)"""
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    damaged, kept = store.start(conversation("a", "b")), store.start(conversation("c", "d"))
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE conversations SET updated = 'y' WHERE id = ?", (damaged,))
    db.close()
    store = HistoryStore(path)
    assert store.latest() == kept and [row["id"] for row in store.list()] == [kept, damaged]
    store.close()


def test_a_history_file_that_is_a_pipe_is_an_error_not_a_wait(tmp_path: Path) -> None:
    """(was: `history list`, `chat` waited for ever on the pipe's writer)"""
    import os

    pipe = tmp_path / "history.sqlite3"
    os.mkfifo(pipe)
    with pytest.raises(HistoryUnavailable, match="not a regular file"):
        HistoryStore(pipe)


def test_a_corrupt_or_locked_database_is_one_clear_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.sqlite3"
    corrupt.write_bytes(b"this is not a database" * 100)
    with pytest.raises(HistoryUnavailable, match="cannot be used"):
        HistoryStore(corrupt)
    for damaged in (b"x", b"\0"):  # (SQLite itself writes a new database over a file of one byte)
        corrupt.write_bytes(damaged)
        with pytest.raises(HistoryUnavailable, match="not a database"):
            HistoryStore(corrupt)
        assert corrupt.read_bytes() == damaged
    corrupt.write_bytes(b"")
    HistoryStore(corrupt).close()  # (an empty file is a database with nothing in it yet)

    path = tmp_path / "locked.sqlite3"
    store = HistoryStore(path, timeout=0.1)
    other = sqlite3.connect(path)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the database
    try:
        with pytest.raises(HistoryUnavailable, match="cannot be written"):
            store.start(conversation("hi"))
    finally:
        other.rollback()
        other.close()
    assert store.start(conversation("hi")) > 0  # usable again once released


def test_history_commands_list_show_and_remove() -> None:
    from cli_helpers import cli, one_error_line

    from localspec.config.paths import history_file

    store = HistoryStore(history_file())
    kept = store.start(conversation("What is an otter?", "A river mammal."))
    store.close()
    listed = json.loads(cli("history", "list", "--json").output)
    assert [row["id"] for row in listed] == [kept] and listed[0]["first_message"] == "What is an otter?"
    shown = json.loads(cli("history", "show", str(kept), "--json").output)
    assert shown == conversation("What is an otter?", "A river mammal.").to_json()
    assert "A river mammal." in cli("history", "show", str(kept)).output
    assert cli("history", "remove", str(kept)).exit_code == 0
    one_error_line(cli("history", "show", str(kept)), 2, f"no conversation {kept}")


def test_reading_a_history_no_chat_wrote_creates_no_database() -> None:
    """(was: `history list` made an empty database, and printed only a header)"""
    from cli_helpers import cli, one_error_line

    from localspec.config.paths import history_file

    listed = cli("history", "list")
    assert listed.exit_code == 0 and listed.stdout == "" and "no conversations stored yet" in listed.stderr
    assert json.loads(cli("history", "list", "--json").stdout) == []
    for command in ("show", "remove"):
        one_error_line(cli("history", command, "1"), 2, "no conversation 1")
    assert not history_file().exists()


def test_history_commands_show_text_as_typed_and_refuse_impossible_ids() -> None:
    from cli_helpers import cli, one_error_line

    from localspec.config.paths import history_file

    typed = "[/x] and [bold red]red[/bold red]"  # rich markup, and a closing tag rich would raise on
    store = HistoryStore(history_file())
    store.start(conversation("a first message much longer than the other one", "ok"))
    kept = store.start(conversation(typed, "ok"))
    store.close()
    listed, shown = cli("history", "list"), cli("history", "show", str(kept))
    assert listed.exit_code == shown.exit_code == 0, (listed.stderr, shown.stderr)
    assert typed in listed.output and f"user: {typed}" in shown.output
    lines = listed.stdout.splitlines()
    assert len(lines) == 3 and lines == [line.rstrip() for line in lines]  # piped: no padding after the last column
    for command in ("show", "remove"):
        one_error_line(cli("history", command, str(2**64)), 2, f"no conversation {2**64}")


def test_text_another_program_stored_as_invalid_utf8_is_listed_and_shown_with_replacements() -> None:
    """One such row made `history list`, `show` and `chat --continue` fail for every conversation."""
    from cli_helpers import cli

    from localspec.config.paths import history_file

    store = HistoryStore(history_file())
    kept = store.start(conversation("first", "answer"))
    store.close()
    with sqlite3.connect(history_file()) as db:
        db.execute("INSERT INTO messages(conversation, role, content) VALUES (?, 'user', CAST(x'68e9' AS TEXT))",
                   (kept,))
    listed, shown = cli("history", "list"), cli("history", "show", str(kept), "--json")
    assert listed.exit_code == shown.exit_code == 0, (listed.stderr, shown.stderr)
    assert json.loads(shown.output)["messages"][-1]["content"] == "h\ufffd"


def test_load_reads_no_more_than_any_context_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 70 MB file of NULs was read whole before it was found to be no saved conversation."""
    from localspec.config import files

    monkeypatch.setattr(files, "MAX_PIPED_BYTES", 1000)
    huge = tmp_path / "huge.json"
    huge.write_bytes(b"\0" * 5000)
    with pytest.raises(InputError, match=f"{huge}: more than 0 MiB"):
        Conversation.read(huge, GenerationSettings())


def test_load_refuses_settings_that_are_not_an_object_and_reads_a_bom(tmp_path: Path) -> None:
    saved = tmp_path / "chat.json"
    saved.write_text('{"messages": [{"role": "user", "content": "hi"}], "settings": "x"}')
    with pytest.raises(InputError, match=f"{saved}: .*settings"):
        Conversation.read(saved, GenerationSettings())
    saved.write_bytes(b'\xef\xbb\xbf{"messages": [{"role": "user", "content": "hi"}], "settings": {"speculative.draft_min": 9, "speculative.draft_max": 2}}')
    with pytest.raises(InputError, match="draft_min .* must not exceed"):  # the cross-field rule, after the BOM was skipped
        Conversation.read(saved, GenerationSettings())


@pytest.mark.parametrize("text, message", [
    ('{"messages": [{"role": "user", "content": 5}]}', 'a message\'s content must be text: {"role": "user", "content": 5}'),
    ('{"messages": [], "settings": ["x"]}', '"settings" must be an object of setting values, got ["x"]'),
    ("[" * 100_000 + "]" * 100_000, "not a saved conversation (nested too deeply to read)"),
    ("", "not a saved conversation (the file is empty)"), ("[[", "(line 1, column 3: Expecting value)"),
    ('{"messages": [], "n": ' + "9" * 5000 + "}", "(it holds a number with more than 4300 digits)"),  # (Python's advice)
    ('{"messages": [], "messages": []}', 'the key "messages" appears twice'),
])
def test_a_saved_conversation_that_cannot_be_loaded_is_named_as_its_json_reads(tmp_path: Path, text: str, message: str) -> None:
    """Python's form showed through: {'content': 5, 'role': 'user'}, 'maximum recursion depth exceeded'."""
    saved = tmp_path / "chat.json"
    saved.write_text(text)
    with pytest.raises(InputError) as raised:
        Conversation.read(saved, GenerationSettings())
    assert message in str(raised.value)
