"""Gemma 4's tool calls: `<|tool_call>call:NAME{key:VALUE,…}<tool_call|>`, in a notation of its own.

Gemma 4's template writes a call's arguments, and every object within them, with their keys bare and in sorted
order (Jinja's `dictsort`: letters' case ignored), a string between `<|"|>` marks as its text (no escapes), an
array as `[a,b]`, and a number, `true`, `false` or `null` as JSON writes them; no spaces between:

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,where:{lat:48.9,tags:[<|"|>old<|"|>]}}<tool_call|>

Calls follow one another with nothing between. `gemma_rules` holds the arguments of a tool whose values its
notation can hold (`gemma_problem`: each a string its text can hold, `tool_call_xml.writes_as_text`, a JSON
scalar, or a closed object or an array of such values) to its schema, the required keys present; other schemas
(a string with a pattern, an object open to other keys, an array of several schemas) are held to the JSON form
by the caller instead. `read_gemma_calls` reads calls back into names and arguments as JSON text.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Collection

from .tool_call_frames import grammar_text
from .tool_call_xml import TOOL_NAME, expect, tagged_problem, unlisted_keys_problem, writes_as_text

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
    return _members_problem(parameters, "")


def _members_problem(schema: dict[str, Any], path: str) -> str | None:
    """Why an object's properties (at `path` in the arguments, "" for the arguments themselves) cannot be written
    in Gemma's notation."""
    for name, value in (schema.get("properties") or {}).items():
        if any(mark in name for mark in ":,{}[]") or name != name.strip() or not name:
            return f"the key {name!r} would not read back bare"
        problem = _value_problem(value, f"{path}.{name}" if path else name)
        if problem is not None:
            return problem
    return None


# What an object's or an array's schema may hold for its notation to hold it exactly (annotations aside).
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"}) | _ANNOTATIONS
_ARRAY_KEYS = frozenset({"type", "items", "minItems", "maxItems", "uniqueItems"}) | _ANNOTATIONS


def _value_problem(schema: Any, path: str) -> str | None:
    """Why a value of `schema` (at `path` in the arguments: `at.tags[]`) cannot be written in Gemma's notation."""
    if writes_as_text(schema) or _is_scalar(schema):
        return None
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "object" and not set(schema) - _OBJECT_KEYS:
        problem = unlisted_keys_problem(schema)
        return f"the parameter {path}: {problem}" if problem is not None else _members_problem(schema, path)
    if kind == "array":
        return array_problem(schema, path) or _value_problem(schema["items"], f"{path}[]")
    return (f"the parameter {path} is not a string its text can hold, a number, boolean or null, nor a closed object"
            " or an array of such")


def array_problem(schema: dict[str, Any], path: str) -> str | None:
    """Why an array (the parameter at `path`) cannot be written item by item in a notation (Gemma's, Python's)
    whatever its items are: a keyword other than its items and their counts, the items asked to differ."""
    if schema.get("uniqueItems", False) is not False:
        return f"the parameter {path} asks for unique items, which localspec cannot hold in this notation"
    least = schema.get("minItems", 0)
    most = schema.get("maxItems", least)
    if set(schema) - _ARRAY_KEYS or not isinstance(schema.get("items"), dict) or not (
            type(least) is int and type(most) is int and 0 <= least <= most):
        return f"the parameter {path} is an array of other than one schema's items, between two counts"
    return None


def array_rule(rule: str, schema: dict[str, Any], separator: str) -> str:
    """Lark rule: `rule` is an array (that `array_problem` passes) in brackets, its items `{rule}_item` with
    `separator` between them, as many as its `minItems` and `maxItems` allow."""
    least, most = schema.get("minItems", 0), schema.get("maxItems")
    repeats = f"{max(least - 1, 0)},{'' if most is None else most - 1}"
    more = "" if most == 1 else f"({json.dumps(separator)} {rule}_item){{{repeats}}}"
    items = f"{rule}_item {more}"
    body = "" if most == 0 else f"({items})?" if least == 0 else items
    return f'{rule}: "[" {body} "]"'


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
    every object's keys in sorted order, commas between those written, the required ones present."""
    opening, closing, quote = (grammar_text((text,), marker_token) for text in (OPEN, CLOSE, QUOTE))
    notation = _Notation(quote, marker_token(QUOTE) is not None, json_options)
    lines = [f'{rule}: {opening} {json.dumps(f"call:{name}{{")} {rule}_first_0 "}}" {closing}']
    return lines + notation.members(rule, parameters)


