"""Read a GGUF file's header (metadata and tensor table) without loading any weights.

`gguf.GGUFReader` parses every array element into its own numpy view, which takes
seconds on a 50k-token vocabulary; this reader walks the header once with
`struct` and checks that the tensor data the header promises is really on disk,
so a truncated download is caught before llama.cpp is asked to load it.
"""

from __future__ import annotations

import errno
import math
import os
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..config.paths import user_path
from ..errors import InputError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# The gguf package is imported on first use, inside the functions below: importing it
# takes about 0.2 s (it brings its whole writer), and a run whose files were checked
# before (models/compat.py remembers verdicts) reads no header at all.


@lru_cache(maxsize=1)
def _scalar_formats() -> dict[int, str]:
    from gguf.constants import GGUFValueType as T

    return {T.UINT8: "<B", T.INT8: "<b", T.UINT16: "<H", T.INT16: "<h", T.UINT32: "<I", T.INT32: "<i",
            T.FLOAT32: "<f", T.BOOL: "<?", T.UINT64: "<Q", T.INT64: "<q", T.FLOAT64: "<d"}


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table: name, shape, ggml type and where its data starts."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def n_bytes(self) -> int | None:
        """The size of its data; None for a type this `gguf` package does not know (one newer than it)."""
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        try:
            block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(self.ggml_type)]
        except (ValueError, KeyError):
            return None
        return self.n_elements // block_size * type_size


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF file says about itself, read without touching the weights."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(repr=False)
    data_offset: int
    file_size: int

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    @property
    def n_parameters(self) -> int:
        return sum(tensor.n_elements for tensor in self.tensors)

    @property
    def context_length(self) -> int | None:
        """The context length the model was trained for; None where the header does not give a positive integer."""
        value = self.metadata.get(f"{self.architecture}.context_length")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class _Cursor:
    """Sequential little-endian reads over the header bytes."""

    def __init__(self, data: bytes, path: Path, file_size: int) -> None:
        self.data = data
        self.pos = 0
        self.path = path
        self.file_size = file_size

    def need(self, n: int) -> None:
        if self.pos + n > self.file_size:  # the file ends first (cut short, or a corrupt length): read no further
            raise _PastTheEnd()
        if self.pos + n > len(self.data):
            raise _ShortHeader()

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size)
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        self.need(length)
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def value(self, value_type: int) -> Any:
        from gguf.constants import GGUFValueType

        kind = GGUFValueType(value_type)
        if kind == GGUFValueType.STRING:
            return self.string()
        if kind == GGUFValueType.ARRAY:
            item_type = GGUFValueType(self.scalar("<I"))
            count = self.scalar("<Q")
            if item_type == GGUFValueType.STRING:
                return [self.string() for _ in range(count)]
            if item_type == GGUFValueType.ARRAY:
                raise ValueError("an array of arrays, which no GGUF model holds")
            fmt = _scalar_formats()[item_type]
            size = struct.calcsize(fmt) * count
            self.need(size)
            values = list(struct.unpack_from(f"<{count}{fmt[1:]}", self.data, self.pos))
            self.pos += size
            return values
        return self.scalar(_scalar_formats()[kind])


class _ShortHeader(Exception):
    """The header needs more bytes than were read so far."""


