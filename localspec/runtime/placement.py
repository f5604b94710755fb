"""Where llama.cpp put a model: its layers per device and its weight buffers, read back from the load log.

llama.cpp's C API has no call that says which device holds a layer, but its
loader logs each decision ("layer 12 assigned to device CUDA0") and the size of
every weight buffer ("CUDA0 model buffer size = 512.00 MiB"). Parsing those lines
reports what llama.cpp did, not what was asked of it (a CPU-only build ignores
`n_gpu_layers`, for one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LAYER_LINE = re.compile(r"layer\s+(\d+) assigned to device ([^,\n]+)")
_BUFFER_LINE = re.compile(r"^\S*:\s+(\S+) model buffer size =\s+([\d.]+) MiB", re.MULTILINE)
CPU_DEVICE = "CPU"
EXTRA_CPU_BUFFERS = ("CPU_REPACK", "AMX", "CPU_KLEIDIAI")  # weight buffers of llama.cpp's extra CPU buffer types


@dataclass(frozen=True)
class Placement:
    """Layers per device (the output layer counts as one, as llama.cpp counts) and weight bytes per buffer."""

    layers: dict[str, int] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)
    workers: dict[str, str] = field(default_factory=dict)  # RPC device name -> the worker's HOST:PORT
    extra_buffers: bool = False  # whether llama.cpp was allowed its extra CPU buffer types (repacked layouts)
    one_token_decodes: bool = False  # whether every decode takes one token (see `Model`'s one_token_decodes)

    @property
    def total_layers(self) -> int:
        return sum(self.layers.values())

    @property
    def offloaded_layers(self) -> int:
        """Layers on any device but the host CPU (a GPU, or an RPC worker)."""
        return sum(n for device, n in self.layers.items() if device != CPU_DEVICE)

    @property
    def repacked_bytes(self) -> int:
        """Weight bytes llama.cpp holds in an extra CPU buffer type (repacked for its CPU kernels)."""
        return sum(size for name, size in self.weights.items() if name in EXTRA_CPU_BUFFERS)

    def summary(self) -> str:
        """E.g. "31 layers on CPU, 57 MiB repacked" or "31/31 layers offloaded (20 on RPC0 (10.0.0.2:50052), 11 on CUDA0)"."""
        mib = self.repacked_bytes / 2**20
        repacked = f", {mib:.{0 if mib >= 10 else 2}f} MiB repacked" if self.repacked_bytes else ""
        if self.one_token_decodes:
            repacked += ", one token per decode"
        if not self.layers:
            return "placement unknown" + repacked
        if self.offloaded_layers == 0:
            return f"{self.total_layers} layers on CPU{repacked}"
        parts = [f"{n} on {device}" + (f" ({self.workers[device]})" if device in self.workers else "")
                 for device, n in sorted(self.layers.items(), key=lambda item: -item[1])]
        return f"{self.offloaded_layers}/{self.total_layers} layers offloaded ({', '.join(parts)}){repacked}"

    def to_dict(self) -> dict:
        return {
            "layers": dict(self.layers),
            "total_layers": self.total_layers,
            "offloaded_layers": self.offloaded_layers,
            "weights_bytes": dict(self.weights),
            "workers": {device: self.workers[device] for device in self.layers if device in self.workers},
            "cpu_extra_buffers": self.extra_buffers,
            "repacked_bytes": self.repacked_bytes,
            "one_token_decodes": self.one_token_decodes,
        }


def parse_load_log(log: str, workers: dict[str, str] | None = None, *, extra_buffers: bool = False,
                   one_token_decodes: bool = False) -> Placement:
    """The placement llama.cpp logged while loading one model (`workers`: RPC device name -> address;
    `extra_buffers`: whether the load allowed llama.cpp's extra CPU buffer types; `one_token_decodes`: see `Model`)."""
    layers: dict[str, int] = {}
    for _index, device in _LAYER_LINE.findall(log):
        layers[device.strip()] = layers.get(device.strip(), 0) + 1
    weights = {name: int(float(mib) * 2**20) for name, mib in _BUFFER_LINE.findall(log)}
    return Placement(layers, weights, dict(workers or {}), extra_buffers, one_token_decodes)
