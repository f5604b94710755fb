"""SpecStats: the counters behind --stats, --json and the benchmark."""

from __future__ import annotations

from localspec.engine.stats import SpecStats


def test_passes_are_counted_by_position_and_length() -> None:
    stats = SpecStats()
    stats.record_pass(4, 4)
    stats.record_pass(4, 1)
    stats.record_pass(2, 0)
    assert stats.target_passes == 3
    assert stats.acceptance_rate == 5 / 10
    assert stats.mean_accepted_length == 5 / 3
    assert stats.accepted_length_counts == [1, 1, 0, 0, 1]
    assert stats.per_position_acceptance == [2 / 3, 1 / 3, 1 / 2, 1 / 2]


def test_totals_add_up_across_generations() -> None:
    first, second = SpecStats(tokens_generated=10, generation_seconds=1.0), SpecStats(tokens_generated=30, generation_seconds=1.0)
    first.record_pass(2, 2)
    second.record_pass(5, 3)
    total = SpecStats()
    total.add(first)
    total.add(second)
    assert total.tokens_per_second == 20.0
    assert (total.draft_tokens_proposed, total.draft_tokens_accepted, total.target_passes) == (7, 5, 2)
    assert total.accepted_length_counts == [0, 0, 1, 1]
    assert total.per_position_acceptance == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_no_drafting_reports_no_acceptance() -> None:
    stats = SpecStats(tokens_generated=3, generation_seconds=0.5)
    stats.target_passes = 3
    assert stats.acceptance_rate is None and "no drafting" in stats.summary()
    assert stats.to_dict()["tokens_per_second"] == 6.0


def test_a_run_that_only_guessed_says_how_its_guesses_fared() -> None:
    stats = SpecStats(tokens_generated=4, generation_seconds=0.5, target_passes=3, guesses=2, guesses_kept=1)
    assert stats.acceptance_rate is None and "1/2 guesses kept" in stats.summary() and "no drafting" not in stats.summary()


def test_the_first_token_from_the_prompts_evaluation_counts_as_prompt_work() -> None:
    """It took no pass and no generation time: speeds and tokens per pass leave it out, as llama.cpp counts. A run
    whose tokens took no pass at all (that token, or tokens a grammar forced) measured no speed."""
    stats = SpecStats(tokens_generated=9, tokens_from_prompt=1, generation_seconds=0.5, target_passes=2)
    assert stats.tokens_per_second == 16.0 and stats.tokens_per_pass == 4.0
    only_it = SpecStats(tokens_generated=1, tokens_from_prompt=1, generation_seconds=0.001)  # (its draw, then the end)
    assert only_it.tokens_per_second is None and only_it.tokens_per_pass is None
    forced_only = SpecStats(tokens_generated=2, forced_tokens=2, generation_seconds=0.0004)  # (a grammar's " the")
    assert forced_only.tokens_per_second is None
