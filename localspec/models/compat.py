"""Can this draft model draft for that target? llama.cpp's vocabulary rule, from GGUF metadata.

The checks, each reported with its reason: same tokenizer model; same add-BOS and
add-EOS flags and, where a token is added, the same id; vocabulary sizes within
128 of each other; the same token text for every id from 5 up to the smaller size.

Verdicts are remembered: entries are keyed by each file's resolved path, size
and modification time, so a changed or replaced file is checked again. Reading
a 250k-token vocabulary takes about a second; with the cache, starting `run` on
a known pair does not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.atomic import write_text_atomic
from ..config.files import file_version, read_cache_json
from ..config.paths import cache_dir
from ..errors import InputError
from .gguf import GGUFHeader, read_gguf_header

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_COMPARED_TOKEN_ID = 5


@dataclass(frozen=True)
class VocabInfo:
    """The parts of a GGUF vocabulary that decide draft compatibility."""

    tokenizer_model: str
    tokens: tuple[str, ...]
    add_bos: bool
    add_eos: bool
    bos_id: int | None
    eos_id: int | None

    def digest(self) -> str:
        """A short digest of the tokenizer model and every token's text."""
        digest = hashlib.sha256(self.tokenizer_model.encode())
        digest.update("\0".join(self.tokens).encode("utf-8", errors="replace"))
        return digest.hexdigest()[:16]

    @property
    def size(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_header(cls, header: GGUFHeader) -> "VocabInfo":
        """The vocabulary a GGUF header describes; InputError (naming the file and the key) where a value
        is not of the kind llama.cpp reads it as."""

        def value(key: str, kinds: type | tuple[type, ...], default: Any) -> Any:
            found = header.get(key, default)
            if not isinstance(found, kinds) or (isinstance(found, list) and not all(isinstance(t, str) for t in found)):
                raise InputError(f"{header.path}: {key} is not {_KIND_WORDS[kinds]} (its vocabulary cannot be read)")
            return found

        model = value("tokenizer.ggml.model", str, "none")
        bos_by_default, eos_by_default = _added_by_default(model, value("tokenizer.ggml.pre", str, "default"))
        return cls(
            tokenizer_model=model,
            tokens=tuple(value("tokenizer.ggml.tokens", list, [])),
            add_bos=bool(value("tokenizer.ggml.add_bos_token", (bool, int), bos_by_default)),
            add_eos=bool(value("tokenizer.ggml.add_eos_token", (bool, int), eos_by_default)),
            bos_id=value("tokenizer.ggml.bos_token_id", (int, type(None)), None),
            eos_id=value("tokenizer.ggml.eos_token_id", (int, type(None)), None),
        )


# The BPE pre-tokenizers after which llama.cpp adds BOS where a file does not say (llama-vocab.cpp).
_BPE_ADDING_BOS = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                   "jina-v5-nano", "tekken", "chameleon"}


def _added_by_default(tokenizer_model: str, pre_tokenizer: str) -> tuple[bool, bool]:
    """(BOS, EOS): whether llama.cpp adds them to a text where the file does not say: BOS for SentencePiece
    ("llama") and WordPiece ("bert") vocabularies and some BPE ("gpt2") ones, EOS for T5's ("t5")."""
    if tokenizer_model in ("llama", "bert"):
        return True, False
    if tokenizer_model == "t5":
        return False, True
    return tokenizer_model == "gpt2" and pre_tokenizer in _BPE_ADDING_BOS, False


