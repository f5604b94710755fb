"""Side-by-side speed measurement and tuning: speculative vs target-only, same prompts, seeds and process.

For each temperature, every prompt is generated target-only once per repeat and
with every drafting configuration (strategy × draft length × verification) being compared, in
an order that rotates from prompt to prompt, so that drift in machine speed
falls on all sides alike. Speed is generated tokens over generation time,
prompt processing excluded, summed over prompts. A configuration's speed-up is
its speed over the target-only speed measured beside it.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence, TypeVar

from ..config.files import read_user_bytes
from ..config.profiles import update_profile
from ..engine.draft_length import LearnedLengths
from ..engine.generation import Generation
from ..engine.stats import SpecStats
from ..errors import InputError, LocalspecError
from ..settings import GenerationSettings
from ..textin import decode_input
from .session import Session

BENCH_PROMPTS: tuple[str, ...] = (
    "Why is the sky blue? Answer in a short paragraph.",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "List ten animals that live in the ocean, one per line.",
    "Tell a short story about a robot who learns to paint.",
    "Explain the difference between TCP and UDP.",
    "Write a SQL query that finds the five customers with the highest total order value.",
    "Give me a recipe for pancakes with ingredients and steps.",
    "Summarise the plot of Romeo and Juliet in five sentences.",
    "What are the pros and cons of remote work? Use bullet points.",
    "Write a haiku about autumn, then explain its imagery.",
)

COPY_HEAVY_PROMPTS: tuple[str, ...] = (
    "Repeat the following text exactly, word for word:\n\nThe old lighthouse stood at the edge of the cliff, its white"
    " paint peeling in long strips. Every night for forty years the keeper climbed the spiral stairs, trimmed the"
    " wick and watched the beam sweep across the dark water. Ships passed safely because of him, though few of"
    " their sailors ever knew his name.",
    "Rename the variable `x` to `total` in this code and return the whole code:\n\ndef add_all(numbers):\n    x = 0\n"
    "    for n in numbers:\n        x = x + n\n    return x\n\nprint(add_all([1, 2, 3]))",
    "Extract the name, email and phone number from this text as JSON with keys name, email, phone:\n\n"
    "Please contact Maria Gonzalez at maria.gonzalez@example.com or call her on +1 555 0134 about the invoice.",
    "Summarise this text in two sentences, reusing its wording:\n\nThe city council met on Tuesday to discuss the new"
    " bicycle lanes. Residents said the lanes made the streets safer for children. Shop owners worried that fewer"
    " parking spaces would keep customers away. The council agreed to test the lanes for six months.",
)

DEFAULT_PROMPTS = BENCH_PROMPTS + COPY_HEAVY_PROMPTS


@dataclass(frozen=True)
class BenchCase:
    """One drafting configuration being measured."""

    strategy: str
    draft_max: int | str
    temperature: float
    verify: str = "coupled"


@dataclass
class BenchResult:
    case: BenchCase
    speculative: SpecStats = field(default_factory=SpecStats)  # totals over prompts and repeats
    baseline: SpecStats = field(default_factory=SpecStats)
    # Target-only decoding at llama.cpp's full speed, a lone token read alone (`speculative.same_text` off), measured
    # beside the baseline where the baseline pads its one-token passes (None where it does not: the same thing).
    plain: SpecStats | None = None
    identical_prompts: int = 0  # prompt runs whose tokens matched target-only exactly (expected with coupled verification)
    # Prompt runs where target-only at full speed (`plain`) wrote the baseline's tokens: where it did not, a lone
    # token's kernels parted from a batch's at a near-tie (what `speculative.same_text` pays the padding for).
    plain_identical_prompts: int = 0
    runs: int = 0
    repeat_speedups: list[float] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        base = self.baseline.tokens_per_second
        return (self.speculative.tokens_per_second or 0.0) / base if base else 0.0

    @property
    def speedup_over_plain(self) -> float:
        """The speed-up over the faster target-only decoding: at full speed where the baseline pads lone tokens."""
        base = self.plain.tokens_per_second if self.plain is not None else None
        if not base:
            return self.speedup
        return (self.speculative.tokens_per_second or 0.0) / base

    def add_round(self, round_result: BenchResult) -> None:
        """Keep the speed-up of one round over the prompts (`repeat_speedups`)."""
        self.repeat_speedups.append(round_result.speedup)

    @property
    def spread(self) -> float:
        """Largest minus smallest speed-up across repeats (0 with one repeat)."""
        return max(self.repeat_speedups) - min(self.repeat_speedups) if len(self.repeat_speedups) > 1 else 0.0

    @property
    def cost_ratio(self) -> float | None:
        """Seconds per draft token over seconds per target-only pass: what a draft token costs."""
        draft, target = self.speculative.seconds_per_draft_token, self.baseline.seconds_per_pass
        return draft / target if draft is not None and target else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.case.strategy,
            "draft_max": self.case.draft_max,
            "verify": self.case.verify,
            "temperature": self.case.temperature,
            "speculative_tokens_per_second": self.speculative.tokens_per_second,
            "baseline_tokens_per_second": self.baseline.tokens_per_second,
            "speedup": self.speedup,
            "plain_tokens_per_second": self.plain.tokens_per_second if self.plain is not None else None,
            "speedup_over_plain": self.speedup_over_plain,
            "speedup_spread": self.spread,
            "acceptance_rate": self.speculative.acceptance_rate,
            "mean_accepted_length": self.speculative.mean_accepted_length,
            "tokens_per_target_pass": self.speculative.tokens_per_pass,
            "per_position_acceptance": self.speculative.per_position_acceptance,
            "cost_ratio": self.cost_ratio,
            "identical_prompts": self.identical_prompts,
            "plain_identical_prompts": self.plain_identical_prompts if self.plain is not None else None,
            "runs": self.runs,
        }


class BenchStopped(KeyboardInterrupt):
    """Ctrl-C during a bench, with what it had measured: `results`, each configuration measured at all (in
    `cases` order) over the prompt runs that every side of its temperature finished, and how many prompt runs
    were `finished` of those `planned` (prompts × repeats × temperatures)."""

    def __init__(self, results: list, finished: int, planned: int) -> None:
        super().__init__()
        self.results, self.finished, self.planned = results, finished, planned


def read_prompts(path: Path) -> tuple[str, ...]:
    """Prompts from a file (or a pipe: `<(grep ...)`), as `prompts_in` reads them."""
    try:
        data = read_user_bytes(path, pipes_ok=True)  # a regular file or a pipe, or one line saying what it is not
    except InputError as exc:
        raise InputError(f"cannot read the prompts file: {exc}") from None
    return prompts_in(data, str(path))


def prompts_in(data: bytes, origin: str) -> tuple[str, ...]:
    """Prompts, one per line (blank lines skipped; "\\n" inside a line is a newline), from `data` decoded as a
    piped prompt is (`decode_input`: UTF-16 after its byte order mark, invalid UTF-8 replaced)."""
    lines = decode_input(data, origin).splitlines()
    prompts = tuple(line.replace("\\n", "\n") for line in lines if line.strip())
    if not prompts:
        raise InputError(f"{origin}: no prompts in it (one per line)")
    return prompts


def prompt_tokens(session: Session, prompts: Sequence[str], raw: bool = False) -> list[list[int]]:
    """Each bench prompt as `run` sends it: through the chat template after the system prompt, if any, or as plain
    text (`raw`); LocalspecError, naming the prompt, for one the target's context cannot hold (before anything is
    measured)."""
    every = []
    for index, prompt in enumerate(prompts):
        named = f"bench prompt {index + 1} of {len(prompts)} ({prompt.strip().splitlines()[0][:40]!r}…)"
        session.refuse_text_too_long([prompt], named)  # (before tokenizing, which takes minutes over megabytes)
        messages = [*session.system_messages(), {"role": "user", "content": prompt}]
        tokens = session.raw_prompt_tokens(prompt) if raw else session.chat_prompt_tokens(messages)
        if len(tokens) > session.target.n_ctx:
            raise LocalspecError(f"{named} is {len(tokens)} tokens,"
                                 f" but the context holds {session.target.n_ctx}:"
                                 f" shorten it{session.larger_context_hint()}")
        every.append(tokens)
    return every


def run_bench(
    session: Session,
    settings: GenerationSettings,
    cases: Sequence[BenchCase],
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    repeat: int = 1,
    on_run: Callable[[BenchCase | None | str, int, Generation], None] | None = None,
    cold: bool = False,
    raw: bool = False,
) -> list[BenchResult]:
    """Measure every case against target-only on every prompt, `repeat` times; results in `cases` order.

    Target-only runs with coupled sampling, so a coupled case's tokens are expected to
    be identical to it (`identical_prompts`) whatever the settings' verification. Where it
    pads its one-token passes (`speculative.same_text` on a build whose kernels compute a
    lone token otherwise), target-only decoding at full speed runs beside it too (`plain`):
    what drafting must beat to be worth it.

    `cold`: every generation's adaptive draft lengths start from their priors, as in a
    first-ever one-shot run (otherwise they learn across the prompts, as a chat does).
    `raw`: the prompts are plain text, without the chat template (a base model's).
    """
    every_prompt = prompt_tokens(session, prompts, raw)
    turns = PromptTurns(session, settings, cases, len(every_prompt), repeat, raw=raw)
    return measure_turns(turns, cases, BenchResult,
                         lambda turn: _measure_prompt(session, turn, every_prompt[turn.index], cold, on_run), _record)


class RoundsResult(Protocol):
    """A configuration's result over a bench's turns (`BenchResult`, `StructuredResult`)."""

    @property
    def runs(self) -> int: ...

    def add_round(self, round_result: Any) -> None: ...


Result = TypeVar("Result", bound=RoundsResult)


def measure_turns(
    turns: PromptTurns, cases: Sequence[BenchCase], new_result: Callable[[BenchCase], Result],
    measure: Callable[[PromptTurn], Any], record: Callable[[Result, Any, BenchCase], None],
) -> list[Result]:
    """Run the bench's turns: `measure(turn)` one prompt's runs, `record(result, runs, case)` them into each case's
    result (`new_result(case)`) and into the round's, whose speed-up `add_round` keeps; results in `cases` order.
    Ctrl-C raises `BenchStopped` with the results of the prompt runs finished."""
    results = {case: new_result(case) for case in cases}
    per_round: dict[BenchCase, Result] = {}
    finished = 0  # prompt runs that every side of their temperature finished
    try:
        for turn in turns:
            if turn.index == 0:
                per_round = {case: new_result(case) for case in turn.cases}
            runs = measure(turn)
            for case in turn.cases:
                for result in (results[case], per_round[case]):
                    record(result, runs, case)
            finished += 1
            if turn.ends_a_round:
                for case in turn.cases:
                    results[case].add_round(per_round[case])
    except KeyboardInterrupt:
        raise BenchStopped([results[case] for case in cases if results[case].runs], finished, turns.planned) from None
    return [results[case] for case in cases]


@dataclass(frozen=True)
class PromptTurn:
    """One prompt's turn in a bench: its `index`, the `cases` at this temperature, target-only's settings
    (`base`; `plain` at full speed, or None) and the round it belongs to."""

    index: int
    round_number: int
    cases: list[BenchCase]
    base: GenerationSettings
    plain: GenerationSettings | None
    ends_a_round: bool


class PromptTurns:
    """A bench's order of work, as `PromptTurn`s: for each temperature (after a warm-up, held to `grammar` when
    given), `repeat` rounds over the prompts: `planned` turns in all."""

    def __init__(self, session: Session, settings: GenerationSettings, cases: Sequence[BenchCase], n_prompts: int,
                 repeat: int, grammar: str | None = None, raw: bool = False) -> None:
        self._session, self._settings, self._cases = session, settings, cases
        self._n_prompts, self._repeat, self._grammar, self._raw = n_prompts, repeat, grammar, raw
        self._temperatures = list(dict.fromkeys(case.temperature for case in cases))
        self.planned = len(self._temperatures) * repeat * n_prompts

    def __iter__(self) -> Iterator[PromptTurn]:
        for temperature in self._temperatures:
            same_temperature = [case for case in self._cases if case.temperature == temperature]
            base = baseline_settings(self._settings, temperature)
            plain = plain_settings(self._session, base)
            warm_up(self._session, base, same_temperature, plain, grammar=self._grammar, raw=self._raw)
            for round_number in range(self._repeat):
                for index in range(self._n_prompts):
                    yield PromptTurn(index, round_number, same_temperature, base, plain, index == self._n_prompts - 1)


Runs = dict[BenchCase | None | str, Generation]  # one prompt's generations: by case, None (target-only) or PLAIN


def _measure_prompt(
    session: Session, turn: PromptTurn, tokens: list[int], cold: bool,
    on_run: Callable[[BenchCase | None | str, int, Generation], None] | None,
) -> Runs:
    """Every run of the turn's prompt (`tokens`): target-only (at full speed too, given `turn.plain`) and each
    case, in an order that rotates with the prompt and the round."""
    order: list[BenchCase | None | str] = [None, *turn.cases, *([PLAIN] if turn.plain else [])]
    shift = (turn.index + turn.round_number) % len(order)
    runs: Runs = {}
    for case in order[shift:] + order[:shift]:
        if cold:
            session.learned_lengths = LearnedLengths()
        if case == PLAIN:
            runs[case] = generate(session, tokens, turn.plain, speculative=False)
        else:
            runs[case] = generate(session, tokens, case_settings(turn.base, case), speculative=case is not None)
        if on_run is not None:
            on_run(case, turn.index, runs[case])
    return runs


def _record(result: BenchResult, runs: Runs, case: BenchCase) -> None:
    """Add one prompt's runs for `case` to `result`."""
    result.speculative.add(runs[case].stats)
    result.baseline.add(runs[None].stats)
    if PLAIN in runs:
        result.plain = result.plain or SpecStats()
        result.plain.add(runs[PLAIN].stats)
        result.plain_identical_prompts += runs[PLAIN].tokens == runs[None].tokens
    result.identical_prompts += runs[case].tokens == runs[None].tokens
    result.runs += 1


