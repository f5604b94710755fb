"""The generation loop: draft, verify in one target pass, keep the accepted prefix.

`Generation` is iterated for the accepted chunks of text; afterwards it holds the
tokens, the text, why it stopped and its statistics. Without a drafter it is the
target-only baseline: one target decode per token, through the same code.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator, Sequence

import numpy as np

from .drafter import Draft, Drafter
from .errors import LocalspecError
from .model import Model
from .sampling import SamplingParams, logits_to_probs
from .stats import SpecStats
from .textstream import TextStream
from .verify import verify, verify_greedy


@dataclass(frozen=True)
class SpeculativeParams:
    """How much to draft: at most `draft_max` tokens a step; a draft shorter than
    `draft_min` is dropped (plain decoding that step); `p_min` stops drafting when
    the draft model's confidence falls below it."""

    draft_max: int = 8
    draft_min: int = 0
    p_min: float = 0.0

    def __post_init__(self) -> None:
        if self.draft_max < 1:
            raise ValueError(f"draft_max must be >= 1, got {self.draft_max}")
        if not 0 <= self.draft_min <= self.draft_max:
            raise ValueError(f"draft_min must be in [0, draft_max], got {self.draft_min}")
        if not 0 <= self.p_min <= 1:
            raise ValueError(f"p_min must be in [0, 1], got {self.p_min}")


@dataclass(frozen=True)
class GenerationSettings:
    """Everything that decides what one generation produces."""

    sampling: SamplingParams = field(default_factory=SamplingParams)
    speculative: SpeculativeParams = field(default_factory=SpeculativeParams)
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {self.max_tokens}")

    def with_seed(self) -> "GenerationSettings":
        """A copy with a concrete seed, drawn at random when none was given."""
        if self.seed is not None:
            return self
        return GenerationSettings(self.sampling, self.speculative, self.max_tokens, self.stop, secrets.randbits(32))

    def to_dict(self) -> dict:
        return asdict(self)


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
    ) -> None:
        if not prompt_tokens:
            raise LocalspecError("the prompt is empty: give at least one token of text")
        if len(prompt_tokens) > target.n_ctx:
            raise LocalspecError(
                f"the prompt is {len(prompt_tokens)} tokens but the context holds {target.n_ctx}:"
                " shorten the prompt or raise n_ctx"
            )
        self.target = target
        self.prompt_tokens = list(prompt_tokens)
        self.settings = settings.with_seed()
        self.drafter = drafter
        self.tokens: list[int] = []
        self.stop_reason: str | None = None
        self.stats = SpecStats(prompt_tokens=len(prompt_tokens))
        self._stream = TextStream(self.settings.stop)

    @property
    def text(self) -> str:
        return self._stream.text

    def __iter__(self) -> Iterator[Chunk]:
        if self.stop_reason is not None or self.tokens:
            raise RuntimeError("a Generation runs once; create a new one")
        settings = self.settings
        rng = np.random.default_rng(settings.seed)
        context = list(self.prompt_tokens)

        started = time.perf_counter()
        self.target.sync(context[:-1])
        if self.drafter is not None:
            self.drafter.begin(context)
        self.stats.prompt_seconds = time.perf_counter() - started

        started = time.perf_counter()
        try:
            while self.stop_reason is None:
                remaining = settings.max_tokens - len(self.tokens)
                room = self.target.n_ctx - len(context)
                if remaining <= 0 or room < 0:
                    self.stop_reason = "length"
                    break
                draft = self._draft(context, min(remaining - 1, room), rng)
                new_tokens, n_accepted = self._verify(context, draft, rng)
                self.target.keep(len(context) + n_accepted)
                chunk = self._emit(new_tokens, n_accepted, context)
                if chunk.tokens or chunk.text:
                    yield chunk
            tail = self._stream.finish()
            if tail:
                yield Chunk([], tail, 0)
        finally:
            self.stats.generation_seconds = time.perf_counter() - started
            if self.stop_reason is None:  # the consumer stopped early, or Ctrl-C
                self.stop_reason = "interrupted"

    def _draft(self, context: list[int], limit: int, rng: np.random.Generator) -> Draft:
        speculative = self.settings.speculative
        n_wanted = min(speculative.draft_max, limit)
        if self.drafter is None or n_wanted <= 0:
            return Draft([], None)
        draft = self.drafter.propose(context, n_wanted, rng)
        if len(draft.tokens) < max(speculative.draft_min, 1):
            return Draft([], None)
        return draft

    def _verify(self, context: list[int], draft: Draft, rng: np.random.Generator) -> tuple[list[int], int]:
        """Score [last, d_1..d_k] in one target pass and apply the acceptance rule."""
        sampling = self.settings.sampling
        self.target.sync(context[:-1])
        logits = self.target.eval([context[-1], *draft.tokens], logits="all")
        if sampling.greedy:
            new_tokens, n_accepted = verify_greedy(draft.tokens, np.argmax(logits, axis=1))
        else:
            p_target = np.stack([logits_to_probs(row, sampling) for row in logits])
            new_tokens, n_accepted = verify(draft.tokens, draft.q_draft, p_target, rng)
        if draft.tokens:
            self.stats.record_pass(len(draft.tokens), n_accepted)
            self.drafter.observe(len(draft.tokens), n_accepted)
        else:
            self.stats.target_passes += 1
        return new_tokens, n_accepted

    def _emit(self, new_tokens: list[int], n_accepted: int, context: list[int]) -> Chunk:
        """Append accepted tokens up to an end-of-generation token or a stop string."""
        kept: list[int] = []
        text = drafted_text = ""
        for token in new_tokens:
            if self.target.is_end_of_generation(token):
                self.stop_reason = "eos"
                break
            kept.append(token)
            context.append(token)
            self.tokens.append(token)
            self.stats.tokens_generated += 1
            text += self._stream.push(self.target.token_bytes(token))
            if len(kept) <= n_accepted:
                drafted_text = text
            if self._stream.stopped:
                self.stop_reason = "stop"
                break
        return Chunk(kept, text, min(n_accepted, len(kept)), drafted_text)


def generate_text(
    target: Model,
    prompt_tokens: Sequence[int],
    settings: GenerationSettings,
    drafter: Drafter | None = None,
) -> Generation:
    """Run a generation to the end and return it (for callers that do not stream)."""
    generation = Generation(target, prompt_tokens, settings, drafter)
    for _ in generation:
        pass
    return generation
