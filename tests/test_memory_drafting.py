"""Drafting from a memory of earlier text: exact under coupled verification, never used under rejection sampling.

The memory here is an in-memory suffix index over earlier runs on the tiny pair
(the store that keeps it on disk is tested in test_memory_store.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from stats_helpers import chi_square_pvalue
from test_lossless_tiny import ALPHA, T1, exact_two_token_distribution

from localspec.engine.draft_length import FixedLength
from localspec.engine.drafters import (
    HybridDrafter,
    MemoryDrafter,
    MemoryUse,
    NGramDrafter,
    build_drafter,
    drafts_from_memory,
)
from localspec.engine.generation import generate_text
from localspec.engine.sampling import make_sampler
from localspec.engine.suffix_index import SuffixIndex
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, SamplingParams, SpeculativeParams

PROMPT = [1, 260, 265, 270, 275, 280, 262]  # no repeated n-gram: only the memory can draft at first
SEEDS = 1200


def memory_of(*documents: list[int]) -> SuffixIndex:
    return SuffixIndex.of_documents([list(document) for document in documents])


def test_memory_drafts_only_under_coupled_verification_and_lookup_strategies() -> None:
    assert drafts_from_memory(SpeculativeParams())  # the defaults: hybrid, coupled, memory on
    assert drafts_from_memory(SpeculativeParams(strategy="ngram"))
    assert not drafts_from_memory(SpeculativeParams(verify="rejection"))
    assert not drafts_from_memory(SpeculativeParams(strategy="model"))
    assert not drafts_from_memory(SpeculativeParams(memory=False))


def test_build_drafter_leaves_the_memory_out_under_rejection_sampling(tiny_pair: tuple[Path, Path]) -> None:
    memory = memory_of([*PROMPT, 271, 272, 273])
    with Model(tiny_pair[1]) as draft:
        coupled = build_drafter(SpeculativeParams(draft_max=4), T1, draft, memory=memory)
        rejection = build_drafter(SpeculativeParams(draft_max=4, verify="rejection"), T1, draft, memory=memory)
        ngram_only = build_drafter(SpeculativeParams(strategy="ngram", draft_max=4), T1, None, memory=memory)
    assert isinstance(coupled, HybridDrafter) and isinstance(coupled.memory, MemoryDrafter)
    assert isinstance(rejection, HybridDrafter) and rejection.memory is None
    assert isinstance(ngram_only, HybridDrafter) and ngram_only.by_model is None and ngram_only.memory is not None


def test_a_memory_match_drafts_before_a_copy_is_resumed() -> None:
    """The answer copies its prompt and changes a word: the context's lookup could resume the copy after it
    (a one-token anchor), but the memory holds the edited text itself, a longer match: the memory drafts."""
    source = list(range(300, 340))
    edited = [*source[:11], 999, *source[12:]]
    context = [1, 2, *source, 3, 4, *source[:6]]
    lookup = NGramDrafter(2, 4, resume_length=FixedLength(8))
    hybrid = HybridDrafter(lookup, None, MemoryDrafter(memory_of([5, *edited, 6]), FixedLength(8)))
    hybrid.begin(context)
    sampler = make_sampler("coupled", 1)
    assert hybrid.propose(context, 8, sampler, 0).tokens == source[6:14]
    hybrid.observe(8, 5, 0.01)  # kept 306..310; the target's own token replaced 311
    context += [*source[6:11], 999, 312]
    assert hybrid.propose(context, 8, sampler, 0).tokens == edited[13:21] and hybrid._last is hybrid.memory
    without_memory = HybridDrafter(NGramDrafter(2, 4, resume_length=FixedLength(8)), None)
    without_memory.begin(context[: len(context) - 7])
    without_memory.propose(context[: len(context) - 7], 8, sampler, 0)
    without_memory.observe(8, 5, 0.01)
    assert without_memory.propose(context, 8, sampler, 0).tokens == source[13:21]
    assert without_memory.lookup.resumes_a_copy


def test_memory_proposes_what_followed_the_longest_match(tiny_pair: tuple[Path, Path]) -> None:
    drafter = MemoryDrafter(memory_of([*PROMPT, 271, 272, 273, 274]), FixedLength(3))
    draft = drafter.propose(PROMPT, 8, make_sampler("coupled", 1), 0)
    assert draft.tokens == [271, 272, 273] and draft.q_draft is None
    assert drafter.propose([*PROMPT[:2], 999], 8, make_sampler("coupled", 1), 0).tokens == []  # a tail seen nowhere
    assert drafter.use.lookups == 2 and drafter.use.hits == 1


def test_tokens_a_damaged_memory_holds_outside_the_vocabulary_are_never_drafted(tiny_pair: tuple[Path, Path]) -> None:
    speculative = SpeculativeParams(strategy="ngram", draft_max=6)
    settings = GenerationSettings(T1, speculative, max_tokens=12, seed=5)
    with Model(tiny_pair[0]) as target:
        expected = generate_text(target, PROMPT, GenerationSettings(T1, max_tokens=12, seed=5)).tokens
        damaged = memory_of([*PROMPT, expected[0], 2**31 - 1, expected[1]], [*PROMPT, target.n_vocab, -7])
        generation = generate_text(target, PROMPT, settings, build_drafter(speculative, T1, None, memory=damaged))
        assert generation.tokens == expected
        assert generation.stats.draft_tokens_proposed <= 1  # the valid token before the damage, at most


@pytest.mark.parametrize("sampling", [T1, pytest.param(SamplingParams(), marks=pytest.mark.slow)], ids=["t1.0", "default-sampling"])
def test_coupled_output_is_target_only_output_with_the_memory_drafting(tiny_pair: tuple[Path, Path],
                                                                        sampling: SamplingParams) -> None:
    """The memory holds each seed's own earlier run and other seeds' runs; the text never changes."""
    speculative = SpeculativeParams(strategy="ngram", draft_max=6)
    with Model(tiny_pair[0]) as target:
        earlier = [generate_text(target, PROMPT, GenerationSettings(sampling, max_tokens=12, seed=seed)).tokens
                   for seed in range(40)]
        memory = memory_of(*([*PROMPT, *tokens] for tokens in earlier))
        use = MemoryUse()
        for seed in range(40):
            settings = GenerationSettings(sampling, speculative, max_tokens=12, seed=seed)
            drafter = build_drafter(speculative, sampling, None, memory=memory, memory_use=use)
            assert generate_text(target, PROMPT, settings, drafter).tokens == earlier[seed]
    assert use.hits > 40 and use.accepted > 100 and use.proposed > use.accepted  # drafted, kept and refused


def _second_runs(target: Model, draft: Model, sampling: SamplingParams, speculative: SpeculativeParams) -> Counter:
    """Each seed run twice; the second run is given a memory holding the first. Counts the second runs' first tokens."""
    counts: Counter = Counter()
    for seed in range(SEEDS):
        settings = GenerationSettings(sampling, speculative, max_tokens=2, seed=seed)
        first = generate_text(target, PROMPT, settings, build_drafter(speculative, sampling, draft)).tokens
        drafter = build_drafter(speculative, sampling, draft, memory=memory_of([*PROMPT, *first]))
        counts[generate_text(target, PROMPT, settings, drafter).tokens[0]] += 1
    return counts


