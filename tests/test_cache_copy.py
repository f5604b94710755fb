"""A draft model of the target's shape takes what the target has read from the target's cache
(`Model.copy_cache_from`)."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import numpy as np
import pytest
from tiny_models import N_LAYER, N_SPECIAL_AND_BYTE_TOKENS, random_weights, write_model

from localspec.app.session import Session
from localspec.engine.drafters import model as drafting_by_model
from localspec.engine.drafters.model import ModelDrafter
from localspec.runtime import model as model_module
from localspec.runtime.kv_state import values_by_row
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, ModelSettings, SamplingParams, SpeculativeParams

RUNTIME = ModelSettings(n_threads=1)
TEXT = [1, *[260 + (i * 7) % 23 for i in range(40)]]
NEXT = 265


def test_a_draft_takes_the_targets_reading_as_if_it_had_read_the_text_itself(tiny_pair: tuple[Path, Path]) -> None:
    """The same weights loaded as a target (values kept transposed, no flash attention) and as a draft (flash
    attention: values a row a cell): the copy, its values rewritten, gives the draft the logits its own
    reading gives, up to the two attention kernels' rounding; the state as written is refused."""
    with Model(tiny_pair[0], RUNTIME) as target, Model(tiny_pair[0], RUNTIME, proposes_only=True) as draft, \
            Model(tiny_pair[0], RUNTIME, proposes_only=True) as reader:
        target.sync(TEXT)
        assert not draft.restore_cache_state(target.tokens, target.cache_state())  # (incompatible V transposition)
        assert draft.tokens == () and draft.takes_copies
        assert draft.same_shape(target)
        assert draft.copy_cache_from(target) and draft.tokens == tuple(TEXT)
        assert draft.restored_positions == len(TEXT)
        copied = draft.next_logits([*TEXT, NEXT])
        np.testing.assert_allclose(copied, reader.next_logits([*TEXT, NEXT]), rtol=1e-3, atol=1e-3)
        assert draft.copy_cache_from(target)  # a copy replaces what the cache held
        assert draft.tokens == tuple(TEXT)


def test_a_state_already_a_row_a_cell_is_left_as_it_is_and_what_is_not_a_state_is_refused(
        tiny_pair: tuple[Path, Path]) -> None:
    with Model(tiny_pair[1], RUNTIME, proposes_only=True) as draft, Model(tiny_pair[0], RUNTIME) as target:
        draft.sync(TEXT)
        target.sync(TEXT)
        by_row = draft.cache_state()
        assert values_by_row(rewritten := bytearray(by_row)) and rewritten == by_row
        transposed = target.cache_state()
        assert values_by_row(rewritten := bytearray(transposed)) and rewritten != transposed
        assert len(rewritten) == len(transposed)
        assert values_by_row(again := bytearray(rewritten)) and again == rewritten
        two_ids = bytearray(transposed)
        struct.pack_into("<I", two_ids, 20, 2)  # (the first cell's count of sequence ids)
        wrong_position = bytearray(transposed)
        struct.pack_into("<i", wrong_position, 16, 7)  # (the first cell's position, after magic, id, streams, cells)
        for broken in (transposed[:-1], transposed + b"\0", b"", transposed[:8], transposed[4:], two_ids,
                       wrong_position):
            state = bytearray(broken)
            assert not values_by_row(state) and state == broken  # (refused untouched)


