"""Keys under `patternProperties`: their patterns' unbounded repeats bounded, so a key cannot run on."""

from __future__ import annotations

import json
import re

import pytest

from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.key_patterns import KEY_REPEAT_LIMIT, bounded_key_pattern


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
])
def test_unbounded_repeats_get_a_bound(pattern: str, bounded: str) -> None:
    assert bounded_key_pattern(pattern) == bounded
    if "\\p" not in pattern:  # (Python's re has no `\p{…}`)
        long_key = "a" * (3 * KEY_REPEAT_LIMIT)
        assert not re.fullmatch(bounded, long_key)
        assert bool(re.fullmatch(bounded, "aaa")) == bool(re.fullmatch(pattern, "aaa"))


@pytest.mark.parametrize("pattern", ["^x-", "a", "^a|b$", "^[a-z]{2}$", r"^a\$", "^[a-z$",
                                     "^((a+)+)+$", r"^(\w+\s*)+$", "^a*+$"])  # (repeats of repeats: the lexer gave up)
def test_patterns_not_anchored_bounded_already_or_unreadable_are_left(pattern: str) -> None:
    assert bounded_key_pattern(pattern) is None


def test_a_key_under_a_pattern_cannot_run_on() -> None:
    schema = {"type": "object", "patternProperties": {"^[A-Za-z_][A-Za-z0-9_-]*$": {"type": "integer"}},
              "additionalProperties": False}
    assert takes(schema, '{"build_and_test-2": 1}')
    # (was: `"CImapvD_3_0-v4-21-…-v4-v4-v4…` until max_tokens, on a held-out workflow schema at T=0.8)
    assert not takes(schema, '{"' + "v4-" * 40)
    assert not takes(schema, '{"1abc": 1}')  # what the pattern refuses is still refused


def test_keys_are_bounded_only_where_no_other_key_is_taken() -> None:
    # (a key a bounded pattern no longer takes would fall to `additionalProperties`, which takes more)
    schema = {"type": "object", "patternProperties": {"^a+$": {"type": "integer"}}}
    assert not takes(schema, '{"' + "a" * 70 + '": "x"}')
