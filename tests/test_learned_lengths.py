"""What adaptive draft lengths learn is kept between processes: saved on close, restored at start, dropped when bad."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import cli
from test_draft_length import analytic_best, simulate

from localspec.app.learned_lengths import FILE_NAME, FORMAT_VERSION, LengthCache
from localspec.app.session import Session
from localspec.config.paths import cache_dir
from localspec.engine.draft_length import _RESTORED_COST_CAPS, AdaptiveLength, LearnedLengths, temperature_band
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, ModelSettings, SamplingParams, SpeculativeParams

PROMPT = [1, 260, 265, 270, 262, 260, 265]
ADAPTIVE_MODEL = GenerationSettings(SamplingParams(temperature=0.8), SpeculativeParams(strategy="model"), max_tokens=24, seed=1)


def _generate(session: Session, settings: GenerationSettings = ADAPTIVE_MODEL) -> None:
    for _ in session.generation(PROMPT, settings):
        pass


def _seconds(costs: dict) -> dict:
    """The measured seconds of saved costs, without how many measurements each stood for."""
    return {**costs, "verify_by_size": {n: mean for n, (mean, _) in costs["verify_by_size"].items()}}


def _session(paths: tuple[Path, Path], cache_file: Path, threads: int = 1, notes=None) -> Session:
    runtime = ModelSettings(n_threads=threads)
    target, draft = Model(paths[0], runtime), Model(paths[1], runtime)
    return Session(target, draft, length_cache=LengthCache(target, draft, cache_file, notes=notes or (lambda m: None)))


def test_a_new_session_starts_where_the_last_one_stopped(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    cache_file = tmp_path / FILE_NAME
    with _session(tiny_pair, cache_file) as first:
        _generate(first)
        learned = first.learned_lengths.controller("model", "coupled", 0.8)
        assert learned.passes > 0
        saved_costs, saved_counts = learned.costs(), learned.acceptance_counts()
    assert cache_file.exists()
    with _session(tiny_pair, cache_file) as second:
        restored = second.learned_lengths.controller("model", "coupled", 0.7)  # the same temperature band
        saved = _seconds(json.loads(json.dumps(saved_costs)))
        costs = _seconds(restored.costs())
        assert costs["verify_by_size"] == saved["verify_by_size"]
        for name, cap in _RESTORED_COST_CAPS.items():  # (as saved, at most a share of a one-token pass until measured)
            expected = None if saved[name] is None else min(saved[name], cap * restored.verify_cost(1))
            assert costs[name] == (expected if expected is None else pytest.approx(expected, rel=1e-9))
        assert restored.acceptance_counts() == saved_counts
        fresh = second.learned_lengths.controller("model", "rejection", 0.8)  # acceptance is per verification mode
        assert fresh.acceptance_counts() == AdaptiveLength().acceptance_counts()
        assert fresh.costs() == restored.costs()  # costs are the machine's, shared by modes and temperatures


def test_costs_belong_to_the_machine_and_acceptance_to_the_pair(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    cache_file = tmp_path / FILE_NAME
    with _session(tiny_pair, cache_file, threads=1) as first:
        _generate(first)
        saved_counts = first.learned_lengths.controller("model", "coupled", 0.8).acceptance_counts()
    with _session(tiny_pair, cache_file, threads=2) as other_machine:  # another thread count: another cost profile
        controller = other_machine.learned_lengths.controller("model", "coupled", 0.8)
        assert controller.first_step_cost is None and controller.verify_by_size == {}
        assert controller.acceptance_counts() == saved_counts
    swapped = (tiny_pair[1], tiny_pair[0])  # another pair of files: nothing carries over
    with _session(swapped, cache_file) as other_pair:
        controller = other_pair.learned_lengths.controller("model", "coupled", 0.8)
        assert controller.acceptance_counts() == AdaptiveLength().acceptance_counts()


def _entries(machine: str, pair: str) -> str:
    """A cache whose entries are found by this pair on this machine (MACHINE and PAIR in `content` are their keys)."""
    return f'{{"version": {FORMAT_VERSION}, "machines": {{"MACHINE": ' + machine + '}, "pairs": {"PAIR": ' + pair + "}}"


@pytest.mark.parametrize("content, note", [
    ("{not json", "ignoring"), ('{"version": 99}', "ignoring"), (f'{{"version": {FORMAT_VERSION}, "machines": [], "pairs": {{}}}}', "ignoring"),
    ('{"version": 1, "machines": {}, "pairs": {}}', "ignoring"),
    ("\udcff", "ignoring"), ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (_entries('{"costs": "x", "used": 1}', "{}"), "ignoring"),
    (_entries('{"costs": 5, "used": 1}', "{}"), "ignoring"),
    (_entries("{}", '{"acceptance": "x", "used": 1}'), "ignoring"),
    (_entries('{"costs": {}, "used": NaN}', "{}"), "NaN is not a JSON number"),  # (it could never be saved again)
    (_entries('{"costs": {}, "used": 1}', "{}").replace('"MACHINE"', '"other": {"used": "x"}, "MACHINE"'), "ignoring"),
    (_entries('{"costs": {"model": {"first_step_cost": 1' + "0" * 400 + ', "draft_cost": null, "verify_by_size": {}}}, "used": 1}', "{}"),
     "did not fit"),
])
@pytest.mark.slow
def test_a_corrupt_cache_is_dropped_quietly_and_rebuilt(
    tiny_pair: tuple[Path, Path], tmp_path: Path, content: str, note: str
) -> None:
    cache_file = tmp_path / FILE_NAME
    runtime = ModelSettings(n_threads=1)
    target, draft = Model(tiny_pair[0], runtime), Model(tiny_pair[1], runtime)
    keys = LengthCache(target, draft, cache_file)
    content = content.replace("MACHINE", keys.machine).replace("PAIR", keys.pair)
    cache_file.write_bytes(content.encode("utf-8", "surrogateescape"))
    notes: list[str] = []
    with Session(target, draft, length_cache=LengthCache(target, draft, cache_file, notes=notes.append)) as session:
        _generate(session)
    assert any(note in said for said in notes)  # said only to --verbose
    state = json.loads(cache_file.read_text())
    assert state["version"] == FORMAT_VERSION and len(state["machines"]) == len(state["pairs"]) == 1


def test_a_version_2_cache_keeps_its_costs_and_drops_only_the_coupled_sampled_bins(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    """Version 3 weighs coupled sampled drafts by their lead, not their probability: only those counts change meaning."""
    cache_file = tmp_path / FILE_NAME
    with _session(tiny_pair, cache_file) as first:
        _generate(first)
        _generate(first, GenerationSettings(SamplingParams(temperature=0.0), SpeculativeParams(strategy="model"), max_tokens=24, seed=1))
        costs = first.learned_lengths.costs()
    state = json.loads(cache_file.read_text())
    assert {"model/coupled/medium", "model/coupled/greedy"} <= set(next(iter(state["pairs"].values()))["acceptance"])
    state["version"] = 2
    cache_file.write_text(json.dumps(state))
    with _session(tiny_pair, cache_file) as second:
        learned = second.learned_lengths
        assert learned.saved_costs.keys() == costs.keys()  # the machine's costs survive the new version
        assert "model/coupled/greedy" in learned.saved_acceptance
        assert "model/coupled/medium" not in learned.saved_acceptance
        _generate(second)
    assert json.loads(cache_file.read_text())["version"] == FORMAT_VERSION


def _draft_and_verify(controller: AdaptiveLength, draft_cost: float, passes: int, alpha: float = 0.9) -> None:
    """Passes as a model drafter runs them: a pass's first draft step recorded apart, acceptance i.i.d. alpha."""
    rng = np.random.default_rng(0)
    for _ in range(passes):
        k = controller.plan(32)
        drafted = 0
        while drafted < k:
            drafted += 1
            controller.record_draft_step(draft_cost, first=drafted == 1)
            if not controller.keep_going(drafted, 0.9):
                break
        accepted = 0
        while accepted < drafted and rng.random() < alpha:
            accepted += 1
        controller.observe(drafted, accepted, 0.021 + 0.005 * (drafted + 1))


