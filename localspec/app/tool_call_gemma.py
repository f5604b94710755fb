"""Gemma 4's tool calls: `<|tool_call>call:NAME{key:VALUE,…}<tool_call|>`, in a notation of its own.

Gemma 4's template writes a call's arguments with their keys bare and in sorted order, a string between
`<|"|>` marks as its text (no escapes), and a number, `true`, `false` or `null` as JSON writes them:

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

Calls follow one another with nothing between. `gemma_rules` holds the arguments of a tool whose parameters
are flat (each a string its text can hold, `tool_call_xml.writes_as_text`, or a JSON scalar: a number, a
boolean, null, or listed values that are not strings) to its schema, the required ones present; other
schemas (`gemma_problem`: nested objects, arrays, a string with a pattern) are held to the JSON form by the
caller instead. `read_gemma_calls` reads calls back into names and arguments as JSON text.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from .tool_call_frames import grammar_text
from .tool_call_xml import TOOL_NAME, expect, tagged_problem, writes_as_text

OPEN, CLOSE, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_SCALAR_TYPES = {"integer", "number", "boolean", "null"}


def writes_gemma_calls(template: str) -> bool:
    """Whether `template` writes calls in Gemma 4's notation."""
    return f"{OPEN}call:" in template and QUOTE in template


def gemma_problem(parameters: Any) -> str | None:
    """Why calls with these (fitted) parameters cannot be held in Gemma's notation, or None where they can."""
    problem = tagged_problem(parameters)
    if problem is not None:
        return problem
    for name, schema in (parameters.get("properties") or {}).items():
        if not (writes_as_text(schema) or _is_scalar(schema)):
            return f"the parameter {name!r} is not a string its text can hold nor a number, boolean or null"
        if any(mark in name for mark in ":,{}") or name != name.strip():
            return f"the parameter name {name!r} would not read back bare"
    return None


def _is_scalar(schema: Any) -> bool:
    """Whether a parameter's values are all written as JSON scalars that are not strings."""
    if not isinstance(schema, dict):
        return False
    listed = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if listed is not None:
        return isinstance(listed, list) and all(not isinstance(value, (str, list, dict)) for value in listed)
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    return isinstance(kinds, list) and bool(kinds) and set(kinds) <= _SCALAR_TYPES


def gemma_rules(rule: str, name: str, parameters: dict[str, Any], marker_token: Callable[[str], int | None],
                json_options: dict[str, Any]) -> list[str]:
    """Lark rules: `rule` is a call of `name` with `parameters` (that `gemma_problem` passes) in Gemma's notation,
    its keys in sorted order, commas between those written, the required ones present."""
    opening, closing, quote = (grammar_text((text,), marker_token) for text in (OPEN, CLOSE, QUOTE))
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    keys = sorted(properties)
    lines = [f'{rule}: {opening} {json.dumps(f"call:{name}{{")} {rule}_first_0 "}}" {closing}']
    for j, key in enumerate(keys):
        value = f"{rule}_value_{j}"
        lines.append(f"{rule}_{j}: {json.dumps(f'{key}:')} {value}")
        lines += _value_rules(value, properties[key], quote, marker_token(QUOTE) is not None, json_options)
    return lines + keyed_sequence(rule, [key in required for key in keys], ",")


def keyed_sequence(rule: str, required: list[bool], separator: str) -> list[str]:
    """Lark rules `{rule}_first_0`: items `{rule}_0`, `{rule}_1`, … in order, `separator` between those written,
    the `required` ones present. (`{rule}_first_j`: no item written yet from the j-th on; `{rule}_rest_j`: one
    is, so a separator comes before the next.)"""
    lines, comma = [], json.dumps(separator)
    for j, needed in enumerate(required):
        after = f"{rule}_rest_{j + 1}"
        if needed:
            lines += [f"{rule}_first_{j}: {rule}_{j} {after}", f"{rule}_rest_{j}: {comma} {rule}_{j} {after}"]
        else:
            lines += [f"{rule}_first_{j}: {rule}_{j} {after} | {rule}_first_{j + 1}",
                      f"{rule}_rest_{j}: ({comma} {rule}_{j})? {after}"]
    return lines + [f'{rule}_first_{len(required)}: ""', f'{rule}_rest_{len(required)}: ""']


def _value_rules(value: str, schema: dict[str, Any], quote: str, quote_is_a_token: bool,
                 json_options: dict[str, Any]) -> list[str]:
    """`value`: a string between quote marks as its text (one of its listed values, or up to its `maxLength`),
    or a JSON scalar held to its schema."""
    if not writes_as_text(schema):
        return [f"{value}: %json {json.dumps({**schema, 'x-guidance': json_options}, ensure_ascii=False)}"]
    listed = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if listed is not None:
        texts = " | ".join(json.dumps(text, ensure_ascii=False) for text in listed)
        return [f"{value}: {quote} ({texts}) {quote}"]
    count = f"{{0,{schema['maxLength']}}}" if "maxLength" in schema else "*"
    if quote_is_a_token:  # (a text lexeme cannot hold the special token: it ends where the token comes)
        return [f"{value}: {quote} {value}_text {quote}", f"{value}_text: /(?s:.{count})/"]
    return [f"{value}: {quote} {value}_text", rf"{value}_text[lazy]: /(?s:.{count})<\|\"\|>/"]


def read_gemma_calls(text: str, takes_text: Callable[[str, str], bool]) -> list[tuple[str, str]]:
    """The name and arguments (JSON text) of each call that makes up the whole of `text`; `takes_text(name, key)`
    says whether a value is a string between quote marks. ValueError when the text is anything else."""
    calls, at = [], 0
    while at < len(text):
        at = expect(text, at, f"{OPEN}call:")
        name = TOOL_NAME.match(text, at)
        if name is None:
            raise ValueError("no tool name")
        at, members = expect(text, name.end(), "{"), []
        while not text.startswith("}", at):
            if members:
                at = expect(text, at, ",")
            key_end = text.index(":", at)
            key = text[at:key_end]
            at = key_end + 1
            if takes_text(name.group(), key):
                end = text.index(QUOTE, expect(text, at, QUOTE))
                written, at = json.dumps(text[at + len(QUOTE):end], ensure_ascii=False), end + len(QUOTE)
            else:
                scalar = _SCALAR.match(text, at)
                if scalar is None:
                    raise ValueError(f"{key}: not a JSON scalar")
                written, at = scalar.group(), scalar.end()
            members.append(f"{json.dumps(key, ensure_ascii=False)}: {written}")
        at = expect(text, at + 1, CLOSE)
        calls.append((name.group(), "{" + ", ".join(members) + "}"))
    return calls
