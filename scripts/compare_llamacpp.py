#!/usr/bin/env python3
"""localspec's one-shot `run` beside llama.cpp's own speculative tools: same pair, same prompt tokens.

    python scripts/compare_llamacpp.py --llamacpp-bin LLAMA_CPP/build/bin
    python scripts/compare_llamacpp.py --llamacpp-bin LLAMA_CPP/build/bin --prompts 2 --max-tokens 16 \\
        --repeat 1 --temperatures 0                                   # a quick check that it all runs
    python scripts/compare_llamacpp.py --llamacpp-bin DIR --target t.gguf --draft d.gguf -p mine --json

LLAMA_CPP is a llama.cpp checkout built with
`cmake --build build --target llama-speculative-simple llama-lookup` (for instance the one vendored
in the llama-cpp-python sdist, so both tools run the same llama.cpp).

Every run is a fresh process, as a user would start it with a prompt it has not seen (localspec with
--no-memory and --no-prompt-cache: a memory of the earlier runs of the same prompts would draft
repeats, and the last run's saved reading of the prompt would spare the next contender its reading).
Per prompt, repeat and temperature the
contenders run one after the other, in an order that rotates from prompt to prompt:

  ordinary prompts     localspec target-only (`run --no-speculative`, and with `--no-same-text`: a lone
                       token at full speed rather than the padded pair that keeps the same text, on
                       llama.cpp builds that compute a lone token otherwise),
                       localspec's defaults (`run`), `llama-speculative-simple` at each --simple-draft-max
  copy-heavy prompts   localspec target-only (both ways), localspec's defaults, localspec `--strategy ngram`,
                       `llama-lookup` at each --lookup-draft-max

Both tools see the same tokens: the prompt is rendered with the target's chat template by
localspec's own renderer and given to llama.cpp as text (its special tokens parsed, BOS added
as the vocabulary asks), while localspec `run` renders the same message itself (not `run --raw`
on the rendered text: --raw tokenizes `<|im_start|>` as plain text); the script warns when the
two tools report different prompt lengths. llama.cpp gets localspec's default sampling
(top-k 0, top-p 1, min-p 0.05) in localspec's order, temperature before top-p and min-p
(`--samplers top_k;temperature;top_p;min_p`; llama.cpp's own order applies the temperature last,
which at T=0.8 keeps tokens down to 0.05 of the likeliest's probability where localspec keeps
them down to 0.05^0.8 = 0.09: another distribution of texts), so that both sample the same
distribution, and the same context size, threads and max tokens.

Speed is generated tokens over generation time, prompt excluded: localspec's `--json` stats
(`tokens_per_second`: the tokens of its text but the first, which, as llama-lookup's, comes from
the prompt's evaluation; an end-of-generation token ends it and is not counted), and for llama.cpp
the seconds of its "decoded N tokens in S seconds" line over the same count of its own text. Its N counts otherwise: both tools count the end-of-generation token,
llama-lookup goes on counting (and printing) what its draft held after one wherever the target
agreed, and llama-lookup draws its first token from the prompt's evaluation, timed as "encoded",
not "decoded". So the script counts the tokens of the text a tool printed before its first
end-of-generation token (the text re-tokenized with the target's vocabulary), less llama-lookup's
first; `--json` keeps N and its speed as printed (`printed_tokens`, `printed_tokens_per_second`).
The table gives, per temperature, each contender's tok/s (mean ± standard deviation over
prompts × repeats) and ratios with a paired 95% confidence interval: the geometric mean over
prompts of each prompt's ratio (itself the geometric mean over repeats; with a single prompt the
repeats are the units). Against llama.cpp the ratio uses its faster draft length (by geometric
mean), as a user would pick it.

Time to first token: for localspec the wall time from starting `localspec run` to its first
byte on stdout (a separate streamed run per prompt and repeat, at the first temperature,
--max-tokens 1); for llama-speculative-simple, which prints its timings only at the end, the
"load time" (target load and warm-up) plus the "encoded" time (the prompt in both models) it
prints. Both tools also get "outside generation": wall time minus generation time, measured on
every speed run (start-up, loading, prompt, exit).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from localspec.app.bench import read_prompts
from localspec.errors import InputError, LocalspecError
from localspec.models.demo import demo_draft_path, demo_target_path
from localspec.models.gguf import read_gguf_header
from localspec.runtime.chat_template import render_chat
from localspec.runtime.library import lone_token_computed_like_a_batch
from localspec.runtime.model import Vocabulary
from localspec.settings import ModelSettings, SamplingParams

ORDINARY_PROMPTS: tuple[str, ...] = (
    "How do vaccines train the immune system? Keep it under 150 words.",
    "Write a JavaScript function that removes duplicate values from an array and explain how it works.",
    "Name eight countries in South America and their capital cities, as a list.",
    "Write a short letter to a neighbour asking them to water my plants while I am away.",
    "What is the difference between weather and climate? Give two examples of each.",
    "Write a bash script that counts the lines in every .txt file in a folder.",
    "Describe a calm morning at a lake in one paragraph.",
    "Give five tips for learning a new language, each with one sentence of explanation.",
)

COPY_PROMPTS: tuple[str, ...] = (
    "Repeat this text exactly, word for word:\n\nThe village market opened at dawn every Saturday. Farmers"
    " arrived with carts full of apples, carrots and fresh bread, and the baker set out trays of warm rolls"
    " beside the fountain. By nine o'clock the square was crowded with families, and the smell of coffee"
    " drifted from the small cafe on the corner. When the church bell rang at noon, the stalls began to"
    " close, and the farmers counted their coins before the long drive home.",
)

SIMPLE_TOOL, LOOKUP_TOOL, LOCALSPEC_TOOL = "llama-speculative-simple", "llama-lookup", "localspec"
TARGET_ONLY, DEFAULTS, NGRAM = "localspec target-only", "localspec defaults", "localspec --strategy ngram"
LONE = "localspec target-only --no-same-text"  # a lone token at full speed: what drafting must beat
RUN_TIMEOUT_SECONDS = 900

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (the normal 1.96 beyond).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


class CompareError(Exception):
    """A problem worth one line and a non-zero exit, never a traceback."""


# ---------------------------------------------------------------------------------------------
# What runs


@dataclass(frozen=True)
class Contender:
    """One way of generating: a tool and its flags."""

    name: str  # as the table shows it
    tool: str  # LOCALSPEC_TOOL, SIMPLE_TOOL or LOOKUP_TOOL
    flags: tuple[str, ...] = ()
    draft_max: int | None = None  # llama.cpp's draft length


@dataclass(frozen=True)
class Prompt:
    index: int
    kind: str  # "ordinary" or "copy-heavy"
    text: str  # the user's message
    rendered: str  # the chat template's text, as llama.cpp gets it


@dataclass
class Measurement:
    """One run: a contender on a prompt at a temperature."""

    contender: str
    tool: str
    draft_max: int | None  # llama.cpp's draft length
    kind: str
    prompt: int
    repeat: int
    temperature: float
    tokens_per_second: float
    tokens_generated: int
    prompt_tokens: int
    generation_seconds: float
    wall_seconds: float
    extra: dict[str, float] = field(default_factory=dict)  # tool-specific figures (load time, acceptance)

    @property
    def outside_generation_seconds(self) -> float:
        """Start-up, loading, the prompt and exit: the wall time the generation itself did not take."""
        return self.wall_seconds - self.generation_seconds


@dataclass(frozen=True)
class Setup:
    """What every run shares."""

    localspec: tuple[str, ...]  # the command that starts localspec
    bin_dir: Path
    target: Path
    draft: Path
    profile: str
    explicit_models: bool  # --target/--draft given: pass them to localspec too
    threads: int
    max_tokens: int
    n_ctx: int
    llamacpp_args: tuple[str, ...]
    counter: "TextTokens | None" = None  # counts the tokens of llama.cpp's text (None: N as printed)
    # localspec's target-only pads a lone token to keep the same text (llama.cpp's default CPU build): it then
    # runs at full speed too (LONE)
    pads_lone_tokens: bool = True


def fixed_name(k: int) -> str:
    return f"localspec --draft-max {k}"


def contenders_for(kind: str, simple_draft_max: Sequence[int], lookup_draft_max: Sequence[int],
                   fixed_draft_max: Sequence[int] = (), lone: bool = True) -> list[Contender]:
    """The contenders that run on a prompt of this kind (`lone`: localspec's target-only at full speed too)."""
    contenders = [Contender(TARGET_ONLY, LOCALSPEC_TOOL, ("--no-speculative",)),
                  *([Contender(LONE, LOCALSPEC_TOOL, ("--no-speculative", "--no-same-text"))] if lone else []),
                  Contender(DEFAULTS, LOCALSPEC_TOOL)]
    if kind == "ordinary":
        contenders += [Contender(fixed_name(k), LOCALSPEC_TOOL, ("--draft-max", str(k))) for k in fixed_draft_max]
        contenders += [Contender(f"{SIMPLE_TOOL} k={k}", SIMPLE_TOOL, draft_max=k) for k in simple_draft_max]
    else:
        contenders.append(Contender(NGRAM, LOCALSPEC_TOOL, ("--strategy", "ngram")))
        contenders += [Contender(f"{LOOKUP_TOOL} k={k}", LOOKUP_TOOL, draft_max=k) for k in lookup_draft_max]
    return contenders


def localspec_command(setup: Setup, contender: Contender, prompt: Prompt, temperature: float, seed: int,
                      *, max_tokens: int, as_json: bool = True) -> list[str]:
    """`localspec run` on the user's message: it renders the chat template itself."""
    command = [*setup.localspec, "run", "-p", setup.profile]
    if setup.explicit_models:
        command += ["--target", str(setup.target), "--draft", str(setup.draft)]
    # --no-memory, --no-prompt-cache: the same prompts run again and again here. Drafting from the memory
    # of the earlier runs would measure repeats, not text seen for the first time, and the models' saved
    # reading of the prompt would spare whichever contender runs second the draft model's reading, which a
    # new prompt never spares (llama.cpp keeps neither).
    command += ["--temperature", f"{temperature:g}", "--max-tokens", str(max_tokens), "--seed", str(seed),
                "--threads", str(setup.threads), "--no-memory", "--no-prompt-cache", *contender.flags]
    if as_json:
        command.append("--json")
    return [*command, "--", prompt.text]


# localspec's order (`engine.sampling.next_token_probs`): top-k does not depend on the temperature, so it may
# come first, as in llama.cpp's own order; top-p and min-p apply to the distribution at the temperature.
LOCALSPEC_SAMPLER_ORDER = "top_k;temperature;top_p;min_p"


def llamacpp_command(setup: Setup, contender: Contender, prompt: Prompt, temperature: float, seed: int) -> list[str]:
    """A llama.cpp tool on the rendered prompt, with localspec's default sampling."""
    sampling = SamplingParams()
    command = [str(setup.bin_dir / contender.tool), "-m", str(setup.target), "-p", prompt.rendered,
               "-n", str(setup.max_tokens), "-c", str(setup.n_ctx), "-t", str(setup.threads),
               "--temp", f"{temperature:g}", "--top-k", str(sampling.top_k), "--top-p", f"{sampling.top_p:g}",
               "--min-p", f"{sampling.min_p:g}", "--samplers", LOCALSPEC_SAMPLER_ORDER, "-s", str(seed),
               "--spec-draft-n-max", str(contender.draft_max)]
    if contender.tool == SIMPLE_TOOL:
        command += ["-md", str(setup.draft), "--spec-type", "draft-simple", "--spec-draft-n-min", "0",
                    "-td", str(setup.threads)]
    return [*command, *setup.llamacpp_args]


# ---------------------------------------------------------------------------------------------
# Prompts


def rendered_prompt(target: Path, text: str) -> str:
    """The chat template's text for one user message, as llama.cpp should tokenize it.

    The same template (the target file's), renderer and BOS/EOS texts as `localspec run`. When
    the vocabulary adds BOS and the template writes it too, the written one is dropped: llama.cpp
    adds its own, as localspec does.
    """
    header = read_gguf_header(target)
    template = header.get("tokenizer.chat_template")
    if not template:
        raise CompareError(f"{target.name} has no chat template")
    tokens = header.get("tokenizer.ggml.tokens") or []

    def token_text(key: str) -> str:
        token_id = header.get(key)
        return str(tokens[token_id]) if token_id is not None and 0 <= token_id < len(tokens) else ""

    bos = token_text("tokenizer.ggml.bos_token_id")
    rendered = render_chat(template, [{"role": "user", "content": text}], bos_token=bos,
                           eos_token=token_text("tokenizer.ggml.eos_token_id"))
    if header.get("tokenizer.ggml.add_bos_token", False) and bos and rendered.startswith(bos):
        rendered = rendered[len(bos):]
    return rendered


def chosen_prompts(spec: str | None, built_in: tuple[str, ...], option: str) -> tuple[str, ...]:
    """The built-in prompts, the first N of them, or a file's (one per line, "\\n" for a newline)."""
    if spec is None:
        return built_in
    if spec.isdigit():
        count = int(spec)
        if count > len(built_in):
            raise CompareError(f"{option}: at most {len(built_in)} built-in prompts")
        return built_in[:count]
    try:
        return read_prompts(Path(spec).expanduser())
    except InputError as exc:
        raise CompareError(f"{option}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Running and reading each tool


def run_timed(command: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run a command to the end; its output and wall time (process start to exit)."""
    started = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", errors="replace",
                                timeout=RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise CompareError(f"{Path(command[0]).name} ran past {RUN_TIMEOUT_SECONDS} s") from None
    except OSError as exc:
        raise CompareError(f"cannot start {command[0]}: {exc.strerror or exc}") from None
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        last_lines = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise CompareError(f"{Path(command[0]).name} exited with {result.returncode}: {last_lines}")
    return result, elapsed


def measure_localspec(command: list[str]) -> tuple[dict[str, Any], float]:
    """A `localspec run --json`: its stats object and the wall time."""
    result, wall = run_timed(command)
    try:
        return json.loads(result.stdout)["stats"], wall
    except (ValueError, KeyError):
        raise CompareError(f"localspec printed no JSON stats: {result.stdout[:200]!r}") from None


_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
LLAMACPP_PATTERNS = {
    "decoded": re.compile(rf"decoded\s+(\d+) tokens in\s+{_NUMBER} seconds, speed:\s+{_NUMBER} t/s"),
    "encoded": re.compile(rf"encoded\s+(\d+) tokens in\s+{_NUMBER} seconds"),
    "load_ms": re.compile(rf"perf_print:\s+load time =\s+{_NUMBER} ms"),  # the target's load and warm-up
    "n_drafted": re.compile(r"n_drafted\s+=\s+(\d+)"),
    "n_accept": re.compile(r"n_accept\s+=\s+(\d+)"),
}


@dataclass(frozen=True)
class LlamaCppReport:
    """What llama-speculative-simple and llama-lookup print about a run."""

    tokens_generated: int
    generation_seconds: float
    tokens_per_second: float
    prompt_tokens: int
    prompt_seconds: float
    load_seconds: float | None
    drafted: int | None
    accepted: int | None


class TextTokens:
    """Counts the tokens of the text a llama.cpp example printed, up to its first end-of-generation token.

    The text is tokenized again (special tokens' text as those tokens), which gives the tokens the
    model generated wherever it generated the usual tokenization of its text (at T=0 on the demo pair
    the count equalled `localspec run`'s on every prompt tried). The text of an end-of-generation
    token, written out as plain text, would end the count early.
    """

    TRAILER = "\n\n\n\n"  # what both examples print after their text where no end token ends it

    def __init__(self, target: Path) -> None:
        tokens = read_gguf_header(target).get("tokenizer.ggml.tokens") or []
        self.vocabulary = Vocabulary(target)
        self.end_texts = tuple(tokens[i] for i in self.vocabulary.end_of_generation_ids() if i < len(tokens) and tokens[i])

    def count(self, stdout: str, rendered_prompt: str) -> int | None:
        """Tokens of the generated text in `stdout` (the prompt, echoed, then the text); None where the output
        does not have that shape."""
        at = stdout.find(rendered_prompt)
        if at < 0:
            return None
        text = stdout[at + len(rendered_prompt):]
        ends = [text.find(end) for end in self.end_texts if end in text]
        if ends:
            text = text[: min(ends)]
        elif text.endswith(self.TRAILER):
            text = text[: -len(self.TRAILER)]
        else:
            return None
        return len(self.vocabulary.tokenize(text, add_special=False, parse_special=True)) if text else 0


def parse_llamacpp_output(output: str) -> LlamaCppReport:
    """Read the timing lines of a llama.cpp example's output (stdout and stderr together)."""
    found = {name: pattern.search(output) for name, pattern in LLAMACPP_PATTERNS.items()}
    decoded, encoded = found["decoded"], found["encoded"]
    if decoded is None or encoded is None:
        raise CompareError("llama.cpp printed no 'decoded N tokens in S seconds' line (a different version?)")

    def optional(name: str) -> float | None:
        match = found[name]
        return float(match.group(1)) if match else None

    load_ms, drafted, accepted = optional("load_ms"), optional("n_drafted"), optional("n_accept")
    return LlamaCppReport(
        tokens_generated=int(decoded.group(1)),
        generation_seconds=float(decoded.group(2)),
        tokens_per_second=float(decoded.group(3)),
        prompt_tokens=int(encoded.group(1)),
        prompt_seconds=float(encoded.group(2)),
        load_seconds=load_ms / 1000 if load_ms is not None else None,
        drafted=int(drafted) if drafted is not None else None,
        accepted=int(accepted) if accepted is not None else None,
    )


def measure(setup: Setup, contender: Contender, prompt: Prompt, temperature: float, repeat: int) -> Measurement:
    """Run one contender once and read its speed."""
    seed = 1 + repeat
    common = {"contender": contender.name, "tool": contender.tool, "draft_max": contender.draft_max, "kind": prompt.kind, "prompt": prompt.index,
              "repeat": repeat, "temperature": temperature}
    if contender.tool == LOCALSPEC_TOOL:
        command = localspec_command(setup, contender, prompt, temperature, seed, max_tokens=setup.max_tokens)
        stats, wall = measure_localspec(command)
        extra = {"prompt_seconds": stats["prompt_seconds"]}
        if stats.get("acceptance_rate") is not None:
            extra["acceptance_rate"] = stats["acceptance_rate"]
        return Measurement(**common, tokens_per_second=stats["tokens_per_second"] or 0.0,
                           tokens_generated=stats["tokens_generated"], prompt_tokens=stats["prompt_tokens"],
                           generation_seconds=stats["generation_seconds"], wall_seconds=wall, extra=extra)
    result, wall = run_timed(llamacpp_command(setup, contender, prompt, temperature, seed))
    report = parse_llamacpp_output(result.stdout + "\n" + result.stderr)
    extra = {"prompt_seconds": report.prompt_seconds}
    if report.load_seconds is not None:
        extra["load_seconds"] = report.load_seconds
    if report.drafted:
        extra["acceptance_rate"] = (report.accepted or 0) / report.drafted
    tokens, speed = report.tokens_generated, report.tokens_per_second
    counted = setup.counter.count(result.stdout, prompt.rendered) if setup.counter is not None else None
    if counted is not None:
        extra["printed_tokens"], extra["printed_tokens_per_second"] = tokens, speed
        # llama-lookup's first token came from the prompt's evaluation: its decoding is not in the decode time.
        tokens = max(counted - (contender.tool == LOOKUP_TOOL), 0)
        speed = tokens / report.generation_seconds if report.generation_seconds > 0 else 0.0
    elif setup.counter is not None:
        extra["uncounted"] = 1.0  # its output had another shape: N as printed
    return Measurement(**common, tokens_per_second=speed, tokens_generated=tokens, prompt_tokens=report.prompt_tokens,
                       generation_seconds=report.generation_seconds, wall_seconds=wall, extra=extra)


def seconds_to_first_byte(command: list[str]) -> float:
    """Wall time from starting a streaming command to the first byte on its stdout (or its exit)."""
    started = time.perf_counter()
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise CompareError(f"cannot start {command[0]}: {exc.strerror or exc}") from None
    with process:
        assert process.stdout is not None
        process.stdout.read(1)
        elapsed = time.perf_counter() - started
        _, stderr = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    if process.returncode != 0:
        raise CompareError(f"localspec exited with {process.returncode}: {stderr.decode(errors='replace').strip()[-200:]}")
    return elapsed


# ---------------------------------------------------------------------------------------------
# Statistics


def rotated(items: Sequence[Contender], by: int) -> list[Contender]:
    """The items in an order that starts one further along for each prompt."""
    start = by % len(items)
    return [*items[start:], *items[:start]]


def mean_and_spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard deviation (0 for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


@dataclass(frozen=True)
class Ratio:
    """A paired ratio: geometric mean and 95% confidence interval (None when there is one unit)."""

    geometric_mean: float
    low: float | None
    high: float | None
    units: int


def paired_ratio(numerator: dict[tuple[int, int], float], denominator: dict[tuple[int, int], float]) -> Ratio | None:
    """numerator / denominator over runs keyed (prompt, repeat), paired per key.

    Each prompt's log-ratio is the mean over its repeats; the interval is Student's t over prompts,
    or over repeats when there is one prompt.
    """
    keys = sorted(key for key in numerator.keys() & denominator.keys() if numerator[key] > 0 and denominator[key] > 0)
    if not keys:
        return None
    by_prompt: dict[int, list[float]] = defaultdict(list)
    for key in keys:
        by_prompt[key[0]].append(math.log(numerator[key] / denominator[key]))
    units = ([statistics.fmean(logs) for logs in by_prompt.values()] if len(by_prompt) > 1
             else next(iter(by_prompt.values())))
    center = statistics.fmean(units)
    if len(units) < 2:
        return Ratio(math.exp(center), None, None, len(units))
    half_width = t_quantile(len(units) - 1) * statistics.stdev(units) / math.sqrt(len(units))
    return Ratio(math.exp(center), math.exp(center - half_width), math.exp(center + half_width), len(units))


def t_quantile(degrees_of_freedom: int) -> float:
    return T_975[degrees_of_freedom - 1] if degrees_of_freedom <= len(T_975) else 1.96


def geometric_mean(values: Sequence[float]) -> float:
    positive = [value for value in values if value > 0]
    return math.exp(statistics.fmean(math.log(value) for value in positive)) if positive else 0.0


# ---------------------------------------------------------------------------------------------
# The report


def speeds(measurements: Sequence[Measurement], contender: str) -> dict[tuple[int, int], float]:
    return {(m.prompt, m.repeat): m.tokens_per_second for m in measurements if m.contender == contender}


def fastest(measurements: Sequence[Measurement], tool: str) -> str | None:
    """The name of the tool's contender with the highest geometric-mean speed."""
    names = sorted({m.contender for m in measurements if m.tool == tool})
    return max(names, key=lambda name: geometric_mean(list(speeds(measurements, name).values())), default=None)


def ratio_rows(measurements: Sequence[Measurement], kind: str) -> list[tuple[str, Ratio | None]]:
    """The comparisons that matter for a kind of prompt: speed-up over target-only and over llama.cpp."""
    baseline = TARGET_ONLY
    fixed = sorted({m.contender for m in measurements if m.contender.startswith("localspec --draft-max")})
    ours = [DEFAULTS] + ([NGRAM] if kind != "ordinary" else fixed)
    theirs = fastest(measurements, SIMPLE_TOOL if kind == "ordinary" else LOOKUP_TOOL)
    rows = [(f"{name} / {base}", paired_ratio(speeds(measurements, name), speeds(measurements, base)))
            for base in (baseline, LONE) if speeds(measurements, base) for name in ours]
    if theirs is not None:
        rows += [(f"{name} / {theirs} (its faster k)", paired_ratio(speeds(measurements, name), speeds(measurements, theirs)))
                 for name in ours]
    return rows


def display_rank(measurement: Measurement) -> tuple[int, int]:
    """Table order: localspec's target-only, defaults, ngram, then llama.cpp by draft length."""
    if measurement.tool == LOCALSPEC_TOOL:
        named = [TARGET_ONLY, LONE, DEFAULTS, NGRAM]
        return 0, named.index(measurement.contender) if measurement.contender in named else len(named)
    return 1, measurement.draft_max or 0


def summary(measurements: Sequence[Measurement], temperatures: Sequence[float]) -> list[dict[str, Any]]:
    """Per temperature and kind of prompt: each contender's speed and the ratios."""
    sections = []
    for temperature in temperatures:
        for kind in ("ordinary", "copy-heavy"):
            rows = [m for m in measurements if m.temperature == temperature and m.kind == kind]
            if not rows:
                continue
            contenders = sorted({m.contender: display_rank(m) for m in rows}.items(), key=lambda item: item[1])
            speed_rows = []
            for name, _ in contenders:
                values = [m.tokens_per_second for m in rows if m.contender == name]
                acceptance = [m.extra["acceptance_rate"] for m in rows if m.contender == name and "acceptance_rate" in m.extra]
                mean, spread = mean_and_spread(values)
                speed_rows.append({"contender": name, "tokens_per_second": mean, "spread": spread, "runs": len(values),
                                   "acceptance_rate": statistics.fmean(acceptance) if acceptance else None})
            ratios = [{"ratio": label, **(asdict(ratio) if ratio else {"geometric_mean": None})}
                      for label, ratio in ratio_rows(rows, kind)]
            sections.append({"temperature": temperature, "kind": kind, "prompts": len({m.prompt for m in rows}),
                             "speeds": speed_rows, "ratios": ratios})
    return sections


def time_to_first_token(measurements: Sequence[Measurement], first_bytes: Sequence[float],
                        temperature: float) -> list[dict[str, Any]]:
    """Seconds before the first token, one-shot, at the first temperature (ordinary prompts for the speed runs)."""
    ordinary = [m for m in measurements if m.temperature == temperature and m.kind == "ordinary"]
    ours = [m for m in ordinary if m.contender == DEFAULTS]
    theirs = [m for m in ordinary if m.tool == SIMPLE_TOOL]
    candidates = [
        ("localspec run (defaults): process start to first stdout byte", list(first_bytes)),
        (f"{SIMPLE_TOOL}: its printed load time + prompt ('encoded') time",
         [m.extra["load_seconds"] + m.extra["prompt_seconds"] for m in theirs if "load_seconds" in m.extra]),
        ("localspec run (defaults): wall time minus generation time", [m.outside_generation_seconds for m in ours]),
        (f"{SIMPLE_TOOL}: wall time minus generation time", [m.outside_generation_seconds for m in theirs]),
    ]
    rows = []
    for what, values in candidates:
        if values:
            mean, spread = mean_and_spread(values)
            rows.append({"what": what, "mean": mean, "spread": spread, "values": values})
    return rows


def format_ratio(ratio: dict[str, Any]) -> str:
    if ratio.get("geometric_mean") is None:
        return "-"
    text = f"{ratio['geometric_mean']:.3f}x"
    if ratio.get("low") is not None:
        text += f"  [{ratio['low']:.3f}, {ratio['high']:.3f}] over {ratio['units']}"
    return text


def print_table(sections: list[dict[str, Any]], first_token: list[dict[str, Any]], repeat: int, max_tokens: int) -> None:
    for section in sections:
        print(f"\nT={section['temperature']:g}, {section['kind']} prompts ({section['prompts']} x {repeat} repeats,"
              f" {max_tokens} tokens)")
        print(f"  {'contender':<40} {'tok/s':>8} {'± sd':>7} {'accept':>7}")
        for row in section["speeds"]:
            acceptance = f"{row['acceptance_rate']:.1%}" if row["acceptance_rate"] is not None else "-"
            print(f"  {row['contender']:<40} {row['tokens_per_second']:8.1f} {row['spread']:7.1f} {acceptance:>7}")
        for ratio in section["ratios"]:
            print(f"  {ratio['ratio']:<70} {format_ratio(ratio)}")
    if first_token:
        print("\nBefore the first token (seconds, mean ± sd)")
        for row in first_token:
            print(f"  {row['what']:<70} {row['mean']:.3f} ± {row['spread']:.3f}")


# ---------------------------------------------------------------------------------------------
# The command line


def number_list(text: str, kind: type) -> list:
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"give one or more non-negative numbers: {text!r}")
    return values


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llamacpp-bin", type=Path, required=True,
                        help="llama.cpp's build/bin folder (llama-speculative-simple, llama-lookup)")
    parser.add_argument("--target", type=Path, help="target GGUF (default: the demo's F32 target)")
    parser.add_argument("--draft", type=Path, help="draft GGUF (default: the demo's Q4_1 draft)")
    parser.add_argument("-p", "--profile", default="demo", help="localspec profile for its settings (default: demo)")
    parser.add_argument("--prompts", help="ordinary prompts: a file (one per line) or N of the 8 built-in")
    parser.add_argument("--copy-prompts", help="copy-heavy prompts for llama-lookup: a file or N of the 1 built-in (0: none)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens to generate (default 128)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of every contender per prompt (default 3)")
    parser.add_argument("--temperatures", type=lambda text: number_list(text, float), default=[0.0, 0.8],
                        help="comma-separated (default 0,0.8)")
    parser.add_argument("--simple-draft-max", type=lambda text: number_list(text, int), default=[3, 8],
                        help="llama-speculative-simple draft lengths (default 3,8: its default and the best seen)")
    parser.add_argument("--fixed-draft-max", type=lambda text: number_list(text, int), default=[],
                        help="also localspec with these fixed draft lengths on ordinary prompts, e.g. 8 (default: none)")
    parser.add_argument("--lookup-draft-max", type=lambda text: number_list(text, int), default=[3, 8, 16],
                        help="llama-lookup draft lengths (default 3,8,16)")
    parser.add_argument("-t", "--threads", type=int, default=2, help="threads for both tools (default 2)")
    parser.add_argument("--llamacpp-args", default="", help="extra flags for both llama.cpp tools, space-separated")
    parser.add_argument("--no-ttft", action="store_true", help="skip the time-to-first-token runs of localspec")
    parser.add_argument("--json", action="store_true", help="print every run and the summary as JSON")
    args = parser.parse_args(argv)
    for name in ("max_tokens", "repeat", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if (args.target is None) != (args.draft is None):
        parser.error("give both --target and --draft, or neither (the demo pair)")
    return args


def localspec_launcher() -> tuple[str, ...]:
    """The `localspec` command installed beside this Python, else `python -m localspec`."""
    beside = Path(sys.executable).parent / "localspec"
    if beside.is_file():
        return (str(beside),)
    found = shutil.which("localspec")
    return (found,) if found else (sys.executable, "-m", "localspec")


def make_setup(args: argparse.Namespace) -> Setup:
    bin_dir = args.llamacpp_bin.expanduser()
    for tool in (SIMPLE_TOOL, LOOKUP_TOOL):
        if not (bin_dir / tool).is_file():
            raise CompareError(f"{bin_dir / tool} not found: build it with"
                               f" `cmake --build build --target {SIMPLE_TOOL} {LOOKUP_TOOL}`")
    if args.target is not None:
        target, draft = args.target.expanduser(), args.draft.expanduser()
        for path in (target, draft):
            if not path.is_file():
                raise CompareError(f"{path}: no such model file")
    else:
        target, draft = demo_target_path(), demo_draft_path()
    return Setup(localspec=localspec_launcher(), bin_dir=bin_dir, target=target, draft=draft, profile=args.profile,
                 explicit_models=args.target is not None, threads=args.threads, max_tokens=args.max_tokens,
                 n_ctx=ModelSettings().n_ctx or 4096, llamacpp_args=tuple(args.llamacpp_args.split()),
                 counter=TextTokens(target), pads_lone_tokens=not lone_token_computed_like_a_batch())


def check_measurements(measurements: Sequence[Measurement]) -> list[str]:
    """Warnings for prompts where the two tools counted different prompt tokens, and for llama.cpp runs
    whose text could not be counted."""
    lengths: dict[int, set[int]] = defaultdict(set)
    kinds: dict[int, str] = {}
    for m in measurements:
        lengths[m.prompt].add(m.prompt_tokens)
        kinds[m.prompt] = m.kind
    warnings = [f"prompt {index} ({kinds[index]}): the tools counted {sorted(counts)} prompt tokens"
                for index, counts in lengths.items() if len(counts) > 1]
    uncounted = sum(1 for m in measurements if m.extra.get("uncounted"))
    if uncounted:
        warnings.append(f"{uncounted} llama.cpp runs printed text of another shape: their speed counts N as printed")
    return warnings


def run_all(setup: Setup, prompts: Sequence[Prompt], args: argparse.Namespace) -> tuple[list[Measurement], list[float]]:
    """Every contender on every prompt, repeat and temperature, interleaved per prompt.

    Per prompt and repeat, a time-to-first-token run of localspec comes first (unless --no-ttft).
    """
    ttft = not args.no_ttft
    runs_per_prompt = {prompt.index: len(contenders_for(prompt.kind, args.simple_draft_max, args.lookup_draft_max,
                                                        args.fixed_draft_max, setup.pads_lone_tokens))
                       * len(args.temperatures) + ttft for prompt in prompts}
    total = args.repeat * sum(runs_per_prompt.values())
    measurements: list[Measurement] = []
    first_bytes: list[float] = []
    done = 0

    def progress(what: str) -> None:
        nonlocal done
        done += 1
        print(f"[{done}/{total}] {what}", file=sys.stderr, flush=True)

    for repeat in range(args.repeat):
        for prompt in prompts:
            if ttft:
                progress(f"prompt {prompt.index}: localspec time to first token")
                command = localspec_command(setup, Contender(DEFAULTS, LOCALSPEC_TOOL), prompt,
                                            args.temperatures[0], 1 + repeat, max_tokens=1, as_json=False)
                first_bytes.append(seconds_to_first_byte(command))
            contenders = contenders_for(prompt.kind, args.simple_draft_max, args.lookup_draft_max, args.fixed_draft_max,
                                        setup.pads_lone_tokens)
            for temperature in args.temperatures:
                for contender in rotated(contenders, prompt.index + repeat):
                    progress(f"prompt {prompt.index} T={temperature:g}: {contender.name}")
                    measurements.append(measure(setup, contender, prompt, temperature, repeat))
    return measurements, first_bytes


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        setup = make_setup(args)
        texts = [("ordinary", text) for text in chosen_prompts(args.prompts, ORDINARY_PROMPTS, "--prompts")]
        texts += [("copy-heavy", text) for text in chosen_prompts(args.copy_prompts, COPY_PROMPTS, "--copy-prompts")]
        prompts = [Prompt(index, kind, text, rendered_prompt(setup.target, text)) for index, (kind, text) in enumerate(texts)]
        measurements, first_bytes = run_all(setup, prompts, args)
    except (CompareError, LocalspecError) as exc:
        print(f"compare_llamacpp: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("compare_llamacpp: interrupted", file=sys.stderr)
        return 130
    sections = summary(measurements, args.temperatures)
    first_token = time_to_first_token(measurements, first_bytes, args.temperatures[0])
    warnings = check_measurements(measurements)
    if args.json:
        print(json.dumps({"target": str(setup.target), "draft": str(setup.draft), "threads": setup.threads,
                          "max_tokens": setup.max_tokens, "repeat": args.repeat, "summary": sections,
                          "time_to_first_token": first_token, "warnings": warnings,
                          "runs": [asdict(m) for m in measurements]}, indent=1))
    else:
        print(f"target {setup.target}\ndraft  {setup.draft}\nthreads {setup.threads}")
        print_table(sections, first_token, args.repeat, setup.max_tokens)
    for warning in warnings:
        print(f"compare_llamacpp: warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
