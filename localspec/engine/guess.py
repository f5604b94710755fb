"""A one-token guess for the second row of a target pass that would otherwise be padded.

Where llama.cpp computes a lone token unlike a batch (llamafile's kernels, its default CPU
build), a pass with nothing drafted gets a second row anyway (`Model.pads_lone_tokens`), which
is then dropped. The row may as well carry a guess: the token that followed the context's last
token where it last occurred. Verified like any deterministic draft, it costs next to nothing.
On the demo target's own output for copy-heavy and ordinary prompts, at the positions where
no lookup of 2-4 tokens matched, such a guess existed at about half of them and was the next
token at about a fifth of those.
"""

from __future__ import annotations

from typing import Sequence


class LatestFollowers:
    """For each token of a growing context, the token that followed its latest occurrence."""

    def __init__(self) -> None:
        self._after: dict[int, int] = {}
        self._read = 0  # positions of the context whose pair with the token before is counted

    def guess(self, context: Sequence[int]) -> int | None:
        """The token that followed `context[-1]` where it last occurred before the end; None if nowhere."""
        if len(context) < self._read:  # (another context: start over)
            self._after.clear()
            self._read = 0
        for i in range(max(self._read, 1), len(context)):
            self._after[context[i - 1]] = context[i]
        self._read = len(context)
        return self._after.get(context[-1]) if context else None
