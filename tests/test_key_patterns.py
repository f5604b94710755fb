"""Keys under `patternProperties`: their patterns' unbounded repeats bounded, so a key cannot run on."""

from __future__ import annotations

import json

import pytest

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.key_patterns import (KEY_REPEAT_LIMIT, NESTED_KEY_REPEAT_LIMIT, as_full_match,
                                          bounded_key_pattern, bounded_repeats)
from localspec.engine.schema_places import _matches


def takes(schema: dict, text: str) -> bool:
    from llguidance import LLMatcher

    from localspec.engine.byte_tokenizer import byte_tokenizer

    matcher = LLMatcher(byte_tokenizer(), compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar)
    return matcher.consume_tokens(list(text.encode())) and not matcher.is_error()


@pytest.mark.parametrize("pattern, bounded", [
    ("^[A-Za-z_][A-Za-z0-9_-]*$", "^[A-Za-z_][A-Za-z0-9_-]{0,64}$"),
    ("^(a)+[b-z]+$", "^(a){1,64}[b-z]{1,64}$"),
    (r"^\p{L}+$", r"^\p{L}{1,64}$"),  # (an escape's own braces are no repeat)
    ("^[*+]+$", "^[*+]{1,64}$"),  # (nor are `*` and `+` inside a class)
    (r"^\d{3,}$", r"^\d{3,64}$"),
    ("^(ab)+?$", "^(ab){1,64}?$"),
    (r"^(\w+\s*)+$", r"^(\w{1,64}\s{0,64}){1,8}$"),  # (a repeat of repeats: at most 8 times, see NESTED_...)
    ("^[A-Z][A-Za-z]*(-[A-Za-z]+)*$", "^[A-Z][A-Za-z]{0,64}(-[A-Za-z]{1,64}){0,8}$"),
    ("^((a)+)+$", "^((a){1,64}){1,8}$"),
])
def test_unbounded_repeats_get_a_bound(pattern: str, bounded: str) -> None:
    assert bounded_key_pattern(pattern) == bounded
    long_key = "a" * (KEY_REPEAT_LIMIT * NESTED_KEY_REPEAT_LIMIT + 1)
    assert _matches(bounded, long_key) is False  # (as llguidance reads it: Python's re backtracks for ever here)
    assert _matches(bounded, "aaa") == _matches(pattern, "aaa")


@pytest.mark.parametrize("pattern", ["^x-", "a", "^a|b$", "^[a-z]{2}$", r"^a\$", "^[a-z$",
                                     "^((a+)+)+$", "^((a+)*b)+$", "^a*+$"])  # (repeats nested deeper: not read)
def test_patterns_not_anchored_bounded_already_or_unreadable_are_left(pattern: str) -> None:
    assert bounded_key_pattern(pattern) is None


@pytest.mark.parametrize("pattern, bounded", [
    (r"^[0-9]+ (day|week)s?$", r"^[0-9]{1,32} (day|week)s?$"),
    (r"^\d*\.[0-9]{2,}$", r"^\d{0,32}\.[0-9]{2,32}$"),
    (r"^([a-z]+-)*[0-9]+$", r"^([a-z]+-)*[0-9]{1,32}$"),  # (other repeats as written, nested or not)
    (r"^\\d+$", None),  # (a backslash, then `d`s: no digit)
    (r"^[a-z0-9]+$", None),  # (not a run of digits only)
    (r"[0-9]+", None),  # (unanchored: any text around it)
    (r"^[0-9]{1,3}$", None),  # (bounded already)
    (r"^[0-9]{40,}$", None),  # (asks for more)
])
def test_runs_of_digits_alone_get_a_bound(pattern: str, bounded: str | None) -> None:
    rewritten = bounded_repeats(pattern, 32, digits_only=True)
    assert (None if rewritten is None else rewritten[0]) == bounded


def test_a_key_under_a_pattern_cannot_run_on() -> None:
    schema = {"type": "object", "patternProperties": {"^[A-Za-z_][A-Za-z0-9_-]*$": {"type": "integer"}},
              "additionalProperties": False}
    assert takes(schema, '{"build_and_test-2": 1}')
    # (was: `"CImapvD_3_0-v4-21-…-v4-v4-v4…` until max_tokens, on a held-out workflow schema at T=0.8)
    assert not takes(schema, '{"' + "v4-" * 40)
    assert not takes(schema, '{"1abc": 1}')  # what the pattern refuses is still refused


def test_a_key_of_parts_under_a_pattern_stops_after_eight_parts() -> None:
    """A trailer's name, `GitHub-Lint-Github-Github-…` until max_tokens at T=0.8 on a held-out schema."""
    schema = {"type": "object", "propertyNames": {"pattern": "^[A-Z][A-Za-z]*(-[A-Za-z]+)*$"}, "maxProperties": 4,
              "additionalProperties": {"type": "string"}}
    assert takes(schema, '{"Signed-Off-By": "x", "' + "-".join(["Git"] * 9) + '": "y"}')
    assert not takes(schema, '{"' + "-".join(["Git"] * 10))


def test_keys_are_bounded_only_where_no_other_key_is_taken() -> None:
    # (a key a bounded pattern no longer takes would fall to `additionalProperties`, which takes more)
    schema = {"type": "object", "patternProperties": {"^a+$": {"type": "integer"}}}
    assert not takes(schema, '{"' + "a" * 70 + '": "x"}')


@pytest.mark.parametrize("pattern, regex", [
    ("^ab$", "(?:ab)"), ("ab", r"[\s\S]*(?:ab)[\s\S]*"), ("^x-", r"(?:x-)[\s\S]*"), ("^[^a$]$", "(?:[^a$])"),
    (r"^a\$", r"(?:a\$)[\s\S]*"), ("^a|b$", None), ("(^a)", None), ("^(a|b)$", "(?:(a|b))"), ("^a[$", None),
])
def test_a_pattern_as_llguidance_takes_a_whole_key(pattern: str, regex: str | None) -> None:
    """JSON Schema's patterns match anywhere in a text; llguidance's regular expressions take it whole."""
    assert as_full_match(pattern) == regex
