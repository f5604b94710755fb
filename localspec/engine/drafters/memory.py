"""Drafting from memory: the continuation earlier text took after the longest match of the context's tail.

The memory holds what this machine generated and read before (earlier runs,
chats, documents a user added; `localspec/app/memory.py` keeps it). A proposal
is deterministic (a point-mass q) given the memory and the context, so under
coupled verification the target keeps it exactly where it equals its own draw:
lossless whatever the memory holds. Under rejection sampling that is not
assured: the memory may hold an earlier run with the same seed, whose tokens are
correlated with the very draws that verify them, so `build_drafter` leaves the
memory out there (see `drafts_from_memory`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

from ...settings import ADAPTIVE_DRAFT_LIMIT
from ..constraint import TokenGrammar
from ..draft_length import AdaptiveLength, DraftLength, FixedLength
from ..sampling import Sampler
from .base import NO_DRAFT, Draft

# The shortest tail of the context a memory match must cover. Short matches in a large memory
# are often common phrases whose continuations the target rarely keeps: their tokens get a low
# `confidence`, and the memory's measured acceptance by confidence decides whether they pay.
MIN_MATCH = 3
MAX_MATCH = 64
MIN_SHARE = 0.3  # a continuation is drafted while at least this share of the matches agree on it


class Proposal(Protocol):
    tokens: list[int]
    match_length: int
    occurrences: int
    shares: list[float]


class TokenMemory(Protocol):
    """What the drafter needs of a memory: the continuation of the longest match of a context's tail."""

    def lookup(self, context: Sequence[int], max_tokens: int, min_length: int = ..., max_length: int = ...,
               min_share: float = ...) -> Proposal | None: ...


def confidence(share: float, occurrences: int, match_length: int) -> float:
    """How much a memory token is to be trusted, for the length controller's calibration by confidence bin.

    The share of the matches that continue this way, discounted where there is
    little evidence: one earlier occurrence of a short match says less than many,
    or than a long verbatim match.
    """
    evidence = occurrences + match_length / 8
    return share * evidence / (evidence + 1)


@dataclass
class MemoryUse:
    """How drafting from memory went, summed over generations (for `memory stats` and profiles)."""

    lookups: int = 0
    hits: int = 0  # lookups that proposed a draft
    proposed: int = 0  # tokens of memory drafts the target judged
    accepted: int = 0
    seconds: float = 0.0  # spent in lookups


class MemoryDrafter:
    """Drafts the most frequent continuation of the longest earlier match of the context's tail."""

    tokens_copied = 0  # (no model: nothing to read)

    def __init__(self, memory: TokenMemory, length: DraftLength | None = None, use: MemoryUse | None = None,
                 min_match: int = MIN_MATCH) -> None:
        self.memory = memory
        self.length = length or FixedLength(1 << 30)
        self.use = use if use is not None else MemoryUse()
        self.min_match = min_match
        self.confidences: list[float] = []  # of the tokens last proposed

    def prompt_to_read(self, prompt_tokens: Sequence[int]) -> int:
        return 0

    def ready_to_read(self, context: Sequence[int], n_generated: int, budget_left: int) -> bool:
        return True

    def begin(self, prompt_tokens: Sequence[int], read_later: bool = False) -> None:
        pass

    def read(self, context: Sequence[int]) -> None:
        pass

    def propose(
        self, context: Sequence[int], max_tokens: int, sampler: Sampler, position: int,
        grammar: TokenGrammar | None = None,
    ) -> Draft:
        """The memory's continuation, cut where the length controller (judging each token's `confidence`)
        or `grammar` stops it."""
        started = time.perf_counter()
        room = self.length.plan(max_tokens)
        proposal = None
        if room > 0:
            proposal = self._lookup(context, room)
            self.use.lookups += 1
        self.confidences = self._worth_drafting(proposal) if proposal is not None else []
        tokens = list(proposal.tokens[: len(self.confidences)]) if proposal is not None else []
        if grammar is not None:
            tokens = tokens[: grammar.validate(tokens)]
            self.confidences = self.confidences[: len(tokens)]
        self.use.seconds += time.perf_counter() - started
        if not tokens:
            return NO_DRAFT
        self.use.hits += 1
        self.length.record_draft_step((time.perf_counter() - started) / len(tokens))
        return Draft(tokens, None)

    def expected_kept(self, context: Sequence[int]) -> float:
        """How many draft tokens the memory's continuation here is expected to have kept, judged without
        drafting (0 without a match; its whole continuation where the length is fixed)."""
        started = time.perf_counter()
        proposal = self._lookup(context, ADAPTIVE_DRAFT_LIMIT)
        self.use.seconds += time.perf_counter() - started  # (timed, not counted: a pass's lookup is `propose`'s)
        if proposal is None:
            return 0.0
        if not isinstance(self.length, AdaptiveLength):
            return float(len(proposal.tokens))
        return _expected_kept(self.length, [confidence(share, proposal.occurrences, proposal.match_length)
                                            for share in proposal.shares])

    def _lookup(self, context: Sequence[int], max_tokens: int) -> Proposal | None:
        return self.memory.lookup(context, max_tokens, min_length=self.min_match, max_length=MAX_MATCH,
                                  min_share=MIN_SHARE)

    def _worth_drafting(self, proposal: Proposal) -> list[float]:
        """The confidence of each of the proposal's tokens up to where one more is not worth its verify row."""
        confidences: list[float] = []
        for share in proposal.shares:
            confidences.append(confidence(share, proposal.occurrences, proposal.match_length))
            if not self.length.keep_going(len(confidences), confidences[-1]):
                break
        return confidences

    def expected_rate(self, by_model: DraftLength) -> float:
        """Expected tokens per second of the draft just proposed, verified in one pass, in the units of the
        draft model's controller `by_model` (whose verify costs are measured on the same target)."""
        if not isinstance(self.length, AdaptiveLength) or not isinstance(by_model, AdaptiveLength):
            return math.inf  # nothing measured to compare with: a lookup is free, take it
        return (1 + _expected_kept(self.length, self.confidences)) / by_model.verify_cost(len(self.confidences) + 1)

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float | None) -> None:
        self.use.proposed += n_proposed
        self.use.accepted += n_accepted
        self.length.observe(n_proposed, n_accepted, verify_seconds)


def _expected_kept(length: AdaptiveLength, confidences: Sequence[float]) -> float:
    """Expected draft tokens kept of a draft whose tokens have these confidences: Σ_i Π_{j≤i} α(confidence_j)."""
    expected, kept = 0.0, 1.0
    for value in confidences:
        kept *= length.acceptance_at_confidence(value)
        expected += kept
    return expected
