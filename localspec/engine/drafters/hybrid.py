"""Hybrid drafting: lookup in the context, then in the memory of earlier text, then the draft model.

Each pass takes the first source that proposes a draft expected to beat the
draft model's: the context's last n tokens occurred earlier in the context
(n-gram lookup), else the memory holds a match of them (`MemoryDrafter`, when
there is a memory), else a copy of the context that lost its thread resumes
(see `NGramDrafter`: a one-token anchor, weaker evidence than a memory match of
three tokens or more), else the draft model drafts (when there is one). A lookup's
expected tokens per second come from its own length controller's measured
acceptance (one per match length: a long match is kept far more often than a
short one), the draft model's from its controller, both over the same
measured verify costs. Under a grammar a lookup must keep at least a few tokens
after the grammar's cut to be used instead of the draft model (any lookup beats
no draft at all: without a draft model, or while it has still to read the
prompt, see `Generation`). A draft model with a long prompt still to read waits
while lookups draft, and reads only where the saving on what lookups have lately
not drafted pays for the reading (`ready_to_read`): an answer that copies its
prompt is not slowed by a reading it does not need. Before it reads, lookups are
on trial: any the context offers is tried, however weak its match length's
record (a two-token match is often a common phrase), until one loses its first
token; and the reading waits a pass for a last token that occurred once in the
prompt (a quote's first words often match no n-gram of it: a word added before
them, or its first word cased otherwise; a token later a lookup may take the
quote up, and a padded pass guesses meanwhile). An answer that
quotes its prompt is so found out for a pass or two of few rows, where the
reading and the model's drafts would cost as much as the whole copy; an
ordinary answer loses a pass of drafts at most. Nor, in such an answer, does the
draft model draft a pass that no lookup drafts (after a rejection, the copy's thread
lost for a token or two) while the passes it sat out keep a pace its plans do not:
it would first read all the lookups added (`_lookups_outpace_the_model`). The choice is made per pass before
anything is drafted, from the context, the grammar's state, the memory
(unchanged during a generation) and what earlier passes measured, never from
the draws to come, so each pass is exactly one of them: a deterministic lookup
(verified against target samples) or model drafts (verified as
`speculative.verify` says). The draft model's cache follows the context on its
next pass (`Model.sync` keeps the common prefix and evaluates what the lookup
passes added).

A model pass may end in a lookup all the same: where the draft's end (with the
context's last tokens before it) matches an earlier n_max tokens of the context,
the answer has begun to copy its prompt, and the lookup drafts on from there
instead of the draft model's steps (`_continuation`; an answer that copies a
notice word for word was drafted by the model whole, at 7–8 ms a token, where no
lookup matched its first word). Only where the drafts cannot change the text
(coupled verification, or greedy): rejection sampling would need each drafted
token's q, which a continuation does not carry.
"""

from __future__ import annotations

from typing import Sequence

from ...settings import ADAPTIVE_DRAFT_LIMIT
from ..constraint import TokenGrammar
from ..draft_length import AdaptiveLength
from ..sampling import Sampler
from .base import NO_DRAFT, Draft
from .memory import MemoryDrafter
from .model import ModelDrafter
from .ngram import NGramDrafter

# Under a grammar a lookup is often cut to a token or two (an earlier key's continuation, then
# the grammar rejects it); the draft model, held to the grammar, usually drafts further.
_SHORTEST_LOOKUP_UNDER_A_GRAMMAR = 3
_RETRY_DECLINED_EVERY = 8  # one declined lookup draft in this many is drafted anyway, to measure it again
_MAX_BACKOFF = 4  # each retry that lost its first token doubles the wait, up to 8·2⁴ declined drafts
# A draft model that has yet to read the prompt waits while a lookup is expected to keep this many
# tokens of this pass's draft, and weighs what reading would save by the share of recent tokens lookups
# did not draft, each pass weighing this much less than the next.
_KEPT_BY_A_LOOKUP_THAT_DRAFTS = 1.0
_RECENT_DECAY = 0.9
# Nor does it read before this many tokens are out: the first rarely continues the prompt even in an
# answer that copies it (a lookup needs the tail of two), and a pass without drafts costs one token's saving
# (not waited for under a grammar: its short answers weigh a pass more, and lookups are cut short there).
_TOKENS_BEFORE_READING = 2
# The pace of the passes the draft model sat out (lookups, and the one-token passes between them), each
# pass weighing this much less than the next.
_PACE_DECAY = 0.5
_LOOKUPS_THAT_SET_A_PACE = 2  # lookup passes that kept a draft, in this generation, before their pace counts


