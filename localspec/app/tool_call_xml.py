"""Tool calls with each parameter in tags of its own: their layouts, grammar, and calls read back from them.

Two families write a call inside `<tool_call>` tags this way. Qwen3-Coder,
Qwen3.5 and Nemotron 3 Nano (`QWEN_XML`):

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

and GLM 4.5 to 4.7, Laguna and Ling (`<tool_call>get_weather` then
`<arg_key>city</arg_key><arg_value>Paris</arg_value>` per parameter, with or
without newlines between: `layout_shown` reads which from the template's own
rendering of a call). A string parameter's value is its text as it is (up to
the first end of a value), where the text alone can hold all its schema says
(`writes_as_text`); any other value is JSON held to its schema. `function_rules`
writes the Lark rules (llguidance) that hold one tool's call to its parameters
schema, the parameters in the schema's order, the required ones present; a schema
that asks more of the arguments than their parameters one by one
(`tagged_problem`: a root `anyOf`, a `$ref` to the root, ...) is held as JSON by
the caller instead. `read_function` reads a call back into a name and its
arguments as JSON text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a tool's name (OpenAI's rule, as tool_calls checks it)
_CDATA = ("<![CDATA[", "]]>")  # what a text value may be wrapped in where it holds markup (MiniCPM 5's template)


@dataclass(frozen=True)
class XmlLayout:
    """What stands between `<tool_call>` and `</tool_call>` around a call's name and each parameter:
    `before_name` NAME `after_name`, then per parameter `before_key` KEY `after_key` VALUE `value_end`, then
    `after_parameters`."""

    before_name: str
    after_name: str
    before_key: str
    after_key: str
    value_end: str
    after_parameters: str
    after_json_key: str | None = None  # after the key of a value written as JSON, where not `after_key`
    # (DeepSeek V3.2's `" string="false">` against `" string="true">`)

    def after_key_of(self, as_text: bool) -> str:
        """What follows a parameter's key: before its text, or before its JSON."""
        return self.after_key if as_text or self.after_json_key is None else self.after_json_key


QWEN_XML = XmlLayout("\n<function=", ">\n", "<parameter=", ">\n", "\n</parameter>\n", "</function>\n")
ARG_KEYS = XmlLayout("", "\n", "<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n", "")  # GLM 4.5 and 4.6's
# A call the templates are asked to render, to read their layout from: names and values found nowhere else.
_PROBE_NAME, _PROBE_KEYS, _PROBE_VALUES = "probe_fn", ("probe_key_a", "probe_key_b"), ("probe_value_a", "probe_value_b")


# What a parameters schema may hold for its calls to be held in tagged form: the rest constrains the
# arguments as a whole, which a parameter at a time cannot.
_TAGGED_ROOT_KEYS = frozenset({"type", "properties", "required", "additionalProperties", "x-guidance", "$defs",
                               "definitions", "description", "title", "$schema", "$comment"})
# What a string parameter's schema may hold for its value to be written as its text: the text alone holds these
# exactly (a `pattern`, a `format` or a `minLength` it would not: such a value is written as JSON).
_TEXT_KEYS = frozenset({"type", "enum", "const", "maxLength", "description", "title", "default", "examples",
                        "$comment"})


def tagged_problem(parameters: Any) -> str | None:
    """Why calls with these (fitted) parameters cannot be held in tagged form, or None where they can."""
    if not isinstance(parameters, dict):
        return "the schema is not an object"
    extra = sorted(set(parameters) - _TAGGED_ROOT_KEYS)
    if extra:
        return f"its {extra[0]!r} holds the arguments as a whole"
    problem = unlisted_keys_problem(parameters, "parameters")
    if problem is not None:
        return problem
    for name in parameters.get("properties", {}):
        if not name or any(mark in name for mark in "<>\n"):
            return f"the parameter name {name!r} would end its own tag"
    # (each parameter's schema is held apart, with the definitions beside it: a $ref to anything else would miss)
    outside = next((ref for ref in _refs(parameters) if not ref.startswith(("#/$defs/", "#/definitions/"))), None)
    if outside is not None:
        return f"a $ref to {outside!r} points outside the definitions"
    return None


