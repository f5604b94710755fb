#!/usr/bin/env python3
"""Speculative vs target-only speed on the demo pair (or --target/--draft), side by side.

    python scripts/bench_speculative.py                      # demo pair, T=0 and T=0.8
    python scripts/bench_speculative.py --profile qwen2.5-7b
    python scripts/bench_speculative.py --draft-max 6 --json

Prints tokens/s for both, the speedup, acceptance rate and mean accepted length
per target pass, for each temperature. Same prompts and seeds on both sides.
"""

from __future__ import annotations

import argparse
import json
import sys

from localspec.bench import BENCH_PROMPTS, run_bench
from localspec.generate import GenerationSettings, SpeculativeParams
from localspec.resolve import plan_run, resolve_models
from localspec.sampling import SamplingParams
from localspec.session import Session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", help="profile to benchmark (default: the configured one, else demo)")
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--temperatures", default="0,0.8", help="comma-separated (default 0,0.8)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--draft-max", type=int, default=SpeculativeParams().draft_max)
    parser.add_argument("--p-min", type=float, default=0.0)
    parser.add_argument("--prompts", type=int, default=len(BENCH_PROMPTS), help="how many of the built-in prompts")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = parser.parse_args()

    flags = {"target.path": args.target, "draft.path": args.draft, "target.n_threads": args.threads, "draft.n_threads": args.threads}
    target, draft = resolve_models(plan_run(args.profile, flags))
    if draft is None:
        parser.error("a draft model is needed (--draft)")
    results = []
    with Session(target, draft) as session:
        print(f"target {target.path}\ndraft  {draft.path}", file=sys.stderr)
        for temperature in (float(t) for t in args.temperatures.split(",")):
            settings = GenerationSettings(
                sampling=SamplingParams(temperature=temperature),
                speculative=SpeculativeParams(draft_max=args.draft_max, p_min=args.p_min),
                max_tokens=args.max_tokens,
                seed=args.seed,
            )
            result = run_bench(
                session,
                settings,
                BENCH_PROMPTS[: args.prompts],
                on_prompt=lambda i, spec, base, temperature=temperature: print(
                    f"  T={temperature} prompt {i + 1}: spec {spec.stats.tokens_per_second:6.1f} tok/s,"
                    f" base {base.stats.tokens_per_second:6.1f} tok/s, acceptance {spec.stats.acceptance_rate or 0:.1%}",
                    file=sys.stderr,
                ),
            )
            results.append(result)
            print(
                f"T={temperature:<4} speculative {result.speculative.tokens_per_second:6.1f} tok/s"
                f" | target-only {result.baseline.tokens_per_second:6.1f} tok/s"
                f" | speedup {result.speedup:.2f}x | acceptance {result.speculative.acceptance_rate or 0:.1%}"
                f" | mean accepted {result.speculative.mean_accepted_length or 0:.2f}/pass"
                f" | identical {result.identical_prompts}/{result.n_prompts}",
                file=sys.stderr if args.json else sys.stdout,
            )
    if args.json:
        print(json.dumps({"draft_max": args.draft_max, "results": [r.to_dict() for r in results]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
