"""`localspec bench`: speculative vs target-only on the same prompts and seeds, side by side."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import click

from ..app.bench import BENCH_PROMPTS, BenchResult, run_bench
from ..engine.generation import Generation
from .loading import load_session, resolve_plan
from .options import PROFILE_OPTION, VERBOSE_OPTION, setting_flags, setting_options

BENCH_MAX_TOKENS = 128
BENCH_SEED = 1234


@click.command()
@PROFILE_OPTION
@setting_options(exclude=("sampling.temperature",))
@click.option("--temperatures", default="0,0.8", show_default=True, help="Comma-separated temperatures to measure.")
@click.option("--prompts", "n_prompts", type=click.IntRange(1, len(BENCH_PROMPTS)), default=len(BENCH_PROMPTS), show_default=True,
              help="How many of the built-in prompts (chat, code, lists, prose).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (per-temperature results) on stdout.")
@VERBOSE_OPTION
def bench(profile: str | None, temperatures: str, n_prompts: int, as_json: bool, verbose: bool, **options: Any) -> None:
    """Measure what drafting buys on this machine: tokens/s with and without it, in one process.

    Takes every setting `run` takes; unless given, --max-tokens is 128 and --seed 1234 here.

    \b
    Examples:
      localspec bench
      localspec bench -p qwen2.5-7b --temperatures 0 --draft-max 12
    """
    try:
        temps = [float(t) for t in temperatures.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected numbers separated by commas, got {temperatures!r}", param_hint="--temperatures") from None
    if any(t < 0 for t in temps):
        raise click.BadParameter("temperatures must be >= 0", param_hint="--temperatures")
    flags = setting_flags(options)
    for key, bench_default in (("sampling.max_tokens", BENCH_MAX_TOKENS), ("sampling.seed", BENCH_SEED)):
        if flags.get(key) is None:
            flags[key] = bench_default
    plan = resolve_plan(profile, flags, verbose=verbose)
    if plan.draft is None:
        raise click.UsageError("this profile has no draft model: nothing to compare")
    out = sys.stderr if as_json else sys.stdout
    results: list[BenchResult] = []
    with load_session(plan, verbose=verbose) as session:
        click.echo(f"target {plan.target.path}\ndraft  {plan.draft.path}", err=True)
        for temperature in temps:
            sampling = dataclasses.replace(plan.generation.sampling, temperature=temperature)
            settings = dataclasses.replace(plan.generation, sampling=sampling, stop=())
            result = run_bench(session, settings, BENCH_PROMPTS[:n_prompts], on_prompt=_progress(temperature))
            results.append(result)
            click.echo(_summary(result), file=out)
            if result.speedup < 1.0:
                click.echo(
                    f"warning: at T={temperature} drafting is slower than the target alone on this pair;"
                    " try a smaller --draft-max, or run without a draft",
                    err=True,
                )
    if as_json:
        click.echo(json.dumps({"target": str(plan.target.path), "draft": str(plan.draft.path), "results": [r.to_dict() for r in results]}, indent=2))


def _progress(temperature: float):
    def report(index: int, speculative: Generation, baseline: Generation) -> None:
        click.echo(
            f"  T={temperature} prompt {index + 1}: speculative {speculative.stats.tokens_per_second or 0:6.1f} tok/s,"
            f" target-only {baseline.stats.tokens_per_second or 0:6.1f} tok/s,"
            f" acceptance {speculative.stats.acceptance_rate or 0:.1%}",
            err=True,
        )

    return report


def _summary(result: BenchResult) -> str:
    spec = result.speculative
    return (
        f"T={result.temperature:<4} speculative {spec.tokens_per_second or 0:6.1f} tok/s"
        f" | target-only {result.baseline.tokens_per_second or 0:6.1f} tok/s"
        f" | speedup {result.speedup:.2f}x | acceptance {spec.acceptance_rate or 0:.1%}"
        f" | mean accepted {spec.mean_accepted_length or 0:.2f}/pass"
        f" | identical {result.identical_prompts}/{result.n_prompts}"
    )
