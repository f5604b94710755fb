"""`propertyNames` written as keys llguidance holds: a pattern as `patternProperties`, listed names as properties.

llguidance does not implement `propertyNames` (it warns, and takes any key).
The maps real schemas use it on list no property of their own: environment
variables by a pattern, a recipe's ingredients by name, a workflow's events
from an enum, label names of at most so many characters, any name but a few
reserved ones. There `{"propertyNames": {"pattern": P}, "additionalProperties":
S}` takes exactly the keys and values `{"patternProperties": {P: S},
"additionalProperties": false}` does; a length is the pattern of that many
characters, and a pattern with a maximum length the pattern with its one
unbounded repeat bounded so that its longest name fits; names from an `enum`
or a `const` are the object's only optional properties, each of schema S; and
names refused by a `not` of listed names are properties of schema `false`
(which llguidance holds: no such key is written). Only such objects are
rewritten; any other keeps llguidance's warning.
"""

from __future__ import annotations

import re
from typing import Any

from .key_patterns import KEY_LENGTH_LIMIT, as_full_match, bounded_repeats
from .schema_keywords import ANNOTATIONS, is_count, listed_values, refers_from_root, resolved, rewritten_bottom_up

try:  # Python's parser of regular expressions, to count a pattern's widths (never to match: no backtracking)
    from re import _parser as _regex_parser  # Python 3.11 and later
except ImportError:  # pragma: no cover (3.10)
    import sre_parse as _regex_parser  # type: ignore[no-redef]

_REPEATS = {getattr(_regex_parser, name) for name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
            if hasattr(_regex_parser, name)}

# An object that says no more than these of its keys is a map whose names `propertyNames` alone decides.
_MAP_KEYS = {"type", "propertyNames", "additionalProperties", "minProperties", "maxProperties", "required", "$defs",
             "definitions", "$schema"} | ANNOTATIONS
_NAME_KEYS = {"type", "pattern", "enum", "const", "minLength", "maxLength", "not"} | ANNOTATIONS  # what names may say
_LONGEST_COUNTED_NAME = 256  # a maxLength above it is left to llguidance's warning (a regex counting that far)


def property_names_as_keys(schema: Any) -> Any:
    """`schema` with each map's `propertyNames` (a pattern, a length, listed names, and names refused by a `not` of
    listed ones) written as keys llguidance holds (a new schema; the input untouched). A schema under which a `$ref`
    might not name what it names from the root (a nested `$id`) is returned as it is."""
    if not refers_from_root(schema):
        return schema
    root = schema

    def change(node: dict[str, Any]) -> dict[str, Any]:
        names = resolved(node.get("propertyNames"), root)
        if "propertyNames" not in node or not node.keys() <= _MAP_KEYS:
            return node
        keys = _keys_schema(names, node.get("additionalProperties", True))
        if keys is None:
            return node
        rest = {key: value for key, value in node.items() if key not in ("propertyNames", "additionalProperties")}
        return rest | keys

    return rewritten_bottom_up(schema, change)


def _keys_schema(names: Any, values: Any) -> dict[str, Any] | None:
    """The keywords that take the keys `names` takes, each with a value of schema `values`; None where `names`
    says of a key what is not written here (listed names beside a pattern or a length, a `not` of anything but
    listed names, ...)."""
    if isinstance(names, bool):  # (`true`: any name; `false`: none, an empty object)
        return {"additionalProperties": values if names else False}
    if not (isinstance(names, dict) and names.keys() <= _NAME_KEYS and names.get("type", "string") == "string"):
        return None
    refused = _refused(names.get("not"))
    shaped = names.keys() & {"pattern", "minLength", "maxLength"}
    if refused is None or (shaped and names.keys() & {"enum", "const"}):
        return None
    none_of_them: dict[str, Any] = {"properties": {name: False for name in refused}} if refused else {}
    if names.keys() & {"enum", "const"}:
        listed = _listed(names)
        return None if listed is None else {
            "properties": {name: values for name in listed if name not in refused}, "additionalProperties": False}
    if not shaped:
        return {**none_of_them, "additionalProperties": values}  # (names otherwise open: any key but the refused)
    pattern = _names_pattern(names)
    return None if pattern is None else \
        {**none_of_them, "patternProperties": {pattern: values}, "additionalProperties": False}


def _names_pattern(names: dict[str, Any]) -> str | None:
    """A pattern of the names that `names`' pattern, minLength and maxLength take together; None where lengths are
    no counts, or a pattern cannot be read here or held to them (see `_held_to_lengths`)."""
    shortest, longest = names.get("minLength", 0), names.get("maxLength")
    if not is_count(shortest) or (longest is not None and not (is_count(longest) and longest >= shortest)):
        return None
    pattern = names.get("pattern")
    if pattern is None:  # (no maximum: the bound on keys a schema takes freely, or the minimum where longer)
        most = max(shortest, KEY_LENGTH_LIMIT) if longest is None else longest
        return None if most > _LONGEST_COUNTED_NAME else f"^[\\s\\S]{{{shortest},{most}}}$"
    if not isinstance(pattern, str):
        return None
    if names.keys().isdisjoint({"minLength", "maxLength"}):
        return pattern
    return _held_to_lengths(pattern, shortest, longest)


