"""A JSON text followed byte by byte as it is written, far enough to know when it is inside an array of unique strings.

`JsonCursor` is immutable: `feed` returns the cursor after more bytes, or None
where they would make an item of such an array repeat an earlier one (see
unique_items.py for the rule and why). The grammar guarantees the text is valid
JSON for the schema; bytes that are not lead the cursor to LOST, never to an
exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from .schema_places import SchemaPlaces, StringItems, unique_string_items

_WHITESPACE = b" \t\r\n"
_NUMBER_BYTES = b"0123456789+-.eE"
_LITERALS = {ord("t"): 4, ord("f"): 5, ord("n"): 4}  # true, false, null: their length
QUOTE, _BACKSLASH = ord('"'), ord("\\")

# What the cursor expects next.
VALUE, AFTER_VALUE, KEY, COLON, STRING, NUMBER, LITERAL, DONE, LOST = range(9)
# What the string being written is.
KEY_STRING, VALUE_STRING, ITEM_STRING = range(3)


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
        """Whether this is an array of unique strings the rule holds."""
        return self.items is not None

    def holding(self, item: str) -> "_Container":
        """This array with `item` among those it holds."""
        most = self.items.max_length if self.items is not None else None
        return replace(self, seen=self.seen | {item}, seen_at_max_length=self.seen_at_max_length or len(item) == most)

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
    of an array of unique strings equal to an earlier one (see `feed`)."""

    places: SchemaPlaces
    containers: tuple[_Container, ...] = ()
    expects: int = VALUE
    string: bytes = b""  # the string being written, from its opening quote
    string_role: int = VALUE_STRING  # KEY_STRING, VALUE_STRING, or ITEM_STRING: an item of an array of unique strings
    escaped: bool = False
    literal_left: int = 0

    @classmethod
    def start(cls, schema: dict[str, Any]) -> "JsonCursor":
        """A cursor before the first byte of a document of `schema`."""
        return cls(SchemaPlaces(schema))

    @property
    def in_unique_strings(self) -> bool:
        """The innermost container is an array of unique strings: the next bytes may close one of its items."""
        return bool(self.containers) and self.containers[-1].unique_strings and self.expects not in (DONE, LOST)

    def feed(self, data: bytes) -> "JsonCursor | None":
        """The cursor after `data`; None where `data` makes an item of an array of unique strings repeat one:
        closes it equal to an earlier one, leaves an enum's item where it can only become a value already held,
        or leaves a free string at its maxLength equal to an earlier one (only the closing quote can follow)."""
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
        array = self.containers[-1] if self.containers else None
        if array is None or array.items is None or self.expects in (DONE, LOST):
            return None
        if array.items.values is not None:
            return 0  # (an enum's items: the grammar allows few tokens there)
        most = array.items.max_length
        if not array.seen_at_max_length or most is None:
            return None
        if self.expects != STRING or self.string_role != ITEM_STRING:
            return most
        written = _whole_characters_so_far(self.string)
        if not any(len(item) == most and item.startswith(written) for item in array.seen):
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
            if byte == QUOTE:
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
        elif byte == QUOTE:
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
    for cut in range(min(len(string), 6)):  # (an escape cut short after `\uXXX`: five bytes; a character: three)
        written = _string_so_far(string[: len(string) - cut])
        if written is not None:
            return written
    return ""


def _type_starting(byte: int) -> str | None:
    """The JSON type of a value whose first byte is `byte`."""
    if byte == QUOTE:
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