def unlisted_keys_problem(schema: dict[str, Any], keys: str = "keys") -> str | None:
    """Why an object's schema (fitted) is not closed over the `keys` it lists (each with a schema of its own,
    none other taken, none required that it does not list), or None where it is."""
    properties, required = schema.get("properties", {}), schema.get("required", [])
    if not isinstance(properties, dict) or not all(isinstance(value, dict) for value in properties.values()):
        return f"a {keys[:-1]}'s schema is not an object"
    if schema.get("additionalProperties", False) is not False:
        return f"it takes {keys} it does not list"
    if not isinstance(required, list) or not all(isinstance(name, str) and name in properties for name in required):
        return f"it requires {keys} it does not list"
    return None


def _refs(schema: Any) -> list[str]:
    """Every `$ref` in a schema, however deep (without recursion)."""
    found, pending = [], [schema]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if isinstance(item.get("$ref"), str):
                found.append(item["$ref"])
            pending += item.values()
        elif isinstance(item, list):
            pending += item
    return found


def probe_call() -> dict[str, Any]:
    """An assistant message with one call, for `layout_shown` to read a template's rendering of."""
    arguments = dict(zip(_PROBE_KEYS, _PROBE_VALUES))
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": "a1b2c3d4e", "type": "function",
                            "function": {"name": _PROBE_NAME, "arguments": arguments}}]}


def layout_shown(call_text: str) -> XmlLayout | None:
    """The layout of `call_text`, a template's rendering of `probe_call()` between `<tool_call>` and
    `</tool_call>`; None where it is not one a layout describes."""
    parts = (_PROBE_NAME, _PROBE_KEYS[0], _PROBE_VALUES[0], _PROBE_KEYS[1], _PROBE_VALUES[1])
    try:
        at = [call_text.index(part) for part in parts]
    except ValueError:
        return None
    if at != sorted(at):
        return None
    layout = tags_around(call_text, [(start, start + len(part)) for start, part in zip(at, parts)])
    return layout if layout is not None and layout.after_json_key is None else None  # (both values are text)


def tags_around(text: str, spans: Sequence[tuple[int, int]]) -> XmlLayout | None:
    """The layout of a call in `text` with two parameters, `spans` where its name, first key, first value, second
    key and second value stand: the text before the name and after the second value's end are its
    `before_name` and `after_parameters`; the second key's end its `after_json_key` where it differs from the
    first's (its value written as JSON). None where no key tag or value end shows."""
    name, key_a, value_a, key_b, value_b = spans
    name_to_key, value_to_key = text[name[1]:key_a[0]], text[value_a[1]:key_b[0]]
    # The key's opening tag: what the text before each key shares, from its last '<' (`<arg_key>`).
    shared = common_suffix(name_to_key, value_to_key)
    before_key = shared[shared.rfind("<"):] if "<" in shared else ""
    value_end = value_to_key[: len(value_to_key) - len(before_key)]
    rest = text[value_b[1]:]
    if not before_key or not value_end or not rest.startswith(value_end):
        return None
    after_key, after_second_key = text[key_a[1]:value_a[0]], text[key_b[1]:value_b[0]]
    return XmlLayout(text[: name[0]], name_to_key[: len(name_to_key) - len(before_key)], before_key, after_key,
                     value_end, rest[len(value_end):], None if after_second_key == after_key else after_second_key)


def common_suffix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return a[len(a) - n:]


def _listed(schema: dict[str, Any]) -> Any:
    """A schema's listed values: its `enum`, else its `const` alone; None where it lists none."""
    return schema["enum"] if "enum" in schema else [schema["const"]] if "const" in schema else None


def writes_as_text(schema: Any) -> bool:
    """Whether a parameter's value is written as its text (a string the text alone holds to all its schema
    says: its listed values, or a length up to its `maxLength`), not as JSON."""
    if not isinstance(schema, dict) or set(schema) - _TEXT_KEYS or ("enum" in schema and "const" in schema):
        return False
    values = _listed(schema)
    if values is not None:
        if not isinstance(values, list) or not all(isinstance(value, str) for value in values) or "maxLength" in schema:
            return False  # (JSON holds such a value to the rest of the schema)
    elif "maxLength" in schema and not (type(schema["maxLength"]) is int and schema["maxLength"] >= 0):
        return False
    if "type" in schema:
        return schema["type"] == "string" or schema["type"] == ["string"]
    return bool(values)


