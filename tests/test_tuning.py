"""`bench` as the tuner and `draft make --type auto`, on tiny generated models."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from cli_helpers import cli, one_error_line
from tiny_models import write_unloadable_model

from localspec.app.bench import (
    BenchCase,
    BenchResult,
    best_by_temperature,
    best_overall,
    save_fastest,
)
from localspec.config.paths import user_profiles_dir
from localspec.config.profiles import load_profile
from localspec.engine.stats import SpecStats





@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_bench_json_holds_every_configuration_and_the_best(tiny_profile: str) -> None:
    result = cli("bench", "-p", tiny_profile, "--prompts", "2", "--max-tokens", "12", "--temperatures", "0,1",
                 "--strategy", "model,ngram,hybrid", "--draft-max", "2,adaptive", "--repeat", "2", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    rows = report["results"]
    assert len(rows) == 2 * 3 * 2
    assert {(r["strategy"], r["draft_max"], r["temperature"]) for r in rows} == {
        (s, d, t) for s in ("model", "ngram", "hybrid") for d in (2, "adaptive") for t in (0.0, 1.0)
    }
    for row in rows:
        assert {"strategy", "draft_max", "temperature", "speculative_tokens_per_second", "baseline_tokens_per_second",
                "speedup", "acceptance_rate", "mean_accepted_length", "cost_ratio"} <= set(row)
        assert row["speedup"] == pytest.approx(row["speculative_tokens_per_second"] / row["baseline_tokens_per_second"])
        assert row["runs"] == 4  # 2 prompts x 2 repeats
        # Coupled verification (the default): every strategy and length gives the target-only tokens, at T=1 too.
        assert row["identical_prompts"] == row["runs"] and row["verify"] == "coupled"
    for temperature, best in report["best"].items():
        same = [r for r in rows if r["temperature"] == float(temperature)]
        assert best["speedup"] == max(r["speedup"] for r in same)


def test_bench_save_refuses_to_pick_a_setting_from_a_run_too_small_to_tell(tiny_profile: str) -> None:
    """One prompt of 4 tokens had set a profile's draft_max, under a shipped comment it then contradicted."""
    too_small = ((("--prompts", "1", "--max-tokens", "64"), "at least 4 prompt runs (prompts x --repeat: here 1);"),
                 (("--prompts", "2", "--repeat", "2", "--max-tokens", "8"), "--max-tokens 64 or more (here 8);"))
    for sizes, here in too_small:
        refused = cli("bench", "-p", tiny_profile, *sizes, "--temperatures", "0", "--draft-max", "2", "--save")
        one_error_line(refused, 2, "--save picks a profile's setting from what this bench measures", here)
    assert "speculative.draft_max" not in load_profile(tiny_profile).values
    # Before any model is looked for (the demo's target was derived, 515 MB, then the bench refused).
    user_profiles_dir().mkdir(parents=True, exist_ok=True)
    (user_profiles_dir() / "gone.toml").write_text('[target]\npath = "/nowhere/t.gguf"\n')
    one_error_line(cli("bench", "-p", "gone", "--prompts", "1", "--save"), 2, "--save picks a profile's setting")


@pytest.mark.slow
def test_bench_save_writes_the_fastest_setting_into_the_profile(tiny_profile: str) -> None:
    result = cli("bench", "-p", tiny_profile, "--prompts", "2", "--repeat", "2", "--max-tokens", "64", "--temperatures",
                 "0", "--strategy", "model,ngram", "--draft-max", "1,3", "--save")
    assert result.exit_code == 0, result.stderr
    profile = load_profile(tiny_profile)
    if "saved strategy" in result.stderr:
        assert profile.get("speculative.strategy") in ("model", "ngram") and profile.get("speculative.draft_max") in (1, 3)
    else:  # on a tiny model drafting may not pay: then nothing is written, and the user is told so
        assert "nothing saved" in result.stderr and "speculative.strategy" not in profile.values
        # (slower than target-only: "run without a draft"; faster than its padded passes only, on a busy machine
        # too: "where the same text ... does not matter, run --no-speculative --no-same-text")
        warning = next(line for line in result.stderr.splitlines() if line.startswith("warning: at T=0 "))
        assert "run without a draft" in warning or "run --no-speculative --no-same-text" in warning


