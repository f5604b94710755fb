"""Tool calls whose arguments are JSON framed by the template's own texts, read from its rendering of probe calls.

DeepSeek V3.1 writes `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>…
<｜tool▁calls▁end｜>`, Kimi K2 `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
<|tool_call_argument_begin|>{…}<|tool_call_end|>…`, Nemotron Nano 2 `<TOOLCALL>[{"name": "NAME", "arguments":
{…}}]</TOOLCALL>`, Functionary 3.1 `<function=NAME>{…}</function>`: each a frame of fixed texts around a name
and a JSON object. `template_frame` renders an assistant message with one probe call and with two, and reads
the frame off: the text before the first name (`opening`), between a name and its arguments (`name_end`),
between one call's arguments and the next name (`separator`) and after the last arguments (`closing`, up to
the end of the turn). A call's index (Kimi's `:0`, `:1`) and its id (Solar Open writes one) are holes in
those texts, which the model fills and the reading skips or keeps. Where the probe's arguments come out a tag
per parameter (Seed-OSS's `<seed:tool_call>\n<function=NAME>\n<parameter=KEY>VALUE</parameter>…`, MiniMax-M2's
`<invoke name="NAME">`, DeepSeek V3.2's DSML), the frame carries their layout (`tool_call_xml.XmlLayout`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Union

from ..errors import LocalspecError
from ..runtime.chat_template import render_chat
from .harmony import is_harmony
from .reasoning import thought_tags
from .tool_call_xml import XmlLayout, tags_around


class Hole(Enum):
    """A part of a frame's text that differs from call to call."""

    INDEX = "index"  # the call's place among the reply's calls
    ID = "id"  # the call's id


Part = Union[str, Hole]
HOLE_RULES = {Hole.INDEX: "/[0-9]{1,2}/", Hole.ID: "/[A-Za-z0-9_-]{1,40}/"}
HOLE_TEXT = {Hole.INDEX: re.compile(r"[0-9]{1,2}"), Hole.ID: re.compile(r"[A-Za-z0-9_-]{1,40}")}
# Texts that may be one special token of a vocabulary (`<|tool_call_begin|>`, `<｜tool▁sep｜>`, `[TOOL_CALLS]`);
# whether each is one is the vocabulary's to say.
SPECIAL_LOOKING = re.compile(r"<[^<>\s]{1,64}>|\[[A-Z_]{2,32}\]")
_NAME_CHARACTER = re.compile(r"[A-Za-z0-9_-]")  # what a tool's name is made of (tool_calls.TOOL_NAME)
_PROBE_NAMES = ("probe_fn_a", "probe_fn_b")
_PROBE_IDS = ("probecalla", "probecallb")
_PROBE_TEXT = "probe_text"
_PROBE_KEYS = ("probe_key_a", "probe_key_b")  # a string parameter, then a number
_PROBE_STRINGS, _PROBE_NUMBERS = ("probe_value_a", "probe_value_b"), (271828, 314159)


@dataclass(frozen=True)
class CallFrame:
    """The texts a template writes around calls' names and JSON arguments (see the module's docstring)."""

    opening: tuple[Part, ...]
    name_end: tuple[Part, ...]
    separator: tuple[Part, ...]
    closing: tuple[Part, ...]
    shows_tools: bool  # the template writes the tools offered into the prompt (DeepSeek V3.1's does not)
    # Where the arguments are tagged parameters (Seed-OSS, MiniMax-M2, DeepSeek V3.2), how: from after the name
    # (its `after_name`) to the last value's end (`name_end` is then empty).
    layout: XmlLayout | None = None
    one_call: bool = False  # the template writes one call per message (gpt-oss's): no separator
    harmony: bool = False  # replies in the harmony format (gpt-oss's): an analysis may come first (`harmony`)

    @property
    def opening_text(self) -> str:
        """The opening up to its first hole: what a reply that makes calls starts with."""
        return _literal_prefix(self.opening)

    def example(self) -> str:
        """A call as this frame writes it, for a prompt that must describe the syntax."""
        def text(parts: tuple[Part, ...]) -> str:
            return "".join(part if isinstance(part, str) else {Hole.INDEX: "0", Hole.ID: "call1"}[part]
                           for part in parts)
        if self.layout is None:
            return f"{text(self.opening)}TOOL_NAME{text(self.name_end)}{{ARGUMENTS}}{text(self.closing)}"
        layout = self.layout
        return (f"{text(self.opening)}TOOL_NAME{layout.after_name}{layout.before_key}KEY{layout.after_key}VALUE"
                f"{layout.value_end}{text(self.closing)}")


