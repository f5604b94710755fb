"""Making a draft model from its own target: a lower-precision copy, compatible by construction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..models.discovery import describe
from ..models.quantize import quantize

MUCH_SMALLER = 0.6  # a draft above this fraction of the target's size leaves little to gain


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


def default_draft_path(target: Path, type_name: str) -> Path:
    """Where `draft make` writes: next to the target, as NAME.draft-TYPE.gguf."""
    return target.with_name(f"{target.stem}.draft-{type_name}.gguf")


def make_draft(
    target: Path, type_name: str, out: Path | None = None, on_progress: Callable[[int, int], None] | None = None
) -> MadeDraft:
    """Quantize `target` to `type_name` (atomically) and report the draft's size against the target's."""
    target_info = describe(target)
    out = out or default_draft_path(target, type_name)
    quantize(target, out, type_name, on_progress=on_progress)
    return MadeDraft(out, describe(out).size_bytes, target_info.size_bytes)
