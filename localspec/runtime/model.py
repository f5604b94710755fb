"""A GGUF model in llama.cpp, driven through the low-level batch API.

The wrapper owns the KV-cache invariant: `self.tokens` is exactly what the cache
holds for sequence 0, token i at position i. Callers move that state in one of two
ways: `sync(tokens)` makes the cache hold a given sequence (keeping the longest
common prefix, dropping the rest with `llama_memory_seq_rm`, evaluating what is
missing), and `eval(tokens, ...)` appends tokens and returns logits only for the
rows asked for. Logits for every position are never allocated.

The hot path stays out of Python loops: the batch's token, position and
logits-flag arrays are numpy views filled by slice, the sequence ids are written
once, logits come back as one block (or, with `copy=False`, as a view of
llama.cpp's own buffer), and token pieces are cached.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence, TypeVar

import numpy as np

from ..errors import LocalspecError
from ..settings import ALL_LAYERS, ModelSettings
from . import fatal, rpc
from .chat_template import SpecialTexts
from .devices import gpu_devices
from .grammar_vocab import build_grammar_tokenizer
from .kv_state import values_by_row
from .library import (
    captured_log,
    clear_errors,
    default_threads,
    interrupts_held,
    last_error,
    llama,
    lone_token_computed_like_a_batch,
    raise_pending_interrupt,
)
from .placement import Placement, parse_load_log

SEQ_ID = 0


@contextmanager
def _named_if_it_aborts(path: Path) -> Iterator[None]:
    """Within the block, an abort inside llama.cpp (an assertion on a malformed file's header, which no Python code
    survives) ends the process with one line naming `path` (fatal.py), not ggml's backtrace."""
    fatal.install()
    unregister = fatal.on_fatal(lambda: f"while loading {path}")
    try:
        yield
    finally:
        unregister()


def _not_loaded(path: str | Path, what: str) -> LocalspecError:
    """The error for a load llama.cpp refused, with the reason it logged first."""
    return LocalspecError(f"{path}: llama.cpp could not load {what} ({last_error() or 'no reason given'})")


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


LLAMA_CONTEXT_STEP = 256  # llama.cpp rounds every context size up to a multiple of this


def _rounded_context(n_tokens: int) -> int:
    """The context llama.cpp creates for `n_tokens`: the next multiple of LLAMA_CONTEXT_STEP."""
    return -(-n_tokens // LLAMA_CONTEXT_STEP) * LLAMA_CONTEXT_STEP


def _context_note(asked: int, largest: int, name: str) -> str | None:
    """What a user who asked for an n_ctx of `asked` should know of the context they get (None: nothing)."""
    rounded = _rounded_context(largest)
    if largest < asked:
        return f"n_ctx {asked} is more than {name} was trained for: its context holds {rounded} tokens"
    if largest != rounded:
        return f"n_ctx {largest} becomes {rounded}: llama.cpp rounds the context up to a multiple of {LLAMA_CONTEXT_STEP}"
    return None


def runs_on_cpu_alone(settings: ModelSettings) -> bool:
    """Whether a model with these settings is computed by the CPU alone (no GPU, no RPC worker)."""
    if rpc.worker_devices(settings.rpc) or rpc.registered_workers():
        return False
    return settings.n_gpu_layers == 0 or not gpu_devices()


def _devices_for(settings: ModelSettings) -> ctypes.Array | None:
    """The devices a model may use, as llama.cpp's NULL-terminated list; None: llama.cpp's own choice.

    Once any model has RPC workers, every model gets an explicit list: its own
    workers first (as llama.cpp orders them), then the local GPUs, so that a
    draft without workers stays local.
    """
    workers = rpc.worker_devices(settings.rpc)
    if not workers and not rpc.registered_workers():
        return None
    chosen = [*workers, *rpc.local_accelerators()]
    return (ctypes.c_void_p * (len(chosen) + 1))(*chosen, None)


def _tokenize(llama_cpp: Any, vocab: Any, text: str, add_special: bool, parse_special: bool) -> list[int]:
    """Text to token ids with llama.cpp's tokenizer of `vocab` (see `Model.tokenize`)."""
    data = text.encode("utf-8")
    capacity = len(data) + 8
    buffer = (llama_cpp.llama_token * capacity)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buffer, capacity, add_special, parse_special)
    if n < 0:
        capacity = -n
        buffer = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buffer, capacity, add_special, parse_special)
    return list(buffer[:n])


_F = TypeVar("_F", bound="_Freed")