_KIND_WORDS: dict[Any, str] = {str: "a text", list: "a list of texts", (bool, int): "true or false",
                               (int, type(None)): "a token id"}


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class CompatReport:
    checks: tuple[Check, ...]

    @property
    def compatible(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def first_failure(self) -> Check | None:
        return next((check for check in self.checks if not check.passed), None)


def check_compatible(target: VocabInfo, draft: VocabInfo) -> CompatReport:
    """Run every check; later checks are skipped (reported as failed) once the tokenizers differ."""
    checks = [
        Check(
            "tokenizer model",
            target.tokenizer_model == draft.tokenizer_model,
            f"target {target.tokenizer_model!r}, draft {draft.tokenizer_model!r}",
        ),
        _flag_check("BOS", target.add_bos, draft.add_bos, target.bos_id, draft.bos_id),
        _flag_check("EOS", target.add_eos, draft.add_eos, target.eos_id, draft.eos_id),
        _size_check(target, draft),
        _token_text_check(target, draft),
    ]
    return CompatReport(tuple(checks))


def _size_check(target: VocabInfo, draft: VocabInfo) -> Check:
    empty = [role for role, vocab in (("target", target), ("draft", draft)) if not vocab.size]
    if empty:  # (a file whose tokens are missing: its own fault, not the pair's)
        return Check("vocabulary size", False, f"the {' and the '.join(empty)} hold{'s' if len(empty) == 1 else ''}"
                                               " no tokens (tokenizer.ggml.tokens is missing or empty)")
    return Check("vocabulary size", abs(target.size - draft.size) <= MAX_VOCAB_SIZE_DIFFERENCE,
                 f"target {target.size}, draft {draft.size} (at most {MAX_VOCAB_SIZE_DIFFERENCE} apart)")


def _flag_check(label: str, target_adds: bool, draft_adds: bool, target_id: int | None, draft_id: int | None) -> Check:
    if target_adds != draft_adds:
        return Check(f"add {label}", False, f"target adds {label}: {target_adds}, draft: {draft_adds}")
    if target_adds and target_id != draft_id:
        return Check(f"add {label}", False, f"{label} id differs: target {target_id}, draft {draft_id}")
    return Check(f"add {label}", True, f"both {'add' if target_adds else 'do not add'} {label}")


def _token_text_check(target: VocabInfo, draft: VocabInfo) -> Check:
    common = min(target.size, draft.size)
    for token_id in range(FIRST_COMPARED_TOKEN_ID, common):
        if target.tokens[token_id] != draft.tokens[token_id]:
            return Check(
                "token texts",
                False,
                f"token {token_id} differs: target {target.tokens[token_id]!r}, draft {draft.tokens[token_id]!r}",
            )
    return Check("token texts", True, f"ids {FIRST_COMPARED_TOKEN_ID}..{common - 1} match")


# -- remembered verdicts ------------------------------------------------------------------

CACHE_FILE_NAME = "verdicts.json"
PAIR_CHECKS_VERSION = 3  # raised when the checks change: a pair's verdict is then made again
MAX_REMEMBERED = 512  # verdicts kept, the oldest dropped first (each file version a user ran adds a few)


def _load() -> dict:
    """The remembered verdicts; a cache file that is unreadable or not what `_store` wrote counts as empty."""
    entries, _ = read_cache_json(cache_dir() / CACHE_FILE_NAME)
    return entries if isinstance(entries, dict) else {}


def _store(entries: dict) -> None:
    """Write the verdicts, the latest `MAX_REMEMBERED` of them (new ones are added last)."""
    kept = dict(list(entries.items())[-MAX_REMEMBERED:])
    try:
        write_text_atomic(cache_dir() / CACHE_FILE_NAME, json.dumps(kept))
    except (OSError, InputError):
        pass  # a cache that cannot be written (or is not a regular file) only costs time


def _remembered_report(entry: object) -> CompatReport | None:
    """A pair's remembered checks, or None when the entry is not what `check_pair_cached` stored."""
    try:
        checks = tuple(Check(str(name), bool(passed), str(detail)) for name, passed, detail in entry)
    except (TypeError, ValueError):
        return None
    return CompatReport(checks) if checks else None


def _file_key(path: Path) -> str:
    return f"file:{file_version(path)}"


def check_pair(target: Path, draft: Path) -> None:
    """Refuse a draft that cannot draft for `target` with the failed check (both files checked whole)."""
    failure = check_pair_cached(target, draft).first_failure
    if failure is not None:
        raise InputError(
            f"draft {draft.name} cannot draft for target {target.name}: {failure.name} check failed ({failure.detail})"
        )


def _is_file(path: Path) -> bool:
    """Whether `path` is a regular file; False where it cannot be looked at (`read_gguf_header` says why)."""
    try:
        return path.is_file()
    except OSError:
        return False


def check_file(path: Path) -> None:
    """Raise InputError unless `path` is a complete GGUF file (remembered once seen whole)."""
    if not _is_file(path):
        read_gguf_header(path)  # raises the one-line reason: missing, or a directory
    entries = _load()
    if entries.get(_file_key(path)):
        return
    _remember_whole(entries, read_gguf_header(path))
    _store(entries)


def has_chat_template(path: Path) -> bool:
    """Whether the model file carries a chat template (`tokenizer.chat_template`), remembered per file version
    with the verdict that it is whole (the header is read once for both)."""
    entries = _load()
    remembered = entries.get(_file_key(path))
    if isinstance(remembered, dict) and isinstance(remembered.get("chat_template"), bool):
        return remembered["chat_template"]
    _remember_whole(entries, read_gguf_header(path))  # (an entry of an older version, True, is made anew)
    _store(entries)
    return entries[_file_key(path)]["chat_template"]


def _remember_whole(entries: dict, header: GGUFHeader) -> None:
    """Remember what a whole file's header says: that it is whole (a true value), and whether it has a chat
    template."""
    entries[_file_key(header.path)] = {"chat_template": bool(header.get("tokenizer.chat_template"))}


def vocab_identity(path: Path) -> str:
    """A short digest of a model's vocabulary (tokenizer model and every token's text), remembered per file version.

    Models with the same identity tokenize alike: what one wrote can be drafted for the other.
    """
    entries = _load()
    key = f"vocab:{file_version(path)}"
    if isinstance(entries.get(key), str):
        return entries[key]
    entries[key] = VocabInfo.from_header(read_gguf_header(path)).digest()
    _store(entries)
    return entries[key]


def check_pair_cached(target: Path, draft: Path) -> CompatReport:
    """`check_compatible` on the two files' vocabularies, remembered per file version.

    On a miss each header is read once, which both validates the file and gives
    its vocabulary; a remembered verdict implies both files were whole.
    """
    for path in (target, draft):
        if not _is_file(path):
            read_gguf_header(path)  # raises the one-line reason: missing, or a directory
    entries = _load()
    key = f"pair{PAIR_CHECKS_VERSION}:{file_version(target)}::{file_version(draft)}"
    remembered = _remembered_report(entries[key]) if key in entries else None
    if remembered is not None:
        return remembered
    target_header, draft_header = read_gguf_header(target), read_gguf_header(draft)
    report = check_compatible(VocabInfo.from_header(target_header), VocabInfo.from_header(draft_header))
    entries[key] = [[c.name, c.passed, c.detail] for c in report.checks]
    _remember_whole(entries, target_header)
    _remember_whole(entries, draft_header)
    _store(entries)
    return report
