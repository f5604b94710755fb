"""Output formats (`--format json`, `--json-schema`, `--grammar`, `--regex`) compiled for llguidance.

An `OutputFormat` is what the user asked for: a kind and its source text. It
compiles to a `CompiledGrammar`: one llguidance grammar string, ready for
`llguidance.LLMatcher`, checked before any model runs, so that a bad schema,
grammar or regex is one line naming what llguidance reported (`InputError`),
and schema features llguidance does not enforce come back as warnings instead
of being dropped silently.

llguidance is imported inside the functions: `--help` and commands without a
format do not pay for it.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from decimal import Decimal
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

from ..config.files import parse_user_json
from ..errors import InputError
from .byte_tokenizer import byte_tokenizer
from .deep_stack import on_a_deep_stack
from .key_patterns import KEY_LENGTH_LIMIT, KEY_REPEAT_LIMIT, bounded_key_pattern, bounded_repeats
from .schema_keywords import (
    ANNOTATIONS, ANY_VALUE_DEFINITION, DATA_KEYWORDS, NUMBER_MAGNITUDE_LIMIT, NUMBER_STEP, SCHEMA_MAPS, is_count,
    json_identity, json_types, schemas_in, takes_definitions,
)
from .schema_all_of import parts_as_one_object
from .schema_number_bounds import EXACT_UP_TO, exclusive_bounds_as_inclusive, integer_bounds_as_floats
from .schema_conditionals import conditionals_as_branches
from .schema_counts_apart import counts_apart, counts_apart_as_false
from .schema_contains import contains_as_branches
from .schema_formats import formats_as_patterns
from .schema_not import not_written_out
from .schema_one_of import exclusive_one_of_as_any_of
from .schema_property_names import property_names_as_keys
from .schema_property_counts import property_counts_as_branches
from .schema_recursion import recursion_bounded
from .schema_places import SchemaPlaces, integer_range, only_the_empty_string, survey_held
from .schema_shape import misshapen
from .schema_steps import steps_as_values
from .string_language import StringLanguage
from .unique_items import schemas_of_grammar

KINDS = ("json", "json_schema", "grammar", "regex")

# Whitespace between JSON tokens: no more than two spaces or tabs, or one line
# break followed by at most 32 spaces or tabs of indentation. That admits
# compact JSON, `json.dumps`'s ", " and ": ", and pretty-printing with a 2- or
# 4-space indent (or tabs) to 8 levels or more, while one separator can never
# hold an unbounded run: llguidance's default (`[ \t\n\r]+`) lets a small model
# spend its whole token budget on spaces and newlines and never close the value.
JSON_WHITESPACE = r"(?: {0,2}|\r?\n[ \t]{0,32})"

# Numbers, bounded for the same reason: JSON lets a number run on digit after
# digit, and a small model at T=0.8 can (`"tax_rate": 0.2000000000...` until
# max_tokens). Where a schema leaves them open, numbers get at most 15 digits
# before the point (|x| < 10^15, JSON's exact-integer range) and 9 after it
# (`multipleOf` 10^-9): NUMBER_MAGNITUDE_LIMIT and NUMBER_STEP (schema_keywords.py, which the code that follows
# JSON as it is written reads too). A schema's own bounds and `multipleOf` are kept as written.

# Strings too: a small model can loop inside one (`"name": "src_main_src_src_src...` until
# max_tokens, on held-out schemas at T=0 as at 0.8). Where a schema leaves a string's length
# open (no maxLength, enum or const), it gets at most this many characters (or the longest length
# the schema names anywhere, if that is more): a name, a title, an address or a few sentences fit;
# a schema that wants more says so with its own maxLength.
STRING_LENGTH_LIMIT = 256

# Keys too, where a schema takes any key (a map's `additionalProperties`, `--format json`'s objects): at most
# KEY_LENGTH_LIMIT characters (key_patterns.py).
FREE_KEY_PATTERN = f"^[\\s\\S]{{0,{KEY_LENGTH_LIMIT}}}$"

# Runs of digits in a pattern, too: the demo target wrote a release age of `^[0-9]+ (minute|hour|day)s?$` as
# `"3000…0 day"` to the string bound, in each of a config's rules (a held-out schema at T=0). Each repeat of a
# single digit a pattern leaves unbounded (`[0-9]+`, `\d*`, `\d{2,}`) repeats at most this many times: any number
# a text holds (JSON's numbers are bounded to 15 digits and 9 decimals), a phone number, an account's digits. Not
# in a string whose schema gives a `minLength` or `maxLength` (it says how long itself), nor a repeat that asks
# more (`\d{40,}`); two such repeats in a row, or one inside a repeated group, still run longer.
DIGIT_RUN_LIMIT = 32

# Times and durations, tighter: RFC 3339 lets a time's fraction of a second run on, and a small model can
# (`"time": "20:00:00.000000012111…` to the string bound, four times in a reply, until max_tokens, on a
# held-out schema at T=0). A `time` or `date-time` a schema leaves open is at most as long as one with nine
# decimals (a nanosecond) and an offset; its format is what llguidance holds within that length.
FORMAT_LENGTH_LIMITS = {"time": len("23:59:60.123456789+14:00"),
                        "date-time": len("2026-12-31T23:59:60.123456789+14:00"),
                        # A hostname: at most 253 characters (RFC 1035), which llguidance does not count (a
                        # zone's name of 254 came out at T=0.8 on a held-out schema, and a validator refused it).
                        "hostname": 253,
                        # A duration's numbers: RFC 3339's grammar lets each run on, and the demo target wrote
                        # `P15000…0D` to the string bound in each of a workout's durations (a held-out schema at T=0).
                        # Forty characters hold any real one (`P10Y11M30DT23H59M59S` is 20).
                        "duration": 40}

# And arrays and objects: at T=0 a small model can list one item after another for ever (a product's
# tags `"WiFi", "WiFi", …`, a recipe's milk and eggs in turn, on held-out schemas), or one key after
# another (`"skillId": "8583333"` again and again under `--format json`: a repeated key is refused now, see
# unique_items.py, but a model can go on with new ones). An array whose length a schema
# leaves open (no maxItems, nor a closed list of items) holds at most this many items, and an object that
# takes keys it does not list (no maxProperties) at most this many properties; a schema that wants more
# says so with its own maxItems or maxProperties.
COLLECTION_LIMIT = 64

# Objects, closed: an object that lists its `properties` and says nothing of `additionalProperties` takes
# only those, as llama.cpp's and xgrammar's schema converters hold it. JSON Schema lets it take any other
# key too, and a small model invents keys until max_tokens (`"dont recommend": false` forty times on a
# held-out review schema, an employee's `company` and a product's `tags_by_category` nested ever deeper,
# at T=0). Closing only narrows what the grammar allows. Not closed: an object whose `required` (or
# `dependentRequired`) names a property it does not list, one with keywords that bring properties of their
# own, and nothing at all in a schema that merges objects (an `allOf`, `if`/`then`/`else`,
# `dependentSchemas`, or a `$ref`/`anyOf`/`oneOf` beside an object's own keywords), where a closed part would
# refuse its partner's properties; but conditionals that speak only of the properties their object lists (`if
# method is card then card_number is required`) leave it closed, since a small model otherwise invents keys
# until max_tokens there too (a tool's conditional parameters, at T=0).
COMBINING_KEYWORDS = {"allOf", "anyOf", "oneOf", "$ref", "patternProperties", "if", "then", "else",
                      "dependentSchemas", "dependencies", "unevaluatedProperties"}
_MERGING_KEYWORDS = {"allOf", "if", "then", "else", "dependentSchemas", "dependencies"}
_CONDITIONAL_KEYWORDS = {"if", "then", "else", "dependentSchemas", "dependencies"}
_PARTS_OF_ONE_VALUE = _CONDITIONAL_KEYWORDS | {"allOf"}
# What a conditional's part may say and still speak only of its object's listed properties (`_speaks_only_of`).
_OWN_PART_KEYS = {"properties", "required", "dependentRequired", "type", "title", "description", "$comment"}
_OBJECT_KEYWORDS = {"properties", "required", "additionalProperties", "patternProperties", "propertyNames",
                    "minProperties", "maxProperties", "dependentRequired", "unevaluatedProperties"}

# And values a schema leaves untyped (`"details": {}` or `true`, a property with only a description): any JSON, which a
# small model nests for ever (`"ticket_id_json": {"id": …, "ticket_id_json": {…` until max_tokens, at T=0 on the
# demo pair). An untyped property, array item, other value of an object or `anyOf` branch is any JSON as
# `--format json`'s values are, nested at most JSON_DEPTH_LIMIT deep, through definitions added to the schema's
# root (named ANY_VALUE_DEFINITION). (Not an `allOf` part, where it would narrow its partners, nor `not`, where it
# would widen the schema.)
_UNTYPED_PLACES = {"properties", "patternProperties", "items", "additionalProperties", "prefixItems", "anyOf"}

# `uniqueItems` over a few listed values (tags from an enum) is spelled out as every ordering of
# distinct values: 65 arrays for 4 values, 326 for 5 (0.2 s to compile), 1957 for 6 (more than llguidance
# takes), so only up to this many values, and up to SPELLED_OUT_ORDERINGS orderings in one schema.
UNIQUE_VALUES_SPELLED_OUT = 5
SPELLED_OUT_ORDERINGS = 400
_PLAIN_ARRAY_KEYS = {"type", "items", "uniqueItems", "minItems", "maxItems"} | ANNOTATIONS
_PLAIN_ITEM_KEYS = {"type", "enum", "const"} | ANNOTATIONS

# Options for llguidance's JSON-schema compiler. `lenient`: keywords it does
# not implement (`uniqueItems`, `not`, `if`/`then`, ...) are reported as
# warnings, not errors, and the rest of the schema is still enforced.
JSON_OPTIONS: dict[str, Any] = {"whitespace_pattern": JSON_WHITESPACE, "lenient": True}

# `--format json`: a JSON object, as OpenAI's `json_object` response format and
# Ollama's `format: json` mean it. Any JSON value (`--json-schema '{}'`) lets a
# bare number or string run on until max_tokens: on the demo pair at T=0.8,
# "What is 2+2? Answer in JSON." gave `2.1000000143...` for 150 tokens. Its values
# are any JSON with strings, numbers, arrays and objects bounded as in a schema
# that leaves them open (see `bounded_values`), nested at most JSON_DEPTH_LIMIT
# deep: with no depth bound a small model can open one object inside another for
# ever (`{"type": "json", "data": {"type": "json", "data": {…` at T=0). Keys are
# at most KEY_LENGTH_LIMIT characters.
JSON_DEPTH_LIMIT = 6


def _any_json_object(depth: int) -> dict[str, Any]:
    """A schema for any JSON object whose arrays and objects, itself included, nest at most `depth` deep."""
    return {"$defs": _any_value_levels(depth, "level"), "type": "object",
            "additionalProperties": {"$ref": "#/$defs/level1"}}


def _any_value_levels(depth: int, name: str) -> dict[str, Any]:
    """Root definitions `{name}1` to `{name}{depth}`: `{name}N` is any JSON value inside N - 1 arrays or objects,
    whose own arrays and objects nest at most `depth` deep in all."""
    scalars = [{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]
    defs = {}
    for level in range(1, depth + 1):
        inner = {"$ref": f"#/$defs/{name}{level + 1}"}
        containers = [{"type": "array", "items": inner}, {"type": "object", "additionalProperties": inner}]
        defs[f"{name}{level}"] = {"anyOf": scalars + (containers if level < depth else [])}
    return defs


ANY_JSON_OBJECT = _any_json_object(JSON_DEPTH_LIMIT)

_JSON_TYPE_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false",
                    type(None): "null"}
_GBNF_RULE = re.compile(r"^\s*[A-Za-z_][\w-]*\s*::=", re.MULTILINE)
# A GBNF escape, read left to right so that an escaped backslash is one (`\\u0041` is a backslash and "u0041").
_GBNF_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.DOTALL)
_UNIMPLEMENTED_KEYS = re.compile(r'Unimplemented keys: (?P<keys>\[[^\]]*\])(?P<times> \(\d+ times\))?')
_LLGUIDANCE_POSITION = re.compile(r"^(?:at )?(\d+)\((\d+)\): ")
_AT_THE_END = "at the end of the file: "
_LLGUIDANCE_TOO_LARGE = re.compile(r"^Value is not JSON serializable: (-?\d+)$")  # an integer beyond 64 bits


@dataclass(frozen=True)
class OutputFormat:
    """A constraint on the output, as asked.

    kind: "json" (any JSON object), "json_schema" (source: the schema's JSON
    text), "grammar" (source: Lark text as llguidance reads it, or GBNF) or
    "regex" (source: the pattern). origin names it in messages: a file path,
    or the flag it came from; `inline`: the source was given as it is (a
    schema's JSON on the command line), not read from a file.
    """

    kind: str
    source: str = ""
    origin: str = ""
    inline: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown output format kind {self.kind!r}")

    def describe(self) -> str:
        """A short human description: 'JSON', 'JSON schema person.json', 'regex \\d+'."""
        if self.kind == "json":
            return "JSON"
        if self.kind == "regex":
            return f"regex {self.source}"
        what = "JSON schema" if self.kind == "json_schema" else "grammar"
        if self.inline:
            return f"{what} {_shortened(self.source)}"
        return f"{what} {self.origin}" if self.origin else what

    def to_dict(self) -> dict[str, str]:
        """What `run --json` reports: the kind and where it came from (the pattern itself for a regex)."""
        return {"kind": self.kind, "origin": self.source if self.kind == "regex" else self.origin}


def _shortened(text: str, limit: int = 60) -> str:
    """`text` on one line (runs of whitespace as one space), cut to `limit` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# llguidance stops computing forced text at a limit (25,000 bytes as of 1.x), and its matcher cannot step back
# once it has: a grammar that forces that much text without a choice (a rule that always needs itself, which
# no finite text satisfies, or a fixed text that long, `a{100000}`) cannot be used.
_FORCED_BYTES_FOLLOWED = 25_000  # (a fixed text just shorter is followed: 25,001 bytes came back of a rule without end)
TOO_MUCH_FORCED = ("it forces more text without a choice than llguidance follows (a rule that always needs itself,"
                   " or a very long fixed text)")  # (constraint.py says it too)


@dataclass(frozen=True)
class CompiledGrammar:
    """An llguidance grammar string for `LLMatcher`, and the warnings compiling it gave."""

    grammar: str
    warnings: tuple[str, ...] = ()


def compile_format(fmt: OutputFormat) -> CompiledGrammar:
    """Compile and check `fmt`; an invalid schema, grammar or regex raises InputError (one line). On a deep stack
    (see deep_stack.py): llguidance's compiling recurses in native code."""
    return on_a_deep_stack(lambda: _compile_format(fmt))


def _compile_format(fmt: OutputFormat) -> CompiledGrammar:
    from llguidance import LLMatcher

    notes: list[str] = []
    check: tuple[bool, list[str]] | None = None  # llguidance's verdict on the grammar, where already known
    if fmt.kind == "json":
        grammar = LLMatcher.grammar_from_json_schema(bounded_values(ANY_JSON_OBJECT), overrides=JSON_OPTIONS)
    elif fmt.kind == "json_schema":
        grammar, check, notes = _schema_grammar(fmt)
    elif fmt.kind == "grammar":
        lark = _as_lark(fmt.source, fmt.origin)
        for schema in _inline_json_schemas(lark):
            try:
                refuse_unusable_schema(schema, _name(fmt))
            except RecursionError:
                raise InputError(f"{_name(fmt)}: a %json schema in it is nested too deeply") from None
        grammar = LLMatcher.grammar_from_lark(lark)
    else:
        if (len(fmt.source) - len(fmt.source.rstrip("\\"))) % 2:  # (llguidance would drop it, changing the pattern)
            raise InputError(f"{_name(fmt)}: invalid regex: it ends with a backslash that escapes nothing")
        grammar = LLMatcher.grammar_from_regex(ascii_shorthands(fmt.source))
    is_error, messages = check if check is not None else LLMatcher.validate_grammar_with_warnings(grammar)
    # Positions in a GBNF file's messages would point into its Lark conversion, not the file: dropped.
    kind = "converted" if fmt.kind == "grammar" and is_gbnf(fmt.source) else fmt.kind
    if is_error:
        message = _one_line(messages[0] if messages else 'rejected by llguidance', kind, fmt.source)
        if fmt.kind == "grammar" and message.startswith("missing field `grammars`"):  # (llguidance's own JSON form)
            message = "JSON, not a Lark or GBNF grammar (a JSON schema goes to --json-schema, or chat's /format schema)"
        raise InputError(f"{_name(fmt)}: {message}")
    problem = _why_unusable(grammar)
    if problem is not None:
        raise InputError(f"{_name(fmt)}: {problem}")
    # Tokens named in a grammar (`<tool_call>`) are checked against the model's vocabulary when it is used
    # (an unknown one is an error then), not here: llguidance's "can't validate" is no warning for the user.
    messages = [message for message in messages if not message.startswith("no tokenizer - can't validate <")]
    warnings = tuple(f"{_name(fmt)}: {_one_line(message, kind)} (not enforced: the output may not satisfy it)"
                     for message in _without_held_unique_items(messages, grammar))
    return CompiledGrammar(grammar, warnings + tuple(f"{_name(fmt)}: {note}" for note in notes))


# What `\d` and `\w` stand for in a JSON schema's pattern (ECMAScript's): in a regex llguidance reads (Rust's
# syntax) they are Unicode's, and the demo model held to `--regex '\d{3}'` wrote `𝟡۸۸`.
_ASCII_SHORTHANDS = {"d": "0-9", "w": "0-9A-Za-z_"}


def ascii_shorthands(pattern: str) -> str:
    r"""`pattern` (a regex in llguidance's syntax) with `\d`, `\w` and their negations `\D`, `\W` standing for ASCII
    digits and word characters, as in a JSON schema's pattern (inside a class, `\D` and `\W` as written)."""
    out = []
    depth = 0  # how many classes (`[…]`, which may nest) the scan is inside
    at = 0
    while at < len(pattern):
        char = pattern[at]
        if char == "\\" and at + 1 < len(pattern):
            escaped = pattern[at + 1]
            if escaped in _ASCII_SHORTHANDS:
                ranges = _ASCII_SHORTHANDS[escaped]
                out.append(ranges if depth else f"[{ranges}]")
            elif escaped.lower() in _ASCII_SHORTHANDS and not depth:
                out.append(f"[^{_ASCII_SHORTHANDS[escaped.lower()]}]")
            else:
                out.append(pattern[at:at + 2])
            at += 2
            continue
        if char == "[":
            depth += 1
            out.append(char)
            at += 1
            for opening in ("^", "]"):  # (a class's first `]`, after a `^` or not, is one of its characters)
                if pattern.startswith(opening, at):
                    out.append(opening)
                    at += 1
            continue
        if char == "]" and depth:
            depth -= 1
        out.append(char)
        at += 1
    return "".join(out)


_INLINE_JSON = re.compile(r"%json\s*")


def _inline_json_schemas(lark: str) -> Iterator[dict[str, Any]]:
    """The JSON schemas a Lark grammar writes inline (`rule: %json {...}`), as far as they read as JSON."""
    decoder = json.JSONDecoder()
    for found in _INLINE_JSON.finditer(lark):
        try:
            schema, _ = decoder.raw_decode(lark, found.end())
        except ValueError:  # (llguidance says what is wrong with it)
            continue
        if isinstance(schema, dict):
            yield schema


def _without_held_unique_items(messages: list[str], grammar: str) -> list[str]:
    """llguidance's warnings, but for `uniqueItems` where localspec holds it itself (on arrays of strings,
    integers and open numbers, see unique_items.py): left out of them, and said instead of the arrays it does
    not hold, if any."""
    surveys = [(survey_held(schema), followed) for schema, followed in schemas_of_grammar(grammar)]
    held = sum(len(arrays.held) for arrays, followed in surveys if followed)
    not_held = sum(arrays.not_held + (0 if followed else len(arrays.held)) for arrays, followed in surveys)
    if not held:
        return messages
    kept = []
    for message in messages:
        unimplemented = _UNIMPLEMENTED_KEYS.fullmatch(message)
        if unimplemented is None:
            kept.append(message)
            continue
        keys = [key for key in json.loads(unimplemented["keys"]) if key != "uniqueItems"]
        if keys:
            kept.append(f"Unimplemented keys: {json.dumps(keys)}{unimplemented['times'] or ''}")
    if not_held:
        kept.append(f"uniqueItems on {not_held} array{'s' if not_held > 1 else ''} (localspec holds it"
                    " on arrays of strings, integers, open numbers and records where it can follow the schema)")
    return kept


NOTHING_SATISFIES = "no text can satisfy it"


def _why_unusable(grammar: str) -> str | None:
    """Why the grammar cannot be used, where that shows at its start; None where it lets something be written.
    Found before any model loads, with bytes for tokens (about a millisecond): nothing allowed at all
    (`[^\\s\\S]`, a valid regex: no text can satisfy it), nothing but the end (`--regex ""`: only the empty text),
    or too much text forced without a choice (`TOO_MUCH_FORCED`)."""
    from llguidance import LLMatcher

    matcher = LLMatcher(byte_tokenizer(), grammar)
    first_mask = matcher.compute_bitmask()  # (the first mask is what finds nothing allowed)
    # (another error, e.g. a special token that only the model's vocabulary has, is for that vocabulary to say)
    if matcher.is_error() and matcher.get_error().startswith("NoExtensionBias"):
        return NOTHING_SATISFIES
    allowed = sum(bin(byte).count("1") for byte in bytes(first_mask))
    if not matcher.is_error() and matcher.is_accepting() and allowed == 1:  # (the end alone)
        return "cannot be used: it matches only the empty text (the output would always be empty)"
    if not matcher.is_error() and len(matcher.compute_ff_tokens()) >= _FORCED_BYTES_FOLLOWED:
        return f"cannot be used: {TOO_MUCH_FORCED}"
    return None


def _schema_grammar(fmt: OutputFormat) -> tuple[str, tuple[bool, list[str]], list[str]]:
    """The grammar of a JSON schema with its open values bounded, llguidance's verdict on it, and notes for
    the user (see `fitted_schema`)."""
    try:
        schema = parse_schema(fmt.source, fmt.origin)
        refuse_unusable_schema(schema, _name(fmt))
        fitted = _fitted_schema(schema)  # (compile_format runs on a deep stack already)
    except RecursionError:
        raise InputError(f"{_name(fmt)}: the schema is nested too deeply") from None
    except ValueError as exc:
        raise InputError(f"{_name(fmt)}: {_one_line(str(exc), fmt.kind)}") from None
    if fitted.bounded:
        return fitted.grammar, fitted.check, list(fitted.notes)
    return fitted.grammar, fitted.check, [*fitted.notes, "the bounds localspec puts on open strings, numbers,"
                                          " arrays and objects do not fit this schema, so they are left open (a"
                                          " small model may then run one on until max_tokens)"]


class FittedSchema(NamedTuple):
    """A JSON schema as it is held to, its llguidance grammar, llguidance's verdict on that grammar
    (error?, messages), and whether the schema is the bounded one."""

    schema: dict[str, Any]
    grammar: str
    check: tuple[bool, list[str]]
    bounded: bool
    notes: tuple[str, ...] = ()  # bounds moved, property counts left out (see `integer_bounds_as_floats`, ...)


def fitted_schema(schema: dict[str, Any]) -> FittedSchema:
    """`_fitted_schema(schema)` on a deep stack (see deep_stack.py): llguidance's compiling recurses in native code."""
    return on_a_deep_stack(lambda: _fitted_schema(schema))


def _fitted_schema(schema: dict[str, Any]) -> FittedSchema:
    """`bounded_values(schema)` where llguidance takes it (with uniqueItems spelled out up to
    SPELLED_OUT_ORDERINGS orderings, else without), else the schema as written (a pattern that asks for
    longer strings than the bound, say, or the schema's own error, for the caller to report), each
    compiled and checked once, each with its conditionals and `contains` written as branches llguidance holds to
    (see `conditionals_as_branches`, `contains_as_branches`) and its property counts as llguidance can hold them
    (`_compiled`), the bounded ones with their recursion bounded (`recursion_bounded`).
    RecursionError for a schema nested too deeply; ValueError for one llguidance cannot take at all. A `oneOf`
    whose branches exclude each other is first written as the `anyOf` it equals (`exclusive_one_of_as_any_of`), and
    a map's `propertyNames` as keys llguidance holds (`property_names_as_keys`, before `not`s are written out: a
    `not` of names is its own), and formats llguidance does not know as the patterns their standards define
    (`formats_as_patterns`), and a `not` of listed values or types as what it leaves (`not_written_out`), and an
    object of parts closed by `unevaluatedProperties: false` as one object (`parts_as_one_object`), and a few
    multiples of a fractional step between bounds as the values they are (`steps_as_values`), and then number
    bounds llguidance misreads as bounds it reads right, with a note where one moved (`exclusive_bounds_as_inclusive`,
    `integer_bounds_as_floats`)."""
    schema = parts_as_one_object(formats_as_patterns(steps_as_values(counts_apart_as_false(schema))))
    schema = exclusive_one_of_as_any_of(not_written_out(property_names_as_keys(schema)))
    if schema is False:  # (a `not` of every value: `{"not": {}}`)
        raise ValueError(NOTHING_SATISFIES)
    if _recursion_never_ends(schema):
        raise ValueError(f"{NOTHING_SATISFIES}: every way through it refers to itself again without end")
    # (after the steps above, which write bounds of their own: a `not` of 0 as the ranges beside it)
    schema, moved = integer_bounds_as_floats(exclusive_bounds_as_inclusive(schema))
    fitted = _fitted_without_notes(schema)
    return fitted._replace(notes=(*moved, *fitted.notes))


def _fitted_without_notes(schema: dict[str, Any]) -> FittedSchema:
    """`_fitted_schema`'s tries, on the schema its rewrites made."""
    orderings = sum(len(_orderings(node)) for node in schemas_in(schema) if node.get("uniqueItems") is True)
    spell_out = orderings <= SPELLED_OUT_ORDERINGS
    tries = [bounded_values(schema, spell_out_unique=spell_out)]
    if spell_out and orderings:  # in case they make the grammar larger than llguidance takes: without them
        tries.append(bounded_values(schema, spell_out_unique=False))
    # (bounded first: the branches name no value that would need bounds, and whether objects are closed is
    # decided on the conditionals as the schema wrote them)
    # (and each with its `contains` written as branches, then, should that be more than llguidance takes, without)
    has_contains = any("contains" in node for node in schemas_in(schema))
    rewrites = (contains_as_branches, _as_is) if has_contains else (_as_is,)
    tries = [rewrite(recursion_bounded(bounded)) for bounded in tries for rewrite in rewrites]
    for bounded in tries:
        try:
            fitted = _compiled(conditionals_as_branches(bounded), bounded=True)
        except ValueError:  # a value llguidance cannot take (a number past 64 bits): the schema's own, as written
            break
        if not fitted.check[0]:
            return fitted
    return _compiled(conditionals_as_branches(schema), bounded=False)


def _recursion_never_ends(schema: dict[str, Any]) -> bool:
    """Whether every document `schema` takes would nest without end (`"child": {"$ref": "#/properties/child"}`,
    required): llguidance takes the schema, and the output would reach a dead end. Written out a few levels deep
    (`recursion_bounded`), it takes nothing: a definition with a document takes one within one round of its
    cycle, as the level below can stand in for the one above."""
    return recursion_bounded(schema) is False


def _as_is(schema: Any) -> Any:
    return schema


# llguidance's words where it cannot hold a count: "min/maxProperties only supported when all keys listed in
# properties are required", or, for an object closed to other keys, "minProperties (2) is greater than number of
# properties (0)" (it counts only the required ones).
_COUNTS_NOT_HELD = re.compile(r"min/maxProperties only supported|(?:min|max)Properties \(\d+\) is")


def _compiled(schema: dict[str, Any], bounded: bool) -> FittedSchema:
    """`schema` compiled and checked, with the property counts llguidance says it cannot hold written as cases it
    can, or left out with a note (`property_counts_as_branches`): llguidance's grammar then takes no object."""
    from llguidance import LLMatcher

    grammar = LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)
    check = LLMatcher.validate_grammar_with_warnings(grammar)
    if not any(_COUNTS_NOT_HELD.search(message) for message in check[1]):
        return FittedSchema(schema, grammar, check, bounded)
    counted, notes = property_counts_as_branches(schema)
    grammar = LLMatcher.grammar_from_json_schema(counted, overrides=JSON_OPTIONS)
    return FittedSchema(counted, grammar, LLMatcher.validate_grammar_with_warnings(grammar), bounded, tuple(notes))


