"""`localspec bench`: measure and tune drafting on this machine, side by side with the target alone."""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from ..app.bench import (
    DEFAULT_PROMPTS,
    PLAIN,
    BenchCase,
    BenchResult,
    BenchStopped,
    best_by_temperature,
    best_overall,
    case_settings,
    plain_settings,
    prompts_in,
    read_prompts,
    run_bench,
    save_fastest,
)
from ..app.plan import Plan, verify_rows_of
from ..app.structured_bench import (
    ConstrainedPrompt,
    StructuredResult,
    run_structured_bench,
)
from ..app.structured_set import structured_set
from ..config.paths import user_path
from ..config.profiles import written_plainly
from ..engine.generation import Generation
from ..engine.grammar import OutputFormat
from ..errors import LocalspecError
from ..settings import ADAPTIVE, ADAPTIVE_DRAFT_LIMIT, SETTINGS, STRATEGIES, VERIFY_MODES
from ..textin import clean_input
from .common import print_table, say, stderr_console, stdin_bytes, write_stdout
from .loading import check_prompt_form, load_session, resolve_plan
from .options import (
    PROFILE_OPTION,
    VERBOSE_OPTION,
    WholeNumbers,
    click_type,
    setting_flags,
    setting_options,
)
from .output_format import compile_output_format, schema_format
from .stdio import stdout_is_closed

BENCH_MAX_TOKENS = 128
BENCH_SEED = 1234
SHORT_ANSWER_TOKENS = 64  # below this a slower adaptive setting is put down to the answers' length, not the machine
SWEPT = ("sampling.temperature", "speculative.strategy", "speculative.draft_max", "speculative.verify")


def _comma_list(value: str, convert, option: str) -> list:
    items = [item.strip() for item in value.split(",")]
    if not any(items):
        raise click.BadParameter("give at least one value", param_hint=option)
    if not all(items):  # (`0,,1` or `0,`: a value lost to a slip, not a default to fill in)
        raise click.BadParameter(f"an empty value in {value!r}", param_hint=option)
    try:
        return list(dict.fromkeys(convert(item) for item in items))
    except (click.BadParameter, ValueError) as exc:
        message = exc.message if isinstance(exc, click.BadParameter) else str(exc)
        raise click.BadParameter(message, param_hint=option) from None


def _temperature(item: str) -> float:
    try:
        if not written_plainly(item):
            raise ValueError(item)
        value = float(item)
    except ValueError:
        raise click.BadParameter(f"{item!r} is not a number") from None
    if not math.isfinite(value):
        raise click.BadParameter(f"{item} is not a finite number")
    if value < 0:
        raise click.BadParameter(f"{item} is below 0")
    return value


def _strategy(item: str) -> str:
    if item not in STRATEGIES:
        raise click.BadParameter(f"{item!r} is not one of {', '.join(STRATEGIES)}")
    return item


def _verify(item: str) -> str:
    if item not in VERIFY_MODES:
        raise click.BadParameter(f"{item!r} is not one of {', '.join(VERIFY_MODES)}")
    return item


_DRAFT_MAX = click_type(SETTINGS["speculative.draft_max"])


def _draft_max(item: str) -> int | str:
    return _DRAFT_MAX.convert(item, None, None)


@click.command()
@PROFILE_OPTION
@setting_options(exclude=(*SWEPT, "target.prompt_cache", "draft.prompt_cache"))  # (bench reads every prompt)
@click.option("--temperatures", default="0,0.8", show_default=True, help="Temperatures to measure, comma-separated.")
@click.option("--strategy", "strategies", help="Strategies to compare, comma-separated: model,ngram,hybrid [the profile's].")
@click.option("--verify", "verify_modes", help="Verification modes to compare, comma-separated: coupled,rejection [the profile's].")
@click.option("--draft-max", "draft_maxes", help="Draft lengths to compare, comma-separated, e.g. 2,4,8,adaptive [the profile's].")
@click.option("--prompts", "prompts_spec", help="A FILE of prompts (one per line; - reads stdin), or N: the first N built-in prompts"
              f" ({len(DEFAULT_PROMPTS)}: chat, code, lists, prose and copy-heavy tasks) [all].")
