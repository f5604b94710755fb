"""On a GPU build with a GPU (scripts/gpu_check.sh): both models offloaded, and greedy identity still holds.

Skipped, with the reason shown, where llama.cpp has no GPU backend or sees no
GPU device (CI has none). The statistical tests run unchanged on such a build.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.app.session import Session
from localspec.engine.drafters import ModelDrafter
from localspec.engine.generation import generate_text
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, ModelSettings, SamplingParams, SpeculativeParams

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

GREEDY = SamplingParams(temperature=0)
PROMPTS = ["Why is the sky blue?", "Write a Python function that reverses a string.", "Tell a short story about a fox."]


@pytest.fixture(scope="module", autouse=True)
def a_gpu() -> None:
    from localspec.runtime.devices import build_info, devices

    if not build_info()["gpu_offload"]:
        pytest.skip("no GPU: this llama.cpp build has no GPU backend (see `localspec info`)")
    if not any(device.type in ("GPU", "integrated GPU") for device in devices()):
        pytest.skip("no GPU: llama.cpp sees no GPU device (see `localspec info`)")


@pytest.fixture(scope="module")
def gpu_session(smollm_f32: Path, smollm_q4_1: Path):
    with Session(Model(smollm_f32), Model(smollm_q4_1)) as session:
        yield session


def test_both_models_are_fully_offloaded_by_default(gpu_session: Session) -> None:
    for model in (gpu_session.target, gpu_session.draft):
        placement = model.placement
        assert placement.offloaded_layers == placement.total_layers > 0, placement.summary()


def test_offload_is_set_per_model(smollm_f32: Path, smollm_q4_1: Path) -> None:
    with Model(smollm_f32, ModelSettings(n_gpu_layers=0)) as target, Model(smollm_q4_1, ModelSettings(n_gpu_layers=10)) as draft:
        assert target.placement.offloaded_layers == 0
        assert draft.placement.offloaded_layers == 10


@pytest.mark.parametrize("draft_max", [4, 8])
def test_greedy_speculative_equals_target_only_on_the_gpu(gpu_session: Session, draft_max: int) -> None:
    for prompt in PROMPTS:
        tokens = gpu_session.chat_prompt_tokens([{"role": "user", "content": prompt}])
        settings = GenerationSettings(GREEDY, SpeculativeParams(draft_max=draft_max), max_tokens=64, seed=0)
        baseline = generate_text(gpu_session.target, tokens, settings)
        speculative = generate_text(gpu_session.target, tokens, settings, ModelDrafter(gpu_session.draft, GREEDY))
        assert speculative.tokens == baseline.tokens, prompt
        assert speculative.stats.target_passes < baseline.stats.target_passes
