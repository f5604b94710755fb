"""Making a draft model from its own target: a lower-precision copy, compatible by construction.

With `--type auto` several precisions are made and measured against the target
on a few short prompts: what a draft token costs, how often the target keeps
it, and from those the speed-up each would give at its best draft length. The
fastest is kept; the others are removed. Cheap is not the same as fast: a
precision whose kernels are quick but which agrees less with the target can
lose to a slower one.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..config.atomic import atomic_path
from ..engine.drafters import ModelDrafter
from ..engine.generation import generate_text
from ..engine.stats import SpecStats
from ..errors import InputError
from ..models.discovery import describe
from ..models.quantize import quantize
from ..runtime.model import Model, check_loadable
from ..settings import GenerationSettings, ModelSettings, SamplingParams, SpeculativeParams
from .session import Session, load_draft_model

AUTO = "auto"
CANDIDATE_TYPES = ("q8_0", "q6_k", "q4_k_m", "q4_1", "q4_0")
MUCH_SMALLER = 0.6  # a draft above this fraction of the target's size leaves little to gain
MEASURE_PROMPTS = (
    "Explain how a refrigerator keeps food cold.",
    "Write a Python function that reverses the words in a sentence.",
    "List five tips for learning a new language.",
)
MEASURE_TOKENS = 48
MEASURE_TEMPERATURES = (0.0, 0.8)
_CANDIDATE_PID = re.compile(r"\.candidate-[a-z0-9_]+-(\d+)-[0-9a-f]+\.gguf(\.[^.]+\.partial)?$")  # (or its partial file)


@dataclass(frozen=True)
class MadeDraft:
    path: Path
    size_bytes: int
    target_size_bytes: int

    @property
    def size_ratio(self) -> float:
        return self.size_bytes / self.target_size_bytes

    @property
    def much_smaller(self) -> bool:
        return self.size_ratio <= MUCH_SMALLER


@dataclass(frozen=True)
class CandidateReport:
    """One measured precision."""

    type_name: str
    size_bytes: int
    cost_ratio: float  # seconds per draft token over seconds per target-only token
    acceptance: float  # draft tokens the target kept, over the measuring temperatures
    best_draft_length: int
    expected_speedup: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def default_draft_path(target: Path, type_name: str) -> Path:
    """Where `draft make` writes: next to the target, as NAME.draft-TYPE.gguf."""
    return target.with_name(f"{target.stem}.draft-{type_name}.gguf")


def make_draft(
    target: Path, type_name: str, out: Path | None = None, on_progress: Callable[[int, int], None] | None = None,
    on_start: Callable[[], None] | None = None,
) -> MadeDraft:
    """Quantize `target` to `type_name` (atomically) and report the draft's size against the target's;
    `on_start` is called once the target's file is found usable, before the writing."""
    target_info = describe(target)
    check_loadable(target)  # (a draft of a model llama.cpp refuses would be refused alike)
    if on_start is not None:
        on_start()
    out = out or default_draft_path(target, type_name)
    quantize(target, out, type_name, on_progress=on_progress)
    return MadeDraft(out, describe(out).size_bytes, target_info.size_bytes)


def make_fastest_draft(
    target: Path,
    out: Path | None = None,
    types: tuple[str, ...] = CANDIDATE_TYPES,
    overwrite: bool = False,
    on_status: Callable[[str], None] = lambda message: None,
) -> tuple[MadeDraft, list[CandidateReport]]:
    """Make a draft at each of `types`, measure each against the target, keep the fastest.

    The winner is written to `out` (default: next to the target, named after its
    type). A candidate is removed as soon as a faster one is measured, and every
    one left when something fails; ones a killed run left behind are swept.
    Without `overwrite`, an existing file where the winner could go is refused
    before anything is made.
    """
    target_info = describe(target)
    folder = (out or target).parent
    if not overwrite:
        for destination in [out] if out is not None else [default_draft_path(target, name) for name in types]:
            if destination.exists():
                raise InputError(f"{destination} exists (from an earlier draft make?): use it, or pass --force"
                                 " to measure again and replace it")
    _sweep_abandoned_candidates(folder, target)
    reports: list[CandidateReport] = []
    best: tuple[CandidateReport, Path] | None = None
    measuring: Path | None = None
    try:
        with Model(target) as target_model:
            prompts = _measuring_prompts(target_model)
            baseline = _target_speed(target_model, prompts)
            for type_name in types:
                on_status(f"making and measuring a {type_name} draft")
                measuring = folder / f".{target.stem}.candidate-{type_name}-{os.getpid()}-{secrets.token_hex(4)}.gguf"
                quantize(target, measuring, type_name)
                report = _measure(target_model, prompts, measuring, type_name, baseline)
                reports.append(report)
                if best is None or report.expected_speedup > best[0].expected_speedup:
                    slower, best = (best[1] if best is not None else None), (report, measuring)
                else:
                    slower = measuring
                measuring = None
                if slower is not None:
                    slower.unlink(missing_ok=True)
        if best is None:
            raise ValueError("no candidate types to measure")
        winner, winner_path = best
        destination = out or default_draft_path(target, winner.type_name)
        if destination.exists() and not overwrite:  # made meanwhile
            raise InputError(f"{destination} exists; pass --force to overwrite")
        with atomic_path(destination) as temp_path:
            winner_path.replace(temp_path)
    finally:
        for path in (measuring, best[1] if best is not None else None):
            if path is not None:
                path.unlink(missing_ok=True)
    return MadeDraft(destination, describe(destination).size_bytes, target_info.size_bytes), reports


