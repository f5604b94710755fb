"""`localspec bench`: speculative vs target-only on the same prompts and seeds, side by side."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

import click

from .bench import BENCH_PROMPTS, BenchResult, run_bench
from .cli import open_session
from .generate import Generation
from .resolve import plan_run


@click.command()
@click.option("--profile", "-p", envvar="LOCALSPEC_PROFILE", help="Profile to measure (default: the configured one, else demo).")
@click.option("--target", type=click.Path(), help="Target model GGUF file.")
@click.option("--draft", type=click.Path(), help="Draft model GGUF file.")
@click.option("--temperatures", default="0,0.8", show_default=True, help="Comma-separated temperatures to measure.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=128, show_default=True, help="Tokens per prompt.")
@click.option("--prompts", "n_prompts", type=click.IntRange(1, len(BENCH_PROMPTS)), default=len(BENCH_PROMPTS), show_default=True,
              help="How many of the built-in prompts (chat, code, lists, prose).")
@click.option("--draft-max", type=click.IntRange(1, 256), help="Most draft tokens per target pass.")
@click.option("--p-min", type=click.FloatRange(0, 1), help="Stop drafting below this draft confidence.")
@click.option("--seed", type=click.IntRange(min=0), default=1234, show_default=True)
@click.option("--threads", type=click.IntRange(min=1), help="CPU threads (default: all cores).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (per-temperature results) on stdout.")
def bench(profile: str | None, temperatures: str, n_prompts: int, seed: int, as_json: bool, **options: Any) -> None:
    """Measure what drafting buys on this machine: tokens/s with and without it, in one process.

    \b
    Examples:
      localspec bench
      localspec bench -p qwen2.5-7b --temperatures 0 --draft-max 12
    """
    try:
        temps = [float(t) for t in temperatures.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected numbers separated by commas, got {temperatures!r}", param_hint="--temperatures") from None
    flags = {
        "target.path": options["target"],
        "draft.path": options["draft"],
        "sampling.max_tokens": options["max_tokens"],
        "speculative.draft_max": options["draft_max"],
        "speculative.p_min": options["p_min"],
        "target.n_threads": options["threads"],
        "draft.n_threads": options["threads"],
    }
    plan = plan_run(profile, flags)
    if not plan.has_draft:
        raise click.UsageError("this profile has no draft model: nothing to compare")
    session, target, draft = open_session(plan, verbose=False)
    out = sys.stderr if as_json else sys.stdout
    results: list[BenchResult] = []
    with session:
        click.echo(f"target {target.path}\ndraft  {draft.path}", err=True)
        for temperature in temps:
            profile_settings = plan.generation_settings()
            settings = replace(
                profile_settings, sampling=replace(profile_settings.sampling, temperature=temperature), stop=(), seed=seed
            )
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
        click.echo(json.dumps({"target": str(target.path), "draft": str(draft.path), "results": [r.to_dict() for r in results]}, indent=2))


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
