"""Token bytes to text, streamed: never split a UTF-8 character, stop on stop strings.

`TextStream.push(piece)` takes the bytes of newly accepted tokens and returns the
text that is safe to show now. Bytes of an unfinished UTF-8 character are held
back until the character completes (and dropped if it never does), and so is
any tail of the text that could be the start of a stop string. When a stop
string appears, everything before it is released and the stream reports that
it has stopped.
"""

from __future__ import annotations

import codecs
from typing import Sequence


class TextStream:
    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._pending = ""
        self.stopped = False
        self.text = ""

    def push(self, piece: bytes) -> str:
        """Add token bytes; return the text that can be emitted now."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(piece)
        return self._release(final=False)

    def finish(self) -> str:
        """Flush what is held back at the end of generation.

        The bytes of a character that never completed (a generation cut by its
        token limit inside a multi-byte character) are dropped, not shown as U+FFFD.
        """
        if self.stopped:
            return ""
        self._decoder.reset()  # it holds only the start of an unfinished character; bytes that can never be valid were replaced already
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        hit = self._first_stop(self._pending)
        if hit is not None:
            out = self._pending[:hit]
            self._pending = ""
            self.stopped = True
        elif final:
            out, self._pending = self._pending, ""
        else:
            held = self._held_back_length(self._pending)
            cut = len(self._pending) - held
            out, self._pending = self._pending[:cut], self._pending[cut:]
        self.text += out
        return out

    def _first_stop(self, text: str) -> int | None:
        positions = [i for i in (text.find(s) for s in self._stop) if i >= 0]
        return min(positions) if positions else None

    def _held_back_length(self, text: str) -> int:
        return held_back_length(text, self._stop)


def held_back_length(text: str, words: Sequence[str]) -> int:
    """Length of the longest tail of `text` that begins one of `words` (a stop string, a tag: held back until
    the next text says whether it is one)."""
    longest = 0
    for word in words:
        for n in range(min(len(word) - 1, len(text)), longest, -1):
            if word.startswith(text[-n:]):
                longest = n
                break
    return longest
