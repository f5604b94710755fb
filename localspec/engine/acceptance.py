"""The acceptance rule of speculative sampling (Leviathan et al. 2022; Chen et al. 2023).

Given draft tokens d_1..d_k drawn from q_draft and the target's distributions
p_target at the k+1 positions that one batched target pass scores, keep d_i with
probability min(1, p_target(d_i) / q_draft(d_i)); at the first rejection draw from
norm(max(0, p_target - q_draft)); if all k are kept, draw a bonus token from
p_target at position k+1. The emitted tokens are distributed exactly as if they
had been sampled from the target alone.

`accept` is the one call the generation loop makes; it picks the path:
- temperature 0: keep drafts while they equal the target's argmax, then emit the
  target's argmax (no probabilities are computed);
- a deterministic drafter (no q_draft, e.g. prompt lookup): q is a point mass, so
  keeping d_i when a sample of p_target equals it is the same rule;
- a sampled draft: rejection sampling against q_draft.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ..settings import SamplingParams
from .sampling import Probs, as_probs, next_token_probs

# One distribution per position, sparse (`Probs`) or dense; `row[token]` reads either.
Distributions = Sequence["Probs | np.ndarray"]


class Accepted(NamedTuple):
    """The tokens to emit (kept drafts, then one token from the target) and how many drafts were kept."""

    tokens: list[int]
    n_accepted: int


def accept(
    draft_tokens: Sequence[int],
    q_draft: Distributions | None,
    target_logits: np.ndarray,
    sampling: SamplingParams,
    rng: np.random.Generator,
) -> Accepted:
    """Judge a draft against the target's logits at its k+1 positions (one row per draft token, plus one)."""
    if sampling.greedy:
        return accept_greedy(draft_tokens, np.argmax(target_logits, axis=1))
    p_target = [next_token_probs(row, sampling) for row in target_logits]
    if q_draft is None:
        return accept_by_target_samples(draft_tokens, p_target, rng)
    return rejection_sample(draft_tokens, q_draft, p_target, rng)


def rejection_sample(
    draft_tokens: Sequence[int], q_draft: Distributions, p_target: Distributions, rng: np.random.Generator
) -> Accepted:
    """Keep d_i with probability min(1, p/q); resample the first rejection from the residual; else a bonus token."""
    k = len(draft_tokens)
    ratios = np.array([p_target[i][d] / q_draft[i][d] for i, d in enumerate(draft_tokens)])
    kept = rng.random(k) < ratios
    n_accepted = k if kept.all() else int(np.argmin(kept))
    if n_accepted == k:
        return Accepted([*draft_tokens, as_probs(p_target[k]).sample(rng)], k)
    p, q = as_probs(p_target[n_accepted]), as_probs(q_draft[n_accepted])
    residual = p.minus(q) or p  # None when p == q up to rounding: then any sample of p is exact
    return Accepted([*draft_tokens[:n_accepted], residual.sample(rng)], n_accepted)


def accept_by_target_samples(draft_tokens: Sequence[int], p_target: Distributions, rng: np.random.Generator) -> Accepted:
    """A deterministic draft: sample the target at each position and keep d_i while the sample equals it."""
    emitted: list[int] = []
    for position, drafted in enumerate(draft_tokens):
        token = as_probs(p_target[position]).sample(rng)
        emitted.append(token)
        if token != drafted:
            return Accepted(emitted, position)
    emitted.append(as_probs(p_target[len(draft_tokens)]).sample(rng))
    return Accepted(emitted, len(draft_tokens))


def accept_greedy(draft_tokens: Sequence[int], target_argmax: Sequence[int]) -> Accepted:
    """Temperature 0: keep draft tokens while they equal the target's argmax, then emit the target's argmax."""
    n_accepted = 0
    while n_accepted < len(draft_tokens) and draft_tokens[n_accepted] == target_argmax[n_accepted]:
        n_accepted += 1
    return Accepted([*draft_tokens[:n_accepted], int(target_argmax[n_accepted])], n_accepted)
