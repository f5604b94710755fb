"""llama.cpp's sequence state, read far enough to store its values row by row.

`llama_state_seq_get_data` writes a sequence's cache as: a magic number, the sequence's id, the
number of streams; per stream the number of cells, each cell's position and sequence ids, then
the keys of every layer (one row a cell) and the values of every layer. A cache without flash
attention keeps each layer's values transposed (one row per value dimension, a column a cell)
and writes them so; one with flash attention keeps and writes them a row a cell. llama.cpp
restores a state only into a cache that keeps its values the same way, so a target's cache (no
flash attention on the CPU) can be given to a draft model of the same shape (flash attention on)
only rewritten. Both layouts take the same number of bytes, so the state is rewritten in place.
"""

from __future__ import annotations

import struct

import numpy as np

SEQUENCE_STATE_MAGIC = 0xAF143CD8  # a sequence state's first field, then the sequence's id
# Bytes per element of the value types a transposed cache can hold (ggml's F32, F16, BF16).
_ELEMENT_BYTES = {0: 4, 1: 2, 30: 2}


class _Reader:
    """Reads little-endian fields from a state, and raises ValueError past its end."""

    def __init__(self, data: bytearray) -> None:
        self.data = data
        self.at = 0

    def skip(self, n: int) -> int:
        """Pass over `n` bytes; where they start."""
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("the state ends early")
        self.at += n
        return self.at - n

    def field(self, fmt: str) -> int:
        size = struct.calcsize("<" + fmt)
        return struct.unpack_from("<" + fmt, self.data, self.skip(size))[0]


def values_by_row(state: bytearray) -> bool:
    """Rewrite `state` in place so that every layer's values are written a row a cell, as a flash-attention
    cache keeps them (nothing to do where they are already); False, `state` untouched, where it does not read
    as one sequence's state in llama.cpp's format (another version's, cells with extra fields, a value type
    that cannot be transposed)."""
    try:
        transposed = _transposed_values(state)
    except (ValueError, struct.error):
        return False
    if transposed is None:
        return False
    flags, layers = transposed
    for flag in flags:
        struct.pack_into("<I", state, flag, 0)
    for header, element_bytes, n_dims, n_cells in layers:
        start = header + 12  # (type, element size, dimensions) become (type, row size): 12 bytes either way
        end = start + n_dims * n_cells * element_bytes
        rows = np.frombuffer(state, dtype=f"<u{element_bytes}", count=n_dims * n_cells, offset=start).reshape(
            n_dims, n_cells).T.tobytes()  # (one layer's values at a time)
        struct.pack_into("<Q", state, header + 4, n_dims * element_bytes)
        state[start:end] = rows
    return True


def _transposed_values(state: bytearray) -> tuple[list[int], list[tuple[int, int, int, int]]] | None:
    """Where the transposed values are: the offsets of each stream's "transposed" flag, and for each layer
    (offset of its values' header, bytes per element, dimensions, cells); nothing where the values are a
    row a cell already. None where `state` is not one sequence's state of cells at positions 0..n-1
    (ValueError where it ends early)."""
    reader = _Reader(state)
    if reader.field("I") != SEQUENCE_STATE_MAGIC:
        return None
    reader.field("i")  # (the sequence's id)
    flags: list[int] = []
    found: list[tuple[int, int, int, int]] = []
    for _ in range(reader.field("I")):  # streams
        n_cells = reader.field("I")
        if n_cells == 0:
            continue
        positions = []
        for _ in range(n_cells):  # each cell's position, then its one sequence id
            positions.append(reader.field("i"))
            if reader.field("I") != 1:
                return None
            reader.skip(4)
        if sorted(positions) != list(range(n_cells)):  # (a cell's extra fields would have been read as these)
            return None
        flag = reader.at
        v_trans, n_layer = reader.field("I"), reader.field("I")
        if v_trans not in (0, 1) or n_layer == 0:
            return None
        if v_trans:
            flags.append(flag)
        for _ in range(n_layer):  # the keys: type, row size, a row a cell
            reader.field("i")
            reader.skip(reader.field("Q") * n_cells)
        for _ in range(n_layer):
            header = reader.at
            value_type = reader.field("i")
            if not v_trans:
                reader.skip(reader.field("Q") * n_cells)
                continue
            element_bytes, n_dims = reader.field("I"), reader.field("I")
            if _ELEMENT_BYTES.get(value_type) != element_bytes:
                return None
            reader.skip(n_dims * n_cells * element_bytes)
            found.append((header, element_bytes, n_dims, n_cells))
    if reader.at != len(state):
        return None
    return flags, found
