"""Command-line options generated from the settings table (`localspec.settings`).

Each declared flag becomes one click option whose type, range and help come
from the declaration, with the built-in default shown in brackets. An option
left out is None ("not given"), so the profile's value or the default applies.
A per-model flag such as `--threads` sets the target's and the draft's setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import click

from ..config.files import parse_user_json
from ..config.profiles import written_plainly
from ..errors import InputError
from ..settings import SETTINGS, Setting
from ..textin import clean_input


@dataclass(frozen=True)
class SettingOption:
    """One command-line option and the setting keys it sets."""

    flag: str
    keys: tuple[str, ...]

    @property
    def param(self) -> str:
        """The option's Python parameter name: '--n-ctx' -> 'n_ctx'."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def setting(self) -> Setting:
        return SETTINGS[self.keys[0]]

    def click_option(self) -> Callable:
        item = self.setting
        default = "" if item.default in (None, []) else f" [{item.default}]"
        kwargs: dict[str, Any] = {"help": f"{item.help}{default}", "type": click_type(item)}
        if item.kind is list:
            kwargs.update(multiple=True, type=str)
        if item.key.endswith(".path"):
            kwargs["type"] = click.Path()
        if item.key.endswith(".rpc"):
            kwargs["metavar"] = "HOST:PORT[,...]"
        if item.kind is bool:  # --memory/--no-memory; None when neither is given
            kwargs.update(type=bool, default=None)
            return click.option(f"{self.flag}/--no-{self.flag.removeprefix('--')}", self.param, **kwargs)
        return click.option(self.flag, self.param, **kwargs)


def _setting_options() -> tuple[SettingOption, ...]:
    by_flag: dict[str, list[str]] = {}
    for key, item in SETTINGS.items():
        if item.flag:
            by_flag.setdefault(item.flag, []).append(key)
    return tuple(SettingOption(flag, tuple(keys)) for flag, keys in by_flag.items())


SETTING_OPTIONS = _setting_options()


class _SaysWhatItWants:
    """For a click number type: text it cannot read as its number is refused in plain words ("'1.5' is not a
    whole number"; click's own are "not a valid integer range"), as is one written but in ASCII digits."""

    wanted: str
    parse: Callable[[str], Any]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            try:
                if not written_plainly(value):
                    raise ValueError(value)
                self.parse(value)
            except ValueError:
                self.fail(f"{value!r} is not {self.wanted}", param, ctx)  # type: ignore[attr-defined]
        return super().convert(value, param, ctx)  # type: ignore[misc]


class WholeNumbers(_SaysWhatItWants, click.IntRange):
    """An integer option, optionally in a range."""

    wanted, parse = "a whole number", int

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()  # (not `[x<=None]`)


class Numbers(_SaysWhatItWants, click.FloatRange):
    """A number option, optionally in a range."""

    wanted, parse = "a number", float


