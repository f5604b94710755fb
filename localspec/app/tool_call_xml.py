"""The XML call syntax of Qwen3-Coder, Qwen3.5 and others: its grammar, and calls read back from it.

A call is written inside `<tool_call>` tags (as Hermes calls are) as

    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    2
    </parameter>
    </function>

A string parameter's value is its text as it is (up to the first
`\\n</parameter>\\n`); any other value is JSON. `function_rules` writes the Lark
rules (llguidance) that hold one tool's call to its parameters schema, the
parameters in the schema's order, the required ones present; `read_function`
reads a call back into a name and its arguments as JSON text.
"""

from __future__ import annotations

import json
from typing import Any, Callable

PARAMETER_END = "\n</parameter>\n"  # what ends every parameter's value
_FUNCTION_END = "</function>"


class UnwritableParameter(ValueError):
    """A parameter this syntax cannot write: its name would end its own tag."""


def is_text(schema: Any) -> bool:
    """Whether a parameter's value is written as its text (a string), not as JSON."""
    if not isinstance(schema, dict):
        return False
    values = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if values is None and "const" in schema:
        values = [schema["const"]]
    if values is not None and not all(isinstance(value, str) for value in values):
        return False  # (JSON holds such a value to the rest of the schema)
    if "type" in schema:
        return schema["type"] == "string" or schema["type"] == ["string"]
    return bool(values)


def function_rules(rule: str, name: str, parameters: dict[str, Any], layout: dict[str, Any]) -> list[str]:
    """Lark rules: `rule` is a call of `name` with `parameters` (a closed, fitted object schema: `tool_calls`
    bounds its open strings as for `--json-schema`), each parameter in the schema's order, the required ones
    present, a text parameter's length within its bounds and a JSON one held to its schema (written with
    `layout`, llguidance's `x-guidance` options)."""
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    definitions = {key: parameters[key] for key in ("$defs", "definitions") if key in parameters}
    lines, parts = [], []
    for j, (parameter, schema) in enumerate(properties.items()):
        if not parameter or any(mark in parameter for mark in "<>\n"):
            raise UnwritableParameter(f"{name}: the parameter name {parameter!r} cannot be written in this model's"
                                      " call syntax")
        head, value = json.dumps(f"<parameter={parameter}>\n"), f"{rule}_value_{j}"
        if is_text(schema):
            lines += _text_value_rules(value, schema)
            lines.append(f"{rule}_{j}: {head} {value}")
        else:
            lines.append(f"{rule}_{j}: {head} {value} {json.dumps(PARAMETER_END)}")
            held = {**definitions, **schema, "x-guidance": layout}
            lines.append(f"{value}: %json {json.dumps(held, ensure_ascii=False, allow_nan=False)}")
        parts.append(f"{rule}_{j}" if parameter in required else f"{rule}_{j}?")
    opening = json.dumps(f"<function={name}>\n")
    return [f"{rule}: {' '.join([opening, *parts, json.dumps(_FUNCTION_END)])}", *lines]


def _text_value_rules(value: str, schema: dict[str, Any]) -> list[str]:
    """`value`: a text parameter's value and the end of the parameter: one of its `enum` (or its `const`) as
    written, else any text of `minLength` to `maxLength` characters, up to the first end (a lazy lexeme)."""
    listed = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if listed is None and "const" in schema:
        listed = [schema["const"]]
    if listed is not None:
        return [f"{value}: " + " | ".join(json.dumps(text + PARAMETER_END, ensure_ascii=False) for text in listed)]
    low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
    count = f"{{{low},{int(high)}}}" if high is not None else f"{{{low},}}"
    return [f"{value}[lazy]: /(?s:.{count})\\n<\\/parameter>\\n/"]


def read_function(text: str, at: int, takes_text: Callable[[str, str], bool]) -> tuple[str, str, int]:
    """The call written from `at` (`<function=NAME>` … `</function>`): its name, its arguments as JSON text
    (a text value as a JSON string, a JSON value as the model wrote it), and where it ends. `takes_text(name,
    parameter)` says whether a value is text. ValueError where `text` holds no whole call there."""
    if not text.startswith("<function=", at):
        raise ValueError("not a function call")
    name_end = text.index(">\n", at)
    name, at = text[at + len("<function="):name_end], name_end + 2
    members: list[str] = []
    while not text.startswith(_FUNCTION_END, at):
        if not text.startswith("<parameter=", at):
            raise ValueError("expected a parameter")
        key_end = text.index(">\n", at)
        key, at = text[at + len("<parameter="):key_end], key_end + 2
        end = text.index(PARAMETER_END, at)
        written = text[at:end]
        if takes_text(name, key):
            value = json.dumps(written, ensure_ascii=False)
        else:
            json.loads(written, parse_constant=_no_constant)  # one JSON value, or ValueError
            value = written
        members.append(f"{json.dumps(key, ensure_ascii=False)}: {value}")
        at = end + len(PARAMETER_END)
    return name, "{" + ", ".join(members) + "}", at + len(_FUNCTION_END)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON")
