"""JSON Schema's keywords by what their values hold: data, a schema, or a map of names to schemas; and the
JSON types a value belongs to.

Shared by the code that bounds a schema (grammar.py) and the code that follows one
while JSON is written (unique_items.py): a property named `enum` or `uniqueItems`
is a name, not a keyword, and `enum`'s values are data, not schemas.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterator

# The bounds localspec puts on a number a schema leaves open (see grammar.py, where they are put): at most
# WHOLE_DIGITS digits before the point and FRACTION_DIGITS after it, as llguidance then writes it (no exponent).
WHOLE_DIGITS, FRACTION_DIGITS = 15, 9
NUMBER_MAGNITUDE_LIMIT = 10**WHOLE_DIGITS
NUMBER_STEP = 10.0**-FRACTION_DIGITS

# The `$comment` on an `anyOf` of a conditional's cases (schema_conditionals.py) that only ask which properties are
# present and which listed values they hold: where a value goes is still told by its object's own keywords.
CASES_COMMENT = "localspec: a conditional's cases"

# The definitions (numbered from 1, one per level of nesting) that values a schema leaves untyped become: any JSON,
# bounded (see grammar.py).
ANY_VALUE_DEFINITION = "localspec_any_value"

# Keywords that only describe a schema: a schema of them alone leaves its value untyped.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment"})

DATA_KEYWORDS = {"const", "enum", "default", "examples", "required", "dependentRequired"}  # their values are data
SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}  # names to schemas


# Of two bounds under one keyword (a node's own and one it takes in), the one that binds.
_TIGHTER_BOUND = {"minimum": max, "exclusiveMinimum": max, "maximum": min, "exclusiveMaximum": min}
BOUND_KEYWORDS = tuple(_TIGHTER_BOUND)  # a number's bounds


def with_bounds(node: dict[str, Any], bounds: dict[str, Any]) -> dict[str, Any]:
    """A copy of `node` holding `bounds` too (`minimum`, `exclusiveMaximum`, …): under a keyword it has a finite
    bound of already, the one that binds."""
    bounded = dict(node)
    for key, bound in bounds.items():
        bounded[key] = _TIGHTER_BOUND[key](bounded[key], bound) if finite_number(bounded.get(key)) else bound
    return bounded


def finite_number(value: Any) -> bool:
    """Whether `value` is a number, not infinite (an integer always: `math.isfinite` overflows on 10**400)."""
    if isinstance(value, int):
        return not isinstance(value, bool)
    return isinstance(value, float) and math.isfinite(value)


def refers_into(schema: Any, keyword: str) -> bool:
    """Whether a `$ref` in `schema` points into a `keyword` of it (`#/$defs/x/not`): a rewrite that takes that
    keyword away would leave the ref naming nothing."""
    refs = [node["$ref"] for node in schemas_in(schema) if isinstance(node.get("$ref"), str)]
    return any(keyword in ref.split("/") for ref in refs)


def schemas_in(schema: Any) -> list[dict[str, Any]]:
    """`schema` and every schema inside it, found by keyword (see `subschemas`)."""
    if isinstance(schema, list):
        return [node for item in schema for node in schemas_in(item)]
    if not isinstance(schema, dict):
        return []
    return [schema, *(node for child in subschemas(schema) for node in schemas_in(child))]


def takes_definitions(schema: Any, prefix: str) -> bool:
    """Whether definitions named `prefix`… can be added to the root of `schema` and named from anywhere in it:
    `$defs` free to take them, and no schema inside with an `$id` of its own (where `#/$defs/…` would name its
    definitions)."""
    if not isinstance(schema, dict):
        return False
    defs = schema.get("$defs", {})
    return (isinstance(defs, dict) and not any(isinstance(name, str) and name.startswith(prefix) for name in defs)
            and refers_from_root(schema))


def subschemas(schema: dict[str, Any], skipping: frozenset[str] = frozenset()) -> Iterator[Any]:
    """The values of `schema`'s keywords that hold schemas (or lists of them), but those in `skipping`: not data
    (`enum`, `required`), and in maps of names to schemas (`properties`), the schemas, not the names."""
    for key, value in schema.items():
        if key in skipping:
            continue
        if key in SCHEMA_MAPS and isinstance(value, dict):
            yield from value.values()
        elif key not in DATA_KEYWORDS:
            yield value


def with_subschemas_changed(schema: dict[str, Any], change: Callable[[Any], Any],
                            skipping: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A copy of `schema` with `change` applied to each schema its keywords hold: a keyword's value, each item of a
    list of them (`anyOf`), each schema of a map of names to schemas (`properties`; in draft 7's `dependencies`,
    the schemas, not the lists of names); data (`enum`, `required`, a `$ref`) and the keywords in `skipping` as
    they are."""
    changed: dict[str, Any] = {}
    for key, value in schema.items():
        if key in DATA_KEYWORDS or key == "$ref" or key in skipping:
            changed[key] = value
        elif key in SCHEMA_MAPS and isinstance(value, dict):
            changed[key] = {name: change(subschema) for name, subschema in value.items()}
        elif key == "dependencies" and isinstance(value, dict):
            changed[key] = {name: needs if isinstance(needs, list) else change(needs) for name, needs in value.items()}
        elif isinstance(value, list):
            changed[key] = [change(item) for item in value]
        else:
            changed[key] = change(value)
    return changed


