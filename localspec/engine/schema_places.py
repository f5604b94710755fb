"""Where a JSON schema puts each value of a document, as far as that can be told while the document is written.

`SchemaPlaces` gives the schema of a property's value or an array's item,
resolved through local `$ref`s and through an `anyOf`/`oneOf` where one branch
alone takes the value's JSON type (the first byte of a value tells its type).
`survey_held` walks a schema the same way to say which arrays with
`uniqueItems` the rule of unique_items.py holds, how many it does not, and
whether any object takes keys it does not list (whose keys the rule holds unique).
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from .byte_tokenizer import byte_matcher
from .key_language import KeyLanguage
from .key_patterns import as_full_match
from .string_language import StringLanguage
from .schema_keywords import (
    ANNOTATIONS, ANY_VALUE_DEFINITION, CASES_COMMENT, NUMBER_MAGNITUDE_LIMIT, NUMBER_STEP, is_count, json_identity,
    json_types, pointed, schemas_in, subschemas,
)

_ANNOTATIONS = ANNOTATIONS | {"x-guidance"}  # (x-guidance: llguidance's options)
# Keywords a string schema may carry and still take any text: each one only bounds its length or describes it.
_FREE_STRING_KEYS = {"type", "minLength", "maxLength"} | _ANNOTATIONS
_ENUM_STRING_KEYS = {"type", "enum"} | _ANNOTATIONS
_INTEGER_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} | _ANNOTATIONS
# A number as localspec bounds the open ones: llguidance writes it with up to WHOLE_DIGITS digits before the
# point, FRACTION_DIGITS after it, no exponent.
_OPEN_NUMBER = {"type": "number", "exclusiveMaximum": NUMBER_MAGNITUDE_LIMIT,
                "exclusiveMinimum": -NUMBER_MAGNITUDE_LIMIT, "multipleOf": NUMBER_STEP}
_EXACT_BOUND = 2**53  # the largest bound llguidance reads exactly (it reads bounds as floating point numbers)
JSON_TYPES = ("object", "array", "string", "number", "boolean", "null")
_ANY_VALUE: dict[str, Any] = {}  # the schema of a value a schema leaves open (one object: walked once; never changed)
CASES_LEFT_OUT = "localspec: cases left out"  # (the mark of a schema placed without its conditional's cases)
_NOT_FOLLOWED = {"$dynamicRef", "$recursiveRef"}  # (refs resolved at run time)
# The keywords that apply to one type of value only (a schema that does not say its type may carry both kinds).
_ARRAY_ONLY_KEYWORDS = {"items", "prefixItems", "contains", "additionalItems", "unevaluatedItems", "minContains",
                        "maxContains"}
_OBJECT_ONLY_KEYWORDS = {"properties", "patternProperties", "additionalProperties", "propertyNames", "dependentSchemas",
                         "unevaluatedProperties"}
# What a branch may say and only ask which properties are present (_without_presence_branches).
_PRESENCE_KEYS = {"required", "minProperties", "maxProperties"} | _ANNOTATIONS
# What an object branch may say and be seen with others as one object (SchemaPlaces._objects_view).
_VIEWED_OBJECT_KEYS = {"type", "properties", "required", "additionalProperties", "minProperties", "maxProperties",
                       CASES_LEFT_OUT} | _ANNOTATIONS


@dataclass(frozen=True)
class IntegerRange:
    """The integers an integer schema takes: from `low` to `high`, both included (None: no bound that side)."""

    low: int | None
    high: int | None

    def count(self, low: int, high: int) -> int:
        """How many of the integers from `low` to `high` the range takes."""
        lowest = low if self.low is None else max(low, self.low)
        highest = high if self.high is None else min(high, self.high)
        return max(0, highest - lowest + 1)

    @property
    def size(self) -> int | None:
        """How many integers the range takes (None: endless)."""
        return None if self.low is None or self.high is None else max(0, self.high - self.low + 1)


@dataclass(frozen=True)
class IntegerSet:
    """The integers an enum of integers lists (`members`, sorted): what a range says of its integers, said of
    them (`low` and `high` its least and greatest)."""

    members: tuple[int, ...]

    @property
    def low(self) -> int:
        return self.members[0]

    @property
    def high(self) -> int:
        return self.members[-1]

    def count(self, low: int, high: int) -> int:
        """How many of the integers from `low` to `high` the enum lists."""
        return max(0, bisect.bisect_right(self.members, high) - bisect.bisect_left(self.members, low))

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass(frozen=True)
class HeldItems:
    """The items of an array with `uniqueItems` that the rule holds: free strings (at most `max_length`
    characters, where the schema says), strings by a pattern or a format (`language`), the strings of an enum
    (`values`), the integers of a range (`integers`), numbers left open (`fractions`), or records (`record`:
    objects of a few scalar values, the last held as an item is)."""

    max_length: int | None = None
    values: frozenset[str] | None = None
    integers: IntegerRange | IntegerSet | None = None
    fractions: bool = False  # numbers as localspec bounds open ones (_OPEN_NUMBER)
    record: "RecordItems | None" = None
    language: StringLanguage | None = None

    @property
    def numbers(self) -> bool:
        """Whether the items are numbers (integers or fractions), compared by their value."""
        return self.integers is not None or self.fractions

    @property
    def endless(self) -> bool:
        """Whether there are more such items than any array holds: free strings, numbers without both bounds (not
        said of strings by a pattern or a format: their language may be finite)."""
        if self.values is not None or self.language is not None:
            return False
        if self.integers is not None:
            return self.integers.size is None
        return self.fractions or self.max_length != 0


@dataclass(frozen=True)
class RecordItems:
    """Objects as items, held where they are records: every property listed is required and no other key is
    taken, so that llguidance writes them all, in the listed order (`names`); each value a string, number,
    boolean or null. Two records are equal where their values are, so the last property's value is held as an
    array's item is (`last`), unlike the last values of the earlier records whose other values equal this one's.
    Only where those can never all be held (`last` takes at least as many values as the array takes items), as
    nothing before the last value is refused."""

    names: tuple[str, ...]
    last: HeldItems
    # Where the last property takes fewer values than the array takes items (a file's `change`, one of four): the
    # value before it, a free string, held unlike those whose every last value a record with the same values
    # before them holds already (`last_count` of them), so that the last value always has one left.
    before_last: HeldItems | None = None
    last_count: int = 0


def held_items(schema: Any, places: "SchemaPlaces | None" = None) -> HeldItems | None:
    """What `schema` takes as items where it is an array with `uniqueItems` the rule holds (free strings, an
    enum's strings, integers between bounds or none, numbers left open; records, where `places` resolves their
    schemas); else None."""
    if not isinstance(schema, dict) or schema.get("uniqueItems") is not True or "prefixItems" in schema:
        return None
    record = record_items(schema, places) if places is not None else None
    if record is not None:
        return HeldItems(record=record)
    items = schema.get("items")
    if places is not None and isinstance(items, dict) and "$ref" in items and len(places.types(items)) == 1:
        items = places.of_value(items, min(places.types(items)))  # (items by a `$ref`: what it names)
    if not isinstance(items, dict):
        return None
    if only_the_empty_string(items):  # one value: held as a listed one is (a free string could always be new)
        return HeldItems(values=frozenset([""]))
    if items.get("type") == "string" and items.keys() <= _FREE_STRING_KEYS:
        most = items.get("maxLength")
        return HeldItems(max_length=most if is_count(most) else None)
    values = items.get("enum")
    if (isinstance(values, list) and values and all(isinstance(value, str) for value in values)
            and items.get("type", "string") == "string" and items.keys() <= _ENUM_STRING_KEYS):
        return HeldItems(values=frozenset(values))
    language = StringLanguage.of_items(items, places.root.get("x-guidance")) if places is not None else None
    if language is not None:
        return HeldItems(language=language)
    bounds = integer_range(items) or integer_set(items)
    if bounds is not None:
        return HeldItems(integers=bounds)
    if {key: value for key, value in items.items() if key not in _ANNOTATIONS} == _OPEN_NUMBER:
        return HeldItems(fractions=True)
    return None


def only_the_empty_string(schema: Any) -> bool:
    """Whether `schema` is a string of no other keyword than its lengths, and its `maxLength` is 0."""
    return (isinstance(schema, dict) and schema.get("type") == "string" and schema.keys() <= _FREE_STRING_KEYS
            and schema.get("maxLength") == 0 and not isinstance(schema.get("maxLength"), bool))


_RECORD_KEYS = {"type", "properties", "required", "additionalProperties", "minProperties", "maxProperties",
                *_ANNOTATIONS}
_SCALAR_TYPES = {"string", "number", "boolean", "null"}


def record_items(array: dict[str, Any], places: "SchemaPlaces") -> RecordItems | None:
    """The records an array with `uniqueItems` takes as items (see RecordItems), where its items are such."""
    items = array.get("items")
    if not isinstance(items, dict) or places.types(items) != {"object"}:
        return None  # (items that may be something else, a null or a number, would not be held)
    record = places.of_value(items, "object")
    if record is None or not record.keys() <= _RECORD_KEYS or record.get("additionalProperties") is not False:
        return None
    properties, required = record.get("properties"), record.get("required")
    if not (isinstance(properties, dict) and properties and isinstance(required, list)
            and all(isinstance(name, str) for name in required) and set(required) == set(properties)):
        return None
    if not all(places.types(value) and places.types(value) <= _SCALAR_TYPES for value in properties.values()):
        return None
    last_schema = list(properties.values())[-1]
    kinds = places.types(last_schema)
    last_value = places.of_value(last_schema, min(kinds)) if len(kinds) == 1 else None
    last = held_items({"type": "array", "uniqueItems": True, "items": last_value}, places)
    if last is None:
        return None
    most_items = array.get("maxItems")
    if last.endless or (is_count(most_items) and _how_many(last, most_items) >= most_items):
        return RecordItems(tuple(properties), last)
    # (every last value could be held before the last item: a dead end, but for a free string before it)
    before_last = _free_string(list(properties.values())[-2], places) if len(properties) > 1 else None
    last_count = _how_many(last, most_items if is_count(most_items) else _MOST_COUNTED)
    if before_last is None or last_count < 1:
        return None
    return RecordItems(tuple(properties), last, before_last, last_count)


_MOST_COUNTED = 1024  # (the last values of records in an array without a maxItems: counted up to so many)


def _free_string(schema: Any, places: "SchemaPlaces") -> HeldItems | None:
    """What a record's value takes where it is a free string (any text, at most a maxLength: it can always go
    on to a new one), as an item would be held; else None."""
    kinds = places.types(schema)
    value = places.of_value(schema, "string") if kinds == {"string"} else None
    held = held_items({"type": "array", "uniqueItems": True, "items": value}, places)
    free = held is not None and held.values is None and held.language is None and not held.numbers
    return held if free and held.record is None and held.endless else None


def _how_many(items: HeldItems, most: int) -> int:
    """How many values items of a few take (an enum's, a range's; a pattern's or a format's, counted up to
    `most`)."""
    if items.values is not None:
        return len(items.values)
    if items.language is not None:
        return items.language.count_up_to(most) or 0
    return items.integers.size if items.integers is not None and items.integers.size is not None else 0


def integer_set(items: Any) -> IntegerSet | None:
    """The integers an enum of integers lists (llguidance writes each as JSON spells it: `7`, `-12`), where the
    schema says no more than `type: integer` beside it; None for any other schema."""
    values = items.get("enum") if isinstance(items, dict) else None
    if (not isinstance(values, list) or not values or not items.keys() <= {"type", "enum"} | _ANNOTATIONS
            or items.get("type", "integer") not in ("integer", "number")):
        return None
    if not all(type(value) is int and abs(value) <= _EXACT_BOUND for value in values):
        return None  # (2.0 is written `2.0`, which the cursor does not read as an integer)
    return IntegerSet(tuple(sorted(set(values))))


def integer_range(items: Any) -> IntegerRange | None:
    """The integers an integer schema takes between its bounds (llguidance holds an integer to its bounds exactly,
    digit by digit); None where it says more than its bounds (a `multipleOf`), or a bound is not a number, or not
    one llguidance reads exactly (`exclusiveMaximum: true`, as before draft 6; beyond 2**53, where its bounds are
    rounded to floating point); None for any other schema."""
    if not isinstance(items, dict) or items.get("type") != "integer" or not items.keys() <= _INTEGER_KEYS:
        return None
    bounds = {key: items[key] for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if key in items}
    if not all(isinstance(bound, (int, float)) and not isinstance(bound, bool) and abs(bound) <= _EXACT_BOUND
               for bound in bounds.values()):  # (NaN is no number: it fails the comparison)
        return None
    lows = [math.ceil(bounds["minimum"])] if "minimum" in bounds else []
    lows += [math.floor(bounds["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in bounds else []
    highs = [math.floor(bounds["maximum"])] if "maximum" in bounds else []
    highs += [math.ceil(bounds["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in bounds else []
    return IntegerRange(max(lows) if lows else None, min(highs) if highs else None)


def takes_other_keys(schema: dict[str, Any]) -> bool:
    """Whether an object of `schema` takes keys it does not list, of any name (no `additionalProperties: false`, no
    `propertyNames`). llguidance writes an object's listed keys at most once each, in order, but lets such other
    keys repeat: the rule holds them unique, and a key equal to an earlier one can always take another character
    (where no `propertyNames` bounds them: llguidance leaves it unenforced today, but keys it held to a few names
    could run out). Keys by `patternProperties` are such keys too where other keys are taken: a key that no pattern
    takes any more is another key (llguidance reads `additionalProperties` as every key no pattern matches), where
    some value is sure to satisfy `additionalProperties` (`_surely_satisfiable`; one no value satisfies, `{"enum":
    []}`, takes no other key, and a repeated key by pattern would have no way on)."""
    other = schema.get("additionalProperties", True)
    if "propertyNames" in schema or other is False:
        return False
    return "patternProperties" not in schema or _surely_satisfiable(other)


_TYPE_NAMES = {"string", "integer", "number", "boolean", "null", "object", "array"}
_UPPER_COUNTS = {"maxLength", "maxItems", "maxProperties"}  # (an empty or a short value meets any of them)
_LOWER_BOUNDS, _UPPER_BOUNDS = ("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")


def _surely_satisfiable(schema: Any) -> bool:
    """Whether some value is sure to satisfy `schema`, read plainly: `true`, annotations, a `$ref` to the any-value
    definitions (grammar.py), a `type` (or types), upper counts, a numeric range at least 1 wide; False where that is
    not told this way."""
    if schema is True:
        return True
    if not isinstance(schema, dict):
        return False
    if schema.keys() == {"$ref"}:
        return str(schema["$ref"]).startswith(f"#/$defs/{ANY_VALUE_DEFINITION}")
    if not schema.keys() <= _ANNOTATIONS | _UPPER_COUNTS | {"type", *_LOWER_BOUNDS, *_UPPER_BOUNDS}:
        return False
    kinds = schema.get("type", list(_TYPE_NAMES))
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if not isinstance(kinds, list) or not kinds or not set(kinds) <= _TYPE_NAMES:
        return False
    if not all(is_count(schema[key]) for key in schema.keys() & _UPPER_COUNTS):
        return False
    low, high = ([schema[key] for key in keys if key in schema] for keys in (_LOWER_BOUNDS, _UPPER_BOUNDS))
    if any(isinstance(bound, bool) or not isinstance(bound, (int, float)) for bound in (*low, *high)):
        return False
    return not (low and high) or not set(kinds) <= {"integer", "number"} or max(low) + 1 < min(high)


class SchemaPlaces:
    """Where a JSON schema puts each value: the schema of a property's value or an array's item, resolved
    through local `$ref`s, and through an `anyOf`/`oneOf` where one branch alone takes the value's type."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        # of_value's answers, by the schema's identity (every schema asked of is a part of the root, or
        # _ANY_VALUE, kept alive with it) and the value's type: a mask asks the same of many tokens.
        self._resolved: dict[tuple[int, str], dict[str, Any] | None] = {}
        self._views: list[dict[str, Any]] = []  # objects seen through several branches (_objects_view)

    def of_value(self, schema: Any, json_type: str) -> dict[str, Any] | None:
        """`schema` resolved for a value of `json_type` ("object", "array", ...), or None where it cannot be told."""
        key = (id(schema), json_type)
        if key not in self._resolved:
            self._resolved[key] = None  # (asked again while resolving, through a branch that leads back: not followed)
            self._resolved[key] = self._resolve(schema, json_type)
        return self._resolved[key]

    def _resolve(self, schema: Any, json_type: str) -> dict[str, Any] | None:
        for _ in range(64):  # (a `$ref` to itself, or a loop of them, resolves to nothing)
            if not isinstance(schema, dict) or schema.keys() & _NOT_FOLLOWED:
                return None
            if "$id" in schema and schema is not self.root:
                return None  # (a nested `$id` starts a resource of its own: its `#/...` refs are not the root's)
            schema = _without_presence_branches(_without_plain_cases(schema))
            if "$ref" in schema:
                if schema.keys() - {"$ref", "$defs", "definitions", "$schema"} - _ANNOTATIONS:
                    return None  # (keywords beside a $ref are merged with it: not followed)
                schema = self._pointed(schema["$ref"])
                continue
            combined = schema.keys() & {"anyOf", "oneOf", "allOf"}
            if not combined:
                return schema if json_type in self.types(schema) else None
            branches = schema.get("anyOf", schema.get("oneOf"))
            beside = schema.keys() - combined - _ANNOTATIONS
            if "type" in beside and json_type in self.types({"type": schema["type"]}):
                beside.discard("type")  # (a type beside the branches that takes this value narrows none of them)
            if json_type == "object":  # (counts and required names place no value; a discriminator is OpenAPI's note)
                beside -= {"minProperties", "maxProperties", "required", "discriminator"}
            if len(combined) > 1 or not isinstance(branches, list) or beside:
                return None  # (an allOf, or keywords beside the branches, merge them: not followed)
            taking = [branch for branch in branches if json_type in self.types(branch)]
            if len(taking) > 1 and json_type == "object":
                return self._objects_view(taking)
            if len(taking) != 1:
                return None
            schema = taking[0]
        return None

    def _objects_view(self, branches: list[Any]) -> dict[str, Any] | None:
        """Several object branches seen as one object (a `oneOf` by a `const` discriminator): each key's value is
        the schema every branch that takes the key gives it, or an `anyOf` of theirs where they differ (which
        `of_value` follows where one alone takes the value's type). Only of branches that say nothing more of their
        objects than their properties and counts; None otherwise. Kept, so that its parts keep their identity."""
        objects = [self.of_value(branch, "object") for branch in branches]
        if any(found is None or not found.keys() <= _VIEWED_OBJECT_KEYS
               or not isinstance(found.get("properties", {}), dict) for found in objects):
            return None
        names = list(dict.fromkeys(name for found in objects for name in found.get("properties", {})))
        view = {"type": "object",
                "properties": {name: _either([self.child(found, name, 0) for found in objects]) for name in names},
                "additionalProperties": _either([_values_under(found, "additionalProperties") for found in objects])}
        self._views.append(view)
        return view

    def types(self, schema: Any, depth: int = 0) -> set[str]:
        """The JSON types `schema` may take (all of them where it does not say, or where that cannot be told)."""
        if schema is True or depth > 32:
            return set(JSON_TYPES)
        if not isinstance(schema, dict):
            return set()
        if "$ref" in schema:
            pointed = self._pointed(schema["$ref"])
            return self.types(pointed, depth + 1) if pointed is not None else set(JSON_TYPES)
        kinds = schema.get("type")
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                branches = set().union(*(self.types(branch, depth + 1) for branch in schema[key]))
                return branches & self.types({"type": kinds}, depth + 1) if "type" in schema else branches
        if isinstance(kinds, str):
            kinds = [kinds]
        if isinstance(kinds, list):
            return {"number" if kind == "integer" else kind for kind in kinds if isinstance(kind, str)}
        listed = schema.get("enum") if isinstance(schema.get("enum"), list) else None
        if listed is None and "const" in schema:
            listed = [schema["const"]]
        if listed is not None:
            return set().union(*(json_types(value) for value in listed)) - {"integer"}  # (integers are numbers here)
        return set(JSON_TYPES)

    def child(self, container: dict[str, Any] | None, key: str | None, index: int) -> Any:
        """The schema of the value at `key` of an object, or at `index` of an array (key None), unresolved."""
        if container is None:
            return None
        if key is not None:
            properties = container.get("properties")
            if isinstance(properties, dict) and key in properties:
                return properties[key]
            by_pattern = _one_pattern(container)
            if by_pattern is not None:  # (a key by the one pattern takes its schema; another, additionalProperties')
                pattern, schema = by_pattern
                matches = _matches(pattern, key)
                if matches is None:
                    return None
                return schema if matches else _values_under(container, "additionalProperties")
            if "patternProperties" in container:
                return None  # (which of several patterns a key matches is not followed)
            return _values_under(container, "additionalProperties")
        prefix = container.get("prefixItems")
        if isinstance(prefix, list) and index < len(prefix):
            return prefix[index]
        return _values_under(container, "items")

    def asking_unique(self, schema: Any) -> list[dict[str, Any]]:
        """The schemas with `uniqueItems` in `schema`, through its local `$ref`s too (any in the root where a ref
        cannot be resolved as the root's: an anchor's `#name` may name any of them)."""
        found: dict[int, dict[str, Any]] = {}
        pending, seen = [schema], set()
        while pending:
            for node in schemas_in(pending.pop()):
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if node.get("uniqueItems") is True:
                    found[id(node)] = node
                if "$ref" in node:
                    pointed = self._pointed(node["$ref"])
                    pending.append(pointed if pointed is not None else self.root)
        return list(found.values())

    def _pointed(self, reference: Any) -> Any:
        """What a local `$ref` points at in the root (see `pointed`)."""
        return pointed(self.root, reference)


