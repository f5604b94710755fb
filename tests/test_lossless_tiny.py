"""End-to-end losslessness on a tiny generated model pair.

Over many seeds, the first tokens the speculative loop emits must follow the
target-only distribution, computed exactly from the target's own logits: two
tokens for target-only decoding, three for speculative decoding (the first comes
from the prompt's evaluation; drafts, and the bonus token after them, from the
second on).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Hashable

import numpy as np
import pytest
from dense import logits_to_probs, penalised
from stats_helpers import MIN_EXPECTED_COUNT, chi_square_pvalue

from localspec.engine.drafters import build_drafter
from localspec.engine.generation import generate_text
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, SamplingParams, SpeculativeParams

PROMPT = [1, 260, 265, 270]
N_SEEDS = 1200
ALPHA = 1e-3


def exact_two_token_distribution(
    target: Model, sampling: SamplingParams, prompt: list[int] = PROMPT
) -> dict[tuple[int, int], float]:
    first = logits_to_probs(target.next_logits(prompt), sampling)
    joint = {}
    for t1 in np.flatnonzero(first):
        second = logits_to_probs(target.next_logits([*prompt, int(t1)]), sampling)
        for t2 in np.flatnonzero(second):
            joint[(int(t1), int(t2))] = float(first[t1] * second[t2])
    return joint


def three_token_pvalue(target: Model, sampling: SamplingParams, prompt: list[int], observed: Counter) -> float:
    """`chi_square_pvalue` of the `observed` counts of the first three tokens against the target's exact
    probabilities: every outcome expected 5 times or more in as many draws is a cell of its own, all the
    others one cell together (their exact mass: the rest), and an observed outcome the target never draws
    fails the test. (Every outcome's probability would take a target pass per pair of first tokens.)"""
    n = sum(observed.values())

    def after(text: list[int]) -> np.ndarray:
        return logits_to_probs(penalised(target.next_logits(text), text, sampling), sampling)

    first = after(prompt)
    second = {int(t1): after([*prompt, int(t1)]) for t1 in np.flatnonzero(first)}

    def third(t1: int, t2: int) -> np.ndarray:
        return after([*prompt, t1, t2])

    cells: dict[Hashable, float] = {}
    for t1, given_t1 in second.items():
        for t2 in np.flatnonzero(first[t1] * given_t1 * n >= MIN_EXPECTED_COUNT):
            for t3, p in enumerate(first[t1] * given_t1[t2] * third(t1, int(t2))):
                if p * n >= MIN_EXPECTED_COUNT:
                    cells[(t1, int(t2), t3)] = float(p)
    counts: Counter = Counter()
    for (t1, t2, t3), count in observed.items():
        if (t1, t2, t3) in cells:
            counts[(t1, t2, t3)] += count
        elif t1 in second and second[t1][t2] > 0 and third(t1, t2)[t3] > 0:
            counts["the rest"] += count
        else:
            return 0.0  # drawn where the target never draws
    cells["the rest"] = max(0.0, 1.0 - sum(cells.values()))
    return chi_square_pvalue(counts, cells)


T1 = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
TRUNCATED = SamplingParams(temperature=0.7, top_k=8, top_p=0.9, min_p=0.0)
# After it the likeliest first tokens (260, 273, 270, 265) make with its last a 2-gram seen before: lookups
# draft the second token on.
REPEATING_PROMPT = [1, 265, 260, 265, 273, 265, 270, 262, 265, 265, 260, 265]

CASES = {
    # name: (sampling, speculative settings, max_tokens: the first token, then one pass's drafts and more)
    # Rejection verification (`--verify rejection`): exact in distribution only.
    "t1.0": (SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), SpeculativeParams(draft_max=3, verify="rejection"), 4),
    "t0.7-topk8-topp0.9": (SamplingParams(temperature=0.7, top_k=8, top_p=0.9, min_p=0.0), SpeculativeParams(draft_max=3, verify="rejection"), 4),
    # The shipped default: min-p 0.05 through its logit-threshold prefilter.
    "default-sampling": (SamplingParams(), SpeculativeParams(draft_max=3, verify="rejection"), 4),
    # draft_max 1 with three tokens: when the draft (the second token) is kept, the third is the
    # bonus token from the last batched row, so it is inside the compared window.
    "bonus-token": (SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), SpeculativeParams(draft_max=1, verify="rejection"), 3),
    # p_min cuts drafts short where the draft is unsure (the test checks that many passes drafted
    # nothing); draft_min drops drafts that the remaining room cuts below 2 tokens.
    "p_min-draft_min": (SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), SpeculativeParams(draft_max=3, draft_min=2, p_min=0.3, verify="rejection"), 4),
    # Lookup drafts are deterministic (a point-mass q); hybrid passes are lookup or model, per pass
    # (after a rejected lookup token the context's last 2-gram is new, so the model drafts next).
    "ngram-t1.0": (T1, SpeculativeParams(strategy="ngram", draft_max=3, verify="rejection"), 4),
    "ngram-topk8-topp0.9": (TRUNCATED, SpeculativeParams(strategy="ngram", draft_max=3, verify="rejection"), 4),
    "hybrid-t1.0": (T1, SpeculativeParams(strategy="hybrid", draft_max=3, ngram_min=2, ngram_max=2, verify="rejection"), 4),
    "hybrid-topk8-topp0.9": (TRUNCATED, SpeculativeParams(strategy="hybrid", draft_max=3, ngram_min=2, ngram_max=2, verify="rejection"), 4),
    # Coupled verification (the default): the shipped defaults (hybrid, adaptive length, min-p 0.05)
    # and a model draft at T=1. The identity tests (test_coupled_identity.py) prove more; these
    # check the coupled sampler itself draws from the target's distribution.
    "coupled-shipped-defaults": (SamplingParams(), SpeculativeParams(), 4),
    "coupled-model-t1.0": (T1, SpeculativeParams(strategy="model", draft_max=3), 4),
}
# Repetition penalties: each row penalised for the text and the drafts before it (the exact distribution
# here by `dense.penalised`); a window of five holds the prompt's last tokens and the ones drawn. Negative
# penalties, which favour what the window holds, make a row that left out the drafts before it stand out.
PENALISED = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=0.6, presence_penalty=-1.5,
                           frequency_penalty=-0.5, repeat_last_n=5)