def _sweep_abandoned_candidates(folder: Path, target: Path) -> None:
    """Delete candidates of `target` (written, or being written) that a run no longer running left behind
    (killed before its clean-up)."""
    stem = glob.escape(target.stem)
    for path in [*folder.glob(f".{stem}.candidate-*.gguf"), *folder.glob(f"..{stem}.candidate-*.gguf.*.partial")]:
        match = _CANDIDATE_PID.search(path.name)
        if match is not None and not _running(int(match.group(1))):
            path.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process, or no such number: leave its file
        return True
    return True


def _measuring_prompts(target: Model) -> list[list[int]]:
    """The measuring prompts as `run` would send them: with the chat template, else as plain text."""
    session = Session(target)
    try:
        return [session.chat_prompt_tokens([{"role": "user", "content": text}]) for text in MEASURE_PROMPTS]
    except InputError:  # no chat template
        return [session.raw_prompt_tokens(text) for text in MEASURE_PROMPTS]


def _settings(temperature: float) -> GenerationSettings:
    return GenerationSettings(SamplingParams(temperature=temperature), SpeculativeParams(draft_max=8),
                              max_tokens=MEASURE_TOKENS, seed=7)


def _target_speed(target: Model, prompts: list[list[int]]) -> tuple[float, float]:
    """(seconds for one target-only token, seconds per extra token in a 9-token verify batch)."""
    stats = SpecStats()
    for tokens in prompts:
        stats.add(generate_text(target, tokens, _settings(0.0)).stats)
    single = stats.seconds_per_pass or 1.0
    context = prompts[0]
    target.sync(context)
    started = time.perf_counter()
    for _ in range(3):
        target.eval(context[-9:], logits="all")
        target.keep(len(context))
    batch_of_nine = (time.perf_counter() - started) / 3
    return single, max(batch_of_nine - single, 0.0) / 8


def _measure(
    target: Model, prompts: list[list[int]], path: Path, type_name: str, baseline: tuple[float, float]
) -> CandidateReport:
    single, per_extra_token = baseline
    stats = SpecStats()
    with load_draft_model(path, ModelSettings()) as draft:  # (its CPU layout as a session would load it)
        for temperature in MEASURE_TEMPERATURES:
            sampling = SamplingParams(temperature=temperature)
            for tokens in prompts:
                generation = generate_text(target, tokens, _settings(temperature), ModelDrafter(draft, sampling))
                stats.add(generation.stats)
    # E[tokens](k): one target token, plus each draft position's share of passes that kept it and all before it.
    passes = stats.proposed_at[0] if stats.proposed_at else 0
    kept_through = [accepted / passes for accepted in stats.accepted_at] if passes else []
    draft_cost = stats.seconds_per_draft_token or single
    rates = {
        k: (1 + sum(kept_through[:k])) / ((k * draft_cost if k else 0.0) + single + per_extra_token * k)
        for k in range(0, len(kept_through) + 1)
    }
    best_k = max(rates, key=rates.get)
    acceptance = stats.acceptance_rate or 0.0
    return CandidateReport(type_name, path.stat().st_size, draft_cost / single, acceptance, best_k, rates[best_k] * single)
