"""What llama.cpp can run on: its backend devices (ggml's device API), its build features, its version.

llama-cpp-python has no binding for ggml's device registry, so the few functions
needed are bound here with ctypes, from the libggml that sits beside libllama
(its handle also finds what libggml links: ggml-base, the backends).
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from .library import llama, lone_token_computed_like_a_batch

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


def _bind(function, restype, *argtypes) -> None:
    function.restype = restype
    function.argtypes = list(argtypes)


@lru_cache(maxsize=1)
def ggml() -> ctypes.CDLL:
    """libggml, with the device and backend-registry functions localspec calls bound."""
    library = ctypes.CDLL(str(Path(llama().llama_cpp._lib._name).parent / "libggml.so"))
    pointer, text, size = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    _bind(library.ggml_backend_dev_count, size)
    _bind(library.ggml_backend_dev_get, pointer, size)
    _bind(library.ggml_backend_dev_name, text, pointer)
    _bind(library.ggml_backend_dev_description, text, pointer)
    _bind(library.ggml_backend_dev_type, ctypes.c_int, pointer)
    _bind(library.ggml_backend_dev_memory, None, pointer, ctypes.POINTER(size), ctypes.POINTER(size))
    _bind(library.ggml_backend_dev_backend_reg, pointer, pointer)
    _bind(library.ggml_backend_reg_by_name, pointer, text)
    _bind(library.ggml_backend_reg_name, text, pointer)
    _bind(library.ggml_backend_reg_get_proc_address, pointer, pointer, text)
    _bind(library.ggml_backend_reg_dev_count, size, pointer)
    _bind(library.ggml_backend_reg_dev_get, pointer, pointer, size)
    _bind(library.ggml_backend_register, None, pointer)
    _bind(library.ggml_backend_reg_count, size)
    _bind(library.ggml_backend_reg_get, pointer, size)
    return library


def device_handles() -> list[int]:
    """Every backend device llama.cpp has registered (RPC workers included once added)."""
    library = ggml()
    return [library.ggml_backend_dev_get(index) for index in range(library.ggml_backend_dev_count())]


def describe_device(handle: int) -> Device:
    """A device's name, description, type and memory (free and total, in bytes)."""
    library = ggml()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    library.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
    return Device(
        name=device_name(handle),
        description=(library.ggml_backend_dev_description(handle) or b"").decode(errors="replace"),
        type=device_type(handle),
        memory_free=free.value,
        memory_total=total.value,
    )


def device_name(handle: int) -> str:
    """A device's name alone (no memory query: for an RPC device that would be a network round trip)."""
    return (ggml().ggml_backend_dev_name(handle) or b"").decode(errors="replace")


def device_type(handle: int) -> str:
    """A device's type ("CPU", "GPU", ...) alone, without a memory query."""
    return DEVICE_TYPES.get(ggml().ggml_backend_dev_type(handle), "other")


def backend_name(handle: int) -> str:
    """The backend a device belongs to: "CPU", "CUDA", "RPC", ..."""
    library = ggml()
    return (library.ggml_backend_reg_name(library.ggml_backend_dev_backend_reg(handle)) or b"").decode()


def devices() -> list[Device]:
    """Every backend device llama.cpp sees, with its free and total memory in bytes."""
    return [describe_device(handle) for handle in device_handles()]


GPU_TYPES = ("GPU", "integrated GPU")


def gpu_devices() -> list[Device]:
    """The GPUs on this machine that llama.cpp can put layers on (none on a CPU build, whatever else it has)."""
    return [describe_device(handle) for handle in device_handles()
            if device_type(handle) in GPU_TYPES and backend_name(handle) != "RPC"]


def backends() -> list[str]:
    """The backends this llama.cpp build registered: "CPU", "CUDA", "Metal", "RPC", ..."""
    library = ggml()
    return [(library.ggml_backend_reg_name(library.ggml_backend_reg_get(index)) or b"").decode(errors="replace")
            for index in range(library.ggml_backend_reg_count())]


def llama_cpp_build() -> dict[str, str]:
    """llama.cpp's own version and ggml's version and commit, as far as the library exposes them (newer builds do)."""
    found = {}
    for key, library, symbol in (("version", llama().llama_cpp._lib, "llama_version"),
                                 ("ggml", ggml(), "ggml_version"), ("commit", ggml(), "ggml_commit")):
        function = getattr(library, symbol, None)  # an older build lacks the symbol
        if function is not None:
            function.restype, function.argtypes = ctypes.c_char_p, []
            found[key] = (function() or b"").decode(errors="replace")
    return found


def build_info() -> dict:
    """llama-cpp-python's and llama.cpp's versions, the backends, GPU devices and RPC support, the CPU features.

    `gpu_offload` says whether layers can go to a GPU here: llama.cpp's own
    llama_supports_gpu_offload() is also true for a CPU build with the RPC backend.
    """
    lib = llama()
    features = lib.llama_print_system_info().decode(errors="replace")
    gpus = gpu_devices()
    return {
        "llama_cpp_python": lib.__version__,
        "llama_cpp": llama_cpp_build(),
        "backends": backends(),
        "gpu_offload": bool(gpus),
        "gpu_devices": [device.name for device in gpus],
        "rpc": bool(lib.llama_supports_rpc()),
        "cpu_features": [part.split("=")[0].strip() for part in features.replace("CPU :", "").split("|")
                         if part.strip().endswith("= 1")],
        "cpu_batch_invariant": lone_token_computed_like_a_batch(),
    }
