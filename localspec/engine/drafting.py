"""Drafters: whatever proposes the tokens the target then verifies.

A drafter answers three calls: `begin(prompt_tokens)` before a generation;
`propose(context, max_tokens, rng)`, which returns new candidate tokens (never
the context itself) with the distribution each was drawn from; and
`observe(n_proposed, n_accepted)`, which tells it how the target judged them.
A drafter that returns `q_draft=None` is deterministic and is verified by
comparing with samples of the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from ..runtime.model import Model
from ..settings import SamplingParams
from .sampling import logits_to_probs, sample, softmax


@dataclass
class Draft:
    """Proposed tokens and, row by row, the distribution q_draft each was sampled from."""

    tokens: list[int]
    q_draft: np.ndarray | None


class Drafter(Protocol):
    def begin(self, prompt_tokens: Sequence[int]) -> None: ...

    def propose(self, context: Sequence[int], max_tokens: int, rng: np.random.Generator) -> Draft: ...

    def observe(self, n_proposed: int, n_accepted: int) -> None: ...


class ModelDrafter:
    """Drafts by sampling a smaller model with the same vocabulary, token by token.

    Drafting stops early when the draft model's confidence (the largest
    probability of its unprocessed next-token distribution) falls below `p_min`.
    The test looks only at the context, never at the token about to be drawn, so
    the drafted tokens stay exact samples of q_draft.
    """

    def __init__(self, model: Model, sampling: SamplingParams, p_min: float = 0.0) -> None:
        self.model = model
        self.sampling = sampling
        self.p_min = p_min

    def begin(self, prompt_tokens: Sequence[int]) -> None:
        """Evaluate the prompt ahead of the first step (counted as prompt time)."""
        self.model.sync(prompt_tokens[: min(len(prompt_tokens), self.model.n_ctx) - 1])

    def propose(self, context: Sequence[int], max_tokens: int, rng: np.random.Generator) -> Draft:
        # The draft's cache must hold the context plus all but the last draft token.
        max_tokens = min(max_tokens, self.model.n_ctx - len(context) + 1)
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        if max_tokens <= 0:
            return self._draft(tokens, rows)
        logits = self.model.next_logits(context)
        while True:
            if self.p_min > 0 and softmax(logits).max() < self.p_min:
                break
            if self.sampling.greedy:
                token = int(np.argmax(logits))
            else:
                q = logits_to_probs(logits, self.sampling)
                token = sample(q, rng)
                rows.append(q)
            tokens.append(token)
            if len(tokens) == max_tokens:
                break
            logits = self.model.eval([token], logits="last")[0]
        return self._draft(tokens, rows)

    def _draft(self, tokens: list[int], rows: list[np.ndarray]) -> Draft:
        """Greedy drafts are deterministic (no q_draft); sampled ones carry one q row per token."""
        if self.sampling.greedy:
            return Draft(tokens, None)
        return Draft(tokens, np.stack(rows) if rows else np.empty((0, self.model.n_vocab)))

    def observe(self, n_proposed: int, n_accepted: int) -> None:
        """A fixed-length drafter learns nothing from feedback."""