def rewritten_bottom_up(schema: Any, change: Callable[[dict[str, Any]], Any],
                        skipping: frozenset[str] = frozenset()) -> Any:
    """`schema` with `change` applied to each schema in it, at any depth, once the schemas inside it are changed
    (see `with_subschemas_changed`), but those under the keywords in `skipping`: a new schema, the input
    untouched."""
    if isinstance(schema, list):
        return [rewritten_bottom_up(item, change, skipping) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return change(with_subschemas_changed(schema, lambda subschema: rewritten_bottom_up(subschema, change, skipping),
                                          skipping))


def json_types(value: Any) -> set[str]:
    """The JSON types a parsed JSON value belongs to (a whole number, 2 or 2.0, is both integer and number)."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, (int, float)):
        whole = isinstance(value, int) or value.is_integer()
        return {"integer", "number"} if whole else {"number"}
    return {{str: "string", list: "array", dict: "object"}.get(type(value), "")}


def listed_values(schema: dict[str, Any]) -> list[Any] | None:
    """The values a schema lists: its `const`, or its `enum`; None where it has neither, both, or an `enum` that is
    no list."""
    if "const" in schema and "enum" not in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return values if isinstance(values, list) and "const" not in schema else None


def is_count(value: Any) -> bool:
    """Whether `value` is what a schema's counts (`maxLength`, `minItems`, ...) must be: an integer, not negative."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def json_identity(value: Any) -> str:
    """One text for JSON values JSON Schema counts equal (1, 1.0 and 1e0; 0 and -0.0): a number by its value."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(json_identity(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(key) + ":" + json_identity(item) for key, item in sorted(value.items())) + "}"
    return json.dumps(value)


def pointer_escaped(name: str) -> str:
    """A name as a JSON pointer writes it (RFC 6901)."""
    return name.replace("~", "~0").replace("/", "~1")


def pointed(root: Any, reference: Any) -> Any:
    """What a local `$ref` ("#", "#/$defs/name", ...) points at in `root`; None for any other (an anchor's `#name`,
    another document's)."""
    if not isinstance(reference, str) or not (reference == "#" or reference.startswith("#/")):
        return None
    node: Any = root
    for part in filter(None, reference[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def refers_from_root(schema: Any) -> bool:
    """Whether every local `$ref` in `schema` names a place in it from its root: no schema inside has an `$id` of
    its own (under which `#/...` names places in that schema)."""
    return isinstance(schema, dict) and not any("$id" in node for node in schemas_in(schema) if node is not schema)


def resolved(schema: Any, root: Any) -> Any:
    """`schema`, or what it names where it is a lone local `$ref` (annotations beside it), followed through
    further such refs (a loop of them, or a ref that names nothing: `schema` itself)."""
    node = schema
    for _ in range(32):
        if not (isinstance(node, dict) and "$ref" in node and node.keys() - {"$ref"} <= ANNOTATIONS):
            return node
        node = pointed(root, node["$ref"])
        if node is None:
            return schema
    return schema
