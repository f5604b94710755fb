"""Whether an llguidance grammar takes a text, over bytes (the tests of the schema rewrites ask it of many texts)."""

from __future__ import annotations

import functools
from typing import Any


def accepts(grammar: str, text: str) -> bool:
    """Whether `grammar` takes `text` whole, written byte by byte."""
    matcher = _fresh_matcher(grammar).deep_copy()
    return matcher.consume_tokens(list(text.encode())) and not matcher.is_error() and matcher.is_accepting()


@functools.lru_cache(maxsize=8)
def _fresh_matcher(grammar: str) -> Any:
    """A matcher of `grammar` over bytes that nothing has fed (copied for each text: building one takes longer)."""
    from llguidance import LLMatcher

    from localspec.engine.byte_tokenizer import byte_tokenizer

    return LLMatcher(byte_tokenizer(), grammar)