class HybridDrafter:
    def __init__(self, lookup: NGramDrafter, by_model: ModelDrafter | None, memory: MemoryDrafter | None = None) -> None:
        self.lookup = lookup
        self.memory = memory
        self.by_model = by_model
        self._last: NGramDrafter | MemoryDrafter | ModelDrafter | None = None  # who drafted the pass being verified
        self._declined: dict[object, int] = {}  # by side: drafts passed over for the model's since its last retry
        self._fruitless: dict[object, int] = {}  # by side: retries in a row whose first token was rejected
        self._retrying = False  # the pass being verified drafts a declined lookup anyway
        self._start_a_generation()

    def _start_a_generation(self) -> None:
        """Forget what the generation before measured of its own passes."""
        # Tokens of this generation's recent passes (older passes weighing less), and of those the tokens of
        # passes whose lookup drafts were kept: the rest is what a draft model yet to read could speed up.
        self._recent_made = self._recent_from_lookups = 0.0
        # Tokens and seconds of this generation's recent passes the draft model sat out, and how many of them
        # were lookups that kept a draft: their pace is what a pass without the draft model is expected to keep up.
        self._paced_tokens = self._paced_seconds = 0.0
        self._lookups_kept = 0
        self._lookup_lost_a_trial = False  # a lookup tried before the draft model read lost its first token
        self._waited_on_a_lone_match = False  # the reading has waited a pass on a last token seen once before
        self._held_to_a_grammar = False  # this generation drafts under a grammar (known from its first `propose`)

    @property
    def tokens_copied(self) -> int:
        return self.by_model.tokens_copied if self.by_model is not None else 0

    def prompt_to_read(self, prompt_tokens: Sequence[int]) -> int:
        return self.by_model.prompt_to_read(prompt_tokens) if self.by_model is not None else 0

    def begin(self, prompt_tokens: Sequence[int], read_later: bool = False) -> None:
        for side in (self.lookup, self.memory, self.by_model):
            if side is not None:
                side.begin(prompt_tokens, read_later)
        self._start_a_generation()

    def ready_to_read(self, context: Sequence[int], n_generated: int, budget_left: int) -> bool:
        """Whether the draft model should read the prompt now.

        With a fixed length: after the first token. With an adaptive one, without a grammar: not before
        the second token, not while a lookup is expected to keep a token of this pass's draft, nor while
        lookups are on trial (`_lookups_on_trial`), and then only where the saving on the share of recent
        tokens lookups did not draft pays for the reading (a copying answer may never need the draft
        model). Under a grammar lookups are cut short, so only the cost of the reading is weighed, after
        the first token.
        """
        if self.by_model is None:
            return True
        if not isinstance(self.by_model.length, AdaptiveLength) or self._held_to_a_grammar:
            return self.by_model.ready_to_read(context, n_generated, budget_left)
        if n_generated < _TOKENS_BEFORE_READING:
            return False
        kept_by_lookup = self.lookup.expected_kept(context)  # (weighed by both checks below: looked up once)
        if self._lookup_drafts(context, kept_by_lookup) or self._lookups_on_trial(context, kept_by_lookup):
            return False
        if self._lookups_outpace_the_model(context, budget_left):
            return False
        uncovered = (self._recent_made - self._recent_from_lookups + 1) / (self._recent_made + 1)
        return self.by_model.ready_to_read(context, n_generated, budget_left, uncovered_share=uncovered)

    def _lookups_on_trial(self, context: Sequence[int], kept_by_lookup: float) -> bool:
        """Whether the reading waits this pass to find out whether the answer quotes its prompt: no lookup
        tried before the reading has lost its first token in this generation, and the context's lookup drafts
        here (`kept_by_lookup`, its `expected_kept`, above 0), or (a pass a generation) the last token occurred
        just once before, where the next lookup may take up the quote (and a padded pass guesses what followed
        it: see `Generation`)."""
        if self._lookup_lost_a_trial:
            return False
        if kept_by_lookup > 0:
            return True
        if not self._waited_on_a_lone_match and self.lookup.last_occurred_once_before(context):
            self._waited_on_a_lone_match = True
            return True
        return False

    def _lookup_drafts(self, context: Sequence[int], kept_by_lookup: float) -> bool:
        """Whether a lookup (the context's, expected to keep `kept_by_lookup`, or the memory's) is expected to
        keep a token of a draft here."""
        return kept_by_lookup >= _KEPT_BY_A_LOOKUP_THAT_DRAFTS or (
            self.memory is not None and self.memory.expected_kept(context) >= _KEPT_BY_A_LOOKUP_THAT_DRAFTS)

    def read(self, context: Sequence[int]) -> None:
        if self.by_model is not None:
            self.by_model.read(context)

    def propose(
        self, context: Sequence[int], max_tokens: int, sampler: Sampler, position: int,
        grammar: TokenGrammar | None = None,
    ) -> Draft:
        self._held_to_a_grammar = grammar is not None
        model_drafts = self.by_model is not None and not self.by_model.waiting
        shortest = _SHORTEST_LOOKUP_UNDER_A_GRAMMAR if grammar is not None and model_drafts else 1
        resumed: Draft | None = None  # a resumed copy's draft, tried after the memory's
        for side in (self.lookup, self.memory):
            if side is not None:
                draft = side.propose(context, max_tokens, sampler, position, grammar)
                if side is self.lookup and self.memory is not None and self.lookup.resumes_a_copy:
                    resumed = draft
                    continue
                if len(draft.tokens) >= shortest and self._rather_than_the_model(side, context, max_tokens):
                    self._last = side
                    return draft
        if resumed is not None:
            if len(resumed.tokens) >= shortest and self._rather_than_the_model(self.lookup, context, max_tokens):
                self._last = self.lookup
                return resumed
        if self.by_model is None or (grammar is None and self._lookups_outpace_the_model(context, max_tokens)):
            self._last = self.lookup  # it learns what a pass that drafts nothing costs
            return NO_DRAFT
        self._last = self.by_model
        return self.by_model.propose(context, max_tokens, sampler, position, grammar, self._continuation)

    def _continuation(self, context: Sequence[int], draft: list[int]) -> list[int]:
        """What the context's lookup drafts after the draft model's draft so far, where the draft's end (with the
        context's before it) matches an earlier n_max tokens of the context: the answer has begun to copy it, and
        the copy is drafted on at a lookup's cost, as long as that match length's controller plans."""
        index = self.lookup.index
        index.extend_to(context)
        starts = index.occurrences_of([*context[-index.n_max:], *draft])
        if not starts:
            return []
        length = self.lookup.lengths[index.n_max]
        return index.continuation(starts, length.plan(ADAPTIVE_DRAFT_LIMIT))

    def _lookups_outpace_the_model(self, context: Sequence[int], room: int) -> bool:
        """Whether this pass, which no lookup drafts, is better left to the target alone: in an answer that
        copies its prompt, lookups take the copy up again a token or two after a rejection, at a pace the
        draft model's best plan does not reach, even before it reads what the lookups added (a Q4_1 batch
        costs about half a draft step a token on the CPU). Judged from this generation's passes: lookups
        (the memory's too) kept drafts in _LOOKUPS_THAT_SET_A_PACE passes, and the passes the draft model sat
        out made more tokens a second, one-token passes included, than its best plan is expected to; where
        lookups stop finding the text the pace falls to a target pass's and the draft model drafts again."""
        length = self.by_model.length if self.by_model is not None else None
        if not (self._lookups_kept >= _LOOKUPS_THAT_SET_A_PACE and self._paced_seconds > 0
                and isinstance(length, AdaptiveLength)):
            return False
        k = length.best_length(room)
        if k == 0:
            return False  # (its controller plans no draft anyway)
        return self._paced_tokens / self._paced_seconds > length.expected_tokens(k) / length.pass_cost(k)

    def _rather_than_the_model(self, side: NGramDrafter | MemoryDrafter, context: Sequence[int], room: int) -> bool:
        """Whether `side`'s draft just proposed is expected to beat the draft model's: its tokens per
        second (from its measured acceptance) against the rate the draft model's length controller
        expects of its best length, counting the catch-up the model would need first on what lookup
        passes added."""
        self._retrying = False
        if self.by_model is None or self.by_model.waiting:  # no draft model (yet): any lookup beats none
            return True
        length = self.by_model.length
        if not isinstance(length, AdaptiveLength):
            return True
        k = length.best_length(room)
        catch_up = (length.first_step_cost or 0.0) if self.by_model.lags_behind(context) else 0.0
        if side.expected_rate(length) >= length.expected_tokens(k) / (length.pass_cost(k) + catch_up):
            return True
        # Declined: a side's acceptance is measured only where it drafts, so now and then it drafts
        # anyway, or one bad streak would keep it out for good; less often while retries go unrewarded.
        declined = self._declined.get(side, 0) + 1
        self._retrying = declined >= _RETRY_DECLINED_EVERY << min(self._fruitless.get(side, 0), _MAX_BACKOFF)
        self._declined[side] = 0 if self._retrying else declined
        return self._retrying

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float | None) -> None:
        # A lookup pass that kept drafts made all its tokens, the target's own last one too, without the model.
        from_lookup = n_accepted + 1 if self._last is not self.by_model and n_accepted else 0
        self._recent_made = self._recent_made * _RECENT_DECAY + n_accepted + 1
        self._recent_from_lookups = self._recent_from_lookups * _RECENT_DECAY + from_lookup
        if self._last is not self.by_model and verify_seconds is not None:
            self._paced_tokens = self._paced_tokens * _PACE_DECAY + n_accepted + 1
            self._paced_seconds = self._paced_seconds * _PACE_DECAY + verify_seconds
            self._lookups_kept += int(n_proposed > 0 and n_accepted > 0)
        if self._last is None:
            return
        if (self._last is self.lookup and n_proposed and not n_accepted
                and self.by_model is not None and self.by_model.waiting):
            self._lookup_lost_a_trial = True
        if self._last is self.by_model and self.by_model.continued:  # each side learns from its own part
            drawn = n_proposed - self.by_model.continued
            self.by_model.observe(drawn, min(n_accepted, drawn), None)  # (the pass verified the lookup's too)
            if n_accepted >= drawn:
                self.lookup.lengths[self.lookup.index.n_max].observe(self.by_model.continued, n_accepted - drawn, None)
            return
        self._last.observe(n_proposed, n_accepted, verify_seconds)
        if self._last is self.by_model or not n_proposed:
            return
        if n_accepted:
            self._fruitless[self._last] = 0
        elif self._retrying:
            self._fruitless[self._last] = self._fruitless.get(self._last, 0) + 1
