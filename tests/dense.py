"""Distributions as dense probability vectors, for tests: the reference the sparse `Probs` is checked against."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from localspec.engine.sampling import Probs, next_token_probs
from localspec.settings import SamplingParams


def to_probs(dense: np.ndarray) -> Probs:
    """The sparse form of a dense probability vector (its nonzero entries)."""
    ids = np.flatnonzero(dense)
    return Probs(ids, np.asarray(dense, dtype=np.float64)[ids])


def rows_to_probs(rows: Sequence[np.ndarray] | np.ndarray) -> list[Probs]:
    return [to_probs(row) for row in rows]


def to_dense(probs: Probs, n_vocab: int) -> np.ndarray:
    dense = np.zeros(n_vocab, dtype=np.float64)
    dense[probs.ids] = probs.values
    return dense


def penalised(logits: np.ndarray, text: Sequence[int], params: SamplingParams) -> np.ndarray:
    """`logits` after the repetition penalties of `params` for the row that follows `text`, one token at a
    time in float32 as llama.cpp's penalties sampler writes them (the reference `Penalties` is checked against):
    the window is the last `repeat_last_n` tokens, -1 the whole text, 0 none."""
    n = params.repeat_last_n
    window = [] if n == 0 else list(text) if n == -1 else list(text)[-n:]
    out = np.array(logits, dtype=np.float32)
    for token in set(window):
        if 0 <= token < len(out):
            repeat, count = np.float32(params.repeat_penalty), np.float32(window.count(token))
            out[token] = out[token] * repeat if out[token] <= 0 else out[token] / repeat
            out[token] -= count * np.float32(params.frequency_penalty) + np.float32(params.presence_penalty)
    return out


def logits_to_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The processed next-token distribution as a dense vector (float64, zero outside the kept support)."""
    return to_dense(next_token_probs(logits, params), logits.shape[-1])


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a (possibly unnormalised) dense probability vector, with one `rng.random()`."""
    cumulative = np.cumsum(probs)
    i = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    # u * total can round up to the total itself: that draw belongs to the last token with mass.
    return i if i < len(cumulative) else int(np.flatnonzero(probs)[-1])
