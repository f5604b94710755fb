"""`uniqueItems` over free strings, held while the JSON is written (engine/unique_items.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny_models import write_pair

from localspec.engine.constraint import TokenGrammar
from localspec.engine.grammar import OutputFormat, bounded_values, compile_format
from localspec.engine.json_cursor import JsonCursor
from localspec.engine.schema_places import survey_held
from localspec.errors import InputError, OutputFormatError
from localspec.runtime.model import Model

TAGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
RECIPE = {"type": "object",
          "properties": {"name": {"type": "string"}, "tags": TAGS, "steps": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "tags"]}


def repeats_an_item(schema: dict, text: str, chunk: int = 0) -> bool:
    """Whether `text`, fed whole (or `chunk` bytes at a time), closes an item equal to an earlier one."""
    data = text.encode()
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    cursor: JsonCursor | None = JsonCursor.start(schema)
    for piece in pieces:
        cursor = cursor.feed(piece) if cursor is not None else None
    return cursor is None


@pytest.mark.parametrize("text, repeats", [
    ('{"name": "bread", "tags": ["baking", "sourdough", "baking"', True),
    ('{"name": "bread", "tags": ["baking", "sourdough", "baking bread"]}', False),
    ('{"name": "bread", "tags": ["ab", "a\\u0062"', True),  # one string, written two ways
    ('{"name": "bread", "tags": ["a\\"", "a\\""', True),  # an escaped quote does not close the item
    ('{"name": "bread", "tags": ["a\\\\", "a\\\\"', True),  # an escaped backslash, then the closing quote
    ('{"name": "bread", "tags": ["a\\\\", "a\\\\\\""', False),  # `a\"` is not `a\`
    ('{"name": "tags", "tags": ["tags", "name"]}', False),  # keys and other values are not items
    ('{"name": "x", "steps": ["mix", "mix"], "tags": ["mix"]}', False),  # steps need not be unique
    ('{"tags": [], "name": "x"}', False),
    ('{"tags": ["", ""', True),
    ('{"tags": ["日本", "日本"', True),  # multi-byte characters, split anywhere
])
def test_the_cursor_finds_a_repeated_item_however_the_text_is_split(text: str, repeats: bool) -> None:
    for chunk in (0, 1, 2, 3, 5):
        assert repeats_an_item(RECIPE, text, chunk) is repeats, (text, chunk)


def test_arrays_are_followed_through_refs_nullable_branches_and_nesting() -> None:
    schema = {"$defs": {"tags": TAGS},
              "type": "object",
              "properties": {"maybe": {"anyOf": [{"$ref": "#/$defs/tags"}, {"type": "null"}]},
                             "groups": {"type": "array", "items": {"$ref": "#/$defs/tags"}},
                             "either": {"anyOf": [TAGS, {"type": "array", "items": {"type": "integer"}}]},
                             "pair": {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "string"},
                                      "uniqueItems": True}}}
    assert repeats_an_item(schema, '{"maybe": ["a", "a"')
    assert not repeats_an_item(schema, '{"maybe": null, "groups": [["a", "b"], ["a", "b"]]}')  # each group apart
    assert repeats_an_item(schema, '{"groups": [["a"], ["b", "b"')
    assert not repeats_an_item(schema, '{"either": ["a", "a"]}')  # two array branches: which one holds is not told
    assert not repeats_an_item(schema, '{"pair": ["a", "a"]}')  # prefixItems: not held
    arrays = survey_held(schema)
    assert arrays.held == [TAGS] and arrays.not_held == 2  # TAGS (also under "either") and "pair"


def message(kind: str, **more: dict) -> dict:
    """An object branch of a message union: its `kind` and more properties, all required, no other key."""
    return {"type": "object", "properties": {"kind": {"const": kind}, **more}, "required": ["kind", *more],
            "additionalProperties": False}


def test_arrays_are_followed_into_a_union_of_object_branches() -> None:
    """A `oneOf` of objects told apart by a `const` (which branch is being written is not followed): each key's
    value is what every branch that takes the key gives it, where they agree."""
    schema = {"type": "object", "properties": {"message": {"type": "object", "oneOf": [
        message("email", to=TAGS, subject={"type": "string"}),
        message("chat", to={"type": "array", "items": {"type": "string"}}, members=TAGS),
        message("note", members=TAGS, text={"type": "string"}),
    ]}}, "additionalProperties": False}
    assert repeats_an_item(schema, '{"message": {"kind": "note", "members": ["ann", "ann"')
    assert repeats_an_item(schema, '{"message": {"kind": "chat", "members": ["ann", "bo", "ann"')
    assert not repeats_an_item(schema, '{"message": {"kind": "chat", "to": ["ann", "ann"]}}')  # (branches differ)
    arrays = survey_held(schema)
    assert arrays.held == [TAGS] and arrays.not_held == 1 and not arrays.other_keys  # "to": TAGS in one branch
    assert compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings == (
        NOT_HELD.format("1 array"),)
    with_more = {"oneOf": [message("email", to=TAGS), {**message("chat", to=TAGS), "if": {"required": ["to"]}}]}
    assert not repeats_an_item(with_more, '{"kind": "chat", "to": ["a", "a"]}')  # a branch says more: not followed
    assert survey_held(with_more).not_held == 1


NOT_HELD = ("s.json: uniqueItems on {} (localspec holds it on arrays of strings, integers, open numbers and records"
            " where it can follow the schema) (not enforced: the output may not satisfy it)")
NUMBERS = {"type": "array", "items": {"type": "number", "minimum": 0}, "uniqueItems": True}  # (bounded: not held)


@pytest.mark.parametrize("schema, warnings", [
    (RECIPE, []),
    ({"$defs": {"unused": NUMBERS}, **RECIPE}, []),  # (no document has that array)
    ({"type": "object", "properties": {"uniqueItems": {"type": "boolean"}, "default": NUMBERS, "tags": TAGS}},
     [NOT_HELD.format("1 array")]),  # properties named as keywords
    ({"type": "array", "items": TAGS, "uniqueItems": True}, [NOT_HELD.format("1 array")]),  # arrays of arrays
    ({"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "uniqueItems": True}, []),
    ({"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}, "uniqueItems": True},
     ['s.json: Unimplemented keys: ["uniqueItems"] (not enforced: the output may not satisfy it)']),  # (no record)
    ({"type": "object", "properties": {"tags": {**TAGS, "contains": {"const": "a"}}}},
     ['s.json: Unimplemented keys: ["contains"] (not enforced: the output may not satisfy it)']),
    # Held in one place, not in another: keys that match a pattern, a branch the value's type does not tell.
    ({"type": "object", "properties": {"tags": TAGS}, "patternProperties": {"^x": TAGS, "^y": TAGS}},
     [NOT_HELD.format("2 arrays")]),  # (several patterns: which a key matches is not followed)
    ({"$defs": {"tags": TAGS}, "type": "object",
      "properties": {"a": {"$ref": "#/$defs/tags"}, "b": {"anyOf": [{"$ref": "#/$defs/tags"}, NUMBERS]}}},
     [NOT_HELD.format("2 arrays")]),
])
def test_the_warning_names_only_the_arrays_not_held(schema: dict, warnings: list[str]) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert list(compiled.warnings) == warnings


@pytest.mark.parametrize("schema, held, not_held", [
    ({"type": "object", "properties": {"keep": TAGS, "tags": {**TAGS, "anyOf": [{"minItems": 1}]}}}, 1, 1),
    ({"type": "object", "properties": {"tags": TAGS, "a": {"$ref": "#uniq"}},  # an anchor: any array it may name
      "$defs": {"u": {**NUMBERS, "$anchor": "uniq"}}}, 1, 2),
    ({"type": "array", "items": [TAGS]}, 0, 1),  # items as a list, as before 2020-12: not followed
])
def test_arrays_in_places_the_cursor_does_not_follow_are_counted_as_not_held(schema: dict, held: int,
                                                                              not_held: int) -> None:
    arrays = survey_held(schema)
    assert (len(arrays.held), arrays.not_held) == (held, not_held)


def test_references_the_cursor_cannot_resolve_as_the_root_does_are_not_followed() -> None:
    """A nested `$id` starts a resource whose `#/...` refs are its own; `#name` is an anchor, not a pointer."""
    plain = {"type": "array", "items": {"type": "string"}}
    nested = {"$id": "https://example.com/root.json", "$defs": {
        "T": TAGS, "inner": {"$id": "https://example.com/inner.json", "$defs": {"T": plain},
                             "type": "object", "properties": {"x": {"$ref": "#/$defs/T"}}}},
        "type": "object", "properties": {"a": {"$ref": "#/$defs/inner"}}}
    assert not repeats_an_item(nested, '{"a": {"x": ["q", "q"]}}')
    anchored = {"type": "object", "items": TAGS, "$defs": {"p": {**plain, "$anchor": "items"}},
                "properties": {"a": {"$ref": "#items"}}}
    assert not repeats_an_item(anchored, '{"a": ["q", "q"]}')


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_pair(tmp_path_factory.mktemp("tiny-unique"), space_token=True)


def tokens(model: Model, text: str) -> list[int]:
    """`text` in `model`'s tokens, as the output spells it (without the word-start mark the vocabulary prepends)."""
    marker = model.tokenize("[", add_special=False)[:-1]
    return model.tokenize(text, add_special=False)[len(marker):]


