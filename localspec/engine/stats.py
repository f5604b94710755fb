"""Counters of one generation: what was drafted, what the target kept, how fast."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


def _ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None when there is nothing to divide by."""
    return numerator / denominator if denominator else None


@dataclass
class SpecStats:
    """Per-generation statistics; `to_dict()` is the `stats` object of `--json`."""

    prompt_tokens: int = 0
    prompt_tokens_evaluated: int = 0  # of the prompt tokens, those the target's cache did not already hold
    tokens_generated: int = 0
    tokens_from_prompt: int = 0  # of tokens_generated, the first where the prompt's evaluation gave it (no pass of its own)
    target_passes: int = 0
    draft_tokens_proposed: int = 0
    draft_tokens_accepted: int = 0
    # accepted_length_counts[n]: target passes in which exactly n draft tokens were kept.
    accepted_length_counts: list[int] = field(default_factory=list)
    # proposed_at[i] / accepted_at[i]: draft tokens proposed / kept at draft position i+1.
    proposed_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0
    draft_seconds: float = 0.0  # part of generation_seconds spent drafting
    forced_tokens: int = 0  # of tokens_generated, those a grammar forced (appended without sampling)
    mask_seconds: float = 0.0  # part of generation_seconds spent computing grammar masks for the target
    guesses: int = 0  # passes that would have been padded and carried a one-token guess instead (`Generation._guess_padding`)
    guesses_kept: int = 0  # of those guesses, the ones the target kept (not counted as drafts)
    # Tokens the draft model took from the target's cache rather than reading them (`ModelDrafter`: a long prompt).
    draft_tokens_copied: int = 0

    def record_pass(self, n_proposed: int, n_accepted: int) -> None:
        """Count one target pass that judged `n_proposed` draft tokens and kept `n_accepted`."""
        self.target_passes += 1
        self.draft_tokens_proposed += n_proposed
        self.draft_tokens_accepted += n_accepted
        _grow(self.accepted_length_counts, n_accepted + 1)
        self.accepted_length_counts[n_accepted] += 1
        _grow(self.proposed_at, n_proposed)
        _grow(self.accepted_at, n_proposed)
        for position in range(n_proposed):
            self.proposed_at[position] += 1
            if position < n_accepted:
                self.accepted_at[position] += 1

    def add(self, other: "SpecStats") -> None:
        """Accumulate another generation's counters and times into these (for totals over runs): every field adds up."""
        for item in fields(self):
            mine, theirs = getattr(self, item.name), getattr(other, item.name)
            if isinstance(mine, list):
                _grow(mine, len(theirs))
                for i, value in enumerate(theirs):
                    mine[i] += value
            else:
                setattr(self, item.name, mine + theirs)

    @property
    def acceptance_rate(self) -> float | None:
        return _ratio(self.draft_tokens_accepted, self.draft_tokens_proposed)

    @property
    def mean_accepted_length(self) -> float | None:
        """Draft tokens kept per target pass."""
        return _ratio(self.draft_tokens_accepted, self.target_passes)

    @property
    def tokens_per_pass(self) -> float | None:
        """Tokens each target pass emitted (the first token, from the prompt's evaluation, is no pass's)."""
        return _ratio(self.tokens_generated - self.tokens_from_prompt, self.target_passes)

    @property
    def tokens_per_second(self) -> float | None:
        """Generation speed, prompt processing excluded: with it the first token, which the prompt's evaluation
        gives (as llama.cpp counts its speeds). None where no token took a target pass (that token was all, or a
        grammar forced the rest): no speed was measured."""
        generated = self.tokens_generated - self.tokens_from_prompt
        if generated <= 0 or (self.target_passes == 0 and self.forced_tokens >= generated):
            return None
        return _ratio(generated, self.generation_seconds)

    @property
    def seconds_per_draft_token(self) -> float | None:
        return _ratio(self.draft_seconds, self.draft_tokens_proposed)

    @property
    def seconds_per_pass(self) -> float | None:
        return _ratio(self.generation_seconds, self.target_passes)

    @property
    def per_position_acceptance(self) -> list[float]:
        """Acceptance rate at draft position 1, 2, ... (of the tokens proposed there)."""
        return [a / p if p else 0.0 for a, p in zip(self.accepted_at, self.proposed_at)]

    def to_dict(self) -> dict[str, Any]:
        """Every counter (the per-position lists but `accepted_length_counts` aside) and every derived rate."""
        counters = {item.name: getattr(self, item.name) for item in fields(self) if item.name not in _PER_POSITION_COUNTS}
        rates = {name: getattr(self, name) for name in _RATES}
        return {**counters, "accepted_length_counts": list(self.accepted_length_counts), **rates}

    def summary(self) -> str:
        """One line for `--stats`."""
        speed = f"{self.tokens_per_second:.1f} tok/s" if self.tokens_per_second else "- tok/s"
        line = f"{self.tokens_generated} tokens, {speed}, prompt {self.prompt_tokens} tok in {self.prompt_seconds:.2f}s"
        if self.draft_tokens_copied:
            line += f" ({self.draft_tokens_copied} copied to the draft)"
        if self.acceptance_rate is None:
            return line + (f", {self.guesses_kept}/{self.guesses} guesses kept" if self.guesses else ", no drafting")
        return (
            line
            + f", acceptance {self.acceptance_rate:.1%} ({self.draft_tokens_accepted}/{self.draft_tokens_proposed}),"
            + f" {self.tokens_per_pass:.2f} tok/target pass"
        )


# Reported through per_position_acceptance rather than as raw counts.
_PER_POSITION_COUNTS = ("accepted_length_counts", "proposed_at", "accepted_at")
_RATES = ("acceptance_rate", "mean_accepted_length", "tokens_per_pass", "per_position_acceptance", "tokens_per_second")


def _grow(values: list[int], size: int) -> None:
    values.extend([0] * (size - len(values)))
