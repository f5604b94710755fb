"""Repetition penalties: the formula, the window each row counts, and both models applying them.

Losslessness under penalties is proven with the other cases: `test_lossless_tiny.py` (chi-square against the exact
penalised distribution, `penalties-*`) and `test_coupled_identity.py` (the same tokens as target-only decoding,
and a row that leaves out the drafts before it caught).
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


def test_a_row_is_penalised_as_llama_cpp_writes_it() -> None:
    """Worked by hand: divided where positive, multiplied where not, then count·frequency + presence taken off."""
    penalties = Penalties(repeat=2.0, presence=0.5, frequency=0.25, last_n=4)
    logits = np.array([2.0, -1.0, 0.5, 3.0, 0.0], dtype=np.float32)
    got = penalties.apply(logits, penalties.window([2, 0, 1, 1, 3]))  # the last four: 0 once, 1 twice, 3 once
    assert got.tolist() == [0.25, -3.0, 0.5, 0.75, 0.0]
    assert logits.tolist() == [2.0, -1.0, 0.5, 3.0, 0.0]  # (a copy: the row read is llama.cpp's buffer)


@pytest.mark.parametrize("params", [
    SamplingParams(repeat_penalty=1.3),
    SamplingParams(presence_penalty=0.8, repeat_last_n=3),
    SamplingParams(frequency_penalty=0.6, repeat_last_n=-1),
    SamplingParams(repeat_penalty=0.7, presence_penalty=-1.0, frequency_penalty=-0.4, repeat_last_n=6),
])
def test_each_row_counts_the_text_and_the_drafts_before_it(params: SamplingParams) -> None:
    rng = np.random.default_rng(0)
    penalties = Penalties.of(params)
    assert penalties is not None
    for _ in range(20):
        rows = rng.normal(0, 3, (4, 50)).astype(np.float32)
        text = [int(t) for t in rng.integers(0, 50, rng.integers(0, 12))]
        drafted = [int(t) for t in rng.integers(0, 50, 3)]
        got = penalties.each_row(rows, text, drafted)
        for i, row in enumerate(rows):
            assert np.array_equal(got[i], penalised(row, [*text, *drafted[:i]], params))


def test_the_window_slides_and_minus_one_counts_the_whole_text() -> None:
    window = Penalties(1.5, 0.0, 0.0, last_n=3).window([1, 2, 3, 4])
    assert dict(window.counts) == {2: 1, 3: 1, 4: 1}
    window.extend([4, 5])
    assert dict(window.counts) == {4: 2, 5: 1}
    whole = Penalties(1.5, 0.0, 0.0, last_n=-1).window([1, 2, 1])
    whole.extend([1])
    assert dict(whole.counts) == {1: 3, 2: 1}


def test_penalties_off_are_none_and_tokens_past_the_vocabulary_are_left_alone() -> None:
    assert Penalties.of(SamplingParams()) is None
    assert Penalties.of(SamplingParams(repeat_last_n=5)) is None  # (a window alone penalises nothing)
    assert Penalties.of(SamplingParams(repeat_penalty=1.5, repeat_last_n=0)) is None  # (as llama.cpp: 0 turns them off)
    penalties = Penalties(2.0, 0.0, 0.0, 8)
    got = penalties.apply(np.ones(4, dtype=np.float32), penalties.window([1, 7, 7]))  # 7: a larger target's token
    assert got.tolist() == [1.0, 0.5, 1.0, 1.0]


def _greedy_by_hand(model: Model, prompt: list[int], params: SamplingParams, n: int) -> list[int]:
    """Greedy decoding with the penalties applied by the reference, a token at a time."""
    text = list(prompt)
    for _ in range(n):
        text.append(int(np.argmax(penalised(model.next_logits(text), text, params))))
    return text[len(prompt):]


def test_target_only_decoding_and_the_draft_model_apply_the_penalties(tiny_pair: tuple[Path, Path]) -> None:
    params = SamplingParams(temperature=0.0, repeat_penalty=1.8, presence_penalty=1.0, frequency_penalty=0.5,
                            repeat_last_n=6)
    with Model(tiny_pair[0]) as target, Model(tiny_pair[1]) as draft:
        alone = generate_text(target, PROMPT, GenerationSettings(params, max_tokens=12, seed=0)).tokens
        assert alone == _greedy_by_hand(target, PROMPT, params, 12)
        assert alone != generate_text(target, PROMPT, GenerationSettings(SamplingParams(temperature=0.0), max_tokens=12)).tokens
        drafter = ModelDrafter(draft, params, length=FixedLength(5))
        drafter.begin(PROMPT)
        proposed = drafter.propose(PROMPT, 5, make_sampler("coupled", 0), 0).tokens
        assert proposed == _greedy_by_hand(draft, PROMPT, params, len(proposed)) and len(proposed) == 5