def _literal_prefix(parts: tuple[Part, ...]) -> str:
    prefix = []
    for part in parts:
        if not isinstance(part, str):
            break
        prefix.append(part)
    return "".join(prefix)


@functools.lru_cache(maxsize=16)
def template_frame(template: str) -> CallFrame | None:
    """The frame `template` writes calls in, or None where its rendering of probe calls shows no such frame
    (no calls at all, arguments written otherwise than as their JSON, a reply that is not the same around them)."""
    try:
        frame = _frame(template)
    except (LocalspecError, ValueError):
        return None
    return dataclasses.replace(frame, harmony=True) if frame is not None and is_harmony(template) else frame


@dataclass(frozen=True)
class _Renderings:
    """A template's renderings of the probe: a reply of text, of call a, and of calls a and b, each after one
    user message (`start`: where the reply begins in them), and what follows a reply of text (`text_tail`)."""

    one: str
    two: str
    start: int
    text_tail: str
    shows_tools: bool

    @classmethod
    def of(cls, template: str) -> _Renderings:
        user = {"role": "user", "content": "probe"}

        def reply(*calls: int) -> str:
            message = {"role": "assistant", "content": "" if calls else _PROBE_TEXT,
                       "tool_calls": [_probe_call(i) for i in calls] or None}
            return render_chat(template, [user, {k: v for k, v in message.items() if v is not None}],
                               add_generation_prompt=False)

        prompt, text, one, two = (render_chat(template, [user]), reply(), reply(0), reply(0, 1))
        start = len(prompt) if one.startswith(prompt) else _before_special(one, len(os.path.commonprefix([text, one])))
        start = _after_empty_thought(one, start, thought_tags(template))
        shows_tools = render_chat(template, [user], tools=[_probe_tool()]) != prompt
        return cls(one, two, start, text[text.find(_PROBE_TEXT) + len(_PROBE_TEXT):], shows_tools)


def _frame(template: str) -> CallFrame | None:
    seen = _Renderings.of(template)
    name_a = seen.one.find(_PROBE_NAMES[0], seen.start)
    if name_a < 0:
        return None
    args_a = seen.one.find(json.dumps(_probe_arguments(0), ensure_ascii=False), name_a)
    return _checked(_tagged_frame(seen) if args_a < 0 else _json_frame(seen, name_a, args_a))


def _json_frame(seen: _Renderings, name_a: int, args_a: int) -> CallFrame | None:
    """The frame of calls whose arguments are JSON, call a's name and arguments found at `name_a` and `args_a`."""
    one, two, start = seen.one, seen.two, seen.start
    after_a = args_a + len(json.dumps(_probe_arguments(0), ensure_ascii=False))
    closing = _joined([_before_turn_end(one[after_a:], seen.text_tail)])
    name_end_a = one[name_a + len(_PROBE_NAMES[0]):args_a]
    if two == one:  # (gpt-oss's template writes one call per message: the first)
        return CallFrame(_with_ids((one[start:name_a],), 0), _with_ids((name_end_a,), 0), (), closing,
                         seen.shows_tools, one_call=True)
    arguments_b = json.dumps(_probe_arguments(1), ensure_ascii=False)
    name_b = two.find(_PROBE_NAMES[1], after_a)
    args_b = two.find(arguments_b, name_b)
    if not two.startswith(one[:after_a]) or name_b < 0 or args_b < 0 \
            or one[after_a:] != two[args_b + len(arguments_b):]:  # (the same end after the last call)
        return None
    opening_parts, separator_parts = _numbered(one[start:name_a], two[after_a:name_b], align_end=True)
    name_end_b = two[name_b + len(_PROBE_NAMES[1]):args_b]
    name_end_parts, name_end_b_parts = _numbered(name_end_a, name_end_b, align_end=False)
    if _with_ids(name_end_b_parts, 1) != _with_ids(name_end_parts, 0):
        return None
    return CallFrame(_with_ids(opening_parts, 0), _with_ids(name_end_parts, 0), _with_ids(separator_parts, 1),
                     closing, seen.shows_tools)


