"""The acceptance rule of speculative sampling (Leviathan et al. 2022; Chen et al. 2023).

Given draft tokens d_1..d_k drawn from q_draft and the target's distributions
p_target at the k+1 positions that one batched target pass scores, keep d_i with
probability min(1, p_target(d_i) / q_draft(d_i)); at the first rejection draw from
norm(max(0, p_target - q_draft)); if all k are kept, draw a bonus token from
p_target at position k+1. The emitted tokens are distributed exactly as if they
had been sampled from the target alone.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .sampling import sample


def verify(
    draft_tokens: Sequence[int],
    q_draft: np.ndarray | None,
    p_target: np.ndarray,
    rng: np.random.Generator,
) -> tuple[list[int], int]:
    """Return (tokens to emit, number of draft tokens accepted).

    `p_target` has one row per draft token plus one (the bonus position). With
    `q_draft` rows the rule is rejection sampling; with `q_draft=None` (a
    deterministic drafter) a token is kept when a sample from p_target equals it.
    """
    k = len(draft_tokens)
    if q_draft is None:
        return _verify_deterministic(draft_tokens, p_target, rng)

    positions = np.arange(k)
    drafted = np.asarray(draft_tokens, dtype=np.int64)
    p_of_draft = p_target[positions, drafted]
    q_of_draft = q_draft[positions, drafted]
    accepted = rng.random(k) < p_of_draft / q_of_draft
    n_accepted = k if accepted.all() else int(np.argmin(accepted))

    if n_accepted < k:
        residual = np.maximum(p_target[n_accepted] - q_draft[n_accepted], 0.0)
        if residual.sum() <= 0.0:  # p == q up to rounding: any sample of p is exact
            residual = p_target[n_accepted]
        next_token = sample(residual, rng)
    else:
        next_token = sample(p_target[k], rng)
    return [*draft_tokens[:n_accepted], next_token], n_accepted


def _verify_deterministic(
    draft_tokens: Sequence[int], p_target: np.ndarray, rng: np.random.Generator
) -> tuple[list[int], int]:
    emitted: list[int] = []
    for position, drafted in enumerate(draft_tokens):
        token = sample(p_target[position], rng)
        emitted.append(token)
        if token != drafted:
            return emitted, position
    emitted.append(sample(p_target[len(draft_tokens)], rng))
    return emitted, len(draft_tokens)


def verify_greedy(draft_tokens: Sequence[int], target_argmax: Sequence[int]) -> tuple[list[int], int]:
    """Temperature 0: keep draft tokens while they equal the target's argmax, then emit the target's argmax."""
    n_accepted = 0
    while n_accepted < len(draft_tokens) and draft_tokens[n_accepted] == target_argmax[n_accepted]:
        n_accepted += 1
    return [*draft_tokens[:n_accepted], int(target_argmax[n_accepted])], n_accepted
