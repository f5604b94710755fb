"""What every drafter is: the `Drafter` interface and the `Draft` it returns.

A drafter answers these calls: `prompt_to_read(prompt_tokens)`, how many
prompt tokens a draft model of its has still to evaluate (0 for lookups);
`begin(prompt_tokens, read_later)` before a generation, where a draft model
reads the prompt, unless told to read it later, in `read(context)` (it drafts
nothing until then), which the generation calls once `ready_to_read(context,
n_generated, budget_left)` says the reading is expected to pay;
`propose(context, max_tokens, sampler, position, grammar)`, which returns new
candidate tokens (never the context itself), the first of them at `position`
of the generation, drawn with `sampler`, all allowed by `grammar` when the
output is held to one (the drafter advances a copy, never the grammar itself),
and, for rejection verification, the distribution each was drawn from; and
`observe(n_proposed, n_accepted, verify_seconds)`, which tells it how the
target judged them and what the verify pass cost; `tokens_copied` counts the
tokens a draft model of its took from the target's cache in this generation
instead of reading them. A drafter that returns
`q_draft=None` is deterministic (a point-mass q) and is verified by comparing
with samples of the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ..constraint import TokenGrammar
from ..sampling import Probs, Sampler


@dataclass
class Draft:
    """Proposed tokens and, token by token, the distribution q_draft each was sampled from (None: deterministic)."""

    tokens: list[int]
    q_draft: list[Probs] | None


NO_DRAFT = Draft([], None)


class Drafter(Protocol):
    tokens_copied: int

    def prompt_to_read(self, prompt_tokens: Sequence[int]) -> int: ...

    def begin(self, prompt_tokens: Sequence[int], read_later: bool = False) -> None: ...

    def ready_to_read(self, context: Sequence[int], n_generated: int, budget_left: int) -> bool: ...

    def read(self, context: Sequence[int]) -> None: ...

    def propose(
        self, context: Sequence[int], max_tokens: int, sampler: Sampler, position: int,
        grammar: TokenGrammar | None = None,
    ) -> Draft: ...

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float | None) -> None:
        """The target's verdict on the pass just verified, and what the pass cost (n_proposed 0: it drafted nothing;
        verify_seconds None: the pass also evaluated tokens a grammar forced, so its cost is not a draft's)."""