class NumberOrWord(click.ParamType):
    """A number in the setting's range, or one of its words (e.g. `--draft-max adaptive`)."""

    def __init__(self, number: click.ParamType | type, words: tuple[str, ...]) -> None:
        self.number = number if isinstance(number, click.ParamType) else click.types.convert_type(number)
        self.words = words
        self.name = f"{self.number.name}|{'|'.join(words)}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value in self.words:
            return value
        try:
            return self.number.convert(value, param, ctx)
        except click.BadParameter as exc:
            words = " or ".join(repr(word) for word in self.words)
            if "is not a " in exc.message:  # a number it cannot read: "'x' is not a whole number"
                wanted = exc.message.partition(" is not ")[2]
                self.fail(f"{value!r} is neither {wanted} nor {words}", param, ctx)
            self.fail(f"{exc.message} (or {words})", param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return f"[{'|'.join(('N', *self.words))}]"


def click_type(item: Setting) -> click.ParamType | type:
    """The click type for a setting: its range, its choices, or a number-or-word such as `adaptive`."""
    if item.words:
        return NumberOrWord(click_type(Setting(**{**item.__dict__, "words": ()})), item.words)
    if item.choices:
        return click.Choice(item.choices)
    if item.kind is int:
        return WholeNumbers(item.low, item.high)
    if item.kind is float:
        return Numbers(item.low, item.high, min_open=item.low_open)
    return str


def all_of(*decorators: Callable[[Callable], Callable]) -> Callable[[Callable], Callable]:
    """One decorator applying `decorators` in order, the first one outermost (as if stacked)."""

    def decorate(command: Callable) -> Callable:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return decorate


def setting_options(*, exclude: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """A decorator adding every setting's option to a command (except the keys in `exclude`)."""
    return all_of(*(option.click_option() for option in SETTING_OPTIONS if not set(option.keys) & set(exclude)))


def setting_flags(options: dict[str, Any]) -> dict[str, Any]:
    """The parsed options of `setting_options` as dotted setting keys (None: not given).

    Removes those options from `options`, leaving the command's own. Text that
    is not valid UTF-8 (`--system`, `--stop`) is cleaned, with one warning.
    """
    flags: dict[str, Any] = {}
    for option in SETTING_OPTIONS:
        if option.param not in options:
            continue
        value = options.pop(option.param)
        if option.setting.kind is list:
            value = [clean_input(item, option.flag) for item in value] or None
        elif isinstance(value, str) and not option.keys[0].endswith(".path"):  # a path names a file as the bytes were
            value = clean_input(value, option.flag)
        for key in option.keys:
            flags[key] = value
    return flags


def _profile_from_the_environment(ctx: click.Context, param: click.Parameter, name: str | None) -> str | None:
    """A profile named by LOCALSPEC_PROFILE must exist, and the error says where its name came from
    (a stale variable in a shell's startup file is otherwise hard to find)."""
    if name is not None and ctx.get_parameter_source(param.name or "") is click.core.ParameterSource.ENVIRONMENT:
        from ..config.profiles import check_name, missing_profile_text, profile_file
        from ..errors import InputError

        try:
            check_name(name)  # a name no profile can have (a path)
        except InputError as exc:
            raise click.UsageError(f"LOCALSPEC_PROFILE={name}: {exc}") from None
        if profile_file(name) is None:  # (a home that cannot be read is said as such: not the variable's fault)
            raise click.UsageError(f"LOCALSPEC_PROFILE={name}: {missing_profile_text(name)}")
    return name


# Switches of the commands themselves, not settings.
PROFILE_OPTION = click.option(
    "--profile", "-p", envvar="LOCALSPEC_PROFILE", callback=_profile_from_the_environment,
    help="Profile to run (default: the configured one, else demo; LOCALSPEC_PROFILE sets it too).",
)
SPECULATIVE_OPTION = click.option("--no-speculative", is_flag=True, help="Target only: the baseline, one target pass per token.")
STATS_OPTION = click.option("--stats", is_flag=True, help="Print a summary on stderr at the end (tokens, speed, acceptance, seed, where each model runs).")
VERBOSE_OPTION = click.option("--verbose", is_flag=True, help="Show llama.cpp's own log on stderr.")
TEMPLATE_VARIABLES_OPTION = click.option(
    "--chat-template-kwargs", "template_kwargs", metavar="JSON",
    help="More of the chat template's inputs, as a JSON object (llama.cpp's name): "
         "'{\"enable_thinking\": false}' for Qwen3, '{\"reasoning_effort\": \"high\"}' for gpt-oss.")


def template_variables_from_option(text: str | None) -> dict[str, Any]:
    """`--chat-template-kwargs` read and checked (`chat_template.variables_problem`); bad input is InputError."""
    if text is None:
        return {}
    from ..runtime.chat_template import variables_problem  # (Jinja: imported where a command asks for it)

    value = parse_user_json(text, "--chat-template-kwargs")
    problem = variables_problem(value)
    if problem is not None:
        raise InputError(f"--chat-template-kwargs: {problem}")
    return value
