"""Tool calls followed as they are written, each call's arguments by a `JsonCursor` of its own.

A tool-call grammar (app/tool_calls.py) writes each call as a fixed head, then the
arguments as JSON held to that tool's parameters schema (`%json`):
`{"name": "tag_post", "arguments": {...}}`, or in a template's own frame the name and
the text after it (`tag_post<｜tool▁sep｜>{...}`, special tokens as their text).
`CallsCursor` watches the text for a head, follows the arguments after it with a
`JsonCursor` over that tool's schema until they close, and watches for the next
head. So `uniqueItems` and unique keys in a tool's parameters are held as in
`--json-schema` output (see unique_items.py). (Calls with tagged parameters, Gemma's
notation and Python calls write no JSON arguments to follow.)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

from .json_cursor import DONE, JsonCursor

# A tool-call grammar's rules (tool_calls.tool_grammar), and the parts of a rule's body: a Lark string (written as
# JSON writes it), a special token (`<[id]>`), or anything else (a rule's name, a regex, a group's parenthesis).
_RULE = re.compile(r"^(\w+): (.*)$", re.MULTILINE)
_JSON_VALUE = re.compile(r"%json (\{.*\})")
_PART = re.compile(r'"(?:[^"\\]|\\.)*"|<\[\d+\]>|[^\s"]+')


# The most bytes a head's two texts may have between them: a call's index (Kimi K2), a call id (Mistral's
# `[CALL_ID]` and nine characters).
MAX_GAP = 32


@dataclass(frozen=True)
class Head:
    """The fixed text just before a JSON value of a tool call (`last`: `{"name": "f", "arguments": `, `f<｜tool▁sep｜>`,
    `<parameter=tags>`), and, where the rule puts text that varies before it (an index, an id), the fixed text that
    opens the rule (`first`: with the tool's name in it), at most `MAX_GAP` bytes before `last`."""

    last: bytes
    first: bytes = b""

    @property
    def span(self) -> int:
        """The most bytes of text it can take."""
        return len(self.last) + (len(self.first) + MAX_GAP if self.first else 0)

    def ends(self, text: bytes) -> tuple[int, int] | None:
        """Whether `text` ends with this head: then how it ranks among heads that end it (a longer head, or one
        whose first text ends later, is the one written: `add` may end as `quick_add` does); else None."""
        if not text.endswith(self.last):
            return None
        if not self.first:
            return (len(text), len(self.last))
        before = text[:len(text) - len(self.last)]
        at = before.rfind(self.first)
        if at < 0 or len(before) - at - len(self.first) > MAX_GAP:
            return None
        return (at + len(self.first), len(self.first))


@dataclass(frozen=True)
class CallValue:
    """A JSON value of a tool-call grammar: its rule (`arguments_0`, `call_0_value_1`), its head (None where no
    fixed text tells it apart), and its schema."""

    rule: str
    head: Head | None
    schema: dict[str, Any]

    @property
    def tool_index(self) -> int | None:
        """The index among the callable tools of the tool it belongs to (`tool_calls.tool_grammar`'s names)."""
        found = _TOOL_INDEX.match(self.rule)
        return int(found[1]) if found is not None else None


_TOOL_INDEX = re.compile(r"(?:arguments|call)_(\d+)")


def call_schemas(grammar: str, token_text: Callable[[int], bytes] = lambda token: b"") -> list[CallValue]:
    """Each JSON value of a tool-call grammar (a call's arguments, or a tagged parameter's value written as JSON:
    a rule `%json {schema}`) with its head (`Head`); the head is None where it does not tell the value apart (no
    fixed text, or the same heads before values of other schemas: two tools' parameters of one name in tags).
    Empty for any other grammar. `token_text(id)`: the text of a special token a head names (what the output shows
    for it), which only the heads need."""
    rules = dict(_RULE.findall(grammar))
    schemas = {}
    for name, body in rules.items():
        value = _JSON_VALUE.fullmatch(body)
        try:
            schema = json.loads(value[1]) if value is not None else None
        except ValueError:
            continue
        if isinstance(schema, dict):
            schemas[name] = schema
    values: list[CallValue] = []
    for body in rules.values():
        parts = _PART.findall(body)
        for at, part in enumerate(parts):
            if part in schemas:
                values.append(CallValue(part, _head(parts[:at], token_text), schemas[part]))
    told_apart = {value.head for value in values if value.head is not None and value.head.last and all(
        other.schema == value.schema for other in values if other.head == value.head)}
    return [value if value.head in told_apart else replace(value, head=None) for value in values]


def _head(parts: list[str], token_text: Callable[[int], bytes]) -> Head:
    """The head of a value after `parts` (a rule's body before it): the texts of the strings and special tokens
    that end them, and where something else comes before those, the texts that open the body."""
    runs: list[list[bytes]] = [[]]
    for part in parts:
        if part.startswith("<["):
            runs[-1].append(token_text(int(part[2:-2])))
        elif part.startswith('"'):
            runs[-1].append(json.loads(part).encode("utf-8"))
        elif runs[-1]:
            runs.append([])
    texts = [b"".join(run) for run in runs if run]
    if not texts:
        return Head(b"")
    return Head(texts[-1], texts[0] if len(texts) > 1 else b"")


@dataclass(frozen=True)
class CallsCursor:
    """How far a text of tool calls has got: the text since the last call's arguments (where a head is looked
    for), or the cursor over the arguments being written. Immutable, like `JsonCursor`."""

    calls: tuple[tuple[Head, JsonCursor], ...]  # each value's head, and a cursor before the value
    since: bytes = b""  # the text since the last arguments closed, as long as the longest head
    arguments: JsonCursor | None = None

    @classmethod
    def start(cls, calls: list[CallValue]) -> "CallsCursor":
        """A cursor before the first byte of a text of calls (`call_schemas`: the values a head tells apart)."""
        return cls(tuple((value.head, JsonCursor.start(value.schema)) for value in calls if value.head is not None))

    @property
    def settled(self) -> bool:
        """Whether no byte can make an item repeat from here: outside arguments (a head takes many tokens), or
        in arguments the cursor lost."""
        return self.arguments is None or self.arguments.settled

    @property
    def in_held_array(self) -> bool:
        """Inside a call's arguments, in an array the rule holds (see `JsonCursor.in_held_array`)."""
        return self.arguments is not None and self.arguments.in_held_array

    @property
    def in_string(self) -> bool:
        """Inside a call's arguments, in a string (see `JsonCursor.in_string`)."""
        return self.arguments is not None and self.arguments.in_string

    @property
    def in_record(self) -> bool:
        """Inside a call's arguments, in a record the rule holds (see `JsonCursor.in_record`)."""
        return self.arguments is not None and self.arguments.in_record

    def bytes_to_a_records_last_value(self) -> int:
        """As `JsonCursor.bytes_to_a_records_last_value`, inside a call's arguments."""
        return self.arguments.bytes_to_a_records_last_value() if self.arguments is not None else 2

    @property
    def in_held_key(self) -> bool:
        """Inside a call's arguments, in a key the rule holds (see `JsonCursor.in_held_key`)."""
        return self.arguments is not None and self.arguments.in_held_key

    def language_rests(self) -> tuple[list[bytes], bool] | None:
        """As `JsonCursor.language_rests`, inside a call's arguments; None outside them."""
        return self.arguments.language_rests() if self.arguments is not None else None

    @property
    def encloses_key_language(self) -> bool:
        """As `JsonCursor.encloses_key_language`, inside a call's arguments."""
        return self.arguments is not None and self.arguments.encloses_key_language

    def refuses(self, piece: bytes) -> bool:
        """Whether `feed(piece)` returns None, found without a whole feed where it can be inside a call's arguments
        (`JsonCursor.quick_refusal`)."""
        quick = self.arguments.quick_refusal(piece) if self.arguments is not None else None
        return quick if quick is not None else self.feed(piece) is None

    def room_before_a_forced_repeat(self) -> int | None:
        """As `JsonCursor.room_before_a_forced_repeat`, inside a call's arguments; None outside them."""
        return self.arguments.room_before_a_forced_repeat() if self.arguments is not None else None

    def feed(self, data: bytes) -> "CallsCursor | None":
        """The cursor after `data`; None where `data` makes an item or a key of a call's arguments repeat one."""
        cursor = self
        for at in range(len(data)):
            if cursor.arguments is not None:
                arguments = cursor.arguments.feed(data[at:at + 1])
                if arguments is None:
                    return None
                cursor = replace(cursor, arguments=None if arguments.expects == DONE else arguments)
                continue
            since = (cursor.since + data[at:at + 1])[-self._longest_head:]
            ends = [(rank, start) for head, start in self.calls if (rank := head.ends(since)) is not None]
            started = max(ends, key=lambda found: found[0])[1] if ends else None
            cursor = replace(cursor, since=b"" if started is not None else since, arguments=started)
        return cursor

    @property
    def _longest_head(self) -> int:
        return max((head.span for head, _ in self.calls), default=1)
