"""Write a copy of a GGUF model at another precision with llama.cpp's own quantizer.

Used for the demo target (the embedded Q4_1 model widened to F32) and for drafts
made from a target. The output appears atomically: llama.cpp writes a temporary
file next to the destination, which is renamed only once it is complete.
"""

from __future__ import annotations

import contextlib
import glob
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gguf import LlamaFileType
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from ..config.atomic import atomic_path
from ..errors import InputError, LocalspecError
from ..runtime.library import clear_errors, default_threads, last_error, llama
from .gguf import read_gguf_header


@dataclass(frozen=True)
class OutputType:
    """A quantizer output type: llama.cpp's file type and the tensor type that dominates its size."""

    ftype: LlamaFileType
    size_type: GGMLQuantizationType


OUTPUT_TYPES: dict[str, OutputType] = {
    "f32": OutputType(LlamaFileType.ALL_F32, GGMLQuantizationType.F32),
    "f16": OutputType(LlamaFileType.MOSTLY_F16, GGMLQuantizationType.F16),
    "bf16": OutputType(LlamaFileType.MOSTLY_BF16, GGMLQuantizationType.BF16),
    "q8_0": OutputType(LlamaFileType.MOSTLY_Q8_0, GGMLQuantizationType.Q8_0),
    "q6_k": OutputType(LlamaFileType.MOSTLY_Q6_K, GGMLQuantizationType.Q6_K),
    "q5_k_m": OutputType(LlamaFileType.MOSTLY_Q5_K_M, GGMLQuantizationType.Q5_K),
    "q5_0": OutputType(LlamaFileType.MOSTLY_Q5_0, GGMLQuantizationType.Q5_0),
    "q4_k_m": OutputType(LlamaFileType.MOSTLY_Q4_K_M, GGMLQuantizationType.Q4_K),
    "q4_0": OutputType(LlamaFileType.MOSTLY_Q4_0, GGMLQuantizationType.Q4_0),
    "q4_1": OutputType(LlamaFileType.MOSTLY_Q4_1, GGMLQuantizationType.Q4_1),
}

ProgressCallback = Callable[[int, int], None]


def estimated_size(source: Path, type_name: str) -> int:
    """Rough size in bytes of `source` written as `type_name` (for a progress bar)."""
    header = read_gguf_header(source)
    block_size, type_size = GGML_QUANT_SIZES[OUTPUT_TYPES[type_name].size_type]
    return header.data_offset + header.n_parameters * type_size // block_size


def quantize(
    source: str | Path,
    destination: str | Path,
    type_name: str,
    *,
    on_progress: ProgressCallback | None = None,
    n_threads: int | None = None,
) -> Path:
    """Write `source` as `type_name` to `destination`; report (bytes written, bytes expected)."""
    source, destination = Path(source), Path(destination)
    if type_name not in OUTPUT_TYPES:
        raise InputError(f"unknown type {type_name!r}; choose one of: {', '.join(OUTPUT_TYPES)}")
    expected = estimated_size(source, type_name)
    llama_cpp = llama()
    clear_errors()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(OUTPUT_TYPES[type_name].ftype)
    params.allow_requantize = True
    params.nthread = n_threads or default_threads()

    _sweep_stale_partials(destination)
    with atomic_path(destination) as temp_path:
        result: dict[str, int] = {}
        worker = threading.Thread(
            target=lambda: result.setdefault(
                "status", llama_cpp.llama_model_quantize(os.fsencode(source), os.fsencode(temp_path), params)
            ),
            daemon=True,
        )
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
            if on_progress is not None:
                written = temp_path.stat().st_size if temp_path.exists() else 0
                on_progress(min(written, expected), expected)
        if result.get("status", 1) != 0:
            raise LocalspecError(f"quantizing {source} failed ({last_error() or 'no reason given'})")
        read_gguf_header(temp_path)  # the quantizer's output must itself be a complete GGUF file
        if on_progress is not None:
            on_progress(expected, expected)
    return destination


STALE_PARTIAL_SECONDS = 3600  # no quantization runs this long without writing: its process is gone


def _sweep_stale_partials(destination: Path) -> None:
    """Delete what a killed quantization to `destination` left (`atomic_path`'s temporary file, as large as
    the model): every such file untouched for an hour."""
    now = time.time()
    for path in destination.parent.glob(f".{glob.escape(destination.name)}.*.partial"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > STALE_PARTIAL_SECONDS:
                path.unlink()