def test_restored_costs_give_way_to_this_machines_measurements() -> None:
    """Costs saved while the machine was busy (ten times today's) must not stop drafting for long."""
    busy = AdaptiveLength()
    _draft_and_verify(busy, draft_cost=0.09, passes=60)
    assert busy.best_length(32) <= 1
    controller = AdaptiveLength()
    controller.restore_costs(busy.costs())
    _draft_and_verify(controller, draft_cost=0.009, passes=60)
    assert controller.draft_cost < 0.02 and controller.first_step_cost < 0.02
    # With the real costs, drafting pays again: the choice is within 5% of the analytic best rate.
    k = controller.best_length(32)
    true_rate = (1 - 0.9 ** (k + 1)) / 0.1 / (k * 0.009 + 0.021 + 0.005 * (k + 1))
    assert k >= 2 and true_rate >= 0.95 * analytic_best(0.9, 0.009, 0.021, 0.005)[1]


def test_restored_costs_follow_this_processs_one_token_pass_until_measured_again() -> None:
    """Costs a process saved while another ran beside it (every pass about three times slower) must not keep a
    draft model from reading the prompt in an idle process: not reading, it would never measure them again."""
    saved = {"model": {"first_step_cost": 0.050, "draft_cost": 0.0146, "read_cost": 0.025,
                       "verify_by_size": {"1": [0.118, 1.7], "2": [0.238, 0.86], "5": [0.125, 1.9],
                                          "7": [0.066, 0.94], "11": [0.097, 2.7], "13": [0.102, 0.96]}}}
    controller = LearnedLengths(saved, {}).controller("model", "coupled", 0.0)
    assert controller.read_cost == pytest.approx(0.025)  # as saved, until this process measures its own passes
    for _ in range(2):
        controller.observe(0, 0, 0.038)  # this process's first one-token passes: the machine is idle now
    idle_share = controller.verify_cost(1) / 0.118
    assert idle_share < 0.4
    assert controller.read_cost == pytest.approx(0.025 * idle_share)
    assert controller.first_step_cost == pytest.approx(0.050 * idle_share)
    assert controller.verify_cost(5) < 0.125 * 0.5  # restored batch sizes follow too
    assert controller.worth_reading(60, 2, 126)  # a 60-token prompt with 126 tokens to go: read
    # Saved back in this process's terms: each cost still the same share of the one-token pass.
    costs = controller.costs()
    assert costs["read_cost"] / costs["verify_by_size"]["1"][0] == pytest.approx(0.025 / 0.118)
    # Measured here, a cost is this process's own (the restored one, in its terms, weighs a tenth), and so is a
    # batch size: scaled once as it is averaged in, not again after.
    controller.record_draft_step(0.015)
    assert 0.0135 < controller.draft_cost < 0.015
    assert controller.read_cost == pytest.approx(0.025 * controller.verify_cost(1) / 0.118)
    controller.observe(4, 4, 0.060)
    averaged = controller.verify.mean(5)
    assert averaged == pytest.approx(0.125 * idle_share + (0.060 - 0.125 * idle_share) / 1.1, rel=0.01)
    controller.observe(0, 0, 0.030)  # the one-token pass moves again: the measured size does not follow it
    assert controller.verify.mean(5) == averaged


