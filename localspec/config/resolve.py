"""Which value every setting takes, and where it came from.

Precedence for every setting: command-line flag > profile > built-in default.
The profile is `--profile` / `LOCALSPEC_PROFILE`, else the configured default,
else the shipped `demo`; a `--target` without a named profile runs no profile.
Nothing here touches model files: `profile show` needs only this, and
`localspec.app.plan` builds a run's plan on top of it.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import InputError
from ..settings import DEFAULTS, ROLES, SETTINGS, shown_value
from .paths import config_file
from .profiles import LOCATION_KEYS, Profile, load_profile
from .user_config import default_profile_name

DEMO_PROFILE = "demo"
DEFAULT_SOURCE = "default"
FLAG_SOURCE = "flag"
PROFILE_VARIABLE = "LOCALSPEC_PROFILE"


def profile_without_a_flag() -> tuple[str, str]:
    """The profile commands run when no -p names one, and where its name comes from: LOCALSPEC_PROFILE, else
    the configured default (config.toml), else the shipped demo. A broken config.toml raises InputError."""
    from_the_environment = os.environ.get(PROFILE_VARIABLE)
    if from_the_environment:
        return from_the_environment, PROFILE_VARIABLE
    configured = default_profile_name()
    return (configured, "config.toml") if configured else (DEMO_PROFILE, "built in")


@dataclass(frozen=True)
class ResolvedSettings:
    """The merged settings of one command and the source of each ("flag", "profile NAME (…)", "default")."""

    profile: Profile | None
    values: dict[str, Any]
    sources: dict[str, str]

    def has_model(self, role: str) -> bool:
        """Whether the target or draft has a location (a path, a hub file or a built-in model)."""
        return any(f"{role}.{key}" in self.values for key in LOCATION_KEYS)

    def describe(self, *keys: str) -> str:
        """Each key's value and where it came from, for messages about combinations of settings: a flag's as it
        was typed (`--n-batch 1`), else `key = value (source)`, the value in TOML's form."""
        return ", ".join(self._described(key) for key in keys)

    def _described(self, key: str) -> str:
        value, source = self.values.get(key), self.sources.get(key, DEFAULT_SOURCE)
        flag = SETTINGS[key].flag if key in SETTINGS else None
        typed = value if isinstance(value, list) else [value]
        if source == FLAG_SOURCE and flag and typed and all(isinstance(item, (str, int, float)) and
                                                            not isinstance(item, bool) for item in typed):
            return " ".join(f"{flag} {shlex.quote(item) if isinstance(item, str) else shown_value(item)}"
                            for item in typed)
        return f"{key} = {shown_value(value)} ({source})"


def choose_profile(explicit: str | None, target_given: bool) -> Profile | None:
    """The profile a command runs (None: paths given on the command line alone); an `explicit` name that no
    profile can have (`--profile ""`) is refused, not taken for none."""
    if explicit is not None:
        return load_profile(explicit)
    if target_given:
        return None
    configured = default_profile_name()
    if configured is None:
        return load_profile(DEMO_PROFILE)
    try:
        return load_profile(configured)
    except InputError as exc:  # (say where the name came from: the user did not type it)
        raise InputError(f"{config_file()}: default_profile {configured!r}: {exc}") from None


def _paths_from_its_folder(profile: Profile) -> dict[str, Any]:
    """`profile`'s values with a relative model path (one written by hand: localspec stores them absolute) read
    from the profile's folder, not from wherever a command runs (one that starts with a variable this environment
    does not set is left as written, its error naming the variable, unless the profile's folder has a file of
    that very name: `$lit.gguf`)."""
    values = dict(profile.values)
    for role in ROLES:
        stored = values.get(f"{role}.path")
        if isinstance(stored, str) and profile.path is not None:
            expanded = os.path.expanduser(os.path.expandvars(stored))
            in_its_folder = os.path.join(profile.path.parent, stored)
            if not (os.path.isabs(expanded) or (expanded.startswith("$") and not os.path.lexists(in_its_folder))):
                values[f"{role}.path"] = in_its_folder
    return values


def resolve_settings(profile_name: str | None, flags: Mapping[str, Any]) -> ResolvedSettings:
    """Merge the built-in defaults, the chosen profile and the flags that were given (None: not given)."""
    given = {key: value for key, value in flags.items() if value is not None}
    if "draft.path" in given and "target.path" not in given and profile_name is None:
        raise InputError("--draft needs --target (or --profile)")
    profile = choose_profile(profile_name, "target.path" in given)
    values = dict(DEFAULTS)
    sources = {key: DEFAULT_SOURCE for key in DEFAULTS}
    if profile is not None:
        label = f"profile {profile.name} ({profile.source})"
        values.update(_paths_from_its_folder(profile))
        sources.update({key: label for key in profile.values})
    for role in ROLES:
        if f"{role}.path" in given:  # a path on the command line replaces the profile's location
            for key in (*LOCATION_KEYS, "hf_file"):
                values.pop(f"{role}.{key}", None)
                sources.pop(f"{role}.{key}", None)
    values.update(given)
    sources.update({key: FLAG_SOURCE for key in given})
    return ResolvedSettings(profile, values, sources)


def strategy_needs_a_draft(settings: ResolvedSettings) -> bool:
    """Whether the settings choose a strategy that drafts with a model (a profile's or a flag's: the default
    one runs the target alone where there is no draft) and give no draft model."""
    return (settings.values.get("speculative.strategy") != "ngram" and not settings.has_model("draft")
            and settings.sources.get("speculative.strategy") != "default")


def without_a_draft(settings: ResolvedSettings) -> str:
    """What a profile whose strategy needs a draft model it does not give runs as (see `strategy_needs_a_draft`)."""
    return (f"{settings.describe('speculative.strategy')} needs a draft model, which this profile does not give: it"
            " runs only with --draft (or set draft.path, or speculative.strategy = \"ngram\")")
