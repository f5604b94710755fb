"""An llguidance tokenizer of single bytes: a matcher over it checks any text, byte by byte, without a model."""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=1)
def byte_tokenizer() -> Any:
    """An llguidance tokenizer of the 256 bytes and an end token: any text can be written with it."""
    from llguidance import LLTokenizer

    encoder = {bytes([byte]): byte for byte in range(256)}
    return LLTokenizer.from_tiktoken(encoder=encoder, special_tokens={"<end>": 256}, pattern=r"[\s\S]", eos_token=256,
                                     n_vocab=257)


@functools.lru_cache(maxsize=256)
def byte_matcher(grammar: str) -> Any:
    """A matcher of an llguidance `grammar` over bytes that nothing has fed (callers feed a `deep_copy`: building
    one takes longer); None where llguidance refuses the grammar."""
    from llguidance import LLMatcher

    try:
        matcher = LLMatcher(byte_tokenizer(), grammar, log_level=0)
    except Exception:  # (whatever llguidance raises rather than reports)
        return None
    return None if matcher.is_error() else matcher
