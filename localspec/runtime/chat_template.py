"""Render a model's chat template (Jinja, read from GGUF metadata) in a sandbox.

Templates come from downloaded files, so they run in Jinja's sandbox: no
attribute access to Python internals, no mutation of passed-in objects
(`template_sandbox`).

Message contents, tool calls and tool definitions are text from users, not
template: `render_chat_chunks` marks where their special-token text stands so
that `<|im_end|>` typed in a message (or echoed in a tool call's arguments) is
tokenized as plain text and cannot end a turn or open a forged one.
"""

from __future__ import annotations

import functools
import itertools
import json
import keyword
import math
import re
import secrets
import sys
from contextlib import contextmanager
from datetime import datetime
from types import FrameType
from typing import Any, Callable, Iterable, Iterator, Sequence

from jinja2 import TemplateError, TemplateSyntaxError

from ..errors import LocalspecError
from ..textin import clean_text
from .template_sandbox import MAX_REPEATED, BoundedSandbox, checked_size, given, watched_rendering

# Whitespace as llama.cpp's `isspace` sees it when a token strips its neighbours.
_C_WHITESPACE = " \t\n\v\f\r"


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, default=_listed)


def _listed(value: Any) -> list[Any]:
    """What `tojson` writes of a value JSON has no form for: a sequence Jinja's `map` or `select` made, as a list."""
    if isinstance(value, Iterator):
        return checked_size(list(itertools.islice(value, MAX_REPEATED + 1)))
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


MAX_RENDERED_CHARS = 16 * 2**20  # far beyond any context; a template writing more is looping on purpose


# The most lines a template's own code may run in one rendering: its loops, a few thousand lines for a
# long chat with tools; nested loops over range(99999) would run for hours.
MAX_TEMPLATE_STEPS = 2_000_000


class _StepBudget:
    """A trace function that counts the lines the template's compiled code runs (not Jinja's or Python's)
    and stops a rendering past `limit` with a TemplateError."""

    def __init__(self, limit: int) -> None:
        self.limit = self.left = limit

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        return self._count if frame.f_code.co_filename == "<template>" else None

    def _count(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        if event == "line":
            self.left -= 1
            if self.left < 0:
                raise TemplateError(f"the template runs more than {self.limit} steps (a loop that does not end)")
        return self._count


@contextmanager
def _step_budget(limit: int) -> Iterator[None]:
    """Count the template's steps within the block (on this thread), then restore whatever traced before."""
    earlier = sys.gettrace()
    sys.settrace(_StepBudget(limit))
    try:
        yield
    finally:
        sys.settrace(earlier)


def _environment() -> BoundedSandbox:
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True)
    env.add_filter("tojson", _tojson)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


@functools.lru_cache(maxsize=16)
def _compiled(template: str) -> Any:
    """`template` compiled in its own sandbox, kept: compiling a chat template with tools takes about 6 ms, and a
    chat or a server renders the same one for every turn (a compiled template renders safely in many threads)."""
    return _environment().from_string(template)


# What the renderer gives every template itself: a template variable of the caller's may not take these names
# (nor those of the sandbox's functions, `range` or `raise_exception`, which a template calls).
TEMPLATE_INPUTS = ("messages", "tools", "bos_token", "eos_token", "add_generation_prompt")
MAX_VARIABLE_DEPTH = 64  # lists and objects within one another in a variable's value
# Names Jinja reads as its own: a variable by one of them could not be read.
_JINJA_NAMES = frozenset(("true", "false", "none", "True", "False", "None", "self", "loop", "caller", "varargs",
                          "kwargs"))


def variables_problem(value: Any) -> str | None:
    """Why `value` cannot be a chat template's variables (a JSON object of its inputs by name: each name one a
    template can read, none of TEMPLATE_INPUTS or the sandbox's functions; values nested at most
    MAX_VARIABLE_DEPTH deep), or None."""
    if not isinstance(value, dict):
        return "must be a JSON object of names and values"
    for name in value:
        if not name.isidentifier() or keyword.iskeyword(name) or name in _JINJA_NAMES:
            return (f"{json.dumps(name)} is no name a template can read (letters, digits and _, not starting with"
                    " a digit, not a keyword or one of Jinja's own names)")
        if name in TEMPLATE_INPUTS or name in _sandbox_functions():
            return f"{name} is given to the template by localspec itself"
    if _depth(value) > MAX_VARIABLE_DEPTH:
        return f"values are nested more than {MAX_VARIABLE_DEPTH} deep"
    if _holds_a_non_finite_number(value):  # (a JSON body's 1e999 is read as infinity)
        return "values must be finite numbers: one is NaN, infinite or too large for a number (1e999)"
    return None


