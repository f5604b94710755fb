"""Do llama.cpp's "extra" CPU buffer types work here? A batched decode in a child process finds out.

llama.cpp can repack quantized weights into layouts its CPU kernels read faster
(the CPU_REPACK buffer type; AMX tiles on CPUs that have them). Some builds crash
on some CPUs when such weights meet a batch, and a crash in llama.cpp takes the
whole process with it. So the first load of a kind of model tries it in a child:
load the model with the extra buffer types, decode a batch with logits on every
row, drop part of it from the KV cache and decode another batch (a verify pass),
then one token (a draft step). A crash or a non-zero exit there is a verdict,
not a crash of ours. A hang is no verdict: on a busy machine a healthy probe can
be slow, and one slow moment must not turn repacking off for good; nor is a
child killed from outside (out of memory, a closed terminal).

Where batches crash, a second probe (`one_token=True`) decodes the same tokens
one at a time: a lone token takes other kernels (on AMX machines, AVX-512 VNNI
rather than AMX tiles, which some virtual machines do not provide), so a model
that decodes one token at a time, a draft model, may still use the faster layout
(`Model`'s one_token_decodes).

`build_fingerprint()` names what the verdict depends on: llama.cpp's build and
the CPU. Remembering verdicts is the caller's business (`app.repack`).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import LocalspecError
from ..settings import ModelSettings
from . import devices
from .library import llama
from .model import Model

_INCONCLUSIVE_EXIT = 2  # the child could not load the model at all: no verdict about repacking
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_CHILD = "import sys; from localspec.runtime.repack import probe_here; probe_here(sys.argv[1], sys.argv[2] == 'one-token')"


@dataclass(frozen=True)
class ProbeResult:
    """What the child found: `works` is None when it was inconclusive (the model did not load, or no answer in time)."""

    works: bool | None
    detail: str


def build_fingerprint() -> str:
    """llama.cpp's version and build, its library files and the CPU (model and features llama.cpp uses)."""
    library = Path(llama().llama_cpp._lib._name)
    files = sorted(p for p in library.parent.glob("lib*.so*") if "llama" in p.name or "ggml-cpu" in p.name)
    return json.dumps({
        "llama_cpp_python": llama().__version__,
        "llama_cpp": devices.llama_cpp_build(),
        "libraries": [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files if not p.is_symlink()],
        "system_info": llama().llama_print_system_info().decode(errors="replace").strip(),
        "cpu": _cpu_model(),
    }, sort_keys=True)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# Signals that say nothing of llama.cpp's kernels (a crash is SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT): no verdict.
_SENT_FROM_OUTSIDE = {signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT}


def probe(path: Path, timeout_s: float, *, one_token: bool = False) -> ProbeResult:
    """Load `path` with the extra CPU buffer types and decode batches (`one_token`: the same tokens one
    at a time) in a child process; say how it went."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    mode = "one-token" if one_token else "batched"
    try:
        child = subprocess.run([sys.executable, "-c", _CHILD, str(path), mode], capture_output=True, text=True,
                               env=env, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return ProbeResult(None, f"the probe did not answer in {timeout_s:g} s")
    last_line = (child.stderr.strip().splitlines() or [""])[-1]
    if child.returncode < 0 and -child.returncode in _SENT_FROM_OUTSIDE:  # (the OOM killer, a closed terminal)
        return ProbeResult(None, f"the probe was stopped from outside ({signal.Signals(-child.returncode).name})")
    if child.returncode < 0:
        return ProbeResult(False, f"the probe crashed ({signal.Signals(-child.returncode).name})")
    if child.returncode == _INCONCLUSIVE_EXIT:
        return ProbeResult(None, f"the probe could not load the model ({last_line})")
    if child.returncode != 0:
        return ProbeResult(False, f"the probe failed (exit {child.returncode}: {last_line})")
    return ProbeResult(True, child.stdout.strip() or f"{mode} decodes work")


def probe_here(path: str, one_token: bool = False) -> None:
    """The child's side: exit 0 (printing what was repacked) when decodes with extra buffers work: batched
    ones (a verify pass, a rollback, another pass, a draft step, a prompt read), or, `one_token`, the same
    computed one token at a time."""
    settings = ModelSettings(n_gpu_layers=0, n_ctx=64, n_batch=16, repack="on")
    try:
        model = Model(path, settings, extra_buffers=True, one_token_decodes=one_token)
    except LocalspecError as exc:
        print(exc, file=sys.stderr)
        sys.exit(_INCONCLUSIVE_EXIT)
    tokens = [token % model.n_vocab for token in range(1, 9)]
    rows = [model.eval(tokens, logits="all")]  # a verify pass: every row's logits
    model.keep(3)  # drafts rejected: roll the KV cache back
    rows.append(model.eval(tokens[3:], logits="all"))
    rows.append(model.eval(tokens[:1], logits="last"))  # a draft step: one token
    model.eval(tokens, logits="none")  # a prompt read
    if not all(np.isfinite(block).all() for block in rows):
        sys.exit("the logits are not finite")
    repacked = model.placement.repacked_bytes
    works = "one-token decodes work" if one_token else "batched decodes work"
    print(f"{works} ({repacked / 2**20:.0f} MiB repacked)" if repacked else f"{works} (nothing repacked for these weight types)")
