"""LFM2.5's tool calls: `<|tool_call_start|>[name(key='text', key2=3), …]<|tool_call_end|>`, as Python calls.

LFM2.5's template writes each call as a Python call with keyword arguments in the order given, a string
between single quotes as its text (no escapes), an object as JSON, and other values as Python writes them
(`True`, `False`, `None`, numbers; a list as Python shows it: `['a', 'b']`, `[1, 2]`). `pythonic_rules` holds
the arguments of a tool whose parameters are flat, objects or lists (each a string its text can hold without a
quote, a number, a boolean, null, an object held as JSON, or a list of strings, numbers, booleans, null or
lists) to its schema in the schema's order, the required ones present; other schemas (`pythonic_problem`: a
list of objects, a string with a pattern) are held to the JSON form by the caller instead.
`read_pythonic_calls` reads them back.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from .tool_call_frames import grammar_text
from .tool_call_gemma import array_problem, array_rule, keyed_sequence
from .tool_call_xml import TOOL_NAME, expect, tagged_problem, writes_as_text

OPEN, CLOSE = "<|tool_call_start|>[", "]<|tool_call_end|>"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a keyword argument's name, as Python takes it
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_PYTHON_CONSTANTS = {"True": "true", "False": "false", "None": "null"}


def writes_pythonic_calls(template: str) -> bool:
    """Whether `template` writes calls as LFM2.5's does."""
    return "<|tool_call_start|>[" in template and "]<|tool_call_end|>" in template


def pythonic_problem(parameters: Any) -> str | None:
    """Why calls with these (fitted) parameters cannot be held as Python calls, or None where they can."""
    problem = tagged_problem(parameters)
    if problem is not None:
        return problem
    for name, schema in (parameters.get("properties") or {}).items():
        if not _KEY.fullmatch(name):
            return f"the parameter name {name!r} is no Python keyword argument"
        if _kind(schema) is None:
            return f"the parameter {name!r} is not a string its text can hold, a number, a boolean, null or an object"
        problem = _list_problem(schema, name) if _kind(schema) == "list" else None
        if problem is not None:
            return problem
    return None


def _list_problem(schema: dict[str, Any], path: str) -> str | None:
    """Why a list (the parameter at `path`) cannot be written as Python shows one (as `| string` renders it)."""
    problem = array_problem(schema, path)
    if problem is not None:
        return problem
    items, path = schema["items"], f"{path}[]"
    if _kind(items) == "list":
        return _list_problem(items, path)
    if _kind(items) is None or items.get("type") in ("object", ["object"]):  # (Python shows an object as a dict)
        return f"the parameter {path} is not a string its text can hold, a number, a boolean, null or a list of such"
    listed = items.get("enum", [items["const"]] if "const" in items else [])
    if _kind(items) == "text" and not all(text.isprintable() and "\\" not in text for text in listed):
        return f"the parameter {path} lists a text Python would show escaped"
    return None


def _kind(schema: Any) -> str | None:
    """How a parameter's values are written: "text" (between quotes: a string, none of whose listed values holds
    one), "json" (a number or an object, as JSON writes it), "python" (booleans and null, as Python writes them),
    "list" (a list, as Python shows it); None where they cannot all be."""
    if writes_as_text(schema):
        listed = schema.get("enum", [schema["const"]] if "const" in schema else [])
        return None if any("'" in text for text in listed) else "text"
    if not isinstance(schema, dict) or "enum" in schema or "const" in schema:
        return None
    kinds = schema.get("type")
    kinds = {kinds} if isinstance(kinds, str) else set(kinds) if isinstance(kinds, list) else set()
    if kinds and kinds <= {"integer", "number"} or kinds == {"object"}:
        return "json"
    if kinds and kinds <= {"boolean", "null"}:
        return "python"
    if kinds == {"array"}:
        return "list"
    return None


def pythonic_rules(rule: str, name: str, parameters: dict[str, Any], json_options: dict[str, Any]) -> list[str]:
    """Lark rules: `rule` is a call of `name` with `parameters` (that `pythonic_problem` passes) as a Python
    call, keyword arguments in the schema's order, ", " between those written, the required ones present."""
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    lines = [f'{rule}: {json.dumps(f"{name}(")} {rule}_first_0 ")"']
    for j, (key, schema) in enumerate(properties.items()):
        value = f"{rule}_value_{j}"
        lines.append(f"{rule}_{j}: {json.dumps(f'{key}=')} {value}")
        lines += _value_rules(value, schema, json_options)
    return lines + keyed_sequence(rule, [key in required for key in properties], ", ")


