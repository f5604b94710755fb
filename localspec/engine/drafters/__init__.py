"""Drafters: whatever proposes the tokens the target then verifies, one module per strategy.

`speculative.strategy` picks one: `model` (a draft model), `ngram` (lookup in
the context, no draft model) or `hybrid` (lookup when the context's last
`ngram_max` tokens occurred before, the draft model otherwise, decided per pass).
"""

from __future__ import annotations

from ...runtime.model import Model
from ...settings import SamplingParams, SpeculativeParams
from ..draft_length import DraftLength, FixedLength, LearnedLengths
from .base import NO_DRAFT, Draft, Drafter
from .hybrid import HybridDrafter
from .model import ModelDrafter
from .ngram import NGramDrafter

__all__ = ["NO_DRAFT", "Draft", "Drafter", "HybridDrafter", "ModelDrafter", "NGramDrafter", "build_drafter"]


def build_drafter(
    speculative: SpeculativeParams,
    sampling: SamplingParams,
    draft_model: Model | None,
    learned: LearnedLengths | None = None,
    constrained: bool = False,
) -> Drafter:
    """The drafter for `speculative.strategy` (model and hybrid need `draft_model`).

    With an adaptive draft length, `learned` keeps one controller per drafting side
    ("model", "ngram"), verification mode, temperature band and whether the output
    is held to a grammar (`constrained`: drafts are accepted far more often there)
    across generations, so a chat or a benchmark keeps what it measured (and a run
    what earlier runs did).
    """
    learned = LearnedLengths() if learned is None else learned

    def length(side: str) -> DraftLength:
        if not speculative.adaptive:
            return FixedLength(speculative.longest_draft)
        return learned.controller(side, speculative.verify, sampling.temperature, constrained)

    if speculative.strategy == "ngram":
        return NGramDrafter(speculative.ngram_min, speculative.ngram_max, length("ngram"))
    if draft_model is None:
        raise ValueError(f"strategy {speculative.strategy!r} needs a draft model")
    by_model = ModelDrafter(draft_model, sampling, speculative.p_min, length("model"))
    if speculative.strategy == "model":
        return by_model
    return HybridDrafter(NGramDrafter(speculative.ngram_max, speculative.ngram_max, length("ngram")), by_model)
