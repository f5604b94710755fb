#!/usr/bin/env python3
"""Long prompts, short answers: one-shot `localspec run` speculative vs target-only, wall time as a user sees it.

    python scripts/bench_long_prompts.py                           # the demo pair, T=0
    python scripts/bench_long_prompts.py --temperatures 0,0.8 --max-tokens 64,256
    python scripts/bench_long_prompts.py --before ../old-checkout   # also the same runs on another checkout
    python scripts/bench_long_prompts.py --before ../old --run-args "--draft-max 8 --no-prompt-cache"

Each prompt is an excerpt of this README (about 1300 tokens) with a one-sentence
question, or, for comparison, a short ordinary prompt. Every contender is a fresh
`localspec run --json` process (as a user starts it), interleaved per prompt with the
order rotated, same seed, `--no-memory`. With --before, that checkout's code runs with
a cache folder of its own (copied from this one's) so neither side reads what the
other learned. Reported: wall-time ratios per prompt kind (geometric mean), and
whether every run gave the same tokens.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_llamacpp import geometric_mean  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHORT_PROMPTS = ["Why is the sky blue?", "Give three tips for learning a new language.",
                 "Write a haiku about autumn rain.", "What is the difference between a list and a tuple in Python?"]


def long_prompts(n: int) -> list[str]:
    """README excerpts of about 4,200 characters, each with a one-sentence question."""
    paragraphs = [p for p in (ROOT / "README.md").read_text(encoding="utf-8").split("\n\n")
                  if len(p) > 300 and not p.startswith(("|", "```"))]
    excerpts, chunk = [], ""
    for paragraph in paragraphs:
        chunk += paragraph + "\n\n"
        if len(chunk) > 4200:
            excerpts.append(chunk)
            chunk = ""
    picked = excerpts[3::2][:n]
    return [f"Read this text:\n\n{text}\nIn one sentence, what does the text above describe?" for text in picked]


def run(prompt: str, max_tokens: int, temperature: float, env: dict[str, str], extra: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "localspec", "run", "--no-memory", "--seed", "5", "--temperature", f"{temperature:g}",
               "--max-tokens", str(max_tokens), "--json", *extra, prompt]
    started = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"localspec run failed: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    return {"wall": wall, "tokens": report["tokens"], "drafted": report["stats"]["draft_tokens_proposed"],
            "prompt_tokens": report["stats"]["prompt_tokens"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=3, help="long prompts (default 3)")
    parser.add_argument("--max-tokens", default="64", help="budgets for the long prompts, comma-separated (default 64)")
    parser.add_argument("--temperatures", default="0")
    parser.add_argument("--before", type=Path, default=None, help="another checkout of localspec to run side by side")
    parser.add_argument("--run-args", default="", help="more flags for every `localspec run`, space-separated"
                        " (e.g. \"--draft-max 8 --no-prompt-cache\")")
    args = parser.parse_args()
    run_args = args.run_args.split()
    try:
        budgets = [int(n) for n in args.max_tokens.split(",")]
        temperatures = [float(t) for t in args.temperatures.split(",")]
    except ValueError as exc:
        parser.error(f"--max-tokens and --temperatures take comma-separated numbers ({exc})")
    if args.prompts < 1 or any(n < 1 for n in budgets) or any(not 0 <= t < math.inf for t in temperatures):
        parser.error("--prompts and budgets must be at least 1, temperatures finite and at least 0")
    if args.before is not None and not (args.before / "localspec" / "__init__.py").is_file():
        parser.error(f"--before {args.before}: not a checkout of localspec (no localspec/__init__.py)")

    contenders: dict[str, tuple[dict[str, str], list[str]]] = {
        "speculative": ({}, run_args), "target-only": ({}, [*run_args, "--no-speculative"])}
    with tempfile.TemporaryDirectory() as folder:
        if args.before is not None:
            from localspec.config.paths import cache_dir

            before_cache = Path(folder) / "cache"
            shutil.copytree(cache_dir(), before_cache / "localspec", symlinks=True,
                            ignore=shutil.ignore_patterns("*.gguf*"))
            for model in cache_dir().glob("*.gguf"):  # the demo's derived target: linked, not copied
                (before_cache / "localspec" / model.name).symlink_to(model)
            contenders["before"] = ({"PYTHONPATH": str(args.before.resolve()), "XDG_CACHE_HOME": str(before_cache)}, run_args)
        cases = [("long", p, n) for n in budgets for p in long_prompts(args.prompts)]
        cases += [("short", p, 128) for p in SHORT_PROMPTS]
        for name, (env, extra) in contenders.items():  # a warm-up each: the first process pays for cold files
            run(SHORT_PROMPTS[0], 16, 0.0, env, extra)
        for temperature in temperatures:
            ratios: dict[tuple[str, str], list[float]] = {}
            for i, (kind, prompt, max_tokens) in enumerate(cases):
                names = list(contenders)
                names = names[i % len(names):] + names[: i % len(names)]
                runs = {name: run(prompt, max_tokens, temperature, *contenders[name]) for name in names}
                same = all(r["tokens"] == runs["target-only"]["tokens"] for r in runs.values())
                for other in (n for n in contenders if n != "speculative"):
                    ratios.setdefault((kind, other), []).append(runs[other]["wall"] / runs["speculative"]["wall"])
                print(f"T={temperature:g} {kind:5} prompt {runs['speculative']['prompt_tokens']:4} tokens, "
                      f"max {max_tokens:3}: " + ", ".join(f"{n} {r['wall']:.2f} s ({r['drafted']} drafted)" for n, r in runs.items())
                      + ("" if same else "  (tokens differ)"), file=sys.stderr, flush=True)
            for (kind, other), values in sorted(ratios.items()):
                print(f"T={temperature:g} {kind} prompts: {other} wall time / speculative wall time "
                      f"{geometric_mean(values):.3f}x over {len(values)}")


if __name__ == "__main__":
    main()
