"""`uniqueItems` over strings and integers, held while the JSON is written.

A grammar cannot say "unlike every earlier item", so llguidance does not
enforce `uniqueItems` (grammar.py spells it out where the items are a few listed
values). A small model at T=0 repeats itself in just such a list: a recipe's
tags came out `["baking", "sourdough", "baking"]`. Where an array's items are
free strings (no const, pattern or format: a string can always go on), the
strings of a longer enum, or integers as localspec bounds them (up to 15 digits:
one can take another digit to differ), a `JsonCursor` (json_cursor.py) follows the JSON
written so far, byte by byte, far enough to know when the text is inside such an
array, and `UniqueItems` drops from each of `TokenGrammar`'s masks the tokens
that would make an item repeat one: a free string's closing quote after the same
text, what ends an integer equal to an earlier one, an enum's item as soon as it
can only become a value already held, and an item one token before it would be
left where it can only end as a copy (a free string at its maxLength; an integer
whose every way on, more digits or none, is held already, such as `0`), so that
the rule never leads where it cannot be left.
That is one more rule of the grammar, a function of the text so far like the
others: the mask still comes first in the one function that turns logits into a
distribution, and speculative decoding stays exact w.r.t. the constrained target.

Only arrays the cursor can place are held (schema_places.py follows the schema as
the cursor does); `survey_unique_arrays` says which those are, so that a warning
"not enforced" stays for any other. In a tool-call grammar each call's arguments
are followed the same way (calls_cursor.py).
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol, Sequence

import numpy as np

from .calls_cursor import CallsCursor, call_schemas
from .json_cursor import QUOTE, JsonCursor
from .schema_places import survey_unique_arrays

# A Lark grammar of one JSON value and nothing else (`--grammar`, or tool_calls checking one parameters schema).
_LONE_JSON = re.compile(r"start: %json (\{.*\})\n?")


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


def schemas_of_grammar(grammar: str) -> list[dict[str, Any]]:
    """The JSON schemas whose documents an llguidance grammar string writes, where the rule can tell: a JSON
    schema's grammar, a lone `%json` value's, or the arguments of each call in a tool-call grammar."""
    schema = _whole_document_schema(grammar)
    return [schema] if schema is not None else [schema for _, schema in call_schemas(grammar)]


def _whole_document_schema(grammar: str) -> dict[str, Any] | None:
    """The schema of the whole text a grammar writes, where it is one JSON document: a JSON schema's grammar, or
    a lone `%json` value's."""
    schema = schema_of_grammar(grammar)
    lone = _LONE_JSON.fullmatch(grammar) if schema is None else None
    if lone is not None:
        try:
            schema = json.loads(lone[1])
        except ValueError:
            return None
    return schema if isinstance(schema, dict) else None


class Vocabulary(Protocol):
    """What the rule needs of a model's vocabulary (`runtime.model.Model` has it)."""

    def token_bytes(self, token: int) -> bytes: ...

    def tokens_holding(self, byte: int) -> np.ndarray: ...

    def token_lengths(self) -> np.ndarray: ...


class UniqueItems:
    """The rule "no item twice" over the tokens a grammar has consumed: a `JsonCursor` for each token
    consumed (so the grammar can step back along a draft), and which tokens the rule rules out next."""

    def __init__(self, cursors: list[JsonCursor | CallsCursor], vocabulary: Vocabulary,
                 quote_tokens: np.ndarray | None = None, opening_tokens: np.ndarray | None = None) -> None:
        self._cursors = cursors
        self._vocabulary = vocabulary
        # Only a token that holds a quote can close a string; outside an array the rule holds, only one that
        # opens an array as well (`["a","a"`, `[1,1,`) can repeat an item in it.
        self._quote_tokens = vocabulary.tokens_holding(QUOTE) if quote_tokens is None else quote_tokens
        self._opening_tokens = vocabulary.tokens_holding(ord("[")) if opening_tokens is None else opening_tokens

    @classmethod
    def for_grammar(cls, grammar: str, vocabulary: Vocabulary) -> "UniqueItems | None":
        """The rule for `grammar`, where it is a JSON schema's with an array the rule holds."""
        schema = _whole_document_schema(grammar)
        if schema is not None:
            return cls([JsonCursor.start(schema)], vocabulary) if survey_unique_arrays(schema).held else None
        calls = call_schemas(grammar)
        if any(survey_unique_arrays(arguments).held for _, arguments in calls):
            return cls([CallsCursor.start(calls)], vocabulary)
        return None

    def copy(self) -> "UniqueItems":
        """An independent copy (a drafter advances it along its draft)."""
        return UniqueItems(list(self._cursors), self._vocabulary, self._quote_tokens, self._opening_tokens)

    def taken(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the first, the rule takes in a row."""
        cursor: JsonCursor | CallsCursor | None = self._cursors[-1]
        for count, token in enumerate(tokens):
            cursor = cursor.feed(self._vocabulary.token_bytes(token)) if cursor is not None else None
            if cursor is None:
                return count
        return len(tokens)

    def allowed(self, allowed: np.ndarray) -> np.ndarray:
        """`allowed` (sorted ids) without the tokens that would make an item repeat one (see `JsonCursor.feed`),
        checked where they can: those that can close a string, and near a maxLength, in an enum or among
        integers, any."""
        cursor = self._cursors[-1]
        if cursor.settled:
            return allowed
        if not cursor.in_held_array:  # only a token that opens an array as well can repeat an item of it
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
        """Step over `tokens`; False, and no step, where one makes an item repeat (the caller validated them)."""
        cursors = [self._cursors[-1]]
        for token in tokens:
            cursor = cursors[-1].feed(self._vocabulary.token_bytes(token))
            if cursor is None:
                return False
            cursors.append(cursor)
        self._cursors += cursors[1:]
        return True

    def rollback(self, n: int) -> None:
        """Step back over the last `n` tokens consumed."""
        if n:
            del self._cursors[-n:]
