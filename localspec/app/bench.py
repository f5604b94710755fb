"""Side-by-side speed measurement: speculative vs target-only, same prompts, seeds and process.

Runs alternate (speculative first on even prompts, baseline first on odd ones) so
that drift in machine speed falls on both sides equally. Speed is generated
tokens over generation time, prompt processing excluded, summed over prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..engine.generation import Generation
from ..engine.stats import SpecStats
from ..settings import GenerationSettings
from .session import Session

BENCH_PROMPTS: tuple[str, ...] = (
    "Why is the sky blue? Answer in a short paragraph.",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "List ten animals that live in the ocean, one per line.",
    "Tell a short story about a robot who learns to paint.",
    "Explain the difference between TCP and UDP.",
    "Write a SQL query that finds the five customers with the highest total order value.",
    "Give me a recipe for pancakes with ingredients and steps.",
    "Summarise the plot of Romeo and Juliet in five sentences.",
    "What are the pros and cons of remote work? Use bullet points.",
    "Write a haiku about autumn, then explain its imagery.",
)


@dataclass
class BenchResult:
    temperature: float
    speculative: SpecStats = field(default_factory=SpecStats)  # totals over all prompts
    baseline: SpecStats = field(default_factory=SpecStats)
    identical_prompts: int = 0  # prompts whose tokens matched exactly (expected at temperature 0)
    n_prompts: int = 0

    @property
    def speedup(self) -> float:
        base = self.baseline.tokens_per_second
        return (self.speculative.tokens_per_second or 0.0) / base if base else 0.0

    def to_dict(self) -> dict:
        return {
            "temperature": self.temperature,
            "prompts": self.n_prompts,
            "speculative_tokens_per_second": self.speculative.tokens_per_second,
            "baseline_tokens_per_second": self.baseline.tokens_per_second,
            "speedup": self.speedup,
            "acceptance_rate": self.speculative.acceptance_rate,
            "mean_accepted_length": self.speculative.mean_accepted_length,
            "tokens_per_target_pass": self.speculative.tokens_per_pass,
            "per_position_acceptance": self.speculative.per_position_acceptance,
            "identical_prompts": self.identical_prompts,
        }


def run_bench(
    session: Session,
    settings: GenerationSettings,
    prompts: Sequence[str] = BENCH_PROMPTS,
    on_prompt: Callable[[int, Generation, Generation], None] | None = None,
) -> BenchResult:
    """Generate every prompt with and without drafting; return the side-by-side totals."""
    result = BenchResult(settings.sampling.temperature, n_prompts=len(prompts))
    _warm_up(session, settings)
    for index, prompt in enumerate(prompts):
        tokens = session.chat_prompt_tokens([{"role": "user", "content": prompt}])
        order = (True, False) if index % 2 == 0 else (False, True)
        runs = {}
        for speculative in order:
            generation = session.generation(tokens, settings, speculative=speculative)
            for _ in generation:
                pass
            runs[speculative] = generation
        result.speculative.add(runs[True].stats)
        result.baseline.add(runs[False].stats)
        result.identical_prompts += runs[True].tokens == runs[False].tokens
        if on_prompt is not None:
            on_prompt(index, runs[True], runs[False])
    return result


def _warm_up(session: Session, settings: GenerationSettings) -> None:
    """One short generation each way, so first-call costs (page faults, allocations) are not timed."""
    tokens = session.chat_prompt_tokens([{"role": "user", "content": "Hello"}])
    warm = GenerationSettings(settings.sampling, settings.speculative, max_tokens=8, seed=0)
    for speculative in (True, False):
        for _ in session.generation(tokens, warm, speculative=speculative):
            pass
