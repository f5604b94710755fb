"""Hybrid drafting: n-gram lookup when the context's last n tokens occurred before, the draft model otherwise.

Under a grammar a lookup must keep at least a few tokens after the grammar's
cut to be used. The choice is made per pass from the context alone (the lookup
and the grammar's state depend on nothing else), before anything is drafted,
so each pass is exactly one of the two: a deterministic lookup (verified against
target samples) or model drafts (verified as `speculative.verify` says). The
draft model's cache follows the context on its next pass (`Model.sync` keeps the
common prefix and evaluates what the lookup passes added).
"""

from __future__ import annotations

from typing import Sequence

from ..constraint import TokenGrammar
from ..sampling import Sampler
from .base import Draft
from .model import ModelDrafter
from .ngram import NGramDrafter

# Under a grammar a lookup is often cut to a token or two (an earlier key's continuation, then
# the grammar rejects it); the draft model, held to the grammar, usually drafts further.
_SHORTEST_LOOKUP_UNDER_A_GRAMMAR = 3


class HybridDrafter:
    def __init__(self, lookup: NGramDrafter, by_model: ModelDrafter) -> None:
        self.lookup = lookup
        self.by_model = by_model
        self._last: NGramDrafter | ModelDrafter = by_model  # who drafted the pass being verified

    def begin(self, prompt_tokens: Sequence[int]) -> None:
        self.lookup.begin(prompt_tokens)
        self.by_model.begin(prompt_tokens)

    def propose(
        self, context: Sequence[int], max_tokens: int, sampler: Sampler, position: int,
        grammar: TokenGrammar | None = None,
    ) -> Draft:
        draft = self.lookup.propose(context, max_tokens, sampler, position, grammar)
        if len(draft.tokens) >= (1 if grammar is None else _SHORTEST_LOOKUP_UNDER_A_GRAMMAR):
            self._last = self.lookup
            return draft
        self._last = self.by_model
        return self.by_model.propose(context, max_tokens, sampler, position, grammar)

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float) -> None:
        self._last.observe(n_proposed, n_accepted, verify_seconds)