def _first_token_distribution(target: Model, sampling: SamplingParams) -> dict[int, float]:
    exact: Counter = Counter()
    for (first, _), probability in exact_two_token_distribution(target, sampling, PROMPT).items():
        exact[first] += probability
    return dict(exact)


@pytest.mark.slow
def test_rejection_sampling_with_the_memory_on_keeps_the_target_distribution(tiny_pair: tuple[Path, Path]) -> None:
    """Seeds repeated twice, the second run given a memory holding the first: under `verify=rejection` the
    memory does not draft (what it holds is correlated with the draws that would verify it), and the
    second runs are distributed as the target's."""
    speculative = SpeculativeParams(strategy="hybrid", draft_max=2, verify="rejection")
    with Model(tiny_pair[0]) as target, Model(tiny_pair[1]) as draft:
        exact = _first_token_distribution(target, T1)
        assert chi_square_pvalue(_second_runs(target, draft, T1, speculative), exact) > ALPHA


@pytest.mark.parametrize("kept", [True, False], ids=["memory-drafts-kept", "memory-drafts-refused"])
def test_hybrid_drafts_from_memory_while_it_beats_the_draft_model(tiny_pair: tuple[Path, Path], kept: bool) -> None:
    """The memory's expected tokens per second (its acceptance measured by confidence) against the model's."""
    memory = memory_of([*PROMPT, 271, 272, 273, 274, 275, 276])
    with Model(tiny_pair[1]) as draft:
        hybrid = build_drafter(SpeculativeParams(), T1, draft, memory=memory)
        assert isinstance(hybrid, HybridDrafter) and hybrid.memory is not None
        for _ in range(20):  # the draft model's costs and acceptance, as a generation would measure them
            hybrid.by_model.length.plan(8)
            hybrid.by_model.length.record_draft_step(0.007, first=True)
            hybrid.by_model.length.record_draft_step(0.007)
            hybrid.by_model.length.observe(4, 3, 0.018 + 0.004 * 5)
        chosen = []
        for _ in range(20):
            proposed = hybrid.propose(PROMPT, 8, make_sampler("coupled", 1), 0)
            chosen.append(hybrid._last is hybrid.memory)
            hybrid.observe(len(proposed.tokens), len(proposed.tokens) if kept else 0, 0.018 + 0.004 * (len(proposed.tokens) + 1))
    assert chosen[0]  # nothing measured against it yet
    if kept:
        assert all(chosen)
    else:  # passed over, but tried again now and then: one bad streak must not keep it out for good
        assert 1 <= sum(chosen[-16:]) <= 3