def _tagged_frame(seen: _Renderings) -> CallFrame | None:
    """The frame of calls whose arguments are tagged parameters; None where the renderings show none."""
    one, two, start = seen.one, seen.two, seen.start
    found_a = _in_order(one, start, _probe_parts(0))
    found_b = _in_order(two, found_a[-1][1], _probe_parts(1)) if found_a else None
    if not found_a or not found_b or two[:found_a[-1][1]] != one[:found_a[-1][1]]:
        return None
    shown_a, shown_b = tags_around(one, found_a), tags_around(two, found_b)
    if shown_a is None or shown_b is None:
        return None
    # (the name's opening and the parameters' end are the frame's texts, read from both renderings below)
    layout = dataclasses.replace(shown_a, before_name="", after_parameters="")
    end_a, value_end = found_a[-1][1], layout.value_end
    between = two[end_a:found_b[0][0]]
    if one[end_a:] != two[found_b[-1][1]:] or not between.startswith(value_end) \
            or dataclasses.replace(shown_b, before_name="", after_parameters="") != layout:
        return None
    opening, separator = _numbered(one[start:found_a[0][0]], between[len(value_end):], align_end=True)
    closing = _before_turn_end(one[end_a + len(value_end):], seen.text_tail)
    return CallFrame(_with_ids(opening, 0), (), _with_ids(separator, 1), _joined([closing]), seen.shows_tools, layout)


def _probe_parts(i: int) -> tuple[str, ...]:
    """What probe call `i` writes, in order, where its parameters are tagged: its name, then each key and value."""
    return _PROBE_NAMES[i], _PROBE_KEYS[0], _PROBE_STRINGS[i], _PROBE_KEYS[1], str(_PROBE_NUMBERS[i])


def _in_order(text: str, at: int, parts: tuple[str, ...]) -> list[tuple[int, int]] | None:
    """Where each of `parts` stands in `text`, each after the one before, from `at` (None where one is missing)."""
    found = []
    for part in parts:
        at = text.find(part, at)
        if at < 0:
            return None
        found.append((at, at + len(part)))
        at += len(part)
    return found


def _checked(frame: CallFrame | None) -> CallFrame | None:
    """`frame`, or None where it cannot be held to and read back: a probe's word left in one of its texts (it was
    misread), an opening that does not start with text (plain text could not be told from a call), a name that
    its next text would go on (`[NAME-args`, `NAME0` where an index follows)."""
    if frame is None:
        return None
    layout = frame.layout
    texts = (*frame.opening, *frame.name_end, *frame.separator, *frame.closing,
             *((layout.after_name, layout.before_key, layout.after_key, layout.value_end, layout.after_json_key or "")
               if layout is not None else ()))
    after_name = layout.after_name if layout is not None else _literal_prefix(frame.name_end)
    if any(isinstance(part, str) and "probe" in part for part in texts) or not frame.opening_text.strip() \
            or _NAME_CHARACTER.match(after_name) or isinstance((*frame.name_end, "")[0], Hole):
        return None
    return frame


def _probe_call(i: int) -> dict[str, Any]:
    return {"id": _PROBE_IDS[i], "type": "function",
            "function": {"name": _PROBE_NAMES[i], "arguments": _probe_arguments(i)}}


def _probe_arguments(i: int) -> dict[str, Any]:
    return {_PROBE_KEYS[0]: _PROBE_STRINGS[i], _PROBE_KEYS[1]: _PROBE_NUMBERS[i]}


def _probe_tool() -> dict[str, Any]:
    return {"type": "function", "function": {"name": "probe_tool", "description": "probe",
                                             "parameters": {"type": "object", "properties": {}}}}


def _before_special(text: str, at: int) -> int:
    """`at`, or the start of the special-looking text it falls inside (`<|START_RESPONSE|>` and
    `<|START_ACTION|>` have their first letters in common)."""
    for found in SPECIAL_LOOKING.finditer(text, max(0, at - 64), at + 64):
        if found.start() < at < found.end():
            return found.start()
    return at


def _before_turn_end(tail: str, text_tail: str) -> str:
    """The calls' closing text: `tail` (what follows the last arguments) up to where a reply of text ends its turn
    (a special-looking text that follows a text reply, `text_tail`: its first time in the tail, as R1 Distill's
    template writes its end twice; or the whole of `text_tail` at the tail's end, MiniMax's `[e~[`)."""
    ends = [tail.find(found.group()) for found in SPECIAL_LOOKING.finditer(text_tail)]
    if text_tail.strip() and tail.endswith(text_tail):
        ends.append(len(tail) - len(text_tail))
    return tail[:min((end for end in ends if end >= 0), default=len(tail))]