def best_by_temperature(results: Sequence[BenchResult]) -> dict[float, BenchResult]:
    """The fastest configuration at each temperature."""
    best: dict[float, BenchResult] = {}
    for result in results:
        current = best.get(result.case.temperature)
        if current is None or result.speedup > current.speedup:
            best[result.case.temperature] = result
    return best


def best_overall(results: Sequence[BenchResult], verify: str = "coupled") -> tuple[str, int | str, float]:
    """(strategy, draft_max, geometric-mean speed-up over the faster target-only decoding) of the configuration
    fastest across all temperatures, among the results measured with verification `verify` (what a saved
    profile will run)."""
    by_config: dict[tuple[str, int | str], list[float]] = {}
    for result in results:
        if result.case.verify == verify:
            by_config.setdefault((result.case.strategy, result.case.draft_max), []).append(max(result.speedup_over_plain, 1e-9))
    if not by_config:
        raise InputError(f"nothing was measured with verify = {verify}, the profile's: add it to --verify")
    (strategy, draft_max), speedups = max(by_config.items(), key=lambda item: statistics.geometric_mean(item[1]))
    return strategy, draft_max, statistics.geometric_mean(speedups)


def save_fastest(profile_name: str, results: Sequence[BenchResult], verify: str = "coupled") -> Path | None:
    """Write the fastest strategy and draft length across temperatures (measured with the profile's
    verification, `verify`) into the profile; None when it is slower than the target alone."""
    strategy, draft_max, speedup = best_overall(results, verify)
    if speedup < 1.0:
        return None
    return update_profile(profile_name, {"speculative.strategy": strategy, "speculative.draft_max": draft_max})


