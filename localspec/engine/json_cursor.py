"""A JSON text followed byte by byte as it is written, far enough to hold `uniqueItems` in the arrays it can, and
unique keys in the objects that take keys they do not list or take keys by pattern alone.

`JsonCursor` is immutable: `feed` returns the cursor after more bytes, or None
where they would make an item of such an array, or a key of such an object,
repeat an earlier one (see unique_items.py for the rule and why). The grammar
guarantees the text is valid JSON for the schema; bytes that are not lead the
cursor to LOST, never to an exception.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from .key_language import KeyLanguage
from .schema_keywords import FRACTION_DIGITS, WHOLE_DIGITS
from .schema_places import HeldItems, IntegerRange, IntegerSet, SchemaPlaces, held_items, takes_other_keys

_WHITESPACE = b" \t\r\n"
_ESCAPE_OR_CONTROL = re.compile(rb"[\\\x00-\x1f]")  # a backslash, or a byte JSON allows in a string only escaped
_NUMBER_BYTES = b"0123456789+-.eE"
_LITERALS = {ord("t"): 4, ord("f"): 5, ord("n"): 4}  # true, false, null: their length
QUOTE, _BACKSLASH = ord('"'), ord("\\")

# What the cursor expects next.
VALUE, AFTER_VALUE, KEY, COLON, STRING, NUMBER, LITERAL, DONE, LOST = range(9)
# What the string, number or literal being written is: a key, a value, an item of an array the rule holds (or the last
# value of a record it holds), or another value of such a record (read, not held).
KEY_TEXT, VALUE_TEXT, ITEM_TEXT, RECORD_TEXT = range(4)


@dataclass(frozen=True)
class _Container:
    """An open object or array: its schema (None where not followed), and for an array the rule holds, the
    items it holds so far (the records, where its items are records); for an object whose keys it holds, the
    keys so far; for a record, its values so far, and at its last value what that value must not be."""

    schema: dict[str, Any] | None
    is_array: bool
    items: HeldItems | None = None  # an array the rule holds: what it takes as items
    holds_keys: bool = False  # an object that takes keys it does not list (`takes_other_keys`): its keys are held
    key_language: KeyLanguage | None = None  # an object that takes keys by pattern alone (key_language.py)
    names_left: tuple[str, ...] = ()  # such an object: the listed names llguidance may still write (names_after)
    seen: frozenset[str | int | Decimal] = frozenset()  # the items held so far, or the keys
    index: int = 0  # array: the items begun so far
    key: str | None = None  # object: the key whose value comes next
    seen_at_max_length: bool = False  # an item it holds is as long as they may be: a new one that long must differ
    records: frozenset[tuple[Any, ...]] = frozenset()  # an array of records: those it holds, each its values
    record: tuple[Any, ...] | None = None  # a record the rule holds: its values so far (at its last: `items`, `seen`)

    @property
    def held(self) -> bool:
        """Whether this is an array with `uniqueItems` the rule holds, or a record at its last value (which the
        rule holds as an item)."""
        return self.items is not None

    def holding(self, item: str | int | Decimal) -> "_Container":
        """This array with `item` among those it holds."""
        most = self.items.max_length if self.items is not None else None
        at_max = self.seen_at_max_length or (isinstance(item, str) and len(item) == most)
        return replace(self, seen=self.seen | {item}, seen_at_max_length=at_max)

    def holding_only(self, items: HeldItems, seen: frozenset[Any]) -> "_Container":
        """This record at a value the rule holds as an item of `items`, unlike those `seen`."""
        at_max = any(isinstance(value, str) and len(value) == items.max_length for value in seen)
        return replace(self, items=items, seen=seen, seen_at_max_length=at_max)

    def item_may_begin(self) -> bool:
        """Whether a new item can still be one not held: an enum's values, a range's integers, or the strings a
        pattern or a format takes, are not all held already (a free string can always be new)."""
        items = self.items
        if items is None:
            return True
        if items.language is not None:
            return items.language.may_end_unlike(b'"', self.seen_strings())
        if items.values is not None:
            return bool(items.values - self.seen)
        size = items.integers.size if items.integers is not None else None  # (fractions: endless)
        return size is None or size > len(self.seen)  # (the grammar keeps every item in the range)

    def item_may_go_on(self, written: str | None, spelled: bytes) -> bool:
        """Whether the item written so far (None: it ends inside a character; `spelled`: its JSON text from the
        opening quote) can still end as a new item: an enum's item must begin a value not yet held, one by a
        pattern or a format must go on to one not held; a free string at its maxLength must not be one held."""
        if self.items is not None and self.items.language is not None:
            return self.items.language.may_end_unlike(spelled, self.seen_strings())
        if written is None or self.items is None or self.items.numbers:
            return True
        if self.items.values is not None:
            return any(value.startswith(written) for value in self.items.values - self.seen)
        return not (self.seen_at_max_length and len(written) == self.items.max_length and written in self.seen)

    def seen_strings(self) -> frozenset[str]:
        """The strings among the items held so far."""
        return frozenset(item for item in self.seen if isinstance(item, str))


@dataclass(frozen=True)
class JsonCursor:
    """How far a JSON text written so far has got: the containers open, what comes next, the string being
    written. Immutable: `feed` returns the cursor after more bytes, or None where those bytes make an item of
    an array the rule holds, or a key of an object it holds, repeat an earlier one (see `feed`)."""

    places: SchemaPlaces
    containers: tuple[_Container, ...] = ()
    expects: int = VALUE
    text: bytes = b""  # the key or item being written: a string from its opening quote, or a number
    role: int = VALUE_TEXT  # KEY_TEXT, VALUE_TEXT, or ITEM_TEXT: an item of an array the rule holds
    escaped: bool = False
    literal_left: int = 0

    @classmethod
    def start(cls, schema: dict[str, Any]) -> "JsonCursor":
        """A cursor before the first byte of a document of `schema`."""
        return cls(SchemaPlaces(schema))

    @property
    def settled(self) -> bool:
        """Whether no byte can make an item repeat from here: the document is complete, or not followed."""
        return self.expects in (DONE, LOST)

    @property
    def in_held_array(self) -> bool:
        """The innermost container is an array the rule holds (or a record at its last value): the next bytes may
        complete one of its items."""
        return bool(self.containers) and self.containers[-1].held and not self.settled

    @property
    def in_string(self) -> bool:
        """A string (a key, a value or an item) is being written."""
        return self.expects == STRING

    @property
    def in_record(self) -> bool:
        """The innermost container is a record the rule holds: a token that writes on to its last value may end it."""
        return bool(self.containers) and self.containers[-1].record is not None and not self.settled

    def bytes_to_a_records_last_value(self) -> int:
        """In a record before its last value: how many bytes a token needs at least to write on into that value
        (its key whole, in quotes, a colon and the value's first byte; 2 from inside a key, which may be it, or
        where the value before the last is held too)."""
        if self.expects == STRING and self.role == KEY_TEXT:
            return 2
        shape = self.containers[-2].items.record if len(self.containers) > 1 and self.containers[-2].items else None
        if shape is not None and shape.before_last is not None:
            return 2  # (the value before it is held too: any token that closes a string may close that one)
        shortest_key = json.dumps(shape.names[-1], ensure_ascii=False).encode() if shape is not None else b'""'
        return len(shortest_key) + 2

    @property
    def in_held_key(self) -> bool:
        """A key of an object whose keys the rule holds is being written: the next bytes may complete it."""
        return self.expects == STRING and self.role == KEY_TEXT and self.containers[-1].holds_keys

    def feed(self, data: bytes) -> "JsonCursor | None":
        """The cursor after `data`; None where `data` ends a key of an object the rule holds equal to an earlier
        one, or makes an item of an array the rule holds repeat one: ends it equal to an earlier one, leaves an
        enum's item where it can only become a value already held, leaves one where it can only end as a copy (a
        free string at its maxLength equal to an earlier one: only the closing quote can follow; a number whose
        every way on within its bounds, more digits or none, is held already), or asks for one more item where
        every one it could be is held; and, in an object that takes keys by pattern alone, leaves a key where it
        can only end as one held, or asks for one more key where every one is held."""
        reader = _Reader(self)
        for byte in data:
            if not reader.step(byte):
                return None
        cursor = reader.cursor()
        if cursor.role == ITEM_TEXT and cursor.expects == STRING:
            if not cursor.containers[-1].item_may_go_on(_string_so_far(cursor.text), cursor.text):
                return None
        if cursor.role == ITEM_TEXT and cursor.expects == NUMBER:
            array = cursor.containers[-1]
            if _every_end_held(cursor.text, array.items, array.seen):
                return None
        if (cursor.expects == VALUE and cursor.in_held_array and cursor.containers[-1].index > 0
                and not cursor.containers[-1].item_may_begin()):
            return None  # (an item must follow the `,` after the last: every one it could be is held)
        language = cursor.containers[-1].key_language if cursor.containers and not cursor.settled else None
        if language is not None:
            seen = cursor.containers[-1].seen
            names_left = cursor.containers[-1].names_left
            if cursor.expects == STRING and cursor.role == KEY_TEXT:
                if not language.may_end_unlike(_whole_characters_so_far(cursor.text), seen, names_left):
                    return None  # (a key that can only end as one held)
            elif cursor.expects == KEY and seen and not language.may_end_unlike("", seen, names_left):
                return None  # (a key must follow the `,`: every one it could be is held)
        return cursor

    def refuses(self, piece: bytes) -> bool:
        """Whether `feed(piece)` returns None, found without a whole feed where it can be (`quick_refusal`)."""
        quick = self.quick_refusal(piece)
        return quick if quick is not None else self.feed(piece) is None

    def quick_refusal(self, piece: bytes) -> bool | None:
        """Whether `feed(piece)` would return None, where that can be told without a whole feed (a mask asks it
        of many tokens): digits, and a quote that closes a key or an item with nothing after it that could
        repeat anything more. None elsewhere. (The same answer as `feed` on any text the grammar allows.)"""
        digits = piece.lstrip(_WHITESPACE)
        if digits.isdigit():
            return self._digits_refused(piece, digits)
        return self._closing_refused(piece)

    def _digits_refused(self, piece: bytes, digits: bytes) -> bool | None:
        """`quick_refusal` for `piece`, ASCII `digits` after whitespace or none: only where a number item of an
        array the rule holds is written or comes next can they be refused, where every way on from them is held."""
        if self.expects == NUMBER and self.role == ITEM_TEXT and digits == piece:
            written = self.text
        elif self.expects == VALUE and self.in_held_array:
            written = b""
        else:
            return None
        array = self.containers[-1]
        return array.items is not None and _every_end_held(written + digits, array.items, array.seen)

    def _closing_refused(self, piece: bytes) -> bool | None:
        """`quick_refusal` where a key or an item the rule compares is being written and `piece` closes it, with
        no escape or control character on the way (JSON reads those otherwise) and nothing after the quote that
        could end another string or ask for another item (a quote, a `[`, a `,`): whether it ends as one held.
        None where that does not apply (and in a record but at its last value: a number may follow a key)."""
        if self.expects != STRING or self.role in (VALUE_TEXT, RECORD_TEXT) or self.escaped:
            return None
        if self.role == KEY_TEXT and self.in_record:
            return None  # (a record's last key: what follows the quote may write its value whole)
        head, quote, rest = piece.partition(b'"')
        if (not quote or _ESCAPE_OR_CONTROL.search(head) or _ESCAPE_OR_CONTROL.search(self.text)
                or b'"' in rest or b"[" in rest or b"," in rest):
            return None
        try:
            text = (self.text[1:] + head).decode("utf-8")
        except UnicodeDecodeError:
            return None
        container = self.containers[-1]
        return (container.holds_keys or self.role == ITEM_TEXT) and text in container.seen

    def room_before_a_forced_repeat(self) -> int | None:
        """Where an item may be led to where it can only repeat one: how many more characters the item being
        written (or the next) may take before that (0: any token may lead there). None elsewhere: only the
        tokens that hold a closing quote can make a repeat."""
        array = self.containers[-1] if self.containers else None
        if array is None or array.items is None or self.expects in (DONE, LOST):
            return None
        if array.items.values is not None or array.items.numbers:
            return 0  # (an enum's items or numbers: the grammar allows few tokens there)
        most = array.items.max_length
        if not array.seen_at_max_length or most is None:
            return None
        if self.expects != STRING or self.role != ITEM_TEXT:
            return most
        written = _whole_characters_so_far(self.text)
        if not any(len(item) == most and item.startswith(written) for item in array.seen):
            return None  # (no item held at that length begins so: closing quotes alone can repeat one)
        return most - len(written)

    def language_rests(self) -> tuple[list[bytes], bool] | None:
        """Where the innermost container is an object whose keys are held to a language (key_language.py), or an
        array whose items are strings by a pattern or a format (string_language.py): the text that may lead the
        key or item being written to one that can only end as one held (the rest of each held one that begins as
        it does; none outside a key or an item), and whether every one it takes is held. None elsewhere."""
        container = self.containers[-1] if self.containers and not self.settled else None
        items = container.items.language if container is not None and container.items is not None else None
        if container is None or (container.key_language is None and items is None):
            return None
        rests = []
        if self.expects == STRING and self.role == (KEY_TEXT if items is None else ITEM_TEXT):
            written = self.text[1:]
            for held in container.seen_strings():
                spelled = json.dumps(held, ensure_ascii=False)[1:-1].encode("utf-8")
                if spelled.startswith(written) and len(spelled) > len(written):
                    rests.append(spelled[len(written):])
        if items is not None:
            return rests, not items.may_end_unlike(b'"', container.seen_strings())
        exhausted = bool(container.seen) and not container.key_language.may_end_unlike(
            "", container.seen, container.names_left)
        return rests, exhausted

    @property
    def encloses_key_language(self) -> bool:
        """An open container other than the innermost holds its keys to a language: a token that closes the
        innermost (`},` `],"a`) may ask for a key of it, or begin one."""
        return not self.settled and any(container.key_language is not None for container in self.containers[:-1])


class _Reader:
    """`JsonCursor.feed`'s working copy: the cursor's fields as plain variables, stepped byte by byte."""

    def __init__(self, cursor: JsonCursor) -> None:
        self.places = cursor.places
        self.containers = list(cursor.containers)
        self.expects = cursor.expects
        self.text = cursor.text
        self.role = cursor.role
        self.escaped = cursor.escaped
        self.literal_left = cursor.literal_left

    def cursor(self) -> JsonCursor:
        return JsonCursor(self.places, tuple(self.containers), self.expects, self.text, self.role,
                          self.escaped, self.literal_left)

    def step(self, byte: int) -> bool:
        """Read one byte; False where it ends an item or a key equal to an earlier one."""
        expects = self.expects
        if expects == STRING:
            return self._in_string(byte)
        if expects == NUMBER:
            if byte in _NUMBER_BYTES:
                if self.role in (ITEM_TEXT, RECORD_TEXT):
                    self.text += bytes((byte,))
                return True
            if self.role == ITEM_TEXT and not self._item_ends(_number(self.text, self.containers[-1].items)):
                return False
            if self.role == RECORD_TEXT:
                self._record_value(_record_number(self.text))
            if self.expects == LOST:
                return True
            self.expects = AFTER_VALUE
            return self.step(byte)
        if expects == LITERAL:
            self.literal_left -= 1
            if self.role == RECORD_TEXT:
                self.text += bytes((byte,))
            if self.literal_left == 0:
                self.expects = AFTER_VALUE
                if self.role == RECORD_TEXT:
                    self._record_value(("literal", self.text))
            return True
        if expects in (DONE, LOST) or byte in _WHITESPACE:
            return True
        if expects == VALUE:
            self._value_starts(byte)
        elif expects == KEY:
            if byte == QUOTE:
                self._string_opens(KEY_TEXT)
            elif byte == ord("}"):
                self._container_closes()
            else:
                self.expects = LOST
        elif expects == COLON:
            self.expects = VALUE if byte == ord(":") else LOST
        elif expects == AFTER_VALUE:
            if byte == ord(",") and self.containers:
                self.expects = VALUE if self.containers[-1].is_array else KEY
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
        item = parent is not None and parent.held
        role = ITEM_TEXT if item else RECORD_TEXT if parent is not None and parent.record is not None else VALUE_TEXT
        if kind == "string":
            self._string_opens(role)
        elif kind == "array":
            self.containers.append(_Container(schema, True, held_items(schema, self.places)))
            self.expects = VALUE
        elif kind == "object":
            language = KeyLanguage.of_object(schema) if schema is not None else None
            holds_keys = schema is not None and (takes_other_keys(schema) or language is not None)
            in_records = item and parent.items is not None and parent.items.record is not None
            self.containers.append(_Container(schema, False, holds_keys=holds_keys, key_language=language,
                                              names_left=language.writable if language is not None else (),
                                              record=() if in_records else None))
            self.expects = KEY
        elif kind == "number":
            self.expects, self.role, self.text = NUMBER, role, bytes((byte,))
        else:
            self.expects, self.literal_left, self.role, self.text = LITERAL, _LITERALS[byte] - 1, role, bytes((byte,))

    def _string_opens(self, role: int) -> None:
        self.expects, self.text, self.role, self.escaped = STRING, b'"', role, False

    def _in_string(self, byte: int) -> bool:
        if self.role != VALUE_TEXT:  # (a key names the value's schema; an item is compared)
            self.text += bytes((byte,))
        if self.escaped:
            self.escaped = False
        elif byte == _BACKSLASH:
            self.escaped = True
        elif byte == QUOTE:
            return self._string_closes()
        return True

    def _string_closes(self) -> bool:
        if self.role == VALUE_TEXT:
            self.expects = AFTER_VALUE
            return True
        try:
            text = json.loads(self.text.decode("utf-8"))
        except ValueError:  # (not JSON after all: nothing more is held)
            self.expects = LOST
            return True
        self.expects = AFTER_VALUE
        if self.role == KEY_TEXT:
            container = self.containers[-1]
            if container.holds_keys and text in container.seen:
                return False
            seen = container.seen | {text} if container.holds_keys else container.seen
            names_left = (container.key_language.names_after(text, container.names_left)
                          if container.key_language is not None else ())
            self.containers[-1] = replace(container, key=text, seen=seen, names_left=names_left)
            if container.record is not None:
                self._record_key(text)
            self.expects = COLON
            return True
        if self.role == RECORD_TEXT:
            self._record_value(("string", text))
            return True
        return self._item_ends(text)

    def _record_key(self, key: str) -> None:
        """A key of a record (the innermost container) is read: at its last, what its value must not be (the last
        values of the records held whose other values equal this one's); a key out of the listed order (not as
        llguidance writes records) leaves the record unheld."""
        record, array = self.containers[-1], self.containers[-2]
        shape = array.items.record if array.items is not None else None
        if shape is None or record.record is None or key != shape.names[len(record.record)]:
            self.containers[-1] = replace(record, record=None)
        elif shape.before_last is not None and len(shape.names) > 1 and key == shape.names[-2]:
            lasts: dict[Any, set[Any]] = {}  # (each value before the last, of records as this one so far: their last)
            for values in array.records:
                if values[:-2] == record.record:
                    lasts.setdefault(values[-2], set()).add(values[-1])
            spent = frozenset(value[1] for value, taken in lasts.items() if len(taken) >= shape.last_count)
            self.containers[-1] = record.holding_only(shape.before_last, spent)
        elif key == shape.names[-1]:
            taken = frozenset(values[-1] for values in array.records if values[:-1] == record.record)
            self.containers[-1] = record.holding_only(shape.last, taken)

    def _record_value(self, value: Any) -> None:
        """A value of a record (the innermost container) other than its last is read (None: not one the rule reads,
        and the record is no longer held)."""
        record = self.containers[-1]
        if record.record is not None:
            self.containers[-1] = replace(record, record=None if value is None else (*record.record, value))

    def _item_ends(self, item: str | int | Decimal | None) -> bool:
        """An item of the innermost array, which the rule holds, is complete: False where it repeats one (None: it
        is not one the rule can read, and nothing more is held)."""
        if item is None:
            self.expects = LOST
            return True
        container = self.containers[-1]
        if item in container.seen:
            return False
        self.containers[-1] = container.holding(item)
        if container.record is not None and self._at_records_last_value(container):
            array = self.containers[-2]  # (the last value of a record: the record is held by its array)
            self.containers[-2] = replace(array, records=array.records | {(*container.record, item)})
        elif container.record is not None:  # (the value before it: one of the record's values, the rule's no more)
            self.containers[-1] = replace(container, items=None, seen=frozenset(), seen_at_max_length=False,
                                          record=(*container.record, ("string", item)))
        return True

    def _at_records_last_value(self, record: _Container) -> bool:
        shape = self.containers[-2].items.record if self.containers[-2].items is not None else None
        return shape is None or record.record is None or len(record.record) == len(shape.names) - 1

    def _container_closes(self) -> None:
        self.containers.pop()
        self.expects = AFTER_VALUE if self.containers else DONE


def _number(text: bytes, items: HeldItems | None) -> int | Decimal | None:
    """A number item's value (`-0` is 0; `1.50` is `1.5`, and `1.0` is `1`, as JSON Schema compares them), or
    None where its text is not one of the items' numbers."""
    try:
        return Decimal(text.decode("ascii")) if items is not None and items.fractions else int(text)
    except (ValueError, InvalidOperation):
        return None


