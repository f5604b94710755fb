"""A loaded target (and optional draft) ready to generate: shared by `run`, `chat` and `bench`.

Files are checked from their headers before any weights load: a missing,
truncated or non-GGUF file, or a draft whose vocabulary cannot match the
target's, is refused with a one-line reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .chat_template import render_chat
from .compat_cache import check_file, check_pair_cached
from .drafter import ModelDrafter
from .errors import InputError
from .generate import Generation, GenerationSettings
from .model import Model, ModelSettings


@dataclass(frozen=True)
class ModelSpec:
    """Where a model is and how to run it."""

    path: Path
    settings: ModelSettings = field(default_factory=ModelSettings)


def check_pair(target_path: Path, draft_path: Path | None) -> None:
    """Validate both files from their headers and refuse an incompatible draft."""
    if draft_path is None:
        check_file(target_path)
        return
    failure = check_pair_cached(target_path, draft_path).first_failure
    if failure is not None:
        raise InputError(
            f"draft {draft_path.name} cannot draft for target {target_path.name}: {failure.name} check failed ({failure.detail})"
        )


class Session:
    """Target and draft models loaded together; creates generations and chat prompts."""

    def __init__(
        self,
        target: ModelSpec,
        draft: ModelSpec | None = None,
        *,
        on_status: Callable[[str], None] = lambda message: None,
        verbose: bool = False,
    ) -> None:
        check_pair(target.path, draft.path if draft else None)
        on_status(f"loading target {target.path.name}")
        self.target = Model(target.path, target.settings, verbose=verbose)
        self.draft: Model | None = None
        if draft is not None:
            on_status(f"loading draft {draft.path.name}")
            self.draft = Model(draft.path, draft.settings, verbose=verbose)

    def generation(
        self, prompt_tokens: Sequence[int], settings: GenerationSettings, *, speculative: bool = True
    ) -> Generation:
        """A generation from `prompt_tokens`; drafting is off without a draft model or when asked."""
        drafter = None
        if speculative and self.draft is not None:
            drafter = ModelDrafter(self.draft, settings.sampling, settings.speculative.p_min)
        return Generation(self.target, prompt_tokens, settings, drafter)

    def raw_prompt_tokens(self, text: str) -> list[int]:
        """Plain completion: the text as it is, with BOS where the vocabulary asks for it."""
        return self.target.tokenize(text, add_special=True, parse_special=False)

    def chat_prompt_tokens(self, messages: list[dict[str, str]], template: str | None = None) -> list[int]:
        """Render `messages` with the target's chat template (or `template`) and tokenize."""
        template = template or self.target.chat_template()
        if template is None:
            raise InputError(f"{self.target.path.name} has no chat template: pass --raw for plain completion")
        bos = self.target.detokenize_special(self.target.bos_token)
        eos = self.target.detokenize_special(self.target.eos_token)
        text = render_chat(template, messages, bos_token=bos, eos_token=eos)
        add_bos = self.target.adds_bos and not (bos and text.startswith(bos))
        tokens = self.target.tokenize(text, add_special=False, parse_special=True)
        return [self.target.bos_token, *tokens] if add_bos else tokens

    def reset_caches(self) -> None:
        """Forget all cached tokens (after an interrupted reply the bookkeeping cannot be trusted)."""
        self.target.clear()
        if self.draft is not None:
            self.draft.clear()

    def close(self) -> None:
        self.target.close()
        if self.draft is not None:
            self.draft.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
