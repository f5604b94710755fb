"""Structured output measured side by side: constrained speculative vs constrained target-only.

`bench --json-schema FILE` and `bench --structured` come here. Each prompt carries
a grammar (its JSON schema compiled for llguidance). For each temperature, every
prompt is generated four ways per drafting configuration, in an order that
rotates from prompt to prompt as in `app.bench`: target-only and speculative,
each held to the grammar and free. The constrained speed-up is read beside the
free one on the same prompts and seeds, so what the grammar changes is what
differs between the two.

Also reported: time spent computing the target's grammar masks per generated
token, the tokens the grammar forced (appended without sampling), how many
constrained outputs were complete (the grammar finished, an end token was
drawn where it allowed one, or what max_tokens left matches whole), and how many constrained speculative outputs were
token for token the constrained target-only ones (all of them with coupled
verification).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..engine.draft_length import LearnedLengths
from ..engine.generation import Generation
from ..engine.stats import SpecStats
from ..settings import GenerationSettings
from .bench import (
    PLAIN,
    BenchCase,
    BenchResult,
    PromptTurn,
    PromptTurns,
    case_settings,
    generate,
    measure_turns,
    prompt_tokens,
)
from .session import Session

# on_run(case or None for target-only, constrained, prompt index, the finished generation)
RunCallback = Callable[[BenchCase | None, bool, int, Generation], None]


@dataclass(frozen=True)
class ConstrainedPrompt:
    """A prompt and the grammar its answer is held to."""

    name: str
    prompt: str
    grammar: str  # an llguidance grammar string (engine.grammar.compile_format)


@dataclass
class StructuredResult:
    """One drafting configuration measured with and without the grammar, on the same prompts and seeds."""

    case: BenchCase
    constrained: BenchResult = field(init=False)
    free: BenchResult = field(init=False)
    complete_speculative: int = 0  # constrained speculative outputs that match their format whole (matches_format)
    complete_baseline: int = 0  # ... and target-only ones

    def __post_init__(self) -> None:
        self.constrained = BenchResult(self.case)
        self.free = BenchResult(self.case)

    @property
    def runs(self) -> int:
        """Prompt runs measured (each with and without the grammar)."""
        return self.constrained.runs

    def add_round(self, round_result: StructuredResult) -> None:
        """Keep the speed-ups of one round over the prompts, constrained and free."""
        self.constrained.add_round(round_result.constrained)
        self.free.add_round(round_result.free)

    @property
    def gain_over_free(self) -> float:
        """Constrained speed-up over free speed-up (1.0: the grammar leaves drafting's gain as it was)."""
        return self.constrained.speedup / self.free.speedup if self.free.speedup else 0.0

    def to_dict(self) -> dict[str, Any]:
        speculative, baseline = self.constrained.speculative, self.constrained.baseline
        return {
            "strategy": self.case.strategy,
            "draft_max": self.case.draft_max,
            "verify": self.case.verify,
            "temperature": self.case.temperature,
            "constrained_speculative_tokens_per_second": speculative.tokens_per_second,
            "constrained_baseline_tokens_per_second": baseline.tokens_per_second,
            "constrained_speedup": self.constrained.speedup,
            "constrained_speedup_spread": self.constrained.spread,
            "free_speculative_tokens_per_second": self.free.speculative.tokens_per_second,
            "free_baseline_tokens_per_second": self.free.baseline.tokens_per_second,
            "free_speedup": self.free.speedup,
            "constrained_plain_tokens_per_second": self.constrained.plain.tokens_per_second if self.constrained.plain else None,
            "constrained_speedup_over_plain": self.constrained.speedup_over_plain,
            "free_plain_tokens_per_second": self.free.plain.tokens_per_second if self.free.plain else None,
            "free_speedup_over_plain": self.free.speedup_over_plain,
            "acceptance_rate": speculative.acceptance_rate,
            "free_acceptance_rate": self.free.speculative.acceptance_rate,
            "speculative_mask_ms_per_token": _ms_per_token(speculative.mask_seconds, speculative),
            "baseline_mask_ms_per_token": _ms_per_token(baseline.mask_seconds, baseline),
            "speculative_forced_tokens": speculative.forced_tokens,
            "baseline_forced_tokens": baseline.forced_tokens,
            "speculative_tokens": speculative.tokens_generated,
            "baseline_tokens": baseline.tokens_generated,
            "complete_speculative": self.complete_speculative,
            "complete_baseline": self.complete_baseline,
            "identical_prompts": self.constrained.identical_prompts,
            "free_identical_prompts": self.free.identical_prompts,
            "plain_identical_prompts": self.constrained.plain_identical_prompts if self.constrained.plain else None,
            "free_plain_identical_prompts": self.free.plain_identical_prompts if self.free.plain else None,
            "runs": self.constrained.runs,
        }


def run_structured_bench(
    session: Session,
    settings: GenerationSettings,
    cases: Sequence[BenchCase],
    prompts: Sequence[ConstrainedPrompt],
    repeat: int = 1,
    on_run: RunCallback | None = None,
    cold: bool = False,
    raw: bool = False,
) -> list[StructuredResult]:
    """Measure every case with and without each prompt's grammar, beside target-only (and target-only at full
    speed where it pads its lone tokens, as `run_bench` does); results in `cases` order. `raw`: the prompts are
    plain text, without the chat template."""
    every_prompt = prompt_tokens(session, [prompt.prompt for prompt in prompts], raw)
    turns = PromptTurns(session, settings, cases, len(prompts), repeat, grammar=prompts[0].grammar, raw=raw)
    return measure_turns(
        turns, cases, StructuredResult,
        lambda turn: _measure_prompt(session, turn, prompts[turn.index], every_prompt[turn.index], cold, on_run), _record)


Run = tuple[BenchCase | None | str, bool]  # (case, None for target-only or PLAIN at full speed; constrained)


def _measure_prompt(
    session: Session, turn: PromptTurn, prompt: ConstrainedPrompt, tokens: list[int], cold: bool,
    on_run: RunCallback | None,
) -> dict[Run, Generation]:
    """Every run of the turn's prompt (`tokens`): target-only (at full speed too, given `turn.plain`) and each
    case, constrained and free, in an order that rotates with the prompt and the round."""
    sides = (None, *turn.cases, *([PLAIN] if turn.plain is not None else []))
    order: list[Run] = [(case, constrained) for constrained in (True, False) for case in sides]
    shift = (turn.index + turn.round_number) % len(order)
    runs: dict[Run, Generation] = {}
    for case, constrained in order[shift:] + order[:shift]:
        if cold:
            session.learned_lengths = LearnedLengths()
        grammar = prompt.grammar if constrained else None
        if case == PLAIN:
            runs[case, constrained] = generate(session, tokens, turn.plain, speculative=False, grammar=grammar)
        else:
            runs[case, constrained] = generate(session, tokens, case_settings(turn.base, case),
                                               speculative=case is not None, grammar=grammar)
        if on_run is not None:
            on_run(case, constrained, turn.index, runs[case, constrained])
    return runs


def _record(result: StructuredResult, runs: dict[Run, Generation], case: BenchCase) -> None:
    """Add one prompt's runs for `case` to `result`."""
    for constrained, side in ((True, result.constrained), (False, result.free)):
        speculative, baseline = runs[case, constrained], runs[None, constrained]
        side.speculative.add(speculative.stats)
        side.baseline.add(baseline.stats)
        side.identical_prompts += speculative.tokens == baseline.tokens
        side.runs += 1
        if (PLAIN, constrained) in runs:
            side.plain = side.plain or SpecStats()
            side.plain.add(runs[PLAIN, constrained].stats)
            side.plain_identical_prompts += runs[PLAIN, constrained].tokens == baseline.tokens
    result.complete_speculative += runs[case, True].matches_format
    result.complete_baseline += runs[None, True].matches_format


def _ms_per_token(seconds: float, stats: SpecStats) -> float | None:
    return 1000 * seconds / stats.tokens_generated if stats.tokens_generated else None