CASES["penalties-rejection"] = (PENALISED, SpeculativeParams(strategy="model", draft_max=3, verify="rejection"), 4)
CASES["penalties-coupled-hybrid"] = (PENALISED, SpeculativeParams(strategy="hybrid", draft_max=3, ngram_min=2,
                                                                   ngram_max=2), 4)
CONFIDENT_PROMPT = [*PROMPT, 259]  # after it the draft is often unsure: p_min stops many of its drafts


# The fast suite keeps one case (rejection with the bonus token: about a second); the slow suite
# runs them all, the shipped defaults and p_min/draft_min among them.
FAST_CASES = ("bonus-token",)


@pytest.mark.parametrize("case", [pytest.param(name, marks=[] if name in FAST_CASES else [pytest.mark.slow]) for name in CASES])
def test_speculative_first_tokens_match_target_distribution(tiny_pair: tuple[Path, Path], case: str) -> None:
    sampling, speculative, max_tokens = CASES[case]
    prompt = CONFIDENT_PROMPT if speculative.p_min > 0 else REPEATING_PROMPT if speculative.strategy != "model" else PROMPT
    target_path, draft_path = tiny_pair
    with Model(target_path) as target, Model(draft_path) as draft:
        counts: Counter = Counter()
        proposed = accepted = full_accepts = plain_passes = 0
        first_draft_length = min(speculative.longest_draft, max_tokens - 2)  # (after the first token, before the bonus)
        for seed in range(N_SEEDS):
            settings = GenerationSettings(sampling, speculative, max_tokens=max_tokens, seed=seed)
            generation = generate_text(target, prompt, settings, build_drafter(speculative, sampling, draft))
            counts[tuple(generation.tokens[:3])] += 1
            stats = generation.stats
            proposed += stats.draft_tokens_proposed
            accepted += stats.draft_tokens_accepted
            by_length = stats.accepted_length_counts  # [n]: passes that kept n drafts
            full_accepts += by_length[first_draft_length] if len(by_length) > first_draft_length else 0
            plain_passes += stats.target_passes - sum(by_length)
    # The pair must exercise both sides of the rule, or the test proves little.
    assert accepted > 100 and proposed - accepted > 100
    if speculative.strategy == "model":
        assert 0.2 < accepted / proposed < 0.95
        assert full_accepts > 100  # all drafts kept: the bonus token was emitted
    if speculative.p_min > 0:
        assert plain_passes > 100  # p_min and draft_min really left passes undrafted
    with Model(target_path) as target:
        assert three_token_pvalue(target, sampling, prompt, counts) > ALPHA
        if sampling.repeat_last_n and sampling.presence_penalty:  # the penalties moved the distribution: power
            unpenalised = dataclasses.replace(sampling, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
            assert three_token_pvalue(target, unpenalised, prompt, counts) < ALPHA


def plain_two_token_counts(model: Model, sampling: SamplingParams, n_seeds: int) -> Counter:
    """First two tokens sampled from `model` alone, once per seed."""
    return Counter(
        tuple(generate_text(model, PROMPT, GenerationSettings(sampling, max_tokens=2, seed=seed)).tokens)
        for seed in range(n_seeds)
    )


@pytest.mark.slow
def test_target_only_baseline_matches_the_same_distribution(tiny_pair: tuple[Path, Path]) -> None:
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    with Model(tiny_pair[0]) as target:
        exact = exact_two_token_distribution(target, sampling)
        counts = plain_two_token_counts(target, sampling, N_SEEDS // 2)
    assert chi_square_pvalue(counts, exact) > ALPHA


@pytest.mark.slow
def test_a_draft_used_without_correction_is_detected(tiny_pair: tuple[Path, Path]) -> None:
    """Power check: emitting the draft model's own samples must fail the same test."""
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    with Model(tiny_pair[0]) as target, Model(tiny_pair[1]) as draft:
        exact = exact_two_token_distribution(target, sampling)
        counts = plain_two_token_counts(draft, sampling, N_SEEDS // 2)
    assert chi_square_pvalue(counts, exact) < ALPHA


@pytest.mark.slow
def test_the_three_token_test_detects_a_draft_used_without_correction(tiny_pair: tuple[Path, Path]) -> None:
    """Power check of `three_token_pvalue`, which pools the rarer outcomes: the draft model's own first three
    tokens must fail it (and the target's pass it)."""
    with Model(tiny_pair[0]) as target, Model(tiny_pair[1]) as draft:
        counts = {model: Counter(tuple(generate_text(model, PROMPT, GenerationSettings(T1, max_tokens=3, seed=seed)).tokens)
                                 for seed in range(N_SEEDS)) for model in (target, draft)}
        assert three_token_pvalue(target, T1, PROMPT, counts[draft]) < ALPHA
        assert three_token_pvalue(target, T1, PROMPT, counts[target]) > ALPHA