def function_rules(rule: str, name: str, parameters: dict[str, Any], layout: XmlLayout,
                   json_options: dict[str, Any]) -> list[str]:
    """Lark rules: `rule` is a call of `name` with `parameters` (a closed, fitted object schema that
    `tagged_problem` passes: `tool_calls` bounds its open strings as for `--json-schema`) in `layout`, each
    parameter in the schema's order, the required ones present, a text value held to its listed values or its
    `maxLength`, a JSON one to its schema (written with `json_options`, llguidance's `x-guidance` options)."""
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    definitions = {key: parameters[key] for key in ("$defs", "definitions") if key in parameters}
    lines, parts = [], []
    for j, (parameter, schema) in enumerate(properties.items()):
        as_text = writes_as_text(schema)
        head = json.dumps(f"{layout.before_key}{parameter}{layout.after_key_of(as_text)}")
        value = f"{rule}_value_{j}"
        if as_text:
            lines += _text_value_rules(value, schema, layout.value_end)
            lines.append(f"{rule}_{j}: {head} {value}")
        else:
            lines.append(f"{rule}_{j}: {head} {value} {json.dumps(layout.value_end)}")
            held = {**definitions, **schema, "x-guidance": json_options}
            lines.append(f"{value}: %json {json.dumps(held, ensure_ascii=False, allow_nan=False)}")
        parts.append(f"{rule}_{j}" if parameter in required else f"{rule}_{j}?")
    opening = json.dumps(f"{layout.before_name}{name}{layout.after_name}")
    return [f"{rule}: {' '.join([opening, *parts, json.dumps(layout.after_parameters)])}", *lines]


def _text_value_rules(value: str, schema: dict[str, Any], end: str) -> list[str]:
    """`value`: a text parameter's value and the `end` after it: one of its `enum` (or its `const`) as written,
    else any text of up to `maxLength` characters, up to the first `end` (a lazy lexeme: where the reader ends
    it too)."""
    listed = _listed(schema)
    if listed is not None:
        return [f"{value}: " + " | ".join(json.dumps(text + end, ensure_ascii=False) for text in listed)]
    count = f"{{0,{schema['maxLength']}}}" if "maxLength" in schema else "*"
    return [f"{value}[lazy]: /(?s:.{count}){regex_text(end)}/"]


def regex_text(text: str) -> str:
    """`text` as a regex that matches it alone, written inside a Lark `/…/` literal (every character but a letter
    or digit as its code point)."""
    return "".join(char if char.isalnum() else f"\\x{{{ord(char):x}}}" for char in text)


def read_function(text: str, at: int, layout: XmlLayout,
                  takes_text: Callable[[str, str], bool]) -> tuple[str, str, int]:
    """The call written from `at` in `layout` (up to its closing tag): its name, its arguments as JSON text
    (a text value as a JSON string, a JSON value as the model wrote it), and where it ends. `takes_text(name,
    parameter)` says whether a value is text. ValueError where `text` holds no whole call there."""
    at = expect(text, at, layout.before_name)
    found = TOOL_NAME.match(text, at)
    if found is None:
        raise ValueError("no function name")
    name, at = found.group(), expect(text, found.end(), layout.after_name)
    members: list[str] = []
    while text.startswith(layout.before_key, at):
        at += len(layout.before_key)
        ends = [end for after in {layout.after_key_of(True), layout.after_key_of(False)}
                if (end := text.find(after, at)) >= 0]
        if not ends:
            raise ValueError("a key not closed")
        key_end = min(ends)
        key = text[at:key_end]
        as_text = takes_text(name, key)
        at = expect(text, key_end, layout.after_key_of(as_text))
        end = text.index(layout.value_end, at)
        written = text[at:end]
        if as_text and written.startswith(_CDATA[0]) and written.endswith(_CDATA[1]):  # (MiniCPM 5's, for `<`, `&`)
            written = written[len(_CDATA[0]):len(written) - len(_CDATA[1])]
        if as_text:
            value = json.dumps(written, ensure_ascii=False)
        else:
            json.loads(written, parse_constant=_no_constant)  # one JSON value, or ValueError
            value = written
        members.append(f"{json.dumps(key, ensure_ascii=False)}: {value}")
        at = end + len(layout.value_end)
    return name, "{" + ", ".join(members) + "}", expect(text, at, layout.after_parameters)


def expect(text: str, at: int, part: str) -> int:
    """Where `part` ends, read at `at` in `text`; ValueError where `text` does not have it there."""
    if not text.startswith(part, at):
        raise ValueError(f"expected {part!r}")
    return at + len(part)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON")