def parse_schema(text: str, origin: str) -> dict[str, Any]:
    """A JSON schema's text parsed; not JSON, or not an object, is InputError naming `origin` (and line, column)."""
    schema = parse_user_json(text, origin)
    if not isinstance(schema, dict):
        raise InputError(f"{origin}: a JSON schema must be a JSON object ({{...}}), not {_JSON_TYPE_NAMES[type(schema)]}")
    return schema


def bounded_values(schema: Any, spell_out_unique: bool = True) -> Any:
    """`schema` with every number, string, array and object it leaves open bounded (see NUMBER_MAGNITUDE_LIMIT,
    STRING_LENGTH_LIMIT and COLLECTION_LIMIT), objects that list their properties closed to others (see
    COMBINING_KEYWORDS), and `uniqueItems` over a few listed values spelled out (if `spell_out_unique`): a
    new object, the input untouched. Strings and collections are bounded to at least the longest length
    the schema names or lists anywhere (an `allOf` or a `$ref` may put a schema's minLength or maxItems in
    another object)."""
    nodes = schemas_in(schema)
    lengths = [node[key] for node in nodes for key in ("minLength", "maxLength") if is_count(node.get(key))]
    counts = [node[key] for node in nodes for key in ("minItems", "maxItems", "minProperties", "maxProperties")
              if is_count(node.get(key))]
    lists = [len(node[key]) for node in nodes for key in ("required", "prefixItems") if isinstance(node.get(key), list)]
    properties_listed = sum(len(_holdable(node["properties"])) for node in nodes
                            if isinstance(node.get("properties"), dict))
    untyped_root = isinstance(schema, dict) and _is_untyped(schema)  # (`{}`: any value, bounded as any value)
    untyped = (isinstance(schema, dict) and (untyped_root or any(_untyped_values(node) for node in nodes))
               and takes_definitions(schema, ANY_VALUE_DEFINITION))
    minimums = [node["minLength"] for node in nodes if is_count(node.get("minLength"))]
    limits = _Limits(string=max([STRING_LENGTH_LIMIT, *lengths]), longest_minimum=max(minimums, default=0),
                     collection=max([COLLECTION_LIMIT, properties_listed, *counts, *lists]),
                     close_objects=not any(_merges_here(node) for node in nodes), spell_out_unique=spell_out_unique,
                     any_value=f"#/$defs/{ANY_VALUE_DEFINITION}1" if untyped else None)
    bounded = _bounded(schema, limits)
    if untyped and untyped_root:
        bounded = {"$ref": limits.any_value}
    if untyped:
        levels = _any_value_levels(JSON_DEPTH_LIMIT, ANY_VALUE_DEFINITION)
        bounded["$defs"] = {**bounded.get("$defs", {}),
                            **{name: _bounded(level, limits) for name, level in levels.items()}}
    return bounded