def test_without_a_saved_one_token_pass_restored_costs_follow_the_smallest_saved_one() -> None:
    """A process whose every pass drafted saved no one-token pass: the smallest saved pass is the reference."""
    saved = {"first_step_cost": 0.050, "draft_cost": 0.015, "read_cost": 0.015,
             "verify_by_size": {"2": [0.120, 1.0], "9": [0.300, 1.0]}}
    controller = LearnedLengths({"model": saved}, {}).controller("model", "coupled", 0.0)
    controller.observe(1, 1, 0.040)  # a pass that drafted one token: two tokens verified
    share = controller.verify.mean(2) / 0.120
    assert share < 0.5 and controller.read_cost == pytest.approx(0.015 * share)
    assert controller.verify.mean(9) == pytest.approx(0.300 * share)


def test_sizes_measured_once_while_the_machine_was_busy_stay_faint_beside_the_sizes_measured_often() -> None:
    """The shape of a saved table seen here: passes of 2 to 7 tokens measured pass after pass on the line
    31 ms + 5 ms a row, and passes of 8 to 30 tokens each measured once or twice, long ago, while another
    process ran beside (two to three times the line), their weights decayed to next to nothing. Restored,
    the long sizes must not make every long draft look dearer than it is."""
    def line(n: int) -> float:
        return 0.031 + 0.005 * n

    often = {str(n): [line(n), weight] for n, weight in zip(range(2, 8), (1.9, 4.5, 0.05, 9.5, 2.4, 4.2))}
    once = {str(n): [line(n) * (2 + n % 3 / 2), 0.0015] for n in range(8, 31)}
    saved = {"first_step_cost": 0.025, "draft_cost": 0.016, "read_cost": 0.007,
             "verify_by_size": {"1": [0.035, 1.1], **often, **once}}
    controller = LearnedLengths({"model": saved}, {}).controller("model", "coupled", 0.8)
    for n in (9, 13, 17):
        assert controller.verify_cost(n) == pytest.approx(line(n), rel=0.1)