class HeldPlaces(NamedTuple):
    """What the rule holds in a schema's documents: the arrays with `uniqueItems` it holds, how many others ask for
    it, and whether any object it places takes keys it does not list (`takes_other_keys`) or keys by pattern alone
    (key_language.py): the rule holds those keys."""

    held: list[dict[str, Any]]
    not_held: int
    other_keys: bool


def survey_held(root: dict[str, Any]) -> HeldPlaces:
    """Every array with `uniqueItems` a document of `root` can hold, as the cursor would meet it: held where it is
    one of strings, integers or open numbers the cursor places (see SchemaPlaces), not held where its items are
    anything else or the cursor cannot place it (a `patternProperties` value, an `allOf`, a branch the value's
    type does not tell, a `not` or an `if`...); and whether an object the cursor places takes keys it does not
    list."""
    places = SchemaPlaces(root)
    held: dict[int, dict[str, Any]] = {}
    not_held: dict[int, dict[str, Any]] = {}
    visited: set[tuple[int, str]] = set()
    other_keys = False

    def walk(schema: Any, json_type: str) -> None:
        nonlocal other_keys
        node = places.of_value(schema, json_type)
        if node is None:
            if json_type in places.types(schema):  # a value of this type may stand here, its schema not followed
                not_held.update((id(found), found) for found in places.asking_unique(schema))
            return
        if (id(node), json_type) in visited:
            return
        visited.add((id(node), json_type))
        if json_type == "array":
            if node.get("uniqueItems") is True:
                (held if held_items(node, places) is not None else not_held)[id(node)] = node
            prefix, items = node.get("prefixItems"), _values_under(node, "items")
            places_followed = list(prefix) if isinstance(prefix, list) else []
            followed = {"prefixItems"} if isinstance(prefix, list) else set()
            if items is not None:  # (not the list of a schema before 2020-12, which `child` does not follow)
                places_followed.append(items)
                followed.add("items")
        elif json_type == "object":
            other_keys = other_keys or takes_other_keys(node) or KeyLanguage.of_object(node) is not None
            properties = node.get("properties")
            places_followed = list(properties.values()) if isinstance(properties, dict) else []
            followed = {"properties"}
            by_pattern = _one_pattern(node)
            if by_pattern is not None:
                places_followed.append(by_pattern[1])
                followed.add("patternProperties")
            if "patternProperties" not in node or by_pattern is not None:
                places_followed.append(_values_under(node, "additionalProperties"))
                followed.add("additionalProperties")
        else:
            places_followed, followed = [], set()
        for child in places_followed:
            for kind in JSON_TYPES:
                walk(child, kind)
        elsewhere = ((_ARRAY_ONLY_KEYWORDS if json_type != "array" else set())
                     | (_OBJECT_ONLY_KEYWORDS if json_type != "object" else set()))  # (not this value's keywords)
        for other in subschemas(node, skipping=frozenset(followed | elsewhere | {"$defs", "definitions"})):
            not_held.update((id(found), found) for found in places.asking_unique(other))

    for kind in JSON_TYPES:
        walk(root, kind)
    return HeldPlaces(list(held.values()), len(not_held), other_keys)  # (an array held in one place, not another: both)