class _Freed:
    """Something holding llama.cpp memory: freed by `close()`, on leaving a `with` block, or when collected."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _F) -> _F:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown may have torn down llama_cpp already
            pass


class Vocabulary(_Freed):
    """A GGUF model's tokenizer alone: llama.cpp loads its vocabulary (`vocab_only`), no weights, no context.

    For tokenizing many texts (`memory add`) without the memory and load time of the whole model;
    `tokenize` gives the same ids as the full `Model.tokenize`.
    """

    def __init__(self, path: str | Path, verbose: bool = False) -> None:
        self._llama = llama_cpp = llama(verbose)
        self.path = Path(path)
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        params.n_gpu_layers = 0
        clear_errors()
        with captured_log(), interrupts_held(), _named_if_it_aborts(self.path):
            self._model = llama_cpp.llama_model_load_from_file(os.fsencode(self.path), params)
        if not self._model:
            raise _not_loaded(self.path, "the vocabulary")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = False) -> list[int]:
        """Text to token ids, as `Model.tokenize`."""
        return _tokenize(self._llama, self._vocab, text, add_special, parse_special)

    def end_of_generation_ids(self) -> list[int]:
        """The ids llama.cpp ends a generation at (end of text, end of turn...)."""
        return [i for i in range(self._llama.llama_vocab_n_tokens(self._vocab)) if self._llama.llama_vocab_is_eog(self._vocab, i)]

    def close(self) -> None:
        """Free the vocabulary. Safe to call twice (and to interrupt: see `Model.close`)."""
        with interrupts_held():
            model, self._model = getattr(self, "_model", None), None
            if model:
                self._llama.llama_model_free(model)


def check_loadable(path: str | Path) -> None:
    """LocalspecError where llama.cpp would refuse to load `path` (its header, vocabulary or tensor shapes), found
    without reading the weights: the load is stopped where it would begin to read them (well under a second)."""
    llama_cpp = llama(False)
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    params.use_extra_bufts = False
    reached_the_weights = []

    def stop_at_the_weights(progress: float, user_data: object) -> bool:
        reached_the_weights.append(True)
        return False

    params.progress_callback = callback = llama_cpp.llama_progress_callback(stop_at_the_weights)
    clear_errors()
    with captured_log(), interrupts_held(), _named_if_it_aborts(Path(path)):
        model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    del callback
    if model:  # (a model without weights to read)
        llama_cpp.llama_model_free(model)
    elif not reached_the_weights:
        raise _not_loaded(path, "the model")


class Model(_Freed):
    """A loaded GGUF model with one llama.cpp context and a single sequence."""

    def __init__(
        self, path: str | Path, settings: ModelSettings = ModelSettings(), verbose: bool = False,
        *, extra_buffers: bool | None = None, one_token_decodes: bool = False, size_context_later: bool = False,
        proposes_only: bool = False,
    ) -> None:
        """`extra_buffers`: allow llama.cpp's extra CPU buffer types (repacked weights). None: only when
        `settings.repack` is "on"; "auto" is decided by the caller (`app.repack`), which probes first,
        because on some CPUs and builds they crash on batched decodes.

        `one_token_decodes`: let llama.cpp compute one token at a time (a micro-batch of one: it splits
        every batch itself). Where repacked weights crash on batches but not on a lone token (AMX tiles
        that a virtual machine does not provide: a lone token takes another kernel), a draft model,
        which decodes one token at a time anyway, still gets their faster kernels.

        `proposes_only`: a draft model, whose logits only propose tokens that the target then judges:
        on the CPU it takes llama.cpp's flash-attention kernel, faster there, which a target does not
        (see `_create_context`).

        The context (the KV cache) is created at once, at its configured size, unless
        `size_context_later`: then `reserve` sizes it for one run, or first use creates it."""
        self._llama = llama_cpp = llama(verbose)
        self.path = Path(path)
        self.settings = settings
        model_params = llama_cpp.llama_model_default_params()
        if extra_buffers is None:
            extra_buffers = settings.repack == "on"
        model_params.use_extra_bufts = extra_buffers
        if settings.n_gpu_layers not in (None, ALL_LAYERS):  # llama.cpp's default (-1) offloads every layer
            model_params.n_gpu_layers = settings.n_gpu_layers
        devices = _devices_for(settings)
        if devices is not None:  # NULL-terminated; kept alive until the load returns
            model_params.devices = ctypes.cast(devices, ctypes.c_void_p)
        clear_errors()
        with captured_log() as load_log, interrupts_held(), _named_if_it_aborts(self.path):
            self._model = llama_cpp.llama_model_load_from_file(os.fsencode(self.path), model_params)
        if not self._model:
            raise _not_loaded(self.path, "the model")
        self.placement: Placement = parse_load_log(
            "".join(load_log), rpc.registered_workers(), extra_buffers=extra_buffers, one_token_decodes=one_token_decodes
        )
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._model)

        n_ctx = settings.n_ctx or self.n_ctx_train
        self._largest_n_ctx = min(n_ctx, self.n_ctx_train) if self.n_ctx_train > 0 else n_ctx
        self.context_note = _context_note(n_ctx, self._largest_n_ctx, self.path.name)
        self._runs_on_cpu = runs_on_cpu_alone(settings)  # decided now: RPC workers a later model registers do not change it
        # On the CPU a target computes attention without flash attention (see `_create_context`); a draft with it.
        self.flash_attention_off = self._runs_on_cpu and not proposes_only
        self._ctx: Any = None
        self._reserved_n_ctx: int | None = None  # the size `reserve` asked for, once it has
        if not size_context_later:
            try:
                self._create_context(self._largest_n_ctx)
            except BaseException:
                self.close()
                raise
        self._tokens: list[int] = []
        # How many cached positions, from the first, hold keys and values this model did not compute by reading
        # them here (restored from a saved state, or copied from another model's cache: `copy_cache_from`), and
        # whether copies are still tried (none after one was refused).
        self.restored_positions = 0
        self.takes_copies = True
        # Where llama.cpp computes a token read alone unlike one read in a batch, the position of the first
        # token read alone (None: none is).
        self._lone_reads_differ = not lone_token_computed_like_a_batch() and not self.placement.one_token_decodes
        # A recurrent (or hybrid) model's state cannot drop its last token: no padded pass can be undone there.
        self._drops_a_suffix = not (self._llama.llama_model_is_recurrent(self._model)
                                    or self._llama.llama_model_is_hybrid(self._model))
        self._first_read_alone: int | None = None
        self._pieces: dict[int, bytes] = {}  # tokens' text, read one by one (until `_pieces_by_id` holds it all)
        self._tokens_holding: dict[int, np.ndarray] = {}
        self._tokens_by_text: dict[bytes, list[int]] | None = None  # (tokens_spelling's map, built when asked)
        self._token_lengths: np.ndarray | None = None
        self._pieces_by_id: list[bytes] | None = None
        self._word_forms: dict[int, int] = {}
        self._end_of_generation: dict[int, bool] = {}
        self._special_texts: SpecialTexts | None = None
        self._grammar_tokenizer: Any = None

    def reserve(self, n_tokens: int) -> None:
        """Size the context for `n_tokens` (a one-shot prompt and its output) if it is not created yet (the largest
        reservation holds); it is created where first needed (a draft model's only once it drafts).

        It gets the smallest multiple of 256 tokens that holds them, within the
        configured n_ctx: a smaller cache is quicker to set up (on the demo pair a
        4096-token context takes about 50 ms more per model than a 512-token one),
        and a one-shot run never needs more.
        """
        self._refuse_if_closed()
        if self._ctx is None:  # (the largest reservation holds)
            wanted = min(self._largest_n_ctx, _rounded_context(max(n_tokens, 1)))
            self._reserved_n_ctx = max(self._reserved_n_ctx or 0, wanted)

    def _ensure_context(self) -> None:
        """Create the context where it is first needed (a draft model's, after the first token): at the size
        `reserve` asked for, else the configured one."""
        if self._ctx is None:
            self._create_context(self._reserved_n_ctx or self._largest_n_ctx)

    def _refuse_if_closed(self) -> None:
        if getattr(self, "_model", None) is None:
            raise LocalspecError(f"{self.path}: the model was closed")

    def _create_context(self, n_ctx: int) -> None:
        self._refuse_if_closed()
        llama_cpp = self._llama
        n_threads = self.settings.n_threads or default_threads()
        context_params = llama_cpp.llama_context_default_params()
        context_params.n_ctx = n_ctx
        context_params.n_batch = self.settings.n_batch
        context_params.n_ubatch = 1 if self.placement.one_token_decodes else self.settings.n_batch
        context_params.n_seq_max = 1
        context_params.n_threads = n_threads
        context_params.n_threads_batch = n_threads
        context_params.no_perf = True
        if self.flash_attention_off:
            # The CPU's flash-attention kernel splits a lone token's attention over a long cache
            # (past 256 tokens) unlike a batch's rows, so the same token's logits would differ between
            # target-only and speculative passes; without it they are bit-identical, and on this CPU
            # no slower (verify batches over long contexts were faster). A draft model's logits only
            # propose: it keeps the kernel, which decodes its one token a step faster (the demo's
            # draft: 160 against 142 tokens a second at 200 tokens of context, llama-bench, 2 threads).
            context_params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        elif self._runs_on_cpu:
            context_params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        clear_errors()
        context = None
        try:
            with interrupts_held():
                context = llama_cpp.llama_init_from_model(self._model, context_params)
            raise_pending_interrupt()
        except KeyboardInterrupt:  # (held until the context was made: free it)
            if context:
                llama_cpp.llama_free(context)
            raise
        if not context:
            raise LocalspecError(f"{self.path}: llama.cpp could not create a context ({last_error() or 'out of memory?'})")
        batch = None
        try:
            n_batch = llama_cpp.llama_n_batch(context)
            batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
            for i in range(n_batch):  # every row belongs to sequence 0, once and for all
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = SEQ_ID
            self._batch, self._n_batch = batch, n_batch
            self._batch_tokens = np.ctypeslib.as_array(batch.token, shape=(n_batch,))
            self._batch_positions = np.ctypeslib.as_array(batch.pos, shape=(n_batch,))
            self._batch_wants_logits = np.ctypeslib.as_array(batch.logits, shape=(n_batch,))
            self._n_ctx = llama_cpp.llama_n_ctx(context)
            self._memory = llama_cpp.llama_get_memory(context)
        except BaseException:  # (Ctrl-C) nothing of a half-made context stays allocated
            if batch is not None:
                llama_cpp.llama_batch_free(batch)
            llama_cpp.llama_free(context)
            raise
        self._ctx = context  # last: a context is in use only once all of it is set up

    @property
    def context_size(self) -> int:
        """The context's size in tokens, without creating it: the created context's, else the size it will be
        created at (the one `reserve` asked for, else the configured one, rounded up as llama.cpp does)."""
        if self._ctx is not None:
            return self._n_ctx
        return _rounded_context(self._reserved_n_ctx or self._largest_n_ctx)

    @property
    def n_ctx(self) -> int:
        """The context's size in tokens (creating the context, at its reserved or configured size, if not yet
        created; `context_size` tells it without creating it)."""
        self._ensure_context()
        return self._n_ctx

    @property
    def n_batch(self) -> int:
        """The most tokens one decode takes."""
        self._ensure_context()
        return self._n_batch

    # -- vocabulary ---------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = False) -> list[int]:
        """Text to token ids. `add_special` adds BOS/EOS where the vocabulary asks for them;
        `parse_special` turns control-token text (`<|im_end|>`) into control tokens: only
        for a template's own text, never for text that came from a user."""
        return _tokenize(self._llama, self._vocab, text, add_special, parse_special)

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The raw bytes of one token (may be part of a multi-byte UTF-8 character)."""
        if not special:
            if self._pieces_by_id is not None and 0 <= token < len(self._pieces_by_id):
                return self._pieces_by_id[token]
            piece = self._pieces.get(token)
            if piece is None:
                piece = self._pieces[token] = self._token_bytes(token, special=False)
            return piece
        return self._token_bytes(token, special=True)

    def word_form(self, token: int) -> int:
        """One token for a word however it was tokenized: a word's token without the space before it (`The`,
        as an answer's first word or after a quote) maps to the token with the space (` The`, as the word stands
        mid-sentence), where the vocabulary has one; every other token to itself. Lookups that compare forms
        find a quote whose first word follows another character than in its source."""
        form = self._word_forms.get(token)
        if form is None:
            form = self._word_forms[token] = self._spaced_form(token)
        return form

    def _spaced_form(self, token: int) -> int:
        piece = self.token_bytes(token)
        if not piece[:1].isalnum():  # (an ASCII letter or digit starts a word that a space may precede)
            return token
        spaced = self.tokenize(" " + piece.decode("utf-8", errors="replace"), add_special=False)
        return spaced[0] if len(spaced) == 1 else token

    @property
    def context_limit(self) -> int:
        """The most tokens this model's context can hold: the configured n_ctx, within its training length
        (the context itself is not created for this), as llama.cpp rounds it up."""
        return _rounded_context(self._largest_n_ctx)

    def longest_token_bytes(self) -> int:
        """The most bytes of text one token stands for."""
        return int(self.token_lengths().max(initial=1))

    def tokens_holding(self, byte: int) -> np.ndarray:
        """The sorted ids of the tokens whose text holds `byte`."""
        found = self._tokens_holding.get(byte)
        if found is None:
            mark = bytes((byte,))
            found = np.array([token for token, piece in enumerate(self._all_pieces()) if mark in piece], dtype=np.int64)
            self._tokens_holding[byte] = found
        return found

    def tokens_spelling(self, text: bytes) -> list[int]:
        """The ids of the tokens whose text is `text`."""
        if self._tokens_by_text is None:
            self._tokens_by_text = {}
            for token, piece in enumerate(self._all_pieces()):
                self._tokens_by_text.setdefault(piece, []).append(token)
        return self._tokens_by_text.get(text, [])

    def token_lengths(self) -> np.ndarray:
        """Each token's length in bytes of text, by id."""
        if self._token_lengths is None:
            self._token_lengths = np.array([len(piece) for piece in self._all_pieces()], dtype=np.int64)
        return self._token_lengths

    def _all_pieces(self) -> list[bytes]:
        """Every token's text, by id (a scan of the vocabulary, done once and kept)."""
        if self._pieces_by_id is None:
            known = self._pieces
            self._pieces_by_id = [known.get(token) or self._token_bytes(token, special=False) for token in range(self.n_vocab)]
            self._pieces = {}  # (each token's text is kept once: in the list from here on)
        return self._pieces_by_id

    def _token_bytes(self, token: int, *, special: bool) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        n = self._llama.llama_token_to_piece(self._vocab, token, buffer, len(buffer), 0, special)
        if n < 0:
            buffer = ctypes.create_string_buffer(-n)
            n = self._llama.llama_token_to_piece(self._vocab, token, buffer, len(buffer), 0, special)
        return buffer.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def detokenize_special(self, token: int) -> str:
        """The text of a special token such as BOS ("" when the id is invalid)."""
        if token < 0 or token >= self.n_vocab:
            return ""
        return self.token_bytes(token, special=True).decode("utf-8", errors="replace")

    def special_texts(self) -> SpecialTexts:
        """The texts that `tokenize(..., parse_special=True)` turns into control or unknown tokens."""
        if self._special_texts is None:
            self._special_texts = self._read_special_texts()
        return self._special_texts

    def _read_special_texts(self) -> SpecialTexts:
        llama_cpp = self._llama
        parsed_only_when_special = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        texts, strip_before, strip_after = [], [], []
        for token in range(self.n_vocab):
            attributes = llama_cpp.llama_vocab_get_attr(self._vocab, token)
            if not attributes & parsed_only_when_special:
                continue
            text = (llama_cpp.llama_vocab_get_text(self._vocab, token) or b"").decode("utf-8", errors="replace")
            texts.append(text)
            if attributes & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP:
                strip_before.append(text)
            if attributes & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP:
                strip_after.append(text)
        return SpecialTexts(texts, strip_before=strip_before, strip_after=strip_after)

    def is_end_of_generation(self, token: int) -> bool:
        verdict = self._end_of_generation.get(token)
        if verdict is None:
            verdict = self._end_of_generation[token] = bool(self._llama.llama_vocab_is_eog(self._vocab, token))
        return verdict

    def end_of_generation_tokens(self) -> list[int]:
        """Every id that ends a generation (EOS, end-of-turn, ...), in id order."""
        return [token for token in range(self.n_vocab) if self._llama.llama_vocab_is_eog(self._vocab, token)]

    def grammar_tokenizer(self) -> Any:
        """The vocabulary as llguidance's grammar engine sees it (built on first use, then kept)."""
        if self._grammar_tokenizer is None:
            self._grammar_tokenizer = build_grammar_tokenizer(
                self._llama, self._vocab, self.n_vocab, self.end_of_generation_tokens()
            )
        return self._grammar_tokenizer

    @property
    def bos_token(self) -> int:
        return self._llama.llama_vocab_bos(self._vocab)

    @property
    def eos_token(self) -> int:
        return self._llama.llama_vocab_eos(self._vocab)

    @property
    def adds_bos(self) -> bool:
        return bool(self._llama.llama_vocab_get_add_bos(self._vocab))

    def metadata(self, key: str) -> str | None:
        """A GGUF metadata value as a string, or None when the key is absent."""
        buffer = ctypes.create_string_buffer(4096)
        n = self._llama.llama_model_meta_val_str(self._model, key.encode(), buffer, len(buffer))
        if n < 0:
            return None
        if n >= len(buffer):
            buffer = ctypes.create_string_buffer(n + 1)
            self._llama.llama_model_meta_val_str(self._model, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        template = self._llama.llama_model_chat_template(self._model, None)
        return template.decode("utf-8", errors="replace") if template else None

    # -- KV cache -----------------------------------------------------------------

    @property
    def tokens(self) -> tuple[int, ...]:
        """The tokens whose keys and values the cache holds, in position order."""
        return tuple(self._tokens)

    @property
    def lone_reads_differ(self) -> bool:
        """Whether llama.cpp computes a token read alone unlike one read in a batch of two or more.

        Its llamafile matrix kernels (on unless built with -DGGML_LLAMAFILE=OFF) take over from two rows
        up and round differently from the single-row kernels; a model computed one token at a time
        (`one_token_decodes`) reads every token alone, so alike.
        """
        return self._lone_reads_differ

    @property
    def pads_a_lone_token(self) -> bool:
        """Whether a one-token pass is padded to two rows (where the context has room for the second).

        Where a lone token is computed unlike a batch (`lone_reads_differ`), a pass of two rows is
        computed like every longer one; the cache must be able to drop the second row (not a recurrent
        model's state, which would have to read the whole text again), and a batch must hold two.
        """
        return self._lone_reads_differ and self._drops_a_suffix and self.n_batch >= 2

    def pads_lone_tokens(self, context_length: int) -> bool:
        """Whether a one-token pass over a context of `context_length` should be padded to two rows
        (`pads_a_lone_token`, with room for the second row)."""
        return self.pads_a_lone_token and context_length + 1 <= self.n_ctx

    @property
    def tokens_read_in_batches(self) -> int:
        """How many of `tokens`, from the first, were computed as a batch computes them: all of them
        unless `lone_reads_differ` and one was read alone."""
        return len(self._tokens) if self._first_read_alone is None else self._first_read_alone

    def keep(self, n: int) -> None:
        """Keep the first `n` cached tokens and drop the rest."""
        if n >= len(self._tokens):
            return
        if not self._llama.llama_memory_seq_rm(self._memory, SEQ_ID, n, -1):
            # Recurrent caches cannot drop a suffix: start over from an empty cache.
            kept = self._tokens[:n]
            self.clear()
            self.sync(kept)
            return
        del self._tokens[n:]
        self.restored_positions = min(self.restored_positions, n)
        if self._first_read_alone is not None and self._first_read_alone >= n:
            self._first_read_alone = None

    @property
    def computed_by_cpu_alone(self) -> bool:
        """Whether the CPU alone computes this model (no GPU layers, no RPC worker)."""
        return self._runs_on_cpu

    @property
    def reads_alike_in_batches(self) -> bool:
        """Whether this model's cache holds the same keys and values for a text however its reading was
        split into batches of two or more tokens (computed by the CPU alone, on a machine with no GPU to
        take batches over). Where `lone_reads_differ`, a token read alone is computed otherwise."""
        return self._runs_on_cpu and not gpu_devices()

    @property
    def keeps_every_position(self) -> bool:
        """Whether the cache keeps each token's keys and values, so that a prefix of them can be kept
        and restored (not a recurrent or hybrid model's state, nor a sliding window's)."""
        return self._drops_a_suffix and self._llama.llama_model_n_swa(self._model) == 0

    def cache_state_size(self) -> int:
        """Bytes `cache_state()` would return now."""
        self._ensure_context()
        return self._llama.llama_state_seq_get_size(self._ctx, SEQ_ID)

    def cache_state(self) -> bytearray:
        """The cache's contents (llama.cpp's sequence state: the keys and values of `tokens`)."""
        size = self.cache_state_size()
        state = bytearray(size)
        buffer = (ctypes.c_uint8 * size).from_buffer(state)
        with interrupts_held():
            written = self._llama.llama_state_seq_get_data(self._ctx, buffer, size, SEQ_ID)
        del buffer  # (so that the bytes can be cut to what was written)
        del state[written:]
        raise_pending_interrupt()
        return state

    def restore_cache_state(self, tokens: Sequence[int], state: bytes | bytearray) -> bool:
        """Make the cache hold `tokens` from `cache_state()`'s output for them; False (the cache left
        empty) where llama.cpp refuses it (another model's, too long for this context, malformed)."""
        self._ensure_context()
        self.clear()
        if not 0 < len(tokens) <= self._n_ctx or not state:
            return False
        array = ctypes.c_uint8 * len(state)
        buffer = array.from_buffer(state) if isinstance(state, bytearray) else array.from_buffer_copy(state)
        clear_errors()
        with interrupts_held():
            restored = self._llama.llama_state_seq_set_data(self._ctx, buffer, len(state), SEQ_ID) == len(state)
        del buffer
        if not (restored and self._llama.llama_memory_seq_pos_min(self._memory, SEQ_ID) == 0
                and self._llama.llama_memory_seq_pos_max(self._memory, SEQ_ID) == len(tokens) - 1):
            self.clear()  # (a state of another length than `tokens` is not theirs)
            raise_pending_interrupt()
            return False
        self._tokens = list(tokens)
        self.restored_positions = len(tokens)
        raise_pending_interrupt()
        return True

    def same_shape(self, other: Model) -> bool:
        """Whether `other` computes keys and values of the same shape from the same positions: its architecture,
        layers, heads, width, rotary embedding, parameter count and vocabulary are this model's. Meant for the
        same weights at another precision, such as a draft made from its target, whose cache this model can
        then take (`copy_cache_from`); another model of the same dimensions would only draft from it worse."""
        def shape(model: Model) -> tuple:
            llama, handle = model._llama, model._model
            architecture = model.metadata("general.architecture")
            return (architecture, model.metadata(f"{architecture}.rope.freq_base"), llama.llama_model_n_layer(handle),
                    llama.llama_model_n_embd(handle), llama.llama_model_n_head(handle),
                    llama.llama_model_n_head_kv(handle), llama.llama_model_n_params(handle),
                    llama.llama_model_rope_type(handle), llama.llama_model_rope_freq_scale_train(handle),
                    llama.llama_model_n_swa(handle), model.n_vocab, model.n_ctx_train)
        return self.keeps_every_position and shape(self) == shape(other)

    def copy_cache_from(self, source: Model) -> bool:
        """Make this cache hold `source`'s tokens with the keys and values `source` computed for them, copied
        rather than evaluated (a model of the same shape, see `same_shape`); its values rewritten a row a cell
        where this cache keeps them so (`kv_state`). False where the state cannot be rewritten (this cache left
        as it was) or llama.cpp refuses it (this cache left empty); then `takes_copies` is False from then on."""
        state = source.cache_state()
        by_row = self._runs_on_cpu and not self.flash_attention_off  # (with flash attention: values a row a cell)
        if (by_row and not values_by_row(state)) or not self.restore_cache_state(source.tokens, state):
            self.takes_copies = False
            return False
        return True

    def drop_unrecorded(self) -> None:
        """Drop what the cache holds past `tokens`: a decode interrupted (Ctrl-C) after llama.cpp
        stored its tokens but before they were recorded. The recorded prefix stays cached."""
        if self._ctx is None:
            return
        if not self._llama.llama_memory_seq_rm(self._memory, SEQ_ID, len(self._tokens), -1):
            self.clear()

    def clear(self) -> None:
        """Empty the cache whatever its bookkeeping says (after an interrupted decode)."""
        if self._ctx is not None:
            self._llama.llama_memory_seq_rm(self._memory, SEQ_ID, -1, -1)
        self._tokens = []
        self._first_read_alone = None
        self.restored_positions = 0

    def sync(self, tokens: Sequence[int]) -> None:
        """Make the cache hold exactly `tokens`, reusing the longest common prefix.

        Where `lone_reads_differ`, a missing token that would be read alone (the only one, or the last of
        an odd number in batches of two) is read with a copy of it after it (then dropped), as a batch
        computes it: the cache then holds what reading the whole text computes, whatever it held before
        (a restored prompt, an earlier request's text)."""
        self.keep(common_prefix_length(self._tokens, tokens))
        self._read_rest(tokens, last_row=False)

    def _read_rest(self, tokens: Sequence[int], *, last_row: bool) -> np.ndarray | None:
        """Evaluate what the cache lacks of `tokens` (it holds a prefix of them), padding a token that would be
        read alone as `sync` says; the last token's logits (a copy) if `last_row`, else None."""
        missing = list(tokens[len(self._tokens) :])
        if not missing:
            return None
        if self.pads_lone_tokens(len(tokens)) and len(self._batches(len(missing))[-1]) == 1:
            if len(missing) > 1:
                self.eval(missing[:-1], logits="none")
            rows = self.eval(missing[-1:] * 2, logits=2 if last_row else "none")
            self.keep(len(tokens))
        else:
            rows = self.eval(missing, logits="last" if last_row else "none")
        return rows[0] if last_row else None

    def eval(self, tokens: Sequence[int], *, logits: str | int = "last", copy: bool = True) -> np.ndarray:
        """Append `tokens` to the cache and return their logits.

        `logits` is "last" (one row), "all" (one row per token; at most n_batch tokens),
        a number n (the last n tokens' rows, all in the final batch) or "none". Returns an
        array of shape (rows, n_vocab). With `copy=False` it is a read-only view of
        llama.cpp's buffer, valid until this model's next decode.
        """
        self._ensure_context()
        n_batch = self._n_batch
        batches = self._batches(len(tokens))
        if isinstance(logits, int):
            if not batches or not 0 < logits <= len(batches[-1]):
                raise ValueError(f"cannot return the last {logits} rows of {len(tokens)} tokens in one batch of {n_batch}")
            logits = "all" if logits == len(tokens) else logits
        if len(self._tokens) + len(tokens) > self._n_ctx:
            raise LocalspecError(
                f"context full: {len(self._tokens) + len(tokens)} tokens do not fit in n_ctx={self._n_ctx}"
            )
        if logits == "all" and len(tokens) > n_batch:
            raise ValueError(f"cannot return logits for {len(tokens)} tokens in one batch of {n_batch}")
        n_rows = 0
        for batch in batches:
            chunk = tokens[batch.start : batch.stop]
            is_final_chunk = batch.stop == len(tokens)
            if logits == "all":
                n_rows = len(chunk)
                self._decode(chunk, rows=slice(None))
            elif logits != "none" and is_final_chunk:
                n_rows = 1 if logits == "last" else int(logits)
                self._decode(chunk, rows=slice(-n_rows, None))
            else:
                self._decode(chunk, rows=None)
        if n_rows == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        rows = self._output_logits(n_rows)
        return rows.copy() if copy else rows

    def _batches(self, n_tokens: int) -> list[range]:
        """The positions (within a read of `n_tokens`) each decode takes: n_batch at a time. Where
        `lone_reads_differ`, a last batch of one token takes one from the batch before it (n_batch > 2)."""
        n_batch = self._n_batch
        starts = [*range(0, n_tokens, n_batch), n_tokens]
        if self._lone_reads_differ and len(starts) > 2 and n_tokens - starts[-2] == 1 and n_batch > 2:
            starts[-2] -= 1
        return [range(start, stop) for start, stop in zip(starts, starts[1:])]

    def logits_after(self, tokens: Sequence[int]) -> np.ndarray:
        """Make the cache hold exactly `tokens` and return the logits for the token that follows them (a copy).

        Their last token is (re)evaluated, in one batch with whatever the cache lacks before it; where
        `lone_reads_differ` and it would be read alone, with a copy of it after it (then dropped), as `sync`
        reads one: its row is then computed as any batch computes it."""
        if not tokens:
            raise ValueError("no tokens to read")
        self.keep(common_prefix_length(self._tokens, tokens[:-1]))
        row = self._read_rest(tokens, last_row=True)
        assert row is not None  # (the last token at least was missing)
        return row

    def next_logits(self, context: Sequence[int], *, copy: bool = True) -> np.ndarray:
        """Logits for the token that follows `context` (whose last token is (re)evaluated, in one batch
        with whatever the cache lacks before it)."""
        self.keep(common_prefix_length(self._tokens, context[:-1]))
        return self.eval(context[len(self._tokens) :], logits="last", copy=copy)[0]

    def _decode(self, tokens: Sequence[int], rows: slice | None) -> None:
        """Decode `tokens` at the next positions, asking for logits on `rows` of the batch (None: none)."""
        n = len(tokens)
        first_position = len(self._tokens)
        self._batch.n_tokens = n
        self._batch_tokens[:n] = tokens
        self._batch_positions[:n] = np.arange(first_position, first_position + n)
        self._batch_wants_logits[:n] = 0
        if rows is not None:
            self._batch_wants_logits[:n][rows] = 1
        clear_errors()
        with interrupts_held():
            status = self._llama.llama_decode(self._ctx, self._batch)
        raise_pending_interrupt()
        if status != 0:
            raise LocalspecError(f"llama_decode failed with status {status} ({last_error() or 'no reason given'})")
        if n == 1 and self._lone_reads_differ and self._first_read_alone is None:
            self._first_read_alone = first_position
        self._tokens.extend(tokens)

    def _output_logits(self, n_rows: int) -> np.ndarray:
        """The last decode's logits rows, in batch order, as a read-only view of llama.cpp's buffer."""
        pointer = self._llama.llama_get_logits(self._ctx)
        rows = np.ctypeslib.as_array(pointer, shape=(n_rows, self.n_vocab))
        rows.flags.writeable = False
        return rows

    # -- lifetime -----------------------------------------------------------------

    def close(self) -> None:
        """Free the context, batch and weights. Safe to call twice, and to interrupt: each pointer is let go
        of before it is freed, with Ctrl-C held meanwhile (interrupted between a free and forgetting what it
        freed, a second close, when the object is collected, would free it again: a crash)."""
        with interrupts_held():
            context, batch, model = getattr(self, "_ctx", None), getattr(self, "_batch", None), getattr(self, "_model", None)
            self._ctx = self._memory = self._model = None
            self._tokens = []  # nothing is cached any more
            if context:
                self._llama.llama_batch_free(batch)
                self._llama.llama_free(context)
            if model:
                self._llama.llama_model_free(model)
