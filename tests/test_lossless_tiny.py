"""End-to-end losslessness on a tiny generated model pair.

Over many seeds, the first two tokens the speculative loop emits must follow the
target-only distribution, computed exactly from the target's own logits.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from stats_helpers import chi_square_pvalue

from localspec.drafter import ModelDrafter
from localspec.generate import GenerationSettings, SpeculativeParams, generate_text
from localspec.model import Model
from localspec.sampling import SamplingParams, logits_to_probs

PROMPT = [1, 260, 265, 270]
N_SEEDS = 6000
ALPHA = 1e-3


def exact_two_token_distribution(target: Model, sampling: SamplingParams) -> dict[tuple[int, int], float]:
    first = logits_to_probs(target.next_logits(PROMPT), sampling)
    joint = {}
    for t1 in np.flatnonzero(first):
        second = logits_to_probs(target.next_logits([*PROMPT, int(t1)]), sampling)
        for t2 in np.flatnonzero(second):
            joint[(int(t1), int(t2))] = float(first[t1] * second[t2])
    return joint


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
        SamplingParams(temperature=0.7, top_k=8, top_p=0.9, min_p=0.0),
    ],
    ids=["t1.0", "t0.7-topk8-topp0.9"],
)
def test_speculative_first_tokens_match_target_distribution(tiny_pair: tuple[Path, Path], sampling: SamplingParams) -> None:
    target_path, draft_path = tiny_pair
    with Model(target_path) as target, Model(draft_path) as draft:
        exact = exact_two_token_distribution(target, sampling)
        counts: Counter = Counter()
        proposed = accepted = full_accepts = 0
        for seed in range(N_SEEDS):
            settings = GenerationSettings(sampling, SpeculativeParams(draft_max=3), max_tokens=3, seed=seed)
            generation = generate_text(target, PROMPT, settings, ModelDrafter(draft, sampling))
            counts[tuple(generation.tokens[:2])] += 1
            proposed += generation.stats.draft_tokens_proposed
            accepted += generation.stats.draft_tokens_accepted
            by_length = generation.stats.accepted_length_counts  # [n]: passes that kept n drafts
            full_accepts += by_length[2] if len(by_length) > 2 else 0
    # The pair must exercise both sides of the rule, or the test proves little.
    assert 0.2 < accepted / proposed < 0.95
    assert full_accepts > 100
    assert chi_square_pvalue(counts, exact) > ALPHA


def plain_two_token_counts(model: Model, sampling: SamplingParams, n_seeds: int) -> Counter:
    """First two tokens sampled from `model` alone, once per seed."""
    return Counter(
        tuple(generate_text(model, PROMPT, GenerationSettings(sampling, max_tokens=2, seed=seed)).tokens)
        for seed in range(n_seeds)
    )


def test_target_only_baseline_matches_the_same_distribution(tiny_pair: tuple[Path, Path]) -> None:
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    with Model(tiny_pair[0]) as target:
        exact = exact_two_token_distribution(target, sampling)
        counts = plain_two_token_counts(target, sampling, N_SEEDS // 2)
    assert chi_square_pvalue(counts, exact) > ALPHA


def test_a_draft_used_without_correction_is_detected(tiny_pair: tuple[Path, Path]) -> None:
    """Power check: emitting the draft model's own samples must fail the same test."""
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    with Model(tiny_pair[0]) as target, Model(tiny_pair[1]) as draft:
        exact = exact_two_token_distribution(target, sampling)
        counts = plain_two_token_counts(draft, sampling, N_SEEDS // 2)
    assert chi_square_pvalue(counts, exact) < ALPHA
