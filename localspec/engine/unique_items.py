"""`uniqueItems` over strings and numbers, and unique keys, held while the JSON is written.

A grammar cannot say "unlike every earlier item", so llguidance does not
enforce `uniqueItems` (grammar.py spells it out where the items are a few listed
values). A small model at T=0 repeats itself in just such a list: a recipe's
tags came out `["baking", "sourdough", "baking"]`. Where an array's items are
free strings (no const, pattern or format: a string can always go on), the
strings of a longer enum, integers between bounds or none (llguidance holds an
integer to its bounds digit by digit), or numbers left open (as localspec bounds
them: 15 digits before the point, 9 after it), a `JsonCursor` (json_cursor.py) follows the JSON
written so far, byte by byte, far enough to know when the text is inside such an
array, and `UniqueItems` drops from each of `TokenGrammar`'s masks the tokens
that would make an item repeat one: a free string's closing quote after the same
text, what ends a number equal to an earlier one (`1.50` equals `1.5`), an enum's item as soon as it
can only become a value already held, and an item one token before it would be
left where it can only end as a copy (a free string at its maxLength; an integer
whose every way on within its bounds, more digits or none, is held already, such
as `0`, or `7` under `maximum: 49`; a number at its ninth decimal), and the `,` before an item where every one
it could be is held, so that the rule never leads where it cannot be left.
That is one more rule of the grammar, a function of the text so far like the
others: the mask still comes first in the one function that turns logits into a
distribution, and speculative decoding stays exact w.r.t. the constrained target.

Records, too: objects whose listed properties are all required and that take no
other key (llguidance writes each in the listed order), each value a string,
number, boolean or null. Two are equal where their values are, so the last
value of a record is held as an item is, unlike the last values of the earlier
records whose other values equal this one's (a playlist's songs came out the
same five times: the fifth `"seconds": 100` now cannot close); only where the
last property takes at least as many values as the array takes items, since
nothing before the last value is refused.

Only arrays the cursor can place are held (schema_places.py follows the schema as
the cursor does); `survey_held` says which those are, so that a warning
"not enforced" stays for any other. In a tool-call grammar each call's arguments
are followed the same way (calls_cursor.py).

Keys, too: llguidance writes an object's listed properties at most once, but the
keys it does not list (`{"type": "object"}`, `--format json`, an open
`additionalProperties`) may repeat, and a small model at T=0 loops on one
(`"looks_like_a_frog": "A cat with a long, curly tail…"` again and again, till
max_tokens) into JSON whose parsers keep the last value only. In every object the
cursor places that takes such keys, the closing quote of a key equal to an earlier
one of that object is dropped from the mask; such a key can always take another
character, so this never leads into a dead end. Keys an object takes by name or
`patternProperties` pattern alone cannot always go on (`^[a-z]{2}$`), so there
any token after which the key can only end as one held is dropped, and the `,`
before a key where every key is held (key_language.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from .calls_cursor import CallsCursor, call_schemas
from .json_cursor import QUOTE, JsonCursor
from .prelude import PreludeCursor, grammar_list, prelude_of
from .schema_places import survey_held

# A Lark grammar of one JSON value and nothing else (`--grammar`, or tool_calls checking one parameters schema).
_LONE_JSON = re.compile(r"start: %json (\{.*\})\n?")


def schema_of_grammar(grammar: str) -> dict[str, Any] | None:
    """The JSON schema an llguidance grammar string was compiled from (`grammar_from_json_schema`), else None."""
    found = grammar_list(grammar)
    if found is None or len(found[1]) != 1:
        return None
    schema = found[1][0].get("json_schema")
    return schema if isinstance(schema, dict) else None


def schemas_of_grammar(grammar: str) -> list[tuple[dict[str, Any], bool]]:
    """The JSON schemas whose documents an llguidance grammar string writes, where the rule can tell: a JSON
    schema's grammar, a lone `%json` value's, or each JSON value in a tool-call grammar; each with whether the
    rule follows the text there (not a tool's value whose head does not tell it apart: `call_schemas`)."""
    schema = _whole_document_schema(grammar)
    if schema is not None:
        return [(schema, True)]
    return [(value.schema, value.head is not None) for value in call_schemas(grammar)]


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

    def token_bytes(self, token: int, *, special: bool = False) -> bytes: ...

    def tokens_holding(self, byte: int) -> np.ndarray: ...

    def tokens_spelling(self, text: bytes) -> list[int]: ...

    def token_lengths(self) -> np.ndarray: ...


@dataclass(frozen=True)
class _Suspects:
    """The tokens that may make an item or a key repeat, checked by where the text is. Only a token that holds a
    quote can close a string; outside a string item or key the rule holds, only one that holds two quotes or more
    can write one whole (`,"a"`); outside an array the rule holds, only one that opens an array as well
    (`["a","a"`, `[1,1,`) can repeat an item in it, and inside another string only one that closes it first (a
    quote and a `[`). (Near a maxLength, in an enum or among numbers, `UniqueItems.allowed` checks more.)"""

    quotes: np.ndarray
    two_quotes: np.ndarray
    openings: np.ndarray
    quoted_openings: np.ndarray
    keys_held: bool  # the grammar has an object whose keys the rule holds
    # In a record before its last value, only a token that closes the last key and writes on into its value can
    # make a repeat: one with two quotes or more (a string), or a quote and a digit or a minus (a number).
    record_endings: np.ndarray
    lengths: np.ndarray  # each token's length in bytes
    commas: np.ndarray
    quoted_commas: np.ndarray  # a quote and a comma: what closes a string value and asks for a key
    closers: np.ndarray  # a `}` or `]`, and a comma or a quote: what closes a container and asks for, or begins, a key

    @classmethod
    def of(cls, vocabulary: Vocabulary, keys_held: bool) -> "_Suspects":
        quotes, openings = vocabulary.tokens_holding(QUOTE), vocabulary.tokens_holding(ord("["))
        pieces = vocabulary.token_bytes
        two_quotes = np.array([token for token in quotes.tolist() if pieces(token).count(b'"') >= 2], dtype=np.int64)
        quoted_numbers = [token for token in quotes.tolist() if any(byte in b"-0123456789" for byte in pieces(token))]
        record_endings = np.union1d(two_quotes, np.array(quoted_numbers, dtype=np.int64))
        commas = vocabulary.tokens_holding(ord(","))
        closing = np.union1d(vocabulary.tokens_holding(ord("}")), vocabulary.tokens_holding(ord("]")))
        return cls(quotes, two_quotes, openings, np.intersect1d(quotes, openings, assume_unique=True), keys_held,
                   record_endings, vocabulary.token_lengths(), commas,
                   np.intersect1d(quotes, commas, assume_unique=True),
                   np.intersect1d(closing, np.union1d(commas, quotes), assume_unique=True))


class UniqueItems:
    """The rule "no item twice, no key twice" over the tokens a grammar has consumed: a `JsonCursor` for each
    token consumed (so the grammar can step back along a draft), and which tokens the rule rules out next."""

    def __init__(self, cursors: list[JsonCursor | CallsCursor | PreludeCursor], vocabulary: Vocabulary,
                 suspects: _Suspects) -> None:
        self._cursors = cursors
        self._vocabulary = vocabulary
        self._suspects = suspects

    @classmethod
    def for_grammar(cls, grammar: str, vocabulary: Vocabulary) -> "UniqueItems | None":
        """The rule for `grammar`, where it is a JSON schema's (or a tool-call grammar) with an array or an
        object's keys the rule holds."""
        found = prelude_of(grammar)
        if found is not None:  # (the answer after a thought: the rule starts where the answer does)
            answer, prelude = found
            rule = cls.for_grammar(answer, vocabulary)
            return None if rule is None else cls([PreludeCursor.start(rule._cursors[0], prelude)], vocabulary,
                                                 rule._suspects)
        schema = _whole_document_schema(grammar)
        if schema is not None:
            survey = survey_held(schema)
            if not (survey.held or survey.other_keys):
                return None
            return cls([JsonCursor.start(schema)], vocabulary, _Suspects.of(vocabulary, survey.other_keys))
        calls = call_schemas(grammar, lambda token: vocabulary.token_bytes(token, special=True))
        surveys = [survey_held(value.schema) for value in calls if value.head is not None]
        if not any(survey.held or survey.other_keys for survey in surveys):
            return None
        keys_held = any(survey.other_keys for survey in surveys)
        return cls([CallsCursor.start(calls)], vocabulary, _Suspects.of(vocabulary, keys_held))

    def copy(self) -> "UniqueItems":
        """An independent copy (a drafter advances it along its draft)."""
        return UniqueItems(list(self._cursors), self._vocabulary, self._suspects)

    def taken(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the first, the rule takes in a row."""
        cursor: JsonCursor | CallsCursor | PreludeCursor | None = self._cursors[-1]
        for count, token in enumerate(tokens):
            cursor = cursor.feed(self._piece(token)) if cursor is not None else None
            if cursor is None:
                return count
        return len(tokens)

    def allowed(self, allowed: np.ndarray) -> np.ndarray:
        """`allowed` (sorted ids) without the tokens that would make an item or a key repeat one (see
        `JsonCursor.feed`), checked where they can (`_Suspects`), and near a maxLength, in an enum or among
        numbers, any."""
        cursor = self._cursors[-1]
        if cursor.settled:
            return allowed
        suspects = self._suspects
        if cursor.in_held_key or (cursor.in_held_array and cursor.in_string):
            candidates = _allowed_among(allowed, suspects.quotes)
        elif cursor.in_held_array:  # (between its items)
            candidates = _allowed_among(allowed, suspects.two_quotes)
        else:
            candidates = _allowed_among(allowed, suspects.quoted_openings if cursor.in_string else suspects.openings)
            if suspects.keys_held:
                candidates = np.union1d(candidates, _allowed_among(allowed, suspects.two_quotes))
            if cursor.in_record:  # (only a token long enough to write on into its last value)
                endings = _allowed_among(allowed, suspects.record_endings)
                endings = endings[suspects.lengths[endings] >= cursor.bytes_to_a_records_last_value()]
                candidates = np.union1d(candidates, endings)
        # A key or an item held to a language may be refused before it closes: any token on the way along one
        # held, a quote that opens one, a `,` when none is left.
        language_rests = cursor.language_rests()
        if language_rests is not None:
            rests, exhausted = language_rests
            candidates = np.union1d(candidates, self._tokens_beginning(rests, allowed))
            if not cursor.in_string:
                candidates = np.union1d(candidates, _allowed_among(allowed, suspects.quotes))
            if exhausted:  # (in a string value, only a token that closes it can reach a `,`)
                commas = suspects.quoted_commas if cursor.in_string else suspects.commas
                candidates = np.union1d(candidates, _allowed_among(allowed, commas))
        if cursor.encloses_key_language:
            candidates = np.union1d(candidates, _allowed_among(allowed, suspects.closers))
        room = cursor.room_before_a_forced_repeat()
        if room is not None:  # and those long enough to fill the item (a character is a byte or more)
            candidates = np.union1d(candidates, allowed[self._vocabulary.token_lengths()[allowed] >= room])
        if not len(candidates):
            return allowed
        token_bytes, refuses = self._vocabulary.token_bytes, cursor.refuses
        repeating = [token for token in candidates.tolist() if refuses(token_bytes(token))]
        return np.setdiff1d(allowed, repeating, assume_unique=True) if repeating else allowed

    def _tokens_beginning(self, texts: list[bytes], allowed: np.ndarray) -> np.ndarray:
        """The tokens among `allowed` (sorted ids) that spell the beginning of one of `texts`."""
        if not texts:
            return allowed[:0]
        spelling = self._vocabulary.tokens_spelling
        tokens = {token for text in texts for end in range(1, len(text) + 1) for token in spelling(text[:end])}
        return _allowed_among(allowed, np.array(sorted(tokens), dtype=np.int64))

    def consume(self, tokens: Sequence[int]) -> bool:
        """Step over `tokens`; False, and no step, where one makes an item repeat (the caller validated them)."""
        cursors = [self._cursors[-1]]
        for token in tokens:
            cursor = cursors[-1].feed(self._piece(token))
            if cursor is None:
                return False
            cursors.append(cursor)
        self._cursors += cursors[1:]
        return True

    def _piece(self, token: int) -> bytes:
        """A token's bytes as the output shows them: a special token's text where it has no other (a thought's
        tags, gpt-oss's markers: see `Generation._token_bytes`)."""
        return self._vocabulary.token_bytes(token) or self._vocabulary.token_bytes(token, special=True)

    def rollback(self, n: int) -> None:
        """Step back over the last `n` tokens consumed."""
        if n:
            del self._cursors[-n:]


def _allowed_among(allowed: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The `tokens` (sorted ids) that `allowed` (sorted ids) holds: a search for each of the few `tokens` in the
    whole vocabulary's worth of `allowed`, not a sort of both."""
    if not len(allowed) or not len(tokens):
        return tokens[:0]
    at = np.minimum(np.searchsorted(allowed, tokens), len(allowed) - 1)
    return tokens[allowed[at] == tokens]
