"""Which drafted tokens the target keeps: the verification step of speculative decoding.

One batched target pass scores the k drafted tokens d_1..d_k and gives p_target
at their k+1 positions. `accept` is the one call the generation loop makes; it
keeps a prefix of the draft and adds one token of the target's own:
- temperature 0: keep drafts while they equal the target's argmax, then emit the
  target's argmax (no probabilities are computed);
- coupled verification, and any draft without q_draft (a deterministic lookup):
  the target draws its own token at each position with the `Sampler`; drafts are
  kept while they equal it, and the first that does not is replaced by it (or,
  all kept, the target's token at position k+1 is the bonus). With coupled
  noise the emitted tokens are exactly those target-only decoding draws;
- rejection verification of a sampled draft (Leviathan et al. 2022; Chen et al.
  2023): keep d_i with probability min(1, p_target(d_i) / q_draft(d_i)); at the
  first rejection draw from norm(max(0, p_target - q_draft)); if all are kept,
  draw a bonus token from p_target at position k+1. Exact in distribution.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ..settings import SamplingParams
from .penalties import Penalties
from .sampling import Probs, Sampler, masked_argmax, next_token_probs

# One distribution per position.
Distributions = Sequence[Probs]


class Accepted(NamedTuple):
    """The tokens to emit (kept drafts, then one token from the target) and how many drafts were kept."""

    tokens: list[int]
    n_accepted: int


def accept(
    draft_tokens: Sequence[int],
    q_draft: Distributions | None,
    target_logits: np.ndarray,
    sampling: SamplingParams,
    sampler: Sampler,
    position: int,
    allowed: Sequence[np.ndarray] | None = None,
    *,
    text: Sequence[int],
) -> Accepted:
    """Judge a draft against the target's logits at its k+1 positions (one row per draft token, plus one).

    Row i scores the token at `position + i` of the generation, after `text` (the prompt and the tokens
    emitted so far) and the drafts before it, which the repetition penalties count (`Penalties.each_row`,
    where `sampling` asks for any); `allowed[i]`,
    when the output is held to a grammar, is that row's mask (the grammar's
    state after the drafts before it). Under coupled verification every draft is
    checked against the target's own draws, so what is emitted never depends on
    the draft; under rejection verification a draft with q_draft is verified by
    rejection sampling.
    """
    masks = allowed if allowed is not None else [None] * len(target_logits)
    penalties = Penalties.of(sampling)
    if penalties is not None:
        target_logits = penalties.each_row(target_logits, text, draft_tokens)
    if sampling.greedy:
        return accept_greedy(draft_tokens, [masked_argmax(row, mask) for row, mask in zip(target_logits, masks)])
    p_target = [next_token_probs(row, sampling, mask) for row, mask in zip(target_logits, masks)]
    if q_draft is None or not sampler.verifies_by_rejection:
        return accept_by_target_samples(draft_tokens, p_target, sampler, position)
    return rejection_sample(draft_tokens, q_draft, p_target, sampler.rng)  # type: ignore[attr-defined]  # a StreamSampler


def rejection_sample(
    draft_tokens: Sequence[int], q_draft: Distributions, p_target: Distributions, rng: np.random.Generator
) -> Accepted:
    """Keep d_i with probability min(1, p/q); resample the first rejection from the residual; else a bonus token."""
    k = len(draft_tokens)
    ratios = np.array([p_target[i][d] / q_draft[i][d] for i, d in enumerate(draft_tokens)])
    kept = rng.random(k) < ratios
    n_accepted = k if kept.all() else int(np.argmin(kept))
    if n_accepted == k:
        return Accepted([*draft_tokens, p_target[k].sample(rng)], k)
    p, q = p_target[n_accepted], q_draft[n_accepted]
    residual = p.minus(q) or p  # None when p == q up to rounding: then any sample of p is exact
    return Accepted([*draft_tokens[:n_accepted], residual.sample(rng)], n_accepted)


def accept_by_target_samples(
    draft_tokens: Sequence[int], p_target: Distributions, sampler: Sampler, position: int
) -> Accepted:
    """Draw the target's own token at each position; keep d_i while it equals that token."""
    emitted: list[int] = []
    for i, drafted in enumerate(draft_tokens):
        token = sampler.draw(p_target[i], position + i)
        emitted.append(token)
        if token != drafted:
            return Accepted(emitted, i)
    k = len(draft_tokens)
    emitted.append(sampler.draw(p_target[k], position + k))
    return Accepted(emitted, k)


def accept_greedy(draft_tokens: Sequence[int], target_argmax: Sequence[int]) -> Accepted:
    """Temperature 0: keep draft tokens while they equal the target's argmax, then emit the target's argmax."""
    n_accepted = 0
    while n_accepted < len(draft_tokens) and draft_tokens[n_accepted] == target_argmax[n_accepted]:
        n_accepted += 1
    return Accepted([*draft_tokens[:n_accepted], int(target_argmax[n_accepted])], n_accepted)
