"""The benchmark and profiling scripts run end to end on the tiny models (their figures are for the notes)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_helpers import run_script, script_module


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_per_pass_profile_splits_each_pass_into_its_parts(tiny_pair: tuple[Path, Path]) -> None:
    target, draft = tiny_pair
    result = run_script("profile_passes", "--target", str(target), "--draft", str(draft), "--raw", "--prompts", "2",
                        "--tokens", "24", "--strategy", "model", "--draft-max", "4", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(row["temperature"], row["mode"]) for row in rows] == [
        (0.0, "speculative"), (0.0, "target-only"), (0.8, "speculative"), (0.8, "target-only")]
    for row in rows:
        parts = row["ms_per_pass_by_part"]
        assert row["target_passes"] > 0 and parts["llama_decode (target)"] > 0
        # The parts add up to the pass (the rest is what no timer covers, never negative).
        assert sum(parts.values()) >= row["ms_per_pass"] * 0.99 and min(parts.values()) >= 0
        assert (parts["llama_decode (draft)"] > 0) == (row["mode"] == "speculative")
        assert 0 <= row["python_share"] < 1


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_per_pass_profile_reports_the_memory_lookups(tiny_pair: tuple[Path, Path]) -> None:
    target, draft = tiny_pair
    result = run_script("profile_passes", "--target", str(target), "--draft", str(draft), "--raw", "--prompts", "2",
                        "--tokens", "24", "--strategy", "hybrid", "--temperatures", "0", "--memory", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    speculative, alone = json.loads(result.stdout)
    assert speculative["memory_lookups_per_pass"] > 0 and speculative["memory_ms_per_lookup"] > 0
    assert speculative["ms_per_pass_by_part"]["memory lookups"] > 0
    assert alone["memory_lookups_per_pass"] == 0 and alone["memory_ms_per_lookup"] is None


def test_replayed_lengths_keep_drafts_while_the_draft_agrees_with_the_output() -> None:
    replay = script_module("replay_lengths")
    # Ten tokens; the draft's draw differs from the output at position 4 only.
    path = replay.RecordedPath(output=list(range(10)), drafted=[0, 1, 2, 3, 99, 5, 6, 7, 8, 9], confidence=[0.9] * 10)
    assert path.kept_from(0, 3) == 3 and path.kept_from(0, 8) == 4 and path.kept_from(4, 2) == 0
    costs = replay.Costs({n: 0.010 + 0.001 * n for n in range(1, 34)}, draft_step=0.002, first_step=0.003)
    rate, passes = replay.replay_fixed([path], costs, 4)
    # Two passes: drafts 0-3 kept and the target's own token at 4 (where the draft would have differed), then 5-8 and 9.
    assert passes == 2 and rate == pytest.approx(10 / (2 * costs.pass_cost(4)))
    rate, controller = replay.replay_adaptive([path], costs, replay.AdaptiveLength)
    assert rate > 0 and controller.passes >= 2


@pytest.mark.slow  # over a third of a second: a subprocess
def test_replay_lengths_names_a_bad_model_file_in_one_line(tmp_path: Path) -> None:
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("not a model")
    result = run_script("replay_lengths", "--target", str(not_gguf), "--draft", str(not_gguf), timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"replay_lengths: {not_gguf}")


@pytest.mark.slow
def test_replay_lengths_runs_on_the_tiny_pair(tiny_pair: tuple[Path, Path]) -> None:
    target, draft = tiny_pair
    result = run_script("replay_lengths", "--target", str(target), "--draft", str(draft), "--raw", "--prompts", "2",
                        "--tokens", "16", "--fixed", "2,4", "--json", timeout=180)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"costs_ms", "T=0", "T=0.8"} and report["costs_ms"]["draft_step"] > 0
    for temperature in ("T=0", "T=0.8"):
        policies = report[temperature]["policies"]
        assert set(policies) == {"fixed 2", "fixed 4", "adaptive (warm)", "adaptive (priors)", "adaptive (costs known)",
                                 "adaptive (borrowed)"}
        assert max(policies[name]["of_best_fixed"] for name in ("fixed 2", "fixed 4")) == pytest.approx(1.0)
        assert all(row["tokens_per_second"] > 0 for row in policies.values())


@pytest.mark.slow
def test_memory_bench_runs_every_arm_on_the_same_text(tiny_profile: str) -> None:
    result = run_script("bench_memory", "-p", tiny_profile, "--workloads", "code,ordinary", "--max-tokens", "12",
                        "--threads", "1", "--json")
    assert result.returncode == 0, result.stderr
    code, ordinary = json.loads(result.stdout)
    assert code["identical"] == code["requests"] == 10 and ordinary["identical"] == ordinary["requests"] == 8
    assert set(code["tokens_per_second"]) == {"target-only", "hybrid", "hybrid + memory", "ngram", "ngram + memory"}
    assert code["memory"]["lookups"] > 0 and "hybrid + memory / hybrid" in code["ratios"]


# The end of llama-speculative-simple's stderr (llama.cpp as vendored in llama-cpp-python 0.3.36).
SPECULATIVE_SIMPLE_OUTPUT = """\
0.09.124.208 I common_speculative_init_result: loading draft model 'SmolLM2-135M-Instruct.Q4_1.gguf'
0.30.259.392 I encoded   36 tokens in    2.862 seconds, speed:   12.579 t/s
0.30.259.410 I decoded   25 tokens in    4.062 seconds, speed:    6.154 t/s
0.30.259.438 I n_draft   = 8
0.30.259.451 I n_predict = 25
0.30.259.464 I n_drafted = 28
0.30.259.477 I n_accept  = 21
0.30.259.492 I accept    = 75.000%
0.30.259.605 I common_perf_print:    sampling time =       2.66 ms
0.30.259.637 I common_perf_print:        load time =    8633.56 ms
0.30.259.652 I common_perf_print: prompt eval time =   12908.62 ms /    69 tokens (  187.08 ms per token,     5.35 tokens per second)
"""


def test_compare_llamacpp_reads_llamacpp_timings_and_pairs_ratios() -> None:
    compare = script_module("compare_llamacpp")
    report = compare.parse_llamacpp_output(SPECULATIVE_SIMPLE_OUTPUT)
    assert (report.tokens_generated, report.generation_seconds, report.tokens_per_second) == (25, 4.062, 6.154)
    assert (report.prompt_tokens, report.prompt_seconds, report.load_seconds) == (36, 2.862, 8.63356)
    assert (report.drafted, report.accepted) == (28, 21)
    with pytest.raises(compare.CompareError):
        compare.parse_llamacpp_output("llama-speculative-simple: error: invalid argument")
    # Per prompt the ratio is paired run by run; the interval is over prompts (Student's t, 1 degree of freedom).
    ours = {(0, 0): 20.0, (0, 1): 20.0, (1, 0): 30.0, (1, 1): 30.0}
    theirs = {(0, 0): 10.0, (0, 1): 10.0, (1, 0): 30.0, (1, 1): 30.0}
    ratio = compare.paired_ratio(ours, theirs)
    assert ratio.units == 2 and math.isclose(ratio.geometric_mean, math.sqrt(2))
    assert ratio.low < 1 < ratio.high and math.isclose(ratio.low * ratio.high, 2)
    one_prompt = compare.paired_ratio({(0, 0): 20.0, (0, 1): 40.0}, {(0, 0): 10.0, (0, 1): 20.0})
    assert one_prompt.units == 2 and math.isclose(one_prompt.geometric_mean, 2) and math.isclose(one_prompt.low, 2)


def test_compare_llamacpp_sets_drafting_against_target_only_at_full_speed_too() -> None:
    """Beside the padded target-only that keeps the same text, localspec's target-only with lone tokens runs
    (`--no-same-text`), and the defaults' speed-up over it is a row of the table."""
    compare = script_module("compare_llamacpp")
    names = [c.name for c in compare.contenders_for("ordinary", [8], [8])]
    assert names[:3] == [compare.TARGET_ONLY, compare.LONE, compare.DEFAULTS]
    lone = next(c for c in compare.contenders_for("copy-heavy", [8], [8]) if c.name == compare.LONE)
    assert lone.flags == ("--no-speculative", "--no-same-text")
    assert compare.LONE not in [c.name for c in compare.contenders_for("ordinary", [8], [8], lone=False)]  # nothing pads

    def measured(contender: str, tool: str, speed: float, prompt: int) -> object:
        return compare.Measurement(contender=contender, tool=tool, draft_max=8 if tool != compare.LOCALSPEC_TOOL else None,
                                   kind="ordinary", prompt=prompt, repeat=0, temperature=0.0, tokens_per_second=speed,
                                   tokens_generated=100, prompt_tokens=10, generation_seconds=1.0, wall_seconds=2.0, extra={})

    rows = [measured(name, compare.LOCALSPEC_TOOL, speed, prompt) for prompt in (0, 1)
            for name, speed in ((compare.TARGET_ONLY, 50.0), (compare.LONE, 75.0), (compare.DEFAULTS, 100.0))]
    ratios = dict(compare.ratio_rows(rows, "ordinary"))
    assert math.isclose(ratios[f"{compare.DEFAULTS} / {compare.TARGET_ONLY}"].geometric_mean, 2.0)
    assert math.isclose(ratios[f"{compare.DEFAULTS} / {compare.LONE}"].geometric_mean, 100 / 75)


