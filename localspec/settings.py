"""Every setting localspec has, declared once.

A setting is a field of one of the frozen dataclasses below, declared with
`setting(...)`: its default, its range, its help text and its command-line flag.
Its profile key is the dataclass's section plus the field name
(`sampling.temperature`); the dataclass says which layer uses it. Everything
else is derived from these declarations: the command-line options
(`localspec.cli.options`), profile validation (types, ranges, unknown keys),
the built-in defaults, `profile show`'s value-and-source table and the
settings echoed by `--json`.

Adding a setting is one `setting(...)` line here plus the code that uses it.
This module imports nothing from the rest of localspec but its errors, so
every layer can use it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
import secrets
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar, Iterator, Mapping, TypeVar

from .errors import InputError

ROLES = ("target", "draft")
STRATEGIES = ("model", "ngram", "hybrid")
VERIFY_MODES = ("coupled", "rejection")
REPACK_MODES = ("auto", "on", "off")
ADAPTIVE = "adaptive"
ALL_LAYERS = "all"  # n_gpu_layers: offload every layer
ADAPTIVE_DRAFT_LIMIT = 32  # the longest draft an adaptive draft length considers
BUILTIN_MODELS = ("smollm2-135m-instruct-f32", "smollm2-135m-instruct-q4_1")
SEED_MAX = 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
# max_tokens where none is given. Output held to a format gets more room: cut short, it is not valid at all,
# and a small model's answer may list many items or repeat itself until a bound of the format ends it.
FREE_TEXT_MAX_TOKENS = 512
STRUCTURED_MAX_TOKENS = 2048
THINKING_MAX_TOKENS = 8192  # a reply that may think first: its thought and then its answer (fitted to the context)
MAX_THREADS = 512  # ggml's own limit (GGML_MAX_N_THREADS): more threads crash the process, with no message
INT_MAX = 2**31 - 1  # an integer setting without a declared maximum: llama.cpp's C ints would wrap above this


@dataclass(frozen=True)
class Setting:
    """One declared setting, as the CLI, profiles and `profile show` see it."""

    key: str  # "sampling.temperature", or "name" at a profile's top level
    kind: type  # bool, int, float, str or list (a list of strings)
    default: Any
    help: str
    layer: str  # who uses it: model files, model runtime, sampling, speculative, generation, chat, profile
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the range excludes `low` itself
    choices: tuple[str, ...] | None = None
    words: tuple[str, ...] = ()  # strings accepted beside numbers of `kind`, e.g. "adaptive"
    flag: str | None = None  # command-line option; None: profiles only
    request: tuple[str, ...] = ()  # the field names an API request (`serve`) sets it with

    def problem(self, value: Any) -> str | None:
        """Why `value` is not valid for this setting ("key must be ..."), or None."""
        if value is None or value in self.words:
            return None  # None: not set, the layer's own default applies
        if not _has_kind(value, self.kind):
            also = "".join(f" or {shown_value(word)}" for word in self.words)
            return f"{self.key} must be {_KIND_NAMES[self.kind]}{also}, got {shown_value(value)}"
        if isinstance(value, float) and not math.isfinite(value):  # nan passes every comparison, inf every lower bound
            return f"{self.key} must be a finite number, got {shown_value(value)}"
        if self.kind is float and isinstance(value, int) and not _fits_a_float(value):
            return f"{self.key} must be a finite number, got an integer of {len(str(abs(value)))} digits"
        texts = value if self.kind is list else [value] if isinstance(value, str) else []
        if any(_SURROGATE.search(text) for text in texts):
            return f"{self.key} must be valid UTF-8 text, got {shown_value(value)}"  # a lone surrogate cannot be written or tokenized
        if self.kind is list and "" in texts:
            return f"{self.key} must not hold an empty text, got {shown_value(value)}"  # (an empty stop string matches nowhere)
        if self.choices is not None and value not in self.choices:
            return f"{self.key} must be one of {', '.join(self.choices)}, got {shown_value(value)}"
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and value > self.high
        if below or above:
            return f"{self.key} must be {self.range_text()}, got {shown_value(value)}"
        if self.kind is int and self.high is None and value > INT_MAX:
            return f"{self.key} must be at most {INT_MAX}, got {shown_value(value)}"
        return None

    def range_text(self) -> str:
        """The valid range in words: '>= 0.0', 'between 1 and 256', '> 0 and <= 1'."""
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low}"
        if self.low_open:
            return f"> {self.low} and <= {self.high}"
        return f"between {self.low} and {self.high}"


def setting(
    default: Any,
    help: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    choices: tuple[str, ...] | None = None,
    words: tuple[str, ...] = (),
    flag: str | dict[str, str] | None = None,
    request: str | tuple[str, ...] = (),
) -> Any:
    """Declare a settings-dataclass field (see the module docstring).

    `flag` is the command-line option; for per-model settings a plain string
    sets the value for both models and a {role: flag} mapping names one per role.
    `request` names the field(s) of an API request that set it (`localspec serve`).
    """
    request = (request,) if isinstance(request, str) else tuple(request)
    spec = dict(help=help, low=low, high=high, low_open=low_open, choices=choices, words=words, flag=flag, request=request)
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata={"setting": spec})
    return field(default=default, metadata={"setting": spec})


G = TypeVar("G", bound="SettingsGroup")


class SettingsGroup:
    """Base of the settings dataclasses: checks every declared field when one is created."""

    SECTION: ClassVar[str]  # the profile section; "{role}" for per-model settings
    LAYER: ClassVar[str]

    def __post_init__(self) -> None:
        for item in declared(type(self), role="model"):  # per-model settings are named model.<name> here
            message = item.problem(_as_profile_value(getattr(self, item.key.rpartition(".")[2])))
            if message is not None:
                raise InputError(message)

    def to_values(self, role: str | None = None) -> dict[str, Any]:
        """The declared settings as dotted-key values (the inverse of `from_values`; lists for tuples)."""
        return {
            item.key: _as_profile_value(getattr(self, item.key.rpartition(".")[2])) for item in declared(type(self), role)
        }

    @classmethod
    def from_values(cls: type[G], values: Mapping[str, Any], role: str | None = None) -> G:
        """An instance from dotted-key values (keys not given, or given as None, keep their defaults), each checked
        under its own key."""
        kwargs = {}
        for item in declared(cls, role):
            if values.get(item.key) is not None:
                value = values[item.key]
                problem = item.problem(value)
                if problem is not None:
                    raise InputError(problem)  # "target.n_ctx must be …", where the dataclass would say "model.n_ctx"
                kwargs[item.key.rpartition(".")[2]] = tuple(value) if item.kind is list else value
        return cls(**kwargs)


# -- the settings ------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileInfo(SettingsGroup):
    """What a profile says about itself."""

    SECTION = ""
    LAYER = "profile"

    name: str | None = setting(None, "The profile's name (its file name is what counts).")
    description: str | None = setting(None, "One line describing the profile.")


@dataclass(frozen=True)
class ModelLocation(SettingsGroup):
    """Where a model file comes from: exactly one of a path, a hub file or a built-in model."""

    SECTION = "{role}"
    LAYER = "model files"

    path: str | None = setting(
        None, "The {role} model's GGUF file ($VARS and ~ expand).", flag={"target": "--target", "draft": "--draft"}
    )
    hf_repo: str | None = setting(None, "Hugging Face repository holding the file (with hf_file).")
    hf_file: str | None = setting(None, "File in hf_repo (fetched by `localspec pull`).")
    builtin: str | None = setting(None, "A model that ships with localspec.", choices=BUILTIN_MODELS)


@dataclass(frozen=True)
class ModelSettings(SettingsGroup):
    """How llama.cpp runs one model. None means llama.cpp's (or the model's) own default."""

    SECTION = "{role}"
    LAYER = "model runtime"

    n_gpu_layers: int | str | None = setting(
        None, "Layers of the {role} model to offload to the GPU, or 'all' (the default, where a GPU exists); 0: none.",
        low=0, words=(ALL_LAYERS,), flag={"target": "--n-gpu-layers", "draft": "--draft-n-gpu-layers"},
    )
    rpc: tuple[str, ...] = setting(
        (), "RPC workers (HOST:PORT, comma-separated or repeated) to spread the {role} model's layers over (`localspec worker`).",
        flag={"target": "--rpc", "draft": "--draft-rpc"},
    )
    repack: str = setting(
        "auto", "llama.cpp's repacked CPU weight layouts for the {role} model: 'auto' (on where a one-time probe"
        " on this machine finds them working), 'on' or 'off'.",
        choices=REPACK_MODES, flag={"target": "--repack", "draft": "--draft-repack"},
    )
    prompt_cache: bool = setting(
        True, "Keep the model's reading of the last prompt in the cache folder, so that a later run whose"
        " prompt starts alike (a system prompt, an instruction) skips reading that part (on the CPU, where llama.cpp"
        " reads a text alike in any batches).", flag="--prompt-cache",
    )
    n_threads: int | None = setting(None, "CPU threads (default: all cores).", low=1, high=MAX_THREADS, flag="--threads")
    n_ctx: int | None = setting(4096, "Context size in tokens (llama.cpp rounds it up to a multiple of 256).", low=16, flag="--n-ctx")
    n_batch: int = setting(512, "Most tokens per llama.cpp batch (a target pass verifies at most this many: 2 or more"
                           " to draft).", low=1, flag="--n-batch")


@dataclass(frozen=True)
class SamplingParams(SettingsGroup):
    """How one next-token distribution is shaped, identically for draft and target.

    `top_k=0`, `top_p=1` and `min_p=0` switch a filter off; so do `repeat_penalty=1`, `presence_penalty=0` and
    `frequency_penalty=0` (see `engine.penalties`). The defaults use
    min-p alone: top-k and top-p cut the draft's and the target's supports in
    different places, which costs acceptance (measured on the demo pair at
    temperature 0.8: 95% with min-p alone, 84% with top-k 40 and top-p 0.95 added).
    """

    SECTION = "sampling"
    LAYER = "sampling"

    temperature: float = setting(0.8, "0 = greedy.", low=0.0, flag="--temperature", request="temperature")
    top_k: int = setting(0, "Keep the k most likely tokens; 0 = off.", low=0, flag="--top-k", request="top_k")
    top_p: float = setting(1.0, "Keep the most likely tokens up to this mass; 1 = off, 0 = the most likely alone.",
                           low=0, high=1, flag="--top-p", request="top_p")
    min_p: float = setting(0.05, "Drop tokens below this fraction of the top one's probability; 0 = off.", low=0.0, high=1.0, flag="--min-p", request="min_p")
    repeat_penalty: float = setting(
        1.0, "Divide the scores of tokens among the last repeat_last_n by this (multiply where not positive); 1 = off.",
        low=0.05, high=20.0, flag="--repeat-penalty", request=("repeat_penalty", "repetition_penalty"),
    )
    presence_penalty: float = setting(
        0.0, "Lower the scores of tokens among the last repeat_last_n by this; 0 = off.", low=-2.0, high=2.0,
        flag="--presence-penalty", request="presence_penalty",
    )
    frequency_penalty: float = setting(
        0.0, "Lower the scores of tokens among the last repeat_last_n by this times their count there; 0 = off.",
        low=-2.0, high=2.0, flag="--frequency-penalty", request="frequency_penalty",
    )
    repeat_last_n: int = setting(
        64, "How many of the latest tokens (the prompt's too) the three penalties count; -1 = all of them, 0 = none"
        " (the penalties off).", low=-1, flag="--repeat-last-n", request=("repeat_last_n", "penalty_last_n"),
    )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class SpeculativeParams(SettingsGroup):
    """What drafts, and how much each target pass."""

    SECTION = "speculative"
    LAYER = "speculative"

    strategy: str = setting(
        "hybrid", "What drafts: a draft model, n-gram lookup in the context, or both (lookup when it matches).",
        choices=STRATEGIES, flag="--strategy", request="strategy",
    )
    verify: str = setting(
        "coupled", "How drafts are verified: 'coupled' (the same seed gives the same text with or without"
        " speculation) or 'rejection' (rejection sampling: the same distribution; the text depends on the drafts).",
        choices=VERIFY_MODES, flag="--verify", request="verify",
    )
    same_text: bool = setting(
        True, "Compute every target pass as a batch, a lone token with a second row, so that the same seed gives"
        " the same text with or without speculation where llama.cpp computes a lone token otherwise (its default CPU"
        " build); off: a lone token at full speed there (target-only decoding 1.3-1.6x as fast on the demo target),"
        " the text may part from --no-speculative's at a near-tie, still an exact sample of the target.",
        flag="--same-text", request="same_text",
    )
    draft_max: int | str = setting(
        ADAPTIVE, f"Most draft tokens per target pass, or '{ADAPTIVE}': chosen each pass from measured acceptance and costs.",
        low=1, high=256, words=(ADAPTIVE,), flag="--draft-max", request=("draft_max", "speculative.n_max"),
    )  # (llama-server's per-request names taken too, for its clients: speculative.n_max, .n_min, .p_min)
    draft_min: int = setting(0, "A draft shorter than this is dropped (plain decoding that step).", low=0, high=256,
                             flag="--draft-min", request=("draft_min", "speculative.n_min"))
    p_min: float = setting(0.0, "Stop drafting when the draft model's confidence falls below this.", low=0.0,
                           high=1.0, flag="--p-min", request=("p_min", "speculative.p_min"))
    ngram_min: int = setting(2, "Shortest n-gram the lookup matches.", low=1, high=16, flag="--ngram-min", request="ngram_min")
    ngram_max: int = setting(4, "Longest n-gram the lookup matches.", low=1, high=16, flag="--ngram-max", request="ngram_max")
    memory: bool = setting(
        True, "Draft from the memory of earlier text on this machine too (hybrid and ngram, coupled verification;"
        " `localspec memory` shows and clears it).", flag="--memory", request="memory",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.draft_min > self.longest_draft:
            longest = f"{ADAPTIVE}, which drafts up to {ADAPTIVE_DRAFT_LIMIT}" if self.adaptive else self.draft_max
            raise InputError(f"speculative.draft_min ({self.draft_min}) must not exceed speculative.draft_max ({longest})")
        if self.ngram_min > self.ngram_max:
            raise InputError(
                f"speculative.ngram_min ({self.ngram_min}) must not exceed speculative.ngram_max ({self.ngram_max})"
            )

    @property
    def adaptive(self) -> bool:
        return self.draft_max == ADAPTIVE

    @property
    def longest_draft(self) -> int:
        """The most draft tokens a pass may hold."""
        return ADAPTIVE_DRAFT_LIMIT if self.draft_max == ADAPTIVE else int(self.draft_max)

    @property
    def uses_draft_model(self) -> bool:
        return self.strategy != "ngram"


@dataclass(frozen=True)
class GenerationSettings(SettingsGroup):
    """Everything that decides what one generation produces."""

    SECTION = "sampling"
    LAYER = "generation"

    sampling: SamplingParams = field(default_factory=SamplingParams)
    speculative: SpeculativeParams = field(default_factory=SpeculativeParams)
    max_tokens: int | None = setting(
        None, f"Most tokens to generate (default {FREE_TEXT_MAX_TOKENS}; {STRUCTURED_MAX_TOKENS} for output held to a"
        f" format or tools, which is no use cut short; {THINKING_MAX_TOKENS} for a model that thinks first).",
        low=1, flag="--max-tokens", request=("max_tokens", "max_completion_tokens")
    )
    reasoning_budget: int | None = setting(
        None, "Most tokens a thinking model may think before it answers: its thought is then closed for it (the same"
        " with or without speculation); 0 = answer at once; -1 or not set = no bound. Held where the tag that closes"
        " a thought is one special token (Qwen3, DeepSeek R1, gpt-oss...).",
        low=-1, flag="--reasoning-budget", request=("thinking_budget_tokens", "reasoning_budget"),
    )
    stop: tuple[str, ...] = setting((), "Stop when this text appears (repeatable).", flag="--stop", request="stop")
    seed: int | None = setting(None, "Random seed: same seed and settings, same output.", low=0, high=SEED_MAX, flag="--seed", request="seed")

    @classmethod
    def from_values(cls, values: Mapping[str, Any], role: str | None = None) -> "GenerationSettings":
        own = super().from_values(values)
        return dataclasses.replace(
            own, sampling=SamplingParams.from_values(values), speculative=SpeculativeParams.from_values(values)
        )

    def to_values(self, role: str | None = None) -> dict[str, Any]:
        return {**self.sampling.to_values(), **self.speculative.to_values(), **super().to_values()}

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The dotted keys these settings hold: sampling, speculative and generation settings."""
        return tuple(item.key for group in (SamplingParams, SpeculativeParams, cls) for item in declared(group))

    def with_values(self, values: Mapping[str, Any], source: str = "") -> "GenerationSettings":
        """A copy with `values` (dotted keys) replacing these settings: each value checked, then the rules between them.

        The one check for generation settings from outside (profiles, the plan, chat `/set`, requests):
        an InputError, prefixed with `source` ("profile demo", "/set"), names what is wrong. When a rule
        fails because of a value that `values` does not give, the message says to set that one too.
        """
        prefix = f"{source}: " if source else ""
        own_keys = self.keys()
        for key, value in values.items():
            if key not in own_keys:
                raise InputError(f"{prefix}{key!r} is not a generation setting")
            problem = SETTINGS[key].problem(value)
            if problem is not None:
                raise InputError(prefix + problem)
        current = self.to_values()
        try:
            return self.from_values({**current, **values})
        except InputError as exc:
            unset = [key for key in own_keys if key in str(exc) and key not in values]
            advice = "".join(f" ({key} is {current[key]!r} when not given: set it too)" for key in unset)
            raise InputError(f"{prefix}{exc}{advice}") from None

    @property
    def thought_budget(self) -> int | None:
        """The most tokens a thought may hold, or None: no bound (`reasoning_budget` not set, or -1)."""
        return None if self.reasoning_budget is None or self.reasoning_budget < 0 else self.reasoning_budget

    def with_seed(self) -> "GenerationSettings":
        """A copy with a concrete seed, drawn at random when none was given."""
        return self if self.seed is not None else dataclasses.replace(self, seed=secrets.randbits(32))

    def budget(self, structured: bool, thinking: bool = False) -> int:
        """max_tokens, or where none was given, the default for free text, for `structured` output (held to
        a format or tools), or for a reply that may think first (`thinking`)."""
        if self.max_tokens is not None:
            return self.max_tokens
        if thinking:
            return THINKING_MAX_TOKENS
        return STRUCTURED_MAX_TOKENS if structured else FREE_TEXT_MAX_TOKENS

    def with_budget(self, structured: bool, thinking: bool = False) -> "GenerationSettings":
        """A copy with a concrete max_tokens (see `budget`)."""
        if self.max_tokens is not None:
            return self
        return dataclasses.replace(self, max_tokens=self.budget(structured, thinking))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ChatSettings(SettingsGroup):
    """How a conversation becomes a prompt."""

    SECTION = "chat"
    LAYER = "chat"

    system_prompt: str | None = setting(None, "System prompt.", flag="--system")
    template: str | None = setting(None, "Jinja chat template overriding the model's own.")


