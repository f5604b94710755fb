"""The acceptance rule on synthetic distributions: what it emits is distributed as p_target."""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np
import pytest
from dense import rows_to_probs, sample
from stats_helpers import chi_square_pvalue

from localspec.engine.acceptance import (
    Accepted,
    accept,
    accept_by_target_samples,
    accept_greedy,
    rejection_sample,
)
from localspec.engine.sampling import StreamSampler
from localspec.settings import SamplingParams

ALPHA = 1e-3  # seeds are fixed, so each test is deterministic; this is the test's size
N_SAMPLES = 4_000
VOCAB = 6


def _dist(values: list[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    return array / array.sum()


def _speculative_stream(p_rows, q_rows, n_tokens, k, rng, rule: Callable = rejection_sample, deterministic=False,
                        verdicts: Counter | None = None):
    """Emit `n_tokens` tokens by repeated draft+verify, where position i has target p_rows[i]
    and draft q_rows[i] (distributions that do not depend on the prefix); count each pass's
    verdict ("rejected" or "all kept") in `verdicts`."""
    out: list[int] = []
    while len(out) < n_tokens:
        start = len(out)
        rows = range(start, start + k)
        draft = [sample(q_rows[i], rng) for i in rows]
        p = np.stack([p_rows[i] for i in range(start, start + k + 1)])
        if deterministic:
            tokens, n_accepted = accept_by_target_samples(draft, rows_to_probs(p), StreamSampler(rng), start)
        else:
            tokens, n_accepted = rule(draft, rows_to_probs([q_rows[i] for i in rows]), rows_to_probs(p), rng)
        if verdicts is not None:
            verdicts["all kept" if n_accepted == k else "rejected"] += 1
        out.extend(tokens)
    return tuple(out[:n_tokens])


def _position_rows(p_values, q_values):
    """Position-dependent rows: odd positions use the distributions reversed, so a wrong
    carry-over between positions shows up in the joint distribution."""
    base_p, base_q = _dist(p_values), _dist(q_values)
    p_rows = [base_p if i % 2 == 0 else base_p[::-1].copy() for i in range(8)]
    q_rows = [base_q if i % 2 == 0 else base_q[::-1].copy() for i in range(8)]
    return p_rows, q_rows


def _joint_pvalue(p_rows, q_rows, k, rng, rule: Callable = rejection_sample, verdicts: Counter | None = None) -> float:
    counts = Counter(_speculative_stream(p_rows, q_rows, 2, k, rng, rule, verdicts=verdicts) for _ in range(N_SAMPLES))
    exact = {(a, b): p_rows[0][a] * p_rows[1][b] for a in range(VOCAB) for b in range(VOCAB) if p_rows[0][a] * p_rows[1][b] > 0}
    return chi_square_pvalue(counts, exact)


CASES = {
    "dense": ([0.5, 0.2, 0.1, 0.1, 0.05, 0.05], [0.1, 0.1, 0.3, 0.3, 0.1, 0.1]),
    "q_zero_where_p_has_mass": ([0.3, 0.3, 0.2, 0.1, 0.1, 0.0], [0.0, 0.0, 0.5, 0.5, 0.0, 0.0]),
    "p_equals_q": ([0.4, 0.3, 0.1, 0.1, 0.05, 0.05], [0.4, 0.3, 0.1, 0.1, 0.05, 0.05]),
    "top_k_truncated_supports": ([0.6, 0.4, 0.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.3, 0.2, 0.0, 0.0]),
}


# p == q (every draft kept) and q without p's support (mostly residual draws) in the slow suite only.
FAST_ACCEPTANCE_CASES = ("dense", "top_k_truncated_supports")


# k=1: the bonus token is the second one compared; k=3: a rejection at position 2 (the fast suite keeps k=1)
@pytest.mark.parametrize("k, case", [
    pytest.param(k, name, marks=[] if name in FAST_ACCEPTANCE_CASES and k == 1 else [pytest.mark.slow], id=f"{k}-{name}")
    for k in (1, 3) for name in sorted(CASES)])
@pytest.mark.slow
def test_first_two_tokens_follow_the_target(case: str, k: int) -> None:
    p_rows, q_rows = _position_rows(*CASES[case])
    verdicts: Counter = Counter()
    assert _joint_pvalue(p_rows, q_rows, k, np.random.default_rng(1234 + k), verdicts=verdicts) > ALPHA
    # Both sides of the rule ran (where p == q every draft is kept, and must be).
    assert verdicts["all kept"] > 100
    assert verdicts["rejected"] == 0 if case == "p_equals_q" else verdicts["rejected"] > 100


def _resample_from_p_target(draft_tokens, q_draft, p_target, rng) -> Accepted:
    """A deliberately wrong rule: after a rejection, sample p_target instead of the residual."""
    k = len(draft_tokens)
    for i, token in enumerate(draft_tokens):
        if rng.random() >= p_target[i][token] / q_draft[i][token]:
            return Accepted([*draft_tokens[:i], p_target[i].sample(rng)], i)
    return Accepted([*draft_tokens, p_target[k].sample(rng)], k)


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 3])
def test_the_joint_test_rejects_a_wrong_residual(k: int) -> None:
    """Power check through the same joint test: resampling from p_target after a rejection is caught."""
    p_rows, q_rows = _position_rows(*CASES["dense"])
    assert _joint_pvalue(p_rows, q_rows, k, np.random.default_rng(4321 + k), rule=_resample_from_p_target) < ALPHA