def _record_number(text: bytes) -> tuple[str, Decimal] | None:
    """A number of a record, as JSON Schema compares numbers (by value: 1.0 equals 1); None where it is none."""
    try:
        return "number", Decimal(text.decode("ascii"))
    except (ValueError, InvalidOperation):
        return None


def _every_end_held(text: bytes, items: HeldItems | None, seen: frozenset[Any]) -> bool:
    """Whether every number an item written so far as `text` can still become is held already (see
    `_every_integer_end_held`, `_every_fraction_end_held`); False for items that are not numbers."""
    if items is not None and items.integers is not None:
        return _every_integer_end_held(text, items.integers, seen)
    return items is not None and items.fractions and _every_fraction_end_held(text, seen)


def _every_fraction_end_held(text: bytes, seen: frozenset[Any]) -> bool:
    """Whether every number an item written so far as `text` can still become, with at most FRACTION_DIGITS
    after the point, is held already. Only one with a point and nearly all its decimals can be so led: each
    decimal more than it has still open leaves ten times as many numbers (`1.5` can still become 1.5, 1.51,
    ...; one without a point, any fraction). llguidance ends no negative number above -1 on a 0 (`-0.50`,
    `-0.0`): such a text cannot end as it stands, so its own value is not one of its ways on."""
    whole, point, fraction = text.partition(b".")
    if (not point or not fraction.isdigit() or len(fraction) > FRACTION_DIGITS
            or len(whole.lstrip(b"-")) > WHOLE_DIGITS):
        return False
    span = 10 ** (FRACTION_DIGITS - len(fraction))  # the numbers from it on, one step of 10^-9 apart
    ends_as_it_stands = not (whole == b"-0" and fraction.endswith(b"0"))
    ends = span if ends_as_it_stands else span - 1
    if ends > len(seen):
        return False
    first = Decimal(text.decode("ascii"))
    last = first + (-1 if text.startswith(b"-") else 1) * (span - 1) * Decimal(1).scaleb(-FRACTION_DIGITS)
    low, high = min(first, last), max(first, last)
    held = sum(1 for item in seen if low <= item <= high and (ends_as_it_stands or item != first))
    return held >= ends


