"""Whether an llguidance grammar takes a text, over bytes (the tests of the schema rewrites ask it of many texts)."""

from __future__ import annotations

from localspec.engine.byte_tokenizer import byte_matcher


def accepts(grammar: str, text: str) -> bool:
    """Whether `grammar` takes `text` whole, written byte by byte (a grammar llguidance refuses takes none)."""
    fresh = byte_matcher(grammar)
    if fresh is None:
        return False
    matcher = fresh.deep_copy()
    return matcher.consume_tokens(list(text.encode())) and not matcher.is_error() and matcher.is_accepting()