def _without_plain_cases(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` without the parts of its `allOf` that are a conditional's plain cases (CASES_COMMENT): they say which
    properties are present and which listed values they hold, never where a value goes. Marked (CASES_LEFT_OUT): a
    case may narrow a value (`last` to one string), so the object is no record (`record_items`)."""
    parts = schema.get("allOf")
    if not isinstance(parts, list) or not any(isinstance(part, dict) and part.get("$comment") == CASES_COMMENT
                                              for part in parts):
        return schema
    kept = [part for part in parts if not (isinstance(part, dict) and part.get("$comment") == CASES_COMMENT)]
    without = {key: value for key, value in schema.items() if key != "allOf"}
    return {**without, "allOf": kept, CASES_LEFT_OUT: True} if kept else {**without, CASES_LEFT_OUT: True}


def _one_pattern(schema: dict[str, Any]) -> tuple[str, Any] | None:
    """An object's one `patternProperties` pattern and its schema, where it has one alone that `_matches` reads and
    no listed property matches it (a key that matches several patterns, or a pattern and a property, takes every
    schema it matches: which of them apply is not followed)."""
    patterns = schema.get("patternProperties")
    if not isinstance(patterns, dict) or len(patterns) != 1:
        return None
    (pattern, values), = patterns.items()
    properties = schema.get("properties")
    names = properties if isinstance(properties, dict) else {}
    if _pattern_matcher(pattern) is None or any(_matches(pattern, name) is not False for name in names):
        return None
    return pattern, values


def _matches(pattern: str, key: str) -> bool | None:
    """Whether `key` matches `pattern` somewhere (as JSON Schema reads a pattern), as llguidance reads the pattern
    (its regular expressions take time in proportion to the key, where Python's can take an exponential time:
    `^(\\w+\\s*)+$` on a long key); None where that cannot be told here (see `as_full_match`)."""
    fresh = _pattern_matcher(pattern)
    if fresh is None:
        return None
    matcher, written = fresh.deep_copy(), list(key.encode())
    return (matcher.validate_tokens(written) == len(written) and matcher.consume_tokens(written)
            and matcher.is_accepting())


@functools.lru_cache(maxsize=256)
def _pattern_matcher(pattern: str) -> Any:
    """A matcher over bytes, nothing fed, of the keys `pattern` takes (see `_matches`); None where it cannot be
    built."""
    from llguidance import LLMatcher

    regex = as_full_match(pattern) if isinstance(pattern, str) else None
    return byte_matcher(LLMatcher.grammar_from_regex(regex)) if regex is not None else None


def _either(schemas: list[Any]) -> Any:
    """The schema of a value that one of `schemas` (None: a branch that takes no such value) gives: the one they
    all give, an `anyOf` of those that differ, or false where none takes it."""
    distinct = list({json_identity(schema): schema for schema in schemas if schema is not None}.values())
    if not distinct:
        return False
    return distinct[0] if len(distinct) == 1 else {"anyOf": distinct}


def _without_presence_branches(schema: dict[str, Any]) -> dict[str, Any]:
    """An object's schema without an `anyOf`, `oneOf` or `allOf` beside its properties whose every branch only asks
    which properties are present (`"anyOf": [{"required": ["image"]}, {"required": ["build"]}]`): they place no
    value."""
    if not schema.keys() & _OBJECT_ONLY_KEYWORDS:
        return schema
    presence = [key for key in ("anyOf", "oneOf", "allOf") if isinstance(schema.get(key), list) and schema[key]
                and all(_asks_presence(branch) for branch in schema[key])]
    return {key: value for key, value in schema.items() if key not in presence} if presence else schema


def _asks_presence(branch: Any) -> bool:
    """Whether a branch asks only which properties are present or absent (absent: of schema `false`)."""
    if not isinstance(branch, dict) or not branch.keys() <= _PRESENCE_KEYS | {"properties"}:
        return False
    absent = branch.get("properties", {})
    return isinstance(absent, dict) and all(value is False for value in absent.values())


def _values_under(schema: dict[str, Any], keyword: str) -> dict[str, Any] | None:
    """The schema `keyword` (`items`, `additionalProperties`) gives the values it covers: its own, any value where it
    is absent or true (`{}`); None where it is not a schema (false: no value; a list: not followed)."""
    values = schema.get(keyword, True)
    if values is True:
        return _ANY_VALUE
    return values if isinstance(values, dict) else None