class _PastTheEnd(Exception):
    """The header needs more bytes than the file holds."""


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """Parse the header of the GGUF file at `path`.

    Raises InputError with a one-line reason for a missing path, a directory, a pipe or device, a file
    that is not GGUF, a corrupt header, or a file shorter than its tensor table says.
    """
    path = user_path(path)
    try:
        exists, is_dir, is_file = path.exists(), path.is_dir(), path.is_file()
    except OSError as exc:  # a name too long, a folder it may not search
        raise InputError(f"{path}: cannot reach it ({exc.strerror or exc})") from None
    if not exists:
        raise InputError(f"{path}: {why_missing(path)}")
    if is_dir:
        raise InputError(f"{path}: is a directory, not a GGUF model file")
    if not is_file:  # a FIFO or a device: reading it could wait forever
        raise InputError(f"{path}: not a regular file (a pipe or a device), not a GGUF model file")
    try:
        return _read_header(path)
    except OSError as exc:  # unreadable: permissions, an I/O error
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def why_missing(path: Path) -> str:
    """Why a path that does not lead to a file leads nowhere: a loop of links, a dangling link, or no such file."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links, not a file"
    if path.is_symlink():
        return f"a link to {os.readlink(path)}, which does not exist"
    return "no such file"


def _read_header(path: Path) -> GGUFHeader:
    file_size = path.stat().st_size
    with path.open("rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise InputError(f"{path}: not a GGUF file (bad magic bytes)")
        # Headers are usually a few MB (vocabularies); grow the window until it parses.
        window = 8 << 20
        while True:
            handle.seek(0)
            data = handle.read(window)
            try:
                return _parse(data, path, file_size)
            except _PastTheEnd:
                raise InputError(f"{path}: truncated GGUF file (header ends early)") from None
            except _ShortHeader:
                if len(data) < window:  # the whole file was read (it shrank while being read)
                    raise InputError(f"{path}: truncated GGUF file (header ends early)") from None
                window *= 4
            except (ValueError, KeyError, struct.error, OverflowError, MemoryError) as exc:
                raise InputError(f"{path}: corrupt GGUF header ({exc})") from None


def _parse(data: bytes, path: Path, file_size: int) -> GGUFHeader:
    cursor = _Cursor(data, path, file_size)
    cursor.pos = 4
    version = cursor.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    n_tensors = cursor.scalar("<Q")
    n_kv = cursor.scalar("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.scalar("<I"))
    tensors = []
    for _ in range(n_tensors):
        name = cursor.string()
        n_dims = cursor.scalar("<I")
        shape = tuple(cursor.scalar("<Q") for _ in range(n_dims))
        ggml_type = cursor.scalar("<I")
        offset = cursor.scalar("<Q")
        tensors.append(TensorInfo(name, shape, ggml_type, offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise ValueError(f"general.alignment is {alignment!r}, not a positive integer")
    data_offset = -(-cursor.pos // alignment) * alignment
    # (a file without tensors, a vocabulary's, needs no padding after its header; a tensor of a type unknown
    # here is checked only for where it starts, llama.cpp may know it)
    data_end = max(t.offset + (t.n_bytes or 0) for t in tensors) + data_offset if tensors else cursor.pos
    if data_end > file_size:
        raise InputError(
            f"{path}: truncated GGUF file ({file_size} bytes on disk, tensor data needs {data_end})"
        )
    if tensors:  # (a model's: llama.cpp would load it)
        _check_hyperparameters(metadata)
        _check_vocabulary(metadata)
    return GGUFHeader(path, version, metadata, tensors, data_offset, file_size)


LLAMA_MAX_LAYERS, LLAMA_MAX_EXPERTS = 512, 1024  # llama.cpp's bounds (llama-hparams.h)


def _check_hyperparameters(metadata: dict[str, Any]) -> None:
    """ValueError for a value llama.cpp asserts on while loading (an abort, not an error it reports): a layer
    count outside 1..512, an epsilon that is NaN or negative, more experts than it takes."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        return

    def number(key: str) -> Any:
        value = metadata.get(f"{arch}.{key}")
        return None if isinstance(value, (bool, str, list)) else value

    layers = number("block_count")
    if layers is not None and not 1 <= layers <= LLAMA_MAX_LAYERS:
        raise ValueError(f"{arch}.block_count is {layers}: llama.cpp takes 1 to {LLAMA_MAX_LAYERS} layers")
    for key in ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon"):
        epsilon = number(key)
        if epsilon is not None and not (math.isfinite(epsilon) and epsilon >= 0):
            raise ValueError(f"{arch}.{key} is {epsilon}: not a finite number of 0 or more")
    experts, used = number("expert_count"), number("expert_used_count")
    if experts is not None and experts > LLAMA_MAX_EXPERTS:
        raise ValueError(f"{arch}.expert_count is {experts}: llama.cpp takes at most {LLAMA_MAX_EXPERTS}")
    if used is not None and used > (experts or 0):
        raise ValueError(f"{arch}.expert_used_count is {used}, more than the {experts or 0} experts")


_UTF8_BYTES = [byte for byte in range(0xF5) if byte not in (0xC0, 0xC1)]  # (the others are in no UTF-8 text)


def _check_vocabulary(metadata: dict[str, Any]) -> None:
    """ValueError for a vocabulary llama.cpp asserts on (an abort, or an uncaught C++ exception, on loading or on
    some text): no tokenizer at all, two tokens of one text, a SentencePiece vocabulary without a way to spell a
    byte it does not hold (`<0x51>`, or the byte itself)."""
    model, tokens = metadata.get("tokenizer.ggml.model"), metadata.get("tokenizer.ggml.tokens")
    if model == "none":
        raise ValueError('tokenizer.ggml.model is "none": llama.cpp has no tokenizer for its text')
    if not isinstance(tokens, list) or not all(isinstance(token, str) for token in tokens):
        return  # (a vocabulary of another shape: read, and reported, where it is used)
    seen = set(tokens)
    if len(seen) < len(tokens) - tokens.count("") + ("" in seen):  # (llama.cpp names each empty one apart)
        first: dict[str, int] = {}
        for number, token in enumerate(tokens):
            if token in first and token:
                raise ValueError(f"tokens {first[token]} and {number} are both {token!r} (llama.cpp takes one text"
                                 " per token)")
            first[token] = number
    if model == "llama":
        for byte in _UTF8_BYTES:
            if f"<0x{byte:02X}>" not in seen and (byte > 0x7F or chr(byte) not in seen):
                raise ValueError(f"its SentencePiece vocabulary has no token <0x{byte:02X}> for that byte (llama.cpp"
                                 " would end the process on text that needs it)")
