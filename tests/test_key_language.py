"""Keys an object takes by pattern alone, held unique: the language (key_language.py), the cursor, the mask."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_unique_items import WordVocabulary, assert_one_letter_refused, repeats_an_item
from tiny_models import write_pair

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.key_language import KeyLanguage
from localspec.engine.schema_places import survey_held
from localspec.errors import OutputFormatError
from localspec.runtime.model import Model


def keys_by(*patterns: str, listed: tuple[str, ...] = ()) -> dict:
    """An object that takes the `listed` names and keys under `patterns`, nothing else."""
    return {"type": "object", "properties": {name: {} for name in listed},
            "patternProperties": {pattern: {"type": "integer"} for pattern in patterns}, "additionalProperties": False}


TWO_LETTERS = keys_by("^[a-z]{2}$")
LOCALES = keys_by("^[a-z]{2}(-[A-Z]{2})?$")


@pytest.mark.parametrize("schema, written, held, may", [
    (TWO_LETTERS, "i", {"id"}, True),  # "ia", "ib", ...
    (TWO_LETTERS, "id", {"id"}, False),  # it can only close, as "id" again
    (TWO_LETTERS, "", {"id"}, True),
    (TWO_LETTERS, "x", set(), True),
    (LOCALES, "en", {"en"}, True),  # on to "en-US"
    (LOCALES, "en-G", {"en-GB"}, True),
    (LOCALES, "en-GB", {"en-GB", "en"}, False),
    (keys_by("^[ab]$"), "", {"a", "b"}, False),  # every key held: no new one can begin
    (keys_by("^[ab]$", listed=("x",)), "", {"a", "b"}, False),  # after a key by pattern no listed name comes
    (keys_by("^[ab]$", listed=("x",)), "", {"a", "b", "x"}, False),
    (keys_by("^k\\d$"), "k", {f"k{n}" for n in range(10)}, False),  # \d: the ten ASCII digits
    (keys_by("^k\\d$"), "k", {f"k{n}" for n in range(9)}, True),
    (keys_by("^(ab|ac)$"), "a", {"ab", "ac"}, False),
    (keys_by("^(ab|ac)$"), "a", {"ab"}, True),
    (keys_by("^a?b$"), "", {"b", "ab"}, False),
    (keys_by("^x{1,3}$"), "xx", {"xx", "xxx"}, False),
    (keys_by("^x{1,3}$"), "x", {"xx", "xxx"}, True),  # "x" itself
    (keys_by("^[A-Za-z_][A-Za-z0-9_-]*$"), "ab", {"ab"}, True),  # an unbounded repeat: always on
    (keys_by("^[a-z]{2}$", "^[a-z]{3}$"), "id", {"id"}, True),  # another pattern goes on
    (keys_by("^\\.[ab]$"), ".", {".a", ".b"}, False),  # an escaped character is itself
    (keys_by("^[a-c--b]$"), "", {"a", "c"}, None),  # a set difference (llguidance: a or c; Python: a to c, - to b)
    (keys_by("^\\s$"), "", set(" \t\n\r\x0b\x0c\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000")
     | {chr(code) for code in range(0x2000, 0x200b)}, False),  # \s as llguidance reads it: not \x1c-\x1f
    (keys_by("^[a\U0001F600]$"), "", {"a"}, None),  # a member past the Basic Multilingual Plane: not counted
])
def test_a_key_written_so_far_may_end_unlike_those_held_where_the_language_goes_on(
        schema: dict, written: str, held: set[str], may: bool | None) -> None:
    language = KeyLanguage.of_object(schema)
    if may is None:  # (a pattern read unlike llguidance: not read)
        assert language is None
        return
    assert language is not None
    assert language.may_end_unlike(written, frozenset(held)) is may


@pytest.mark.parametrize("schema, text, refused", [
    (keys_by("^(min|max)$", listed=("unit",)), '{"min": 1, "max": 2,', True),  # "unit" cannot follow a key by pattern
    (keys_by("^(min|max)$", listed=("unit",)), '{"unit": 1, "min": 2,', False),
    (keys_by("^[ab]$", listed=("a",)), '{"b": 1, "a', True),  # a listed name is never a key by pattern
    (keys_by("^[ab]$", listed=("a",)), '{"a": 1, "b": 2,', True),
    (keys_by("^c$", listed=("a", "b")), '{"b": 1, "c": 2,', True),  # nor an earlier listed name after a later one
    ({**keys_by("^[abc]$"), "properties": {"b": False}}, '{"a": 1, "c": 2,', True),  # nor one whose schema is false
])
def test_listed_names_come_first_in_order_and_never_by_pattern(schema: dict, text: str, refused: bool) -> None:
    for chunk in (0, 1):
        assert repeats_an_item(schema, text, chunk) is refused, (text, chunk)


def test_a_long_held_key_is_walked_without_recursion() -> None:
    language = KeyLanguage.of_object(keys_by("^x{1100}y?$"))
    assert language is not None and not language.may_end_unlike("", frozenset({"x" * 1100, "x" * 1100 + "y"}))


def test_nested_groups_are_built_once() -> None:
    assert KeyLanguage.of_object(keys_by("^" + "(" * 12 + "a" + ")" * 12 + "$")) is not None


def test_a_token_that_closes_a_value_and_asks_for_a_key_is_refused_in_the_mask() -> None:
    from localspec.engine.unique_items import UniqueItems

    schema = keys_by("^[ab]$")
    schema["patternProperties"]["^[ab]$"] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    pieces = [b'{"a":{"n":1},"b":{"n":2', b"},", b"}}", b"}", b'},"a', b"2},", b'"},']
    rule = UniqueItems.for_grammar(json.dumps({"grammars": [{"json_schema": schema}]}), WordVocabulary(pieces))
    assert rule is not None and rule.consume([0])
    kept = rule.allowed(np.arange(len(pieces))).tolist()
    assert kept == [0, 2, 3, 6] and all(rule.taken([token]) == 1 for token in kept)


@pytest.mark.parametrize("schema", [
    keys_by("^x"),  # not anchored at the end: any text after it
    keys_by("x$"),
    keys_by("^(?=a)b$"),  # a lookahead
    keys_by("^\\bx$"),
    keys_by("^(a)\\1$"),  # a back-reference
    keys_by("^a|b$"),  # each side anchored at one end
    {**TWO_LETTERS, "additionalProperties": True},  # other keys too: free keys, held as such
    {**TWO_LETTERS, "propertyNames": {"maxLength": 2}},
    {"type": "object", "properties": {"a": {}}, "additionalProperties": False},  # listed names only
])
def test_no_language_where_the_object_takes_other_keys_or_a_pattern_is_not_read(schema: dict) -> None:
    assert KeyLanguage.of_object(schema) is None


@pytest.mark.parametrize("schema, text, refused", [
    (TWO_LETTERS, '{"id": 1, "i', False),
    (TWO_LETTERS, '{"id": 1, "id', True),  # refused before its closing quote: it could only close as "id"
    (TWO_LETTERS, '{"id": 1, "ie": 2, "id', True),
    (TWO_LETTERS, '{"id": 1, "de": {"id": 2}}', False),  # (an integer value: no object; keys of one object)
    (keys_by("^[ab]$"), '{"a": 1, "b": 2,', True),  # a key must follow, and every one is held
    (keys_by("^[ab]$"), '{"a": 1, "b": 2}', False),
    (LOCALES, '{"en": 1, "en-GB": 2, "en', False),
    (LOCALES, '{"en": 1, "en-GB": 2, "en-GB', True),
    ({"type": "object", "properties": {"m": TWO_LETTERS}}, '{"m": {"ab": 1, "ab', True),  # nested
])
def test_the_cursor_refuses_a_key_that_can_only_end_as_one_held(schema: dict, text: str, refused: bool) -> None:
    for chunk in (0, 1, 2, 3):
        assert repeats_an_item(schema, text, chunk) is refused, (text, chunk)


def test_the_survey_holds_keys_by_pattern_alone() -> None:
    assert survey_held(TWO_LETTERS).other_keys and not survey_held(keys_by("^x")).other_keys


def test_every_token_on_the_way_to_a_held_key_is_refused_wherever_it_begins() -> None:
    from localspec.engine.unique_items import UniqueItems

    pieces = [b'{"ab":1', b',"a', b', "', b"a", b"b", b"ab", b'"', b"c", b',"ab', b',"c', b"}", b","]
    rule = UniqueItems.for_grammar(json.dumps({"grammars": [{"json_schema": TWO_LETTERS}]}), WordVocabulary(pieces))
    everything = np.arange(len(pieces))
    assert rule is not None and rule.consume([0])
    assert rule.allowed(everything).tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11]  # `,"ab` leads only to "ab"
    assert rule.consume([2])  # `{"ab":1, "`: a key begins
    assert 5 not in rule.allowed(everything).tolist() and 3 in rule.allowed(everything).tolist()
    assert rule.consume([3])  # `"a`: on to "ab" again, or another
    assert rule.allowed(everything).tolist() == [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11]

    small = UniqueItems.for_grammar(json.dumps({"grammars": [{"json_schema": keys_by("^[ab]$")}]}),
                                    WordVocabulary([b'{"a":1,"b":2', b",", b"}", b', "', b" "]))
    assert small is not None and small.consume([0])
    assert small.allowed(np.arange(5)).tolist() == [0, 2, 4]  # no `,`: no key is left (the grammar refuses `{`)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_pair(tmp_path_factory.mktemp("tiny-keys"), space_token=True)


def test_the_grammar_refuses_the_letter_that_leaves_only_a_held_key(tiny_pair: tuple[Path, Path]) -> None:
    grammar = compile_format(OutputFormat("json_schema", json.dumps(TWO_LETTERS), "s.json")).grammar
    with Model(tiny_pair[0]) as model:
        assert_one_letter_refused(model, grammar, '{"id": 1, "i', b"d", b"e", 'd": 2}')  # (a draft is cut before it)


def distinct_keys(text: str) -> bool:
    pairs = json.loads(text, object_pairs_hook=lambda pairs: pairs)
    return len({key for key, _ in pairs}) == len(pairs)


@pytest.mark.slow
def test_speculation_keeps_keys_under_a_pattern_distinct_and_emits_what_the_target_alone_does(
        tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Coupled verification, a model drafter: the same tokens as target-only for every seed, every output's keys
    distinct; without the rule the same outputs repeat keys."""
    from localspec.engine import constraint
    from localspec.engine.drafters import build_drafter
    from localspec.engine.generation import generate_text
    from localspec.settings import GenerationSettings, SamplingParams, SpeculativeParams

    schema = {**keys_by("^[ab]{1,2}$"), "minProperties": 2, "maxProperties": 5}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    speculative = SpeculativeParams(strategy="model", draft_max=4, verify="coupled")
    prompt = [1, 260, 265, 270]
    with Model(tiny_pair[0]) as target, Model(tiny_pair[1]) as draft:
        completed = repeats = 0
        for seed in range(16):
            settings = GenerationSettings(sampling, speculative, max_tokens=80, seed=seed)
            try:
                alone = generate_text(target, prompt, settings, None, grammar)
            except OutputFormatError:
                continue
            spoken = generate_text(target, prompt, settings, build_drafter(speculative, sampling, draft), grammar)
            assert spoken.tokens == alone.tokens, seed
            if alone.stop_reason.value != "length":
                completed += 1
                assert distinct_keys(target.detokenize(alone.tokens)), target.detokenize(alone.tokens)
        with monkeypatch.context() as unruled:
            unruled.setattr(constraint.UniqueItems, "for_grammar", lambda *args: None)
            for seed in range(16):
                plain = generate_text(target, prompt, GenerationSettings(sampling, max_tokens=80, seed=seed), None,
                                      grammar)
                if plain.stop_reason.value != "length":
                    repeats += not distinct_keys(target.detokenize(plain.tokens))
    assert completed >= 8 and repeats >= 2
