"""`localspec chat` driven through stdin, as a person piping a conversation would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def chat(stdin: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localspec", "chat", "--temperature", "0", "--max-tokens", "24", *args],
        input=stdin.encode(), capture_output=True, timeout=300, env=dict(os.environ),
    )


@pytest.fixture
def pair(smollm_f32: Path, smollm_q4_1: Path) -> list[str]:
    return ["--target", str(smollm_f32), "--draft", str(smollm_q4_1)]


def test_second_turn_carries_the_history(pair: list[str]) -> None:
    result = chat("My name is Ada.\nWhat is my name?\n", *pair, "--stats")
    assert result.returncode == 0, result.stderr
    summaries = [line for line in result.stderr.decode().splitlines() if "tok/target pass" in line]
    assert len(summaries) == 2
    # "[eos] N tokens, ..., prompt P tok in ...": the second prompt holds the first turn and its reply.
    (first_reply, first_prompt), (_, second_prompt) = [
        (int(line.split("] ")[1].split(" tokens")[0]), int(line.split("prompt ")[1].split(" tok")[0])) for line in summaries
    ]
    assert second_prompt > first_prompt + first_reply


def test_same_replies_as_run_for_a_single_turn(pair: list[str]) -> None:
    via_chat = chat("Why is the sky blue?\n", *pair).stdout.decode().strip()
    via_run = subprocess.run(
        [sys.executable, "-m", "localspec", "run", "--temperature", "0", "--max-tokens", "24", *pair, "Why is the sky blue?"],
        capture_output=True, timeout=300,
    ).stdout.decode().strip()
    assert via_chat == via_run and via_chat


def test_commands_and_highlighting(pair: list[str]) -> None:
    result = chat("Hello\n/stats\n/reset\n/nonsense\nHello\n", *pair, "--highlight")
    stderr = result.stderr.decode()
    assert result.returncode == 1  # (/nonsense: an error said, the chat went on)
    assert "acceptance" in stderr and "(new conversation)" in stderr and "unknown command /nonsense" in stderr
    assert "\x1b[36m" in result.stdout.decode()  # drafted-and-kept text is coloured
    plain = chat("Hello\n", *pair, "--no-highlight")
    assert "\x1b[" not in plain.stdout.decode()


def test_a_turn_too_long_for_the_context_is_refused_and_the_chat_goes_on(pair: list[str]) -> None:
    long_turn = "word " * 400
    result = chat(f"{long_turn}\nHello\n", *pair, "--n-ctx", "256")
    assert result.returncode == 1  # (the refused turn: a script learns of it)
    assert "does not fit the context" in result.stderr.decode()
    assert result.stdout.decode().strip()  # the second turn was answered


# -- in a pseudo-terminal, as a person types ---------------------------------------------------

PROMPT = "> "


def terminal_chat(pair: list[str], *args: str, env: dict | None = None):
    import pexpect

    child = pexpect.spawn(
        sys.executable, ["-m", "localspec", "chat", "--temperature", "0", "--max-tokens", "40", *pair, *args],
        env={**os.environ, "NO_COLOR": "1", "TERM": "dumb", **(env or {})}, encoding="utf-8", timeout=120, dimensions=(40, 200),
    )
    child.expect_exact("Ctrl-D to leave")
    if (env or {}).get("TERM", "dumb") == "dumb":
        child.expect_exact(PROMPT)
    return child


def say(child, text: str) -> str:
    """Type a line and return everything printed until the next prompt."""
    child.sendline(text)
    child.expect_exact(PROMPT)
    return child.before


def test_two_turns_reuse_the_cache_and_the_first_equals_run(pair: list[str]) -> None:
    child = terminal_chat(pair)
    first = say(child, "Why is the sky blue?")
    say(child, "Say that again in five words.")
    stats = say(child, "/stats")
    evaluated, history = [int(x) for x in stats.split("evaluated this turn: ")[1].split(" in the history")[0].split(" of ")]
    assert evaluated < history / 2  # the first turn and its reply came from the cache
    child.sendline("/exit")
    child.expect(pexpect_eof())
    child.close()
    assert child.exitstatus == 0
    via_run = subprocess.run(
        [sys.executable, "-m", "localspec", "run", "--temperature", "0", "--max-tokens", "40", *pair, "Why is the sky blue?"],
        capture_output=True, timeout=300,
    ).stdout.decode().strip()
    assert via_run and via_run in first.replace("\r\n", "\n")


def reply_of(output: str, typed: str) -> str:
    """The reply in what the terminal showed after typing `typed`: the echo and the statistics line left out."""
    lines = output.split(typed, 1)[-1].replace("\r", "").strip().splitlines()
    return "\n".join(line for line in lines if not line.startswith("[")).strip()


def pexpect_eof():
    import pexpect

    return pexpect.EOF


def test_ctrl_c_stops_a_reply_and_the_chat_goes_on(pair: list[str], tmp_path: Path) -> None:
    child = terminal_chat(pair)
    say(child, "/set max_tokens 400")
    child.sendline("Write a very long story about a dragon and a knight.")
    # Ctrl-C once the reply is streaming: sent earlier, prompt_toolkit may still hold the
    # terminal in raw mode and read it as a key (typeahead) instead of a signal.
    child.expect_exact("knight.")  # the echo of the typed line
    child.expect(r"[A-Za-z]{2,}")  # the reply's first word
    time.sleep(0.5)
    child.sendintr()
    child.expect_exact("interrupted")
    child.expect_exact(PROMPT)
    answer = say(child, "Name one colour.")
    assert answer.strip()
    # The next turn evaluated only what was new: the history before the interrupt stayed cached.
    evaluated, in_history = map(int, re.search(r"evaluated this turn: (\d+) of (\d+)", say(child, "/stats")).groups())
    assert 0 < evaluated < in_history / 2
    refused = say(child, "/save /dev/null")
    assert "not a regular file" in refused
    say(child, f"/save {tmp_path / 'chat.json'}")
    assert '"interrupted": true' in (tmp_path / "chat.json").read_text()
    child.sendline("/exit")
    child.expect(pexpect_eof())


def test_retry_at_temperature_0_gives_the_same_reply(pair: list[str]) -> None:
    child = terminal_chat(pair, "--temperature", "0.9")
    say(child, "/set temperature 0")
    first = reply_of(say(child, "Name three fruits."), "Name three fruits.")
    again = reply_of(say(child, "/retry"), "/retry")
    assert first and first == again
    child.sendline("/exit")
    child.expect(pexpect_eof())


def test_save_load_continue_and_input_history(pair: list[str], tmp_path: Path) -> None:
    saved = tmp_path / "conversation.json"
    child = terminal_chat(pair)
    say(child, "My favourite animal is the otter.")
    say(child, f"/save {saved}")
    child.sendline("/exit")
    child.expect(pexpect_eof())
    assert '"otter' in saved.read_text() or "otter" in saved.read_text()

    child = terminal_chat(pair)
    loaded = say(child, f"/load {saved}")
    assert "loaded 2 messages" in loaded
    child.sendline("/exit")
    child.expect(pexpect_eof())

    child = terminal_chat(pair, "--continue", env={"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"})
    assert "resumed" in child.before  # the latest conversation: the one /load started
    time.sleep(1)
    child.send("\x1b[A")  # Up arrow: the last line typed, from an earlier session
    child.expect_exact("/exit")
    child.send("\r")  # and it runs
    child.expect(pexpect_eof())
    child.close()
    assert child.exitstatus == 0


def test_a_small_context_drops_old_turns_and_keeps_going(pair: list[str]) -> None:
    child = terminal_chat(pair, "--n-ctx", "256", "--max-tokens", "60")
    dropped = ""
    for question in ("Tell me about rivers.", "Tell me about mountains.", "Tell me about forests.", "Tell me about deserts."):
        dropped += say(child, question)
    assert "oldest exchange" in dropped
    assert say(child, "Thanks!").strip()
    child.sendline("/exit")
    child.expect(pexpect_eof())


def test_multi_line_messages_and_a_broken_history_database(pair: list[str]) -> None:
    from localspec.config.paths import history_file

    history_file().parent.mkdir(parents=True, exist_ok=True)
    history_file().write_bytes(b"not a database" * 100)
    result = chat('"""\nRepeat these two lines:\nred apple\n"""\n/save /dev/null\nBye\n', *pair)
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr  # (/save /dev/null is refused)
    assert stderr.count("is not saved") == 1  # said once, and the chat went on
    assert "not a regular file" in stderr
    assert len([line for line in stderr.splitlines() if line.startswith("[")]) == 2  # two replies: the multi-line message was one