def test_restored_batch_sizes_keep_their_weights_relative_to_one_another() -> None:
    from localspec.engine.draft_length import VerifyCosts

    verify = VerifyCosts()
    verify.restore({"2": [0.04, 8.0], "5": [0.06, 2.0], "20": [0.3, 0.0016], "30": [0.4, 0.0]}, 33)
    weights = {n: weight for n, (_, weight) in verify.by_size.items()}
    assert weights[2] == pytest.approx(0.1) and weights[5] == pytest.approx(0.025)  # the heaviest weighs a tenth
    assert weights[20] == pytest.approx(0.1 * 0.0016 / 8) and 0 < weights[30] <= 1e-9
    verify.restore({"2": [0.04, 0.05], "5": [0.06, 0.01]}, 33)  # light ones are not made heavier
    assert [weight for _, weight in verify.by_size.values()] == pytest.approx([0.05, 0.01])


def test_exploration_drafts_in_full_whatever_the_estimates_say() -> None:
    controller = AdaptiveLength()
    controller.draft_cost = 10.0  # a wildly wrong estimate: keep_going would stop after every token
    lengths = []
    for _ in range(16):
        k = controller.plan(32)
        drafted = 1
        while drafted < k and controller.keep_going(drafted, 0.9):
            drafted += 1
        lengths.append(drafted)
        controller.observe(drafted, drafted, 0.03)
    assert lengths[7] == 2 and max(lengths[:7]) <= 1  # the 8th pass explores one more token, in full


def test_saved_entries_that_do_not_fit_are_dropped_entry_by_entry() -> None:
    good = AdaptiveLength()
    simulate(good, alpha=0.8, draft_cost=0.01, a=0.02, b=0.005, passes=40)
    bad_counts = {**good.acceptance_counts(), "reached": [float("nan")] * good.limit}
    short_counts = {**good.acceptance_counts(), "accepted": [0.0]}
    bad_costs = {**good.costs(), "draft_cost": -1.0}
    band = temperature_band(0.8)
    learned = LearnedLengths(
        {"model": bad_costs, "ngram": good.costs()},
        {f"model/coupled/{band}": bad_counts, f"ngram/coupled/{band}": short_counts, f"model/rejection/{band}": good.acceptance_counts()},
    )
    model_costs = learned.controller("model", "coupled", 0.8).costs()
    assert model_costs["first_step_cost"] is None and model_costs["draft_cost"] is None  # its own were dropped
    assert _seconds(model_costs)["verify_by_size"] == _seconds(good.costs())["verify_by_size"]  # the target's, shared
    assert _seconds(learned.controller("ngram", "coupled", 0.8).costs()) == _seconds(good.costs())
    assert learned.controller("ngram", "coupled", 0.8).acceptance_counts() == AdaptiveLength().acceptance_counts()
    assert learned.controller("model", "rejection", 0.8).acceptance_counts() == good.acceptance_counts()
    assert len(learned.dropped) == 3


def test_run_remembers_and_bench_cold_forgets(tiny_profile: str) -> None:
    args = ["-p", tiny_profile, "--threads", "1", "--strategy", "model"]
    cache_file = cache_dir() / FILE_NAME
    cache_file.unlink(missing_ok=True)
    assert cli("run", *args, "--max-tokens", "8", "--seed", "1", "the cat").exit_code == 0
    assert len(json.loads(cache_file.read_text())["pairs"]) == 1
    cache_file.unlink()
    cold = cli("bench", *args, "--prompts", "1", "--max-tokens", "6", "--temperatures", "0.8", "--cold", "--json")
    assert cold.exit_code == 0, cold.stderr
    assert not cache_file.exists()