def _holds_a_non_finite_number(value: Any) -> bool:
    """Whether a float in `value`, at any depth, is NaN or infinite (without recursion)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, (dict, list, tuple)):
            pending += item.values() if isinstance(item, dict) else item
    return False


@functools.cache
def _sandbox_functions() -> frozenset[str]:
    """The names of what the sandbox gives every template to call (`range`, `namespace`, `raise_exception`…)."""
    return frozenset(_environment().globals)


def _depth(value: Any) -> int:
    """How deep lists and objects lie within one another in `value` (without recursion)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list, tuple)):
            deepest = max(deepest, depth)
            pending += [(member, depth + 1) for member in (item.values() if isinstance(item, dict) else item)]
    return deepest


def render_chat(
    template: str,
    messages: list[dict[str, str]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    variables: dict[str, Any] | None = None,
) -> str:
    """Render `messages` ({"role", "content"} dicts) with `template` into the prompt text; `tools`: the
    function definitions offered (OpenAI's shape), for templates that render them; `variables`: more of the
    template's inputs by name (`enable_thinking`, `reasoning_effort`: what llama-server calls the chat template's
    kwargs), none of them one of TEMPLATE_INPUTS."""
    variables = variables or {}
    assert not set(variables) & set(TEMPLATE_INPUTS), "a template variable takes the name of one of its inputs"
    try:
        compiled = _compiled(template)
        pieces, size = [], 0
        with watched_rendering(), _step_budget(MAX_TEMPLATE_STEPS):
            inputs = {**{name: given(value) for name, value in variables.items()}, "messages": given(messages),
                      "bos_token": bos_token, "eos_token": eos_token, "add_generation_prompt": add_generation_prompt,
                      "tools": given(tools)}
            for piece in compiled.generate(inputs):  # (one mapping: a variable named `self` is a variable too)
                size += len(piece)
                if size > MAX_RENDERED_CHARS:
                    raise TemplateError(f"the template writes more than {MAX_RENDERED_CHARS} characters")
                pieces.append(piece)
        text = clean_text("".join(pieces))[0]  # (a lone surrogate the template wrote cannot be tokenized: U+FFFD)
    except TemplateError as exc:
        raise LocalspecError(f"the chat template failed to render: {exc}") from None
    except Exception as exc:  # the template is code from a file: `{{ 1/0 }}`, `{{ messages + 1 }}`, ...
        raise LocalspecError(f"the chat template failed to render: {type(exc).__name__}: {exc}") from None
    if not text.strip():  # (`{% if false %}…`: the model would be asked to go on from nothing)
        raise LocalspecError("the chat template rendered no text for these messages: nothing to answer")
    return text


def template_problem(template: str) -> str | None:
    """Why `template` cannot be compiled (Jinja's syntax error and its line), or None: checked before any model loads."""
    if not template.strip():  # (it would render no prompt at all)
        return "the chat template is empty: leave chat.template out to use the model's own"
    try:
        _environment().from_string(template)
    except TemplateSyntaxError as exc:
        return f"the chat template is not valid Jinja (its line {exc.lineno}: {exc.message})"
    except RecursionError:
        return "the chat template is nested too deeply to compile"
    return None


class SpecialTexts:
    """The texts that llama.cpp's tokenizer turns into control tokens only when asked to parse specials.

    Those are the pieces of the vocabulary's control and unknown tokens (user-defined
    tokens are matched either way). `strip_before` and `strip_after` name the ones whose
    LSTRIP/RSTRIP attribute swallows the whitespace before or after them.
    """

    def __init__(self, texts: Iterable[str], *, strip_before: Iterable[str] = (), strip_after: Iterable[str] = ()) -> None:
        self.texts = frozenset(text for text in texts if text)
        self.strip_before = frozenset(strip_before)
        self.strip_after = frozenset(strip_after)
        # Longest first, as llama.cpp tries them; a pattern that never matches when there are none.
        ordered = sorted(self.texts, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, ordered)) if ordered else "(?!)")

    def found_in(self, text: str) -> bool:
        return self.pattern.search(text) is not None


Chunk = tuple[str, bool]  # (text, parse_special): tokenized one after the other