def _sorted_keys(keys: Any) -> list[str]:
    """Keys in the order Jinja's `dictsort` gives them: by their lower case, ties in their own order."""
    return sorted(keys, key=str.lower)


class _Notation:
    """Lark rules for values in Gemma's notation, given how its quote mark is written in the grammar."""

    def __init__(self, quote: str, quote_is_a_token: bool, json_options: dict[str, Any]) -> None:
        self.quote, self.quote_is_a_token, self.json_options = quote, quote_is_a_token, json_options

    def members(self, rule: str, schema: dict[str, Any]) -> list[str]:
        """`{rule}_first_0`: an object's members (keys sorted, the required ones present), without its braces."""
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        keys, lines = _sorted_keys(properties), []
        for j, key in enumerate(keys):
            value = f"{rule}_value_{j}"
            lines.append(f"{rule}_{j}: {json.dumps(f'{key}:')} {value}")
            lines += self.value(value, properties[key])
        return lines + keyed_sequence(rule, [key in required for key in keys], ",")

    def value(self, rule: str, schema: dict[str, Any]) -> list[str]:
        """`rule`: a string between quote marks as its text (one of its listed values, or up to its `maxLength`),
        a JSON scalar held to its schema, an object in braces, or an array's items in brackets."""
        if writes_as_text(schema):
            return self._text(rule, schema)
        if _is_scalar(schema):
            return [f"{rule}: %json {json.dumps({**schema, 'x-guidance': self.json_options}, ensure_ascii=False)}"]
        if schema.get("type") == "object":
            return [f'{rule}: "{{" {rule}_first_0 "}}"', *self.members(rule, schema)]
        return [array_rule(rule, schema, ","), *self.value(f"{rule}_item", schema["items"])]

    def _text(self, rule: str, schema: dict[str, Any]) -> list[str]:
        quote = self.quote
        listed = schema.get("enum", [schema["const"]] if "const" in schema else None)
        if listed is not None:
            texts = " | ".join(json.dumps(text, ensure_ascii=False) for text in listed)
            return [f"{rule}: {quote} ({texts}) {quote}"]
        count = f"{{0,{schema['maxLength']}}}" if "maxLength" in schema else "*"
        if self.quote_is_a_token:  # (a text lexeme cannot hold the special token: it ends where the token comes)
            return [f"{rule}: {quote} {rule}_text {quote}", f"{rule}_text: /(?s:.{count})/"]
        return [f"{rule}: {quote} {rule}_text", rf"{rule}_text[lazy]: /(?s:.{count})<\|\"\|>/"]


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


def read_gemma_calls(text: str, offered: Collection[str]) -> list[tuple[str, str]]:
    """The name and arguments (JSON text) of each call to a tool `offered` that makes up the whole of `text`.
    ValueError when the text is anything else."""
    calls, at = [], 0
    while at < len(text):
        at = expect(text, at, f"{OPEN}call:")
        name = TOOL_NAME.match(text, at)
        if name is None or name.group() not in offered:
            raise ValueError("no tool offered by that name")
        arguments, at = _read_object(text, expect(text, name.end(), "{"))
        at = expect(text, at, CLOSE)
        calls.append((name.group(), arguments))
    return calls


def _read_value(text: str, at: int) -> tuple[str, int]:
    """The value written at `at`, as JSON text, and where it ends."""
    if text.startswith(QUOTE, at):
        end = text.index(QUOTE, at + len(QUOTE))
        return json.dumps(text[at + len(QUOTE):end], ensure_ascii=False), end + len(QUOTE)
    if text.startswith("{", at):
        return _read_object(text, at + 1)
    if text.startswith("[", at):
        at, items = at + 1, []
        while not text.startswith("]", at):
            if items:
                at = expect(text, at, ",")
            item, at = _read_value(text, at)
            items.append(item)
        return "[" + ", ".join(items) + "]", at + 1
    scalar = _SCALAR.match(text, at)
    if scalar is None:
        raise ValueError("not a value")
    return scalar.group(), scalar.end()


def _read_object(text: str, at: int) -> tuple[str, int]:
    """The members after an object's opening brace at `at - 1`, as a JSON object's text, and where it ends."""
    members: list[str] = []
    while not text.startswith("}", at):
        if members:
            at = expect(text, at, ",")
        key_end = text.index(":", at)
        key = text[at:key_end]
        written, at = _read_value(text, key_end + 1)
        members.append(f"{json.dumps(key, ensure_ascii=False)}: {written}")
    return "{" + ", ".join(members) + "}", at + 1