def baseline_settings(settings: GenerationSettings, temperature: float) -> GenerationSettings:
    """The target-only side at `temperature`: coupled sampling, so coupled cases can match it token for token."""
    return dataclasses.replace(settings, sampling=dataclasses.replace(settings.sampling, temperature=temperature),
                               speculative=dataclasses.replace(settings.speculative, verify="coupled"))


PLAIN = "plain"  # (in a prompt's rotation: target-only decoding at full speed)


def plain_settings(session: Session, base: GenerationSettings) -> GenerationSettings | None:
    """Target-only decoding with a lone token read alone, where the baseline `base` pads it to a pair of rows
    instead (`speculative.same_text` on a target whose kernels compute it otherwise); else None."""
    if not (base.speculative.same_text and session.target.pads_a_lone_token):
        return None
    return dataclasses.replace(base, speculative=dataclasses.replace(base.speculative, same_text=False))


def case_settings(base: GenerationSettings, case: BenchCase | None) -> GenerationSettings:
    """`base` with the case's drafting configuration (`base` itself for target-only, None)."""
    if case is None:
        return base
    speculative = dataclasses.replace(
        base.speculative, strategy=case.strategy, draft_max=case.draft_max, verify=case.verify
    )
    return dataclasses.replace(base, speculative=speculative)


def generate(
    session: Session, tokens: list[int], settings: GenerationSettings, *, speculative: bool, grammar: str | None = None
) -> Generation:
    """One generation run to its end (held to `grammar` when given)."""
    generation = session.generation(tokens, settings, speculative=speculative, grammar=grammar)
    for _ in generation:
        pass
    return generation


def warm_up(
    session: Session, settings: GenerationSettings, cases: Sequence[BenchCase], plain: GenerationSettings | None = None,
    grammar: str | None = None, raw: bool = False,
) -> None:
    """One short generation each way (target-only at full speed too, given `plain`; held to `grammar` when
    given), so first-call costs (page faults, allocations, the grammar's vocabulary) are not timed."""
    tokens = prompt_tokens(session, ["Hello"], raw)[0]
    warm = dataclasses.replace(settings, max_tokens=8, seed=0)
    generate(session, tokens, warm, speculative=False, grammar=grammar)
    if plain is not None:
        generate(session, tokens, dataclasses.replace(plain, max_tokens=8, seed=0), speculative=False, grammar=grammar)
    for case in cases:
        generate(session, tokens, case_settings(warm, case), speculative=True, grammar=grammar)