def _after_empty_thought(text: str, at: int, tags: tuple[str, str] | None) -> int:
    """`at`, or past the empty thought that starts there (Kimi K2 Thinking's template writes `<think></think>`
    before an earlier call: a thought the grammar lets the model write itself, or leave out)."""
    if tags is None:
        return at
    empty = re.compile(r"\s*" + re.escape(tags[0]) + r"\s*" + re.escape(tags[1]) + r"\s*")
    found = empty.match(text, at)
    return found.end() if found else at


def _with_ids(parts: tuple[Part, ...], i: int) -> tuple[Part, ...]:
    """`parts` with probe call `i`'s id, where it is written, as a hole."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str) and _PROBE_IDS[i] in part:
            pieces = part.split(_PROBE_IDS[i])
            for k, piece in enumerate(pieces):
                out += ([Hole.ID] if k else []) + ([piece] if piece else [])
        else:
            out.append(part)
    return tuple(out)


def _numbered(first: str, second: str, align_end: bool) -> tuple[tuple[Part, ...], tuple[Part, ...]]:
    """`first` and `second` (the same text for the first and the second call) as parts, with an INDEX hole where
    they differ by a number one higher in the second (Kimi's `:0` and `:1`); aligned from their ends where
    `align_end` (the opening holds more than the separator before the call's own text)."""
    runs_a, runs_b = re.split(r"([0-9]+)", first), re.split(r"([0-9]+)", second)
    if align_end:
        runs_a, runs_b = runs_a[::-1], runs_b[::-1]
    parts_a: list[Part] = list(runs_a)
    parts_b: list[Part] = list(runs_b)
    for k in range(1, min(len(runs_a), len(runs_b)), 2):  # (the digit runs: every other one)
        if runs_a[k - 1] != runs_b[k - 1]:
            break
        if int(runs_b[k]) == int(runs_a[k]) + 1:
            parts_a[k] = parts_b[k] = Hole.INDEX
    if align_end:
        parts_a, parts_b = parts_a[::-1], parts_b[::-1]
    return _joined(parts_a), _joined(parts_b)


def _joined(parts: list[Part]) -> tuple[Part, ...]:
    """`parts` with neighbouring texts joined and empty ones dropped."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        elif part != "":
            out.append(part)
    return tuple(out)


# -- the grammar ------------------------------------------------------------------------------------------------------


def grammar_text(parts: tuple[Part, ...], marker_token: Callable[[str], int | None]) -> str:
    """Lark for `parts`: texts spelled out but for those that are one special token (named by id), holes as
    what may fill them."""
    pieces = []
    for part in parts:
        if isinstance(part, Hole):
            pieces.append(HOLE_RULES[part])
            continue
        at = 0
        for found in SPECIAL_LOOKING.finditer(part):
            token = marker_token(found.group())
            if token is not None:
                pieces += [json.dumps(part[at:found.start()])] if found.start() > at else []
                pieces.append(f"<[{token}]>")
                at = found.end()
        pieces += [json.dumps(part[at:])] if at < len(part) else []
    return " ".join(pieces) or '""'


# -- reading calls back -----------------------------------------------------------------------------------------------


def read_parts(text: str, at: int, parts: tuple[Part, ...]) -> tuple[int, str | None]:
    """Where `parts` end, read from `at` in `text`, and the id a hole held (if one did). ValueError where the
    text is not what they say."""
    call_id = None
    for part in parts:
        if isinstance(part, str):
            if not text.startswith(part, at):
                raise ValueError(f"expected {part!r}")
            at += len(part)
            continue
        filled = HOLE_TEXT[part].match(text, at)
        if filled is None:
            raise ValueError(f"expected the call's {part.value}")
        call_id = filled.group() if part is Hole.ID else call_id
        at = filled.end()
    return at, call_id


def ends_as_closing(rest: str, closing: tuple[Part, ...]) -> bool:
    """Whether `rest`, what follows the last call's arguments, is the closing: the whole of it, or all but a
    special token at its end (an end-of-generation token, Functionary's `<|eom_id|>`, ends the output unwritten)."""
    text = "".join(part for part in closing if isinstance(part, str))
    last = [found for found in SPECIAL_LOOKING.finditer(text) if found.end() == len(text)]
    return rest == text or bool(last) and rest == text[:last[0].start()]