GROUPS: tuple[type[SettingsGroup], ...] = (
    ProfileInfo, ModelLocation, ModelSettings, SamplingParams, SpeculativeParams, GenerationSettings, ChatSettings,
)


# -- the derived table --------------------------------------------------------------------


@lru_cache(maxsize=None)
def declared(group: type[SettingsGroup], role: str | None = None) -> tuple[Setting, ...]:
    """The settings a group declares; per-model groups need `role` (target or draft)."""
    return tuple(_declared(group, role))


def _declared(group: type[SettingsGroup], role: str | None) -> Iterator[Setting]:
    hints = typing.get_type_hints(group)
    section = group.SECTION.format(role=role) if "{role}" in group.SECTION else group.SECTION
    for item in dataclasses.fields(group):
        spec = item.metadata.get("setting")
        if spec is None:
            continue
        flag = spec["flag"]
        if isinstance(flag, dict):
            flag = flag.get(role or "")
        default = item.default if item.default is not dataclasses.MISSING else list(item.default_factory())
        yield Setting(
            key=f"{section}.{item.name}" if section else item.name,
            kind=_kind_of(hints[item.name]),
            default=default,
            help=spec["help"].format(role=role) if role else spec["help"],
            layer=group.LAYER,
            low=spec["low"],
            high=spec["high"],
            low_open=spec["low_open"],
            choices=spec["choices"],
            words=spec["words"],
            flag=flag,
            request=spec["request"],
        )