def _untyped_values(node: dict[str, Any]) -> list[Any]:
    """The schemas of `node`'s properties, items and other values that leave the value untyped (see
    ANY_VALUE_DEFINITION): no keyword but annotations."""
    values = []
    for key in node.keys() & _UNTYPED_PLACES:
        value = node[key]
        if key in SCHEMA_MAPS and isinstance(value, dict):
            values += value.values()
        else:
            values += value if isinstance(value, list) else [value]
    return [value for value in values if _is_untyped(value)]


def _is_untyped(schema: Any) -> bool:
    return schema is True or (isinstance(schema, dict) and schema.keys() <= ANNOTATIONS)


class _Limits(NamedTuple):
    string: int  # the most characters of a string the schema leaves open
    longest_minimum: int  # the longest minLength the schema names anywhere (an `allOf` may give a string's in a part)
    collection: int  # the most items of an array, or properties of an object, the schema leaves open
    close_objects: bool  # whether objects that list their properties are closed to others
    spell_out_unique: bool  # whether uniqueItems over a few listed values is spelled out
    any_value: str | None = None  # the $ref that untyped values become (see ANY_VALUE_DEFINITION), if any


def _bounded(schema: Any, limits: _Limits) -> Any:
    if isinstance(schema, list):
        return [_bounded(item, limits) for item in schema]
    if not isinstance(schema, dict):
        return schema
    bounded: dict[str, Any] = {}
    for key, value in schema.items():
        # (a conditional's parts, an `allOf`'s, are parts of this very value: closing one would refuse the others'
        # properties, an untyped value in one made any JSON would narrow the others' schema of it)
        one_value = key in _PARTS_OF_ONE_VALUE or (key == "items" and not _contains_of_its_own(schema))
        inner = limits._replace(close_objects=False, any_value=None) if one_value else limits
        if key in DATA_KEYWORDS or key in ("if", "contains"):  # (tests of the value or an item, not what is written)
            bounded[key] = value
        elif key in SCHEMA_MAPS and isinstance(value, dict):  # names to schemas: a name is not a keyword
            bounded[key] = {name: _bounded(_typed(subschema, key, inner), inner) for name, subschema in value.items()}
            if key == "patternProperties" and _keys_only_by_pattern(schema):
                bounded[key] = _with_bounded_keys(bounded[key])
        elif key == "dependencies" and isinstance(value, dict):  # names to names (data) or to schemas
            bounded[key] = {name: needs if isinstance(needs, list) else _bounded(needs, inner)
                            for name, needs in value.items()}
        elif key in ("prefixItems", "anyOf") and isinstance(value, list):
            bounded[key] = [_bounded(_typed(item, key, limits), limits) for item in value]
        else:
            bounded[key] = _bounded(_typed(value, key, inner), inner)
    if limits.close_objects:
        bounded = closed_object(bounded)
    kinds = _schema_types(schema)
    listed = schema.keys() & {"enum", "const"}  # its values are given: nothing is open
    if kinds & {"number", "integer"} and not listed:
        if "maximum" not in schema and "exclusiveMaximum" not in schema:
            bounded["exclusiveMaximum"] = NUMBER_MAGNITUDE_LIMIT
        if "minimum" not in schema and "exclusiveMinimum" not in schema:
            bounded["exclusiveMinimum"] = -NUMBER_MAGNITUDE_LIMIT
        if "number" in kinds and "multipleOf" not in schema:
            bounded["multipleOf"] = NUMBER_STEP
    pattern = _pattern_of(schema)
    if ("string" in kinds and not listed and pattern is not None and not schema.keys() & {"minLength", "maxLength"}
            and limits.longest_minimum <= DIGIT_RUN_LIMIT and (runs := _with_bounded_digit_runs(pattern))):
        bounded["pattern"] = pattern = runs  # (not where the schema gives a length: it says how long itself)
    if not listed and "maxLength" not in schema:
        format_limit = _format_length_limit(schema, limits)
        if format_limit is not None:  # (where a string must take the format: its own node, an `anyOf` branch, a part)
            bounded["maxLength"] = format_limit
        elif "string" in kinds and _length_bound_holds(pattern, limits.string):
            bounded["maxLength"] = limits.string
        elif "string" in kinds and pattern is not None and (shorter := _with_bounded_repeats(pattern)) is not None:
            bounded["pattern"] = shorter  # (its repeats bounded instead)
    if "array" in kinds and not listed and "maxItems" not in schema and schema.get("items") is not False:
        bounded["maxItems"] = limits.collection
    if "object" in kinds and not listed and "maxProperties" not in schema and _counts_keys(bounded):
        bounded["maxProperties"] = limits.collection
    if "object" in kinds and not listed and limits.close_objects:
        bounded = _free_keys_bounded(bounded)
    if schema.get("uniqueItems") is True:
        return _unique_items(schema, bounded, limits.spell_out_unique)
    return bounded