def _result(strategy: str, draft_max, temperature: float, speed: float) -> BenchResult:
    r = BenchResult(BenchCase(strategy, draft_max, temperature))
    r.speculative = SpecStats(tokens_generated=int(speed * 100), generation_seconds=100.0)
    r.baseline = SpecStats(tokens_generated=100, generation_seconds=100.0)
    return r


def test_the_best_overall_setting_is_the_geometric_mean_winner() -> None:
    result = _result
    results = [result("model", 4, 0, 1.6), result("model", 4, 0.8, 1.1), result("hybrid", 8, 0, 1.4), result("hybrid", 8, 0.8, 1.4)]
    assert best_overall(results)[:2] == ("hybrid", 8)
    assert best_by_temperature(results)[0].case.strategy == "model"


def test_save_writes_the_winner_and_nothing_when_drafting_loses(tiny_profile: str) -> None:
    """Both branches of `bench --save`, from measured results whose speed-ups are known."""
    assert save_fastest(tiny_profile, [_result("model", 4, 0, 0.9), _result("ngram", 8, 0, 0.95)]) is None
    assert "speculative.strategy" not in load_profile(tiny_profile).values
    path = save_fastest(tiny_profile, [_result("model", 4, 0, 1.3), _result("ngram", 8, 0, 1.2)])
    profile = load_profile(tiny_profile)
    assert path is not None and (profile.get("speculative.strategy"), profile.get("speculative.draft_max")) == ("model", 4)
    rejection = BenchResult(BenchCase("hybrid", 16, 0, "rejection"))
    rejection.speculative, rejection.baseline = SpecStats(tokens_generated=900, generation_seconds=100.0), _result("x", 1, 0, 1).baseline
    assert best_overall([*_all_coupled(), rejection])[:2] == ("model", 4)  # the fastest in the profile's mode, not another's
    assert best_overall([*_all_coupled(), rejection], "rejection")[:2] == ("hybrid", 16)


def _all_coupled() -> list[BenchResult]:
    return [_result("model", 4, 0, 1.3), _result("ngram", 8, 0, 1.2)]


def test_bench_sweeps_verification_modes(tiny_profile: str) -> None:
    profile_file = user_profiles_dir() / f"{tiny_profile}.toml"
    profile_file.write_text(profile_file.read_text() + '[speculative]\nverify = "rejection"\n')  # target-only stays coupled
    result = cli("bench", "-p", tiny_profile, "--prompts", "2", "--max-tokens", "12", "--temperatures", "1",
                 "--strategy", "model", "--draft-max", "2", "--verify", "coupled,rejection", "--json")
    assert result.exit_code == 0, result.stderr
    rows = {row["verify"]: row for row in json.loads(result.stdout)["results"]}
    assert rows["coupled"]["identical_prompts"] == rows["coupled"]["runs"] == 2
    assert rows["rejection"]["identical_prompts"] < rows["rejection"]["runs"]  # equal in distribution, not in text


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--strategy", "nonsense"], "'nonsense' is not one of model, ngram, hybrid"),
        (["--verify", "exact"], "'exact' is not one of coupled, rejection"),
        (["--draft-max", "0,4"], "--draft-max"),
        (["--draft-max", "4,x"], "'x' is neither a whole number nor 'adaptive'"),
        (["--temperatures", "0,-1"], "--temperatures"),
        (["--temperatures", "0,abc"], "'abc' is not a number"),
        (["--prompts", "/nonexistent/prompts.txt"], "cannot read the prompts file"),
        (["--prompts", "\u00b2"], "cannot read the prompts file"),  # (was: a traceback from int("²"))
        (["--max-tokens", "0"], "--max-tokens"),
        (["--prompt", "  "], "--prompt is empty"),
        (["--draft-min", "4", "--draft-max", "8,2"], "speculative.draft_min (4) must not exceed speculative.draft_max (2)"),
    ],
)
def test_bench_bad_input_is_one_line(tiny_profile: str, args: list[str], fragment: str) -> None:
    one_error_line(cli("bench", "-p", tiny_profile, *args), 2, fragment)


