"""KV-cache bookkeeping on tiny models: rollback after rejections, prefix reuse."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from tiny_models import write_pair

from localspec.app.session import Session
from localspec.engine.drafters import ModelDrafter
from localspec.engine.generation import Generation, StopReason, generate_text
from localspec.errors import LocalspecError
from localspec.runtime.model import Model
from localspec.settings import (
    GenerationSettings,
    ModelSettings,
    SamplingParams,
    SpeculativeParams,
)


def assert_cache_matches_fresh_model(model: Model, path: Path, atol: float = 1e-4) -> None:
    """The rolled-back cache must give the logits a fresh model computes for the same tokens.

    A fresh model fed the same tokens with one wrong token in the middle (what a
    stale, un-rolled-back entry amounts to) must be far outside the tolerance.
    """
    cached = list(model.tokens)
    probe = [cached[-1]]
    continued = model.eval(probe, logits="last")[0]
    with Model(path) as fresh:
        fresh.sync(cached)
        expected = fresh.eval(probe, logits="last")[0]
        corrupted = list(cached)
        corrupted[-3] = cached[-3] + 1
        fresh.sync(corrupted)
        wrong = fresh.eval(probe, logits="last")[0]
    assert np.abs(continued - expected).max() <= atol
    assert np.abs(wrong - expected).max() > 10 * atol


def test_kv_rollback_after_rejections_matches_a_fresh_model(tiny_pair: tuple[Path, Path]) -> None:
    target_path, draft_path = tiny_pair
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    with Model(target_path) as target, Model(draft_path) as draft:
        settings = GenerationSettings(sampling, SpeculativeParams(draft_max=4), max_tokens=40, seed=5)
        generation = generate_text(target, [1, 260, 261], settings, ModelDrafter(draft, sampling))
        assert generation.stats.draft_tokens_accepted < generation.stats.draft_tokens_proposed
        assert_cache_matches_fresh_model(target, target_path)
        assert_cache_matches_fresh_model(draft, draft_path)


def test_sync_keeps_the_common_prefix_and_evaluates_only_the_rest(tiny_pair: tuple[Path, Path]) -> None:
    with Model(tiny_pair[0]) as model:
        decoded: list[int] = []
        original = model._decode
        model._decode = lambda tokens, rows: (decoded.append(len(tokens)), original(tokens, rows))[1]
        model.sync([1, 260, 261, 262, 263, 264])
        model.sync([1, 260, 261, 262, 270, 271, 272])
        assert decoded == [6, 3] and list(model.tokens) == [1, 260, 261, 262, 270, 271, 272]
        model.keep(2)
        assert list(model.tokens) == [1, 260]




def test_logits_come_back_in_batch_order_as_a_copy_or_a_view(tiny_pair: tuple[Path, Path]) -> None:
    """One block of rows from llama.cpp's output buffer equals asking row by row (llama_get_logits_ith)."""
    with Model(tiny_pair[0]) as model:
        model.sync([1, 260])
        view = model.eval([261, 262, 263], logits="all", copy=False)
        by_row = np.stack([np.ctypeslib.as_array(model._llama.llama_get_logits_ith(model._ctx, i), shape=(model.n_vocab,)) for i in range(3)])
        np.testing.assert_array_equal(view, by_row)
        assert not view.flags.writeable
        copied = view.copy()
        model.keep(2)
        again = model.eval([261, 262, 263], logits="all")
        np.testing.assert_array_equal(again, copied)
        assert not np.shares_memory(again, view)
        # "last" over several chunks of a small batch: the row is the final token's.
        last = model.eval([264], logits="last")
        model.keep(2)
        np.testing.assert_allclose(model.eval([261, 262, 263, 264], logits="all")[-1], last[0], atol=1e-5)


def test_placement_is_read_back_from_llama_cpp(tiny_pair: tuple[Path, Path]) -> None:
    with Model(tiny_pair[0]) as model:
        n_layer = int(model.metadata("llama.block_count"))
        # Every layer and the output layer sit on the CPU of this build; the weights' buffer is named.
        assert model.placement.layers == {"CPU": n_layer + 1}
        assert model.placement.offloaded_layers == 0 and model.placement.weights
        assert model.placement.summary() == f"{n_layer + 1} layers on CPU"


def test_a_decode_cut_short_before_its_bookkeeping_is_dropped_and_the_rest_kept(tiny_pair: tuple[Path, Path]) -> None:
    """Ctrl-C can land after llama_decode stored tokens but before `tokens` recorded them."""
    with Model(tiny_pair[0]) as model:
        model.sync([1, 260, 261, 262, 263])
        recorded = list(model.tokens)
        model.eval([264, 265], logits="none")
        del model._tokens[len(recorded):]  # what an interrupt between the two leaves behind
        model.drop_unrecorded()
        assert list(model.tokens) == recorded
        decoded: list[int] = []
        original = model._decode
        model._decode = lambda tokens, rows: (decoded.append(len(tokens)), original(tokens, rows))[1]
        model.sync([*recorded, 270, 271])
        assert decoded == [2]  # the recorded prefix stayed cached
        model._decode = original
        assert_cache_matches_fresh_model(model, tiny_pair[0])


