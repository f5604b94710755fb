"""Prompt lookup: draft the tokens that followed the latest earlier occurrence of the context's last n tokens.

Needs no draft model. Where an answer copies its prompt (edit this code,
extract these fields, repeat this text) long runs are found and verified in
one target pass each. The proposal is deterministic (a point-mass q), so the
target verifies it by comparing with its own samples: exact at any temperature.
"""

from __future__ import annotations

import time
from typing import Sequence

from ..constraint import TokenGrammar
from ..draft_length import DraftLength, FixedLength
from ..sampling import Sampler
from .base import NO_DRAFT, Draft


class NGramIndex:
    """Where each n-gram of a token sequence last occurred, updated as the sequence grows."""

    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self._tokens: list[int] = []
        self._next_after: dict[tuple[int, ...], int] = {}  # n-gram -> position just after its latest occurrence
        self._indexed = 0  # n-grams ending before this position are in the index

    def reset(self, tokens: Sequence[int]) -> None:
        self._tokens = list(tokens)
        self._next_after.clear()
        self._indexed = 0

    def extend_to(self, context: Sequence[int]) -> None:
        """Follow `context`, which extends the sequence seen so far (else the index starts over)."""
        known = len(self._tokens)
        if list(context[:known]) != self._tokens:
            self.reset(context)
        else:
            self._tokens.extend(context[known:])
        # Index every n-gram that ends before the last token: the suffix itself must match an earlier one.
        end = len(self._tokens) - 1
        for stop in range(max(self._indexed, 1), end + 1):
            for n in range(self.n_min, self.n_max + 1):
                if stop - n >= 0:
                    self._next_after[tuple(self._tokens[stop - n : stop])] = stop
        self._indexed = max(self._indexed, end + 1)

    def match(self) -> tuple[int, int] | None:
        """(n, start of the continuation) for the longest n-gram ending the sequence seen earlier, or None."""
        for n in range(self.n_max, self.n_min - 1, -1):
            if len(self._tokens) > n:
                start = self._next_after.get(tuple(self._tokens[-n:]))
                if start is not None:
                    return n, start
        return None

    def continuation(self, start: int, max_tokens: int) -> list[int]:
        return self._tokens[start : start + max_tokens]


class NGramDrafter:
    """Drafts by prompt lookup over the whole context (prompt and generated text)."""

    def __init__(self, n_min: int = 2, n_max: int = 4, length: DraftLength | None = None) -> None:
        self.index = NGramIndex(n_min, n_max)
        self.length = length or FixedLength(1 << 30)

    def begin(self, prompt_tokens: Sequence[int]) -> None:
        self.index.reset(prompt_tokens)

    def lookup(self, context: Sequence[int], max_tokens: int) -> tuple[int, list[int]]:
        """(matched n-gram length, proposed tokens); (0, []) when nothing matches."""
        self.index.extend_to(context)
        found = self.index.match()
        if found is None or max_tokens <= 0:
            return 0, []
        n, start = found
        return n, self.index.continuation(start, max_tokens)

    def propose(
        self, context: Sequence[int], max_tokens: int, sampler: Sampler, position: int,
        grammar: TokenGrammar | None = None,
    ) -> Draft:
        """The continuation of the longest match, cut where `grammar` stops accepting it."""
        started = time.perf_counter()
        _, tokens = self.lookup(context, self.length.plan(max_tokens))
        if grammar is not None:
            tokens = tokens[: grammar.validate(tokens)]
        if not tokens:
            return NO_DRAFT
        self.length.record_draft_step((time.perf_counter() - started) / len(tokens))
        return Draft(tokens, None)

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float) -> None:
        """Pass the target's verdict and the verify pass's cost to the length controller."""
        self.length.observe(n_proposed, n_accepted, verify_seconds)
