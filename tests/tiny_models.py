"""Tiny llama-architecture GGUF models with random weights, written with the `gguf` package.

They load in llama.cpp in milliseconds and have a small vocabulary, so the exact
next-token distributions can be enumerated and compared with what the
speculative loop samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from gguf import GGUFWriter, TokenType

N_EMBD = 32
N_HEAD = 2
N_LAYER = 2
N_FF = 64
CONTEXT_LENGTH = 256

WORDS = [
    "the", "cat", "dog", "sat", "on", "mat", "a", "big", "red", "sun", "sky", "blue", "sea", "run", "jump",
    "and", "or", "but", "is", "was", "café", "naïve", "日本", "語", "über", "zoo", "cup", "tea", "hot", "cold",
]


N_SPECIAL_AND_BYTE_TOKENS = 3 + 256


def vocabulary(n_vocab: int, changed_token_id: int | None = None, space_token: bool = False,
               special_pieces: Sequence[tuple[str, int]] = ()) -> tuple[list[str], list[int]]:
    """Token texts and types: <unk>, <s>, </s>, the 256 byte tokens, then word pieces.

    With `space_token` the last piece is "▁" (a lone space), as real SentencePiece
    vocabularies have: without it llama.cpp spells a space as the bytes of "▁", which
    do not read back as a space (grammar tests need text and tokens to agree).
    `special_pieces` ((text, TokenType) pairs, e.g. ("<tool_call>", TokenType.CONTROL))
    take the places of the word pieces just before that one.
    """
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    i = 0
    while len(tokens) < n_vocab:
        word = WORDS[i % len(WORDS)]
        piece = ("▁" + word) if (i // len(WORDS)) % 2 == 0 else word + str(i // len(WORDS))
        if piece not in tokens:
            tokens.append(piece)
            types.append(TokenType.NORMAL)
        i += 1
    if changed_token_id is not None:
        tokens[changed_token_id] = tokens[changed_token_id] + "_changed"
    if space_token:
        tokens[-1] = "▁"
    for i, (text, kind) in enumerate(special_pieces):
        tokens[n_vocab - 2 - i], types[n_vocab - 2 - i] = text, kind
    return tokens, [int(t) for t in types]


def random_weights(n_vocab: int, seed: int, logit_scale: float = 2.5) -> dict[str, np.ndarray]:
    """Weights for a small llama model; `logit_scale` sets how peaked the next-token distribution is.

    Embedding dimension 0 carries a large constant, and the output rows of the
    special and byte tokens weigh it strongly negative: their logits sit ~20 below
    the word tokens', so sampling stays on the few word tokens (and never stops on
    EOS), which keeps exact distributions small enough to enumerate.
    """
    rng = np.random.default_rng(seed)

    def normal(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    embeddings = normal(n_vocab, N_EMBD, scale=1.0)
    embeddings[:, 0] = 8.0
    output = normal(n_vocab, N_EMBD, scale=logit_scale / np.sqrt(N_EMBD))
    output[:, 0] = 0.0
    output[:N_SPECIAL_AND_BYTE_TOKENS, 0] = -5.0
    weights = {
        "token_embd.weight": embeddings,
        "output_norm.weight": np.ones(N_EMBD, dtype=np.float32),
        "output.weight": output,
    }
    for layer in range(N_LAYER):
        prefix = f"blk.{layer}"
        weights[f"{prefix}.attn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        weights[f"{prefix}.ffn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            weights[f"{prefix}.{name}.weight"] = normal(N_EMBD, N_EMBD, scale=0.5 / np.sqrt(N_EMBD))
        weights[f"{prefix}.ffn_gate.weight"] = normal(N_FF, N_EMBD, scale=1.0 / np.sqrt(N_EMBD))
        weights[f"{prefix}.ffn_up.weight"] = normal(N_FF, N_EMBD, scale=1.0 / np.sqrt(N_EMBD))
        weights[f"{prefix}.ffn_down.weight"] = normal(N_EMBD, N_FF, scale=1.0 / np.sqrt(N_FF))
    return weights


def perturbed(weights: dict[str, np.ndarray], seed: int, amount: float) -> dict[str, np.ndarray]:
    """A different model close to `weights`: each tensor plus `amount` times its own scale of noise."""
    rng = np.random.default_rng(seed)
    result = {}
    for name, tensor in weights.items():
        if name.endswith("norm.weight"):
            result[name] = tensor
            continue
        noise = rng.standard_normal(tensor.shape).astype(np.float32) * tensor.std() * amount
        if name in ("token_embd.weight", "output.weight"):
            noise[:, 0] = 0.0  # keep the constant channel that silences special and byte tokens
        result[name] = tensor + noise
    return result


def write_model(
    path: Path,
    weights: dict[str, np.ndarray],
    *,
    n_vocab: int,
    changed_token_id: int | None = None,
    tokenizer_model: str = "llama",
    context_length: int | str = CONTEXT_LENGTH,
    space_token: bool = False,
    special_pieces: Sequence[tuple[str, int]] = (),
    block_count: int = N_LAYER,
    head_count: int = N_HEAD,
    rms_epsilon: float = 1e-5,
    replaced_tokens: dict[int, str] | None = None,
) -> Path:
    """Write a GGUF file for `weights` with the tiny vocabulary (`block_count`, `head_count`, `rms_epsilon` and
    token texts `replaced_tokens` as the header says them, for tests of odd files)."""
    tokens, types = vocabulary(n_vocab, changed_token_id, space_token, special_pieces)
    for number, text in (replaced_tokens or {}).items():
        tokens[number] = text
    writer = GGUFWriter(str(path), "llama")
    writer.add_name(path.stem)
    if isinstance(context_length, str):  # a header llama.cpp would refuse, for tests of odd files
        writer.add_string("llama.context_length", context_length)
    else:
        writer.add_context_length(context_length)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(block_count)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(head_count)
    writer.add_head_count_kv(N_HEAD)
    writer.add_layer_norm_rms_eps(rms_epsilon)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(0)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(n_vocab)])
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    for name, tensor in weights.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_pair(folder: Path, n_vocab: int = N_SPECIAL_AND_BYTE_TOKENS + 24, draft_noise: float = 0.15,
               context_length: int = CONTEXT_LENGTH, space_token: bool = False) -> tuple[Path, Path]:
    """A target and a draft with the same vocabulary and different weights."""
    target_weights = random_weights(n_vocab, seed=1)
    draft_weights = perturbed(target_weights, seed=2, amount=draft_noise)
    shared = dict(n_vocab=n_vocab, context_length=context_length, space_token=space_token)
    target = write_model(folder / "tiny-target.gguf", target_weights, **shared)
    draft = write_model(folder / "tiny-draft.gguf", draft_weights, **shared)
    return target, draft


def write_unloadable_model(path: Path) -> Path:
    """A complete, valid GGUF file that llama.cpp refuses: its architecture is unknown, and it has no tensors."""
    writer = GGUFWriter(str(path), "notamodel")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
