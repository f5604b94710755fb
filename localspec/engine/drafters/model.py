"""A draft model: a smaller model with the target's vocabulary, sampled token by token."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from ...runtime.model import Model, common_prefix_length
from ...settings import SamplingParams
from ..constraint import EveryWayRepeats, TokenGrammar
from ..draft_length import AdaptiveLength, DraftLength, FixedLength
from ..penalties import Penalties
from ..sampling import Confidence, Probs, Sampler, coupled_lead, masked_argmax, next_token_probs
from .base import Draft

READ_MEASURED_FROM = 16  # prompt tokens a read must evaluate to measure the cost per token (less is mostly overhead)
# Tokens the target's cache must hold that this model's lacks before it is copied rather than read: a copy
# saves the reading (on the CPU, 2 threads, the demo's draft: 0.4 s for this many) but its keys and values,
# computed by the target, make the draft's own drafts a little less often kept (acceptance 0.915 against 0.938
# over 16 ordinary answers), which outweighed the saving of a short prompt's reading.
COPIED_FROM = 128
# A copy costs at most what reading one token in this many would (on the CPU, 2 threads, the demo's draft:
# 75 µs a token copied, 3.2 ms a token read; a draft on a GPU reads, see `Session._draft_copies_the_target`).
TOKENS_COPIED_FOR_ONE_READ = 32
MAX_COPIED_STATE_BYTES = 1 << 30  # (Llama 3 8B's F16 cache of 8,000 tokens; the copy is rewritten in place)


# A lookup's continuation of (the context, the draft so far): see `ModelDrafter.propose`.
Continuation = Callable[[Sequence[int], list[int]], list[int]]


class ModelDrafter:
    """Drafts by sampling a smaller model with the same vocabulary, token by token.

    Each token is drawn from q_draft, the draft's distribution processed by the
    same `next_token_probs` as the target's, with the generation's sampler: under
    coupled verification with the noise the target draws its own token with at
    that position, so the draft proposes the target's token wherever q_draft and
    p_target are close (the repetition penalties, where asked for, counting the context and the draft so far,
    as the target's row at that position counts them). Drafting stops early when the draft model's confidence
    (the largest probability of its unprocessed next-token distribution) falls
    below `p_min`, and where the length controller says one more token is not
    worth its cost, and after an end-of-generation token (nothing after it is
    emitted). All three look only at the context (the drafted tokens included),
    never at the token about to be drawn, so under rejection verification the
    drafted tokens stay exact samples of q_draft.
    """

    def __init__(self, model: Model, sampling: SamplingParams, p_min: float = 0.0, length: DraftLength | None = None,
                 copies_from: Model | None = None) -> None:
        self.model = model
        # The target, where its cache can be copied into this model's (`Model.same_shape`) and the copy cannot
        # change the text: what the target has read this model takes from its cache rather than reading it.
        self.copies_from = copies_from
        self.tokens_copied = 0  # in this generation (see `begin`): what copies saved this model reading
        self.continued = 0  # of the draft last proposed, the tokens a lookup continued it with (see `propose`)
        self.sampling = sampling
        self.p_min = p_min
        self.length = length or FixedLength(model.context_size)
        self.waiting = False  # told to read the prompt later: no drafts until `read`
        self._unread = self._prompt_length = 0  # prompt tokens `begin` left to `read`, of how many
        self._made_before = 0

    def prompt_to_read(self, prompt_tokens: Sequence[int]) -> int:
        """How many of the prompt's tokens `begin` would evaluate (the rest are cached from before)."""
        to_read = self._to_read(prompt_tokens)
        return len(to_read) - common_prefix_length(self.model.tokens, to_read)

    def begin(self, prompt_tokens: Sequence[int], read_later: bool = False) -> None:
        """Evaluate the prompt ahead of the first draft (counted as prompt time), or, `read_later`,
        draft nothing until `read`."""
        self.tokens_copied = 0
        if read_later:
            self.waiting = True
            self._unread, self._prompt_length = self.prompt_to_read(prompt_tokens), len(prompt_tokens)
            # Tokens earlier generations of the session made while it lagged (a chat about a long document).
            self._made_before = self.length.made_unread if isinstance(self.length, AdaptiveLength) else 0
        else:
            self.read(prompt_tokens)

    def ready_to_read(self, context: Sequence[int], n_generated: int, budget_left: int,
                      uncovered_share: float = 1.0) -> bool:
        """Whether to read the prompt now, `n_generated` tokens into a generation that may make `budget_left`
        more: once the first token is out, when the reading is expected to pay (`AdaptiveLength.worth_reading`,
        counting the tokens earlier generations made while this model lagged, and only the `uncovered_share`
        of the tokens to come that lookups will not draft; a fixed draft length always reads then)."""
        if n_generated == 0:
            return False
        if not isinstance(self.length, AdaptiveLength):
            return True
        room = self.model.context_size - self._prompt_length - n_generated  # the draft model drafts only while the context fits
        self.length.made_unread = self._made_before + n_generated
        return self.length.worth_reading(self._unread + n_generated, self.length.made_unread, min(budget_left, room),
                                         later_turns=self._made_before > 0, uncovered_share=uncovered_share)

    def read(self, context: Sequence[int]) -> None:
        """Evaluate what `begin` left unread: the context so far but its last token, unless the context
        overflows the draft model's (see `_to_read`); a long read is timed for the length controller."""
        self.waiting = False
        to_read = self._to_read(context)
        self._copy_what_the_target_read(to_read)
        n_new = len(to_read) - common_prefix_length(self.model.tokens, to_read)
        started = time.perf_counter()
        self.model.sync(to_read)
        if isinstance(self.length, AdaptiveLength):
            self.length.made_unread = 0
            if n_new >= READ_MEASURED_FROM:
                self.length.record_read(n_new, time.perf_counter() - started)

    def _tokens_a_copy_saves(self, tokens: Sequence[int]) -> int:
        """How many tokens of `tokens` that this model's cache lacks the target's holds, where copying the
        target's cache (`Model.copy_cache_from`: the whole of it, a state of at most MAX_COPIED_STATE_BYTES)
        beats reading them; else 0."""
        if self.copies_from is None or not self.model.takes_copies:
            return 0
        source = self.copies_from.tokens
        lacking = common_prefix_length(source, tokens) - common_prefix_length(self.model.tokens, tokens)
        pays = (lacking >= COPIED_FROM and lacking * TOKENS_COPIED_FOR_ONE_READ >= len(source)
                and len(source) <= self.model.context_size
                and self.copies_from.cache_state_size() <= MAX_COPIED_STATE_BYTES)
        return lacking if pays else 0

    def _copy_what_the_target_read(self, tokens: Sequence[int]) -> bool:
        """Take what the target's cache holds of `tokens` where that beats reading it (`_tokens_a_copy_saves`);
        whether it did. Where a copy fails once, this model reads from then on (`Model.takes_copies`)."""
        saved = self._tokens_a_copy_saves(tokens)
        if not saved or not self.model.copy_cache_from(self.copies_from):
            return False
        self.tokens_copied += saved
        return True

    def _to_read(self, prompt_tokens: Sequence[int]) -> Sequence[int]:
        """What the draft model must hold before it drafts: all but the last token; what it holds
        already where the prompt leaves its context no room to draft in (it will not draft, so reading
        would be wasted)."""
        if len(prompt_tokens) > self.model.context_size:
            return self.model.tokens
        return prompt_tokens[:-1]

    def propose(
        self, context: Sequence[int], max_tokens: int, sampler: Sampler, position: int,
        grammar: TokenGrammar | None = None, continued: Continuation | None = None,
    ) -> Draft:
        """Up to `max_tokens` tokens drawn one by one from q_draft (masked by `grammar`, along a copy of it).

        `continued(context, draft)`: a lookup's continuation of the context and the draft so far, asked after
        each token drawn; where it offers one, the draft ends with it (as far as the room and the grammar go)
        instead of drawing on: an answer that has begun to copy its prompt is drafted at a lookup's cost. Not
        where the draft decides the text (rejection sampling at a temperature: its tokens would need their q)."""
        self.continued = 0
        # The draft's cache must hold the context plus all but the last draft token.
        room = min(max_tokens, self.model.context_size - len(context) + 1)
        k = self.length.plan(room) if room > 0 and not self.waiting else 0
        tokens: list[int] = []
        rows: list[Probs] = []
        if k <= 0:
            return self._draft(tokens, rows, sampler)
        most = self.length.most_to_draft(k, room)  # (past the plan while each token is worth its cost)
        # What passes without this model's drafts added since it last drafted (lookups, passes that drafted
        # nothing) must be evaluated whenever it drafts next, so it is no cost of drafting now rather than
        # later (counted in, it would talk the length controller into drafting nothing, pass after pass):
        # it is timed apart, as what each pass that drafts nothing leaves to catch up on.
        # Its own last draft token (at most one to catch up) is part of drafting's cost.
        missing = self._missing(context)
        if missing > 1:  # (`lags_behind`)
            self._catch_up(context, missing)
        started = time.perf_counter()
        # Views of llama.cpp's logits buffer: each is used up before the next decode.
        logits = self.model.next_logits(context, copy=False)
        needs_confidence = self.p_min > 0 or self.length.uses_confidence
        along = grammar.copy() if grammar is not None else None
        decides = sampler.verifies_by_rejection and not self.sampling.greedy  # (the text depends on the draft)
        after_forced = False  # the step to come holds the evaluation of a forced run: not a draft step's cost
        penalties = Penalties.of(self.sampling)
        seen = penalties.window(context) if penalties is not None else None  # (and the draft so far: `extend`)
        while True:
            try:
                allowed, forced = along.next_tokens() if along is not None else (None, False)
            except EveryWayRepeats:  # the draft went where every way on repeats an item: the target's rows will say
                break
            if allowed is not None:
                allowed = allowed[allowed < self.model.n_vocab]  # a target may have a few more tokens than its draft
                if len(allowed) == 0:
                    break
            if forced:
                # The grammar's forced text is drafted as it is (the target's rows there allow it alone)
                # and evaluated by the draft model in one batch.
                try:
                    new = along.forced_run(int(allowed[0]), most - len(tokens))
                except EveryWayRepeats:
                    break
                certainties = [1.0] * len(new)
                rows += [Probs(np.array([token]), np.ones(1)) for token in new]
            else:
                if penalties is not None:  # (the draft so far counted, as the target's row there counts it)
                    logits = penalties.apply(logits, seen)
                confidence = Confidence(logits, allowed) if needs_confidence else None
                if self.p_min > 0 and confidence.max() < self.p_min:
                    break
                margin = None
                if self.sampling.greedy:
                    token = masked_argmax(logits, allowed)
                else:
                    q = next_token_probs(logits, self.sampling, allowed)
                    token, margin = sampler.draw_with_margin(q, position + len(tokens))
                    rows.append(q)
                if along is not None:
                    along.consume([token])
                new, certainties = [token], [self._certainty(confidence, token, margin)]
                now = time.perf_counter()
                if not after_forced:
                    self.length.record_draft_step(now - started, first=not tokens)
                started = now
            after_forced = forced
            tokens += new
            if continued is not None and not forced and not decides:
                more = continued(context, tokens)[: room - len(tokens)]
                if along is not None and more:
                    more = more[: along.validate(more)]
                if more:
                    self.continued = len(more)
                    tokens += more
                    break
            if seen is not None:
                seen.extend(new)
            if len(tokens) >= most or (along is not None and along.stopped):  # nothing can follow the grammar's end
                break
            if self.model.is_end_of_generation(tokens[-1]):  # nor an end-of-generation token
                break
            if needs_confidence and not all(
                self.length.keep_going(n, certainty) for n, certainty in enumerate(certainties, len(tokens) - len(new) + 1)
            ):
                break
            logits = self.model.eval(new, logits="last", copy=False)[0]
        return self._draft(tokens, rows, sampler)

    def _certainty(self, confidence: Confidence | None, token: int, margin: float | None) -> float:
        """How sure the draft is that the target keeps `token` (see `Confidence.certainty`): the lead of a coupled
        draw's score `margin` where there is one (`coupled_lead`), else the draft's own distribution's say."""
        if confidence is None:
            return 1.0
        if margin is not None:
            return coupled_lead(margin, self.sampling.temperature)
        return confidence.certainty(token, self.sampling.greedy)

    def _catch_up(self, context: Sequence[int], missing: int) -> None:
        """Evaluate, in one batch, the `missing` tokens of `context` but its last that the cache lacks, timed per
        token that passes without this model's drafts added (one of the missing tokens, its own last draft token
        or the target's after it, a pass's first step would have evaluated anyway: `lags_behind`)."""
        started = time.perf_counter()
        copied = self._copy_what_the_target_read(context[:-1])
        self.model.sync(context[:-1])
        if not copied:  # (a copy's cost is not a catch-up's: most catch-ups are too short to copy)
            self.length.record_catch_up(missing - 1, time.perf_counter() - started)

    def lags_behind(self, context: Sequence[int]) -> bool:
        """Whether the draft's cache misses more of `context` than its own last draft token (lookup passes added some)."""
        return self._missing(context) > 1

    def _missing(self, context: Sequence[int]) -> int:
        """How many tokens of `context`, but its last, the draft's cache lacks."""
        return len(context) - 1 - common_prefix_length(self.model.tokens, context[:-1])

    def _draft(self, tokens: list[int], rows: list[Probs], sampler: Sampler) -> Draft:
        """Drafts to be verified by rejection sampling carry one q per token (`rows`); greedy and coupled ones need none."""
        return Draft(tokens, rows if sampler.verifies_by_rejection and not self.sampling.greedy else None)

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float | None) -> None:
        """Pass the target's verdict and the verify pass's cost to the length controller."""
        self.length.observe(n_proposed, n_accepted, verify_seconds)
