"""A loaded model's vocabulary as llguidance sees it: the token strings its grammar masks are computed over.

Built once per model (about half a second on a 49k vocabulary): each token's
bytes, control tokens (and user-defined `<...>` tokens) marked with a 0xFF
prefix so a grammar can name them as special tokens, every end-of-generation
id as llguidance's EOS, and llama.cpp's own tokenizer for text the grammar
forces.
"""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import Any

_SPECIAL_PREFIX = b"\xff"


def build_grammar_tokenizer(llama_cpp: ModuleType, vocab: Any, n_vocab: int, end_of_generation: list[int]) -> Any:
    """An `llguidance.LLTokenizer` for the vocabulary `vocab` (a `llama_vocab_p`)."""
    from llguidance import LLTokenizer

    special = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
    user_defined = llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
    buffer = ctypes.create_string_buffer(256)
    pieces: list[bytes] = []
    for token in range(n_vocab):
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, True)
        if n < 0:  # the piece needs -n bytes
            buffer = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, True)
        piece = bytes(buffer[: max(n, 0)])
        attributes = llama_cpp.llama_vocab_get_attr(vocab, token)
        if attributes & special or (attributes & user_defined and piece.startswith(b"<") and piece.endswith(b">")):
            piece = _SPECIAL_PREFIX + piece
        pieces.append(piece)
    tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
    return LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
        tokens=pieces, vocab_ptr=vocab, tokenize_fptr=tokenize, eos_token=end_of_generation or None, slices=None
    )
