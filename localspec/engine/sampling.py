"""Turning logits into the probability vector that is sampled from.

The same `logits_to_probs` serves the draft and the target, so the acceptance rule
compares like with like. Order of the transforms: temperature, then top-k, top-p
and min-p truncation, then renormalisation. Temperature 0 means greedy.
"""

from __future__ import annotations

import numpy as np

from ..settings import SamplingParams

# Before a full sort for top-p, look at this many of the most likely tokens first:
# they almost always hold the nucleus, and partitioning is far cheaper than sorting.
_TOP_P_PARTIAL_SORT = 256


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax in float64."""
    shifted = np.asarray(logits, dtype=np.float64) - np.max(logits)
    exp = np.exp(shifted)
    return exp / exp.sum()


def logits_to_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Return the processed next-token distribution (float64, zero outside the kept support)."""
    n_vocab = logits.shape[-1]
    probs = np.zeros(n_vocab, dtype=np.float64)
    if params.greedy:
        probs[int(np.argmax(logits))] = 1.0
        return probs

    scaled = np.asarray(logits, dtype=np.float64) / params.temperature
    candidates = _min_p_prefilter(scaled, params)
    if 0 < params.top_k < len(candidates):
        candidates = candidates[np.argpartition(-scaled[candidates], params.top_k - 1)[: params.top_k]]
    candidate_probs = softmax(scaled[candidates])

    if params.top_p < 1.0:
        keep = _nucleus(candidate_probs, params.top_p)
        candidates, candidate_probs = candidates[keep], candidate_probs[keep]
    if params.min_p > 0.0:
        keep = candidate_probs >= params.min_p * candidate_probs.max()
        candidates, candidate_probs = candidates[keep], candidate_probs[keep]

    probs[candidates] = candidate_probs / candidate_probs.sum()
    return probs


def _min_p_prefilter(scaled: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Token ids that can survive the filters, found cheaply when top-p is off.

    min-p keeps p_i >= min_p * p_max, i.e. scaled_i >= max(scaled) + ln(min_p);
    without top-p (whose cumulative sums depend on every top-k survivor) this
    commutes with top-k, so applying it first changes nothing but the cost.
    """
    if params.min_p > 0.0 and params.top_p >= 1.0:
        return np.flatnonzero(scaled >= scaled.max() + np.log(params.min_p))
    return np.arange(len(scaled))


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Indices of the smallest set of most likely tokens whose mass reaches `top_p`."""
    if len(probs) > _TOP_P_PARTIAL_SORT:
        head = np.argpartition(-probs, _TOP_P_PARTIAL_SORT - 1)[:_TOP_P_PARTIAL_SORT]
        if probs[head].sum() >= top_p:
            order = head[np.argsort(-probs[head], kind="stable")]
        else:
            order = np.argsort(-probs, kind="stable")
    else:
        order = np.argsort(-probs, kind="stable")
    cumulative = np.cumsum(probs[order])
    n_keep = int(np.searchsorted(cumulative, top_p)) + 1
    return order[: min(n_keep, len(order))]


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a (possibly unnormalised) probability vector."""
    cumulative = np.cumsum(probs)
    return int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
