"""`localspec chat` on the tiny models, in this process: piped input, commands, and what reaches the stored history."""

from __future__ import annotations

import io
import json
import os
import sys
import shutil
from pathlib import Path
from typing import Iterator

import pytest
from cli_helpers import cli, one_error_line
from click.testing import CliRunner, Result

from localspec.app.history import HistoryStore, HistoryUnavailable
from localspec.cli import main
from localspec.config.paths import history_file, input_history_file
from localspec.settings import SEED_MAX





def chat(stdin: bytes, *args: str) -> Result:
    """Pipe `stdin` into `localspec chat` on the tiny profile (greedy, 4-token replies)."""
    command = ["chat", "-p", "tiny", "--temperature", "0", "--max-tokens", "4", "--threads", "1", *args]
    return CliRunner().invoke(main, command, input=stdin, catch_exceptions=False)


def stored() -> dict:
    store = HistoryStore(history_file())
    try:
        return store.get(store.latest())
    finally:
        store.close()


def replies(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[")]


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_invalid_utf8_in_piped_input_is_replaced_with_one_warning(tiny_profile: str) -> None:
    result = chat(b"caf\xe9 the cat\n")
    assert result.exit_code == 0, result.stderr
    assert "Traceback" not in result.stderr and len(replies(result.stderr)) == 1
    assert result.stderr.count("not valid UTF-8") == 1
    assert stored()["messages"][0] == {"role": "user", "content": "caf\ufffd the cat"}


@pytest.mark.slow
def test_a_lone_surrogate_in_system_is_replaced(tiny_profile: str) -> None:
    result = chat(b"the cat\n", "--system", "be \udce9 brief")
    assert result.exit_code == 0, result.stderr
    assert "--system is not valid UTF-8" in result.stderr and len(replies(result.stderr)) == 1
    assert stored()["messages"][0] == {"role": "system", "content": "be \ufffd brief"}


@pytest.mark.slow
def test_utf16_and_utf32_piped_input_is_read_after_its_byte_order_mark(tiny_profile: str) -> None:
    """(was: refused, as `run` and `bench --prompts` read it)"""
    for encoding in ("utf-16", "utf-32", "utf-16-be"):
        marked = "\ufeff" if encoding == "utf-16-be" else ""
        result = chat(f"{marked}the caf\u00e9\r\n\"\"\"\nsat\n\"\"\"\n".encode(encoding))
        assert result.exit_code == 0 and len(replies(result.stderr)) == 2, result.stderr
        said = [message["content"] for message in stored()["messages"] if message["role"] == "user"]
        assert said[-2:] == ["the caf\u00e9", "sat"]
    broken = chat(b"\xff\xfeh\x00\x00\xd8\n\x00")  # a lone surrogate: replaced, as a stray byte of UTF-8 is
    assert broken.exit_code == 0 and "not valid UTF-16 text; invalid parts were replaced" in broken.stderr
    assert stored()["messages"][0]["content"] == "h\ufffd"


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_a_piped_line_or_block_past_the_limit_is_refused_not_read_into_memory(
    tiny_profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`chat < /dev/zero` (no line ends) took gigabytes; so would `yes` after an opening quote."""
    from localspec.cli import chat as chat_module

    monkeypatch.setattr(chat_module, "MAX_PIPED_BYTES", 1000)
    for stdin in (b"the cat\n" + b"\0" * 5000, b'"""\n' + b"y\n" * 5000):
        result = chat(stdin)
        assert result.exit_code == 2 and "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("error: stdin: a message of more than ")
    assert stored()["messages"][:1] == [{"role": "user", "content": "the cat"}]  # (what came before is kept)


@pytest.mark.parametrize("command, says", [
    (["chat"], "has no chat template, which chat needs"),
    (["run", "hello"], "has no chat template: use plain completion"),
    (["bench", "--prompt", "hello", "--strategy", "ngram"], "has no chat template: use plain completion"),
])
def test_a_model_without_a_chat_template_is_refused_before_it_loads_and_nothing_is_stored(
        tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, command: list[str], says: str) -> None:
    """Told from the file's header (was: after the weights loaded, which for a large model takes a while)."""
    def no_loading(*args: object, **kwargs: object) -> None:
        raise AssertionError("the models were loaded")

    for module in ("chat", "run", "bench"):
        monkeypatch.setattr(f"localspec.cli.{module}.load_session", no_loading)
    args = [*command, "--target", str(tiny_pair[0]), "--no-speculative", "--max-tokens", "4", "--threads", "1"]
    if command[0] == "bench":
        args.remove("--no-speculative")
    result = CliRunner().invoke(main, args, input=b"hello\nagain\n", catch_exceptions=False)
    one_error_line(result, 2, says, "`run --raw`")  # (chat was: exit 0)
    assert cli("history", "list", "--json").stdout.strip() in ("", "[]")  # (chat was: an empty conversation 1)


def test_a_profiles_chat_template_is_enough_for_a_model_without_one(tiny_pair: tuple[Path, Path],
                                                                    tmp_path: Path) -> None:
    from localspec.app.plan import lacks_chat_template, resolve

    flags = {"target.path": str(tiny_pair[0])}
    assert lacks_chat_template(resolve(None, flags, speculative=False))
    templated = resolve(None, {**flags, "chat.template": "{{ messages[0].content }}"}, speculative=False)
    assert not lacks_chat_template(templated)


def test_undo_and_system_change_the_stored_history(tiny_profile: str) -> None:
    result = chat(b"the cat\nthe dog\n/undo\n/system Be brief.\n")
    assert result.exit_code == 0, result.stderr
    assert "(last exchange dropped)" in result.stderr and "(system prompt set)" in result.stderr
    messages = stored()["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[0]["content"] == "Be brief." and messages[1]["content"] == "the cat"


def test_a_script_piping_into_chat_learns_whether_anything_failed(tiny_profile: str) -> None:
    assert chat(b"the cat\n/stats\n").exit_code == 0
    failed = chat(b"/nonsense\nthe cat\n")  # (was: exit 0 whatever failed)
    assert failed.exit_code == 1 and len(replies(failed.stderr)) == 1  # said, and the chat went on


def test_speculative_off_and_on(tiny_profile: str) -> None:
    script = b"/speculative off\nthe cat\n/speculative on\nthe dog\n/speculative maybe\n"
    result = chat(script, "--strategy", "model", "--draft-max", "2")  # a fixed length: adaptive may choose not to draft
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    off, on = replies(result.stderr)
    assert ", no drafting, seed " in off and "acceptance" in on  # the seed text follows the statistics
    assert "/speculative on|off" in result.stderr



def test_no_speculative_neither_loads_nor_looks_for_the_draft(tiny_profile: str, tmp_path: Path) -> None:
    result = chat(b"the cat\n/speculative on\n/set strategy ngram\n/speculative on\nthe dog\n",
                  "--no-speculative", "--draft", str(tmp_path / "missing.gguf"), "--strategy", "model")
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    assert "no draft model is loaded" in result.stderr and "(speculative decoding on)" in result.stderr
    off, on = replies(result.stderr)
    assert ", no drafting, seed " in off and ", no drafting, seed " not in on


def test_a_strategy_that_needs_the_draft_model_says_when_none_is_loaded(tiny_profile: str) -> None:
    result = chat(b"/set strategy model\nthe cat\n", "--strategy", "ngram")  # ngram: the draft model is not loaded
    assert result.exit_code == 0, result.stderr
    assert "replies are target-only until /set strategy ngram" in result.stderr


def test_flags_given_when_resuming_win_over_the_kept_settings(tiny_profile: str) -> None:
    first = chat(b"/set temperature 0.5\n/set top_k 7\n/set max_tokens 6\nthe cat\n")
    assert first.exit_code == 0, first.stderr
    resumed = chat(b"/set\nthe dog\n", "--continue", "--system", "Be brief.")  # with --temperature 0 --max-tokens 4
    assert resumed.exit_code == 0, resumed.stderr
    shown = {line.split()[0]: line.split()[1] for line in resumed.stderr.splitlines() if len(line.split()) >= 2}
    assert (shown.get("temperature"), shown.get("max_tokens"), shown.get("top_k")) == ("0.0", "4", "7")
    messages = stored()["messages"]
    assert messages[0] == {"role": "system", "content": "Be brief."} and len(messages) == 5


@pytest.mark.slow  # (two replies)
def test_a_history_held_locked_by_another_process_stores_the_chat_with_the_next_message(
        tiny_profile: str, monkeypatch) -> None:
    """(was: a lock held past one second, another chat's or `history remove`'s, and the chat was no longer saved)"""
    from localspec.app.history import HistoryBusy

    add, refused = HistoryStore.add, []

    def add_once_refused(store: HistoryStore, *args: object) -> None:
        if not refused:
            refused.append(True)
            raise HistoryBusy("chat history h cannot be written (database is locked)")
        add(store, *args)

    monkeypatch.setattr(HistoryStore, "add", add_once_refused)
    result = chat(b"the cat\nthe dog\n")
    assert result.exit_code == 0 and "it is stored again with the next message" in result.stderr, result.stderr
    assert "no longer saved" not in result.stderr and len(stored()["messages"]) == 4

def test_set_shows_values_in_the_form_it_takes_them_back(tiny_profile: str) -> None:
    """/set wrote Python's forms (`True`, `None`, `'hybrid'`, `['###']`), which /set then refused."""
    result = chat(b'/set same_text false\n/set stop ###\n/set\n/set strategy "ngram"\n/set stop ["###"]\n'
                  b"/set same_text true\n")
    assert result.exit_code == 0 and "error" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert "speculative.same_text = false" in lines and 'sampling.stop = ["###"]' in lines, lines
    shown = {line.split()[0]: line.split(maxsplit=1)[1] for line in lines if line.startswith("  ")}
    assert (shown["strategy"], shown["reasoning_budget"], shown["stop"]) == ('"hybrid"', "(not set)", '["###"]')
    assert 'speculative.strategy = "ngram"' in lines and "speculative.same_text = true" in lines, lines

def test_flags_given_when_resuming_are_stored_with_the_next_message(tiny_profile: str) -> None:
    first = chat(b"/set temperature 0.5\nthe cat\n")
    assert first.exit_code == 0 and stored()["settings"]["sampling.temperature"] == 0.5
    looked = chat(b"", "--continue", "--system", "Be brief.")  # (--temperature 0 too): no message, nothing stored
    assert looked.exit_code == 0 and stored()["settings"]["sampling.temperature"] == 0.5
    assert stored()["messages"][0] == {"role": "user", "content": "the cat"}  # (the system prompt too)
    resumed = chat(b"the dog\n", "--continue")
    assert resumed.exit_code == 0, resumed.stderr
    assert stored()["settings"]["sampling.temperature"] == 0.0 and len(stored()["messages"]) == 4


def bad_conversation_files(folder: Path) -> dict[str, Path]:
    files = {
        "settings not an object": ('{"messages": [{"role": "user", "content": "hi"}], "settings": "x"}', "settings"),
        "setting of the wrong type": ('{"messages": [], "settings": {"sampling.temperature": "hot"}}', "temperature"),
        "content not text": ('{"messages": [{"role": "user", "content": 5}]}', "content"),
        "interrupted not a flag": ('{"messages": [{"role": "assistant", "content": "x", "interrupted": "no"}]}', "interrupted"),
        "not JSON": ("[[[", "not a saved conversation"),
        "nested too deep": ("[" * 100_000, "not a saved conversation"),
        # (the last was taken silently: "(loaded 0 messages)", the conversation gone without a word)
        "a key twice": ('{"messages": [{"role": "user", "content": "hi"}], "messages": []}', '"messages" appears twice'),
    }
    paths = {}
    for i, (name, (text, fragment)) in enumerate(files.items()):
        paths[fragment + f"#{i}"] = folder / f"bad{i}.json"
        paths[fragment + f"#{i}"].write_text(text)
    paths["is a directory#d"] = folder
    paths["No such file#m"] = folder / "missing.json"
    fifo = folder / "fifo.json"
    os.mkfifo(fifo)
    paths["not a regular file#f"] = fifo
    return paths


def test_every_malformed_load_is_one_line_naming_the_file_and_the_chat_goes_on(tiny_profile: str, tmp_path: Path) -> None:
    files = bad_conversation_files(tmp_path)
    script = "".join(f"/load {path}\n" for path in files.values()) + "the cat\n"
    result = chat(script.encode())
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == len(files), result.stderr
    for (fragment, path), line in zip(files.items(), errors):
        assert str(path) in line and fragment.split("#")[0] in line, line
    assert len(replies(result.stderr)) == 1  # the chat went on


def test_a_load_with_invalid_utf8_and_escaped_surrogates_is_replaced(tiny_profile: str, tmp_path: Path) -> None:
    saved = tmp_path / "latin1.json"
    saved.write_bytes(b'{"messages": [{"role": "user", "content": "caf\xe9"}, {"role": "assistant", "content": "\\ud800 ok"}],'
                      b' "settings": {"sampling.temperature": 0.5}}')
    result = chat(f"/load {saved}\n/set\n".encode())
    assert result.exit_code == 0, result.stderr
    assert f"{saved} is not valid UTF-8" in result.stderr and "loaded 2 messages" in result.stderr
    assert ["temperature", "0.5"] in [line.split() for line in result.stderr.splitlines()]
    assert [m["content"] for m in stored()["messages"]] == ["caf\ufffd", "\ufffd ok"]


def test_a_load_says_that_several_system_messages_became_one_system_prompt(tiny_profile: str, tmp_path: Path) -> None:
    saved = tmp_path / "two.json"
    saved.write_text(json.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                                              {"role": "system", "content": "s2"}]}))
    result = chat(f"/load {saved}\n".encode())
    assert result.exit_code == 0, result.stderr
    assert f"(loaded 1 message from {saved}, and its 2 system messages joined into one system prompt)" in result.stderr


def test_save_into_a_missing_folder_is_refused_and_creates_nothing(tiny_profile: str, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "chat.json"
    result = chat(f"the cat\n/save {target}\n".encode())
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    assert f"error: {target}: the folder {target.parent} does not exist" in result.stderr
    assert not (tmp_path / "no").exists()



def test_save_and_load_take_a_quoted_name_as_a_shell_would(tiny_profile: str, tmp_path: Path) -> None:
    saved = tmp_path / "my chat.json"
    schema = tmp_path / "my schema.json"
    schema.write_text('{"type": "object"}')
    script = f'the cat\n/save "{saved}"\n/load \'{saved}\'\n/format schema "{schema}"\n'  # (was: `"` in the name)
    result = chat(script.encode())
    assert result.exit_code == 0, result.stderr
    assert saved.is_file() and "loaded 2 messages" in result.stderr and "(format: JSON schema" in result.stderr
    # A terminal writes a dropped file's name with its spaces escaped (was a file named `my\ chat.json`).
    escaped = str(tmp_path / "my other chat.json").replace(" ", "\\ ")
    result = chat(f"the cat\n/save {escaped}\n/save \"{tmp_path}/x.json\n".encode())
    assert (tmp_path / "my other chat.json").is_file(), result.stderr
    assert f'"{tmp_path}/x.json: a quote is not closed' in result.stderr


def test_paths_no_check_foresaw_are_one_line_each_and_the_chat_goes_on(tiny_profile: str, tmp_path: Path) -> None:
    too_long = tmp_path / ("x" * 300) / "chat.json"
    script = f"/save {too_long}\n/load {too_long}\n/save ~no-such-user-here/c.json\n/format grammar {'y' * 300}\nthe cat\n"
    result = chat(script.encode())
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 4 and "Traceback" not in result.stderr, result.stderr
    assert all("too long" in line for line in (errors[0], errors[1], errors[3])) and "no such user" in errors[2], errors
    assert len(replies(result.stderr)) == 1  # the chat went on


def test_the_history_store_says_its_folder_is_gone(tmp_path: Path) -> None:
    from localspec.app.conversation import Conversation
    from localspec.settings import GenerationSettings

    store = HistoryStore(tmp_path / "data" / "history.db")
    conversation = Conversation(GenerationSettings())
    conversation_id = store.start(conversation)
    shutil.rmtree(tmp_path / "data")
    with pytest.raises(HistoryUnavailable, match="its folder .*data is gone"):
        store.add(conversation_id, conversation.add("user", "hi"))
    store.close()


def test_a_damaged_history_is_a_warning_for_a_new_chat_and_one_error_for_a_resumed_one(tiny_profile: str) -> None:
    history_file().parent.mkdir(parents=True, exist_ok=True)
    history_file().write_bytes(b"this is not a database" * 100)
    fresh = chat(b"the cat\n")
    assert fresh.exit_code == 0 and "this chat is not saved" in fresh.stderr
    one_error_line(chat(b"the cat\n", "--continue"), 1, "nothing to resume")


def test_input_history_falls_back_to_memory_when_its_folder_goes(tmp_path: Path) -> None:
    from localspec.cli.chat import _input_history
    from localspec.config.paths import input_history_file

    history = _input_history()
    history.append_string("first")
    assert input_history_file().read_text().endswith("+first\n")
    shutil.rmtree(input_history_file().parent)
    history.append_string("second")
    history.append_string("third")
    assert history.problem is not None and "is gone" in history.problem and "this chat only" in history.problem
    assert history.get_strings() == ["first", "second", "third"]


@pytest.mark.slow  # a process in a pseudo-terminal (prompt_toolkit's input history), about a second
def test_removing_the_data_folder_mid_chat_warns_once_and_the_chat_goes_on(tiny_profile: str) -> None:
    import sys

    import pexpect

    from localspec.config.paths import data_dir

    child = pexpect.spawn(sys.executable, ["-m", "localspec", "chat", "-p", "tiny", "--max-tokens", "4", "--threads", "1"],
                          env={**os.environ, "NO_COLOR": "1", "TERM": "dumb"}, encoding="utf-8", timeout=60, dimensions=(40, 200))
    child.expect_exact("Ctrl-D to leave")
    child.expect_exact("> ")
    child.sendline("the cat")
    child.expect_exact("> ")
    shutil.rmtree(data_dir())
    shown = ""
    for _ in range(3):
        child.sendline("the dog")
        child.expect_exact("> ")
        shown += child.before
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert "Unhandled exception" not in shown and "readonly" not in shown, shown
    assert shown.count("warning: the input history cannot be written: its folder") == 1
    assert shown.count("warning: chat history cannot be written: its folder") == 1
    assert shown.count("[length]") == 3  # every line was answered


def test_each_reply_shows_its_seed_and_the_same_seed_gives_the_same_reply(tiny_profile: str) -> None:
    """Coupled verification: a chat's replies at T=1 depend on the seed alone, with or without drafting; the
    first reply takes the seed given, each later one the next."""
    def run(*args: str) -> tuple[list[str], str]:
        result = chat(b"the cat\n/retry\n/stats\n", "--temperature", "1", "--max-tokens", "8", "--seed", "5", *args)
        assert result.exit_code == 0, result.stderr
        last_reply = [line for line in result.stderr.splitlines() if line.startswith("last reply:")]
        return [*replies(result.stderr), *last_reply], result.stdout

    lines, text = run()
    assert "seed 5 (coupled)" in lines[0] and "seed 6 (coupled)" in lines[1]  # /retry draws a new seed
    assert "seed 6 (coupled)" in lines[2]  # /stats names the last reply's seed
    assert run("--strategy", "model", "--draft-max", "3")[1] == text == run("--no-speculative")[1]


def test_a_replys_seed_regenerates_it_within_the_chat_and_in_run(tiny_profile: str) -> None:
    """The seed a reply shows is one to use: `/retry SEED` (here with the target alone), `/set seed SEED` before
    asking again, and `run --seed SEED` all write the same reply."""
    result = chat(b"the cat\n/speculative off\n/retry 7\n/undo\n/set seed 7\nthe cat\n/retry 1x\n",
                  "--temperature", "1", "--max-tokens", "8", "--seed", "7")
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    assert [line.split("seed ")[1] for line in replies(result.stderr)] == ["7 (coupled)"] * 3
    assert "error: /retry [SEED]: '1x' is not a seed (a whole number from 0 to" in result.stderr
    first = stored()["messages"][1]["content"]
    assert [line.strip() for line in result.stdout.splitlines()] == [first.strip()] * 3
    one_shot = cli("run", "-p", "tiny", "--temperature", "1", "--max-tokens", "8", "--threads", "1", "--seed", "7",
                   "the cat")
    assert one_shot.exit_code == 0 and one_shot.stdout.strip() == first.strip()


@pytest.mark.usefixtures("usual_umask")
def test_the_chat_history_is_private_even_where_an_earlier_version_made_it_readable(tiny_profile: str) -> None:
    import stat

    path = history_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o644)
    os.chmod(path, 0o644)
    assert chat(b"the cat\n").exit_code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stored()["messages"][0]["content"] == "the cat"
    path.unlink()
    assert chat(b"the cat\n").exit_code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_ctrl_c_while_the_prompt_is_read_takes_the_message_back(tiny_profile: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped before its first token, a reply is none: not an empty interrupted reply with "[None]" statistics."""
    from localspec.engine.generation import Generation

    read = Generation._evaluate_prompt
    calls = []

    def interrupted_once(self, context):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return read(self, context)

    monkeypatch.setattr(Generation, "_evaluate_prompt", interrupted_once)
    result = chat(b"the cat\nthe dog\n")
    assert result.exit_code == 0, result.stderr
    assert "(stopped before the reply began)" in result.stderr and "[None]" not in result.stderr
    assert len(replies(result.stderr)) == 1
    assert [m["content"] for m in stored()["messages"] if m["role"] == "user"] == ["the dog"]


def test_an_unclosed_multi_line_message_is_not_sent(tiny_profile: str) -> None:
    result = chat(b'"""\nthe cat\n/exit\n')
    assert result.exit_code == 1 and not replies(result.stderr)  # (a script learns that its message was lost)
    assert 'error: the multi-line message was not sent: no closing """' in result.stderr


@pytest.mark.slow  # a chat in a pseudo-terminal
def test_in_a_terminal_a_block_is_dropped_by_ctrl_c_and_a_pasted_text_is_a_message(tiny_profile: str) -> None:
    import sys
    import time

    import pexpect

    child = pexpect.spawn(sys.executable, ["-m", "localspec", "chat", "-p", "tiny", "--temperature", "0",
                                           "--max-tokens", "4", "--threads", "1"],
                          env={**os.environ, "NO_COLOR": "1", "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"},
                          encoding="utf-8", timeout=60)  # (xterm: prompt_toolkit reads Ctrl-C as a key, not a signal)
    child.expect_exact("Ctrl-D to leave")
    child.expect_exact(">")
    child.sendline('"""')
    child.expect_exact("...")
    child.sendline("part one")
    child.expect_exact("\x1b[?2004l")  # that line's prompt ended,
    child.expect_exact("...")  # and the next one is drawn:
    time.sleep(0.5)  # Ctrl-C is then read as a key in raw mode (between prompts it is a signal, and may be lost)
    child.sendintr()
    child.expect_exact("(multi-line message dropped)")
    child.expect_exact(">")
    child.send("\x1b[200~/etc/hosts holds:\r127.0.0.1 localhost\x1b[201~\r")  # a bracketed paste of two lines
    child.expect(r"\[length\]")
    child.expect_exact(">")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert [m["content"] for m in stored()["messages"] if m["role"] == "user"] == ["/etc/hosts holds:\n127.0.0.1 localhost"]


def test_stats_after_undo_does_not_show_the_undone_reply(tiny_profile: str) -> None:
    result = chat(b"the cat\n/undo\n/stats\n")
    assert result.exit_code == 0 and "no reply yet (or since the last /undo)" in result.stderr
    assert "last reply:" not in result.stderr


def test_a_long_message_says_it_is_being_read(tiny_profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """(A document pasted into a chat took 24 s to read on a CPU, with nothing shown.)"""
    from localspec.app import chat_session

    monkeypatch.setattr(chat_session, "LONG_READ_TOKENS", 40)  # (the tiny models' context holds no 1000 tokens)
    result = chat(b"the cat " * 5 + b"\nthe dog\n")
    assert result.exit_code == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("(reading ")]
    assert len(notes) == 1 and int(notes[0].split()[1]) >= 40  # the second turn's prompt is mostly cached


@pytest.mark.slow  # two chats in a pseudo-terminal
def test_a_block_is_one_entry_of_the_input_history_and_up_sends_it_again(tiny_profile: str) -> None:
    import sys
    import time

    import pexpect

    def terminal_chat():
        child = pexpect.spawn(sys.executable, ["-m", "localspec", "chat", "-p", "tiny", "--temperature", "0",
                                               "--max-tokens", "4", "--threads", "1"],
                              env={**os.environ, "NO_COLOR": "1", "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"},
                              encoding="utf-8", timeout=60)
        child.expect_exact("Ctrl-D to leave")
        child.expect_exact(">")
        return child

    def leave(child) -> None:
        time.sleep(0.3)
        child.send("\x04")  # Ctrl-D on an empty line (not /exit, which would be the history's newest entry)
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0

    child = terminal_chat()
    for line in ('"""', "a line", "/b line", '"""'):
        child.sendline(line)
    child.expect(r"\[length\]")
    child.expect_exact(">")
    leave(child)
    child = terminal_chat()
    time.sleep(0.3)
    child.send("\x1b[A")  # Up: the block, whole
    child.expect_exact("/b line")
    child.send("\r")
    child.expect(r"\[length\]")
    child.expect_exact(">")
    leave(child)
    assert [m["content"] for m in stored()["messages"] if m["role"] == "user"] == ["a line\n/b line"]
    from prompt_toolkit.history import FileHistory  # (the opening quotes were an entry of their own too)

    assert list(FileHistory(str(input_history_file())).load_history_strings()) == ['"""\na line\n/b line\n"""']
    assert input_history_file().read_text().count("+a line") == 1  # one entry: the block, quotes included


def test_continue_and_resume_together_are_refused() -> None:
    one_error_line(chat(b"the cat\n", "--continue", "--resume", "3"), 2, "--continue resumes the latest conversation",
                   "give one of them")


def test_the_turn_seed_wraps_at_the_largest_seed(tiny_profile: str) -> None:
    result = chat(b"the cat\n/retry\n", "--seed", str(SEED_MAX))
    assert result.exit_code == 0, result.stderr
    seeds = [line.split("seed ")[1].split(" ")[0] for line in replies(result.stderr)]
    assert seeds == [str(SEED_MAX), "0"]  # seed + reply, modulo SEED_MAX + 1: never out of range


# -- turns that cannot be answered, trimming, retries: the conversation and its stored copy -----------

REFUSING_TEMPLATE = ("{% for m in messages %}{% if 'boom' in m['content'] %}{{ raise_exception('boom is refused') }}"
                     "{% endif %}{{ m['content'] }} {% endfor %}")


def refusing_profile(tiny_pair: tuple[Path, Path]) -> None:
    """The profile "tiny" with a template that refuses any message holding "boom" (as Gemma's refuses roles out of turn)."""
    from localspec.config.paths import user_profiles_dir

    path = user_profiles_dir() / "tiny.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[target]\npath = "{tiny_pair[0]}"\n[draft]\npath = "{tiny_pair[1]}"\n'
                    f'[chat]\ntemplate = "{REFUSING_TEMPLATE}"\n')


def contents() -> list[str]:
    return [message["content"] for message in stored()["messages"]]


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_a_message_too_long_for_the_context_leaves_the_conversation_as_it_was(tiny_profile: str) -> None:
    result = chat(b"the cat\nthe dog\n" + b"cat " * 400 + b"\nthe end\n", "--n-ctx", "256")
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    assert "does not fit the context" in result.stderr and len(replies(result.stderr)) == 3
    assert "shorten it (the target was trained for 256 tokens: a larger --n-ctx would not help)" in result.stderr
    kept = contents()
    assert len(kept) == 6 and kept[0::2] == ["the cat", "the dog", "the end"]
    # One whose bytes alone cannot fit is refused before llama.cpp tokenizes it (400 kB took half a minute).
    result = chat(b"the cat\n" + b"x" * 400_000 + b"\nthe end\n", "--n-ctx", "256")
    assert result.exit_code == 1 and len(replies(result.stderr)) == 2
    assert "the message is 400000 bytes, more than a context of 256 tokens can hold" in result.stderr


def test_a_template_that_refuses_a_message_undoes_that_turn_and_the_chat_goes_on(tiny_pair: tuple[Path, Path]) -> None:
    refusing_profile(tiny_pair)
    result = chat(b"the cat\nboom\nthe dog\n")
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    assert "boom is refused" in result.stderr and "Traceback" not in result.stderr
    assert len(replies(result.stderr)) == 2
    assert contents()[0::2] == ["the cat", "the dog"]


def test_a_retry_that_fails_keeps_the_old_reply(tiny_pair: tuple[Path, Path]) -> None:
    refusing_profile(tiny_pair)
    result = chat(b"the cat\n/system boom\n/retry\n")
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    assert "boom is refused" in result.stderr
    messages = stored()["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant"] and messages[1]["content"] == "the cat"


def test_ctrl_c_before_a_reply_begins_keeps_the_old_reply_and_the_chat(tiny_profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fitting a long conversation into the context takes a while: a Ctrl-C then ends that turn only."""
    from localspec.app.chat_session import ChatSession

    fit = ChatSession._fit_context
    calls = []

    def interrupted_second_time(self: ChatSession) -> int:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fit(self)

    monkeypatch.setattr(ChatSession, "_fit_context", interrupted_second_time)
    result = chat(b"the cat\n/retry\nthe dog\n")
    assert result.exit_code == 0, result.stderr
    assert "stopped before the reply began" in result.stderr
    messages = stored()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 2 and messages[2]["content"] == "the dog"


def test_retry_without_a_reply_to_a_user_message_changes_nothing(tiny_profile: str, tmp_path: Path) -> None:
    saved = tmp_path / "greeting.json"
    saved.write_text('{"messages": [{"role": "assistant", "content": "Hello! Ask me anything."}]}')
    result = chat(f"/load {saved}\n/retry\n/save {tmp_path / 'again.json'}\n".encode())
    assert result.exit_code == 0, result.stderr
    assert "(no reply to retry)" in result.stderr
    assert '"Hello! Ask me anything."' in (tmp_path / "again.json").read_text()


def test_old_exchanges_left_out_of_the_prompt_stay_in_the_history(tiny_profile: str) -> None:
    questions = [" ".join([f"the {animal} sat on the mat and looked at the door"] * 3) for animal in ("cat", "dog", "cow", "owl", "fox")]
    result = chat("".join(q + "\n" for q in questions).encode(), "--n-ctx", "128")
    assert result.exit_code == 0, result.stderr
    assert "oldest exchange" in result.stderr and "the history keeps them" in result.stderr
    assert contents()[0::2] == questions


def test_save_does_not_replace_a_file_it_did_not_write_without_force(tiny_profile: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    mine = tmp_path / "chat.json"
    result = chat(f"the cat\n/save {notes}\n/save {mine}\nthe dog\n/save {mine}\n/save {tmp_path}/\n".encode())
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    assert f"{notes} exists: /save --force {notes} replaces it" in result.stderr
    assert notes.read_text() == "my notes\n" and '"the dog"' in mine.read_text()  # saved twice: the second replaced the first
    assert "names a folder" in result.stderr
    forced = chat(f"/save --force {notes}\n".encode(), "--continue")
    assert forced.exit_code == 0, forced.stderr
    assert '"the dog"' in notes.read_text()


@pytest.mark.slow  # (a chat in a process of its own, 1 s)
def test_save_does_not_replace_a_file_someone_changed_since_this_chat_saved_it(tiny_profile: str,
                                                                               tmp_path: Path) -> None:
    """/save again to its own file replaced it without --force even where another program had written it since."""
    import subprocess

    mine = tmp_path / "chat.json"
    command = [sys.executable, "-m", "localspec", "chat", "-p", tiny_profile, "--max-tokens", "2", "--threads", "1"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               text=True)
    try:
        process.stdin.write(f"the cat\n/save {mine}\n")
        process.stdin.flush()
        while "(saved to" not in process.stderr.readline():
            assert process.poll() is None, "the chat ended before it saved"
        mine.write_text("my own notes\n")
        _, stderr = process.communicate(f"/save {mine}\n", timeout=60)
    finally:
        process.kill()
    assert process.returncode == 1 and f"{mine} changed since this chat saved it: /save --force" in stderr
    assert mine.read_text() == "my own notes\n"


def test_a_nul_in_a_path_and_a_message_that_starts_with_a_slash(tiny_profile: str) -> None:
    result = chat(b"/save a\x00b\n/format schema a\x00b\n//etc/hosts: what is it?\n/etc/hosts\n")
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    assert result.stderr.count("a path cannot hold a NUL character") == 2 and "Traceback" not in result.stderr
    assert "unknown command /etc/hosts" in result.stderr and len(replies(result.stderr)) == 1
    assert contents()[0] == "/etc/hosts: what is it?"


@pytest.mark.slow
def test_commands_take_a_tab_after_their_name_and_echo_no_control_characters(tiny_profile: str,
                                                                             tmp_path: Path) -> None:
    """(was: `/system<TAB>be brief` an unknown command "did you mean /system?", `/set foo` asked for a value,
    a typed escape sequence echoed raw, a loaded strategy needing a draft switched drafting off unsaid)"""
    saved = tmp_path / "wants-a-draft.json"
    saved.write_text('{"messages": [], "settings": {"speculative.strategy": "model"}}')
    typed = f"/system\tbe brief\n/set\ttop_k 3\n/HELP\n/set foo\n/\x1b]0;pwned\x07x\n/load {saved}\n"
    result = chat(typed.encode(), "--strategy", "ngram")
    assert "(system prompt set)" in result.stderr and "sampling.top_k = 3" in result.stderr
    assert "unknown command /HELP: did you mean /help?" in result.stderr
    assert "error: unknown setting 'foo'; /set lists them" in result.stderr
    assert "\x1b" not in result.stderr and "unknown command /\\x1b]0;pwned\\x07x" in result.stderr
    assert "no draft model is loaded: replies are target-only" in result.stderr.split("(loaded 0 messages")[1]


@pytest.mark.slow
def test_a_loaded_message_too_long_to_answer_is_said_with_how_to_drop_it(tiny_profile: str, tmp_path: Path) -> None:
    """(was: "shorten the message", which came from a file and cannot be edited in the chat)"""
    saved = tmp_path / "long.json"
    saved.write_text(json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]}))
    result = chat(f"/load {saved}\n/retry\n/undo\n".encode())
    assert "more than a context of" in result.stderr and "(/undo drops that message)" in result.stderr


def test_settings_changed_before_the_first_message_store_nothing(tiny_profile: str) -> None:
    result = chat(b"the cat\n/reset\n/set temperature 0.2\n/system Be brief.\n/undo\n")
    assert result.exit_code == 0, result.stderr
    store = HistoryStore(history_file())
    try:
        assert len(store.list()) == 1
    finally:
        store.close()


def test_history_shows_stored_text_exactly_and_safely_and_survives_other_programs_rows() -> None:
    from localspec.app.conversation import Conversation
    from localspec.settings import GenerationSettings

    store = HistoryStore(history_file())
    written = Conversation(GenerationSettings())
    written.add("user", "\nhello \x1b[31mred\x1b[0m and a backslash \\")
    written.add("assistant", "ok [bold]x[/bold] \u202eright to left")
    first = store.start(written)
    other = Conversation(GenerationSettings())
    other.add("user", "second")
    second = store.start(other)
    with store._db:  # rows another program could leave: a time out of range, settings that are not JSON, bytes
        store._db.execute("UPDATE conversations SET updated = 1e300, settings = 'not json' WHERE id = ?", (second,))
        store._db.execute("INSERT INTO messages (conversation, role, content) VALUES (?, 'user', ?)", (second, b"\xffblob"))
    store.close()
    shown = cli("history", "show", str(first))
    assert shown.exit_code == 0
    assert shown.stdout == ("user: \nhello \\x1b[31mred\\x1b[0m and a backslash \\\n"
                            "assistant: ok [bold]x[/bold] \\u202eright to left\n")  # (a bidi override reorders what follows)
    listed = cli("history", "list")
    assert listed.exit_code == 0 and "hello \\x1b[31mred" in listed.stdout and "\x1b" not in listed.stdout
    assert json.loads(cli("history", "list", "--json").stdout)[0]["updated"] is None
    damaged = cli("history", "show", str(second))  # (its messages shown all the same: they are the user's)
    assert damaged.exit_code == 0 and damaged.stdout.startswith("user: second\n")
    assert damaged.stderr.startswith(f"warning: conversation {second} is damaged (") and "not json" in damaged.stderr
    # A number past a float's range: read as infinity, which `--json` had written as Infinity (not JSON).
    store = HistoryStore(history_file())
    with store._db:
        store._db.execute("UPDATE conversations SET settings = '{\"sampling.temperature\": 1e999}' WHERE id = ?",
                          (first,))
    store.close()
    refused = cli("history", "show", str(first), "--json")
    assert refused.exit_code == 1 and refused.stdout == "" and "Traceback" not in refused.stderr
    assert refused.stderr.splitlines()[-1].startswith(f"error: conversation {first} is damaged: its settings hold a")
    assert cli("history", "show", str(first)).exit_code == 0  # (its messages are shown, with a warning)


def test_resuming_a_damaged_conversation_says_which_as_history_show_does(tiny_profile: str) -> None:
    assert chat(b"the cat\n").exit_code == 0
    store = HistoryStore(history_file())
    conversation_id = store.latest()
    with store._db:  # a role no chat writes, from another program
        store._db.execute("UPDATE messages SET role = 'wizard' WHERE conversation = ?", (conversation_id,))
    store.close()
    line = one_error_line(chat(b"", "--resume", str(conversation_id)), 1, f"conversation {conversation_id} is damaged",
                          "not a chat message")
    assert str(history_file()) in line
    shown = cli("history", "show", str(conversation_id))  # (shown all the same, with what chat --resume says of it)
    assert shown.exit_code == 0 and "wizard: the cat" in shown.stdout
    assert shown.stderr.startswith(f"warning: conversation {conversation_id} is damaged (")
    assert shown.stderr.rstrip().endswith("chat --resume cannot continue it")
    store = HistoryStore(history_file())
    with store._db:
        store._db.execute("UPDATE conversations SET settings = 'not json' WHERE id = ?", (conversation_id,))
    store.close()
    shown, resumed = cli("history", "show", str(conversation_id)), chat(b"", "--resume", str(conversation_id))
    assert shown.exit_code == 0 and "wizard: the cat" in shown.stdout  # (was: exit 1, no message shown)
    assert resumed.exit_code == 1 and "is damaged" in resumed.stderr
    store = HistoryStore(history_file())
    with store._db:  # Python's json reads NaN; JSON has no such number (`history show --json` would write it)
        store._db.execute("UPDATE conversations SET settings = 'NaN' WHERE id = ?", (conversation_id,))
    store.close()
    shown = cli("history", "show", "--json", str(conversation_id))  # (the text as stored, said to be damaged)
    assert shown.exit_code == 0 and json.loads(shown.stdout)["settings"] == "NaN" and "is damaged" in shown.stderr


def test_adding_to_a_conversation_removed_meanwhile_says_so() -> None:
    from localspec.app.conversation import Conversation, Message
    from localspec.settings import GenerationSettings

    chatting, other_shell = HistoryStore(history_file()), HistoryStore(history_file())
    try:
        conversation = Conversation(GenerationSettings())
        conversation.add("user", "the cat")
        kept = chatting.start(conversation)
        assert other_shell.remove(kept)
        for write in (lambda: chatting.add(kept, Message("assistant", "sat")), lambda: chatting.update(kept, conversation)):
            with pytest.raises(HistoryUnavailable, match=f"conversation {kept} was removed from the chat history"):
                write()
    finally:
        chatting.close()
        other_shell.close()


def test_a_chat_whose_conversation_was_removed_adds_nothing_more_to_the_memory(tiny_profile: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from localspec.app.memory import conversation_tag, stores_of

    add = HistoryStore.add

    def removed_after_the_first_exchange(self: HistoryStore, conversation_id: int, message) -> None:
        if message.content == "the dog":  # `history remove` in another shell, before the second message
            self.remove(conversation_id)
        add(self, conversation_id, message)

    monkeypatch.setattr(HistoryStore, "add", removed_after_the_first_exchange)
    result = chat(b"the cat\nthe dog\n", "--strategy", "ngram")
    assert result.exit_code == 0 and "no longer saved" in result.stderr
    documents = [document for store in stores_of() for document in store.documents()]
    assert [document["tag"] for document in documents] == [conversation_tag(1)]  # the first exchange only


def test_load_keeps_every_system_message_and_names_settings_it_ignores(tiny_profile: str, tmp_path: Path) -> None:
    saved = tmp_path / "chat.json"
    saved.write_text(json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                                              {"role": "system", "content": "Be kind."}],
                                 "settings": {"sampling.temprature": 0.5}}))
    utf16 = tmp_path / "utf16.json"
    utf16.write_bytes(saved.read_text().encode("utf-16"))
    result = chat(f"/load {saved}\n/load {utf16}\n".encode())
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    assert "setting 'sampling.temprature' is not known here: ignored (did you mean 'sampling.temperature'?)" in result.stderr
    assert f"error: {utf16}: is UTF-16, not UTF-8" in result.stderr
    assert stored()["messages"][0] == {"role": "system", "content": "Be brief.\n\nBe kind."}


class _LinesThatRunAHook(io.BytesIO):
    """Piped chat input that runs `hook` once, just before the line at `at` is read."""

    def __init__(self, data: bytes, at: int, hook) -> None:
        super().__init__(data)
        self.lines_read, self.at, self.hook = 0, at, hook

    def readline(self, *args) -> bytes:
        if self.lines_read == self.at:
            self.hook()
        self.lines_read += 1
        return super().readline(*args)


def test_two_chats_on_one_conversation_keep_both(tiny_profile: str) -> None:
    """A chat resumes conversation 1; meanwhile another chat resumes it too and adds an exchange:
    neither overwrites the other, and the first goes on as a new conversation that keeps its own turns."""
    assert chat(b"the cat\n").exit_code == 0

    def another_chat_writes() -> None:
        assert chat(b"the bird\n/undo\nthe fish\n", "--continue").exit_code == 0

    command = ["chat", "-p", "tiny", "--temperature", "0", "--max-tokens", "4", "--threads", "1", "--continue"]
    lines = _LinesThatRunAHook(b"the dog\n/undo\nthe cow\n", at=1, hook=another_chat_writes)
    result = CliRunner().invoke(main, command, input=lines, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert "conversation 1 was changed by another chat meanwhile; this chat goes on as conversation 2" in result.stderr
    store = HistoryStore(history_file())
    try:
        users = {c: [m["content"] for m in store.get(c)["messages"] if m["role"] == "user"] for c in (1, 2)}
    finally:
        store.close()
    assert users == {1: ["the cat", "the dog", "the fish"], 2: ["the cat", "the cow"]}


def test_a_store_writes_only_at_the_revision_it_knows(tmp_path: Path) -> None:
    import sqlite3

    from localspec.app.conversation import Conversation
    from localspec.app.history import ConversationChanged
    from localspec.settings import GenerationSettings

    path = tmp_path / "history.db"
    with sqlite3.connect(path) as old:  # a database from before revisions, with one conversation
        old.executescript("CREATE TABLE conversations (id INTEGER PRIMARY KEY, started REAL NOT NULL,"
                          " updated REAL NOT NULL, system TEXT, settings TEXT NOT NULL);"
                          "INSERT INTO conversations VALUES (1, 0, 0, NULL, '{}');")
    old.close()
    first, second = HistoryStore(path), HistoryStore(path)
    try:
        assert first.get(1) is not None and second.get(1) is not None
        first.add(1, Conversation(GenerationSettings()).add("user", "from the first"))
        with pytest.raises(ConversationChanged):
            second.add(1, Conversation(GenerationSettings()).add("user", "from the second"))
        with pytest.raises(ConversationChanged):
            second.update(1, Conversation(GenerationSettings()))
        assert [m["content"] for m in second.get(1)["messages"]] == ["from the first"]  # reading catches up
        second.add(1, Conversation(GenerationSettings()).add("user", "from the second"))
        with pytest.raises(ConversationChanged):
            first.update(1, Conversation(GenerationSettings()))
        assert [m["content"] for m in first.get(1)["messages"]] == ["from the first", "from the second"]
        # Another program (an older localspec) writes without knowing of revisions: the triggers count it.
        with sqlite3.connect(path) as other:
            other.execute("INSERT INTO messages (conversation, role, content) VALUES (1, 'user', 'from elsewhere')")
        other.close()
        with pytest.raises(ConversationChanged):
            first.add(1, Conversation(GenerationSettings()).add("user", "lost?"))
        # A removed conversation's id given to a new one: a store that knew the old one does not write into it.
        first.get(1)
        second.remove(1)
        assert second.start(Conversation(GenerationSettings())) == 1
        with pytest.raises(ConversationChanged):
            first.update(1, Conversation(GenerationSettings()))
    finally:
        first.close()
        second.close()


def test_a_command_that_takes_nothing_refuses_words_after_it(tiny_profile: str) -> None:
    """`/reset the story` is more likely a message than a reset: said, and nothing reset, undone or left."""
    result = chat(b"the cat\n/reset the story\n/undo x\n/exit now\nthe dog\n")
    assert result.exit_code == 1, result.stderr  # (an error said: a script learns of it)
    for name in ("/reset", "/undo", "/exit"):
        assert f"error: {name} takes nothing after it" in result.stderr
    assert len(replies(result.stderr)) == 2  # both messages answered: the chat neither reset nor left
    assert contents()[0] == "the cat"


def test_a_multiline_block_is_a_message_whatever_its_first_line_starts_with(tiny_profile: str) -> None:
    """A pasted block whose first line starts with "/" was run as a command ("unknown command /etc/hosts"), and
    `/exit` inside a block left the chat: text between the \"\"\" lines is always one message."""
    block = '"""\n/etc/hosts looks like this:\n127.0.0.1 localhost\n"""\n"""\n/exit\n"""\n/stats\n/exit\n'
    result = chat(block.encode())
    assert result.exit_code == 0, result.stderr
    assert "unknown command" not in result.stderr
    users = [m["content"] for m in stored()["messages"] if m["role"] == "user"]
    assert users == ["/etc/hosts looks like this:\n127.0.0.1 localhost", "/exit"]
    assert "last reply: " in result.stderr  # /stats ran after the second block


def test_control_characters_of_a_reply_are_shown_as_escapes_and_kept_in_the_history(tiny_profile: str) -> None:
    """A reply held to a regex of an OSC sequence: shown raw, it retitled the terminal; `history show` escaped it."""
    result = chat(b"/format regex \\x1b\\]0;PWNED\\x07ok\nhi\n/exit\n", "--max-tokens", "16", "--no-highlight")
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\\x1b]0;PWNED\\x07ok" in result.stdout
    assert stored()["messages"][-1]["content"] == "\x1b]0;PWNED\x07ok"


@pytest.mark.parametrize("environment, coloured", [({}, True), ({"NO_COLOR": "1"}, False), ({"TERM": "dumb"}, False),
                                                   ({"NO_COLOR": ""}, True)])  # (no-color.org: an empty one is unset)
def test_colour_goes_only_to_a_terminal_that_takes_it(monkeypatch: pytest.MonkeyPatch, environment: dict,
                                                      coloured: bool) -> None:
    """TERM=dumb shows escape sequences as they are: chat coloured drafted text and its statistics line there."""
    import io

    from localspec.cli.common import terminal_takes_colour

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert terminal_takes_colour(Terminal()) is coloured
    assert terminal_takes_colour(io.StringIO()) is False


def test_ctrl_d_typed_while_a_reply_is_written_ends_the_chat_and_a_line_typed_ahead_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a reply is written the terminal is not read: a Ctrl-D typed then was lost (the chat waited on)."""
    import io

    from localspec.cli.chat import _end_of_input_typed_ahead

    leader, follower = os.openpty()  # (a terminal in its usual line mode, as between two prompts)
    try:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.FileIO(follower, closefd=False)))
        assert not _end_of_input_typed_ahead()  # nothing typed
        os.write(leader, b"next message\n")
        assert not _end_of_input_typed_ahead() and os.read(follower, 100) == b"next message\n"  # left for the prompt
        os.write(leader, b"\x04")  # Ctrl-D on an empty line
        assert _end_of_input_typed_ahead()
        assert not _end_of_input_typed_ahead()  # (consumed)
    finally:
        os.close(leader)
        os.close(follower)


@pytest.fixture
def restored_signals() -> Iterator[None]:
    """The test process's SIGTERM and SIGHUP handlers back as they were after a chat run in it installed its own."""
    import signal

    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGHUP"])
def test_a_chat_ended_by_a_signal_mid_reply_keeps_the_reply_and_retry_answers_a_message_left_without_one(
        tiny_profile: str, monkeypatch: pytest.MonkeyPatch, signal_name: str, tmp_path: Path) -> None:
    """Killed mid-reply (a closed terminal, `kill`), a chat lost the reply and kept the message alone: `/retry`
    found no reply to redo, and the next message made two user turns in a row (which alternating templates
    refuse). Now the reply is kept as Ctrl-C keeps it and the chat ends as the signal asks; and `/retry`
    answers a last message that has no reply."""
    import signal

    from localspec.cli.chat import ChatLoop

    stream = ChatLoop._stream
    chunks = []

    def signalled_after_the_first_chunk(self, chunk):
        stream(self, chunk)
        chunks.append(chunk)
        if len(chunks) == 1:
            os.kill(os.getpid(), getattr(signal, signal_name))

    monkeypatch.setattr(ChatLoop, "_stream", signalled_after_the_first_chunk)
    ended = chat(b"the cat\nthe dog\n", "--max-tokens", "8")
    assert ended.exit_code == 128 + getattr(signal, signal_name), ended.stderr
    assert "(reply interrupted; kept as far as it got)" in ended.stderr
    assert [m["role"] for m in stored()["messages"]] == ["user", "assistant"]  # ("the dog" was never read)
    monkeypatch.setattr(ChatLoop, "_stream", stream)
    # A message left without its reply (a file that ends with one, or a chat killed before it began).
    conversation = stored()
    conversation["messages"] = conversation["messages"][:1]
    saved = tmp_path / "left.json"
    saved.write_text(json.dumps(conversation))
    answered = chat(f"/load {saved}\n/retry\n/retry 5\n/retry\n".encode())
    assert answered.exit_code == 0, answered.stderr
    assert [line.split("seed ")[1] for line in replies(answered.stderr)][1:] == ["5 (coupled)", "6 (coupled)"]
    assert [m["role"] for m in stored()["messages"]] == ["user", "assistant"]


def test_ctrl_c_during_a_slow_command_cancels_the_command_not_the_chat(tiny_profile: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from localspec.cli.chat import ChatLoop

    def interrupted(self, argument):
        raise KeyboardInterrupt

    monkeypatch.setattr(ChatLoop, "cmd_load", interrupted)
    result = chat(b"/load big.json\nthe cat\n")
    assert result.exit_code == 0, result.stderr
    assert "(/load interrupted)" in result.stderr and len(replies(result.stderr)) == 1


def test_a_system_prompt_that_cannot_fit_is_refused_when_set(tiny_profile: str) -> None:
    """It was taken ("(system prompt set)"), and every message after it failed."""
    result = chat(b"/system " + b"the cat sat " * 60 + b"\n/system " + b"the cat sat " * 400
                  + b"\n/system be brief\nthe cat\n")
    assert result.exit_code == 1, result.stderr  # (a script learns that a command failed)
    assert "error: the system prompt does not fit the context (" in result.stderr  # (its tokens counted)
    assert "raise --n-ctx" not in result.stderr  # (the tiny models take no more than their 256 tokens)
    assert "error: the system prompt is 4799 bytes, more than a context" in result.stderr  # (too long to count)
    assert "(system prompt set)" in result.stderr and len(replies(result.stderr)) == 1
    assert stored()["messages"][0]["content"] == "be brief"


def test_a_chat_emptied_by_undo_leaves_no_conversation_nor_its_tokens(tiny_profile: str) -> None:
    from localspec.app.memory import conversation_tag, stores_of

    result = chat(b"the cat\n/undo\n", "--strategy", "ngram")
    assert result.exit_code == 0 and "(last exchange dropped)" in result.stderr, result.stderr
    assert json.loads(cli("history", "list", "--json").stdout or "[]") == []  # (was: conversation 1, no message)
    assert [document for store in stores_of() for document in store.documents()] == []
    again = chat(b"the cat\n/undo\nthe dog\n", "--strategy", "ngram")  # stored again, as a new conversation
    assert again.exit_code == 0, again.stderr
    assert [m["content"] for m in stored()["messages"]][0] == "the dog"
    tags = {document["tag"] for store in stores_of() for document in store.documents()}
    assert tags == {conversation_tag(json.loads(cli("history", "list", "--json").stdout)[0]["id"])}


def test_chat_commands_expand_variables_in_file_names_as_a_shell_would(tiny_profile: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATS", str(tmp_path))
    monkeypatch.delenv("NO_SUCH_VARIABLE_HERE", raising=False)
    (tmp_path / "person.json").write_text('{"type": "object"}')
    script = (b"the cat\n/save $CHATS/a.json\n/load ${CHATS}/a.json\n/format schema $CHATS/person.json\n"
              b"/save $NO_SUCH_VARIABLE_HERE/b.json\n")
    result = chat(script)
    assert (tmp_path / "a.json").is_file() and "loaded 2 messages" in result.stderr, result.stderr
    assert "(format: JSON schema" in result.stderr
    assert "error: $NO_SUCH_VARIABLE_HERE/b.json: $NO_SUCH_VARIABLE_HERE is not set in this environment" in result.stderr