def test_swept_draft_lengths_are_fitted_to_what_a_pass_verifies(tiny_profile: str) -> None:
    result = cli("bench", "-p", tiny_profile, "--n-batch", "4", "--draft-max", "2,16", "--temperatures", "0",
                 "--prompts", "1", "--max-tokens", "8", "--json")
    assert result.exit_code == 0, result.stderr
    assert "draft_max 16 measured as 3" in result.stderr
    assert sorted(row["draft_max"] for row in json.loads(result.stdout)["results"]) == [2, 3]


def test_swept_draft_lengths_replace_the_profiles_in_every_check(tiny_profile: str) -> None:
    """The profile's draft_max (2) is not measured: --draft-min 4 is checked against the swept 8, not refused."""
    assert cli("profile", "set", tiny_profile, "speculative.draft_max=2").exit_code == 0
    result = cli("bench", "-p", tiny_profile, "--draft-max", "8", "--draft-min", "4", "--temperatures", "0",
                 "--prompts", "1", "--max-tokens", "8", "--json")
    assert result.exit_code == 0, result.stderr
    assert [row["draft_max"] for row in json.loads(result.stdout)["results"]] == [8]


def test_bench_save_refuses_models_other_than_the_profiles(tiny_profile: str, tiny_pair: tuple[Path, Path]) -> None:
    for flag, path in (("--target", tiny_pair[1]), ("--draft", tiny_pair[0])):
        refused = cli("bench", "-p", tiny_profile, flag, str(path), "--prompts", "4", "--max-tokens", "64", "--save")
        one_error_line(refused, 2, "--save writes into the profile what its own models measured")
    assert "speculative.draft_max" not in load_profile(tiny_profile).values


