"""Which models a command runs: explicit paths, or the built-in demo pair.

One function serves `run`, `chat` and `bench`, so they always agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .demo import demo_draft_path, demo_target_path
from .errors import InputError
from .model import ModelSettings
from .session import ModelSpec

BUILTIN_PROFILES = ("demo",)


@dataclass(frozen=True)
class ModelChoice:
    target: ModelSpec
    draft: ModelSpec | None
    source: str  # "paths" or "profile <name>"


def resolve_models(
    *,
    profile: str | None,
    target: str | None,
    draft: str | None,
    settings: ModelSettings,
    on_derive_start: Callable[[], None] | None = None,
    on_derive_progress: Callable[[int, int], None] | None = None,
) -> ModelChoice:
    """Turn command-line choices into the target and draft to load."""
    if draft and not target:
        raise InputError("--draft needs --target (or use --profile)")
    if target:
        if profile:
            raise InputError("give either --profile or --target/--draft, not both")
        target_spec = ModelSpec(_existing(target), settings)
        draft_spec = ModelSpec(_existing(draft), settings) if draft else None
        return ModelChoice(target_spec, draft_spec, "paths")
    name = profile or "demo"
    if name not in BUILTIN_PROFILES:
        raise InputError(f"unknown profile {name!r}; available: {', '.join(BUILTIN_PROFILES)}")
    draft_path = demo_draft_path()
    target_path = demo_target_path(on_progress=on_derive_progress, on_start=on_derive_start)
    return ModelChoice(ModelSpec(target_path, settings), ModelSpec(draft_path, settings), f"profile {name}")


def _existing(path: str) -> Path:
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise InputError(f"{resolved}: no such file")
    return resolved