def _all_settings() -> dict[str, Setting]:
    table: dict[str, Setting] = {}
    for group in GROUPS:
        roles = ROLES if "{role}" in group.SECTION else (None,)
        for role in roles:
            table.update((item.key, item) for item in declared(group, role))
    return table


def _kind_of(hint: Any) -> type:
    if typing.get_origin(hint) is tuple:
        return list
    options = [arg for arg in typing.get_args(hint) if arg is not type(None) and arg is not str]
    if not options and str in typing.get_args(hint):
        return str
    return options[0] if options else hint


def _as_profile_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _fits_a_float(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def shown_value(value: Any) -> str:
    """A setting's value in an error message as a person wrote it: in JSON's and TOML's form (`true`, `"no"`,
    `["a"]`: a request's or a profile's), a number that is not finite as typed (`nan`, `inf`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    try:
        text = json.dumps(value, ensure_ascii=False)
        return json.dumps(value) if _SURROGATE.search(text) else text  # (a lone surrogate escaped: it cannot be printed)
    except (TypeError, ValueError, RecursionError):
        if isinstance(value, (datetime.date, datetime.time)):  # (TOML's dates and times, as TOML writes them)
            return value.isoformat()
        return repr(value)


def _has_kind(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is list:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    return isinstance(value, kind)


_KIND_NAMES = {bool: "true or false", float: "a number", int: "an integer", str: "a string", list: "a list of strings"}


SETTINGS: dict[str, Setting] = _all_settings()
"""Every setting by its dotted key, in declaration order."""

SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(key.rpartition(".")[0] for key in SETTINGS))
"""Profile sections in declaration order ("" is the top level)."""

DEFAULTS: dict[str, Any] = {
    key: item.default for key, item in SETTINGS.items() if item.layer not in (ModelLocation.LAYER, ProfileInfo.LAYER)
}
"""Built-in values of everything a run uses (None: llama.cpp's or the model's own default applies)."""