def _every_integer_end_held(text: bytes, integers: IntegerRange | IntegerSet, seen: frozenset[Any]) -> bool:
    """Whether every integer of the range that an item written so far as `text` can still become is held already:
    itself, and with each number of digits more (`0` and `-0` take none: JSON has no leading zeros), as long as
    the range goes."""
    negative = text.startswith(b"-")
    digits = text[1:] if negative else text
    if not digits:  # (a lone minus: whatever digit comes next; `-0` is no enum's spelling of 0)
        nexts = b"123456789" if isinstance(integers, IntegerSet) else b"0123456789"
        return all(_every_integer_end_held(text + bytes((digit,)), integers, seen) for digit in nexts)
    if not digits.isdigit():
        return False  # (not an integer: the rule does not read it, nothing is refused)
    if negative:  # the largest magnitude the range takes on this side of zero (None: no bound)
        limit = None if integers.low is None else -integers.low
    else:
        limit = integers.high
    if digits != b"0" and (limit is None or len(digits) > len(str(limit))):
        return limit is not None  # (no bound that way: more digits are always new; past it: nothing is new)
    sign, start, width = (-1 if negative else 1), int(digits), 1
    if integers.count(sign * start, sign * start) and sign * start not in seen:
        return False  # (`text` itself ends a new item)
    while True:
        ends = sorted((sign * start * width, sign * (start * width + width - 1)))  # `text` and as many digits more
        new = integers.count(*ends) - sum(1 for item in seen if isinstance(item, int) and ends[0] <= item <= ends[1])
        if new > 0:
            return False
        if start == 0 or start * width * 10 > limit:  # (`0` takes no more digits; more go past the bound)
            return True
        width *= 10


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
