"""The generation loop: draft, verify in one target pass, keep the accepted prefix.

`Generation` is iterated for the accepted chunks of text; afterwards it holds the
tokens, the text, why it stopped and its statistics. Without a drafter it is the
target-only baseline: one target decode per token, through the same code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np

from ..errors import LocalspecError
from ..runtime.model import Model, common_prefix_length
from ..settings import GenerationSettings
from .acceptance import accept
from .constraint import TokenGrammar
from .drafters import NO_DRAFT, Draft, Drafter
from .drafters.ngram import NGramIndex
from .sampling import Sampler, make_sampler
from .stats import SpecStats
from .textstream import TextStream

# A draft model that has at least this many prompt tokens still to read (about 3 ms a token for the demo
# draft) reads them once drafting is expected to pay for the reading: at the first pass, later, or not at
# all for a short answer (`ModelDrafter.ready_to_read`; `HybridDrafter.ready_to_read` also waits while
# lookups draft). Fewer are read at once, after the first token (which never waits for a draft model).
READ_AFTER_FIRST_TOKEN = 16

_Result = TypeVar("_Result")


class StopReason(str, Enum):
    """Why a generation ended (a str, so it compares with and serialises as its value)."""

    EOS = "eos"  # the target drew an end-of-generation token
    LENGTH = "length"  # max_tokens, or the context, was reached
    STOP = "stop"  # a stop string appeared
    INTERRUPTED = "interrupted"  # the consumer stopped early, or Ctrl-C

    def __str__(self) -> str:
        return self.value


@dataclass
class Chunk:
    """Tokens accepted in one step and their text.

    The first `n_drafted` tokens came from the draft and the target confirmed
    them; `drafted_text` is the part of `text` they produced (for highlighting).
    """

    tokens: list[int]
    text: str
    n_drafted: int
    drafted_text: str = ""


class Generation:
    """One generation from `prompt_tokens`, speculative when a drafter is given."""

    def __init__(
        self,
        target: Model,
        prompt_tokens: Sequence[int],
        settings: GenerationSettings,
        drafter: Drafter | None = None,
        grammar: str | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> None:
        """`grammar`: an llguidance grammar string every emitted token is held to (None: free text).
        `stop_requested`: asked between the prompt's batches, so that a generation nobody waits for any more
        stops before its first token (a long prompt takes many batches); after it, the consumer stops it."""
        if not prompt_tokens:
            raise LocalspecError("the prompt is empty: give at least one token of text")
        if len(prompt_tokens) > target.n_ctx:
            most = target.n_ctx_train
            raise LocalspecError(
                f"the prompt is {len(prompt_tokens)} tokens but the context holds {target.n_ctx}: shorten the prompt"
                + (f" or raise n_ctx (this model takes up to {most})" if most > target.n_ctx else "")
            )
        self.target = target
        self.prompt_tokens = list(prompt_tokens)
        self.settings = settings.with_seed().with_budget(structured=grammar is not None)
        self.drafter = drafter
        self.grammar = TokenGrammar.start(target, grammar) if grammar is not None else None
        self.tokens: list[int] = []
        self.stop_reason: StopReason | None = None
        self.stats = SpecStats(prompt_tokens=len(prompt_tokens))
        self._stream = TextStream(self.settings.stop)
        self._prompt_seconds_in_loop = 0.0  # prompt time within the loop's: the first token's draw, the drafter's reading
        self._occurrences = NGramIndex(1, 1, target.word_form) if drafter is not None else None  # guesses for padded passes
        self._stop_requested = stop_requested or (lambda: False)

    @property
    def text(self) -> str:
        return self._stream.text

    @property
    def matches_format(self) -> bool:
        """Held to a grammar, the output is a whole match of it: the grammar or an end-of-generation token ended
        it, or it stopped at max_tokens (or the context) where what was written already matches whole (`.*`)."""
        if self.grammar is None:
            return False
        return self.stop_reason == StopReason.EOS or (self.stop_reason == StopReason.LENGTH and self.grammar.accepting)

    def __iter__(self) -> Iterator[Chunk]:
        if self.stop_reason is not None or self.tokens:
            raise RuntimeError("a Generation runs once; create a new one")
        sampler = make_sampler(self.settings.speculative.verify, self.settings.seed)
        context = list(self.prompt_tokens)
        try:
            first_row = self._evaluate_prompt(context)
        except BaseException:  # (Ctrl-C while the prompt is read)
            self.stop_reason = StopReason.INTERRUPTED
            raise
        if first_row is None:
            self.stop_reason = StopReason.INTERRUPTED
            return
        # A draft model that must still read much of the prompt reads it after the first token, which
        # is not kept waiting for it, or later.
        drafter_reads_later = self.drafter is not None and self.drafter.prompt_to_read(context) >= READ_AFTER_FIRST_TOKEN

        started = time.perf_counter()
        try:
            # The first token comes from the prompt's evaluation (its last row), at once.
            first = self._prompt_time(lambda: self._first_token(context, first_row, sampler))
            if first.tokens or first.text:
                yield first
            if self.drafter is not None and self.stop_reason is None and self._draft_room(context) is not None:
                self._prompt_time(lambda: self.drafter.begin(context, read_later=drafter_reads_later))
            while self.stop_reason is None:
                # 0. Tokens a grammar forces are appended as they are, to be evaluated with this step's pass.
                forced = self._emit_forced(context)
                if forced.tokens or forced.text:
                    yield forced
                room = self._draft_room(context, len(forced.tokens)) if self.stop_reason is None else None
                if room is None:
                    self.stop_reason = self.stop_reason or StopReason.LENGTH
                    break
                # The first token is out, drafts are to come, and the reading is expected to pay for itself
                # (a long prompt may be left unread by a draft model for a short answer: see `worth_reading`).
                budget_left = self.settings.max_tokens - len(self.tokens)
                if drafter_reads_later and room > 0 and self.drafter.ready_to_read(context, len(self.tokens), budget_left):
                    self._prompt_time(lambda: self.drafter.read(context))
                    drafter_reads_later = False
                # 1. The drafter proposes up to `room` tokens d_1..d_k, the first at position n = len(tokens).
                position = len(self.tokens)
                draft = self._propose(context, room, sampler, position)
                guess = None if draft.tokens else self._guess_padding(context, room, len(forced.tokens), sampler)
                if guess is not None:
                    draft = Draft([guess], None)
                # 2. One target pass scores [last, d_1..d_k] (after any forced tokens): k+1 rows of logits,
                #    each masked by the grammar's state after the drafts before it.
                draft, allowed, forced_at = self._masked(draft)
                target_logits, verify_seconds = self._score(context, draft, len(forced.tokens))
                # 3. The acceptance rule keeps a prefix of the draft and adds one token of the target's.
                new_tokens, n_accepted = accept(draft.tokens, draft.q_draft, target_logits, self.settings.sampling,
                                                sampler, position, allowed, text=context)
                # 4. The target's cache keeps the context and the accepted drafts, nothing rejected.
                self.target.keep(len(context) + n_accepted)
                # 5. Feedback: the statistics and the drafter learn how the draft fared.
                self._record(draft, n_accepted, verify_seconds, forced_at, len(forced.tokens), guessed=guess is not None)
                # 6. Emit the new tokens, up to an end-of-generation token, a stop string or the grammar's end.
                chunk = self._emit(new_tokens, n_accepted, context)
                if self.stop_reason is not None:  # an end token or a stop string among the kept drafts:
                    self.target.keep(min(len(self.target.tokens), len(context)))  # cache nothing past the text
                if chunk.tokens or chunk.text:
                    yield chunk
            tail = self._stream.finish()
            if tail:
                yield Chunk([], tail, 0)
        finally:
            # (time.perf_counter() - started) less the draft model's reading of the prompt, which is prompt time
            self.stats.generation_seconds = time.perf_counter() - started - self._prompt_seconds_in_loop
            if self.drafter is not None:
                self.stats.draft_tokens_copied = self.drafter.tokens_copied
            if self.stop_reason is None:  # the consumer stopped early, or Ctrl-C
                self.stop_reason = StopReason.INTERRUPTED

    def _evaluate_prompt(self, prompt: list[int]) -> np.ndarray | None:
        """Fill the target's cache with the prompt, a batch at a time while no stop is requested, and return
        the logits its last token leaves for the first token (None: a stop was requested first)."""
        started = time.perf_counter()
        cached = common_prefix_length(self.target.tokens, prompt[:-1])  # (the last token is read again: its row is needed)
        if self.settings.speculative.same_text:  # what an earlier generation without it read alone is read again
            cached = min(cached, self.target.tokens_read_in_batches)
            self.target.keep(cached)
        self.stats.prompt_tokens_evaluated = len(prompt) - cached
        for end in range(cached + self.target.n_batch, len(prompt), self.target.n_batch):
            if self._stop_requested():
                return None
            self.target.sync(prompt[:end])  # (whole batches: decoded as one reading of the whole prompt decodes them)
        first_row = self.target.logits_after(prompt)
        self.stats.prompt_seconds = time.perf_counter() - started
        return first_row

    def _first_token(self, context: list[int], first_row: np.ndarray, sampler: Sampler) -> Chunk:
        """The first token, drawn from the row the prompt's evaluation left, as every later token is drawn from
        a pass's row (target-only and speculative decoding alike): it needs no target pass of its own. Nothing
        where there is no room for a token, or where a grammar forces text first or is complete (the loop
        appends forced text, and its first pass evaluates it)."""
        if self._draft_room(context) is None or (
                self.grammar is not None and (self.grammar.stopped or self.grammar.forced() is not None)):
            return Chunk([], "", 0)
        _, allowed, _ = self._masked(NO_DRAFT)
        new_tokens, _ = accept([], None, first_row[np.newaxis], self.settings.sampling, sampler, 0, allowed,
                               text=context)
        chunk = self._emit(new_tokens, 0, context)
        self.stats.tokens_from_prompt = len(chunk.tokens)
        return chunk

    def _prompt_time(self, read: Callable[[], _Result]) -> _Result:
        """Run `read` (the first token's draw, the drafter's reading of the prompt) as prompt time, not generation time."""
        started = time.perf_counter()
        result = read()
        seconds = time.perf_counter() - started
        self.stats.prompt_seconds += seconds
        self._prompt_seconds_in_loop += seconds
        return result

    def _draft_room(self, context: list[int], n_forced: int = 0) -> int | None:
        """How many draft tokens this step may propose; None when the generation must stop.

        Every step emits at least one token, so a draft leaves room for it within
        max_tokens; the scored tokens (the `n_forced` forced ones, then k+1) must
        fit the context and one batch.
        """
        remaining = self.settings.max_tokens - len(self.tokens)
        context_room = self._context_end() - len(context)
        if remaining <= 0 or context_room < 0:
            return None
        batch_room = self.target.n_batch - 1 - n_forced
        return min(self.settings.speculative.longest_draft, remaining - 1, context_room, batch_room)

    def _context_end(self) -> int:
        """How many positions of the target's context a generation may fill: all but the last where its passes
        are padded (`Model.pads_a_lone_token`, `speculative.same_text`), so that a one-token pass always has room
        for its second row. (Read alone, the last position's logits could differ from the same position read in
        a speculative batch: target-only and speculative decoding parted there at a near-tie.)"""
        padded = self.settings.speculative.same_text and self.target.pads_a_lone_token
        return self.target.n_ctx - padded

    def _emit_forced(self, context: list[int]) -> Chunk:
        """Append the tokens the grammar forces here, one at a time (none without a grammar), within max_tokens.

        Target-only and speculative decoding append the same forced tokens at the
        same positions, so both emit the same text; the step's target pass then
        evaluates them together with the draft.
        """
        if self.grammar is None:
            return Chunk([], "", 0)
        # Forced tokens, the context's last token and one more row fit one batch.
        room = min(self.settings.max_tokens - len(self.tokens), self._context_end() - len(context), self.target.n_batch - 1)
        tokens: list[int] = []
        text = ""
        while self.stop_reason is None and len(tokens) < room:
            if self.grammar.stopped:
                self.stop_reason = StopReason.EOS
                break
            forced = self.grammar.forced()
            if forced is None:
                break
            chunk = self._emit([forced], 0, context)
            tokens += chunk.tokens
            text += chunk.text
        self.stats.forced_tokens += len(tokens)
        return Chunk(tokens, text, 0)

    def _masked(self, draft: Draft) -> tuple[Draft, list[np.ndarray] | None, list[bool]]:
        """The draft as the grammar keeps it, each target row's mask, and the rows whose token it forces."""
        if self.grammar is None:
            return draft, None, []
        started = time.perf_counter()
        masks, forced_at = self.grammar.allowed_along(draft.tokens)
        self.stats.mask_seconds += time.perf_counter() - started
        kept = len(masks) - 1
        if kept < len(draft.tokens):
            draft = Draft(draft.tokens[:kept], None if draft.q_draft is None else draft.q_draft[:kept])
        return draft, masks, forced_at

    def _propose(self, context: list[int], room: int, sampler: Sampler, position: int) -> Draft:
        """The drafter's proposal, or no draft when it is too short to be worth a batched pass.

        Where the room left is below draft_min nothing is drafted. Otherwise a
        draft shorter than draft_min is dropped (the step decodes one token
        plainly) only when dropping it cannot bias the output: a draft without
        q_draft (greedy, a lookup, or coupled verification, where the output does
        not depend on the draft at all). A sampled draft that stopped short
        (p_min, an end token, the grammar) has a length that depends on the
        tokens drawn; dropping those drafts would keep only drafts of some
        tokens, which are then no longer samples of q_draft, so it is verified.
        (Drafting into room below draft_min and keeping only the drafts that
        stopped short would select tokens the same way.)
        """
        draft_min = self.settings.speculative.draft_min
        if self.drafter is None or room <= 0 or room < draft_min:
            return NO_DRAFT
        started = time.perf_counter()
        draft = self._usable(self.drafter.propose(context, room, sampler, position, self.grammar))
        self.stats.draft_seconds += time.perf_counter() - started
        if not draft.tokens or (len(draft.tokens) < draft_min and draft.q_draft is None):
            return NO_DRAFT
        return draft

    def _usable(self, draft: Draft) -> Draft:
        """The draft up to its first end-of-generation token: nothing after one could be emitted
        (a lookup copies on into the next turn of a chat; cut from what was drafted, so exact as p_min is);
        and before any token the target's vocabulary lacks (a damaged memory's: a proposal, never a failure)."""
        for i, token in enumerate(draft.tokens):
            if not 0 <= token < self.target.n_vocab:
                return Draft(draft.tokens[:i], None if draft.q_draft is None else draft.q_draft[:i])
            if self.target.is_end_of_generation(token):
                return Draft(draft.tokens[: i + 1], None if draft.q_draft is None else draft.q_draft[: i + 1])
        return draft

    def _guess_padding(self, context: list[int], room: int, n_forced: int, sampler: Sampler) -> int | None:
        """A one-token guess for the second row of a speculative pass that drafted nothing, where that pass is
        padded anyway (`Model.pads_lone_tokens`) and the text cannot depend on a draft (coupled verification,
        or greedy); else None. The guess is the token that followed the context's last token where it last
        occurred, verified like any lookup: it costs next to nothing (on the demo target's own output, where
        no lookup of 2-4 tokens matched, there was such a token at about half the positions, right a fifth
        of those times). Under a grammar, only a guess it allows (its matcher must never see a token it has
        not validated)."""
        if (self._occurrences is None or room <= 0 or n_forced or not self._pads_lone_tokens(len(context))
                or (sampler.verifies_by_rejection and not self.settings.sampling.greedy)):
            return None
        self._occurrences.extend_to(context)
        found = self._occurrences.match()
        if found is None:
            return None
        guess = self._occurrences.continuation(found[1][-1:], 1)[0]  # what followed its latest occurrence
        if self.grammar is not None and self.grammar.validate([guess]) != 1:
            return None
        return guess

    def _pads_lone_tokens(self, context_length: int) -> bool:
        """Whether a pass of one token gets a second row (`Model.pads_lone_tokens`): unless `speculative.same_text`
        is off, which trades the same text as target-only decoding for a lone token at full speed."""
        return self.settings.speculative.same_text and self.target.pads_lone_tokens(context_length)

    def _score(self, context: list[int], draft: Draft, n_forced: int = 0) -> tuple[np.ndarray, float]:
        """The target's logits at the k+1 positions, and the seconds the pass took.

        The pass evaluates the context's last token, the `n_forced` tokens appended
        after it this step, and the draft; logits come back for the last k+1 rows only.
        """
        started = time.perf_counter()
        fresh = n_forced + 1
        self.target.sync(context[:-fresh])
        tokens = [*context[-fresh:], *draft.tokens]
        if len(tokens) == 1 and self._pads_lone_tokens(len(context)):
            # A lone token would take llama.cpp's single-row kernels, which round unlike a batch's:
            # a second row (a copy, dropped with the rejected drafts in step 4) keeps every pass, of a
            # speculative run however many tokens each drafted and of target-only decoding, computed alike.
            tokens.append(context[-1])
        rows = len(draft.tokens) + 1
        # A view of llama.cpp's buffer: `accept` uses it up before the target decodes again.
        logits = self.target.eval(tokens, logits=len(tokens) - n_forced, copy=False)[:rows]
        return logits, time.perf_counter() - started

    def _record(self, draft: Draft, n_accepted: int, verify_seconds: float, forced_at: list[bool],
                n_forced: int = 0, guessed: bool = False) -> None:
        """Count the pass. Tokens a grammar forced (`forced_at[i]`: row i's token) are counted as forced,
        not as drafts proposed and kept; the drafter is told the whole draft, which it paid for. A padded
        pass's guess is counted apart: for the drafter it was a pass that drafted nothing."""
        self.stats.forced_tokens += sum(forced_at[: n_accepted + 1])
        if guessed:
            self.stats.guesses += 1
            self.stats.guesses_kept += n_accepted - sum(forced_at[:n_accepted])
        if not draft.tokens or guessed:
            self.stats.target_passes += 1
            if self.drafter is not None and not n_forced:  # (with forced tokens the pass was a batch)
                self.drafter.observe(0, 0, verify_seconds)  # what a pass that drafts nothing costs
            return
        forced_drafts = sum(forced_at[: len(draft.tokens)])
        self.stats.record_pass(len(draft.tokens) - forced_drafts, n_accepted - sum(forced_at[:n_accepted]))
        # (a batch that also evaluated forced tokens costs more than its draft: it measures no verify cost)
        self.drafter.observe(len(draft.tokens), n_accepted, None if n_forced else verify_seconds)

    def _emit(self, new_tokens: list[int], n_accepted: int, context: list[int]) -> Chunk:
        """Append accepted tokens up to an end-of-generation token, a stop string or the grammar's end."""
        kept: list[int] = []
        text = drafted_text = ""
        for token in new_tokens:
            if self.target.is_end_of_generation(token):
                self.stop_reason = StopReason.EOS
                break
            if self.grammar is not None:
                self.grammar.consume([token])  # drawn under its mask, or forced by it
            kept.append(token)
            context.append(token)
            self.tokens.append(token)
            self.stats.tokens_generated += 1
            text += self._stream.push(self._token_bytes(token))
            if len(kept) <= n_accepted:
                drafted_text = text
            if self._stream.stopped:
                self.stop_reason = StopReason.STOP
                break
            if self.grammar is not None and self.grammar.stopped:
                self.stop_reason = StopReason.EOS  # the output is complete: nothing may follow
                break
        return Chunk(kept, text, min(n_accepted, len(kept)), drafted_text)

    def _token_bytes(self, token: int) -> bytes:
        """A token's bytes in the output. A special token is text too where the grammar names it (it allows
        none that it does not): a tool call's marker such as Mistral's `[TOOL_CALLS]`, a control token that
        is no text where the output is read without special tokens."""
        piece = self.target.token_bytes(token)
        if not piece and self.grammar is not None:
            piece = self.target.token_bytes(token, special=True)
        return piece


def generate_text(
    target: Model,
    prompt_tokens: Sequence[int],
    settings: GenerationSettings,
    drafter: Drafter | None = None,
    grammar: str | None = None,
) -> Generation:
    """Run a generation to the end and return it (for callers that do not stream)."""
    generation = Generation(target, prompt_tokens, settings, drafter, grammar)
    for _ in generation:
        pass
    return generation
