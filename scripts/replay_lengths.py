#!/usr/bin/env python3
"""Draft-length policies compared without timing noise: fixed lengths and the adaptive controller, replayed.

    python scripts/replay_lengths.py                                   # demo pair, 6 built-in prompts, T=0 and 0.8
    python scripts/replay_lengths.py --prompts-file my.txt --fixed 4,8,12 --temperatures 0.8

Under coupled verification a draft token is kept exactly when it equals the target's
own draw at its position, and the draft model drafts along what was kept. So which
drafts any policy would keep is a function of the target-only output alone. For each
prompt this script records that output and, reading it in one batch, the draft
model's draw at every position of it (same seed, same noise) and its certainty of it.
It then measures this machine's costs once (a target pass of n tokens for every n
the policies use; a draft step; a pass's first draft step, which evaluates two
tokens), and replays every policy on the recorded paths against those costs: each
fixed length, and `AdaptiveLength` (the `model` side of the defaults) warm (its
second round over the prompts) and from a new start on every prompt: from its
priors alone; with the costs known (as in a new temperature band on a machine
it has run on); and, with two temperatures or more, also with the acceptance
borrowed from the warm controller of the nearest temperature in another band,
through `LearnedLengths` as it starts a new band.

Wall-clock benchmarks on a shared machine move by more than the few percent that
separate these policies; a replay does not. What it leaves out is what its cost
model leaves out (Python's share of a pass, a few percent; a pass that drafts
nothing is charged no catch-up for the draft model; a draft is not cut at an
end-of-generation token), and a quantized draft's batched reading may round a
draw differently from its one-token steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from localspec.app.bench import BENCH_PROMPTS, read_prompts
from localspec.app.plan import resolve
from localspec.app.session import Session, open_session
from localspec.engine.draft_length import (
    AdaptiveLength,
    LearnedLengths,
    temperature_band,
)
from localspec.engine.sampling import Confidence, CoupledSampler, coupled_lead, next_token_probs
from localspec.errors import InputError, LocalspecError
from localspec.settings import ADAPTIVE_DRAFT_LIMIT, GenerationSettings

TIMING_REPEATS = 7  # median of this many timings per cost


@dataclass
class RecordedPath:
    """A target-only output and, at each of its positions, the draft model's draw and its certainty of it
    (`ModelDrafter`'s: its lead over the runner-up, of its logits where greedy, of its noisy scores where sampled)."""

    output: list[int]
    drafted: list[int]
    confidence: list[float]

    def kept_from(self, position: int, k: int) -> int:
        """How many of k drafts from `position` the target keeps (the run of draws equal to the output)."""
        kept = 0
        while kept < k and self.drafted[position + kept] == self.output[position + kept]:
            kept += 1
        return kept


@dataclass
class Costs:
    """Seconds: a target pass by its number of tokens, a draft step, and a pass's first draft step."""

    verify: dict[int, float]
    draft_step: float
    first_step: float

    def pass_cost(self, k: int) -> float:
        drafting = self.first_step + (k - 1) * self.draft_step if k else 0.0
        return drafting + self.verify[k + 1]


def record_path(session: Session, prompt: list[int], settings: GenerationSettings) -> RecordedPath:
    generation = session.generation(prompt, settings, speculative=False)
    for _ in generation:
        pass
    output = list(generation.tokens)
    draft = session.draft
    draft.sync(prompt[:-1])
    rows = draft.eval([prompt[-1], *output[:-1]], logits="all") if output else np.zeros((0, 1))
    sampler = CoupledSampler(settings.seed)
    drafted, confidence = [], []
    for position, row in enumerate(rows):
        if settings.sampling.greedy:
            token = int(np.argmax(row))
            certainty = Confidence(row).certainty(token, greedy=True)
        else:  # (the lead of its noisy score, as `ModelDrafter` weighs a coupled draw)
            token, margin = sampler.draw_with_margin(next_token_probs(row, settings.sampling), position)
            certainty = coupled_lead(margin, settings.sampling.temperature)
        drafted.append(token)
        confidence.append(certainty)
    return RecordedPath(output, drafted, confidence)


def _median_seconds(run: Callable[[], object]) -> float:
    timings = []
    for _ in range(TIMING_REPEATS):
        started = time.perf_counter()
        run()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def measure_costs(session: Session, context: list[int], largest: int) -> Costs:
    """This machine's costs, each the median of a few timings after `context` (sizes interleaved)."""
    target, draft = session.target, session.draft
    verify = {}
    for n in range(1, largest + 1):
        def verify_pass(n: int = n) -> None:
            target.keep(len(context))
            target.eval(context[-n:], logits=n, copy=False)
        target.sync(context)
        verify[n] = _median_seconds(verify_pass)
    draft.sync(context)

    def step(n: int) -> Callable[[], None]:
        def run() -> None:
            draft.keep(len(context))
            draft.eval(context[-n:], logits="last", copy=False)
        return run

    return Costs(verify, draft_step=_median_seconds(step(1)), first_step=_median_seconds(step(2)))


def replay_fixed(paths: list[RecordedPath], costs: Costs, k: int) -> tuple[float, int]:
    """(tokens per second, passes) drafting `k` a pass."""
    seconds, passes = 0.0, 0
    for path in paths:
        position = 0
        while position < len(path.output):
            drafts = min(k, len(path.output) - position - 1)
            seconds += costs.pass_cost(drafts)
            position += path.kept_from(position, drafts) + 1
            passes += 1
    return sum(len(path.output) for path in paths) / seconds if seconds else 0.0, passes


def replay_adaptive(paths: list[RecordedPath], costs: Costs,
                    new_start: Callable[[], AdaptiveLength] | None = None) -> tuple[float, AdaptiveLength]:
    """(tokens per second, the controller) of the adaptive controller: warm (one controller, its second round
    over the paths measured, the first one learning), or, given `new_start`, a controller it makes for every path."""
    controller = AdaptiveLength()
    for round_number in range(1 if new_start else 2):
        seconds, passes = 0.0, 0
        for path in paths:
            if new_start:
                controller = new_start()
            position = 0
            while position < len(path.output):
                room = len(path.output) - position - 1
                planned = controller.plan(room) if room else 0
                drafts = 0
                while drafts < planned:  # drafting stops early where one more token is not worth its cost
                    drafts += 1
                    controller.record_draft_step(costs.first_step if drafts == 1 else costs.draft_step, first=drafts == 1)
                    # (past a rejected draw the model drafts off the path: its certainty there is not recorded)
                    if drafts == planned or not controller.keep_going(drafts, path.confidence[position + drafts - 1]):
                        break
                kept = path.kept_from(position, drafts)
                controller.observe(drafts, kept, costs.verify[drafts + 1])
                seconds += costs.pass_cost(drafts)
                position += kept + 1
                passes += 1
    return sum(len(path.output) for path in paths) / seconds if seconds else 0.0, controller


def new_band_start(donor: AdaptiveLength, temperature: float, lender: float | None = None) -> Callable[[], AdaptiveLength]:
    """New controllers as `LearnedLengths` starts a temperature band it holds no acceptance for, on a machine
    whose costs it knows (the donor's), with the donor's acceptance saved for the band of `lender` (None: none
    saved, so the priors')."""
    def new() -> AdaptiveLength:
        saved = {} if lender is None else {f"model/coupled/{temperature_band(lender)}": donor.acceptance_counts()}
        return LearnedLengths({"model": donor.costs()}, saved).controller("model", "coupled", temperature)
    return new


def replay(args: argparse.Namespace, flags: dict[str, object], texts: Sequence[str], fixed: list[int],
           temperatures: list[float], parser: argparse.ArgumentParser) -> tuple[dict[str, Any], Costs]:
    """Record the paths and costs, and replay every policy: the report, and the costs measured."""
    plan = resolve(args.profile, flags)
    report: dict[str, Any] = {}
    with open_session(plan, remember_lengths=False, memory_owner=None) as session:
        if session.draft is None:
            parser.error("the profile has no draft model to replay")
        prompts = [session.raw_prompt_tokens(text) if args.raw else
                   session.chat_prompt_tokens([{"role": "user", "content": text}]) for text in texts]
        costs = measure_costs(session, prompts[0], ADAPTIVE_DRAFT_LIMIT + 1)
        report["costs_ms"] = {"draft_step": costs.draft_step * 1000, "first_draft_step": costs.first_step * 1000,
                              "verify": {n: seconds * 1000 for n, seconds in costs.verify.items()}}
        paths = {}
        for temperature in temperatures:
            sampling = dataclasses.replace(plan.generation.sampling, temperature=temperature)
            settings = dataclasses.replace(plan.generation, sampling=sampling)
            paths[temperature] = [record_path(session, prompt, settings) for prompt in prompts]
    warm = {temperature: replay_adaptive(paths[temperature], costs) for temperature in temperatures}
    for temperature in temperatures:
        ours = paths[temperature]
        agreement = sum(a == b for p in ours for a, b in zip(p.output, p.drafted)) / max(1, sum(len(p.output) for p in ours))
        rows = {f"fixed {k}": replay_fixed(ours, costs, k)[0] for k in fixed}
        rows["adaptive (warm)"] = warm[temperature][0]
        rows["adaptive (priors)"] = replay_adaptive(ours, costs, AdaptiveLength)[0]
        rows["adaptive (costs known)"] = replay_adaptive(ours, costs, new_band_start(warm[temperature][1], temperature))[0]
        lenders = sorted((t for t in temperatures if temperature_band(t) != temperature_band(temperature)),
                         key=lambda t: abs(t - temperature))
        if lenders:
            rows["adaptive (borrowed)"] = replay_adaptive(
                ours, costs, new_band_start(warm[lenders[0]][1], temperature, lender=lenders[0]))[0]
        best = max(rate for name, rate in rows.items() if name.startswith("fixed"))
        report[f"T={temperature:g}"] = {"draft_agrees": agreement, "policies": {
            name: {"tokens_per_second": rate, "of_best_fixed": rate / best if best else 0.0} for name, rate in rows.items()}}
    return report, costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-p", "--profile", default=None)
    parser.add_argument("--target", default=None, help="Target GGUF (instead of a profile's).")
    parser.add_argument("--draft", default=None, help="Draft GGUF (instead of a profile's).")
    parser.add_argument("--prompts", type=int, default=6, help="How many prompts (default 6).")
    parser.add_argument("--prompts-file", default=None, help="Prompts, one a line (\\n for a line break).")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--temperatures", default="0,0.8")
    parser.add_argument("--fixed", default="4,6,8,10,12,16", help="Fixed draft lengths to replay (default 4,6,8,10,12,16).")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--raw", action="store_true", help="Plain completion (for models without a chat template).")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args()
    try:
        fixed = [int(k) for k in args.fixed.split(",")]
        temperatures = [float(t) for t in args.temperatures.split(",")]
        texts = BENCH_PROMPTS if args.prompts_file is None else read_prompts(Path(args.prompts_file))
    except (ValueError, InputError) as exc:
        parser.error(str(exc))
    if (not all(1 <= k <= ADAPTIVE_DRAFT_LIMIT for k in fixed) or not all(0 <= t < math.inf for t in temperatures)
            or args.tokens < 2 or args.prompts < 1):
        parser.error(f"fixed lengths must be 1 to {ADAPTIVE_DRAFT_LIMIT}, temperatures finite and at least 0, "
                     "--tokens at least 2, --prompts at least 1")
    flags = {"sampling.max_tokens": args.tokens, "sampling.seed": args.seed, "target.path": args.target,
             "draft.path": args.draft, "speculative.strategy": "model", "speculative.verify": "coupled",
             "speculative.memory": False}
    try:
        report, costs = replay(args, flags, texts[: args.prompts], fixed, temperatures, parser)
    except LocalspecError as exc:  # a bad profile or model file: one line
        raise SystemExit(f"replay_lengths: {exc}") from None
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"costs: draft step {costs.draft_step * 1000:.1f} ms, first draft step {costs.first_step * 1000:.1f} ms, "
          f"target pass of 1/9/17 tokens {costs.verify[1] * 1000:.1f}/{costs.verify[9] * 1000:.1f}/{costs.verify[17] * 1000:.1f} ms")
    for key, value in report.items():
        if key.startswith("T="):
            print(f"\n{key} (draft's draw equals the target's at {value['draft_agrees']:.1%} of positions)")
            for name, row in value["policies"].items():
                print(f"  {name:<22} {row['tokens_per_second']:6.1f} tok/s  {row['of_best_fixed']:.3f} of the best fixed length")


if __name__ == "__main__":
    main()
