"""What a command runs: the profile, the models and every setting, with where each came from.

Precedence for every setting: command-line flag > profile > built-in default.
The profile is `--profile` / `LOCALSPEC_PROFILE`, else the configured default,
else the shipped `demo`; a `--target` without a named profile runs no profile.
One function serves `run`, `bench` and `profile show`, so they always agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .config import default_profile_name
from .demo import demo_draft_path, demo_target_path
from .errors import InputError
from .generate import GenerationSettings, SpeculativeParams
from .hub import hub_local_path
from .model import ModelSettings
from .profile import Profile, load_profile
from .sampling import SamplingParams
from .session import ModelSpec

DEMO_PROFILE = "demo"
_LOCATION_KEYS = ("path", "hf_repo", "hf_file", "builtin")


def _builtin_defaults() -> dict[str, Any]:
    sampling, speculative, generation, model = SamplingParams(), SpeculativeParams(), GenerationSettings(), ModelSettings()
    defaults: dict[str, Any] = {f"sampling.{k}": v for k, v in sampling.to_dict().items()}
    defaults.update({f"speculative.{k}": getattr(speculative, k) for k in ("draft_max", "draft_min", "p_min")})
    defaults.update({"sampling.max_tokens": generation.max_tokens, "sampling.stop": [], "sampling.seed": None})
    for role in ("target", "draft"):
        defaults.update({f"{role}.{k}": v for k, v in model.to_dict().items()})
    return defaults


DEFAULTS = _builtin_defaults()


@dataclass(frozen=True)
class RunPlan:
    """The merged settings of one run and the source of each."""

    profile: Profile | None
    values: dict[str, Any]
    sources: dict[str, str]

    def generation_settings(self) -> GenerationSettings:
        v = self.values
        try:
            return GenerationSettings(
                sampling=SamplingParams(v["sampling.temperature"], v["sampling.top_k"], v["sampling.top_p"], v["sampling.min_p"]),
                speculative=SpeculativeParams(v["speculative.draft_max"], v["speculative.draft_min"], v["speculative.p_min"]),
                max_tokens=v["sampling.max_tokens"],
                stop=tuple(v["sampling.stop"]),
                seed=v["sampling.seed"],
            )
        except ValueError as exc:
            raise InputError(str(exc)) from None

    def model_settings(self, role: str) -> ModelSettings:
        v = self.values
        return ModelSettings(v[f"{role}.n_gpu_layers"], v[f"{role}.n_threads"], v[f"{role}.n_ctx"], v[f"{role}.n_batch"])

    @property
    def has_draft(self) -> bool:
        return any(f"draft.{key}" in self.values for key in _LOCATION_KEYS)

    @property
    def system_prompt(self) -> str | None:
        return self.values.get("chat.system_prompt")

    @property
    def template(self) -> str | None:
        return self.values.get("chat.template")


def choose_profile(explicit: str | None, target_given: bool) -> Profile | None:
    """The profile a command runs (None: paths given on the command line alone)."""
    if explicit:
        return load_profile(explicit)
    if target_given:
        return None
    return load_profile(default_profile_name() or DEMO_PROFILE)


def plan_run(profile_name: str | None, flags: dict[str, Any]) -> RunPlan:
    """Merge defaults, the chosen profile and the flags that were given (None means not given)."""
    flags = {key: value for key, value in flags.items() if value is not None}
    if "draft.path" in flags and "target.path" not in flags and not profile_name:
        raise InputError("--draft needs --target (or --profile)")
    profile = choose_profile(profile_name, "target.path" in flags)
    values = dict(DEFAULTS)
    sources = {key: "default" for key in DEFAULTS}
    if profile is not None:
        label = f"profile {profile.name} ({profile.source})"
        values.update(profile.values)
        sources.update({key: label for key in profile.values})
    for role in ("target", "draft"):
        if f"{role}.path" in flags:  # a path on the command line replaces the profile's location
            for key in _LOCATION_KEYS:
                values.pop(f"{role}.{key}", None)
                sources.pop(f"{role}.{key}", None)
    values.update(flags)
    sources.update({key: "flag" for key in flags})
    return RunPlan(profile, values, sources)


def model_path(
    plan: RunPlan,
    role: str,
    on_derive_start: Callable[[], None] | None = None,
    on_derive_progress: Callable[[int, int], None] | None = None,
) -> Path:
    """The local file for the target or draft: a path, a downloaded hub file or a built-in model."""
    values = plan.values
    if f"{role}.path" in values:
        return Path(os.path.expandvars(str(values[f"{role}.path"]))).expanduser()
    if f"{role}.hf_repo" in values:
        repo, filename = values[f"{role}.hf_repo"], values[f"{role}.hf_file"]
        path = hub_local_path(repo, filename)
        if not path.is_file():
            name = plan.profile.name if plan.profile else "PROFILE"
            raise InputError(f"{repo}/{filename} is not downloaded yet: run `localspec pull {name}`")
        return path
    builtin = values.get(f"{role}.builtin")
    if builtin == "smollm2-135m-instruct-q4_1":
        return demo_draft_path()
    if builtin == "smollm2-135m-instruct-f32":
        return demo_target_path(on_progress=on_derive_progress, on_start=on_derive_start)
    raise InputError(f"no {role} model: give --{role} PATH or a profile with a [{role}] section")


def resolve_models(
    plan: RunPlan,
    on_derive_start: Callable[[], None] | None = None,
    on_derive_progress: Callable[[int, int], None] | None = None,
) -> tuple[ModelSpec, ModelSpec | None]:
    """Target and draft to load for `plan` (draft None when the plan has none)."""
    target = ModelSpec(model_path(plan, "target", on_derive_start, on_derive_progress), plan.model_settings("target"))
    draft = None
    if plan.has_draft:
        draft = ModelSpec(model_path(plan, "draft", on_derive_start, on_derive_progress), plan.model_settings("draft"))
    return target, draft
