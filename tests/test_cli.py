"""`localspec run` driven as a real process: streaming, stdin, --json, stops, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import write_unloadable_model

pytestmark = pytest.mark.slow


def localspec(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localspec", *args],
        input=stdin.encode() if stdin is not None else None,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


@pytest.fixture
def pair_args(smollm_f32: Path, smollm_q4_1: Path) -> list[str]:
    return ["--target", str(smollm_f32), "--draft", str(smollm_q4_1), "--temperature", "0"]


def test_run_on_the_demo_default_derives_the_target_once(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    first = localspec("run", "--max-tokens", "8", "--stats", "Why is the sky blue?", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip()
    assert b"preparing the demo target" in first.stderr
    # The stats line, and the pair loaded (8 tokens are too few to pay for the draft model's reading of the prompt).
    assert b" tok/s, prompt " in first.stderr and b"draft: 31 layers" in first.stderr
    cached = tmp_path / "localspec" / "SmolLM2-135M-Instruct.F32.gguf"
    assert cached.is_file() and not list(tmp_path.glob("localspec/.*partial"))
    second = localspec("run", "--max-tokens", "8", "Hello", env=env)
    assert second.returncode == 0 and b"preparing" not in second.stderr


def test_prompt_from_argument_and_stdin_agree(pair_args: list[str]) -> None:
    from_arg = localspec("run", *pair_args, "--max-tokens", "16", "Name three colours.")
    from_stdin = localspec("run", *pair_args, "--max-tokens", "16", stdin="Name three colours.")
    from_dash = localspec("run", *pair_args, "--max-tokens", "16", "-", stdin="Name three colours.")
    assert from_arg.returncode == from_stdin.returncode == from_dash.returncode == 0
    assert from_arg.stdout and from_arg.stdout == from_stdin.stdout == from_dash.stdout


def test_json_report_schema_and_consistency(pair_args: list[str]) -> None:
    # A fixed draft length drafts whatever the budget (an adaptive one may judge 20 tokens too few to pay
    # for the draft model's reading of the prompt, and report no acceptance).
    result = localspec("run", *pair_args, "--max-tokens", "20", "--draft-max", "8", "--json", "Why is the sky blue?")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) >= {"text", "tokens", "stop_reason", "model", "settings", "stats"}
    assert report["stop_reason"] in {"eos", "length", "stop"}
    stats = report["stats"]
    assert stats["tokens_generated"] == len(report["tokens"]) == 20
    assert stats["tokens_per_second"] > 0 and 0 <= stats["acceptance_rate"] <= 1
    for key in ("draft_tokens_proposed", "draft_tokens_accepted", "mean_accepted_length", "target_passes",
                "per_position_acceptance", "prompt_seconds", "generation_seconds"):
        assert key in stats
    assert report["model"]["draft"].endswith(".gguf")
    assert report["settings"]["sampling"]["temperature"] == 0
    assert isinstance(report["settings"]["seed"], int)
    streamed = localspec("run", *pair_args, "--max-tokens", "20", "Why is the sky blue?")
    assert streamed.stdout.decode() == report["text"]


def test_no_speculative_gives_identical_greedy_text(pair_args: list[str]) -> None:
    spec = localspec("run", *pair_args, "--max-tokens", "40", "--json", "Explain recursion.")
    base = localspec("run", *pair_args, "--max-tokens", "40", "--json", "--no-speculative", "Explain recursion.")
    spec_report, base_report = json.loads(spec.stdout), json.loads(base.stdout)
    assert spec_report["tokens"] == base_report["tokens"]
    assert base_report["stats"]["draft_tokens_proposed"] == 0 and base_report["model"]["draft"] is None


def test_raw_mode_skips_the_chat_template(pair_args: list[str]) -> None:
    chat = json.loads(localspec("run", *pair_args, "--max-tokens", "1", "--json", "Hello").stdout)
    raw = json.loads(localspec("run", *pair_args, "--max-tokens", "1", "--json", "--raw", "Hello").stdout)
    assert raw["stats"]["prompt_tokens"] == 1  # "Hello" is one token; the template adds many
    assert chat["stats"]["prompt_tokens"] > 10


def test_stop_string_cuts_the_text_and_reports_stop(pair_args: list[str]) -> None:
    full = json.loads(localspec("run", *pair_args, "--max-tokens", "60", "--json", "Count from 1 to 20.").stdout)
    assert "5" in full["text"]
    cut = json.loads(localspec("run", *pair_args, "--max-tokens", "60", "--json", "--stop", "5", "Count from 1 to 20.").stdout)
    assert cut["stop_reason"] == "stop"
    assert cut["text"] == full["text"].split("5")[0]


def test_max_tokens_one_and_zero(pair_args: list[str]) -> None:
    report = json.loads(localspec("run", *pair_args, "--max-tokens", "1", "--json", "Hi").stdout)
    assert len(report["tokens"]) == 1 and report["stop_reason"] == "length"
    refused = localspec("run", *pair_args, "--max-tokens", "0", "--json", "Hi")  # a run for nothing is a mistake
    assert refused.returncode == 2 and refused.stdout == b""
    assert refused.stderr.decode().strip().splitlines() == ["error: Invalid value for '--max-tokens': 0 is not in the range x>=1."]


def test_multibyte_utf8_is_streamed_intact(pair_args: list[str]) -> None:
    prompt = "Write the French words café, crème brûlée and naïve, then the Japanese word 日本語."
    streamed = localspec("run", *pair_args, "--max-tokens", "60", prompt)
    report = json.loads(localspec("run", *pair_args, "--max-tokens", "60", "--json", prompt).stdout)
    text = streamed.stdout.decode("utf-8")  # raises if a character was split
    assert text == report["text"]
    assert any(ord(ch) > 127 for ch in text)
    assert "\ufffd" not in text


# -- bad input: one line on stderr, exit 2 or 1, no traceback -------------------------------


def assert_clean_error(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    stderr = result.stderr.decode()
    assert result.returncode == code, stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_missing_target_file(tmp_path: Path) -> None:
    assert_clean_error(localspec("run", "--target", str(tmp_path / "nope.gguf"), "hi"), 2, "no such file")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    assert_clean_error(localspec("run", "--target", str(tmp_path), "hi"), 2, "is a directory")


def test_non_gguf_file(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_text("this is not a model\n")
    assert_clean_error(localspec("run", "--target", str(bogus), "hi"), 2, "not a GGUF file")


def test_truncated_gguf_is_refused_before_loading(tmp_path: Path, smollm_q4_1: Path) -> None:
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(smollm_q4_1.read_bytes()[: 20_000_000])
    result = localspec("run", "--verbose", "--target", str(truncated), "hi")
    assert_clean_error(result, 2, "truncated")


def test_incompatible_draft_is_refused_before_loading(tiny_pair: tuple[Path, Path], smollm_f32: Path) -> None:
    result = localspec("run", "--verbose", "--target", str(smollm_f32), "--draft", str(tiny_pair[0]), "hi")
    line = assert_clean_error(result, 2, "cannot draft", "tokenizer model check failed")
    assert "'gpt2'" in line and "'llama'" in line


def test_a_gguf_llama_cpp_cannot_load_gives_its_reason(tmp_path: Path) -> None:
    path = write_unloadable_model(tmp_path / "odd.gguf")
    assert_clean_error(localspec("run", "--target", str(path), "--raw", "hi"), 1, "could not load",
                       "unknown model architecture")  # (--raw: without a chat template it is refused before loading)


def test_prompt_longer_than_the_context(pair_args: list[str]) -> None:
    result = localspec("run", *pair_args, "--n-ctx", "256", "--raw", "word " * 400)
    assert_clean_error(result, 1, "prompt is", "context holds")


def test_no_prompt_at_all_is_a_usage_error() -> None:
    # With stdin not a terminal and empty, there is no prompt text.
    result = localspec("run")
    assert result.returncode == 2 and b"Traceback" not in result.stderr
    assert b"the prompt is empty" in result.stderr


def test_draft_without_target_is_a_usage_error(smollm_q4_1: Path) -> None:
    assert_clean_error(localspec("run", "--draft", str(smollm_q4_1), "hi"), 2, "--draft needs --target")


def test_bench_compares_both_sides_on_the_same_prompts(pair_args: list[str]) -> None:
    paths = pair_args[:4]  # --target T --draft D
    result = localspec("bench", *paths, "--prompts", "2", "--max-tokens", "16", "--draft-max", "8", "--temperatures", "0,1",
                       "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    greedy, sampled = report["results"]
    assert greedy["identical_prompts"] == 2 and greedy["runs"] == 2  # temperature 0: same tokens both ways
    for entry in (greedy, sampled):
        assert entry["speculative_tokens_per_second"] > 0 and entry["baseline_tokens_per_second"] > 0
        assert entry["speedup"] == pytest.approx(entry["speculative_tokens_per_second"] / entry["baseline_tokens_per_second"])
        assert 0 < entry["acceptance_rate"] <= 1
    assert b"prompt 2:" in result.stderr


def test_bench_needs_a_draft(smollm_f32: Path) -> None:
    result = localspec("bench", "--target", str(smollm_f32), "--prompts", "1")
    assert result.returncode == 2 and b"no draft model" in result.stderr


def test_bench_needs_two_tokens_to_measure_a_speed(smollm_f32: Path) -> None:
    result = localspec("bench", "--target", str(smollm_f32), "--prompts", "1", "--max-tokens", "1")
    assert result.returncode == 2 and result.stderr.decode().startswith("error: --max-tokens must be 2 or more")


def test_same_seed_same_text_with_and_without_speculation(pair_args: list[str]) -> None:
    """The README's promise on the defaults (hybrid, adaptive length, coupled verification), at T=0.8."""
    args = ["run", *pair_args, "--seed", "42", "--temperature", "0.8", "--max-tokens", "40", "Write a short poem about the sea."]
    runs = [localspec(*args), localspec(*args), localspec(*args, "--no-speculative")]
    texts = [run.stdout for run in runs]
    assert texts[0] and texts[0] == texts[1] == texts[2], [run.stderr for run in runs]
    rejection = localspec(*args, "--verify", "rejection", "--json")
    assert json.loads(rejection.stdout)["settings"]["speculative"]["verify"] == "rejection"