def _value_rules(value: str, schema: dict[str, Any], json_options: dict[str, Any], in_a_list: bool = False
                 ) -> list[str]:
    """`value`: a value of `schema` as the template writes it (`_value_rule`), or a list as Python shows it: its
    strings between single quotes without a backslash or a character Python would escape there."""
    if _kind(schema) == "list":
        return [array_rule(value, schema, ", "), *_value_rules(f"{value}_item", schema["items"], json_options, True)]
    if in_a_list and _kind(schema) == "text" and "enum" not in schema and "const" not in schema:
        count = f"{{0,{schema['maxLength']}}}" if "maxLength" in schema else "*"
        return [rf"{value}: /'[^'\\\x00-\x1f\x7f-\xa0\xad]{count}'/"]
    return [_value_rule(value, schema, json_options)]


def _value_rule(value: str, schema: dict[str, Any], json_options: dict[str, Any]) -> str:
    kind = _kind(schema)
    if kind == "json":
        return f"{value}: %json {json.dumps({**schema, 'x-guidance': json_options}, ensure_ascii=False)}"
    if kind == "python":
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        words = [*(["True", "False"] if "boolean" in kinds else []), *(["None"] if "null" in kinds else [])]
        return f"{value}: " + " | ".join(json.dumps(word) for word in words)
    listed = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if listed is not None:
        return f"{value}: " + " | ".join(json.dumps(f"'{text}'", ensure_ascii=False) for text in listed)
    count = f"{{0,{schema['maxLength']}}}" if "maxLength" in schema else "*"
    return f"{value}: /'[^']{count}'/"


def pythonic_calls_rule(tools_rule: str, several: int, marker_token: Callable[[str], int | None]) -> str:
    """`calls`: `tools_rule` (one call of any tool) up to `several` times, ", " between, inside the brackets."""
    opening, closing = (grammar_text((text,), marker_token) for text in (OPEN, CLOSE))
    more = f' (", " {tools_rule}){{0,{several - 1}}}' if several > 1 else ""
    return f"calls: {opening} {tools_rule}{more} {closing}"


def read_pythonic_calls(text: str, takes_text: Callable[[str, str], bool]) -> list[tuple[str, str]]:
    """The name and arguments (JSON text) of each call in the list that makes up the whole of `text`;
    `takes_text(name, key)` says whether a value is a string between quotes. ValueError for anything else."""
    if not text.startswith(OPEN) or not text.endswith(CLOSE):
        raise ValueError("not a list of calls")
    body, calls, at = text[len(OPEN):len(text) - len(CLOSE)], [], 0
    while at < len(body) or not calls:
        at = expect(body, at, ", ") if calls else at
        name = TOOL_NAME.match(body, at)
        if name is None:
            raise ValueError("no tool name")
        at, members = expect(body, name.end(), "("), []
        while not body.startswith(")", at):
            at = expect(body, at, ", ") if members else at
            key = _KEY.match(body, at)
            if key is None:
                raise ValueError("no keyword argument")
            at = expect(body, key.end(), "=")
            written, at = _value(body, at, takes_text(name.group(), key.group()))
            members.append(f"{json.dumps(key.group())}: {written}")
        calls.append((name.group(), "{" + ", ".join(members) + "}"))
        at += 1
    return calls


def _value(text: str, at: int, as_text: bool) -> tuple[str, int]:
    """The JSON text of the value written from `at`, and where it ends."""
    if as_text:
        end = text.index("'", expect(text, at, "'"))
        return json.dumps(text[at + 1:end], ensure_ascii=False), end + 1
    for word, written in _PYTHON_CONSTANTS.items():
        if text.startswith(word, at):
            return written, at + len(word)
    if text.startswith("[", at):
        at, items = at + 1, []
        while not text.startswith("]", at):
            at = expect(text, at, ", ") if items else at
            item, at = _value(text, at, text.startswith("'", at))
            items.append(item)
        return "[" + ", ".join(items) + "]", at + 1
    if text.startswith("{", at):
        value, end = json.JSONDecoder().raw_decode(text, at)
        if not isinstance(value, dict):
            raise ValueError("not an object")
        return text[at:end], end
    number = _NUMBER.match(text, at)
    if number is None:
        raise ValueError("no value")
    return number.group(), number.end()