class _RejectEveryDraft:
    """An rng whose acceptance draws (arrays) are the largest float below 1, so p/q < 1 always rejects;
    scalar draws (sampling) come from a real generator."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def random(self, size=None):
        if size is None:
            return self._rng.random()
        return np.full(size, np.nextafter(1.0, 0.0))


def test_the_residual_fallback_samples_the_target_when_p_equals_q_up_to_rounding() -> None:
    """q one ulp above p everywhere: p/q < 1 rejects, max(0, p - q) is all zero, and the
    fallback must then emit exact samples of p_target."""
    p = _dist([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])
    q = np.nextafter(p, 1.0)
    rng = _RejectEveryDraft(11)
    counts: Counter = Counter()
    for _ in range(N_SAMPLES):
        draft = [sample(q, rng._rng)]
        tokens, n_accepted = rejection_sample(draft, rows_to_probs([q]), rows_to_probs([p, p]), rng)  # type: ignore[arg-type]
        assert n_accepted == 0 and len(tokens) == 1
        counts[tokens[0]] += 1
    assert chi_square_pvalue(counts, dict(enumerate(p))) > ALPHA


def test_deterministic_drafter_path_is_exact() -> None:
    p = _dist([0.5, 0.2, 0.1, 0.1, 0.05, 0.05])
    rows = [p] * 8
    q_rows = [_dist([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])] * 8  # a drafter that always proposes token 2
    rng = np.random.default_rng(7)
    counts = Counter(_speculative_stream(rows, q_rows, 1, 3, rng, deterministic=True)[0] for _ in range(N_SAMPLES))
    assert chi_square_pvalue(counts, dict(enumerate(p))) > ALPHA


def test_the_check_has_power_against_no_correction() -> None:
    """Emitting the draft's own samples (no correction) must be caught by the same check."""
    p, q = _dist(CASES["dense"][0]), _dist(CASES["dense"][1])
    rng = np.random.default_rng(99)
    counts = Counter(sample(q, rng) for _ in range(N_SAMPLES))
    assert chi_square_pvalue(counts, dict(enumerate(p))) < ALPHA


def test_rejected_token_never_comes_back_from_the_residual() -> None:
    # Where q >= p the residual max(0, p - q) is zero: a rejection can never emit such a token.
    p = _dist([0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    q = _dist([0.1, 0.9, 0.0, 0.0, 0.0, 0.0])
    rng = np.random.default_rng(3)
    for _ in range(2000):
        tokens, n_accepted = rejection_sample([1], rows_to_probs([q]), rows_to_probs([p, p]), rng)
        if n_accepted == 0:
            assert tokens == [0]


def test_greedy_keeps_matching_prefix_then_emits_target_argmax() -> None:
    assert accept_greedy([4, 5, 6], [4, 5, 9, 1]) == ([4, 5, 9], 2)
    assert accept_greedy([4, 5], [4, 5, 7]) == ([4, 5, 7], 2)
    assert accept_greedy([3], [8, 0]) == ([8], 0)
    assert accept_greedy([], [2]) == ([2], 0)


@pytest.mark.slow
def test_accept_picks_the_path_from_the_sampling_and_the_draft() -> None:
    logits = np.log(np.stack([_dist([0.7, 0.1, 0.1, 0.05, 0.03, 0.02])] * 3))
    rng = np.random.default_rng(0)
    assert accept([0, 1], None, logits, SamplingParams(temperature=0), StreamSampler(rng), 0, text=[]) == ([0, 0], 1)
    sampled = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    q = np.stack([_dist([1, 0, 0, 0, 0, 0])] * 2)
    kept = accept([0, 0], rows_to_probs(q), logits, sampled, StreamSampler(np.random.default_rng(1)), 0, text=[])
    assert kept.tokens[: kept.n_accepted] == [0] * kept.n_accepted and len(kept.tokens) == kept.n_accepted + 1
    counts = Counter(accept([3], None, logits[:2], sampled, StreamSampler(np.random.default_rng(s)), 0,
                            text=[]).tokens[0] for s in range(4000))
    assert chi_square_pvalue(counts, dict(enumerate(_dist([0.7, 0.1, 0.1, 0.05, 0.03, 0.02])))) > ALPHA
