"""Repetition penalties: the formula, the window each row counts, and both models applying them.

Losslessness under penalties is proven with the other cases: `test_lossless_tiny.py` (chi-square against the exact
penalised distribution, `penalties-*`) and `test_coupled_identity.py` (the same tokens as target-only decoding).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from dense import penalised

from localspec.engine.draft_length import FixedLength
from localspec.engine.drafters import ModelDrafter
from localspec.engine.generation import generate_text
from localspec.engine.penalties import Penalties
from localspec.engine.sampling import make_sampler
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, SamplingParams

PROMPT = [1, 260, 265, 270, 262, 260, 265]


@pytest.mark.parametrize("params", [
    SamplingParams(repeat_penalty=1.3),
    SamplingParams(presence_penalty=0.8, penalty_last_n=3),
    SamplingParams(frequency_penalty=0.6, penalty_last_n=0),
    SamplingParams(repeat_penalty=0.7, presence_penalty=-1.0, frequency_penalty=-0.4, penalty_last_n=6),
])
def test_a_row_is_penalised_as_llama_cpp_writes_the_penalties(params: SamplingParams) -> None:
    rng = np.random.default_rng(0)
    penalties = Penalties.of(params)
    assert penalties is not None
    for _ in range(20):
        logits = rng.normal(0, 3, 50).astype(np.float32)
        text = list(rng.integers(0, 50, rng.integers(0, 12)))
        drafted = list(rng.integers(0, 50, rng.integers(0, 4)))
        got = penalties.apply(logits, penalties.window(text, drafted))
        np.testing.assert_allclose(got, penalised(logits, [*text, *drafted], params), rtol=1e-6, atol=1e-6)
        assert got is not logits and not np.shares_memory(got, logits)


def test_the_window_is_the_last_n_tokens_of_the_text_and_the_drafts_before_the_row() -> None:
    penalties = Penalties(repeat=1.5, presence=0.0, frequency=0.0, last_n=3)
    assert penalties.window([1, 2, 3, 4], [5]) == [3, 4, 5]
    assert penalties.window([1], [5, 6, 7, 8]) == [6, 7, 8]
    assert Penalties(1.5, 0.0, 0.0, last_n=0).window([1, 2, 3], [4]) == [1, 2, 3, 4]  # 0: all of it
    rows = np.zeros((3, 10), dtype=np.float32) - 1.0  # (negative scores: multiplied by the penalty)
    each = penalties.each_row(rows, [1, 2], [3, 4])
    assert [sorted(np.flatnonzero(row == -1.5)) for row in each] == [[1, 2], [1, 2, 3], [2, 3, 4]]


def test_penalties_off_are_none_and_tokens_past_the_vocabulary_are_left_alone() -> None:
    assert Penalties.of(SamplingParams()) is None
    assert Penalties.of(SamplingParams(penalty_last_n=5)) is None  # (a window alone penalises nothing)
    logits = np.ones(4, dtype=np.float32)
    got = Penalties(2.0, 0.0, 0.0, 8).apply(logits, [1, 7, 7])  # 7: a token of a target's larger vocabulary
    assert got.tolist() == [1.0, 0.5, 1.0, 1.0]


def _greedy_by_hand(model: Model, prompt: list[int], params: SamplingParams, n: int) -> list[int]:
    """Greedy decoding with the penalties applied by the reference, a token at a time."""
    text = list(prompt)
    for _ in range(n):
        text.append(int(np.argmax(penalised(model.next_logits(text), text, params))))
    return text[len(prompt):]


def test_target_only_decoding_and_the_draft_model_apply_the_penalties(tiny_pair: tuple[Path, Path]) -> None:
    params = SamplingParams(temperature=0.0, repeat_penalty=1.8, presence_penalty=1.0, frequency_penalty=0.5,
                            penalty_last_n=6)
    with Model(tiny_pair[0]) as target, Model(tiny_pair[1]) as draft:
        alone = generate_text(target, PROMPT, GenerationSettings(params, max_tokens=12, seed=0)).tokens
        assert alone == _greedy_by_hand(target, PROMPT, params, 12)
        assert alone != generate_text(target, PROMPT, GenerationSettings(SamplingParams(temperature=0.0), max_tokens=12)).tokens
        drafter = ModelDrafter(draft, params, length=FixedLength(5))
        drafter.begin(PROMPT)
        proposed = drafter.propose(PROMPT, 5, make_sampler("coupled", 0), 0).tokens
        assert proposed == _greedy_by_hand(draft, PROMPT, params, len(proposed)) and len(proposed) == 5
