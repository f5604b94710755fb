#!/usr/bin/env python3
"""Where the time of one target pass goes, on the demo pair (or any profile): llama.cpp or Python.

    python scripts/profile_passes.py                     # demo pair, 4 prompts x 96 tokens, T=0 and T=0.8
    python scripts/profile_passes.py -p mine --tokens 128

For speculative and target-only generation it reports, per target pass, the
milliseconds spent inside `llama_decode` (target and draft apart), copying
logits rows out of llama.cpp, in sampling and verification (`accept`), in the
drafter's own Python (sampling the draft, the length controller), and in the
rest of the loop. The timers wrap the functions in place; nothing else changes.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections import defaultdict
from contextlib import contextmanager

from localspec.app.bench import BENCH_PROMPTS
from localspec.app.plan import resolve
from localspec.app.session import open_session
from localspec.engine import generation as generation_module
from localspec.runtime.model import Model

TOTALS: dict[str, float] = defaultdict(float)


def timed(name: str, function):
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            TOTALS[name] += time.perf_counter() - started

    return wrapper


@contextmanager
def instrumented(target: Model):
    """Time llama_decode per model, logits copies, and acceptance."""
    original_decode, original_row, original_accept = Model._decode, Model._logits_row, generation_module.accept

    def decode(self, tokens, rows):
        started = time.perf_counter()
        try:
            return original_decode(self, tokens, rows)
        finally:
            TOTALS["decode (target)" if self is target else "decode (draft)"] += time.perf_counter() - started

    Model._decode = decode
    Model._logits_row = timed("logits copies", original_row)
    generation_module.accept = timed("sampling and verification", original_accept)
    try:
        yield
    finally:
        Model._decode, Model._logits_row, generation_module.accept = original_decode, original_row, original_accept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-p", "--profile", default=None)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=96)
    args = parser.parse_args()
    plan = resolve(args.profile, {"sampling.max_tokens": args.tokens, "sampling.seed": 1})
    with open_session(plan) as session:
        for temperature in (0.0, 0.8):
            for speculative in (True, False):
                TOTALS.clear()
                passes = tokens = 0
                elapsed = draft_seconds = 0.0
                sampling = dataclasses.replace(plan.generation.sampling, temperature=temperature)
                settings = dataclasses.replace(plan.generation, sampling=sampling)
                for prompt in BENCH_PROMPTS[: args.prompts]:
                    prompt_tokens = session.chat_prompt_tokens([{"role": "user", "content": prompt}])
                    # Evaluate the prompt before timing: what follows is target passes only.
                    for model in (session.target, session.draft):
                        if model is not None:
                            model.sync(prompt_tokens[:-1])
                    generation = session.generation(prompt_tokens, settings, speculative=speculative)
                    with instrumented(session.target):
                        for _ in generation:
                            pass
                        passes += generation.stats.target_passes
                    tokens += generation.stats.tokens_generated
                    elapsed += generation.stats.generation_seconds
                    draft_seconds += generation.stats.draft_seconds
                measured = sum(TOTALS.values())
                per_pass = {name: seconds / passes * 1000 for name, seconds in sorted(TOTALS.items())}
                drafter_python = max(draft_seconds - TOTALS.get("decode (draft)", 0.0), 0.0)
                rest = max(elapsed - measured - drafter_python, 0.0)
                label = "speculative" if speculative else "target-only"
                print(f"T={temperature} {label}: {tokens / elapsed:.1f} tok/s, {passes} passes, {elapsed / passes * 1000:.1f} ms a pass")
                for name, ms in per_pass.items():
                    print(f"    {name:<28} {ms:6.2f} ms/pass")
                print(f"    {'drafter Python':<28} {drafter_python / passes * 1000:6.2f} ms/pass")
                print(f"    {'rest of the loop':<28} {rest / passes * 1000:6.2f} ms/pass")


if __name__ == "__main__":
    main()