def assert_one_letter_refused(model: Model, grammar: str, text: str, refused: bytes, kept: bytes, draft: str) -> None:
    """After `text`, the grammar refuses every token spelling the letter `refused`, takes those spelling `kept`,
    and cuts `draft` (which begins with `refused`) before its first token."""
    spelled = {letter: [token for token in range(model.n_vocab) if model.token_bytes(token) == letter]
               for letter in (refused, kept)}
    state = TokenGrammar.start(model, grammar)
    state.consume(tokens(model, text))
    allowed = set(state.allowed())
    assert spelled[refused] and not set(spelled[refused]) & allowed and set(spelled[kept]) <= allowed
    assert state.validate(tokens(model, draft)) == 0


def test_the_grammar_refuses_the_tokens_that_close_a_repeat_and_cuts_a_draft_there(
        tiny_pair: tuple[Path, Path]) -> None:
    grammar = compile_format(OutputFormat("json_schema", json.dumps(TAGS), "s.json")).grammar
    with Model(tiny_pair[0]) as model:
        quote = tokens(model, '"')[0]
        state = TokenGrammar.start(model, grammar)
        state.consume(tokens(model, '["cat","dog","ca'))
        assert quote in state.allowed()  # "ca" is new
        state.consume(tokens(model, "t"))
        assert quote not in state.allowed() and len(state.allowed()) > 1  # "cat" again: the item must go on
        assert state.copy().validate([quote]) == 0
        draft = tokens(model, 's","cat"]')
        kept = state.validate(draft)
        assert model.detokenize(draft[:kept]) == 's","cat'  # "cats" is new; cut at the quote closing "cat" again
        masks, _ = state.allowed_along(draft)
        assert len(masks) - 1 == kept
        state.consume(draft[:kept])  # the grammar stepped back to where it was: it takes the same draft again
        assert quote not in state.allowed()


def test_an_item_is_kept_from_reaching_its_max_length_as_a_repeat(tiny_pair: tuple[Path, Path]) -> None:
    """At its maxLength an item can only close: a token that would leave it there equal to an earlier one is
    refused before (a draft is cut before it); where nothing else is left, one line, never a repeat."""
    schema = {"type": "array", "items": {"type": "string", "maxLength": 1}, "uniqueItems": True}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar
    with Model(tiny_pair[0]) as model:
        state = TokenGrammar.start(model, grammar)
        state.consume(tokens(model, '["a",'))
        draft = tokens(model, '"a"]')
        masks, _ = state.allowed_along(draft)
        assert model.detokenize(draft[: len(masks) - 1]) == '"'
        state.consume(tokens(model, '"'))
        spelled = {text: [t for t in range(model.n_vocab) if model.token_bytes(t) == text] for text in (b"a", b"b")}
        allowed = set(state.allowed())
        assert spelled[b"a"] and not set(spelled[b"a"]) & allowed and set(spelled[b"b"]) <= allowed

        # At maxLength 0 there is one item: after it the array can only close (a comma was let through, and
        # the next pass found every way on a repeat); two of them are asked for in vain, said as it is read.
        one = {**schema, "items": {"type": "string", "maxLength": 0}, "minItems": 1}
        state = TokenGrammar.start(model, compile_format(OutputFormat("json_schema", json.dumps(one))).grammar)
        state.consume(tokens(model, '[""'))
        assert {model.token_bytes(t).strip() for t in state.allowed()} <= {b"]", b""}
        with pytest.raises(InputError, match="its items take 1 value"):
            compile_format(OutputFormat("json_schema", json.dumps({**one, "minItems": 2}), "s.json"))


