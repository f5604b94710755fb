"""`localspec chat` driven through stdin, as a person piping a conversation would."""

from __future__ import annotations

import os
import subprocess
import sys
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
    assert result.returncode == 0
    assert "acceptance" in stderr and "(conversation cleared)" in stderr and "unknown command /nonsense" in stderr
    assert "\x1b[36m" in result.stdout.decode()  # drafted-and-kept text is coloured
    plain = chat("Hello\n", *pair, "--no-highlight")
    assert "\x1b[" not in plain.stdout.decode()


def test_a_turn_too_long_for_the_context_is_refused_and_the_chat_goes_on(pair: list[str]) -> None:
    long_turn = "word " * 400
    result = chat(f"{long_turn}\nHello\n", *pair, "--n-ctx", "256")
    assert result.returncode == 0
    assert "prompt is" in result.stderr.decode() and "/reset" in result.stderr.decode()
    assert result.stdout.decode().strip()  # the second turn was answered
