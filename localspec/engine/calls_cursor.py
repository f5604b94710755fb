"""Tool calls followed as they are written, each call's arguments by a `JsonCursor` of its own.

A tool-call grammar (app/tool_calls.py) writes each call as a fixed head, then the
arguments as JSON held to that tool's parameters schema (`%json`):
`{"name": "tag_post", "arguments": {...}}`. `CallsCursor` watches the text for a
head, follows the arguments after it with a `JsonCursor` over that tool's schema
until they close, and watches for the next head. So `uniqueItems` and unique keys
in a tool's parameters are held as in `--json-schema` output (see unique_items.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from .json_cursor import DONE, JsonCursor

# The lines of a tool-call grammar that name a call's head and its arguments' schema (tool_calls._alternatives).
_CALL_HEAD = re.compile(r'^call_(\d+): ("(?:[^"\\]|\\.)*") arguments_\1 "}"$', re.MULTILINE)
_CALL_ARGUMENTS = re.compile(r"^arguments_(\d+): %json (\{.*\})$", re.MULTILINE)


def call_schemas(grammar: str) -> list[tuple[bytes, dict[str, Any]]]:
    """Each tool call's head (the text before its arguments) and its arguments' schema, in a tool-call grammar;
    none in any other grammar."""
    schemas = {}
    for match in _CALL_ARGUMENTS.finditer(grammar):
        try:
            schema = json.loads(match[2])
        except ValueError:
            continue
        if isinstance(schema, dict):
            schemas[match[1]] = schema
    calls = []
    for match in _CALL_HEAD.finditer(grammar):
        head = json.loads(match[2])  # (a Lark string is written as JSON writes it: tool_calls._alternatives)
        if isinstance(head, str) and match[1] in schemas:
            calls.append((head.encode("utf-8"), schemas[match[1]]))
    return calls


@dataclass(frozen=True)
class CallsCursor:
    """How far a text of tool calls has got: the text since the last call's arguments (where a head is looked
    for), or the cursor over the arguments being written. Immutable, like `JsonCursor`."""

    calls: tuple[tuple[bytes, JsonCursor], ...]  # each call's head, and a cursor before its arguments
    since: bytes = b""  # the text since the last arguments closed, as long as the longest head
    arguments: JsonCursor | None = None

    @classmethod
    def start(cls, calls: list[tuple[bytes, dict[str, Any]]]) -> "CallsCursor":
        """A cursor before the first byte of a text of calls (`call_schemas`)."""
        return cls(tuple((head, JsonCursor.start(schema)) for head, schema in calls))

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
            started = next((start for head, start in self.calls if since.endswith(head)), None)
            cursor = replace(cursor, since=b"" if started is not None else since, arguments=started)
        return cursor

    @property
    def _longest_head(self) -> int:
        return max((len(head) for head, _ in self.calls), default=1)
