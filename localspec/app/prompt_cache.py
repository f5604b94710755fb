"""Each model's reading of the last prompt, kept in the cache folder for the next process.

A one-shot `localspec run` starts with empty models, and each reads its whole
prompt, the chat template's system part too, which is the same run after run
(21 of the 41 tokens of a short question to the demo models: about 0.2 s of a
one-token-per-decode draft's reading, and 0.15 s of the target's). When a
session closes, `PromptCache.save` writes each model's cache state for the
prompt it read (llama.cpp's sequence state: the keys and values of its tokens);
the next session's `restore` loads it where its own prompt starts with the same
tokens, and only the rest is read.

Restored keys and values must be what reading would have computed, or the text
would depend on what the cache held. So only models that read a text alike
however it is split into batches take part (`Model.reads_alike_in_batches`:
the CPU alone, where the demo models' logits after a prompt read in one batch or
in pieces are the same bit for bit), and whose cache keeps every position (not a
recurrent state, not a sliding window). Where llamafile's kernels compute a token
read alone otherwise (`Model.lone_reads_differ`), only the tokens read in batches
are saved, and the model reads the rest of a prompt after a restored state in
batches of two or more. A draft model computes attention with the flash kernel,
which reads a text split otherwise a little otherwise: `Session` restores its
state only where its probabilities cannot change the text (not under rejection
sampling at a temperature).

It is a cache: one file per model file, build, placement and attention
kernel, replaced by the latest save (written atomically; two processes' saves
leave one whole file), the MAX_FILES used last kept; one that does not fit (truncated, another format, its
state's bytes other than its digest says, refused by llama.cpp) is ignored and replaced. It holds a prompt's
tokens, so `history remove` and `memory clear` empty it too (`forget_prompts`), and `--no-prompt-cache` keeps
a run from reading or writing it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

from ..config.atomic import atomic_path
from ..config.files import file_version
from ..config.paths import cache_dir
from ..errors import InputError
from ..runtime.model import Model, common_prefix_length
from ..runtime.repack import build_fingerprint

FOLDER_NAME = "prompts"
MAGIC = b"localspec prompt cache 2\n"  # then one line of JSON ({"tokens": [...], "sha256": ...}), then the state
MIN_TOKENS = 4  # a shorter common start is not worth a file's reading or writing
MAX_STATE_BYTES = 64 * 2**20  # a longer prompt is saved up to the tokens whose state fits
MAX_FILES = 8  # files used last (read or written) are kept; older ones (another build's, a model gone) go
ABANDONED_SECONDS = 3600  # a save takes seconds: a half-written file this old is a killed run's
_MAX_HEADER_BYTES = 16 * 2**20  # (a header line longer than this is not one this module wrote)


def prompts_folder() -> Path:
    return cache_dir() / FOLDER_NAME


def forget_prompts() -> None:
    """Delete every saved prompt state (they hold prompts' tokens); OSError where the folder cannot be removed."""
    if prompts_folder().exists():
        shutil.rmtree(prompts_folder())


class PromptCache:
    """Saves and restores the models' states for the last prompt (`folder`: the cache folder's by default)."""

    def __init__(self, folder: Path | None = None, notes: Callable[[str], None] = lambda message: None,
                 warn: Callable[[str], None] = lambda message: None) -> None:
        """`notes` hears what `--verbose` shows (a file ignored, to be replaced); `warn`, once, that the cache
        cannot be written (the user asked for it, or has it by default, and runs go slower without it)."""
        self.folder = folder or prompts_folder()
        self.notes, self.warn = notes, warn
        self._warned = False
        self._saved: dict[str, tuple[int, ...]] = {}  # file name -> the tokens it holds (as read or written here)
        self._paths: dict[tuple[str, str], Path] = {}  # (model path, placement) -> its file

    def restore(self, model: Model, prompt: Sequence[int]) -> int:
        """Load the saved state of `model` where it starts like `prompt` (keeping that common start);
        the number of tokens the model then holds (0: nothing restored, the model untouched)."""
        path = self._path(model)
        if path is None:
            return 0
        def usable(tokens: tuple[int, ...]) -> bool:  # (a context sized for a shorter run cannot take a longer state)
            return common_prefix_length(tokens, prompt) >= MIN_TOKENS and len(tokens) <= model.context_size

        read = self._read(path, model.n_vocab, wants_state=usable)  # (a state of no use here is not read)
        if read is None or read[1] is None:
            return 0
        tokens, state = read
        common = common_prefix_length(tokens, prompt)
        if not model.restore_cache_state(tokens, state):
            self.notes(f"prompt cache: llama.cpp refused {path}; it will be replaced")
            self._saved[path.name] = ()  # (nothing usable: `save` replaces it)
            return 0
        model.keep(common)
        with contextlib.suppress(OSError):
            os.utime(path)  # used: the last to go (`_keep_the_newest`)
        return common

    def save(self, model: Model, prompt: Sequence[int]) -> None:
        """Save what `model` holds of `prompt` (its cache is cut to that), unless the file holds it already.
        Problems are only noted: a cache that cannot be written costs speed, nothing else."""
        path = self._path(model)
        if path is None:
            return
        model.drop_unrecorded()  # (an interrupted decode's cells would be saved with the rest)
        n = min(common_prefix_length(model.tokens, prompt), model.tokens_read_in_batches)
        held = self._saved[path.name] if path.name in self._saved else self._held(path)
        if n < MIN_TOKENS or (held is not None and len(held) >= n and held[:n] == tuple(prompt[:n])):
            return
        model.keep(n)
        size = model.cache_state_size()
        if size > MAX_STATE_BYTES:  # keep the start of a long prompt (its state grows with every token), measured first
            model.keep(n * MAX_STATE_BYTES // size)
            size = model.cache_state_size()
        tokens = model.tokens
        if len(tokens) < MIN_TOKENS or size > MAX_STATE_BYTES:
            return
        state = model.cache_state()
        try:
            with atomic_path(path, private=True) as temp, temp.open("wb") as file:
                file.write(MAGIC)
                # (the state's digest: damaged bytes restored as keys and values gave NaN scores, blamed on the model)
                header = {"tokens": list(tokens), "sha256": hashlib.sha256(state).hexdigest()}
                file.write(json.dumps(header).encode() + b"\n")
                file.write(state)
        except (OSError, InputError) as exc:  # (InputError: the path is taken by something not a file)
            reason = f"{exc.filename}: {exc.strerror or exc}" if isinstance(exc, OSError) and exc.filename else exc
            if not self._warned:
                self.warn(f"warning: the prompt cache could not be saved ({reason}): later runs read the whole prompt"
                          " again (`--no-prompt-cache` turns it off)")
            self._warned = True
            return
        self._saved[path.name] = tuple(tokens)
        self._keep_the_newest()

    def _keep_the_newest(self) -> None:
        """Delete all but the MAX_FILES files used last: each build of llama.cpp, model file and placement
        has its own, and a file no later run will match would otherwise stay for good; and the half-written
        files of saves a kill ended, ABANDONED_SECONDS old (up to MAX_STATE_BYTES each, nothing else removed them)."""
        try:
            used = sorted(self.folder.glob("*.state"), key=lambda path: path.stat().st_mtime, reverse=True)
            for path in used[MAX_FILES:]:
                path.unlink(missing_ok=True)
            now = time.time()
            for path in self.folder.glob(".*.state.*.partial"):
                if now - path.stat().st_mtime > ABANDONED_SECONDS:
                    path.unlink(missing_ok=True)
        except OSError:  # (a file another process removed meanwhile: next time)
            pass

    def _path(self, model: Model) -> Path | None:
        """The file for this model file, llama.cpp build and placement (None: the model takes no part: see
        the module docstring; or its file is gone)."""
        if not (model.reads_alike_in_batches and model.keeps_every_position):
            return None
        # (flash attention stores the values otherwise: a state saved without it is not one with it)
        key = (str(model.path), json.dumps({**model.placement.to_dict(), "flash_attention_off": model.flash_attention_off},
                                           sort_keys=True))
        if key not in self._paths:
            try:
                identity = file_version(model.path)
            except OSError:
                return None
            digest = hashlib.sha256("\n".join((identity, build_fingerprint(), key[1])).encode("utf-8", "surrogateescape"))
            self._paths[key] = self.folder / f"{digest.hexdigest()[:24]}.state"
        return self._paths[key]

    def _held(self, path: Path) -> tuple[int, ...] | None:
        """The tokens the file holds (None: no file, or not one of ours)."""
        read = self._read(path, None, wants_state=lambda tokens: False)
        return read[0] if read is not None else None

    def _read(self, path: Path, n_vocab: int | None,
              wants_state: Callable[[tuple[int, ...]], bool]) -> tuple[tuple[int, ...], bytes | None] | None:
        """(tokens, state) from the file, the state only where `wants_state(tokens)` (else None); None where
        there is no file or it does not fit (noted)."""
        try:
            with path.open("rb") as file:
                if file.read(len(MAGIC)) != MAGIC:
                    raise ValueError("not a prompt cache of this version")
                header = json.loads(file.readline(_MAX_HEADER_BYTES))
                tokens = tuple(header["tokens"])
                if not all(type(token) is int and 0 <= token < (n_vocab or 2**31) for token in tokens):
                    raise ValueError("tokens out of range")
                state = file.read(MAX_STATE_BYTES + 1) if wants_state(tokens) else None
                if state is not None and hashlib.sha256(state).hexdigest() != header["sha256"]:
                    raise ValueError("its state is damaged: its bytes are not those saved")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:  # (RecursionError: nested too deeply)
            problem = str(exc) or type(exc).__name__
        else:
            if state is None or 0 < len(state) <= MAX_STATE_BYTES:
                self._saved[path.name] = tokens
                return tokens, state
            problem = f"its state is {'empty' if not state else 'too large'}"
        self.notes(f"prompt cache: ignoring {path} ({problem}); it will be replaced")
        self._saved[path.name] = ()  # (nothing usable: `save` replaces it)
        return None
