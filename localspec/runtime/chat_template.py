"""Render a model's chat template (Jinja, read from GGUF metadata) in a sandbox.

Templates come from downloaded files, so they run in Jinja's immutable sandbox:
no attribute access to Python internals, no mutation of passed-in objects.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import LocalspecError


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def render_chat(
    template: str,
    messages: list[dict[str, str]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    """Render `messages` ({"role", "content"} dicts) with `template` into the prompt text."""
    try:
        compiled = _environment().from_string(template)
        return compiled.render(
            messages=messages,
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
        )
    except TemplateError as exc:
        raise LocalspecError(f"the chat template failed to render: {exc}") from None
