"""`uniqueItems` over strings by a pattern or a format (emails, uuids, codes), held while the JSON is written
(engine/string_language.py, through unique_items.py's rule)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from test_unique_items import SUSPECT_PIECES, assert_one_letter_refused, assert_the_mask_is_what_feeding_refuses, tokens
from tiny_models import write_pair

from localspec.engine.constraint import TokenGrammar
from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.json_cursor import JsonCursor
from localspec.engine.string_language import StringLanguage
from localspec.runtime.model import Model

LENIENT = {"lenient": True}
UUID = "123e4567-e89b-12d3-a456-426614174000"


def unique(items: dict, **more: object) -> dict:
    return {"type": "array", "items": items, "uniqueItems": True, **more}


def language_of(items: dict) -> StringLanguage:
    language = StringLanguage.of_items(items, LENIENT)
    assert language is not None
    return language


@pytest.mark.parametrize("items, alphabet", [
    ({"type": "string", "pattern": "^[ab]{1,2}c?$"}, "abc"),
    ({"type": "string", "pattern": "^[ab]{1,2}c?$", "maxLength": 2}, "abc"),
    ({"type": "string", "pattern": "^(x|xy|yx)$", "minLength": 2}, "xy"),
    ({"type": "string", "pattern": "^[a-c]+$", "maxLength": 2}, "abc"),
])
@pytest.mark.slow
def test_a_string_may_end_unlike_those_held_exactly_where_some_string_of_its_language_does(
        items: dict, alphabet: str) -> None:
    """Against every string the schema takes (listed by brute force, checked by llguidance and by Python's own
    reading of the pattern), for every set of up to three held ones and every beginning."""
    language = language_of(items)
    pattern, least, most = items["pattern"], items.get("minLength", 0), items.get("maxLength", 4)
    strings = [text for length in range(5) for text in map("".join, itertools.product(alphabet, repeat=length))
               if re.fullmatch(pattern.strip("^$"), text) and least <= len(text) <= most]
    beginnings = sorted({text[:end] for text in strings for end in range(len(text) + 1)})
    for count in range(4):
        for held in itertools.combinations(strings, count):
            for written in beginnings:
                expected = any(text.startswith(written) and text not in held for text in strings)
                assert language.may_end_unlike(b'"' + written.encode(), frozenset(held)) is expected, (held, written)


def test_formats_are_read_as_llguidance_writes_them() -> None:
    uuid = language_of({"type": "string", "format": "uuid"})
    held = frozenset([UUID])
    assert uuid.may_end_unlike(json.dumps(UUID[:-1]).encode()[:-1], held)  # (15 other last digits)
    assert not uuid.may_end_unlike(json.dumps(UUID).encode()[:-1], held)  # a uuid is whole: it can only close
    email = language_of({"type": "string", "format": "email"})
    assert email.may_end_unlike(b'"ann@example.com', frozenset(["ann@example.com"]))  # (.comx, .com.au, ...)
    assert not email.may_end_unlike(b'"a@[1.2.3.45]', frozenset(["a@[1.2.3.45]"]))  # an address literal is whole
    assert email.may_end_unlike(b'"a@[1.2.3.4', frozenset(["a@[1.2.3.4]"]))  # (1.2.3.40 ...)
    short = language_of({"type": "string", "format": "email", "maxLength": 5})
    assert not short.may_end_unlike(b'"a@b.c', frozenset(["a@b.c"]))


@pytest.mark.parametrize("items", [
    {"type": "string"},  # free strings: held as before
    {"type": "string", "pattern": "^a$", "enum": ["a"]},
    {"type": ["string", "null"], "format": "uuid"},
    {"type": "integer"},
    "not a schema",
])
def test_only_string_items_by_a_pattern_or_a_format_have_a_language(items: object) -> None:
    assert StringLanguage.of_items(items, LENIENT) is None


@pytest.mark.parametrize("text, refused", [
    (f'["{UUID}", "{UUID[:-1]}', False),
    (f'["{UUID}", "{UUID}', True),  # written whole again: only the closing quote could follow
    (f'["{UUID}", "{UUID[:-1]}1', False),
    (f'["{UUID}", "{UUID[:-1]}1", "{UUID[:-1]}', False),
    (f'["{UUID}", "{UUID[:-1]}1", "{UUID[:-1]}1', True),
])
def test_a_uuid_item_is_refused_as_soon_as_it_can_only_repeat_one(text: str, refused: bool) -> None:
    schema = unique({"type": "string", "format": "uuid"}, **{"x-guidance": LENIENT})
    assert (JsonCursor.start(schema).feed(text.encode()) is None) is refused


def test_an_array_whose_every_string_is_held_takes_no_more_items() -> None:
    schema = unique({"type": "string", "pattern": "^(yes|no)$"})
    cursor = JsonCursor.start(schema).feed(b'["yes", "no"')
    assert cursor is not None and cursor.feed(b"]") is not None
    assert cursor.feed(b",") is None
    assert JsonCursor.start(schema).feed(b'["yes", "n') is not None
    assert JsonCursor.start(schema).feed(b'["yes", "ye') is None


CODES = unique({"type": "string", "pattern": "^[ab]{2}$"})


@pytest.mark.parametrize("schema, text", [
    (CODES, '["ab", "a'),
    (CODES, '["ab", '),
    (CODES, '["ab", "aa", "ba", '),
    (CODES, '["ab", "aa", "ba", "b'),
    (CODES, '["ab"'),
])
def test_the_mask_drops_exactly_the_tokens_that_feeding_would_refuse(schema: dict, text: str) -> None:
    pieces = [*SUSPECT_PIECES, b'"a', b'"b', b'"ab', b'"bb', b"b", b'b"]', b'", "b', b'a", "b']
    assert_the_mask_is_what_feeding_refuses(schema, text, pieces)


def test_the_survey_holds_such_arrays_without_a_warning() -> None:
    schema = {"type": "object", "properties": {
        "attendees": unique({"type": "string", "format": "email"}, minItems=1),
        "ids": unique({"type": "string", "format": "uuid"}),
        "codes": unique({"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$", "maxLength": 12})}}
    assert compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings == ()


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_pair(tmp_path_factory.mktemp("tiny-language"), space_token=True)


def test_the_grammar_refuses_the_token_that_leaves_an_item_only_a_repeat(tiny_pair: tuple[Path, Path]) -> None:
    """A code of two letters equal to an earlier one up to its last letter: that letter is refused (a draft is cut
    before it), the others taken; where every code is held, the array closes."""
    grammar = compile_format(OutputFormat("json_schema", json.dumps(CODES), "s.json")).grammar
    with Model(tiny_pair[0]) as model:
        assert_one_letter_refused(model, grammar, '["ab", "a', b"b", b"a", 'b", "aa"]')
        every_code = TokenGrammar.start(model, grammar)
        every_code.consume(tokens(model, '["ab", "aa", "ba", "bb"'))
        pieces = [model.token_bytes(token) for token in every_code.allowed()]
        assert b"]" in pieces and not any(b"," in piece for piece in pieces)  # (the grammar alone takes a `,`)
        every_code.consume(tokens(model, '["ab", "aa", "ba", "bb"]')[-1:])
        assert every_code.stopped


def test_items_named_by_a_ref_are_held() -> None:
    schema = {"$defs": {"sku": {"type": "string", "pattern": "^[A-Z]{2}$"}, "tag": {"type": "string"}},
              "type": "object", "properties": {"skus": unique({"$ref": "#/$defs/sku"}),
                                               "tags": unique({"$ref": "#/$defs/tag"})}}
    assert JsonCursor.start(schema).feed(b'{"skus": ["AB", "A') is not None
    assert JsonCursor.start(schema).feed(b'{"skus": ["AB", "AB') is None
    assert JsonCursor.start(schema).feed(b'{"tags": ["x", "x"') is None
    assert compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings == ()


def test_a_long_forced_run_is_walked_at_once() -> None:
    """Between the items held and their one free letter lie 5,000 forced bytes: past the walk's step limit were
    they walked a byte at a time (where it answers as if nothing were told)."""
    language = language_of({"type": "string", "pattern": "^x{5000}[ab]$"})
    held = frozenset(["x" * 5000 + "a", "x" * 5000 + "b"])
    assert not language.may_end_unlike(b'"x', held)
    assert language.may_end_unlike(b'"x', held - {"x" * 5000 + "b"})


def test_control_characters_spelled_several_ways_refuse_nothing_early_and_a_repeat_still_closes_nowhere() -> None:
    """llguidance takes a tab as `\\t` or `\\u0009`: the walk, which follows one spelling, is not asked."""
    schema = unique({"type": "string", "pattern": "^[\\t\\n]{1,2}$"})
    cursor = JsonCursor.start(schema).feed(b'["\\t", "\\t')
    assert cursor is not None and cursor.feed(b'"') is None
    assert JsonCursor.start(schema).feed(b'["\\t", "\\u0009"') is None
    assert JsonCursor.start(schema).feed(b'["\\t", "\\u0009\\n"') is not None


def test_a_lone_surrogate_is_no_error() -> None:
    schema = unique({"type": "string", "format": "uuid"})
    assert JsonCursor.start(schema).feed(b'["\\ud800", "1') is not None


@pytest.mark.parametrize("items, least, refused", [
    ({"type": "string", "pattern": "^(yes|no)$"}, 3, True),
    ({"type": "string", "pattern": "^(yes|no)$"}, 2, False),
    ({"type": "string", "pattern": "^[ab]{2}$"}, 5, True),
    ({"type": "string", "format": "uuid"}, 50, False),
    ({"type": "string", "pattern": "^[a-z]+$"}, 1000, False),
])
def test_a_unique_array_asking_more_strings_than_its_pattern_takes_is_refused_before_generating(
        items: dict, least: int, refused: bool) -> None:
    from localspec.errors import InputError

    schema = json.dumps(unique(items, minItems=least))
    if refused:
        with pytest.raises(InputError, match="no text can satisfy it"):
            compile_format(OutputFormat("json_schema", schema, "s.json"))
    else:
        compile_format(OutputFormat("json_schema", schema, "s.json"))


def test_records_whose_last_value_is_an_email_are_held() -> None:
    """Attendees as records of a name and an email: two equal records are refused at the email's last letter."""
    person = {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string",
                                                                                      "format": "email"}},
              "required": ["name", "email"], "additionalProperties": False}
    schema = json.loads(compile_format(OutputFormat("json_schema", json.dumps(unique(person, maxItems=4)))).grammar)
    schema = schema["grammars"][0]["json_schema"]  # (as the rule reads it: bounded, with llguidance's options)
    first = b'[{"name": "Ann", "email": "ann@x.io"}, {"name": "Ann", "email": "ann@x.io'
    cursor = JsonCursor.start(schema).feed(first)
    assert cursor is not None and cursor.feed(b'"') is None and cursor.feed(b'm"') is not None
    assert JsonCursor.start(schema).feed(first.replace(b'"Ann", "email": "ann@x.io', b'"Bo", "email": "ann@x.io',
                                                       1)) is not None