def render_chat_chunks(
    template: str,
    messages: Sequence[dict[str, Any]],
    special: SpecialTexts,
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    variables: dict[str, Any] | None = None,
) -> list[Chunk]:
    """Render `messages` into chunks to tokenize in order, special tokens parsed only where `parse_special`.

    When no text from outside holds special-token text (the usual case) this is the
    whole rendered text in one chunk with specials parsed, so the tokens are exactly
    those of tokenizing `render_chat`'s text. Otherwise each content that holds some is
    rendered as a unique marker, as is each special-token text in the other fields of
    messages (tool calls: names, arguments, ids), in `tools` and in `variables`; the text is cut only
    at the template's own special tokens (never at a content's edges, so BPE merges
    and SentencePiece's space prefix stay as they would be): the stretches between two
    of them that hold a marker become plain chunks with the text put back, the rest
    stays special. A template that transforms a content (`| trim`, `.split(...)`) sees
    the marker instead, so such a content goes in unchanged.
    """
    nonce = secrets.token_hex(8)  # text from outside cannot guess it, so cannot pass for a marker
    hidden: dict[str, str] = {}  # marker -> the text it stands for
    marked = [_marked_message(message, special, nonce, hidden) for message in messages]
    marked_tools = _marked_fields(tools, special, nonce, hidden)
    marked_variables = _marked_fields(variables, special, nonce, hidden)
    options = {"bos_token": bos_token, "eos_token": eos_token, "add_generation_prompt": add_generation_prompt}
    if not hidden:
        return [(render_chat(template, list(messages), tools=tools, variables=variables, **options), True)]
    rendered = render_chat(template, marked, tools=marked_tools, variables=marked_variables, **options)
    pieces = re.split("(" + "|".join(map(re.escape, hidden)) + ")", rendered)
    return _chunks(pieces, hidden, special)


def _marked_message(message: dict[str, Any], special: SpecialTexts, nonce: str, hidden: dict[str, str]) -> dict[str, Any]:
    """`message` with a marker for its content when that holds special-token text, and one for each
    special-token text in its other fields but its role (each recorded in `hidden`)."""
    def marked(key: str, value: Any) -> Any:
        if key == "role":
            return value
        if key != "content" or not isinstance(value, str):
            return _marked_fields(value, special, nonce, hidden)
        if not special.found_in(value):
            return value
        marker = _marker(nonce, hidden)
        hidden[marker] = value
        return marker
    return {key: marked(key, value) for key, value in message.items()}


def _marked_fields(value: Any, special: SpecialTexts, nonce: str, hidden: dict[str, str]) -> Any:
    """JSON-like `value` with each special-token text in its strings (keys too) replaced by a marker."""
    if isinstance(value, str):
        def hide(match: re.Match) -> str:
            marker = _marker(nonce, hidden)
            hidden[marker] = match.group()
            return marker
        return special.pattern.sub(hide, value)
    if isinstance(value, list):
        return [_marked_fields(item, special, nonce, hidden) for item in value]
    if isinstance(value, dict):
        return {_marked_fields(key, special, nonce, hidden): _marked_fields(item, special, nonce, hidden)
                for key, item in value.items()}
    return value


def _marker(nonce: str, hidden: dict[str, str]) -> str:
    """A new marker: private-use characters around the nonce and a count (left alone by `tojson`)."""
    return f"\ue000{nonce}:{len(hidden)}\ue001"


def _chunks(pieces: list[str], contents: dict[str, str], special: SpecialTexts) -> list[Chunk]:
    """Template text and markers (alternating, from `re.split`) into special and plain chunks."""
    chunks: list[Chunk] = []
    plain = ""  # the stretch since the template's last special token
    strip_leading = False  # that token swallows the whitespace after it
    for piece in pieces:
        if piece in contents:
            plain += contents[piece]
            continue
        found = list(special.pattern.finditer(piece))
        if not found:
            plain += piece
            continue
        first, last = found[0], found[-1]
        plain += piece[: first.start()]
        _add_plain(chunks, plain, strip_leading, strip_trailing=first.group() in special.strip_before)
        chunks.append((piece[first.start() : last.end()], True))
        plain, strip_leading = piece[last.end() :], last.group() in special.strip_after
    _add_plain(chunks, plain, strip_leading, strip_trailing=False)
    return chunks


def _add_plain(chunks: list[Chunk], text: str, strip_leading: bool, strip_trailing: bool) -> None:
    if strip_leading:
        text = text.lstrip(_C_WHITESPACE)
    if strip_trailing:
        text = text.rstrip(_C_WHITESPACE)
    if text:
        chunks.append((text, False))
