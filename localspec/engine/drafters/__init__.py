"""Drafters: whatever proposes the tokens the target then verifies, one module per strategy.

`speculative.strategy` picks one: `model` (a draft model), `ngram` (lookup in
the context, no draft model) or `hybrid` (lookup where the context's tail
occurred before and is expected to pay, the draft model otherwise, decided per pass).
`ngram` and `hybrid` also look in the memory of earlier text when they are given
one (`speculative.memory`, coupled verification only: see `drafters.memory`).
"""

from __future__ import annotations

from typing import Callable

from ...runtime.model import Model
from ...settings import SamplingParams, SpeculativeParams
from ..draft_length import DraftLength, FixedLength, LearnedLengths
from .base import NO_DRAFT, Draft, Drafter
from .hybrid import HybridDrafter
from .memory import MemoryDrafter, MemoryUse, TokenMemory
from .model import ModelDrafter
from .ngram import NGramDrafter

__all__ = ["NO_DRAFT", "Draft", "Drafter", "HybridDrafter", "MemoryDrafter", "MemoryUse", "ModelDrafter", "NGramDrafter",
           "TokenMemory", "build_drafter", "drafts_from_memory"]


def build_drafter(
    speculative: SpeculativeParams,
    sampling: SamplingParams,
    draft_model: Model | None,
    learned: LearnedLengths | None = None,
    constrained: bool = False,
    memory: TokenMemory | None = None,
    memory_use: MemoryUse | None = None,
    word_form: Callable[[int], int] | None = None,
    copies_from: Model | None = None,
) -> Drafter:
    """The drafter for `speculative.strategy` (model and hybrid need `draft_model`).

    With an adaptive draft length, `learned` keeps one controller per drafting side
    ("model", "ngram<n>" for each match length n, "resume" for resumed copies, "memory"), verification mode,
    temperature band and whether the output is held to a grammar (`constrained`:
    drafts are accepted far more often there) across generations, so a chat or a
    benchmark keeps what it measured (and a run what earlier runs did). `memory`,
    earlier text to draft from, is used where `drafts_from_memory` says so;
    `memory_use` adds up how that went. `word_form` (`Model.word_form` of the target): what lookups in the
    context compare tokens by. `copies_from`: the target, whose cache the draft model copies rather
    than reading what the target has read (see `ModelDrafter`).
    """
    learned = LearnedLengths() if learned is None else learned

    def length(side: str) -> DraftLength:
        if not speculative.adaptive:
            return FixedLength(speculative.longest_draft)
        return learned.controller(side, speculative.verify, sampling.temperature, constrained)

    def lookup_length(match_length: int) -> DraftLength:
        return length(f"ngram{match_length}")  # each match length learns its own acceptance

    from_memory = None
    if memory is not None and drafts_from_memory(speculative):
        from_memory = MemoryDrafter(memory, length("memory"), memory_use)
    if speculative.strategy == "ngram":
        in_context = NGramDrafter(speculative.ngram_min, speculative.ngram_max, lookup_length, length("resume"), word_form)
        return in_context if from_memory is None else HybridDrafter(in_context, None, from_memory)
    if draft_model is None:
        raise ValueError(f"strategy {speculative.strategy!r} needs a draft model")
    by_model = ModelDrafter(draft_model, sampling, speculative.p_min, length("model"), copies_from)
    if speculative.strategy == "model":
        return by_model
    # With a fixed length, hybrid cannot weigh a lookup against the model: only the longest matches draft
    # (and a copy that lost its thread is not resumed).
    if speculative.adaptive:
        in_context = NGramDrafter(speculative.ngram_min, speculative.ngram_max, lookup_length, length("resume"), word_form)
    else:
        in_context = NGramDrafter(speculative.ngram_max, speculative.ngram_max, lookup_length, word_form=word_form)
    return HybridDrafter(in_context, by_model, from_memory)


def drafts_from_memory(speculative: SpeculativeParams) -> bool:
    """Whether these settings draft from a memory of earlier text: on, a lookup strategy, coupled verification.

    Under rejection sampling losslessness is not assured: the memory may hold an
    earlier run with the same seed, whose tokens are correlated with the very draws
    that verify them. (Deterministic drafts are verified by the target's own draws,
    one per token, but which kind of pass runs would then depend on what the memory
    holds, and so on draws still to come.)
    """
    return speculative.memory and speculative.strategy in ("ngram", "hybrid") and speculative.verify == "coupled"
