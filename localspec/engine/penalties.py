"""Repetition penalties: the scores of tokens the text has just used, lowered before sampling.

The three penalties of llama.cpp's sampler (and Ollama's options), over the last
`repeat_last_n` tokens of the text so far, the prompt's among them (-1: the whole
text; 0: no penalties): a token found there c ≥ 1 times has its score divided by
`repeat_penalty` where it is positive (multiplied where it is not), then lowered
by `presence_penalty` + c·`frequency_penalty`. Tokens not found there keep theirs.

A row's penalised scores depend on the text before it alone. So a speculative
pass penalises each of its k+1 rows with the context and the drafts before that
row (`each_row`), and a draft model each of its steps with the context and its
draft so far: every position's distribution is the one target-only decoding
samples there, and verification stays exact.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..settings import SamplingParams

WHOLE_TEXT = -1  # `repeat_last_n` for a window as long as the text


@dataclass(frozen=True)
class Penalties:
    """The repetition penalties of one generation (see the module docstring)."""

    repeat: float
    presence: float
    frequency: float
    last_n: int  # how many of the latest tokens count (WHOLE_TEXT: all of them)

    @staticmethod
    def of(sampling: SamplingParams) -> Penalties | None:
        """The penalties `sampling` asks for; None where every one is off or the window is empty."""
        off = sampling.repeat_penalty == 1.0 and sampling.presence_penalty == 0.0 and sampling.frequency_penalty == 0.0
        if off or sampling.repeat_last_n == 0:
            return None
        return Penalties(sampling.repeat_penalty, sampling.presence_penalty, sampling.frequency_penalty,
                         sampling.repeat_last_n)

    def window(self, text: Sequence[int]) -> PenaltyWindow:
        """What the penalties count in the row after `text`; `PenaltyWindow.extend` follows tokens appended to it."""
        return PenaltyWindow(text, self.last_n)

    def apply(self, logits: np.ndarray, window: PenaltyWindow) -> np.ndarray:
        """A penalised copy of one row of `logits`, for the tokens `window` counts."""
        penalised = np.array(logits, dtype=np.float32)  # (a copy: `logits` may be a view of llama.cpp's buffer)
        n = len(window.counts)
        tokens = np.fromiter(window.counts.keys(), dtype=np.int64, count=n)
        counts = np.fromiter(window.counts.values(), dtype=np.float32, count=n)
        inside = (tokens >= 0) & (tokens < logits.shape[-1])
        tokens, counts = tokens[inside], counts[inside]
        scores = penalised[tokens]
        if self.repeat != 1.0:
            scores = np.where(scores > 0, scores / np.float32(self.repeat), scores * np.float32(self.repeat))
        # (in float32, as llama.cpp's sampler: count·frequency + presence, then subtracted)
        lowered_by = counts * np.float32(self.frequency) + np.float32(self.presence)
        penalised[tokens] = scores - lowered_by
        return penalised

    def each_row(self, rows: np.ndarray, text: Sequence[int], drafted: Sequence[int]) -> list[np.ndarray]:
        """A pass's rows penalised: row i follows `text` and the first i tokens of `drafted`."""
        window = self.window(text)
        penalised = []
        for i, row in enumerate(rows):
            if i:
                window.extend(drafted[i - 1 : i])
            penalised.append(self.apply(row, window))
        return penalised


class PenaltyWindow:
    """The counts of the last `last_n` tokens of a text (WHOLE_TEXT: of all of them), kept as tokens are appended."""

    def __init__(self, text: Sequence[int], last_n: int) -> None:
        self.last_n = last_n
        held = text if last_n == WHOLE_TEXT else text[max(len(text) - last_n, 0):]
        self.counts: Counter[int] = Counter(held)
        self._held = deque(held) if last_n != WHOLE_TEXT else None  # (the whole text needs no order)

    def extend(self, tokens: Sequence[int]) -> None:
        """Count `tokens`, appended to the text; the oldest tokens leave a window that is full."""
        for token in tokens:
            self.counts[token] += 1
            if self._held is None:
                continue
            self._held.append(token)
            if len(self._held) > self.last_n:
                oldest = self._held.popleft()
                self.counts[oldest] -= 1
                if not self.counts[oldest]:
                    del self.counts[oldest]