@pytest.mark.slow
def test_speculation_under_the_rule_emits_what_the_target_alone_does(tiny_pair: tuple[Path, Path],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Coupled verification, a model drafter whose drafts run into repeats: the same tokens as target-only for
    every seed (or the same error, where an item can only repeat), every output's items distinct; without the
    rule the same outputs repeat items."""
    from localspec.engine import constraint
    from localspec.engine.drafters import Drafter, build_drafter
    from localspec.engine.generation import generate_text
    from localspec.settings import GenerationSettings, SamplingParams, SpeculativeParams

    schema = {"type": "array", "items": {"type": "string", "maxLength": 1}, "uniqueItems": True,
              "minItems": 3, "maxItems": 6}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    speculative = SpeculativeParams(strategy="model", draft_max=4, verify="coupled")
    prompt = [1, 260, 265, 270]

    def outcome(settings: GenerationSettings, drafter: Drafter | None) -> list[int] | str:
        try:
            return generate_text(target, prompt, settings, drafter, grammar).tokens
        except OutputFormatError as error:
            return str(error)

    def items(tokens: list[int]) -> list[str]:
        return json.loads(target.detokenize(tokens))

    with Model(tiny_pair[0]) as target, Model(tiny_pair[1]) as draft:
        repeats = completed = 0
        for seed in range(24):
            settings = GenerationSettings(sampling, speculative, max_tokens=60, seed=seed)
            alone = outcome(settings, None)
            assert outcome(settings, build_drafter(speculative, sampling, draft)) == alone, seed
            if isinstance(alone, list):
                completed += 1
                assert len(set(items(alone))) == len(items(alone))
        with monkeypatch.context() as unruled:
            unruled.setattr(constraint.UniqueItems, "for_grammar", lambda *args: None)
            for seed in range(24):
                plain = GenerationSettings(sampling, max_tokens=60, seed=seed)
                tokens = generate_text(target, prompt, plain, None, grammar).tokens
                repeats += len(set(items(tokens))) < len(items(tokens))
    assert completed >= 12 and repeats >= 3


ANIMALS = ["cat", "dog", "cow", "hen", "owl", "bee", "ant", "catfish"]


@pytest.mark.parametrize("text, refused", [
    ('["cat", "dog", "cat"', True),
    ('["cat", "dog", "catf', False),  # on its way to "catfish"
    ('["catfish", "cat"]', False),
    ('["cat", "catfish", "cat', True),  # only "cat" and "catfish" begin so: both held
    ('["dog", "c', False),
    ('["cow", "co', True),
])
def test_an_enums_item_is_refused_as_soon_as_it_can_only_repeat_one(text: str, refused: bool) -> None:
    """Over more values than are spelled out (grammar.UNIQUE_VALUES_SPELLED_OUT), an enum's items are held by
    the rule: an item must begin a value not yet held, so a value all of whose ways on are held is no dead end."""
    schema = {"type": "array", "items": {"enum": ANIMALS}, "uniqueItems": True}
    for chunk in (0, 1, 4):
        assert repeats_an_item(schema, text, chunk) is refused, (text, chunk)


def test_an_enums_items_are_held_without_a_warning(tiny_pair: tuple[Path, Path]) -> None:
    schema = {"type": "array", "items": {"type": "string", "enum": ANIMALS}, "uniqueItems": True, "minItems": 1}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()
    with Model(tiny_pair[0]) as model:
        state = TokenGrammar.start(model, compiled.grammar)
        state.consume(tokens(model, '["cow","owl","'))
        allowed = {model.token_bytes(token) for token in state.allowed()}
        assert allowed == {b"a", b"b", b"c", b"d", b"h"}  # not "o": cow and owl are held
        state.consume(tokens(model, "c"))
        assert {model.token_bytes(token) for token in state.allowed()} == {b"a"}  # cat or catfish, not cow


class WordVocabulary:
    """A vocabulary of a few multi-byte tokens, as `UniqueItems` reads one."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return self.pieces[token]

    def tokens_holding(self, byte: int) -> np.ndarray:
        return np.array([i for i, piece in enumerate(self.pieces) if byte in piece], dtype=np.int64)

    def tokens_spelling(self, text: bytes) -> list[int]:
        return [i for i, piece in enumerate(self.pieces) if piece == text]

    def token_lengths(self) -> np.ndarray:
        return np.array([len(piece) for piece in self.pieces], dtype=np.int64)


def test_a_token_that_opens_the_array_and_repeats_an_item_in_it_is_refused() -> None:
    from localspec.engine.unique_items import UniqueItems

    vocabulary = WordVocabulary([b'{"tags":', b'["a","a"', b'["a","b"', b'"', b"x"])
    rule = UniqueItems.for_grammar(json.dumps({"grammars": [{"json_schema": RECIPE}]}), vocabulary)
    assert rule is not None and rule.consume([0])
    assert rule.allowed(np.arange(5)).tolist() == [0, 2, 3, 4]


def test_near_its_max_length_only_an_item_that_could_become_a_held_one_checks_every_token() -> None:
    schema = {"type": "array", "items": {"type": "string", "maxLength": 5}, "uniqueItems": True}
    cursor = JsonCursor.start(schema).feed('["abcde", "abc'.encode())
    assert cursor is not None and cursor.room_before_a_forced_repeat() == 2
    assert cursor.feed(b"de") is None and cursor.feed(b"dx") is not None
    assert JsonCursor.start(schema).feed('["abcde", "abx'.encode()).room_before_a_forced_repeat() is None
    inside = JsonCursor.start(schema).feed('["abcdé", "abcd'.encode() + "é".encode()[:1])  # inside a character
    assert inside.room_before_a_forced_repeat() == 1 and inside.feed("é".encode()[1:]) is None


INTEGERS = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
BOUNDED_INTEGERS = bounded_values(INTEGERS)  # as the grammar holds them: up to 15 digits
FIFTEEN = "1" * 15


@pytest.mark.parametrize("text, refused", [
    ("[1, 2, 1]", True),
    ("[1, 2, 10]", False),
    ("[12,1", False),  # on its way to 13 or 10
    ("[5, -5, 0, -0", True),  # -0 is 0, and it can take no more digits
    ("[0, 0", True),
    ("[7,\n  7\n]", True),  # ended by whitespace
    (f"[{FIFTEEN}, {FIFTEEN[:-1]}", False),
    (f"[{FIFTEEN}, {FIFTEEN}", True),  # as many digits as the bounds take
    # Every way on from 14 ones is held: itself, and each of its ten 15-digit numbers.
    ("[" + ", ".join([FIFTEEN[:-1] + str(d) for d in range(10)] + [FIFTEEN[:-1]]) + ", " + FIFTEEN[:-1], True),
    ("[" + ", ".join([FIFTEEN[:-1] + str(d) for d in range(9)] + [FIFTEEN[:-1]]) + ", " + FIFTEEN[:-1], False),
])
def test_an_integer_item_is_refused_where_it_repeats_one_or_can_only_end_as_one(text: str, refused: bool) -> None:
    for chunk in (0, 1, 3):
        assert repeats_an_item(BOUNDED_INTEGERS, text, chunk) is refused, (text, chunk)


@pytest.mark.parametrize("items, held", [
    ({"type": "integer"}, True),  # bounded as localspec bounds open numbers
    ({"type": "integer", "minimum": -(10**15 - 1), "exclusiveMaximum": 1e15}, True),
    ({"type": "integer", "maximum": 10**15}, True),
    ({"type": "integer", "minimum": 1, "maximum": 49}, True),
    ({"type": "integer", "exclusiveMinimum": 0.5, "maximum": 2.5}, True),
    ({"type": "integer", "multipleOf": 2}, False),
    ({"type": "integer", "minimum": 2**53, "maximum": 2**53 + 1}, False),  # llguidance rounds it: 2**53 alone
    ({"type": "number"}, True),  # (numbers left open, as localspec bounds them: see below)
    ({"type": "number", "minimum": 0}, False),  # (a bound of the schema's own: not held)
])
def test_numbers_are_held_between_any_bounds_and_fractions_where_left_open(items: dict, held: bool) -> None:
    fitted = bounded_values({"type": "array", "items": items, "uniqueItems": True})
    arrays = survey_held(fitted)
    assert (len(arrays.held), arrays.not_held) == ((1, 0) if held else (0, 1))
    unbounded = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    assert survey_held(unbounded).held == [unbounded]  # (as a schema localspec's bounds do not fit leaves it)


def integers(**bounds: float) -> dict:
    """A schema of unique integers between `bounds` (minimum=1, maximum=49, ...)."""
    return {"type": "array", "items": {"type": "integer", **bounds}, "uniqueItems": True}


@pytest.mark.parametrize("schema, text, refused", [
    (integers(minimum=1, maximum=49), "[7, 7", True),  # 70 and on are past 49: `7` could only end as 7
    (integers(minimum=1, maximum=49), "[7, 4", False),  # 4, or 40 to 49
    (integers(minimum=1, maximum=49), "[4, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 4", True),
    (integers(minimum=1, maximum=49), "[4, 40, 41, 42, 43, 44, 45, 46, 47, 48, 4", False),  # 49 is left
    (integers(minimum=1, maximum=3), "[1, 2, 3,", True),  # an item must follow: each is held
    (integers(minimum=1, maximum=3), "[1, 2, 3 ]", False),
    (integers(exclusiveMinimum=0.5, maximum=2.5), "[2, 1,", True),  # 1 and 2
    (integers(minimum=-20, maximum=-3), "[-20, -2", True),  # -2 is past -3, and -20 is held
    (integers(minimum=-20, maximum=-3), "[-5, -5", True),
    (integers(minimum=-20, maximum=-3), "[-5, -1", False),  # -10 to -19
    (integers(minimum=-20, maximum=-3), "[" + ", ".join(str(-n) for n in range(10, 21)) + ", -", False),  # -3 to -9
    (integers(minimum=-20, maximum=20), "[" + ", ".join(str(n) for n in range(-20, 21) if n != 7) + ", -", True),
    (integers(minimum=0, maximum=10**15), "[1, 1", False),  # 10 and on
    (integers(), "[" + ", ".join(str(n) for n in range(100)) + ", 9", False),  # no bounds: 100 and on
    (integers(minimum=1, maximum=0), "[ ]", False),  # no integer at all: the array can still be empty
    (integers(exclusiveMinimum=1, exclusiveMaximum=2), "[", False),
    (integers(), "[" + "1" * 5000, False),  # (past the digits Python turns into an int: no error)
    (integers(maximum=10), "[" + "1" * 5000, True),
])
def test_an_integer_item_is_refused_where_its_bounds_leave_it_only_held_ones(schema: dict, text: str,
                                                                            refused: bool) -> None:
    for chunk in (0, 1, 3):
        assert repeats_an_item(schema, text, chunk) is refused, (text, chunk)


SIZES = {"type": "array", "items": {"type": "integer", "enum": [1, 5, 10, 20, 50, 100]}, "uniqueItems": True}


@pytest.mark.parametrize("text, refused", [
    ("[10, 5, 10]", True),
    ("[10, 1", False),  # (1 itself, or 100)
    ("[1, 10, 100, 1", True),  # (1, 10 and 100 held: a `1` can only end as one of them)
    ("[1, 10, 100, 5, 50, 20", False),
    ("[1, 10, 100, 5, 50, 20,", True),  # (an item must follow: each is held)
    ("[5, 50, 5", True),
])
def test_an_enum_of_integers_is_held_as_a_range_is(text: str, refused: bool) -> None:
    """Six sizes: more than the orderings spelled out in the grammar (grammar.py), held by the rule instead."""
    for chunk in (0, 1, 3):
        assert repeats_an_item(SIZES, text, chunk) is refused, (text, chunk)
    assert compile_format(OutputFormat("json_schema", json.dumps(SIZES), "s.json")).warnings == ()
    assert assert_the_mask_is_what_feeding_refuses(SIZES, "[1, 10, 100, ", [b"1", b"10", b"100", b"5", b"0", b"00",
                                                                           b",", b"]", b" ", b"1,", b"5]"]) > 0


def test_a_lone_minus_before_an_enums_zero_is_refused_where_every_negative_is_held() -> None:
    """An enum writes 0 as `0`, never `-0`: a `-` could only end as a held item (was let through: a dead end)."""
    schema = {"type": "array", "items": {"type": "integer", "enum": [-1, 0, 1, 2, 3, 4]}, "uniqueItems": True}
    assert repeats_an_item(schema, "[-1, -")
    assert not repeats_an_item(schema, "[-1, 0")


def test_an_array_under_a_root_anyof_is_held() -> None:
    schema = {"anyOf": [TAGS, {"type": "string"}]}
    assert compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings == ()


def test_the_grammar_refuses_what_ends_a_repeated_integer(tiny_pair: tuple[Path, Path]) -> None:
    grammar = compile_format(OutputFormat("json_schema", json.dumps(INTEGERS), "s.json")).grammar
    with Model(tiny_pair[0]) as model:
        state = TokenGrammar.start(model, grammar)
        state.consume(tokens(model, "[1,2,1"))
        allowed = {model.token_bytes(token) for token in state.allowed()}
        assert b"0" in allowed and not {b",", b"]", b" "} & allowed  # 10-19 go on; `,` `]` or a space would end 1


def test_the_grammar_refuses_an_item_its_bounds_leave_only_as_a_repeat(tiny_pair: tuple[Path, Path]) -> None:
    """Under `maximum: 49` a second `7` could only end as 7 (70 is too much): refused before it is written; and
    once 1 to 3 are all listed, the comma that would ask for a fourth."""
    with Model(tiny_pair[0]) as model:
        lottery = compile_format(OutputFormat("json_schema", json.dumps(integers(minimum=1, maximum=49))))
        assert lottery.warnings == ()
        state = TokenGrammar.start(model, lottery.grammar)
        state.consume(tokens(model, "[7,"))
        allowed = {model.token_bytes(token) for token in state.allowed()}
        assert b"4" in allowed and b"7" not in allowed
        state = TokenGrammar.start(model, compile_format(OutputFormat("json_schema", json.dumps(
            integers(minimum=1, maximum=3)))).grammar)
        state.consume(tokens(model, "[3,1,2"))
        assert {model.token_bytes(token) for token in state.allowed()} & {b",", b"]"} == {b"]"}


TAG_TOOL = {"type": "function", "function": {"name": "tag_post", "parameters": {
    "type": "object", "properties": {"tags": TAGS}, "required": ["tags"]}}}
NUMBER_TOOL = {"type": "function", "function": {"name": "sums", "parameters": {
    "type": "object", "properties": {"n": NUMBERS}}}}


@pytest.mark.parametrize("syntax", ["hermes", "llama3", "json"])
def test_a_tools_arguments_are_held_in_every_call(syntax: str) -> None:
    """Each call's arguments are followed from its head on; repeats between calls are not repeats."""
    from localspec.app.tool_calls import ToolSyntax, tool_grammar, tool_request
    from localspec.engine.calls_cursor import CallsCursor, call_schemas

    calls = call_schemas(tool_grammar(tool_request([TAG_TOOL, NUMBER_TOOL], "auto"), ToolSyntax(syntax)))
    assert [value.head.last for value in calls] == [
        f'{{"name": "{name}", "{"parameters" if syntax == "llama3" else "arguments"}": '.encode()
        for name in ("tag_post", "sums")]
    first = calls[0].head.last + b'{"tags": ["a", "b"]}}'
    cursor = CallsCursor.start(calls).feed(b'<tool_call>\n' + first + b'\n</tool_call>\n<tool_call>\n'
                                           + calls[0].head.last)
    assert cursor is not None and cursor.feed(b'{"tags": ["b", "a"]}') is not None
    assert cursor.feed(b'{"tags": ["b", "b"') is None
    assert CallsCursor.start(calls).feed(calls[1].head.last + b'{"n": [1, 1]}') is not None  # numbers: not held


TEMPLATES = Path(__file__).parent / "data"


@pytest.mark.parametrize("template, between", [
    ("deepseek-v3.1", b""),  # a frame: the name, then its separator token before the JSON arguments
    ("kimi-k2-instruct", b"3"),  # the name, the call's index, then the arguments' marker
    ("mistral-small-3.2-instruct-2506", b"[CALL_ID]a1b2c3d4e"),  # the name, a call id, then [ARGS]
    ("mistral-small-3.2-instruct-2506", b""),  # (the id is optional)
    ("qwen3-coder", b""),  # tagged parameters: an array parameter is JSON inside its tag
])
def test_a_tools_arguments_are_held_in_every_call_syntax_that_writes_them_as_json(template: str,
                                                                                 between: bytes) -> None:
    from localspec.app.tool_calls import prepare_tools, tool_request
    from localspec.engine.calls_cursor import CallsCursor, call_schemas

    other = {"type": "function", "function": {"name": "post", "parameters": {  # (its tags may repeat)
        "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["tags"]}}}
    tools = [TAG_TOOL, other] if template != "qwen3-coder" else [TAG_TOOL]  # (tags: one parameter name, one schema)
    setup = prepare_tools(tool_request(tools, "auto"), (TEMPLATES / f"{template}.jinja").read_text(), lambda text: None)
    assert not [warning for warning in setup.warnings if "uniqueItems" in warning], setup.warnings
    values = call_schemas(setup.grammar)
    head = values[0].head
    assert head is not None and [value.tool_index for value in values] == list(range(len(tools)))
    written = (head.first + between if head.first else b"") + head.last
    cursor = CallsCursor.start(values).feed(b"Sure. " + written)
    tags = b'["a", "b' if template == "qwen3-coder" else b'{"tags": ["a", "b'
    assert cursor is not None and cursor.feed(tags + b'"') is not None
    assert cursor.feed(tags.replace(b"b", b"a") + b'"') is None
    # The other tool's name ends as this one's does (`post`, `tag_post`): each schema follows its own head.
    if len(tools) > 1:
        other_head = values[1].head
        assert other_head is not None
        other_call = (other_head.first + between if other_head.first else b"") + other_head.last
        assert CallsCursor.start(values).feed(b"Sure. " + other_call + b'{"tags": ["a", "a"') is not None


@pytest.mark.parametrize("template, opening", [
    ("kimi-k2-instruct", "<|tool_calls_section_begin|><|tool_call_begin|>functions.{}:0<|tool_call_argument_begin|>"),
    ("mistral-small-3.2-instruct-2506", "[TOOL_CALLS]{}[CALL_ID]a1b2c3d4e[ARGS]"),
])
def test_a_repeated_tag_is_refused_in_the_call_of_the_tool_that_holds_them_unique(tiny_pair: tuple[Path, Path],
                                                                                  template: str, opening: str) -> None:
    from localspec.app.tool_calls import prepare_tools, tool_request

    other = {"type": "function", "function": {"name": "post", "parameters": {  # (its tags may repeat)
        "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["tags"]}}}
    setup = prepare_tools(tool_request([TAG_TOOL, other], "required"), (TEMPLATES / f"{template}.jinja").read_text(),
                          lambda text: None)
    with Model(tiny_pair[0]) as model:
        byte_token = {model.token_bytes(token): token for token in range(model.n_vocab)}
        for tool, repeat_refused in (("tag_post", True), ("post", False)):
            state = TokenGrammar.start(model, setup.grammar)
            written = [byte_token[bytes([byte])] for byte in (opening.format(tool) + '{"tags": ["cat", "cat').encode()]
            assert state.validate(written) == len(written)
            state.consume(written)
            assert (byte_token[b'"'] not in state.allowed()) == repeat_refused


def test_a_tagged_parameter_named_alike_in_two_tools_with_other_schemas_is_warned_of() -> None:
    """Two tools' `tags` tags open alike, so what follows cannot be told one tool's or the other's: not held, said."""
    from localspec.app.tool_calls import prepare_tools, tool_request

    other = {"type": "function", "function": {"name": "post", "parameters": {
        "type": "object", "properties": {"tags": {**TAGS, "maxItems": 3}}, "required": ["tags"]}}}
    setup = prepare_tools(tool_request([TAG_TOOL, other], "auto"), (TEMPLATES / "qwen3-coder.jinja").read_text(),
                          lambda text: None)
    unenforced = [warning.split(":")[0] for warning in setup.warnings if "not enforced in this template" in warning]
    assert sorted(unenforced) == ["tools[0].function.parameters", "tools[1].function.parameters"]


def test_a_tools_repeated_item_is_refused_in_the_grammar_and_warned_of_only_where_not_held(
        tiny_pair: tuple[Path, Path]) -> None:
    from localspec.app.tool_calls import ToolSyntax, prepare_tools, tool_grammar, tool_request

    request = tool_request([TAG_TOOL, NUMBER_TOOL], "required")
    assert [warning.split(":")[0] for warning in prepare_tools(request, None, lambda text: False).warnings] == [
        "tools[1].function.parameters"]
    grammar = compile_format(OutputFormat("grammar", tool_grammar(request, ToolSyntax.HERMES), "tools")).grammar
    with Model(tiny_pair[0]) as model:
        state = TokenGrammar.start(model, grammar)
        state.consume(tokens(model, '<tool_call>\n{"name": "tag_post", "arguments": {"tags": ["cat", "cat'))
        assert tokens(model, '"')[0] not in state.allowed()


def test_a_lark_grammar_of_one_json_value_is_held_as_its_warning_says(tiny_pair: tuple[Path, Path]) -> None:
    """`--grammar` with `start: %json {...}` (lenient, else llguidance refuses uniqueItems): where the warning is
    dropped, the rule holds the output too."""
    lenient = {**TAGS, "x-guidance": {"lenient": True}}
    compiled = compile_format(OutputFormat("grammar", f"start: %json {json.dumps(lenient)}\n", "g.lark"))
    assert compiled.warnings == ()
    with Model(tiny_pair[0]) as model:
        state = TokenGrammar.start(model, compiled.grammar)
        state.consume(tokens(model, '["cat", "cat'))
        assert tokens(model, '"')[0] not in state.allowed()


FREE_OBJECT = {"type": "object"}


@pytest.mark.parametrize("schema, text, repeats", [
    (FREE_OBJECT, '{"a": 1, "b": 2, "a"', True),
    (FREE_OBJECT, '{"a": 1, "b": 2, "ab": 3}', False),
    (FREE_OBJECT, '{"ab": 1, "a\\u0062"', True),  # one key, written two ways
    (FREE_OBJECT, '{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}', False),  # keys of different objects
    (FREE_OBJECT, '{"a": {"x": 1, "x"', True),  # a nested object, its values left open
    (FREE_OBJECT, '{"a": [{"x": 1, "x"', True),
    (FREE_OBJECT, '{"a": "b", "b": "a", "c": ["a", "a"]}', False),  # values and items are not keys
    ({"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {}}}},
     '{"a": {"x": 1, "y": 2, "y"', True),  # a listed key beside open ones
    # keys by pattern in an object that takes other keys too (was: not held)
    ({"type": "object", "patternProperties": {"^x": {}}}, '{"x": 1, "y": 2, "x"', True),
    ({"type": "object", "patternProperties": {"^[a-z]{2}$": {}}, "additionalProperties": {"type": "integer"}},
     '{"ab": 1, "abc": 2, "ab"', True),
    ({"type": "object", "patternProperties": {"^[a-z]{2}$": {}}, "additionalProperties": {"type": "integer"}},
     '{"ab": 1, "abc": 2, "abd"', False),
    # ... but not where no other value can be written: a repeated key would have no way on (the model stuck)
    ({"type": "object", "patternProperties": {"^x$": {"type": "integer"}}, "additionalProperties": {"enum": []}},
     '{"x": 1, "x"', False),
    ({"type": "object", "patternProperties": {"^x$": {}}, "additionalProperties": {"type": "integer", "minimum": 5,
      "maximum": 3}}, '{"x": 1, "x"', False),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": False}, '{"a": 1, "a": 2}', False),
])
def test_the_cursor_finds_a_repeated_key_where_an_object_takes_keys_it_does_not_list(schema: dict, text: str,
                                                                                     repeats: bool) -> None:
    for chunk in (0, 1, 2, 3):
        assert repeats_an_item(schema, text, chunk) is repeats, (text, chunk)


@pytest.mark.parametrize("schema, other_keys", [
    (FREE_OBJECT, True),
    ({}, True),
    ({"type": "array", "items": {"type": "string"}}, False),
    ({"type": "array"}, True),  # items left open: objects among them
    (bounded_values(RECIPE), False),  # (closed: it lists its properties)
    ({"type": "object", "properties": {"a": FREE_OBJECT}, "additionalProperties": False}, True),
    ({"type": "object", "patternProperties": {"^x": {"type": "string"}}, "additionalProperties": False}, False),
    ({"type": "object", "patternProperties": {"^x": {"type": "string"}}}, True),  # (and any other key)
    ({"type": "object", "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": {"type": "integer"}},
     False),  # (names a grammar might run out of)
])
def test_the_survey_says_whether_an_object_takes_keys_it_does_not_list(schema: dict, other_keys: bool) -> None:
    assert survey_held(schema).other_keys is other_keys


def test_the_tokens_that_close_a_repeated_key_are_refused_wherever_they_begin() -> None:
    from localspec.engine.unique_items import UniqueItems

    pieces = [b'{"a":1', b',"a"', b',"b"', b'"', b"a", b', "', b'{"a":1,"a"', b'1,"a":', b'x"]']
    rule = UniqueItems.for_grammar(json.dumps({"grammars": [{"json_schema": FREE_OBJECT}]}), WordVocabulary(pieces))
    assert rule is not None
    assert rule.allowed(np.arange(len(pieces))).tolist() == [0, 1, 2, 3, 4, 5, 7, 8]  # a new object: anything
    assert rule.consume([0])
    assert rule.allowed(np.arange(len(pieces))).tolist() == [0, 2, 3, 4, 5, 6, 8]  # `,"a"` and `1,"a":` repeat "a"
    assert rule.consume([5, 4])  # `{"a":1, "a`: the key being written
    assert 3 not in rule.allowed(np.arange(len(pieces))).tolist()


def test_the_grammar_refuses_a_repeated_key_under_format_json(tiny_pair: tuple[Path, Path]) -> None:
    """`--format json` takes any keys: the one that closes a key equal to an earlier one of its object is refused."""
    grammar = compile_format(OutputFormat("json", "", "--format")).grammar
    with Model(tiny_pair[0]) as model:
        quote = tokens(model, '"')[0]
        state = TokenGrammar.start(model, grammar)
        state.consume(tokens(model, '{"cat": 1, "dog": {"cat": 2}, "ca'))
        assert quote in state.allowed()  # (allowed where no key is repeated)
        state.consume(tokens(model, "t"))
        assert quote not in state.allowed() and len(state.allowed()) > 1  # "cat" again: the key must go on
        draft = tokens(model, 's": 3, "cat": 4}')
        assert model.detokenize(draft[:state.validate(draft)]) == 's": 3, "cat'


def test_the_grammar_refuses_a_repeated_key_by_pattern_where_other_keys_are_taken(tiny_pair: tuple[Path, Path]) -> None:
    """A key no pattern takes any more is another key: the one that would close a repeat goes on as one."""
    schema = {"type": "object", "patternProperties": {"^[a-z]{3}$": {"type": "integer"}},
              "additionalProperties": {"type": "string"}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar
    with Model(tiny_pair[0]) as model:
        quote = tokens(model, '"')[0]
        state = TokenGrammar.start(model, grammar)
        state.consume(tokens(model, '{"cat": 1, "ca'))
        assert quote in state.allowed()  # ("cab" would be new)
        state.consume(tokens(model, "t"))
        assert quote not in state.allowed() and len(state.allowed()) > 1  # "cat" again: it goes on, as another key
        state.consume(tokens(model, 's": "'))


def test_a_tools_arguments_hold_their_keys() -> None:
    from localspec.app.tool_calls import ToolSyntax, tool_grammar, tool_request
    from localspec.engine.calls_cursor import CallsCursor, call_schemas

    open_tool = {"type": "function", "function": {"name": "note", "parameters": {
        "type": "object", "properties": {"meta": FREE_OBJECT}, "required": ["meta"]}}}
    calls = call_schemas(tool_grammar(tool_request([open_tool], "required"), ToolSyntax.HERMES))
    cursor = CallsCursor.start(calls).feed(calls[0].head.last + b'{"meta": {"k": 1, "k')
    assert cursor is not None and cursor.in_held_key and cursor.feed(b'"') is None and cursor.feed(b'2"') is not None


@pytest.mark.parametrize("schema", [integers(minimum=1, maximum=499), integers(minimum=-50, maximum=50), integers()])
@pytest.mark.slow
def test_a_token_of_digits_is_judged_as_feeding_it_would(schema: dict) -> None:
    """Tokens of digits alone (many in vocabularies that write numbers in chunks) skip the whole feed: the same
    answer, where an item is written, comes next, or neither."""
    held = ", ".join(["4", "40", "41", "42", "43", "44", "45", "46", "47", "48", "49"])
    pieces = [str(n).encode() for n in range(1000)] + [b" " + str(n).encode() for n in range(100)] + [b"007", b"\n 4"]
    states = refused = 0
    for text in ["[", "[4", "[" + held + ", ", "[" + held + ", 4", "[" + held + ", -", "[1, -5", "[1]", "[1 ", "[0, "]:
        cursor = JsonCursor.start(schema).feed(text.encode())
        if cursor is None:  # (`-` where the range has no integer below zero)
            continue
        states += 1
        judged = [cursor.refuses(piece) for piece in pieces]
        assert judged == [cursor.feed(piece) is None for piece in pieces], text
        refused += sum(judged)
    assert states >= 6 and refused > 0


CLOSING_PIECES = [b'"', b'",', b'", ', b'"]', b'"}', b'":', b'": ', b'":"', b'","', b'"]["', b'b"', b'ab"', b'b",',
                  b'\\u0062"', b'x"', b'\xc3\xa9"', b'\xa9"', b' "', b'"a"', b'", "b"]', b'": {"k": 1, "k"', b'"]}',
                  b'a', b'b', b'\\"', b'],"k"', b'\n"', b'\x01"', b'":1},', b'":1},2,']


@pytest.mark.parametrize("schema, text", [
    (RECIPE, '{"tags": ["ab", "a'),
    (RECIPE, '{"tags": ["ab", "\xe9", "'),
    (RECIPE, '{"tags": ["ab", "a\\u0063", "a\\'),
    ({"type": "array", "items": {"enum": ["ab", "b", "a", "é", "x", "y"], "type": "string"}, "uniqueItems": True},
     '["ab", "x", "y", "é", "a", "'),
    (FREE_OBJECT, '{"ab": 1, "k": {"k": 2}, "a'),
    (FREE_OBJECT, '{"ab": 1, "é": 2, "'),
    (FREE_OBJECT, '{"ab": "a'),  # (a value: never compared)
    ({"type": "object", "properties": {"a": {}, "ab": {}}, "additionalProperties": False}, '{"a": 1, "a'),
    (TAGS, '["a\\n", "a'),  # (an escaped newline: a raw one is no JSON string)
    (FREE_OBJECT, '{"a\\u0001": 1, "a'),
    (integers(minimum=1, maximum=3), '[1, 2, 3, {"k'),  # (an object where the grammar allows none)
])
def test_a_closing_quote_is_judged_as_feeding_it_would(schema: dict, text: str) -> None:
    """Tokens that close a key or an item skip the whole feed where nothing after their quote can repeat more:
    the same answer as feeding them (a multi-byte character cut in two, escapes, a comma after an enum's last
    item, a second key in the same token)."""
    cursor = JsonCursor.start(schema).feed(text.encode())
    assert cursor is not None
    judged = [cursor.refuses(piece) for piece in CLOSING_PIECES]
    assert judged == [cursor.feed(piece) is None for piece in CLOSING_PIECES]


def test_a_tool_calls_pieces_are_judged_as_feeding_them_would() -> None:
    """Inside a call's arguments the quick answers stand in for the calls cursor's own feed (which reads a piece
    byte by byte, and may go on to the next call's head)."""
    from localspec.app.tool_calls import ToolSyntax, tool_grammar, tool_request
    from localspec.engine.calls_cursor import CallsCursor, call_schemas

    calls = call_schemas(tool_grammar(tool_request([TAG_TOOL, NUMBER_TOOL], "required"), ToolSyntax.HERMES))
    head = calls[0].head.last
    pieces = [*CLOSING_PIECES, b"1", b" 12", b'}}\n</tool_call>\n<tool_call>\n' + head + b'{"tags": ["a", "a"']
    for text in [head + b'{"tags": ["ab", "a', head + b'{"tags": ["a"]', b"<tool_call>\n"]:
        cursor = CallsCursor.start(calls).feed(text)
        assert cursor is not None
        assert [cursor.refuses(piece) for piece in pieces] == [cursor.feed(piece) is None for piece in pieces], text


FRACTIONS = bounded_values({"type": "array", "items": {"type": "number"}, "uniqueItems": True})  # (9 decimals at most)
NINE = [f"1.12345678{d}" for d in range(10)]


@pytest.mark.parametrize("text, refused", [
    ("[1.5, 1.50]", True),  # one number, as JSON Schema compares them
    ("[1.5, 1.50", False),  # on its way to 1.501
    ("[1.5, 1.5", False),
    ("[1, 1.0,", True),
    ("[0, -0.0 ", True),
    ("[2.5, 2", False),  # 2, 2.5x, 25, ...
    ("[1.123456789, 1.123456789", True),  # nine decimals: no more can follow
    ("[" + ", ".join(NINE) + ", 1.12345678", True),  # its ten ways on (itself is 1.123456780) all held
    ("[" + ", ".join(NINE[1:]) + ", 1.12345678", False),  # 1.12345678 itself is new
    ("[" + ", ".join("-" + n for n in NINE) + ", -1.12345678", True),
    ("[-1.123456781, -1.12345678", False),
    # llguidance ends no negative number above -1 on a 0: -0.50000000 has nine ways on, not ten.
    ("[" + ", ".join(f"-0.50000000{d}" for d in range(1, 10)) + ", -0.50000000", True),
    ("[" + ", ".join(f"-0.50000000{d}" for d in range(2, 10)) + ", -0.50000000", False),
    ("[" + ", ".join(f"-0.00000000{d}" for d in range(1, 10)) + ", -0.00000000", True),
])
def test_a_fraction_item_is_refused_where_it_repeats_one_or_can_only_end_as_one(text: str, refused: bool) -> None:
    for chunk in (0, 1, 3):
        assert repeats_an_item(FRACTIONS, text, chunk) is refused, (text, chunk)


def test_a_number_longer_than_the_grammar_allows_is_no_error() -> None:
    from decimal import Decimal

    from localspec.engine.json_cursor import _every_fraction_end_held

    held = frozenset(Decimal(n) for n in range(10))
    assert _every_fraction_end_held(b"1" * 1_200_000 + b".12345678", held) is False  # (Decimal would overflow)


def test_llguidance_ends_no_negative_number_above_minus_one_on_a_zero() -> None:
    """What the fraction rule counts on (see `_every_fraction_end_held`): where this changes, so must the rule."""
    from llguidance import LLMatcher

    from localspec.engine.byte_tokenizer import byte_tokenizer

    schema = {"type": "array", "items": {"type": "number"}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar

    def takes(text: str) -> bool:
        return LLMatcher(byte_tokenizer(), grammar).validate_tokens(list(text.encode())) == len(text)

    assert not any(takes(f"[{number}]") for number in ("-0.50", "-0.0", "-0.10", "-0"))
    assert all(takes(f"[{number}]") for number in ("-0.5", "-1.50", "0.50", "-12.50", "0.000000000", "-0.000000001"))
    assert not takes("[1.1234567891") and not takes("[1e5") and takes("[999999999999999.999999999]")


def test_the_grammar_holds_open_numbers_unique_without_a_warning(tiny_pair: tuple[Path, Path]) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps({"type": "array", "items": {"type": "number"},
                                                                       "uniqueItems": True}), "s.json"))
    assert compiled.warnings == ()
    with Model(tiny_pair[0]) as model:
        state = TokenGrammar.start(model, compiled.grammar)
        state.consume(tokens(model, "[1.5,1.50"))
        allowed = {model.token_bytes(token) for token in state.allowed()}
        assert b"1" in allowed and not {b",", b"]"} & allowed  # 1.501 goes on; ending it would repeat 1.5


SUSPECT_PIECES = [b'"', b'",', b'", "', b'"]', b'"}', b'":', b'": "', b'","', b'"a"', b'"ab"', b'a"', b'b"', b'ab', b'a',
                  b',"a"', b', "a"]', b'["a","a"', b'[1,1', b'1', b'2', b'12', b' 1', b',', b', ', b']', b'}', b' ',
                  b'{"k": 1, "k"', b'1,"a":', b'"]["', b'\\u0061"', b'\\"', b'"k": [1, 1', b'{', b'[', b'"ab', b', "ab']


@pytest.mark.parametrize("schema, text", [
    (RECIPE, '{"name": "x", "tags": ["a", "ab"'),
    (RECIPE, '{"name": "x", "tags": ["a", '),
    (RECIPE, '{"name": "x", "tags": ["a", "a'),
    (RECIPE, '{"name": "x", "tags": '),
    (FREE_OBJECT, '{"a": 1, "k": [1, 2], '),
    (FREE_OBJECT, '{"a": 1, "k'),
    (FREE_OBJECT, '{"a": "a'),
    (FREE_OBJECT, '{"a": {"k": 1, "a": 2}, "ab": 3'),
    (integers(minimum=1, maximum=12), "[1, 2, "),
    (integers(minimum=1, maximum=12), "[1, 12, 1"),
    ({"type": "array", "items": {"type": "string", "maxLength": 2}, "uniqueItems": True}, '["ab", "a'),
    ({"type": "array", "items": {"type": "string", "maxLength": 2}, "uniqueItems": True}, '["ab"'),
    ({"type": "array", "items": {"type": "string", "maxLength": 2}, "uniqueItems": True}, '["ab", '),
    ({"type": "array", "items": {"enum": ["a", "ab", "b", "c", "d", "e"]}, "uniqueItems": True}, '["a", "b", '),
])
def test_the_mask_drops_exactly_the_tokens_that_feeding_would_refuse(schema: dict, text: str) -> None:
    """The rule checks only the tokens that can make a repeat where the text is (`_Suspects`): the same tokens as
    feeding every one of them would refuse."""
    assert_the_mask_is_what_feeding_refuses(schema, text, SUSPECT_PIECES)


def assert_the_mask_is_what_feeding_refuses(schema: dict, text: str, pieces: list[bytes]) -> int:
    """After `text`, the rule's mask over `pieces` drops exactly the pieces feeding refuses; how many it drops."""
    from localspec.engine.unique_items import UniqueItems

    vocabulary = WordVocabulary([*pieces, text.encode()])  # (the text so far as one token)
    rule = UniqueItems.for_grammar(json.dumps({"grammars": [{"json_schema": schema}]}), vocabulary)
    assert rule is not None and rule.consume([len(pieces)])
    cursor = JsonCursor.start(schema).feed(text.encode())
    everything = np.arange(len(pieces))
    kept = [token for token in everything.tolist() if cursor.feed(pieces[token]) is not None]
    assert rule.allowed(everything).tolist() == kept
    return len(pieces) - len(kept)


def unique(items: dict, least: int) -> dict:
    """An array of at least `least` distinct `items`."""
    return {"type": "array", "items": items, "uniqueItems": True, "minItems": least}


@pytest.mark.parametrize("schema, refused", [
    (unique({"enum": ["a", "b"]}, 3), True),
    (unique({"enum": ["a", "b", "c", "d", "e", "f"]}, 7), True),
    (unique({"type": "boolean"}, 3), True),
    (unique({"enum": [1, 1.0, 2]}, 3), True),  # (1 and 1.0 are one value)
    (unique({"type": "integer", "minimum": 1, "maximum": 3}, 4), True),
    ({"type": "object", "properties": {"n": unique({"type": "integer", "minimum": 1, "maximum": 3}, 4)},
      "required": ["n"]}, True),
    ({"type": "object", "properties": {"n": unique({"type": "integer", "minimum": 1, "maximum": 3}, 4)}},
     False),  # (not required: a document can leave it out)
    (unique({"type": "integer", "minimum": 1, "maximum": 3}, 3), False),
    (unique({"type": "integer"}, 70), False),
    (unique({"type": "string"}, 70), False),
])
def test_a_unique_array_asking_more_items_than_its_items_take_is_refused_before_generating(schema: dict,
                                                                                           refused: bool) -> None:
    """Else generation would write the items there are and stop with an error (an enum spelled out would even be
    left unbounded, with a note that misleads)."""
    fmt = OutputFormat("json_schema", json.dumps(schema), "s.json")
    if refused:
        with pytest.raises(InputError, match=r"^s\.json: no text can satisfy it: uniqueItems asks for \d+ distinct"):
            compile_format(fmt)
    else:
        compile_format(fmt)


# -- records: objects of scalar values, every property required, no other key -----------------------------------

def records(last: dict, most_items: int | None = None, **earlier: dict) -> dict:
    """A unique array of records whose properties are `earlier`, then `last`."""
    record = {"type": "object", "properties": {**earlier, "last": last}, "required": [*earlier, "last"],
              "additionalProperties": False}
    array = {"type": "array", "items": record, "uniqueItems": True}
    return {**array, "maxItems": most_items} if most_items is not None else array


SONGS = {"$defs": {"song": records(last={"type": "integer", "minimum": 30, "maximum": 900}, title={"type": "string"},
                                   artist={"type": "string"})["items"]},
         "type": "object", "properties": {"songs": {"type": "array", "maxItems": 5, "uniqueItems": True,
                                                    "items": {"$ref": "#/$defs/song"}}}}
FLAGS = records(last={"type": "string", "maxLength": 2}, n={"type": "number"}, ok={"type": "boolean"},
                note={"type": ["string", "null"]})


@pytest.mark.parametrize("schema, text, repeats", [
    (SONGS, '{"songs": [{"title": "a", "artist": "b", "last": 100}, {"title": "a", "artist": "b", "last": 100}', True),
    (SONGS, '{"songs": [{"title": "a", "artist": "b", "last": 100}, {"title": "a", "artist": "b", "last": 101}', False),
    (SONGS, '{"songs": [{"title": "a", "artist": "b", "last": 100}, {"title": "a", "artist": "c", "last": 100}', False),
    (SONGS, '{"songs": [{"title": "a", "artist": "b", "last": 100}, {"title": "a", "artist": "b", "last": 10', False),
    (FLAGS, '[{"n": 1.0, "ok": true, "note": null, "last": "ab"}, {"n": 1, "ok": true, "note": null, "last": "ab"}',
     True),  # (1.0 equals 1)
    (FLAGS, '[{"n": 1, "ok": true, "note": null, "last": "ab"}, {"n": 1, "ok": false, "note": null, "last": "ab"}',
     False),
    (FLAGS, '[{"n": 1, "ok": true, "note": "x", "last": "a"}, {"n": 1, "ok": true, "note": null, "last": "a"}', False),
    (FLAGS, '[{"n": 1, "ok": true, "note": "x", "last": "a"}, {"n": 1, "ok": true, "note": "\\u0078", "last": "a"}',
     True),  # (one string, written two ways)
    (FLAGS, '[{"n": 1, "ok": true, "note": "x", "last": "a"}, {"n": 1, "ok": true, "note": "x", "last": "b"}, '
            '{"n": 1, "ok": true, "note": "x", "last": "b"}', True),
])
def test_a_record_equal_to_an_earlier_one_is_refused_however_the_text_is_split(schema: dict, text: str,
                                                                               repeats: bool) -> None:
    for chunk in (0, 1, 2, 3, 7):
        assert repeats_an_item(schema, text, chunk) is repeats, (text, chunk)


def test_a_records_last_string_is_kept_from_reaching_its_max_length_as_a_repeat() -> None:
    cursor = JsonCursor.start(FLAGS).feed(b'[{"n": 1, "ok": true, "note": null, "last": "ab"}, '
                                          b'{"n": 1, "ok": true, "note": null, "last": "a')
    assert cursor is not None and cursor.room_before_a_forced_repeat() == 1
    assert cursor.feed(b"b") is None and cursor.feed(b"c") is not None


# A commit's files: a path, then one of three changes, for up to six files. The same path twice is fine with another
# change; where all three are held for a path, its closing quote is refused (a free string goes on: "ab").
FILES = records(last={"enum": ["added", "modified", "deleted"]}, most_items=6, path={"type": "string", "minLength": 1})
SPENT = '[{"path": "a", "last": "added"}, {"path": "a", "last": "modified"}, {"path": "a", "last": "deleted"}, '


@pytest.mark.parametrize("text, repeats", [
    ('[{"path": "a", "last": "added"}, {"path": "a", "last": "added"', True),
    ('[{"path": "a", "last": "added"}, {"path": "a", "last": "deleted"}, {"path": "b", "last": "added"}', False),
    (SPENT + '{"path": "a"', True),
    (SPENT + '{"path": "ab", "last": "added"}, {"path": "b", "last": "added"}', False),
])
def test_records_whose_last_value_has_few_values_hold_the_free_string_before_it(text: str, repeats: bool) -> None:
    for chunk in (0, 1, 3):
        assert repeats_an_item(FILES, text, chunk) is repeats, (text, chunk)


def test_a_path_at_its_max_length_whose_changes_are_all_held_is_refused_a_token_early() -> None:
    schema = records(last={"enum": ["x"]}, most_items=3, path={"type": "string", "maxLength": 1})
    assert repeats_an_item(schema, '[{"path": "a", "last": "x"}, {"path": "a')
    assert not repeats_an_item(schema, '[{"path": "a", "last": "x"}, {"path": "b", "last": "x"}')


NARROWED = {**records(last={"type": "string"}, kind={"enum": ["a", "b"]}), "maxItems": 3}  # (a case narrows `last`)
NARROWED["items"] = {**NARROWED["items"], "if": {"properties": {"kind": {"const": "a"}}},
                     "then": {"properties": {"last": {"const": "p"}}}}
RECORD_OR_NULL = {**records(last={"type": "string"}), "items": {"anyOf": [records(last={"type": "string"})["items"],
                                                                          {"type": "null"}]}}


@pytest.mark.parametrize("items, held", [
    (records(last={"type": "string"}, a={"type": "integer"}), True),
    (NARROWED, False),  # (held, `[{"kind": "a", "last": "p"}, {"kind": "a", "last": "p` led where nothing could go on)
    ({**NARROWED, "items": {**NARROWED["items"], "if": None, "then": None, "dependentSchemas": {
        "kind": {"properties": {"last": {"enum": ["p"]}}}}}}, False),
    (RECORD_OR_NULL, False),  # (held, [null, null] went through)
    ({**records(last={"type": "string"}), "items": {**records(last={"type": "string"})["items"],
                                                    "type": ["object", "null"]}}, False),
    (records(last={"enum": ["x", "y", "z"]}, most_items=3), True),  # (three values for three items: one is left)
    (records(last={"enum": ["x", "y", "z"]}, most_items=4), False),  # (a fourth record could find them all held)
    (records(last={"enum": ["x", "y", "z"]}), False),
    (FILES, True),  # (few last values, but a free string before them)
    (records(last={"enum": ["x", "y", "z"]}, most_items=6, path={"type": "string", "pattern": "^a"}), False),
    (records(last={"enum": ["x", "y", "z"]}, most_items=6, path={"type": "integer"}), False),
    (records(last={"type": "integer", "minimum": 1, "maximum": 64}, most_items=64), True),
    (records(last={"type": "boolean"}), False),  # (two values: not held)
    (records(last={"type": "string"}, a={"type": "array"}), False),  # (a value that is no scalar)
    ({**records(last={"type": "string"}), "items": {**records(last={"type": "string"})["items"], "required": []}},
     False),  # (a property may be left out)
    ({**records(last={"type": "string"}), "items": {**records(last={"type": "string"})["items"],
                                                    "additionalProperties": True}}, False),
])
def test_records_are_held_where_every_value_is_a_scalar_and_the_last_one_cannot_run_out(items: dict,
                                                                                      held: bool) -> None:
    items = {**items, "items": {key: value for key, value in items["items"].items() if value is not None}}
    from localspec.engine.unique_items import schema_of_grammar

    compiled = compile_format(OutputFormat("json_schema", json.dumps(items), "s.json"))
    survey = survey_held(schema_of_grammar(compiled.grammar))  # (the schema as held to: its conditionals as cases)
    assert (len(survey.held), survey.not_held) == ((1, 0) if held else (0, 1))


RECORD_PIECES = [b'"', b'"}', b'}', b'": -', b'":-', b'-', b'st": -',
                 b'1', b'10', b'100', b'100}', b'0}', b'": 100}', b'": 10', b'": "', b'"a"}',
                 b'a"}', b'b"}', b'"last": 100}', b'"last": "a"}', b', "last": "a"}', b'"}, {"', b' ', b', ',
                 b'", "last": 100}', b'", "last": "a"}', b'a", "last": "a"}',  # (these write a last value whole)
                 b'": "a"', b'a"', b'"a"', b'path": "a",', b' "a",']  # (and these a path whose changes are all held)


@pytest.mark.parametrize("schema, text", [
    (SONGS, '{"songs": [{"title": "a", "artist": "b", "last": 100}, {"title": "a", "artist": "b", "last": 10'),
    (SONGS, '{"songs": [{"title": "a", "artist": "b", "last": 100}, {"title": "a", "artist": "b", "last'),
    (SONGS, '{"songs": [{"title": "a", "artist": "b", "last": 100}, {"title": "a", "artist": "b'),
    (FLAGS, '[{"n": 1, "ok": true, "note": null, "last": "a"}, {"n": 1, "ok": true, "note": null, "last": "'),
    (FLAGS, '[{"n": 1, "ok": true, "note": null, "last": "a"}, {"n": 1, "ok": true, "note": null'),
    (FLAGS, '[{"n": 1, "ok": true, "note": "a", "last": "a"}, {"n": 1, "ok": true, "note": "'),
    (records(last={"type": "integer", "minimum": -1, "maximum": 1}, most_items=3, a={"type": "string"}),
     '[{"a": "x", "last": -1}, {"a": "x", "last": 0}, {"a": "x", "last'),  # (`": -` can only end as -1)
    (records(last={"type": "integer", "minimum": -1, "maximum": 1}, most_items=3, a={"type": "string"}),
     '[{"a": "x", "last": -1}, {"a": "x", "last": 0}, {"a": "x", "la'),
    (FILES, SPENT + '{"path": "'),
    (FILES, SPENT + '{"path'),
    (FILES, SPENT + '{"'),
])
def test_the_mask_drops_exactly_the_tokens_that_feeding_would_refuse_in_a_record(schema: dict, text: str) -> None:
    assert assert_the_mask_is_what_feeding_refuses(schema, text, [*SUSPECT_PIECES, *RECORD_PIECES]) > 0


def test_the_grammar_holds_records_unique_without_a_warning(tiny_pair: tuple[Path, Path]) -> None:
    compiled = compile_format(OutputFormat("json_schema", json.dumps(SONGS), "s.json"))
    assert compiled.warnings == ()  # (was: uniqueItems not enforced)
    with Model(tiny_pair[0]) as model:
        state = TokenGrammar.start(model, compiled.grammar)
        written = '{"songs":[{"title":"a","artist":"b","last":100},{"title":"a","artist":"b","last":10'
        state.consume(tokens(model, written))
        allowed = {model.token_bytes(token) for token in state.allowed()}
        assert b"1" in allowed and b"}" not in allowed  # 101 is new; `}` would end 100 again


def test_a_union_whose_branch_leads_back_to_it_is_not_followed_and_no_error() -> None:
    schema = {"$defs": {"shape": {"anyOf": [{"$ref": "#/$defs/shape"},
                                            {"type": "object", "properties": {"kind": {"const": "circle"}}},
                                            {"type": "object", "properties": {"kind": {"const": "square"}}}]}},
              "$ref": "#/$defs/shape"}
    assert survey_held(schema).held == []
    compile_format(OutputFormat("grammar", "start: %json " + json.dumps(schema) + "\n", "g.lark"))
    bad = {"oneOf": [{"type": "object", "properties": 5}, {"type": "object", "properties": {"t": TAGS}}]}
    with pytest.raises(InputError):
        compile_format(OutputFormat("json_schema", json.dumps(bad), "s.json"))


def test_a_union_with_a_discriminator_and_required_names_beside_it_is_followed() -> None:
    """As Pydantic writes a discriminated union: `discriminator` (OpenAPI's) beside the `oneOf`."""
    schema = {"type": "object", "required": ["kind"], "discriminator": {"propertyName": "kind"},
              "oneOf": [message("a", tags=TAGS), message("b", tags=TAGS, n={"type": "integer"})]}
    assert repeats_an_item(schema, '{"kind": "b", "tags": ["x", "x"')


def test_arrays_are_followed_under_a_maps_one_pattern_and_beside_branches_that_only_ask_for_names() -> None:
    """A docker-compose-like map of services by a pattern, each service needing an image or a build."""
    service = {"type": "object", "properties": {"image": {"type": "string"}, "build": {"type": "string"},
                                                "ports": TAGS},
               "anyOf": [{"required": ["image"]}, {"required": ["build"]}], "additionalProperties": False}
    schema = {"$defs": {"service": service}, "type": "object", "properties": {"services": {
        "type": "object", "patternProperties": {"^[a-z]+$": {"$ref": "#/$defs/service"}},
        "additionalProperties": {"type": "array", "items": {"type": "string"}}}}}
    assert repeats_an_item(schema, '{"services": {"web": {"image": "nginx", "ports": ["80", "80"')
    assert not repeats_an_item(schema, '{"services": {"Web": ["80", "80"]}}')  # (no pattern: additionalProperties)
    assert survey_held(schema).held == [TAGS] and survey_held(schema).not_held == 0
    assert compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).warnings == ()


def test_a_property_that_also_matches_the_one_pattern_leaves_the_pattern_not_followed() -> None:
    """"tags" takes both its own schema and the pattern's: the pattern's uniqueItems is not held there, so said."""
    schema = {"type": "object", "properties": {"tags": {"type": "array"}}, "patternProperties": {"^t": TAGS}}
    arrays = survey_held(schema)
    assert (arrays.held, arrays.not_held) == ([], 1)
    assert not repeats_an_item(schema, '{"tags": ["x", "x"')  # (not held, and the warning says so)
