"""Repetition penalties: the scores of tokens the text has just used, lowered before sampling.

The three penalties of llama.cpp, Ollama and the OpenAI API, over the last
`penalty_last_n` tokens of the text so far (the prompt's too; 0: all of it): a
token found there c ≥ 1 times has its score divided by `repeat_penalty` where it
is positive (multiplied where it is negative), then lowered by
`presence_penalty` + c·`frequency_penalty`. Tokens not found there keep theirs.

A row's penalised scores depend on the text before it alone. So a speculative
pass penalises each of its k+1 rows with the context and the drafts before that
row (`each_row`), and a draft model each of its steps with the context and its
draft so far: every position's distribution is the one target-only decoding
samples there, and verification stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..settings import SamplingParams


@dataclass(frozen=True)
class Penalties:
    """The repetition penalties of one generation (see the module docstring)."""

    repeat: float
    presence: float
    frequency: float
    last_n: int  # how many of the latest tokens count; 0: all of them

    @staticmethod
    def of(sampling: SamplingParams) -> Penalties | None:
        """The penalties `sampling` asks for; None where every one is off."""
        if sampling.repeat_penalty == 1.0 and sampling.presence_penalty == 0.0 and sampling.frequency_penalty == 0.0:
            return None
        return Penalties(sampling.repeat_penalty, sampling.presence_penalty, sampling.frequency_penalty,
                         sampling.penalty_last_n)

    def window(self, text: Sequence[int], drafted: Sequence[int] = ()) -> list[int]:
        """The tokens the penalties count after `text` and then `drafted`: the last `last_n` of them."""
        if not self.last_n:
            return [*text, *drafted]
        return [*text[max(len(text) - self.last_n, 0):], *drafted][-self.last_n:]

    def apply(self, logits: np.ndarray, window: Sequence[int]) -> np.ndarray:
        """A penalised copy of one row of `logits`, for the tokens `window` counts (see `window`)."""
        tokens, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
        inside = (tokens >= 0) & (tokens < logits.shape[-1])
        tokens, counts = tokens[inside], counts[inside]
        penalised = np.array(logits, dtype=np.float32)  # (a copy: `logits` may be a view of llama.cpp's buffer)
        scores = penalised[tokens]
        if self.repeat != 1.0:
            scores = np.where(scores > 0, scores / self.repeat, scores * self.repeat)
        penalised[tokens] = scores - (self.presence + counts * self.frequency)
        return penalised

    def each_row(self, rows: np.ndarray, text: Sequence[int], drafted: Sequence[int]) -> list[np.ndarray]:
        """A pass's rows penalised: row i follows `text` and the first i tokens of `drafted`."""
        return [self.apply(row, self.window(text, drafted[:i])) for i, row in enumerate(rows)]
