"""llama.cpp's sequence state, read far enough to store its values row by row.

`llama_state_seq_get_data` writes a sequence's cache as: a magic number, the sequence's id, the
number of streams; per stream
the number of cells, each cell's position and sequence ids, then the keys of every layer
(one row a cell) and the values of every layer. A cache without flash attention keeps each
layer's values transposed (one row per value dimension, a column a cell) and writes them so;
one with flash attention keeps and writes them a row a cell. llama.cpp restores a state only
into a cache that keeps its values the same way, so a target's cache (no flash attention on
the CPU) can be given to a draft model of the same shape (flash attention on) only rewritten.
"""

from __future__ import annotations

import struct

import numpy as np

SEQUENCE_STATE_MAGIC = 0xAF143CD8  # a sequence state's first field, then the sequence's id
# Bytes per element of the value types a transposed cache can hold (ggml's F32, F16, BF16).
_ELEMENT_BYTES = {0: 4, 1: 2, 30: 2}


class _Reader:
    """Reads little-endian fields from a state, and raises ValueError past its end."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.at = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("the state ends early")
        part = self.data[self.at : self.at + n]
        self.at += n
        return part

    def field(self, fmt: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))[0]


def values_by_row(state: bytes) -> bytes | None:
    """`state` with every layer's values written a row a cell, as a flash-attention cache keeps them: the
    same bytes where they are already; None where `state` does not read as llama.cpp's sequence state
    (another version's format, cells with extra fields, a value type that cannot be transposed)."""
    try:
        return _values_by_row(state)
    except (ValueError, struct.error):
        return None


def _values_by_row(state: bytes) -> bytes | None:
    reader = _Reader(state)
    if reader.field("I") != SEQUENCE_STATE_MAGIC:
        return None
    sequence = reader.field("i")
    n_stream = reader.field("I")
    out = bytearray(struct.pack("<IiI", SEQUENCE_STATE_MAGIC, sequence, n_stream))
    for _ in range(n_stream):
        n_cells = reader.field("I")
        out += struct.pack("<I", n_cells)
        if n_cells == 0:
            continue
        start = reader.at
        for _ in range(n_cells):  # each cell's position, then its sequence ids
            reader.field("i")
            reader.take(4 * reader.field("I"))
        v_trans = reader.field("I")
        n_layer = reader.field("I")
        if v_trans not in (0, 1) or n_layer == 0:
            return None
        out += reader.data[start : reader.at - 8]
        out += struct.pack("<II", 0, n_layer)
        for _ in range(n_layer):  # the keys: type, row size, a row a cell
            key_type = reader.field("i")
            row_bytes = reader.field("Q")
            out += struct.pack("<iQ", key_type, row_bytes) + reader.take(row_bytes * n_cells)
        for _ in range(n_layer):
            value_type = reader.field("i")
            if not v_trans:
                row_bytes = reader.field("Q")
                out += struct.pack("<iQ", value_type, row_bytes) + reader.take(row_bytes * n_cells)
                continue
            element_bytes = reader.field("I")
            n_dims = reader.field("I")
            if _ELEMENT_BYTES.get(value_type) != element_bytes:
                return None
            columns = np.frombuffer(reader.take(n_dims * n_cells * element_bytes), dtype=f"<u{element_bytes}")
            rows = columns.reshape(n_dims, n_cells).T
            out += struct.pack("<iQ", value_type, n_dims * element_bytes) + rows.tobytes()
    if reader.at != len(state):
        return None
    return bytes(out)
