"""The acceptance rule on synthetic distributions: what it emits is distributed as p_target."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from stats_helpers import chi_square_pvalue

from localspec.sampling import sample
from localspec.verify import verify, verify_greedy

ALPHA = 1e-3  # seeds are fixed, so each test is deterministic; this is the test's size
N_SAMPLES = 20_000
VOCAB = 6


def _dist(values: list[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    return array / array.sum()


def _speculative_stream(p_rows, q_rows, n_tokens, k, rng, drafter="sample"):
    """Emit `n_tokens` tokens by repeated draft+verify, where position i has target p_rows[i]
    and draft q_rows[i] (distributions that do not depend on the prefix)."""
    out: list[int] = []
    while len(out) < n_tokens:
        start = len(out)
        rows = range(start, start + k)
        draft = [sample(q_rows[i], rng) for i in rows]
        q = np.stack([q_rows[i] for i in rows]) if drafter == "sample" else None
        p = np.stack([p_rows[i] for i in range(start, start + k + 1)])
        tokens, _ = verify(draft, q, p, rng)
        out.extend(tokens)
    return tuple(out[:n_tokens])


CASES = {
    "dense": ([0.5, 0.2, 0.1, 0.1, 0.05, 0.05], [0.1, 0.1, 0.3, 0.3, 0.1, 0.1]),
    "q_zero_where_p_has_mass": ([0.3, 0.3, 0.2, 0.1, 0.1, 0.0], [0.0, 0.0, 0.5, 0.5, 0.0, 0.0]),
    "p_equals_q": ([0.4, 0.3, 0.1, 0.1, 0.05, 0.05], [0.4, 0.3, 0.1, 0.1, 0.05, 0.05]),
    "top_k_truncated_supports": ([0.6, 0.4, 0.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.3, 0.2, 0.0, 0.0]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("k", [1, 3])
def test_first_two_tokens_follow_the_target(case: str, k: int) -> None:
    p_values, q_values = CASES[case]
    base_p, base_q = _dist(p_values), _dist(q_values)
    # Position-dependent targets: position 1 uses the target reversed, so a wrong
    # carry-over between positions would show up in the joint distribution.
    p_rows = [base_p if i % 2 == 0 else base_p[::-1].copy() for i in range(8)]
    q_rows = [base_q if i % 2 == 0 else base_q[::-1].copy() for i in range(8)]
    rng = np.random.default_rng(1234 + k)
    counts = Counter(_speculative_stream(p_rows, q_rows, 2, k, rng) for _ in range(N_SAMPLES))
    exact = {(a, b): p_rows[0][a] * p_rows[1][b] for a in range(VOCAB) for b in range(VOCAB) if p_rows[0][a] * p_rows[1][b] > 0}
    assert chi_square_pvalue(counts, exact) > ALPHA


def test_deterministic_drafter_path_is_exact() -> None:
    p = _dist([0.5, 0.2, 0.1, 0.1, 0.05, 0.05])
    rows = [p] * 8
    q_rows = [_dist([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])] * 8  # a drafter that always proposes token 2
    rng = np.random.default_rng(7)
    counts = Counter(_speculative_stream(rows, q_rows, 1, 3, rng, drafter="deterministic")[0] for _ in range(N_SAMPLES))
    assert chi_square_pvalue(counts, dict(enumerate(p))) > ALPHA


def test_the_check_has_power_against_a_wrong_rule() -> None:
    """Accepting every draft token (no correction) must be caught by the same check."""
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
        tokens, n_accepted = verify([1], q[None, :], np.stack([p, p]), rng)
        if n_accepted == 0:
            assert tokens == [0]


def test_greedy_keeps_matching_prefix_then_emits_target_argmax() -> None:
    assert verify_greedy([4, 5, 6], [4, 5, 9, 1]) == ([4, 5, 9], 2)
    assert verify_greedy([4, 5], [4, 5, 7]) == ([4, 5, 7], 2)
    assert verify_greedy([3], [8, 0]) == ([8], 0)
    assert verify_greedy([], [2]) == ([2], 0)