@pytest.mark.slow  # real weights (the demo's vocabulary)
def test_compare_llamacpp_counts_the_tokens_of_the_text_llamacpp_printed(smollm_q4_1: Path) -> None:
    """llama.cpp's N counts the end token and, in llama-lookup, what its draft held after it: the script
    counts the text before the first end-of-generation token, as `localspec run` does."""
    compare = script_module("compare_llamacpp")
    counter = compare.TextTokens(smollm_q4_1)
    rendered = "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n"
    answer = "Sunlight scatters off the air, and blue light scatters most."
    expected = len(counter.vocabulary.tokenize(answer, add_special=False))
    assert {"<|im_end|>", "<|endoftext|>"} <= set(counter.end_texts) and expected > 5
    lookup = f"\n\n{rendered}{answer}<|im_end|>\n<|im_end|>\n\n\n\n"  # llama-lookup went on past its end token
    simple = f"\n\n{rendered}{answer}\n\n\n\n"  # llama-speculative-simple prints no end token
    assert counter.count(lookup, rendered) == counter.count(simple, rendered) == expected
    assert counter.count(f"\n\n{rendered}{answer}\n\nand more", rendered) is None  # another shape: not counted
    assert counter.count(answer, rendered) is None  # no prompt echoed


def test_long_prompt_bench_builds_long_readme_excerpts_with_a_question() -> None:
    bench = script_module("bench_long_prompts")
    prompts = bench.long_prompts(3)
    assert len(prompts) == 3 and len(set(prompts)) == 3
    assert all(len(p) > 4200 and p.endswith("what does the text above describe?") for p in prompts)
    assert bench.geometric_mean([2.0, 0.5, 1.0]) == pytest.approx(1.0)


@pytest.mark.parametrize("script, bad", [
    *(("bench_long_prompts", bad) for bad in (["--max-tokens", "abc"], ["--temperatures", "nan"], ["--prompts", "0"],
                                              ["--before", "/nonexistent"])),
    *(("replay_lengths", bad) for bad in (["--prompts", "0"], ["--temperatures", "inf"], ["--temperatures", "nan"],
                                          ["--fixed", "0"], ["--fixed", "x"], ["--tokens", "1"],
                                          ["--prompts-file", "/nonexistent"])),
])
def test_benchmark_scripts_refuse_bad_arguments_in_one_line(script: str, bad: list[str], monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    module = script_module(script)
    monkeypatch.setattr("sys.argv", [f"{script}.py", *bad])
    with pytest.raises(SystemExit) as exit_:
        module.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"{script}.py: error: ")  # argparse's usage, then one line