def _holdable(properties: dict[str, Any]) -> list[str]:
    """The listed properties an object may hold: all but those of schema `false` (names a `propertyNames` refuses,
    a presence-only `oneOf`'s absent names)."""
    return [name for name, value in properties.items() if value is not False]


def _free_keys_bounded(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with the keys it takes freely, where it lists none but refused ones and gives their values a schema
    (a map's `additionalProperties`, `--format json`'s objects), held to KEY_LENGTH_LIMIT characters: written as
    the `patternProperties` of that length. Only where no object merges into another (the caller's
    `close_objects`: llguidance reads no pattern for an `anyOf` branch's `required` key, and refuses two patterns
    that overlap in one `allOf`) and no required key is longer; then only longer keys are refused, and each other
    key takes the same schema of value as before."""
    others, listed, required = schema.get("additionalProperties"), schema.get("properties", {}), schema.get("required")
    if (not isinstance(others, dict) or "patternProperties" in schema or not isinstance(listed, dict)
            or _holdable(listed)
            or (isinstance(required, list) and any(len(str(name)) > KEY_LENGTH_LIMIT for name in required))):
        return schema
    return {**schema, "patternProperties": {FREE_KEY_PATTERN: others}, "additionalProperties": False}


def _keys_only_by_pattern(schema: dict[str, Any]) -> bool:
    """Whether an object takes no key but its listed ones and those its patterns take, and lists none longer than a
    bounded pattern's repeats reach: then bounding the patterns only refuses keys (see key_patterns.py). (Where other
    keys are taken, a long key a bounded pattern no longer takes would fall to `additionalProperties` instead.)"""
    listed = schema.get("properties", {})
    return (schema.get("additionalProperties") is False and isinstance(listed, dict)
            and all(len(name) <= KEY_REPEAT_LIMIT for name in listed))


def _with_bounded_keys(patterns: dict[str, Any]) -> dict[str, Any]:
    """`patternProperties` with each pattern's repeats bounded where that can be done (see key_patterns.py), the
    same order; a pattern is kept as written where its rewrite would coincide with another or llguidance would
    not read it."""
    rewritten = {}
    for pattern, schema in patterns.items():
        bounded = bounded_key_pattern(pattern)
        if bounded is None or bounded in patterns or bounded in rewritten or not _reads_as_a_pattern(bounded):
            bounded = pattern
        rewritten[bounded] = schema
    return rewritten


@functools.lru_cache(maxsize=256)
def _reads_as_a_pattern(pattern: str, most: int | None = None) -> bool:
    """Whether llguidance compiles `pattern` (a string's regex), held to `most` characters where given."""
    from llguidance import LLMatcher

    bound = {} if most is None else {"maxLength": most}
    try:
        grammar = LLMatcher.grammar_from_json_schema({"type": "string", "pattern": pattern, **bound})
        return not LLMatcher.validate_grammar(grammar)
    except Exception:  # (whatever llguidance raises rather than reports: not read)
        return False


def _pattern_of(schema: dict[str, Any]) -> str | None:
    """A schema's `pattern`, where it is a string (another is the schema's own error, llguidance's to report)."""
    pattern = schema.get("pattern")
    return pattern if isinstance(pattern, str) else None


def _length_bound_holds(pattern: str | None, most: int) -> bool:
    """Whether llguidance can hold a string of `pattern` (None: any) to `most` characters: of a pattern such as
    `^(\\S+\\s+){4}\\S+$` (a cron schedule) it cannot tell whether any string that short matches, and refuses the
    grammar. Such a string has its pattern's repeats bounded instead (`_with_bounded_repeats`), where that can be
    done, and the rest of the schema is bounded. (A pattern of its own error: bounded, and the error reported.)"""
    return pattern is None or not _reads_as_a_pattern(pattern) or _reads_as_a_pattern(pattern, most)


def _with_bounded_repeats(pattern: str) -> str | None:
    """`pattern` with each unbounded repeat bounded as a key's are (key_patterns.py), where llguidance takes it:
    so a cron schedule's `^(\\S+\\s+){4}\\S+$`, which it cannot hold to a length, still cannot run on (the
    demo target wrote `0:00:00:…` to max_tokens); None where it cannot be bounded so."""
    rewritten = bounded_key_pattern(pattern)
    return rewritten if rewritten is not None and _reads_as_a_pattern(rewritten) else None


def _with_bounded_digit_runs(pattern: str) -> str | None:
    """`pattern` with each unbounded run of digits at most DIGIT_RUN_LIMIT long, where it has one and llguidance
    takes the rewrite (see DIGIT_RUN_LIMIT); else None."""
    rewritten = bounded_repeats(pattern, DIGIT_RUN_LIMIT, digits_only=True)
    return rewritten[0] if rewritten is not None and _reads_as_a_pattern(rewritten[0]) else None


def _format_length_limit(schema: dict[str, Any], limits: _Limits) -> int | None:
    """The most characters `schema`'s format leaves a string (FORMAT_LENGTH_LIMITS), where it names such a format
    and no minLength in the schema asks for more; else None."""
    limit = FORMAT_LENGTH_LIMITS.get(schema["format"]) if isinstance(schema.get("format"), str) else None
    if limit is None or limits.longest_minimum > limit:
        return None
    return limit


def _typed(value: Any, key: str, limits: _Limits) -> Any:
    """`value`, the schema of a `key` (a property, items, ...), as any JSON nested at most JSON_DEPTH_LIMIT deep
    where it leaves the value untyped and the schema's root has those bounds (`limits.any_value`)."""
    if limits.any_value is not None and key in _UNTYPED_PLACES and _is_untyped(value):
        return {"$ref": limits.any_value}
    return value


def _counts_keys(bounded: dict[str, Any]) -> bool:
    """Whether an object schema takes keys it does not list, and llguidance can count them: it enforces
    maxProperties only where every listed property is required (elsewhere it warns that it does not)."""
    properties = bounded.get("properties", {})
    required = bounded.get("required", [])
    if bounded.get("additionalProperties") is False or not (isinstance(properties, dict) and isinstance(required, list)):
        return False
    return all(name in required for name in _holdable(properties))


def closed_object(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with `additionalProperties: false` where it lists its properties and leaves the others open,
    and closing keeps every valid value of the listed properties reachable (see COMBINING_KEYWORDS)."""
    properties = schema.get("properties")
    required = schema.get("required", [])
    if (not isinstance(properties, dict) or "additionalProperties" in schema
            or _combining(schema, COMBINING_KEYWORDS)
            or not isinstance(required, list)
            or not all(isinstance(name, str) and name in properties
                       for name in [*required, *_dependent_names(schema)])):
        return schema  # (a `required` that is not a list of names: llguidance reports the schema)
    return {**schema, "additionalProperties": False}


def _dependent_names(schema: dict[str, Any]) -> list[Any]:
    """The names a schema's `dependentRequired` (or draft 7's `dependencies`) asks for, and those that ask: closing
    the object to others would refuse them."""
    names: list[Any] = []
    for key in ("dependentRequired", "dependencies"):
        dependencies = schema.get(key)
        if isinstance(dependencies, dict):
            names += list(dependencies)
            names += [need for needs in dependencies.values() if isinstance(needs, list) for need in needs]
    return names


def _merges_here(schema: dict[str, Any]) -> bool:
    """Whether `schema` merges objects (an `allOf`, an `if`, or a `$ref`/`anyOf`/`oneOf` beside an object's own
    keywords), so that closing one of them would refuse the other's properties. A schema whose `type` rules
    objects out merges none (a string's `pattern` beside a `not`, put in an `allOf` of their own)."""
    kinds = _schema_types(schema)
    if kinds and "object" not in kinds:
        return False
    merged_beside = schema.keys() & {"$ref", "anyOf", "oneOf"} and schema.keys() & _OBJECT_KEYWORDS
    return bool(_combining(schema, _MERGING_KEYWORDS) or merged_beside)


def _combining(schema: dict[str, Any], keywords: set[str]) -> set[str]:
    """The `keywords` of `schema` that may bring properties of their own: all of them, but its conditionals where
    they speak only of the properties it lists (`_conditionals_of_its_own`)."""
    found = schema.keys() & keywords
    if found and found <= _CONDITIONAL_KEYWORDS and _conditionals_of_its_own(schema):
        return set()
    return found


def _conditionals_of_its_own(schema: dict[str, Any]) -> bool:
    """Whether the conditionals of an object schema (`if`/`then`/`else`, `dependentSchemas`, `dependencies`) name
    only properties it lists and bring none through other keywords (a `$ref`, an `anyOf`, an `additionalProperties`),
    so that closing it refuses nothing they allow: `if method is card then card_number is required`."""
    own = schema.get("properties")
    if not isinstance(own, dict):
        return False
    parts = [schema[key] for key in ("if", "then", "else") if key in schema]
    for key in ("dependentSchemas", "dependencies"):
        dependencies = schema.get(key, {})
        if not isinstance(dependencies, dict) or not dependencies.keys() <= own.keys():
            return False
        for needs in dependencies.values():
            if isinstance(needs, list):
                parts.append({"required": needs})
            else:
                parts.append(needs)
    return all(_speaks_only_of(part, own) for part in parts)


def _contains_of_its_own(array: dict[str, Any]) -> bool:
    """Whether an array's `contains`, if any, names only properties its items list, so that closing the items refuses
    nothing it allows (else the items, parts of the value that `contains` tests, stay open)."""
    if "contains" not in array:
        return True
    items = array.get("items")
    own = items.get("properties") if isinstance(items, dict) else None
    return isinstance(own, dict) and _speaks_only_of(array["contains"], own)


def _speaks_only_of(part: Any, own: dict[str, Any]) -> bool:
    """Whether a conditional's part names only the properties in `own` (the object's listed ones), and none else."""
    if isinstance(part, bool):
        return True
    if not isinstance(part, dict) or not part.keys() <= _OWN_PART_KEYS:
        return False  # (a `const` of the whole object, a `minProperties`, a `$ref` may ask for other keys)
    properties, required = part.get("properties", {}), part.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        return False
    if any(node.keys() & (_OBJECT_KEYWORDS | COMBINING_KEYWORDS) for node in schemas_in(list(properties.values()))):
        return False  # (a value's object merged with the one the object lists for it: not followed)
    return all(isinstance(name, str) and name in own for name in [*properties, *required, *_dependent_names(part)])


def _orderings(array: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Every array of distinct values an array schema with `uniqueItems` may hold, where they can be spelled
    out: its items a few listed values (an enum, a const, booleans), no keyword beside them to narrow them;
    else none."""
    values = _listed_values(array.get("items"))
    own_min, own_max = array.get("minItems", 0), array.get("maxItems")
    if (values is None or len(values) > UNIQUE_VALUES_SPELLED_OUT or not is_count(own_min)
            or not (own_max is None or is_count(own_max)) or not array.keys() <= _PLAIN_ARRAY_KEYS
            or _schema_types(array) != {"array"}):
        return []
    longest = len(values) if own_max is None else min(own_max, len(values))
    return [ordering for length in range(own_min, longest + 1) for ordering in itertools.permutations(values, length)]


def _unique_items(array: dict[str, Any], bounded: dict[str, Any], spell_out: bool) -> dict[str, Any]:
    """`bounded`, the array schema `array` with `uniqueItems` (which llguidance does not enforce), held to it
    where its items take a few known values (an enum, a const, booleans): every ordering of distinct values
    spelled out, up to UNIQUE_VALUES_SPELLED_OUT values, beside its own keywords (a `$ref` may point at
    them); above that, no longer than the number of values (no array of unique items is), and an enum's
    strings held while they are written (unique_items.py), as free strings are. Other arrays are left as
    they are (a warning says uniqueItems is not enforced there)."""
    values = _listed_values(array.get("items"))
    own_max = array.get("maxItems")
    if values is None or "prefixItems" in array or not (own_max is None or is_count(own_max)):
        return bounded  # (a wrong maxItems: llguidance reports the schema)
    orderings = _orderings(array) if spell_out else []
    if not orderings:
        return {**bounded, "maxItems": len(values) if own_max is None else min(own_max, len(values))}
    arrays = [{"type": "array", "prefixItems": [{"const": value} for value in ordering], "items": False,
               "minItems": len(ordering), "maxItems": len(ordering)} for ordering in orderings]
    return {key: value for key, value in bounded.items() if key != "uniqueItems"} | {"anyOf": arrays}


# llguidance (1.x) ends the process (a segmentation fault, no error) on an integer range whose bounds are both
# within about 600 of -2^63, which a `const` or an `enum` value there is too, and on a float at or below it where
# the type is an integer (it is read as -2^63 then); a range with one bound there does not crash it (checked). It
# runs on for minutes, gigabytes deep, over a `multipleOf` with 2^19 or more among its factors (2^19: 1-5 s). Such
# numbers are refused here first, with a margin, as are more definitions than it follows (a chain of 2,500 `$ref`s
# overflows its stack).
_CRASHING_BELOW = -2**63 + 2**10
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_SLOW_MULTIPLE = 2**18
MOST_DEFINITIONS = 2000


def refuse_unusable_schema(schema: dict[str, Any], origin: str) -> None:
    """InputError (one line, naming `origin`) for a schema refused as it is read: one llguidance would crash or
    hang on, one whose every document needs more unique items than its items take, or one with a keyword whose
    value is of the wrong kind (`schema_shape.misshapen`)."""
    wrong = misshapen(schema)
    if wrong is not None:
        raise InputError(f"{origin}: {wrong}")
    _refuse_what_llguidance_crashes_on(schema, origin)
    inexact = _listed_integer_no_float_holds(schema)
    if inexact is not None:
        raise InputError(f"{origin}: the listed number {inexact} cannot be written exactly: the constrained decoder"
                         " reads numbers as 64-bit floats, exact to 2^53")
    beyond_reach = counts_beyond_reach(schema)
    if beyond_reach is not None:
        raise InputError(f"{origin}: no text can satisfy it: {beyond_reach}")


def _refuse_what_llguidance_crashes_on(schema: Any, origin: str) -> None:
    """InputError (one line, naming `origin`) for a schema llguidance would crash or hang on: a `const`, an `enum`
    value or a bound from -2^63 to -2^63 + 2^10 (beyond 64 bits llguidance refuses a number itself), or below it
    as a float where the type is an integer; a `multipleOf` with 2^18 among its factors; more than
    MOST_DEFINITIONS definitions."""
    nodes = schemas_in(schema)
    definitions = sum(len(node[key]) for node in nodes for key in ("$defs", "definitions")
                      if isinstance(node.get(key), dict))
    if definitions > MOST_DEFINITIONS:
        raise InputError(f"{origin}: {definitions} definitions, more than the {MOST_DEFINITIONS} llguidance follows")
    for node in nodes:
        listed = _listed_of(node)
        integer = "integer" in _schema_types(node)
        # (inside a listed array or object, `[-2^63]`, the numbers' types are not followed: read as integers)
        numbers = [(value, integer) for value in [*listed, *(node.get(bound) for bound in _BOUNDS)]]
        for value, as_integer in numbers + [(value, True) for value in _numbers_inside(listed)]:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value >= _CRASHING_BELOW:
                continue
            if (isinstance(value, int) and value >= -2**63) or (isinstance(value, float) and as_integer):
                raise InputError(f"{origin}: the number {value} is too close to -2^63 for llguidance")
        given = step = node.get("multipleOf")
        if isinstance(step, float) and math.isfinite(step) and step.is_integer():
            step = int(step)  # (compared as the integer it is; an int may be too large for a float)
        if isinstance(step, int) and not isinstance(step, bool) and step and step % _SLOW_MULTIPLE == 0:
            raise InputError(f"{origin}: multipleOf {given} is a multiple of 2^18, which llguidance cannot follow"
                             " (it runs on for minutes)")


def _listed_integer_no_float_holds(schema: Any) -> int | None:
    """A `const` or `enum` integer past 2^53 (or one inside a listed array or object) that no 64-bit float holds,
    or None: llguidance would write the nearest float, a value the schema refuses. (Past 64 bits it refuses the
    number itself.)"""
    for node in schemas_in(schema):
        listed = _listed_of(node)
        for value in [*listed, *_numbers_inside(listed)]:
            if (isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**64
                    and abs(value) > EXACT_UP_TO and _written_as(value) != value):
                return value
    return None


def _written_as(value: int) -> int:
    """The integer llguidance writes for a listed `value` of 64 bits: itself within a signed 64-bit integer where
    a float holds it, else the float's shortest digits (2^63 as 9223372036854776000)."""
    if value < 2**63 and int(float(value)) == value:
        return value
    return int(Decimal(repr(float(value))))


def _listed_of(node: dict[str, Any]) -> list[Any]:
    """The values a node's `const` and `enum` list, as written (None where it has no `const`)."""
    return [node.get("const"), *(node["enum"] if isinstance(node.get("enum"), list) else [])]


def _numbers_inside(values: list[Any]) -> Iterator[int | float]:
    """The numbers within the arrays and objects among `values` (not `values`' own), however deep."""
    pending = [value for value in values if isinstance(value, (list, dict))]
    while pending:
        value = pending.pop()
        for part in value.values() if isinstance(value, dict) else value:
            if isinstance(part, (list, dict)):
                pending.append(part)
            elif isinstance(part, (int, float)) and not isinstance(part, bool):
                yield part


def counts_beyond_reach(schema: dict[str, Any]) -> str | None:
    """Where every document of `schema` holds a value whose counts no value meets: that, in words; else None.
    (Found as the schema is read: generation would write what there is, then stop with an error, or llguidance
    would refuse the schema in words that miscount.) Every document holds the root and, of an object, its
    `required` properties; a count in a branch (`anyOf`) rules out that branch only."""
    places = SchemaPlaces(schema)
    pending: list[Any] = [schema]
    visited: set[int] = set()
    while pending:
        node = pending.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        kinds = places.types(node)
        if kinds == {"array"}:
            array = places.of_value(node, "array")
            why = (counts_apart(array, "array") or _unique_items_beyond_reach(array)) if array is not None else None
            if why is not None:
                return why
        elif kinds == {"object"}:
            an_object = places.of_value(node, "object")
            why = counts_apart(an_object, "object") if an_object is not None else None
            if why is not None:
                return why
            properties = an_object.get("properties") if an_object is not None else None
            required = an_object.get("required") if an_object is not None else None
            if isinstance(properties, dict) and isinstance(required, list):
                pending += [properties[name] for name in required if isinstance(name, str) and name in properties]
    return None


def _unique_items_beyond_reach(array: dict[str, Any]) -> str | None:
    """Where an array's `uniqueItems` asks for more items (`minItems`) than its items take distinct values (an
    enum's, booleans, the integers between bounds): that, in words; else None."""
    least = array.get("minItems")
    if array.get("uniqueItems") is not True or "prefixItems" in array or not is_count(least):
        return None
    distinct = _distinct_values(array.get("items"), least)
    if distinct is not None and least > distinct:
        return (f"uniqueItems asks for {least} distinct items (minItems), and its items take"
                f" {distinct} value{'' if distinct == 1 else 's'}")
    return None


def _distinct_values(items: Any, least: int) -> int | None:
    """How many distinct values `items` takes, where they are few enough to count (listed, booleans, integers
    between two bounds, strings by a pattern or a format, counted up to `least`); else None."""
    listed = _listed_values(items)
    if listed is not None:
        return len(listed)
    if only_the_empty_string(items):
        return 1
    bounds = integer_range(items)
    if bounds is not None:
        return bounds.size
    language = StringLanguage.of_items(items, JSON_OPTIONS) if least > 1 else None
    return language.count_up_to(least) if language is not None else None


def _listed_values(items: Any) -> list[Any] | None:
    """The distinct values `items` allows (of its `type`, if it has one), where it lists them (an enum or
    a const, not both) or is a boolean, with no other keyword to narrow them; else None."""
    if not isinstance(items, dict) or not items.keys() <= _PLAIN_ITEM_KEYS or {"enum", "const"} <= items.keys():
        return None
    kinds = items.get("type", [])
    kinds = {kinds} if isinstance(kinds, str) else kinds
    if not isinstance(kinds, list | set) or not all(isinstance(kind, str) for kind in kinds):
        return None
    if "const" in items:
        listed = [items["const"]]
    elif "enum" in items:
        listed = items["enum"]
    elif set(kinds) == {"boolean"}:
        listed = [False, True]
    else:
        return None
    if not isinstance(listed, list):
        return None
    of_its_type = [value for value in listed if not kinds or json_types(value) & set(kinds)]
    return list({json_identity(value): value for value in of_its_type}.values())


def _schema_types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a schema's `type` keyword names (a string or a list of them; a property may be named "type")."""
    kinds = schema.get("type")
    if isinstance(kinds, str):
        return {kinds}
    return {kind for kind in kinds if isinstance(kind, str)} if isinstance(kinds, list) else set()


def is_gbnf(text: str) -> bool:
    """Whether grammar text is llama.cpp's GBNF (rules written `name ::= ...`) rather than Lark (`name: ...`)."""
    return _GBNF_RULE.search(text) is not None


def _as_lark(text: str, origin: str) -> str:
    """Grammar text as Lark: GBNF converted with llguidance's converter, Lark as it is."""
    if not is_gbnf(text):
        return text
    from llguidance.gbnf_to_lark import gbnf_to_lark

    try:
        return gbnf_to_lark(_unicode_escapes_spelled_out(text))
    except Exception as exc:  # noqa: BLE001 (the converter raises plain Exceptions, e.g. for an undefined rule)
        message = _converter_message(exc, text) + _where_undefined_rule_is_used(str(exc), text)
        raise InputError(f"{origin}: cannot convert the GBNF grammar: {message}") from None


def _converter_message(exc: Exception, gbnf: str) -> str:
    """The GBNF converter's error as one line, its position as a line and column of the file `gbnf` (or its end;
    the line alone where `\\u` escapes were spelled out before it, shifting columns): the converter's own gives a
    line past the file's last and an excerpt that lost its first character."""
    position = getattr(exc, "pos", None)
    offset, text = getattr(position, "pos", None), getattr(position, "text", None)
    said = str(exc).removesuffix(f" at {position}")
    if not isinstance(offset, int) or not isinstance(text, str) or said == str(exc):
        return _one_line(str(exc), "grammar")
    if not text[offset:].strip():
        return f"{_AT_THE_END}{said}"
    before = text[:offset]
    column = f", column {offset - before.rfind(chr(10))}" if text == gbnf else ""
    return f"line {before.count(chr(10)) + 1}{column}: {said}"


def _where_undefined_rule_is_used(message: str, gbnf: str) -> str:
    """Where the rule the converter's "Rule 'name' not found" names is first used (it names no line):
    ' (used on line N)', or '' for any other message."""
    undefined = re.fullmatch(r"Rule '([\w-]+)' not found", message.strip())
    if undefined is None:
        return ""
    name = re.compile(rf"(?<![\w-]){re.escape(undefined.group(1))}(?![\w-])")
    for number, line in enumerate(gbnf.splitlines(), 1):
        if name.search(_outside_literals(line)):
            return f" (used on line {number})"
    return ""


def _outside_literals(line: str) -> str:
    """A GBNF line without its quoted strings, character classes and comment (where a rule's name is not a use)."""
    return re.sub(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|#.*', " ", line)


def _unicode_escapes_spelled_out(gbnf: str) -> str:
    """GBNF with its `\\uXXXX` and `\\UXXXXXXXX` escapes written so that llguidance's converter passes them on
    intact: as `\\xHH` below U+0100, else as the character itself. (The converter drops their leading zeros:
    `\\u00e9` would come out as `\\ue9`, which llguidance refuses, and `[\\u0041-\\u005A]` as an invalid
    regex.) A surrogate, which is no character by itself, is left as written: llguidance reads a pair of them
    in a literal as the character they encode (as JSON does), and refuses one in a character class."""

    def spelled(match: re.Match) -> str:
        escape = match[1]
        if len(escape) == 1 or escape[0] not in "uU":  # another escape (a backslash escaping a backslash, too)
            return match[0]
        code = int(escape[1:], 16)
        if code < 0x100:
            return f"\\x{code:02x}"
        return match[0] if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF else chr(code)

    return _GBNF_ESCAPE.sub(spelled, gbnf)


def _name(fmt: OutputFormat) -> str:
    """How messages name a format: its origin, else its kind."""
    return fmt.origin or {"json": "--format json", "json_schema": "JSON schema", "grammar": "grammar", "regex": "--regex"}[fmt.kind]


def value_error_message(exc: ValueError) -> str:
    """What a ValueError llguidance (or JSON) raised on a schema says, as one line (a number past 64 bits named)."""
    return _one_line(str(exc), "json_schema")


_EMPTY_STRING_LANGUAGE = "Unsatisfiable schema: Regex is empty"


def _one_line(message: str, kind: str, source: str = "") -> str:
    """llguidance's message as one line: its first line, with the `error: ...` detail of a regex error appended.

    Positions `at 3(7): ` become `line 3, column 7: ` in a grammar (`source`), or "at the end of the file: "
    where they lie past its last line (a `/regex/` or a string left open: `/system` was "line 4" of a 2-line
    file); for a regex they point into the grammar llguidance wraps it in, and for a GBNF grammar (kind
    "converted") into its Lark conversion, so they are dropped.
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return "rejected by llguidance"
    head = lines[0]
    if head == "Unsatisfiable schema: schema is false":  # (every branch ruled out: see schema_counts_apart.py)
        return NOTHING_SATISFIES
    if head.startswith(_EMPTY_STRING_LANGUAGE):  # (then the regexes it intersected, hundreds of characters)
        return f"{NOTHING_SATISFIES}: a string's pattern, format and lengths leave no string between them"
    too_large = _LLGUIDANCE_TOO_LARGE.match(head)
    if too_large:
        return f"the number {too_large[1]} does not fit llguidance's 64-bit integers"
    detail = next((line[len("error:"):].strip() for line in lines[1:] if line.startswith("error:")), None)
    if detail and head.endswith(":"):
        head = f"{head} {detail}"
    if kind == "grammar":
        lines_in_source = len(source.splitlines())
        head = _LLGUIDANCE_POSITION.sub(lambda match: _AT_THE_END if int(match[1]) > lines_in_source
                                        else f"line {match[1]}, column {match[2]}: ", head)
        return head + (" (a string or a /regex/ left open?)" if head == f"{_AT_THE_END}lexer error" else "")
    head = _LLGUIDANCE_POSITION.sub("", head)
    return head.replace(" (in regex)", "") if kind == "regex" else head