def _held_to_lengths(pattern: str, shortest: int, longest: int | None) -> str | None:
    """`pattern` (anchored at both ends) taking exactly its names of `shortest` to `longest` characters: as
    written where it takes no others, else, where it has one unbounded repeat, with that repeat bounded
    (key_patterns.py) as far as it may go for the longest name to fit, where that refuses no name that fits (a
    Kubernetes label's `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$` within 63 characters: its `*` at most 61 times). None
    where the pattern takes names shorter than `shortest` (a length llguidance's keys cannot be held to), has
    several unbounded repeats, a bound would refuse names that fit (`^[a-z]{1,20}-[a-z]*$` within 25: a first
    part of one letter leaves room for 23 after the `-`, one of 20 for 4), or cannot be read here."""
    widths = _widths(pattern)
    if widths is None or widths[0] < shortest:
        return None
    if longest is None or widths[1] <= longest:
        return pattern
    if longest > _LONGEST_COUNTED_NAME:
        return None
    fitting, low, high = None, 0, longest
    while low <= high:  # (the widest name grows with the repeat's bound: the largest bound that fits)
        bound = (low + high) // 2
        bounded = bounded_repeats(pattern, bound)
        if bounded is None or bounded[1] != 1 or (bounded_widths := _widths(bounded[0])) is None:
            return None
        if bounded_widths[1] <= longest:
            fitting, low = (bounded[0], bound), bound + 1
        else:
            high = bound - 1
    if fitting is None:
        return None
    around = _around_the_open_repeat(pattern)  # (fewest characters around it, fewest in one of its turns)
    return fitting[0] if around is not None and around[1] > 0 and around[0] + (fitting[1] + 1) * around[1] > longest \
        else None


def _around_the_open_repeat(pattern: str) -> tuple[int, int] | None:
    """For a pattern with one unbounded repeat: the fewest characters a name that goes through the repeat has
    outside it, and the fewest of one turn of the repeat; so a name that turns it n times has at least
    `outside + n × turn` characters. None where the repeat sits inside a bounded repeat of more than one turn.
    (`pattern` is one `_widths` reads.)"""
    parsed = _regex_parser.parse(pattern)

    def fewest(items: list[Any]) -> int:
        return _regex_parser.SubPattern(parsed.state, items).getwidth()[0]

    def through(items: list[Any]) -> tuple[int, int] | None:
        for index, (op, value) in enumerate(items):
            inside = within(op, value)
            if inside is not None:
                return (fewest(items[:index] + items[index + 1:]) + inside[0], inside[1]) if inside[1] >= 0 else inside
        return None

    def within(op: Any, value: Any) -> tuple[int, int] | None:
        if op in _REPEATS:
            least, most, body = value
            if most == _regex_parser.MAXREPEAT:
                return 0, body.getwidth()[0]
            inner = through(list(body))
            return inner if inner is None or most <= 1 else (0, -1)  # (-1: turned more than once, not read)
        if op == _regex_parser.SUBPATTERN:
            return through(list(value[-1]))
        if op == _regex_parser.BRANCH:
            return next((found for way in value[1] if (found := through(list(way))) is not None), None)
        return None

    found = through(list(parsed))
    return None if found is None or found[1] < 0 else found


def _widths(pattern: str) -> tuple[int, int] | None:
    """The fewest and most characters of a name `pattern` takes (the most may be unbounded: a huge number), read
    by Python's regular-expression parser (never matched); None where the pattern is not anchored at both ends with
    no `|` outside a group, or that parser cannot read it (`\\p{L}`, say)."""
    if not (pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")) \
            or as_full_match(pattern) is None:
        return None
    try:
        return _regex_parser.parse(pattern).getwidth()
    except (re.error, RecursionError, OverflowError):
        return None


def _refused(refusal: Any) -> list[str] | None:
    """The names a `not` of listed names refuses ([] where there is no `not`); None for any other `not`."""
    if refusal is None:
        return []
    if not isinstance(refusal, dict) or not refusal.keys() - ANNOTATIONS <= {"enum", "const"}:
        return None
    return _listed(refusal)


def _listed(names: dict[str, Any]) -> list[str] | None:
    """The string names of a `const` or an `enum` (`listed_values`: not both)."""
    listed = listed_values(names)
    return None if listed is None else [name for name in listed if isinstance(name, str)]