@click.option("--prompt", "prompt_text", help="Measure on this one prompt instead (e.g. with --json-schema).")
@click.option("--json-schema", "json_schema", metavar="FILE_OR_JSON",
              help="Hold every output to this JSON schema (a file, or JSON text starting with '{'): constrained"
                   " speculative vs constrained target-only, beside the free speed-up on the same prompts.")
@click.option("--structured", is_flag=True, help="Measure on the built-in structured set: each prompt held to its own"
              " JSON schema, constrained and free, as with --json-schema.")
@click.option("--limit", type=WholeNumbers(1), help="With --structured: only the first N schemas of the set [all].")
@click.option("--raw", is_flag=True, help="Plain completion: the prompts without the chat template (a base model's).")
@click.option("--repeat", type=WholeNumbers(1, 100), default=1, show_default=True,
              help="Measure every prompt this many times.")
@click.option("--save", is_flag=True, help="Write the fastest strategy and draft length into the profile.")
@click.option("--cold", is_flag=True, help="Adaptive draft lengths start from their priors, as in a first-ever run (and nothing learned is kept).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@VERBOSE_OPTION
def bench(
    profile: str | None, temperatures: str, strategies: str | None, verify_modes: str | None, draft_maxes: str | None,
    prompts_spec: str | None, prompt_text: str | None, json_schema: str | None, structured: bool, limit: int | None,
    raw: bool, repeat: int, save: bool, cold: bool, as_json: bool, verbose: bool, **options: Any,
) -> None:
    """Measure what drafting buys on this machine, and which strategy and draft length buy most.

    Every configuration runs beside the target alone, in one process, on the same
    prompts and seeds. Where the target alone pads its one-token passes to keep the
    same text (llama.cpp's default CPU build), it also runs at full speed ("lone").
    Takes `run`'s model, sampling and speculative settings (temperatures as
    --temperatures); unless given, --max-tokens is 128 and --seed 1234 here.

    \b
    Examples:
      localspec bench
      localspec bench --draft-max 2,4,8,adaptive --strategy model,hybrid --save
      localspec bench --verify coupled,rejection --temperatures 0.8
      localspec bench -p qwen2.5-7b --temperatures 0 --prompts my-prompts.txt --repeat 3
      localspec bench --structured --temperatures 0,0.8
      localspec bench --json-schema person.json --prompt "Extract the person from: ..."
    """
    if stdout_is_closed():  # `>&-`: the results would go nowhere, after minutes of measuring
        raise LocalspecError("stdout is closed: nowhere to write the results")
    _check_structured_options(prompts_spec, prompt_text, json_schema, structured, limit, save)
    temps = _comma_list(temperatures, _temperature, "--temperatures")
    if prompt_text is not None and not prompt_text.strip():
        raise click.UsageError("--prompt is empty")
    prompts = (clean_input(prompt_text, "--prompt"),) if prompt_text is not None else _prompts(prompts_spec)
    constrained = _constrained_prompts(json_schema, structured, limit, prompts)
    flags = setting_flags(options)
    for key, bench_default in (("sampling.max_tokens", BENCH_MAX_TOKENS), ("sampling.seed", BENCH_SEED)):
        if flags.get(key) is None:
            flags[key] = bench_default
    if isinstance(flags["sampling.max_tokens"], int) and flags["sampling.max_tokens"] < 2:
        raise click.UsageError("--max-tokens must be 2 or more here: speed is measured over the tokens after the"
                               " first (the first comes from the prompt's pass alone)")
    if save and not (profile or not flags.get("target.path")):
        raise click.UsageError("--save writes into a profile: name one with --profile")
    if save and (flags.get("target.path") or flags.get("draft.path")):
        raise click.UsageError("--save writes into the profile what its own models measured: leave out --target and"
                               " --draft")
    if save:  # (before any model is looked for, or the demo target derived)
        _check_worth_saving(len(prompts) * repeat, flags["sampling.max_tokens"])
    swept_lengths = _comma_list(draft_maxes, _draft_max, "--draft-max") if draft_maxes is not None else None
    if swept_lengths is not None:  # (the profile's draft_max is not measured: neither fitted nor checked with --draft-min)
        longest = max((length for length in swept_lengths if isinstance(length, int)), default=0)
        flags["speculative.draft_max"] = longest if longest > ADAPTIVE_DRAFT_LIMIT else ADAPTIVE
    plan = resolve_plan(profile, flags, verbose=verbose)
    speculative = plan.generation.speculative
    chosen_strategies = _comma_list(strategies, _strategy, "--strategy") if strategies is not None else [speculative.strategy]
    chosen_lengths = _fitted_lengths(plan, swept_lengths) if swept_lengths is not None else [speculative.draft_max]
    needs_draft = [s for s in chosen_strategies if s != "ngram"]
    if needs_draft and plan.draft is None:
        raise click.UsageError(f"this run has no draft model, which strategy {needs_draft[0]} needs: give --draft, or --strategy ngram")
    chosen_verify = _comma_list(verify_modes, _verify, "--verify") if verify_modes is not None else [speculative.verify]
    if save and speculative.verify not in chosen_verify:
        raise click.UsageError(f"--save writes a setting for verify = {speculative.verify} (the profile's): include it in --verify")
    cases = [BenchCase(s, d, t, v) for t in temps for s in chosen_strategies for d in chosen_lengths for v in chosen_verify]
    for case in cases:  # a combination the settings refuse (draft_min above a swept draft_max) before anything loads
        case_settings(plan.generation, case)

    check_prompt_form(plan, raw)
    stopped: BenchStopped | None = None
    with _said_when_stopped(), load_session(plan, load_draft=bool(needs_draft), verbose=verbose,
                                            remember_lengths=not cold, memory_owner=None) as session:
        placement = session.placement()
        for role, where in placement.items():
            say(f"{role:<6} {getattr(plan, role).path} ({where['summary']})")
        # (target-only, at full speed too where it pads lone tokens: see `plain_settings`)
        baselines = 1 + (plain_settings(session, plan.generation) is not None)
        runs_per_prompt = sum(len([c for c in cases if c.temperature == t]) + baselines for t in temps)
        try:
            if constrained is not None:
                with _progress(2 * len(constrained) * repeat * runs_per_prompt) as advance:
                    structured_results = run_structured_bench(
                        session, plan.generation, cases, constrained, repeat, cold=cold, raw=raw,
                        on_run=lambda case, held, index, generation: advance(case, index, generation, held))
            else:
                with _progress(len(prompts) * repeat * runs_per_prompt) as advance:
                    results = run_bench(session, plan.generation, cases, prompts, repeat, on_run=advance, cold=cold, raw=raw)
        except BenchStopped as exc:
            if not exc.results:
                raise
            stopped = exc
            structured_results = results = exc.results
    if constrained is not None:
        _report_structured(plan, placement, constrained, repeat, structured_results, as_json, stopped)
    else:
        _report(plan, placement, len(prompts), repeat, results, as_json, stopped)
    if stopped is not None:
        click.echo(f"bench stopped by Ctrl-C after {stopped.finished} of {stopped.planned} prompt runs: the results are"
                   " from those (every configuration ran each of them)" + ("; nothing saved" if save else ""), err=True)
        raise SystemExit(130)
    if save:
        verify = plan.generation.speculative.verify
        strategy, draft_max, speedup = best_overall(results, verify)
        path = save_fastest(plan.profile_name, results, verify)
        baseline = "target-only at full speed (--no-same-text)" if any(r.plain for r in results) else "the target alone"
        if path is None:
            click.echo(f"nothing saved: the fastest setting ({strategy}, draft_max {draft_max}) is {speedup:.2f}x {baseline}",
                       err=True)
        else:
            click.echo(f"saved strategy {strategy}, draft_max {draft_max} ({speedup:.2f}x {baseline} across temperatures)"
                       f" to {path}", err=True)


def _report(plan: Any, placement: dict, n_prompts: int, repeat: int, results: list[BenchResult], as_json: bool,
            stopped: BenchStopped | None) -> None:
    """The free bench's results (one JSON object on stdout, or a table) and advice on them."""
    best = best_by_temperature(results)
    if as_json:
        write_stdout(json.dumps({
            **_header(plan, placement, n_prompts, repeat, stopped),
            "results": [r.to_dict() for r in results],
            "best": {str(t): r.to_dict() for t, r in best.items()},
        }, indent=2) + "\n")
    else:
        print_table(_table(results, best))
        if any(r.plain is not None for r in results):
            click.echo(LONE_NOTE, err=True)
    _advise(results, best)


@contextmanager
def _said_when_stopped() -> Iterator[None]:
    """Ctrl-C during a bench before any prompt was measured on every side says that nothing is reported (it had
    ended with exit 130 and no word); after, the runs measured are reported (`BenchStopped`)."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo("\nbench stopped before a prompt was measured on every side: nothing is reported", err=True)
        raise


# What --save needs measured before it changes a profile: a setting picked from one short run is noise.
SAVE_NEEDS_RUNS, SAVE_NEEDS_TOKENS = 4, 64


def _check_worth_saving(runs: int, max_tokens: int) -> None:
    """UsageError where a bench is too small to pick a profile's setting from: fewer than SAVE_NEEDS_RUNS prompt
    runs (prompts × --repeat) per case, or replies shorter than SAVE_NEEDS_TOKENS."""
    short = []
    if runs < SAVE_NEEDS_RUNS:
        short.append(f"at least {SAVE_NEEDS_RUNS} prompt runs (prompts x --repeat: here {runs})")
    if max_tokens < SAVE_NEEDS_TOKENS:
        short.append(f"--max-tokens {SAVE_NEEDS_TOKENS} or more (here {max_tokens})")
    if short:
        raise click.UsageError(f"--save picks a profile's setting from what this bench measures: it needs"
                               f" {' and '.join(short)}; measure more, or drop --save")


def _fitted_lengths(plan: Plan, lengths: list[int | str]) -> list[int | str]:
    """The swept draft lengths, each lowered (with a note) to what one target pass can verify, as `run` does."""
    most = verify_rows_of(plan.target.runtime) - 1
    fitted = []
    for length in lengths:
        if isinstance(length, int) and length > most:
            click.echo(f"note: draft_max {length} measured as {most}: one target pass verifies at most {most + 1}"
                       " tokens (target.n_batch)", err=True)
            length = most
        fitted.append(length)
    return list(dict.fromkeys(fitted))


def _prompts(spec: str | None) -> tuple[str, ...]:
    if spec is None:
        return DEFAULT_PROMPTS
    if spec.isascii() and spec.isdigit():  # (not "²": a digit to Unicode, not to int())
        count = int(spec)
        if not 1 <= count <= len(DEFAULT_PROMPTS):
            raise click.BadParameter(f"between 1 and {len(DEFAULT_PROMPTS)} built-in prompts", param_hint="--prompts")
        return DEFAULT_PROMPTS[:count]
    if spec == "-":
        return prompts_in(stdin_bytes(), "stdin")
    return read_prompts(user_path(spec))


def _check_structured_options(
    prompts_spec: str | None, prompt_text: str | None, json_schema: str | None, structured: bool, limit: int | None,
    save: bool,
) -> None:
    """The prompt and constraint options that cannot go together, refused before anything loads."""
    if prompt_text is not None and prompts_spec is not None:
        raise click.UsageError("give --prompt or --prompts, not both")
    if structured and json_schema is not None:
        raise click.UsageError("give --structured (the built-in schemas) or --json-schema, not both")
    if structured and (prompt_text is not None or prompts_spec is not None):
        raise click.UsageError("--structured brings its own prompts: leave out --prompt and --prompts")
    if limit is not None and not structured:
        raise click.UsageError("--limit counts schemas of the built-in set: use it with --structured")
    if save and (structured or json_schema is not None):
        raise click.UsageError("--save tunes free generation: run it without --structured or --json-schema")


def _constrained_prompts(
    json_schema: str | None, structured: bool, limit: int | None, prompts: tuple[str, ...]
) -> list[ConstrainedPrompt] | None:
    """Each prompt with its compiled schema (None for a free bench); compile warnings go to stderr."""
    if structured:
        pairs = [(case.name, case.prompt, case.output_format()) for case in structured_set(limit)]
    elif json_schema is not None:
        fmt = schema_format(json_schema)
        pairs = [(fmt.origin, prompt, fmt) for prompt in prompts]
    else:
        return None
    compiled: dict[OutputFormat, str] = {}
    for _, _, fmt in pairs:
        if fmt not in compiled:
            compiled[fmt] = compile_output_format(fmt).grammar
    return [ConstrainedPrompt(name, prompt, compiled[fmt]) for name, prompt, fmt in pairs]


def _header(plan: Any, placement: dict, n_prompts: int, repeat: int, stopped: BenchStopped | None) -> dict[str, Any]:
    """What every `bench --json` report opens with: the models, where they ran, the prompts and repeats, and
    where Ctrl-C stopped the bench, the prompt runs it finished of those planned (else null)."""
    return {
        "target": str(plan.target.path),
        "draft": str(plan.draft.path) if plan.draft else None,
        "placement": placement,
        "prompts": n_prompts,
        "repeat": repeat,
        "stopped": {"prompt_runs": stopped.finished, "planned": stopped.planned} if stopped else None,
    }


def _report_structured(
    plan: Any, placement: dict, prompts: list[ConstrainedPrompt], repeat: int, results: list[StructuredResult],
    as_json: bool, stopped: BenchStopped | None,
) -> None:
    """The structured bench's results: one JSON object on stdout, or a table."""
    if as_json:
        write_stdout(json.dumps({
            **_header(plan, placement, len(prompts), repeat, stopped),
            "schemas": list(dict.fromkeys(prompt.name for prompt in prompts)),
            "results": [r.to_dict() for r in results],
        }, indent=2) + "\n")
    else:
        print_table(_structured_table(results))
        if any(r.constrained.plain is not None for r in results):
            click.echo(LONE_NOTE, err=True)
        if any(not (r.constrained.speculative.tokens_per_second and r.constrained.baseline.tokens_per_second)
               for r in results):
            click.echo("note: a row reads 0 tok/s where no token of its outputs was timed (each was the first, or"
                       " forced by the format): measure with a larger --max-tokens", err=True)


def _structured_table(results: list[StructuredResult]) -> Table:
    """One row per configuration: constrained and free speed-ups (over target-only at full speed too, "vs lone",
    where target-only pads its lone tokens)."""
    lone = any(r.constrained.plain is not None for r in results)
    table = Table("T", "strategy", "draft_max", "verify", "constrained", "target-only", "speed-up", "free speed-up",
                  *(["vs lone", "free vs lone"] if lone else []), "mask ms/tok", "forced", "complete", "identical", box=None)
    for r in results:
        row = r.to_dict()
        speculative, baseline = r.constrained.speculative, r.constrained.baseline
        mask = [row["speculative_mask_ms_per_token"], row["baseline_mask_ms_per_token"]]
        over_lone = [f"{r.constrained.speedup_over_plain:.2f}x", f"{r.free.speedup_over_plain:.2f}x"]
        table.add_row(
            f"{r.case.temperature:g}", r.case.strategy, str(r.case.draft_max), r.case.verify,
            f"{speculative.tokens_per_second or 0:.1f} tok/s", f"{baseline.tokens_per_second or 0:.1f} tok/s",
            f"{r.constrained.speedup:.2f}x", f"{r.free.speedup:.2f}x", *(over_lone if lone else []),
            " / ".join(f"{m:.2f}" if m is not None else "-" for m in mask),
            f"{speculative.forced_tokens / speculative.tokens_generated:.0%}" if speculative.tokens_generated else "-",
            f"{r.complete_speculative}/{r.complete_baseline} of {r.constrained.runs}",
            _identical(r.constrained),
        )
    return table


def _identical(result: BenchResult) -> str:
    """Prompt runs whose speculative text was target-only's, token for token; and, where target-only also ran at
    full speed, how often that run's text was the padded one's ("lone")."""
    cell = f"{result.identical_prompts}/{result.runs}"
    if result.plain is not None:
        cell += f" (lone {result.plain_identical_prompts}/{result.runs})"
    return cell


def _log_run(case: BenchCase | None | str, index: int, generation: Generation, constrained: bool | None = None) -> None:
    if isinstance(case, BenchCase):
        label = f"{case.strategy}, draft_max {case.draft_max}, {case.verify}"
    else:
        label = "target-only, lone tokens" if case == PLAIN else "target-only"
    if constrained is not None:
        label += ", constrained" if constrained else ", free"
    temperature = generation.settings.sampling.temperature
    click.echo(f"  T={temperature:g} prompt {index + 1}: {label}: {generation.stats.tokens_per_second or 0:.1f} tok/s", err=True)


class _progress:
    """A progress bar over all runs on a terminal; a line per run otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._bar: Progress | None = None

    def __enter__(self) -> Callable[..., None]:
        if not stderr_console.is_terminal:
            return _log_run
        self._bar = Progress(TextColumn("measuring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=stderr_console)
        self._bar.start()
        task = self._bar.add_task("runs", total=self.total)
        return lambda case, index, generation, constrained=None: self._bar.advance(task)

    def __exit__(self, *exc_info: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def _table(results: list[BenchResult], best: dict[float, BenchResult]) -> Table:
    """One row per configuration; where target-only pads its one-token passes (same seed, same text), also
    target-only at full speed and the speed-up over it ("vs lone")."""
    lone = any(r.plain is not None for r in results)
    table = Table("T", "strategy", "draft_max", "verify", "speculative", "target-only", "speed-up",
                  *(["lone", "vs lone"] if lone else []), "spread", "acceptance", "kept/pass", "draft cost", "identical",
                  box=None)
    for r in results:
        mark = " *" if best.get(r.case.temperature) is r else ""
        plain = [f"{r.plain.tokens_per_second or 0:.1f} tok/s", f"{r.speedup_over_plain:.2f}x"] if r.plain else ["-", "-"]
        table.add_row(
            f"{r.case.temperature:g}", r.case.strategy, str(r.case.draft_max), r.case.verify,
            f"{r.speculative.tokens_per_second or 0:.1f} tok/s", f"{r.baseline.tokens_per_second or 0:.1f} tok/s",
            f"{r.speedup:.2f}x{mark}", *(plain if lone else []), f"±{r.spread / 2:.2f}" if r.spread else "-",
            f"{r.speculative.acceptance_rate:.1%}" if r.speculative.acceptance_rate is not None else "-",
            f"{r.speculative.mean_accepted_length or 0:.2f}",
            f"{r.cost_ratio:.2f}" if r.cost_ratio is not None else "-", _identical(r),
        )
    return table


LONE_NOTE = ("note: target-only decoding here reads a lone token as a pair of rows, as speculative passes are"
             " computed (same seed, same text); 'lone' is target-only at llama.cpp's full speed (--no-same-text),"
             " what drafting must beat to be worth it")


def _advise(results: list[BenchResult], best: dict[float, BenchResult]) -> None:
    """Say where even the fastest setting is slower than target-only decoding at its fastest (and where that
    comes from too little measuring to act on)."""
    for temperature, result in best.items():
        if result.speedup_over_plain >= 1.0:
            continue
        answer = result.speculative.tokens_generated / max(result.runs, 1)
        thin = (f" (measured on {result.runs} run{'s' * (result.runs != 1)} of {answer:.0f} tokens: too little to act"
                " on; measure more)") if result.runs < SAVE_NEEDS_RUNS or answer < SAVE_NEEDS_TOKENS else ""
        if result.speedup >= 1.0:  # faster than padded target-only, slower than it at full speed
            click.echo(
                f"warning: at T={temperature:g} the fastest setting ({result.case.strategy}, draft_max"
                f" {result.case.draft_max}) is {result.speedup:.2f}x target-only decoding that keeps the same text,"
                f" but {result.speedup_over_plain:.2f}x target-only at full speed: where the same text as"
                f" --no-speculative does not matter, run --no-speculative --no-same-text on this machine{thin}",
                err=True,
            )
            continue
        setting = f"({result.case.strategy}, draft_max {result.case.draft_max})"
        if result.case.draft_max == ADAPTIVE and answer < SHORT_ANSWER_TOKENS:  # it may leave prompts unread (worth_reading)
            click.echo(
                f"note: at T={temperature:g} the fastest setting {setting} was not faster than the target alone"
                f" ({result.speedup:.2f}x) on answers of {answer:.0f} tokens, too few to pay for the draft model's"
                " reading of a prompt: measure with a larger --max-tokens",
                err=True,
            )
        else:
            lone = " --no-same-text" if result.plain is not None else ""
            click.echo(
                f"warning: at T={temperature:g} even the fastest setting {setting} is slower than the target alone"
                f" ({result.speedup_over_plain:.2f}x): run without a draft (--no-speculative{lone}) on this machine{thin}",
                err=True,
            )


for _param in bench.params:  # bench's own defaults, as its docstring says (the settings' are run's)
    if _param.name == "max_tokens":
        _param.help = f"Most tokens to generate per run (default {BENCH_MAX_TOKENS} here)."
    elif _param.name == "seed":
        _param.help = f"Random seed of every run (default {BENCH_SEED} here)."
