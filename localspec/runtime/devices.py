"""What llama.cpp can run on: its backend devices (ggml's device API), its build features, its version.

llama-cpp-python has no binding for ggml's device registry, so the few functions
needed are bound here with ctypes, from the libggml that sits beside libllama.
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from .library import llama

DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "integrated GPU", 3: "accelerator"}


@dataclass(frozen=True)
class Device:
    name: str
    description: str
    type: str
    memory_free: int
    memory_total: int

    def to_dict(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=1)
def _ggml() -> ctypes.CDLL:
    library = Path(llama().llama_cpp._lib._name).parent / "libggml.so"
    ggml = ctypes.CDLL(str(library))
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(ggml, name).restype = ctypes.c_char_p
        getattr(ggml, name).argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_type.restype = ctypes.c_int
    ggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    return ggml


def devices() -> list[Device]:
    """Every backend device llama.cpp sees, with its free and total memory in bytes."""
    ggml = _ggml()
    found = []
    for index in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(index)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        ggml.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        found.append(Device(
            name=(ggml.ggml_backend_dev_name(device) or b"").decode(errors="replace"),
            description=(ggml.ggml_backend_dev_description(device) or b"").decode(errors="replace"),
            type=DEVICE_TYPES.get(ggml.ggml_backend_dev_type(device), "other"),
            memory_free=free.value,
            memory_total=total.value,
        ))
    return found


def build_info() -> dict:
    """llama-cpp-python's version, GPU offload and RPC support, and the CPU features llama.cpp was built with."""
    lib = llama()
    features = lib.llama_print_system_info().decode(errors="replace")
    return {
        "llama_cpp_python": lib.__version__,
        "gpu_offload": bool(lib.llama_supports_gpu_offload()),
        "rpc": bool(lib.llama_supports_rpc()),
        "cpu_features": [part.split("=")[0].strip() for part in features.replace("CPU :", "").split("|")
                         if part.strip().endswith("= 1")],
    }
