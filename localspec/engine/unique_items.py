"""`uniqueItems` over strings, held while the JSON is written.

A grammar cannot say "unlike every earlier item", so llguidance does not
enforce `uniqueItems` (grammar.py spells it out where the items are a few listed
values). A small model at T=0 repeats itself in just such a list: a recipe's
tags came out `["baking", "sourdough", "baking"]`. Where an array's items are
free strings (no const, pattern or format: a string can always go on) or the
strings of a longer enum, `JsonCursor` follows the JSON written so far, byte by
byte, far enough to know when the text is inside such an array, and
`TokenGrammar` drops from each mask the tokens that would make an item repeat
one: a free string's closing quote after the same text, an enum's item as soon
as it can only become a value already held. That is one more rule of the
grammar, a function of the text so far like the others: the mask still comes
first in the one function that turns logits into a distribution, and
speculative decoding stays exact w.r.t. the constrained target.

Only arrays the cursor can place are held: the schema is followed through
`properties`, `additionalProperties`, `items`, `prefixItems` and local `$ref`s,
and through an `anyOf`/`oneOf` where one branch alone takes the value's JSON
type. `unique_string_arrays` says which arrays those are, so that the warning
"not enforced" stays for any other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol, Sequence

import numpy as np

from .schema_keywords import schemas_in, subschemas

_WHITESPACE = b" \t\r\n"
_NUMBER_BYTES = b"0123456789+-.eE"
_LITERALS = {ord("t"): 4, ord("f"): 5, ord("n"): 4}  # true, false, null: their length
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
# Keywords a string schema may carry and still take any text: each one only bounds its length or describes it.
_ANNOTATIONS = {"title", "description", "default", "examples", "$comment"}
_FREE_STRING_KEYS = {"type", "minLength", "maxLength"} | _ANNOTATIONS
_ENUM_STRING_KEYS = {"type", "enum"} | _ANNOTATIONS
_JSON_TYPES = ("object", "array", "string", "number", "boolean", "null")
_NOT_FOLLOWED = {"$dynamicRef", "$recursiveRef"}  # (refs resolved at run time)
# The keywords that apply to one type of value only (a schema that does not say its type may carry both kinds).
_ARRAY_KEYWORDS = {"items", "prefixItems", "contains", "additionalItems", "unevaluatedItems", "minContains", "maxContains"}
_OBJECT_KEYWORDS = {"properties", "patternProperties", "additionalProperties", "propertyNames", "dependentSchemas",
                    "unevaluatedProperties"}

# What the cursor expects next.
VALUE, AFTER_VALUE, KEY, COLON, STRING, NUMBER, LITERAL, DONE, LOST = range(9)
# What the string being written is.
KEY_STRING, VALUE_STRING, ITEM_STRING = range(3)


@dataclass(frozen=True)
class StringItems:
    """The items of an array of unique strings the rule holds: free strings (at most `max_length` characters,
    where the schema says), or the strings of an enum (`values`)."""

    max_length: int | None = None
    values: frozenset[str] | None = None


def unique_string_items(schema: Any) -> StringItems | None:
    """What `schema` takes as items where it is an array of unique strings the rule holds (free strings, or
    an enum's strings); else None."""
    if not isinstance(schema, dict) or schema.get("uniqueItems") is not True or "prefixItems" in schema:
        return None
    items = schema.get("items")
    if not isinstance(items, dict):
        return None
    if items.get("type") == "string" and items.keys() <= _FREE_STRING_KEYS:
        most = items.get("maxLength")
        return StringItems(max_length=most if _is_count(most) else None)
    values = items.get("enum")
    if (isinstance(values, list) and values and all(isinstance(value, str) for value in values)
            and items.get("type", "string") == "string" and items.keys() <= _ENUM_STRING_KEYS):
        return StringItems(values=frozenset(values))
    return None


class SchemaPlaces:
    """Where a JSON schema puts each value: the schema of a property's value or an array's item, resolved
    through local `$ref`s, and through an `anyOf`/`oneOf` where one branch alone takes the value's type."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def of_value(self, schema: Any, json_type: str) -> dict[str, Any] | None:
        """`schema` resolved for a value of `json_type` ("object", "array", ...), or None where it cannot be told."""
        for _ in range(64):  # (a `$ref` to itself, or a loop of them, resolves to nothing)
            if not isinstance(schema, dict) or schema.keys() & _NOT_FOLLOWED or ("$id" in schema and schema is not self.root):
                return None  # (a nested `$id` starts a resource of its own: its `#/...` refs are not the root's)
            if "$ref" in schema:
                if schema.keys() - {"$ref", "$comment", "title", "description"}:
                    return None  # (keywords beside a $ref are merged with it: not followed)
                schema = self._pointed(schema["$ref"])
                continue
            combined = schema.keys() & {"anyOf", "oneOf", "allOf"}
            if not combined:
                return schema if json_type in self.types(schema) else None
            branches = schema.get("anyOf", schema.get("oneOf"))
            if len(combined) > 1 or not isinstance(branches, list):
                return None  # (an allOf merges its parts: not followed)
            taking = [branch for branch in branches if json_type in self.types(branch)]
            if len(taking) != 1:
                return None
            schema = taking[0]
        return None

    def types(self, schema: Any, depth: int = 0) -> set[str]:
        """The JSON types `schema` may take (all of them where it does not say, or where that cannot be told)."""
        if schema is True or depth > 32:
            return set(_JSON_TYPES)
        if not isinstance(schema, dict):
            return set()
        if "$ref" in schema:
            return self.types(self._pointed(schema["$ref"]), depth + 1)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                return set().union(*(self.types(branch, depth + 1) for branch in schema[key]))
        kinds = schema.get("type")
        if isinstance(kinds, str):
            kinds = [kinds]
        if isinstance(kinds, list):
            return {"number" if kind == "integer" else kind for kind in kinds if isinstance(kind, str)}
        listed = schema["enum"] if isinstance(schema.get("enum"), list) else [schema["const"]] if "const" in schema else None
        if listed is not None:
            return {_json_type(value) for value in listed}
        return set(_JSON_TYPES)

    def child(self, container: dict[str, Any] | None, key: str | None, index: int) -> Any:
        """The schema of the value at `key` of an object, or at `index` of an array (key None), unresolved."""
        if container is None:
            return None
        if key is not None:
            properties = container.get("properties")
            if isinstance(properties, dict) and key in properties:
                return properties[key]
            if "patternProperties" in container:
                return None  # (which pattern a key matches is not followed)
            extra = container.get("additionalProperties")
            return extra if isinstance(extra, dict) else None
        prefix = container.get("prefixItems")
        if isinstance(prefix, list) and index < len(prefix):
            return prefix[index]
        items = container.get("items")
        return items if isinstance(items, dict) else None

    def asking_unique(self, schema: Any) -> list[dict[str, Any]]:
        """The schemas with `uniqueItems` in `schema`, through its local `$ref`s too."""
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
                    pending.append(self._pointed(node["$ref"]))
        return list(found.values())

    def _pointed(self, reference: Any) -> Any:
        """What a local `$ref` ("#", "#/$defs/name", ...) points at in the root; None for any other (an anchor's
        `#name`, another document's)."""
        if not isinstance(reference, str) or not (reference == "#" or reference.startswith("#/")):
            return None
        node: Any = self.root
        for part in filter(None, reference[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node


class UniqueArrays(NamedTuple):
    """What the rule makes of a schema's `uniqueItems`: the arrays it holds, and how many others ask for it."""

    held: list[dict[str, Any]]
    not_held: int


def survey_unique_arrays(root: dict[str, Any]) -> UniqueArrays:
    """Every array with `uniqueItems` a document of `root` can hold, as the cursor would meet it: held where it is
    one of unique strings the cursor places (see SchemaPlaces), not held where its items are anything else or the
    cursor cannot place it (a `patternProperties` value, an `allOf`, a branch the value's type does not tell, a
    `not` or an `if`...)."""
    places = SchemaPlaces(root)
    held: dict[int, dict[str, Any]] = {}
    not_held: dict[int, dict[str, Any]] = {}
    visited: set[tuple[int, str]] = set()

    def walk(schema: Any, json_type: str) -> None:
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
                (held if unique_string_items(node) is not None else not_held)[id(node)] = node
            prefix = node.get("prefixItems")
            places_followed = [places.child(node, None, index) for index in range(len(prefix) if isinstance(prefix, list) else 0)]
            places_followed.append(places.child(node, None, 1 << 30))
            followed = {"items", "prefixItems"}
        elif json_type == "object":
            properties = node.get("properties")
            places_followed = list(properties.values()) if isinstance(properties, dict) else []
            followed = {"properties"}
            if "patternProperties" not in node:
                places_followed.append(node.get("additionalProperties"))
                followed.add("additionalProperties")
        else:
            places_followed, followed = [], set()
        for child in places_followed:
            for kind in _JSON_TYPES:
                walk(child, kind)
        elsewhere = (_ARRAY_KEYWORDS if json_type != "array" else set()) | (_OBJECT_KEYWORDS if json_type != "object" else set())
        for other in subschemas(node, skipping=frozenset(followed | elsewhere | {"$defs", "definitions"})):
            not_held.update((id(found), found) for found in places.asking_unique(other))

    for kind in _JSON_TYPES:
        walk(root, kind)
    return UniqueArrays(list(held.values()), len(not_held))  # (one held in one place and not in another: both)


def unique_string_arrays(root: dict[str, Any]) -> list[dict[str, Any]]:
    """The array schemas of `root` whose unique items the rule holds (see `survey_unique_arrays`)."""
    return survey_unique_arrays(root).held


@dataclass(frozen=True)
class _Container:
    """An open object or array: its schema (None where not followed), and for an array of unique
    strings, the items it holds so far."""

    schema: dict[str, Any] | None
    is_array: bool
    items: StringItems | None = None  # an array of unique strings: what it takes as items
    seen: frozenset[str] = frozenset()
    index: int = 0  # array: the items begun so far
    key: str | None = None  # object: the key whose value comes next
    seen_at_max_length: bool = False  # an item it holds is as long as they may be: a new one that long must differ

    @property
    def unique_strings(self) -> bool:
        return self.items is not None

    def holding(self, item: str) -> "_Container":
        """This array with `item` among those it holds."""
        at_max = self.seen_at_max_length or len(item) == self.items.max_length  # type: ignore[union-attr]
        return replace(self, seen=self.seen | {item}, seen_at_max_length=at_max)

    def item_may_go_on(self, written: str | None) -> bool:
        """Whether the item written so far (None: it ends inside a character) can still end as a new item: an
        enum's item must begin a value not yet held; a free string at its maxLength must not be one held."""
        if written is None or self.items is None:
            return True
        if self.items.values is not None:
            return any(value.startswith(written) for value in self.items.values - self.seen)
        return not (self.seen_at_max_length and len(written) == self.items.max_length and written in self.seen)


@dataclass(frozen=True)
class JsonCursor:
    """How far a JSON text written so far has got: the containers open, what comes next, the string being
    written. Immutable: `feed` returns the cursor after more bytes, or None where those bytes close an item
    of a unique-strings array equal to an earlier one."""

    places: SchemaPlaces
    containers: tuple[_Container, ...] = ()
    expects: int = VALUE
    string: bytes = b""  # the string being written, from its opening quote
    string_role: int = VALUE_STRING  # KEY_STRING, VALUE_STRING, or ITEM_STRING: an item of an array of unique strings
    escaped: bool = False
    literal_left: int = 0

    @classmethod
    def start(cls, schema: dict[str, Any]) -> "JsonCursor":
        return cls(SchemaPlaces(schema))

    @property
    def in_unique_strings(self) -> bool:
        """The innermost container is an array of unique strings: the next bytes may close one of its items."""
        return bool(self.containers) and self.containers[-1].unique_strings and self.expects not in (DONE, LOST)

    def feed(self, data: bytes) -> "JsonCursor | None":
        """The cursor after `data`; None where `data` closes an item equal to an earlier one of its array, or
        leaves one at its maxLength equal to an earlier one (the grammar then has only the closing quote left)."""
        reader = _Reader(self)
        for byte in data:
            if not reader.step(byte):
                return None
        cursor = reader.cursor()
        if cursor.expects == STRING and cursor.string_role == ITEM_STRING:
            if not cursor.containers[-1].item_may_go_on(_string_so_far(cursor.string)):
                return None
        return cursor

    def room_before_a_forced_repeat(self) -> int | None:
        """Where an item may be led to where it can only repeat one: how many more characters the item being
        written (or the next) may take before that (0: any token may lead there). None elsewhere: only the
        tokens that hold a closing quote can make a repeat."""
        if not self.in_unique_strings:
            return None
        items = self.containers[-1]
        if items.items.values is not None:  # type: ignore[union-attr]
            return 0  # (an enum's items: the grammar allows few tokens there)
        most = items.items.max_length  # type: ignore[union-attr]
        if not items.seen_at_max_length or most is None:
            return None
        if self.expects != STRING or self.string_role != ITEM_STRING:
            return most
        written = _whole_characters_so_far(self.string)
        if not any(len(item) == most and item.startswith(written) for item in items.seen):
            return None  # (no item held at that length begins so: closing quotes alone can repeat one)
        return most - len(written)


class _Reader:
    """`JsonCursor.feed`'s working copy: the cursor's fields as plain variables, stepped byte by byte."""

    def __init__(self, cursor: JsonCursor) -> None:
        self.places = cursor.places
        self.containers = list(cursor.containers)
        self.expects = cursor.expects
        self.string = cursor.string
        self.string_role = cursor.string_role
        self.escaped = cursor.escaped
        self.literal_left = cursor.literal_left

    def cursor(self) -> JsonCursor:
        return JsonCursor(self.places, tuple(self.containers), self.expects, self.string, self.string_role,
                          self.escaped, self.literal_left)

    def step(self, byte: int) -> bool:
        """Read one byte; False where it closes a repeated item."""
        expects = self.expects
        if expects == STRING:
            return self._in_string(byte)
        if expects == NUMBER:
            if byte in _NUMBER_BYTES:
                return True
            self.expects = AFTER_VALUE
            return self.step(byte)
        if expects == LITERAL:
            self.literal_left -= 1
            if self.literal_left == 0:
                self.expects = AFTER_VALUE
            return True
        if expects in (DONE, LOST) or byte in _WHITESPACE:
            return True
        if expects == VALUE:
            self._value_starts(byte)
        elif expects == KEY:
            if byte == _QUOTE:
                self._string_opens(KEY_STRING)
            elif byte == ord("}"):
                self._container_closes()
            else:
                self.expects = LOST
        elif expects == COLON:
            self.expects = VALUE if byte == ord(":") else LOST
        elif expects == AFTER_VALUE:
            if byte == ord(","):
                self.expects = VALUE if self.containers and self.containers[-1].is_array else KEY
            elif byte in b"]}" and self.containers:
                self._container_closes()
            else:
                self.expects = LOST
        return True

    def _value_starts(self, byte: int) -> None:
        parent = self.containers[-1] if self.containers else None
        if byte == ord("]") and parent is not None and parent.is_array:
            self._container_closes()  # (an empty array)
            return
        kind = _type_starting(byte)
        if kind is None:
            self.expects = LOST
            return
        if parent is None:
            unresolved: Any = self.places.root
        else:
            unresolved = self.places.child(parent.schema, None if parent.is_array else parent.key, parent.index)
            if parent.is_array:
                self.containers[-1] = replace(parent, index=parent.index + 1)
        schema = self.places.of_value(unresolved, kind) if parent is None or parent.schema is not None else None
        if kind == "string":
            self._string_opens(ITEM_STRING if parent is not None and parent.unique_strings else VALUE_STRING)
        elif kind in ("object", "array"):
            items = unique_string_items(schema) if kind == "array" else None
            self.containers.append(_Container(schema, kind == "array", items))
            self.expects = VALUE if kind == "array" else KEY
        elif kind == "number":
            self.expects = NUMBER
        else:
            self.expects, self.literal_left = LITERAL, _LITERALS[byte] - 1

    def _string_opens(self, role: int) -> None:
        self.expects, self.string, self.string_role, self.escaped = STRING, b'"', role, False

    def _in_string(self, byte: int) -> bool:
        if self.string_role != VALUE_STRING:  # (a key names the value's schema; an item is compared)
            self.string += bytes((byte,))
        if self.escaped:
            self.escaped = False
        elif byte == _BACKSLASH:
            self.escaped = True
        elif byte == _QUOTE:
            return self._string_closes()
        return True

    def _string_closes(self) -> bool:
        if self.string_role == VALUE_STRING:
            self.expects = AFTER_VALUE
            return True
        try:
            text = json.loads(self.string.decode("utf-8"))
        except ValueError:  # (not JSON after all: nothing more is held)
            self.expects = LOST
            return True
        container = self.containers[-1]
        self.expects = AFTER_VALUE
        if self.string_role == KEY_STRING:
            self.containers[-1] = replace(container, key=text)
            self.expects = COLON
            return True
        if text in container.seen:
            return False
        self.containers[-1] = container.holding(text)
        return True

    def _container_closes(self) -> None:
        self.containers.pop()
        self.expects = AFTER_VALUE if self.containers else DONE


def _string_so_far(string: bytes) -> str | None:
    """The text of a string being written (`string`: from its opening quote), where it ends on a whole
    character (not inside an escape or a multi-byte character); else None."""
    try:
        return json.loads(string + b'"')
    except ValueError:
        return None


def _whole_characters_so_far(string: bytes) -> str:
    """The text of a string being written, up to its last whole character (before an escape or a multi-byte
    character it ends inside)."""
    for cut in range(min(len(string), 6)):  # (`\uXXX`: five bytes of an escape cut short; four of UTF-8)
        written = _string_so_far(string[: len(string) - cut])
        if written is not None:
            return written
    return ""


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _type_starting(byte: int) -> str | None:
    """The JSON type of a value whose first byte is `byte`."""
    if byte == _QUOTE:
        return "string"
    if byte == ord("{"):
        return "object"
    if byte == ord("["):
        return "array"
    if byte in b"-0123456789":
        return "number"
    if byte in b"tf":
        return "boolean"
    if byte == ord("n"):
        return "null"
    return None


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), "null")


def schema_of_grammar(grammar: str) -> dict[str, Any] | None:
    """The JSON schema an llguidance grammar string was compiled from (`grammar_from_json_schema`), else None."""
    try:
        top = json.loads(grammar)
    except ValueError:
        return None
    grammars = top.get("grammars") if isinstance(top, dict) else None
    if not isinstance(grammars, list) or len(grammars) != 1 or not isinstance(grammars[0], dict):
        return None
    schema = grammars[0].get("json_schema")
    return schema if isinstance(schema, dict) else None


class Vocabulary(Protocol):
    """What the rule needs of a model's vocabulary (`runtime.model.Model` has it)."""

    def token_bytes(self, token: int) -> bytes: ...

    def tokens_holding(self, byte: int) -> np.ndarray: ...

    def token_lengths(self) -> np.ndarray: ...


class UniqueStrings:
    """The rule "no item twice" over the tokens a grammar has consumed: a `JsonCursor` for each token
    consumed (so the grammar can step back along a draft), and which tokens the rule rules out next."""

    def __init__(self, cursors: list[JsonCursor], vocabulary: Vocabulary) -> None:
        self._cursors = cursors
        self._vocabulary = vocabulary
        self._quote_tokens = vocabulary.tokens_holding(_QUOTE)  # only they can close a string
        self._opening_tokens = np.intersect1d(self._quote_tokens, vocabulary.tokens_holding(ord("[")))  # `["a","a"`

    @classmethod
    def for_grammar(cls, grammar: str, vocabulary: Vocabulary) -> "UniqueStrings | None":
        """The rule for `grammar`, where it is a JSON schema's with an array of unique strings the cursor holds."""
        schema = schema_of_grammar(grammar)
        if schema is None or not unique_string_arrays(schema):
            return None
        return cls([JsonCursor.start(schema)], vocabulary)

    def copy(self) -> "UniqueStrings":
        return UniqueStrings(list(self._cursors), self._vocabulary)

    def takes(self, token: int) -> bool:
        """Whether `token` may come next: it does not close an item equal to an earlier one."""
        return self._cursors[-1].feed(self._vocabulary.token_bytes(token)) is not None

    def taken(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the first, the rule takes in a row."""
        cursor: JsonCursor | None = self._cursors[-1]
        for count, token in enumerate(tokens):
            cursor = cursor.feed(self._vocabulary.token_bytes(token)) if cursor is not None else None
            if cursor is None:
                return count
        return len(tokens)

    def allowed(self, allowed: np.ndarray) -> np.ndarray:
        """`allowed` (sorted ids) without the tokens that would close an item equal to an earlier one."""
        cursor = self._cursors[-1]
        if cursor.expects in (DONE, LOST):
            return allowed
        if not cursor.in_unique_strings:  # only a token that opens an array as well can repeat an item of it
            candidates = np.intersect1d(allowed, self._opening_tokens, assume_unique=True)
        else:
            candidates = np.intersect1d(allowed, self._quote_tokens, assume_unique=True)
        room = cursor.room_before_a_forced_repeat()
        if room is not None:  # and those long enough to fill the item (a character is a byte or more)
            candidates = np.union1d(candidates, allowed[self._vocabulary.token_lengths()[allowed] >= room])
        if not len(candidates):
            return allowed
        token_bytes = self._vocabulary.token_bytes
        repeating = [token for token in candidates.tolist() if cursor.feed(token_bytes(token)) is None]
        return np.setdiff1d(allowed, repeating, assume_unique=True) if repeating else allowed

    def consume(self, tokens: Sequence[int]) -> bool:
        """Step over `tokens`; False where one closes a repeated item (the caller validated them: never)."""
        for token in tokens:
            cursor = self._cursors[-1].feed(self._vocabulary.token_bytes(token))
            if cursor is None:
                return False
            self._cursors.append(cursor)
        return True

    def rollback(self, n: int) -> None:
        """Step back over the last `n` tokens consumed."""
        if n:
            del self._cursors[-n:]