def test_bench_raw_measures_a_model_without_a_chat_template(tiny_pair: tuple[Path, Path]) -> None:
    models = ("--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]))
    args = ("--prompts", "1", "--max-tokens", "8", "--temperatures", "0", "--draft-max", "2", "--json")
    refused = cli("bench", *models, *args)  # (after the lines saying where each model runs)
    assert refused.exit_code == 2 and "Traceback" not in refused.stderr
    assert "has no chat template" in refused.stderr.splitlines()[-1] and "`bench --raw`" in refused.stderr
    result = cli("bench", *models, *args, "--raw")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["identical_prompts"] == 1


def test_a_bench_prompt_too_long_is_named_before_anything_is_measured(tiny_profile: str) -> None:
    result = cli("bench", "-p", tiny_profile, "--n-ctx", "256", "--prompt", "the cat sat\n" + "the dog " * 150,
                 "--max-tokens", "8", "--temperatures", "0")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: bench prompt 1 of 1 ('the cat sat'…) is ")
    assert "but the context holds 256" in result.stderr and "tok/s" not in result.stdout


def _ctrl_c_at_prompt(module, stop_index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `module`'s bench raise KeyboardInterrupt as it starts prompt `stop_index` (its first temperature)."""
    measure = module._measure_prompt

    def interrupted(*args, **kwargs):
        if inspect.signature(measure).bind(*args, **kwargs).arguments["turn"].index == stop_index:
            raise KeyboardInterrupt
        return measure(*args, **kwargs)

    monkeypatch.setattr(module, "_measure_prompt", interrupted)


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_ctrl_c_during_a_bench_reports_the_prompt_runs_finished(tiny_profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from localspec.app import bench

    _ctrl_c_at_prompt(bench, 2, monkeypatch)
    result = cli("bench", "-p", tiny_profile, "--prompts", "4", "--max-tokens", "64", "--temperatures", "0,1",
                 "--draft-max", "2,4", "--json", "--save")
    assert result.exit_code == 130 and "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["stopped"] == {"prompt_runs": 2, "planned": 8}
    assert [(row["temperature"], row["draft_max"], row["runs"]) for row in report["results"]] == [(0.0, 2, 2), (0.0, 4, 2)]
    assert result.stderr.splitlines()[-1] == ("bench stopped by Ctrl-C after 2 of 8 prompt runs: the results are from"
                                              " those (every configuration ran each of them); nothing saved")
    assert "speculative.draft_max" not in load_profile(tiny_profile).values
    table = cli("bench", "-p", tiny_profile, "--prompts", "4", "--max-tokens", "8", "--temperatures", "0", "--draft-max", "2")
    assert table.exit_code == 130 and "tok/s" in table.stdout and "after 2 of 4 prompt runs" in table.stderr


def test_ctrl_c_before_a_bench_finished_a_prompt_reports_nothing(tiny_profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from localspec.app import bench

    _ctrl_c_at_prompt(bench, 0, monkeypatch)
    result = cli("bench", "-p", tiny_profile, "--prompts", "2", "--max-tokens", "8", "--temperatures", "0", "--json")
    assert result.exit_code == 130 and "Traceback" not in result.stderr and result.stdout == ""
    assert "bench stopped before a prompt was measured on every side: nothing is reported" in result.stderr


def test_ctrl_c_during_a_structured_bench_reports_the_prompt_runs_finished(
    tiny_profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from localspec.app import structured_bench

    _ctrl_c_at_prompt(structured_bench, 1, monkeypatch)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat\nthe dog\nthe bird\n")
    result = cli("bench", "-p", tiny_profile, "--json-schema", '{"type": "array"}', "--prompts", str(prompts),
                 "--max-tokens", "8", "--temperatures", "0", "--draft-max", "2", "--json")
    assert result.exit_code == 130 and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["stopped"] == {"prompt_runs": 1, "planned": 3} and [row["runs"] for row in report["results"]] == [1]


def test_strategy_model_without_a_draft_is_refused(tiny_pair: tuple[Path, Path]) -> None:
    one_error_line(cli("bench", "--target", str(tiny_pair[0]), "--strategy", "model"), 2, "no draft model", "strategy model")
    one_error_line(cli("run", "--target", str(tiny_pair[0]), "--strategy", "model", "--raw", "the cat"), 2, "needs a draft model")
    ngram = cli("run", "--target", str(tiny_pair[0]), "--strategy", "ngram", "--raw", "--json", "--max-tokens", "6", "the cat")
    assert ngram.exit_code == 0 and json.loads(ngram.stdout)["settings"]["speculative"]["strategy"] == "ngram"


@pytest.mark.slow
def test_draft_make_auto_keeps_only_the_winner(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    target = tmp_path / "target.gguf"
    target.write_bytes(tiny_pair[0].read_bytes())
    made = cli("draft", "make", str(target))
    assert made.exit_code == 0, made.stderr
    assert "expected speed-up" in made.stderr and all(t in made.stderr for t in ("q8_0", "q4_1", "q4_0"))
    drafts = sorted(p.name for p in tmp_path.iterdir() if p.name != "target.gguf")
    assert len(drafts) == 1 and drafts[0].startswith("target.draft-") and "*" in made.stderr
    winner_type = drafts[0].removeprefix("target.draft-").removesuffix(".gguf")
    # The winner's file exists: --force to overwrite. (Another run may measure another winner: ask for this one.)
    assert cli("draft", "make", str(target), "--type", winner_type).exit_code == 2
    # ... and auto refuses before making anything, where one of its candidates' files exists.
    abandoned = tmp_path / ".target.candidate-q8_0-999999999-0123abcd.gguf"  # a killed run's, no such process
    abandoned.write_bytes(b"x")
    half_written = tmp_path / "..target.candidate-q4_0-999999999-4567abcd.gguf.k2j5x8.partial"  # killed while writing
    half_written.write_bytes(b"x")
    again = cli("draft", "make", str(target))
    assert again.exit_code == 2 and f"{tmp_path / drafts[0]} exists (from an earlier draft make?)" in again.stderr
    forced = cli("draft", "make", str(target), "--force")
    assert forced.exit_code == 0, forced.stderr
    assert not abandoned.exists() and not half_written.exists()  # swept
    assert not list(tmp_path.glob(".*candidate*"))  # and its own candidates gone


def test_draft_make_auto_leaves_nothing_when_it_fails(tmp_path: Path) -> None:
    target = write_unloadable_model(tmp_path / "odd.gguf")
    result = cli("draft", "make", str(target))
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["odd.gguf"]


def test_a_slower_speculative_setting_is_put_down_to_short_answers_or_to_the_machine(capsys: pytest.CaptureFixture) -> None:
    from localspec.cli.bench import _advise

    def slower(tokens_per_run: int) -> BenchResult:
        result = BenchResult(BenchCase("hybrid", "adaptive", 0.0), runs=2)
        result.speculative = SpecStats(tokens_generated=2 * tokens_per_run, generation_seconds=1.0)
        result.baseline = SpecStats(tokens_generated=2 * tokens_per_run, generation_seconds=0.9)
        return result

    _advise([], {0.0: slower(8)})
    assert "on answers of 8 tokens" in capsys.readouterr().err
    _advise([], {0.0: slower(128)})
    err = capsys.readouterr().err
    assert "slower than the target alone (0.90x): run without a draft" in err and "answers of" not in err
    fixed = slower(8)
    fixed.case = BenchCase("model", 3, 0.0)  # a fixed length reads every prompt: its short answers explain nothing
    _advise([], {0.0: fixed})
    err = capsys.readouterr().err
    assert "run without a draft" in err and "(measured on 2 runs of 8 tokens: too little to act on; measure more)" in err
    enough = slower(128)
    enough.runs = 4
    enough.speculative.tokens_generated = enough.baseline.tokens_generated = 4 * 128
    _advise([], {0.0: enough})
    assert "run without a draft" in (err := capsys.readouterr().err) and "too little" not in err


def test_speculation_that_beats_only_padded_target_only_is_called_slower(capsys: pytest.CaptureFixture, tiny_profile: str) -> None:
    """Where target-only pads its lone tokens to keep the same text, drafting is judged against target-only at full
    speed too: 1.2x the padded pairs but 0.9x the lone tokens is a warning, and `--save` keeps nothing."""
    from localspec.cli.bench import _advise

    result = _result("hybrid", 8, 0.0, 1.2)
    result.plain = SpecStats(tokens_generated=int(1.2 / 0.9 * 100), generation_seconds=100.0)
    assert result.speedup == pytest.approx(1.2) and result.speedup_over_plain == pytest.approx(0.9, abs=0.01)
    _advise([result], {0.0: result})
    err = capsys.readouterr().err
    assert "1.20x target-only decoding that keeps the same text, but 0.90x target-only at full speed" in err
    assert "--no-same-text" in err
    assert save_fastest(tiny_profile, [result]) is None
    assert best_overall([result])[2] == pytest.approx(0.9, abs=0.01)
    result.plain = None  # measured without padding: the baseline is already full speed
    assert result.speedup_over_plain == result.speedup
    _advise([result], {0.0: result})
    assert capsys.readouterr().err == ""


@pytest.mark.slow  # a bench on the tiny pair
def test_bench_measures_target_only_at_full_speed_where_it_pads_lone_tokens(tiny_profile: str, monkeypatch) -> None:
    from localspec.runtime import model as model_module

    monkeypatch.setattr(model_module, "lone_token_computed_like_a_batch", lambda: False)  # as llamafile's kernels do
    rows_decoded: list[int] = []
    decode = model_module.Model._decode
    monkeypatch.setattr(model_module.Model, "_decode",
                        lambda self, tokens, rows: rows_decoded.append(len(tokens)) or decode(self, tokens, rows))
    result = cli("bench", "-p", tiny_profile, "--prompts", "2", "--max-tokens", "8", "--temperatures", "0", "--json")
    assert result.exit_code == 0, result.stderr
    row = json.loads(result.stdout)["results"][0]
    assert row["plain_tokens_per_second"] > 0 and 1 in rows_decoded  # the full-speed runs decode lone tokens
    assert row["speedup_over_plain"] == pytest.approx(row["speculative_tokens_per_second"] / row["plain_tokens_per_second"])
    assert row["plain_identical_prompts"] in range(row["runs"] + 1)  # how often lone tokens kept the padded text
    unpadded = cli("bench", "-p", tiny_profile, "--prompts", "2", "--max-tokens", "8", "--temperatures", "0", "--json",
                   "--no-same-text")
    assert unpadded.exit_code == 0, unpadded.stderr
    row = json.loads(unpadded.stdout)["results"][0]
    assert row["plain_tokens_per_second"] is None and row["speedup_over_plain"] == row["speedup"]
    assert row["plain_identical_prompts"] is None
    monkeypatch.setattr(model_module, "lone_token_computed_like_a_batch", lambda: True)  # nothing pads: nothing more to run
    row = json.loads(cli("bench", "-p", tiny_profile, "--prompts", "1", "--max-tokens", "8", "--temperatures", "0",
                         "--json").stdout)["results"][0]
    assert row["plain_tokens_per_second"] is None


@pytest.mark.parametrize("option, value, message", [
    ("--strategy", "", "--strategy: give at least one value"),  # (an empty value meant the profile's)
    ("--draft-max", " ", "--draft-max: give at least one value"),
    ("--temperatures", "0,,1", "--temperatures: an empty value in '0,,1'"),
    ("--verify", "coupled,", "--verify: an empty value in 'coupled,'"),
])
def test_bench_refuses_an_empty_value_in_a_list(tiny_profile: str, option: str, value: str, message: str) -> None:
    one_error_line(cli("bench", "-p", tiny_profile, "--max-tokens", "8", option, value), 2, message)


@pytest.mark.slow  # (0.3 s: the models loaded)
def test_a_bench_prompt_longer_than_the_models_take_is_not_told_to_raise_n_ctx(tiny_profile: str) -> None:
    """(was: "shorten it, or raise --n-ctx" where --n-ctx had just been lowered to what the models take)"""
    refused = cli("bench", "-p", tiny_profile, "--prompt", "the cat " * 200, "--n-ctx", "1024", "--max-tokens", "4")
    assert refused.exit_code == 1 and "a larger --n-ctx would not help" in refused.stderr.splitlines()[-1]


@pytest.mark.slow  # (0.3 s: the models loaded)
def test_a_bench_prompt_too_long_for_any_context_is_refused_before_it_is_tokenized(tiny_profile: str,
                                                                                   tmp_path: Path) -> None:
    """(was: minutes of llama.cpp tokenizing 400 kB of one line, which `run` refuses at once)"""
    prompts = tmp_path / "long.txt"
    prompts.write_text("the cat\n" + "x" * 400_000 + "\n")
    refused = cli("bench", "-p", tiny_profile, "--prompts", str(prompts), "--max-tokens", "4")
    assert refused.exit_code == 1, refused.stderr
    assert "bench prompt 2 of 2 ('xxxx" in refused.stderr
    assert "…) is 400000 bytes, more than a context of 256 tokens can hold" in refused.stderr