def test_the_turn_after_an_interrupted_reply_is_what_a_fresh_process_says(tiny_pair: tuple[Path, Path]) -> None:
    """Ctrl-C in chat and a client gone in serve both end a generation mid-pass and keep the cache's
    recorded prefix. The next turn, sampled at T=1 with coupled verification, must give exactly the
    tokens a fresh process gives for the same prompt and seed: nothing stale is left in either cache."""
    settings = GenerationSettings(SamplingParams(temperature=1.0, min_p=0.0), SpeculativeParams(strategy="model", draft_max=4),
                                  max_tokens=24, seed=3)
    first_turn = [1, 260, 265, 270, 262]
    with Session(Model(tiny_pair[0]), Model(tiny_pair[1])) as used:
        reply = used.generation(first_turn, dataclasses.replace(settings, max_tokens=200))
        for chunk_number, _ in enumerate(reply):
            if chunk_number == 2:
                break  # the consumer goes away between passes, as chat's Ctrl-C and serve's disconnect do
        used.recover_caches()
        next_turn = [*first_turn, *reply.tokens, 263, 259]
        after_interrupt = used.generation(next_turn, settings)
        tokens_after_interrupt = [token for chunk in after_interrupt for token in chunk.tokens]
        assert after_interrupt.stats.prompt_tokens_evaluated < len(next_turn)  # the kept prefix was reused
    with Session(Model(tiny_pair[0]), Model(tiny_pair[1])) as fresh:
        fresh_tokens = [token for chunk in fresh.generation(next_turn, settings) for token in chunk.tokens]
    assert tokens_after_interrupt == fresh_tokens


def test_a_stop_requested_while_the_prompt_is_read_ends_the_generation_between_its_batches(tiny_pair: tuple[Path, Path]) -> None:
    """serve's client may leave during a long prompt: the reading stops a batch later, the cache consistent,
    and the next generation of that prompt gives what a prompt read whole gives."""
    settings = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=6, seed=1)
    prompt = [1, *(260 + i % 17 for i in range(45))]
    asked = []

    def stop_after_two_batches() -> bool:
        asked.append(len(model.tokens))
        return len(asked) > 2

    with Model(tiny_pair[0], ModelSettings(n_batch=8)) as model:
        stopped = Generation(model, prompt, settings, stop_requested=stop_after_two_batches)
        assert list(stopped) == [] and stopped.stop_reason is StopReason.INTERRUPTED
        assert asked == [0, 8, 16] and list(model.tokens) == prompt[:16]
        tokens = generate_text(model, prompt, settings).tokens
    with Model(tiny_pair[0], ModelSettings(n_batch=64)) as whole:
        assert tokens == generate_text(whole, prompt, settings).tokens and len(tokens) == 6


def test_a_context_reserved_before_first_use_is_sized_for_the_run(tmp_path: Path) -> None:
    path, _ = write_pair(tmp_path, context_length=2048)
    with Model(path, ModelSettings(n_ctx=1024), size_context_later=True) as model:
        model.reserve(300)
        assert model.n_ctx == 512  # the smallest multiple of 256 that holds the run
        model.reserve(900)
        assert model.n_ctx == 512  # created already: a later reservation changes nothing
        prompt = [1, *range(260, 280), *range(260, 280)]
        model.sync(prompt)
        assert model.tokens == tuple(prompt)
    with Model(path, ModelSettings(n_ctx=1024), size_context_later=True) as model:
        model.reserve(5000)
        assert model.n_ctx == 1024  # never beyond the configured size
    with Model(path, ModelSettings(n_ctx=1024), size_context_later=True) as model:
        model.sync([1, 260])
        model.reserve(10)
        assert model.n_ctx == 1024  # used before any reservation: the configured size


def test_a_reserved_context_is_created_where_first_needed_and_its_size_known_before(tmp_path: Path) -> None:
    path, _ = write_pair(tmp_path, context_length=2048)
    with Model(path, ModelSettings(n_ctx=1024), size_context_later=True) as model:
        assert model.context_size == 1024
        model.reserve(300)
        assert model.context_size == 512 and model._ctx is None  # sized, not created
        model.reserve(100)
        assert model.context_size == 512  # the largest reservation holds
        model.sync([1, 260, 261])
        assert model._ctx is not None and model.n_ctx == model.context_size == 512


def test_a_draft_model_creates_its_context_only_once_it_drafts(tiny_profile: str) -> None:
    """A one-shot run's draft model sets up its context after the first token, not before: the drafter asks
    its size without creating it."""
    from localspec.app.plan import resolve
    from localspec.app.session import open_session

    plan = resolve(tiny_profile, {"speculative.strategy": "model", "speculative.draft_max": 3, "sampling.max_tokens": 8})
    with open_session(plan, size_contexts_later=True) as session:
        tokens = session.raw_prompt_tokens("the cat sat on the mat")
        session.reserve_context(len(tokens) + 8)
        generation = session.generation(tokens, plan.generation.with_seed())
        chunks = iter(generation)
        next(chunks)
        assert session.draft._ctx is None and session.target._ctx is not None
        list(chunks)
        assert generation.stats.draft_tokens_proposed > 0 and session.draft.n_ctx == 256


def test_a_closed_model_says_so_instead_of_touching_freed_memory(tmp_path: Path) -> None:
    path, _ = write_pair(tmp_path)
    for size_later in (False, True):
        model = Model(path, size_context_later=size_later)
        model.reserve(100)
        model.sync([1, 260, 261, 262])
        model.close()
        assert model.tokens == ()  # nothing is cached any more
        for use in (lambda: model.sync([1, 263]), lambda: model.eval([1]), lambda: model.reserve(10)):
            with pytest.raises(LocalspecError, match="the model was closed"):
                use()