def test_a_copy_that_cannot_be_made_leaves_the_draft_as_it_was_and_is_not_tried_again(
        tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    with Model(tiny_pair[0], RUNTIME) as target, Model(tiny_pair[0], RUNTIME, proposes_only=True) as draft:
        target.sync(TEXT)
        draft.sync(TEXT[:10])
        monkeypatch.setattr(model_module, "values_by_row", lambda state: False)  # (a format it cannot read)
        assert not draft.copy_cache_from(target) and draft.tokens == tuple(TEXT[:10]) and not draft.takes_copies
        drafter = ModelDrafter(draft, SamplingParams(), copies_from=target)
        monkeypatch.setattr(drafting_by_model, "COPIED_FROM", 16)
        assert drafter._tokens_a_copy_saves(TEXT) == 0


def _fewer_layers(folder: Path) -> Path:
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24  # (the tiny pair's)
    last_layer = f"blk.{N_LAYER - 1}."
    weights = {name: tensor for name, tensor in random_weights(n_vocab, seed=1).items()
               if not name.startswith(last_layer)}
    return write_model(folder / "shallow.gguf", weights, n_vocab=n_vocab, block_count=N_LAYER - 1)


def test_a_model_of_another_shape_is_not_given_the_targets_cache(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    with Model(tiny_pair[0], RUNTIME) as target, Model(_fewer_layers(tmp_path), RUNTIME, proposes_only=True) as draft:
        assert not draft.same_shape(target)


def _evaluated_by(model: Model, counts: list[int]) -> None:
    """Count the tokens `model` evaluates."""
    evaluate = model.eval

    def counted(tokens, **kwargs):
        counts.append(len(tokens))
        return evaluate(tokens, **kwargs)

    model.eval = counted


@pytest.mark.parametrize(("verify", "copied_from", "copies"), [("coupled", 16, True), ("coupled", None, False),
                                                             ("rejection", 16, False)])
def test_the_draft_model_copies_a_long_reading_of_the_target_where_that_cannot_change_the_text(
        tiny_pair: tuple[Path, Path], verify: str, copied_from: int | None, copies: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Coupled verification: the draft model copies the prompt's reading (41 tokens, where copies start at 16),
    and the text is target-only's; a prompt too short to copy (the default threshold) it reads itself. Rejection
    sampling at a temperature: the draft's probabilities enter the text, so it reads the prompt itself."""
    if copied_from is not None:
        monkeypatch.setattr(drafting_by_model, "COPIED_FROM", copied_from)
    drafting = SpeculativeParams(strategy="model", draft_max=4, verify=verify)
    settings = GenerationSettings(SamplingParams(temperature=0.8), drafting, max_tokens=12, seed=5)
    target, draft = Model(tiny_pair[0], RUNTIME), Model(tiny_pair[1], RUNTIME, proposes_only=True)
    with Session(target, draft) as session:
        evaluated: list[int] = []
        _evaluated_by(draft, evaluated)
        speculative = session.generation(TEXT, settings)
        text = [token for chunk in speculative for token in chunk.tokens]
        assert (max(evaluated) < len(TEXT) - 1) == copies  # (copied: it evaluated its drafts, not the prompt)
        assert speculative.stats.draft_tokens_copied == (len(TEXT) if copies else 0)  # (the whole prompt)
        assert ("copied to the draft" in speculative.stats.summary()) == copies
        alone = session.generation(TEXT, settings, speculative=False)
        assert (text == [token for chunk in alone for token in chunk.tokens]) or verify == "rejection"


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["model", "hybrid"])
def test_the_demo_draft_copies_a_long_prompt_and_the_text_stays_target_onlys(
        smollm_f32: Path, smollm_q4_1: Path, strategy: str) -> None:
    """Real weights: the Q4_1 draft of the F32 target copies the reading of a prompt of more than 128 tokens
    (its 30 layers' values rewritten a row a cell) and drafts from it; the text is target-only's at T=0.8."""
    target, draft = Model(smollm_f32, ModelSettings(n_ctx=1024)), Model(smollm_q4_1, ModelSettings(n_ctx=1024),
                                                                        proposes_only=True)
    with Session(target, draft) as session:
        things = ["dishes", "car", "windows", "dog"] * 6
        chores = ", ".join(f"chore {n}: wash the {thing}" for n, thing in enumerate(things))
        question = f"My chores this week: {chores}. Which is first?"
        prompt = session.chat_prompt_tokens([{"role": "user", "content": question}])
        assert len(prompt) > 160
        evaluated: list[int] = []
        _evaluated_by(draft, evaluated)
        drafting = SpeculativeParams(strategy=strategy, draft_max=8)
        settings = GenerationSettings(SamplingParams(temperature=0.8), drafting, max_tokens=48, seed=11)
        speculative = session.generation(prompt, settings)
        text = [token for chunk in speculative for token in chunk.tokens]
        assert evaluated and max(evaluated) < 64 and speculative.stats.draft_tokens_proposed > 0
        alone = session.generation(prompt, settings, speculative=False)
        assert text == [token for chunk in alone for token in chunk.tokens]


def _text(session: Session, prompt: list[int], settings: GenerationSettings) -> list[int]:
    return [token for chunk in session.generation(prompt, settings) for token in chunk.tokens]


def test_what_one_generation_copied_is_not_drafted_from_where_the_drafts_decide_the_text(
        tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat turn (or `serve` request) under coupled verification copies the prompt's reading; the next one,
    under rejection sampling at a temperature, gives the text a fresh session gives (the draft reads itself)."""
    monkeypatch.setattr(drafting_by_model, "COPIED_FROM", 16)
    coupled = GenerationSettings(SamplingParams(temperature=0.8), SpeculativeParams(strategy="model", draft_max=4),
                                 max_tokens=12, seed=5)
    rejection = dataclasses.replace(coupled, speculative=dataclasses.replace(coupled.speculative, verify="rejection"))
    follow_up = [*TEXT, NEXT, 270, 271]
    with Session(Model(tiny_pair[0], RUNTIME), Model(tiny_pair[1], RUNTIME, proposes_only=True)) as session:
        _text(session, TEXT, coupled)
        assert session.draft.restored_positions > 0
        after_a_copy = [_text(session, follow_up, dataclasses.replace(rejection, seed=seed)) for seed in range(6)]
    with Session(Model(tiny_pair[0], RUNTIME), Model(tiny_pair[1], RUNTIME, proposes_only=True)) as fresh:
        assert after_a_copy == [_text(fresh, follow_up, dataclasses.replace(rejection, seed=seed)) for seed in range(6)]


def test_a_draft_state_restored_from_a_saved_prompt_is_dropped_where_the_drafts_decide_the_text(
        tiny_pair: tuple[Path, Path]) -> None:
    """Also what the last prompt's saved reading gave the draft model (a chat's first turn under coupled
    verification, a later one under rejection sampling): read in other batches, it is not what reading computes."""
    coupled = GenerationSettings(SamplingParams(temperature=0.8), SpeculativeParams(strategy="model", draft_max=4),
                                 max_tokens=4, seed=5)
    rejection = dataclasses.replace(coupled, speculative=dataclasses.replace(coupled.speculative, verify="rejection"))
    with Session(Model(tiny_pair[0], RUNTIME), Model(tiny_pair[1], RUNTIME, proposes_only=True)) as session:
        session.draft.sync(TEXT)
        saved = session.draft.cache_state()
        assert session.draft.restore_cache_state(TEXT, saved) and session.draft.restored_positions == len(TEXT)
        session.generation([*TEXT, NEXT], coupled)
        assert session.draft.tokens == tuple(TEXT)  # (kept where drafts are checked against the target's draws)
        session.generation([*TEXT, NEXT], rejection)
        assert session.draft.tokens == () and session.draft.restored_positions == 0
        session.draft.sync(TEXT)  # (read here: kept)
        session.generation([*TEXT, NEXT], rejection)
        assert session.draft.tokens == tuple(TEXT)
