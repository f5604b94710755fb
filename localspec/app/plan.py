"""A command's plan, resolved once: the model files, every setting, and where each came from.

`resolve(profile, flags)` does all the resolving a command needs before any
weights load: it merges flags, profile and defaults (`localspec.config.resolve`),
finds or derives the model files (a path, a downloaded hub file, the demo's
derived F32 target), checks them from their headers (complete GGUF files, a
draft whose vocabulary matches the target's), and builds the settings objects
each layer uses. Commands consume the plan and never resolve again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..config.paths import model_path_here, same_file
from ..config.resolve import FLAG_SOURCE, ResolvedSettings, resolve_settings, strategy_needs_a_draft
from ..errors import InputError
from ..models.compat import check_file, check_pair, has_chat_template
from ..models.demo import demo_draft_path, demo_target_path
from ..models.hub import hub_local_path
from ..runtime.rpc import parse_endpoints
from ..settings import ChatSettings, GenerationSettings, ModelSettings

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class ModelChoice:
    """One model to load: its file and how llama.cpp should run it."""

    role: str  # "target" or "draft"
    path: Path
    runtime: ModelSettings


@dataclass(frozen=True)
class Plan:
    """Everything a command needs to load models and generate, checked before any weights load."""

    settings: ResolvedSettings
    target: ModelChoice
    draft: ModelChoice | None
    generation: GenerationSettings
    chat: ChatSettings
    notes: tuple[str, ...] = ()  # adjustments made to fit the settings together, to be shown once

    @property
    def profile_name(self) -> str | None:
        return self.settings.profile.name if self.settings.profile else None


def resolve(
    profile_name: str | None,
    flags: Mapping[str, Any],
    *,
    on_derive_start: Callable[[str], None] | None = None,
    on_progress: ProgressCallback | None = None,
    speculative: bool = True,
) -> Plan:
    """The plan for a command run with `flags` (dotted keys, None: not given) on `profile_name`;
    without `speculative` (the target alone) the draft is neither looked for nor checked."""
    settings = resolve_settings(profile_name, flags)
    with_draft = speculative and settings.has_model("draft")
    # The settings first (an RPC address, a thread count, a temperature): bad input is refused before a model is
    # looked for, derived or said to need downloading.
    target_runtime = _runtime(settings, "target")
    draft_runtime = _runtime(settings, "draft") if with_draft else None
    generation, notes = _generation_settings(settings, target_runtime, with_draft=with_draft, drafts=speculative)
    if speculative and strategy_needs_a_draft(settings):
        raise InputError(
            f"{settings.describe('speculative.strategy')} needs a draft model: give --draft, or use --strategy ngram"
        )
    target = ModelChoice("target", locate_model(settings, "target", on_derive_start, on_progress), target_runtime)
    draft = None
    if with_draft:
        draft = ModelChoice("draft", locate_model(settings, "draft", on_derive_start, on_progress), draft_runtime)
        check_pair(target.path, draft.path)
    else:
        check_file(target.path)
    for choice in (target, draft):
        if choice is not None and choice.runtime.rpc and choice.runtime.n_gpu_layers == 0:
            notes += (f"{settings.describe(f'{choice.role}.n_gpu_layers')} keeps every layer of the {choice.role} on"
                      f" this machine's CPU: its RPC workers ({', '.join(choice.runtime.rpc)}) take none",)
    draft_typed = settings.sources.get("draft.path") == FLAG_SOURCE
    if draft is not None and draft_typed and not generation.speculative.uses_draft_model:
        notes += (f"{settings.describe('speculative.strategy')} drafts from the text alone: --draft is not used",)
    if draft is not None and generation.speculative.uses_draft_model and same_file(target.path, draft.path):
        notes += ("the draft is the target's own file: each draft token costs what a target token does, so drafting"
                  " with it is slower than the target alone; give a smaller draft, or use --strategy ngram",)
    return Plan(settings, target, draft, generation, ChatSettings.from_values(settings.values), notes)


def lacks_chat_template(plan: Plan) -> bool:
    """Whether a command that renders the chat template would find none (no profile's [chat] template, none in
    the target's file): told from the file's header, before any weights load."""
    return plan.chat.template is None and not has_chat_template(plan.target.path)


def locate_model(
    settings: ResolvedSettings,
    role: str,
    on_derive_start: Callable[[str], None] | None = None,
    on_progress: ProgressCallback | None = None,
) -> Path:
    """The local file for the target or draft: a path, a downloaded hub file or a built-in model."""
    values = settings.values
    if f"{role}.path" in values:
        return model_path_here(str(values[f"{role}.path"]), f"{role}.path")
    if f"{role}.hf_repo" in values:
        repo, filename = values[f"{role}.hf_repo"], values[f"{role}.hf_file"]
        path = hub_local_path(repo, filename)
        if path is None:
            name = settings.profile.name if settings.profile else "PROFILE"
            raise InputError(f"{repo}/{filename} is not downloaded yet: run `localspec pull {name}`")
        return path
    builtin = values.get(f"{role}.builtin")
    if builtin == "smollm2-135m-instruct-q4_1":
        return demo_draft_path()
    if builtin == "smollm2-135m-instruct-f32":
        return demo_target_path(on_progress=on_progress, on_start=on_derive_start)
    raise InputError(f"no {role} model: give --{role} PATH or a profile with a [{role}] section")


def vocabulary_file(settings: ResolvedSettings, role: str = "target") -> Path:
    """A local file with the vocabulary of the target (or draft): its own file, except that a built-in model
    still to be derived is read from the file it is derived from (the same vocabulary), not derived for that."""
    if settings.values.get(f"{role}.builtin") == "smollm2-135m-instruct-f32" and not any(
            f"{role}.{key}" in settings.values for key in ("path", "hf_repo")):
        return demo_draft_path()
    return locate_model(settings, role)


def _runtime(settings: ResolvedSettings, role: str) -> ModelSettings:
    runtime = _build(settings, lambda: ModelSettings.from_values(settings.values, role))
    if not runtime.rpc:
        return runtime
    try:
        return dataclasses.replace(runtime, rpc=parse_endpoints(runtime.rpc))
    except InputError as exc:
        raise InputError(f"{exc} [{settings.describe(f'{role}.rpc')}]") from None


def verify_rows_of(target_runtime: ModelSettings) -> int:
    """The most tokens one target pass can verify: a batch, which llama.cpp caps at the context size."""
    if target_runtime.n_ctx is None:
        return target_runtime.n_batch
    return min(target_runtime.n_batch, target_runtime.n_ctx)


def _generation_settings(
    settings: ResolvedSettings, target_runtime: ModelSettings, with_draft: bool, drafts: bool = True
) -> tuple[GenerationSettings, tuple[str, ...]]:
    """The generation settings, with the draft length fitted to what one target batch can verify
    (`drafts` False: the command generates with the target alone, so nothing needs fitting)."""
    values = dict(settings.values)
    notes: list[str] = []
    verify_rows = verify_rows_of(target_runtime)
    draft_max = values["speculative.draft_max"]
    drafts = drafts and (with_draft or values["speculative.strategy"] == "ngram")
    if drafts and verify_rows < 2:
        raise InputError(
            f"{settings.describe('target.n_batch')} leaves no room to verify draft tokens:"
            " raise it to 2 or more (`run` and `chat` can also generate with the target alone: --no-speculative)"
        )
    if drafts and isinstance(draft_max, int) and draft_max + 1 > verify_rows:
        values["speculative.draft_max"] = verify_rows - 1
        values["speculative.draft_min"] = min(values["speculative.draft_min"], verify_rows - 1)
        notes.append(
            f"draft_max lowered from {draft_max} to {verify_rows - 1}:"
            f" one target pass verifies at most {verify_rows} tokens (target.n_batch)"
        )
    own = {key: values[key] for key in GenerationSettings.keys() if key in values}
    generation = _build(settings, lambda: GenerationSettings().with_values(own))
    return generation, tuple(notes)


def _build(settings: ResolvedSettings, make: Callable[[], Any]) -> Any:
    """Build a settings object; a combination it refuses is reported with where each value came from."""
    try:
        return make()
    except InputError as exc:
        keys = [key for key in settings.values if key in str(exc)]
        raise InputError(f"{exc} [{settings.describe(*keys)}]" if keys else str(exc)) from None

