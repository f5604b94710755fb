"""Where a one-shot `localspec run` spends its time before the first token.

Times each phase the way `run` goes through it, in this process: importing
localspec's command modules (measured in a fresh interpreter, since they are
already imported here), resolving the plan (settings, model files, header and
vocabulary checks), loading the target and the draft, rendering and tokenizing
the prompt, creating the target's context (sized for the run, as `run` does;
the draft model's is created once it drafts, after the first token),
evaluating the prompt in the target, whose last row gives the first token. The
draft model reads the prompt after that; that phase is shown apart, outside the
total.
Each phase is repeated (`--repeat`, fresh models each time; the page cache is
warm after the first) and the median is shown.

    python scripts/profile_startup.py                      # the demo pair
    python scripts/profile_startup.py -p my-profile --repeat 5 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

import llama_cpp  # noqa: F401  (llama.cpp's library before numpy, as on some GPU machines it must be)

from localspec.app.plan import resolve
from localspec.app.session import open_session

PROMPT = "Write a short poem about the sea."


def import_seconds() -> float:
    """Seconds a fresh interpreter takes to import what `localspec run` imports."""
    code = "import time; t = time.perf_counter(); import localspec.cli.run; print(time.perf_counter() - t)"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def one_start(profile: str | None) -> dict[str, float]:
    """One run's phases up to its first generated token, in seconds."""
    phases: dict[str, float] = {}

    @contextmanager
    def phase(name: str) -> Iterator[None]:
        started = time.perf_counter()
        yield
        phases[name] = time.perf_counter() - started

    with phase("plan (settings, files, checks)"):
        plan = resolve(profile, {})
    with phase("load models (target and draft)"):
        session = open_session(plan, size_contexts_later=True)
    try:
        with phase("render and tokenize the prompt"):
            tokens = session.chat_prompt_tokens([*session.system_messages(), {"role": "user", "content": PROMPT}])
        with phase("create the target's context, sized for the run"):
            session.reserve_context(len(tokens) + plan.generation.budget(structured=False))
            created = session.target.n_ctx  # (here, as the prompt's evaluation would; the draft's once it drafts)
            assert created >= len(tokens)
        generation = session.generation(tokens, plan.generation.with_seed())
        with phase("prompt evaluation and the first token"):
            chunks = iter(generation)
            next(chunks)
        phases["of which prompt evaluation"] = generation.stats.prompt_seconds
        next(chunks, None)
        phases["(after the first token: the draft model reads the prompt)"] = (generation.stats.prompt_seconds
                                                                             - phases["of which prompt evaluation"])
    finally:
        with phase("close (saving what the draft length learned)"):
            session.close()
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-p", "--profile", help="the profile to load (default: the configured one, else demo)")
    parser.add_argument("--repeat", type=int, default=3, help="starts to time (default 3)")
    parser.add_argument("--json", action="store_true", help="print the medians as JSON")
    args = parser.parse_args()

    runs = [{"import localspec's run command": import_seconds(), **one_start(args.profile)} for _ in range(args.repeat)]
    medians = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
    if args.json:
        print(json.dumps(medians, indent=2))
        return
    total = sum(value for name, value in medians.items() if not name.startswith(("of which", "close", "(after")))
    for name, seconds in medians.items():
        print(f"{name:<55} {seconds * 1000:8.1f} ms")
    print(f"{'total before the first token (medians)':<55} {total * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
