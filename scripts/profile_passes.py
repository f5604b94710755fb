#!/usr/bin/env python3
"""Where the time of one target pass goes, on the demo pair (or any pair): llama.cpp or Python.

    python scripts/profile_passes.py                           # demo pair, 4 prompts x 96 tokens, T=0 and T=0.8
    python scripts/profile_passes.py -p mine --tokens 128
    python scripts/profile_passes.py --target t.gguf --draft d.gguf --raw --json
    python scripts/profile_passes.py --strategy hybrid --memory   # with the local memory, as `run` drafts
    python scripts/profile_passes.py --prompts-file mine.txt --strategy ngram   # your own prompts, one a line
    python scripts/profile_passes.py --structured --prompts 6 --tokens 400      # held to the structured set's schemas

For speculative and target-only generation it reports, per target pass, the
milliseconds spent inside `llama_decode` (target and draft apart), in the
Python around it (filling batches, fetching logits: `Model.eval` minus its
`llama_decode`), in sampling and verification (`accept`), in the drafter's own
Python (sampling the draft, the length controller), in lookups in the memory of
earlier text (`--memory`: the local memory `run` drafts from; nothing is added
to it, nor to its statistics; with how many lookups a pass made and how many
proposed a draft) and in the rest of the loop. The timers wrap the functions in
place; nothing else changes.

`--structured` asks the built-in structured set's prompts, each held to its
schema as `run --json-schema` holds it: the grammar's masks for the target's
rows are then a part of their own (the masks a model draft is drawn under
count as the drafter's Python), and the report adds the tokens each pass
emitted and the share the grammar forced.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from localspec.app.bench import BENCH_PROMPTS, read_prompts
from localspec.app.memory import LOCAL_OWNER
from localspec.app.plan import resolve
from localspec.app.session import Session, open_session
from localspec.app.structured_set import structured_set
from localspec.engine import generation as generation_module
from localspec.engine.drafters import MemoryUse
from localspec.engine.grammar import compile_format
from localspec.errors import InputError, LocalspecError
from localspec.runtime.library import llama
from localspec.runtime.model import Model

DECODE_TARGET, DECODE_DRAFT = "llama_decode (target)", "llama_decode (draft)"
AROUND_DECODE = "batches and logits (Python)"
ACCEPT = "sampling and verification"
MEMORY = "memory lookups"
MASKS = "grammar masks (target rows)"


@contextmanager
def instrumented(session: Session, totals: dict[str, float]):
    """Time llama_decode per model, Model.eval around it, and acceptance."""
    library = llama()
    original_decode, original_eval, original_accept = library.llama_decode, Model.eval, generation_module.accept
    target_context = session.target._ctx

    def llama_decode(context, batch):
        started = time.perf_counter()
        try:
            return original_decode(context, batch)
        finally:
            totals[DECODE_TARGET if context == target_context else DECODE_DRAFT] += time.perf_counter() - started

    def model_eval(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return original_eval(self, *args, **kwargs)
        finally:
            totals["eval (target)" if self is session.target else "eval (draft)"] += time.perf_counter() - started

    def accept(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original_accept(*args, **kwargs)
        finally:
            totals[ACCEPT] += time.perf_counter() - started

    library.llama_decode, Model.eval, generation_module.accept = llama_decode, model_eval, accept
    try:
        yield
    finally:
        library.llama_decode, Model.eval, generation_module.accept = original_decode, original_eval, original_accept


def profile(session: Session, prompts: list[list[int]], settings, *, speculative: bool,
            grammars: list[str | None] | None = None) -> dict:
    """Run the prompts (each held to its grammar in `grammars`, where given) and split each target pass's time into
    its parts (milliseconds per pass)."""
    totals: dict[str, float] = defaultdict(float)
    passes = tokens = forced = 0
    elapsed = draft_seconds = mask_seconds = iterating = 0.0
    memory_use = session.memory.use if session.memory is not None else None
    lookups_before = dataclasses.replace(memory_use) if memory_use is not None else None
    for prompt_tokens, grammar in zip(prompts, grammars or [None] * len(prompts)):
        # Evaluate the prompt before timing: what follows is target passes only.
        for model in (session.target, session.draft):
            if model is not None:
                model.sync(prompt_tokens[:-1])
        generation = session.generation(prompt_tokens, settings, speculative=speculative, grammar=grammar)
        with instrumented(session, totals):
            started = time.perf_counter()
            for _ in generation:
                pass
            iterating += time.perf_counter() - started  # (the prompt's last token and first draw too: decoded within)
        passes += generation.stats.target_passes
        tokens += generation.stats.tokens_generated
        elapsed += generation.stats.generation_seconds
        draft_seconds += generation.stats.draft_seconds
        mask_seconds += generation.stats.mask_seconds
        forced += generation.stats.forced_tokens
    decode = totals[DECODE_TARGET] + totals[DECODE_DRAFT]
    memory = {"lookups": 0, "hits": 0, "seconds": 0.0}
    if memory_use is not None:
        memory = {name: getattr(memory_use, name) - getattr(lookups_before, name) for name in memory}
    parts = {
        DECODE_TARGET: totals[DECODE_TARGET],
        DECODE_DRAFT: totals[DECODE_DRAFT],
        AROUND_DECODE: max(totals["eval (target)"] + totals["eval (draft)"] - decode, 0.0),
        ACCEPT: totals[ACCEPT],
        # The drafter's own Python: its time minus the draft model's evals and the memory's lookups.
        "drafter Python": max(draft_seconds - totals["eval (draft)"] - memory["seconds"], 0.0),
        MEMORY: memory["seconds"],
        **({MASKS: mask_seconds} if grammars is not None else {}),
    }
    parts["rest of the loop"] = max(elapsed - sum(parts.values()), 0.0)
    return {
        "tokens_per_second": tokens / elapsed if elapsed else 0.0,
        "target_passes": passes,
        "ms_per_pass": elapsed / passes * 1000 if passes else 0.0,
        "tokens_per_pass": tokens / passes if passes else 0.0,
        "forced_share": forced / tokens if tokens else 0.0,
        # Of all the time the timers ran in (the generation time leaves out the prompt's last token, whose
        # decode they count): a share that a loaded machine cannot push below 0.
        "python_share": 1 - decode / iterating if iterating else 0.0,
        "ms_per_pass_by_part": {name: seconds / passes * 1000 for name, seconds in parts.items()} if passes else {},
        "memory_lookups_per_pass": memory["lookups"] / passes if passes else 0.0,
        "memory_ms_per_lookup": memory["seconds"] / memory["lookups"] * 1000 if memory["lookups"] else None,
        "memory_lookups_that_proposed": memory["hits"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-p", "--profile", default=None)
    parser.add_argument("--target", default=None, help="Target GGUF (instead of a profile's).")
    parser.add_argument("--draft", default=None, help="Draft GGUF (instead of a profile's).")
    parser.add_argument("--strategy", default=None, help="model, ngram or hybrid (default: the profile's).")
    parser.add_argument("--draft-max", default=None, help="A number or 'adaptive' (default: the profile's).")
    parser.add_argument("--prompts", type=int, default=4, help="How many prompts (default 4).")
    parser.add_argument("--prompts-file", default=None,
                        help="Prompts, one a line (\\n for a line break), instead of the built-in ones.")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--temperatures", default="0,0.8")
    parser.add_argument("--raw", action="store_true", help="Plain completion (for models without a chat template).")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    parser.add_argument("--structured", action="store_true",
                        help="The structured set's prompts, each held to its schema (instead of free prompts).")
    parser.add_argument("--memory", action="store_true",
                        help="Draft from the local memory of earlier text, as `run` does (nothing is added to it).")
    args = parser.parse_args()
    flags = {"sampling.max_tokens": args.tokens, "sampling.seed": 1, "target.path": args.target, "draft.path": args.draft,
             "speculative.strategy": args.strategy,
             "speculative.draft_max": args.draft_max if args.draft_max in (None, "adaptive") else int(args.draft_max)}
    if args.structured and args.prompts_file is not None:
        parser.error("--structured asks the structured set's own prompts: not with --prompts-file")
    cases = structured_set(args.prompts) if args.structured else ()
    try:
        texts = [case.prompt for case in cases] if args.structured else (
            BENCH_PROMPTS if args.prompts_file is None else read_prompts(Path(args.prompts_file)))
    except InputError as exc:
        parser.error(str(exc))
    grammars = [compile_format(case.output_format()).grammar for case in cases] if args.structured else None
    plan = resolve(args.profile, flags)
    report = []
    with open_session(plan, memory_owner=LOCAL_OWNER if args.memory else None) as session:
        prompts = [session.raw_prompt_tokens(text) if args.raw else
                   session.chat_prompt_tokens([{"role": "user", "content": text}]) for text in texts[: args.prompts]]
        try:
            for temperature in (float(t) for t in args.temperatures.split(",")):
                for speculative in (True, False):
                    sampling = dataclasses.replace(plan.generation.sampling, temperature=temperature)
                    settings = dataclasses.replace(plan.generation, sampling=sampling)
                    row = {"temperature": temperature, "mode": "speculative" if speculative else "target-only",
                           **profile(session, prompts, settings, speculative=speculative, grammars=grammars)}
                    report.append(row)
                    if not args.json:
                        print(f"T={temperature} {row['mode']}: {row['tokens_per_second']:.1f} tok/s, {row['target_passes']} passes, "
                              f"{row['ms_per_pass']:.2f} ms a pass, {row['tokens_per_pass']:.2f} tokens a pass"
                              + (f" ({row['forced_share']:.0%} forced)" if args.structured else "")
                              + f", {row['python_share']:.1%} outside llama_decode")
                        for name, ms in row["ms_per_pass_by_part"].items():
                            print(f"    {name:<30} {ms:7.3f} ms/pass")
                        if row["memory_ms_per_lookup"] is not None:
                            print(f"    memory: {row['memory_lookups_per_pass']:.2f} lookups a pass, "
                                  f"{row['memory_ms_per_lookup']:.3f} ms each, {row['memory_lookups_that_proposed']} proposed a draft")
        finally:
            if session.memory is not None:  # what profiling looked up stays out of the memory's statistics
                session.memory.use = MemoryUse()
    if args.json:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    try:
        main()
    except LocalspecError as exc:  # a model that will not load, a prompt the context cannot hold: one line
        raise SystemExit(f"profile_passes: {exc}") from None
