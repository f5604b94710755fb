"""Prompt lookup: draft the tokens that followed earlier occurrences of the context's last n tokens.

Needs no draft model. Where an answer copies its prompt (edit this code,
extract these fields, repeat this text) long runs are found and verified in
one target pass each. The proposal is deterministic (a point-mass q), so the
target verifies it by comparing with its own samples: exact at any temperature.

A short n-gram often occurs several times with different continuations (", and
the baker", ", and the smell"): the draft follows what most earlier occurrences
continue with (ties: the latest), and stops where fewer than half of them would
have agreed with it so far, rather than drafting the latest occurrence's
continuation whole into a likely rejection. An occurrence whose continuation
reaches the end of the context (in a loop, the turns just before this one)
abstains from there on. A match that occurred once is drafted as far as its
continuation goes.

How far a lookup is worth drafting depends on how long a match it continues:
on the demo pair a 4-token match's continuation was kept 91% of the time, a
2-token match's 18% (half of those drafts lost their first token). So each
match length has its own length controller, which learns its own acceptance.
Nor does n_max end it: where the n_max-token match's earlier occurrence (the
one the draft follows) goes on matching further back, 8 or 16 tokens
(MATCH_DEPTHS), the answer is quoting a passage (or going round a loop) rather
than meeting a phrase again, and those matches have controllers of their own
(on six copying prompts their drafts were kept 0.66 of the time against 0.63,
and long ones were drafted whole: 1.07× as fast).

In a loop (the context's last p tokens repeat the p before them, and the match
occurred p tokens back) a continuation that reaches the context's end goes on
with the loop, as far as the draft may go: a model that repeats a line over and
over is drafted the whole length at once, where the written text alone would
draft one period, then two, then four.

Where an answer changes a word of the text it copies (or adds one), no n-gram
of the context's tail occurred before for a pass or two, but the copy goes on.
So after a lookup pass the drafter remembers where in the context the copy
would take its next token; while no n-gram matches, a last token found just
there (a few tokens either way: a word inserted or left out) resumes the copy
from after it, with a length controller of its own. A word found anywhere else
is not taken: far from the copy, a single token says little about what follows.
Where a copy can be resumed so, it goes before a match shorter than the longest
n-gram (`, the` found elsewhere in the text): on copying prompts such short
matches away from the copy lost their first token, the copy's place did not.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ...settings import ADAPTIVE_DRAFT_LIMIT
from ..constraint import TokenGrammar
from ..draft_length import AdaptiveLength, DraftLength, FixedLength
from ..sampling import Sampler
from ..suffix_index import MAX_OCCURRENCES, SEPARATOR, weighted_continuation
from .base import NO_DRAFT, Draft

# The draft goes on while at least this share of the earlier occurrences would have agreed with it so far.
MIN_SHARE = 0.5
_NOT_WRITTEN_YET = SEPARATOR - 1  # fills a continuation past the sequence's end (no token id is negative)
# A copy is resumed where the context's last token occurs this far before or after the copy's expected place,
# and only this many tokens after the copy was last on track: a lookup pass that kept RESUME_AFTER_KEPT tokens
# or more (an ordinary answer's lookups often keep a token or two of a common phrase: no copy to resume).
RESUME_BEHIND, RESUME_AHEAD = 2, 12
RESUME_WITHIN = 12
RESUME_AFTER_KEPT = 4
# A longest n-gram match whose earlier occurrence goes on matching further back, this many tokens or more (the
# largest that fits), has a length controller of its own: a quote's continuation is kept far more often than
# a common phrase's, though both match n_max tokens.
MATCH_DEPTHS = (8, 16)  # (an n_max controller learned before they had theirs counted quotes too: it soon decays)


class NGramIndex:
    """Where each n-gram of a token sequence occurred (its latest occurrences), updated as the sequence grows.

    N-grams are compared by `word_form` (a token to its form, e.g. `Model.word_form`: `The` and ` The` alike),
    by token id where none is given; continuations are the tokens as written."""

    def __init__(self, n_min: int, n_max: int, word_form: Callable[[int], int] | None = None) -> None:
        self.n_min, self.n_max = n_min, n_max
        self._word_form = word_form
        self._tokens: list[int] = []
        self._forms: list[int] = []  # the word form of each of `_tokens`
        # n-gram -> the positions just after its occurrences, oldest first (at most 2·MAX_OCCURRENCES)
        self._next_after: dict[tuple[int, ...], list[int]] = {}
        self._indexed = 0  # n-grams ending before this position are in the index

    def reset(self, tokens: Sequence[int]) -> None:
        self._tokens = list(tokens)
        self._forms = self._forms_of(self._tokens)
        self._next_after.clear()
        self._indexed = 0

    def extend_to(self, context: Sequence[int]) -> None:
        """Follow `context`, which extends the sequence seen so far (else the index starts over)."""
        known = len(self._tokens)
        if list(context[:known]) != self._tokens:
            self.reset(context)
        else:
            self._tokens.extend(context[known:])
            self._forms.extend(self._forms_of(context[known:]))
        # Index every n-gram that ends before the last token: the suffix itself must match an earlier one.
        end = len(self._tokens) - 1
        for stop in range(max(self._indexed, 1), end + 1):
            for n in range(self.n_min, self.n_max + 1):
                if stop - n >= 0:
                    starts = self._next_after.setdefault(tuple(self._forms[stop - n : stop]), [])
                    starts.append(stop)
                    if len(starts) > 2 * MAX_OCCURRENCES:
                        del starts[:-MAX_OCCURRENCES]
        self._indexed = max(self._indexed, end + 1)

    def match(self) -> tuple[int, list[int]] | None:
        """(n, where the continuations of its earlier occurrences start, oldest first; the latest
        MAX_OCCURRENCES) for the longest n-gram ending the sequence that occurred earlier, or None."""
        for n in range(self.n_max, self.n_min - 1, -1):
            if len(self._tokens) > n:
                starts = self._next_after.get(tuple(self._forms[-n:]))
                if starts:
                    return n, starts[-MAX_OCCURRENCES:]
        return None

    def match_depth(self, start: int, limit: int) -> int:
        """How many tokens before `start` (by word form) match the sequence's last ones, up to `limit`."""
        forms, end = self._forms, len(self._forms)
        depth = 0
        while depth < limit and depth < start and forms[start - 1 - depth] == forms[end - 1 - depth]:
            depth += 1
        return depth

    def occurrences_of(self, tail: Sequence[int]) -> list[int]:
        """Where the continuations of the earlier occurrences of `tail`'s last n_max tokens (by word form, the
        tail going on past the sequence: a draft) start, oldest first; the latest MAX_OCCURRENCES."""
        if len(tail) < self.n_max:
            return []
        return self._next_after.get(tuple(self._forms_of(tail[-self.n_max:])), [])[-MAX_OCCURRENCES:]

    def last_occurred_once_before(self) -> bool:
        """Whether the sequence's last token (by word form) occurs exactly once before it."""
        return bool(self._forms) and self._forms.count(self._forms[-1]) == 2

    def _forms_of(self, tokens: Sequence[int]) -> list[int]:
        return list(tokens) if self._word_form is None else [self._word_form(token) for token in tokens]

    def continuation(self, starts: Sequence[int], max_tokens: int) -> list[int]:
        """Up to `max_tokens` tokens that the continuations from `starts` agree on most (`weighted_continuation`
        with MIN_SHARE): a lone occurrence's continuation whole, within the sequence."""
        if max_tokens <= 0:
            return []
        if len(starts) == 1:
            return self._following(starts[0], max_tokens)
        rows = np.full((len(starts), max_tokens), _NOT_WRITTEN_YET, dtype=np.int64)
        for row, start in zip(rows, starts):
            following = self._following(start, max_tokens)
            row[: len(following)] = following
        # An occurrence whose continuation reaches the sequence's end (a chat's latest turn; a loop only where it
        # has not gone round twice) abstains from there on: what it goes on with is being written now, not a
        # disagreement.
        return weighted_continuation(rows, MIN_SHARE, unknown=_NOT_WRITTEN_YET)[0]

    def _following(self, start: int, max_tokens: int) -> list[int]:
        """Up to `max_tokens` tokens from `start` on: as written, and past the sequence's end, where the sequence
        ends in a loop of the period that `start` is back from its end, round the loop again."""
        following = self._tokens[start : start + max_tokens]
        period = len(self._tokens) - start
        if len(following) < max_tokens and self._ends_in_loop(period):
            following = (following * (max_tokens // period + 1))[:max_tokens]
        return following

    def _ends_in_loop(self, period: int) -> bool:
        """Whether the sequence's last `period` tokens repeat the `period` tokens before them."""
        tokens = self._tokens
        return 0 < period and 2 * period <= len(tokens) and tokens[-period:] == tokens[-2 * period : -period]


class NGramDrafter:
    """Drafts by prompt lookup over the whole context (prompt and generated text)."""

    tokens_copied = 0  # (no model: nothing to read)

    def __init__(self, n_min: int = 2, n_max: int = 4, length_for: Callable[[int], DraftLength] | None = None,
                 resume_length: DraftLength | None = None, word_form: Callable[[int], int] | None = None) -> None:
        """`length_for(n)`: the draft-length controller for continuations of n-token matches (default:
        unbounded); `resume_length`: for resumed copies (None: copies are not resumed); `word_form`: see
        `NGramIndex`."""
        self.index = NGramIndex(n_min, n_max, word_form)
        self._length_for = length_for
        self.lengths = {n: self._new_length(n) for n in range(n_min, n_max + 1)}  # (and MATCH_DEPTHS', when met)
        self.deeper = [depth for depth in MATCH_DEPTHS if depth > n_max]
        self.resume_length = resume_length
        self.length = self.lengths[n_max]  # the controller of the pass being verified (see `propose`)
        self.proposed = 0  # tokens in the draft last proposed
        self.resumes_a_copy = False  # the draft last proposed resumes a copy (no n-gram matched)
        self._drafted = _Copy(0, 0)  # the draft last proposed: where its continuation starts, at what context length
        # Where the copy takes its next token, at what context length, once a lookup pass kept RESUME_AFTER_KEPT
        # tokens or more (else None).
        self._copy: _Copy | None = None

    def prompt_to_read(self, prompt_tokens: Sequence[int]) -> int:
        return 0  # no model: indexing the prompt is quick

    def ready_to_read(self, context: Sequence[int], n_generated: int, budget_left: int) -> bool:
        return True

    def begin(self, prompt_tokens: Sequence[int], read_later: bool = False) -> None:
        self.index.reset(prompt_tokens)
        self._copy = None

    def read(self, context: Sequence[int]) -> None:
        pass

    def lookup(self, context: Sequence[int], max_tokens: int) -> tuple[DraftLength | None, int, list[int]]:
        """(the length controller of what matched, where its continuation starts in the context, proposed
        tokens): the continuation of the longest n-gram match, or that of a resumed copy where one is found and
        the match is shorter than n_max (or there is none, or its occurrences part at the first token);
        (None, 0, []) when neither is found."""
        self.index.extend_to(context)
        found = self.index.match()
        if max_tokens <= 0:
            return None, 0, []
        start = self._resumed_copy(context)
        if found is not None and (found[0] == self.index.n_max or start is None):
            n, starts = found
            tokens = self.index.continuation(starts, max_tokens)
            if tokens:
                followed = _followed(context, starts, tokens)
                n = self._match_length(n, followed)
                if n not in self.lengths:
                    self.lengths[n] = self._new_length(n)
                return self.lengths[n], followed, tokens
        if start is None or self.resume_length is None:
            return None, 0, []
        return self.resume_length, start, list(context[start : start + max_tokens])

    def _new_length(self, match_length: int) -> DraftLength:
        return self._length_for(match_length) if self._length_for else FixedLength(1 << 30)

    def _match_length(self, n: int, start: int) -> int:
        """The match length whose controller drafts a continuation from `start` that `n` tokens matched: how far
        the match goes back, to the largest of `deeper` it reaches, where n is n_max."""
        if n < self.index.n_max or not self.deeper:
            return n
        depth = self.index.match_depth(start, self.deeper[-1])
        return max((length for length in self.deeper if length <= depth), default=n)

    def _resumed_copy(self, context: Sequence[int]) -> int | None:
        """Where a copy that lost its thread a few tokens ago picks it up again: just after the context's last
        token, found near the place the copy has reached by now; None where it is not found."""
        if self._copy is None or self.resume_length is None or len(context) - self._copy.context_length > RESUME_WITHIN:
            return None
        expected = self._copy.start + len(context) - self._copy.context_length - 1  # of the last token
        last = context[-1]
        for at in sorted(range(max(expected - RESUME_BEHIND, 0), min(expected + RESUME_AHEAD + 1, len(context) - 1)),
                         key=lambda position: abs(position - expected)):
            if context[at] == last:
                return at + 1
        return None

    def propose(
        self, context: Sequence[int], max_tokens: int, sampler: Sampler, position: int,
        grammar: TokenGrammar | None = None,
    ) -> Draft:
        """The continuation of the longest match, as long as its match length's controller plans,
        cut where `grammar` stops accepting it."""
        started = time.perf_counter()
        self.proposed = 0
        length, start, tokens = self.lookup(context, max_tokens)
        self.resumes_a_copy = length is not None and length is self.resume_length
        if length is None or not tokens:
            return NO_DRAFT
        self.length, self._drafted = length, _Copy(start, len(context))
        tokens = tokens[: self.length.plan(len(tokens))]
        if grammar is not None:
            tokens = tokens[: grammar.validate(tokens)]
        if not tokens:
            return NO_DRAFT
        self.length.record_draft_step((time.perf_counter() - started) / len(tokens))
        self.proposed = len(tokens)
        return Draft(tokens, None)

    def last_occurred_once_before(self, context: Sequence[int]) -> bool:
        """Whether the context's last token (by word form) occurs exactly once before it: in the prompt, a
        word the answer may go on quoting from."""
        self.index.extend_to(context)
        return self.index.last_occurred_once_before()

    def expected_kept(self, context: Sequence[int]) -> float:
        """How many draft tokens a lookup here is expected to have kept, judged without drafting (0 without
        a match or a copy to resume; its whole continuation where its length is fixed)."""
        length, _, tokens = self.lookup(context, ADAPTIVE_DRAFT_LIMIT)
        if length is None or not tokens:
            return 0.0
        if not isinstance(length, AdaptiveLength):
            return float(len(tokens))
        return length.expected_tokens(length.best_length(len(tokens))) - 1

    def expected_rate(self, by_model: DraftLength) -> float:
        """Expected tokens per second of the draft just proposed, verified in one pass, in the units of the
        draft model's controller `by_model` (whose verify costs are measured on the same target)."""
        if not isinstance(self.length, AdaptiveLength) or not isinstance(by_model, AdaptiveLength):
            return math.inf  # nothing measured to compare with: a lookup is free, take it
        return self.length.expected_tokens(self.proposed) / by_model.verify_cost(self.proposed + 1)

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float | None) -> None:
        """Pass the target's verdict and the verify pass's cost to the length controller, and note where the
        copy stands: after the kept tokens and the target's own, its next token is the one after them."""
        self.length.observe(n_proposed, n_accepted, verify_seconds)
        if n_accepted >= RESUME_AFTER_KEPT:
            self._copy = _Copy(self._drafted.start + n_accepted + 1, self._drafted.context_length + n_accepted + 1)


def _followed(context: Sequence[int], starts: Sequence[int], tokens: list[int]) -> int:
    """Where the continuation `tokens` starts in the context: the latest of `starts` whose text goes on with
    them (as far as the context goes), else the latest (the draft follows most occurrences, not always it)."""
    for start in reversed(starts):
        written = list(context[start : start + len(tokens)])
        if written == tokens[: len(written)]:
            return start
    return starts[-1]


@dataclass(frozen=True)
class _Copy:
    """A place in the context a copy takes tokens from (`start`), as of a context of `context_length` tokens."""

    start: int
    context_length: int
