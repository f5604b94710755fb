"""Coupled verification: speculative output equals target-only output, token for token, at any temperature.

The strongest lossless test there is: for each seed the speculative loop must emit
exactly the tokens target-only decoding draws with the same seed, whatever drafts
(model, lookup, hybrid), however long the drafts (fixed or adaptive), and with
draft_min/p_min cutting them. Every token is compared, so bonus tokens and
positions past the first draft are covered. A deliberately wrong coupling must
fail the same comparison.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from localspec.engine import generation as generation_module
from localspec.engine.drafters import HybridDrafter, build_drafter
from localspec.engine.generation import generate_text
from localspec.engine.noise import gumbel
from localspec.engine.penalties import Penalties
from localspec.engine.sampling import CoupledSampler, Probs
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, ModelSettings, SamplingParams, SpeculativeParams

PROMPT = [1, 260, 265, 270, 262, 260, 265]  # ends in a 2-gram seen before, so lookups draft from the start
N_SEEDS = 12
MAX_TOKENS = 20

SAMPLINGS = {
    "t0.7": SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0),
    "t1.0": SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    "t1.0-topk8-topp0.9": SamplingParams(temperature=1.0, top_k=8, top_p=0.9, min_p=0.0),
    "shipped-min-p": SamplingParams(),
    # each row penalised for the context and the drafts before it, as target-only decoding's row there
    "penalties": SamplingParams(repeat_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.3, repeat_last_n=8),
}
SPECULATIVE = {
    "model-1": SpeculativeParams(strategy="model", draft_max=1),
    "model-3": SpeculativeParams(strategy="model", draft_max=3),
    "model-8": SpeculativeParams(strategy="model", draft_max=8),
    "model-adaptive": SpeculativeParams(strategy="model"),
    "model-draft_min-p_min": SpeculativeParams(strategy="model", draft_max=4, draft_min=2, p_min=0.3),
    "ngram-3": SpeculativeParams(strategy="ngram", draft_max=3, ngram_min=1, ngram_max=2),
    "hybrid-8": SpeculativeParams(strategy="hybrid", draft_max=8, ngram_min=2, ngram_max=2),
    "hybrid-adaptive": SpeculativeParams(strategy="hybrid", ngram_min=2, ngram_max=2),
}


@pytest.fixture(scope="module")
def pair(tiny_pair: tuple[Path, Path]):
    with Model(tiny_pair[0]) as target, Model(tiny_pair[1], proposes_only=True) as draft:  # (as a session loads it)
        yield target, draft


class _CountingDrafter:
    """A drafter that counts the target's verdicts: passes with a rejection, passes that kept every draft."""

    def __init__(self, drafter) -> None:
        self.drafter = drafter
        self.rejecting_passes = self.fully_kept_passes = 0

    @property
    def tokens_copied(self) -> int:
        return self.drafter.tokens_copied

    def prompt_to_read(self, prompt_tokens) -> int:
        return self.drafter.prompt_to_read(prompt_tokens)

    def begin(self, prompt_tokens, read_later: bool = False) -> None:
        self.drafter.begin(prompt_tokens, read_later)

    def ready_to_read(self, context, n_generated: int, budget_left: int) -> bool:
        return self.drafter.ready_to_read(context, n_generated, budget_left)

    def read(self, context) -> None:
        self.drafter.read(context)

    def propose(self, context, max_tokens, sampler, position, grammar=None):
        return self.drafter.propose(context, max_tokens, sampler, position, grammar)

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float) -> None:
        self.rejecting_passes += n_accepted < n_proposed
        self.fully_kept_passes += 0 < n_proposed == n_accepted
        self.drafter.observe(n_proposed, n_accepted, verify_seconds)


class _CountingSide:
    """One side of a hybrid drafter, counting the passes it drafted."""

    def __init__(self, drafter, totals: dict[str, int], key: str) -> None:
        self.drafter, self.totals, self.key = drafter, totals, key

    def begin(self, prompt_tokens, read_later: bool = False) -> None:
        self.drafter.begin(prompt_tokens, read_later)

    def propose(self, context, max_tokens, sampler, position, grammar=None, *continued):
        draft = self.drafter.propose(context, max_tokens, sampler, position, grammar, *continued)
        self.totals[self.key] += bool(draft.tokens)
        return draft

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float) -> None:
        self.drafter.observe(n_proposed, n_accepted, verify_seconds)

    def __getattr__(self, name: str):  # the rest (its length controller, lags_behind...) as the side's own
        return getattr(self.drafter, name)


def _compare(target: Model, draft: Model, sampling: SamplingParams, speculative: SpeculativeParams) -> dict[str, int]:
    """Generate with and without speculation for each seed: how many seeds differed, and the verdicts seen."""
    totals = {"differing_seeds": 0, "rejecting_passes": 0, "fully_kept_passes": 0, "kept_at_position_3_or_later": 0,
              "lookup_passes": 0, "model_passes": 0}
    for seed in range(N_SEEDS):
        settings = GenerationSettings(sampling, speculative, max_tokens=MAX_TOKENS, seed=seed)
        alone = generate_text(target, PROMPT, settings)
        inner = build_drafter(speculative, sampling, draft)
        if isinstance(inner, HybridDrafter):  # count which side drafted each pass
            inner.lookup = _CountingSide(inner.lookup, totals, "lookup_passes")
            inner.by_model = _CountingSide(inner.by_model, totals, "model_passes")
        drafter = _CountingDrafter(inner)
        drafted = generate_text(target, PROMPT, settings, drafter)
        totals["differing_seeds"] += drafted.tokens != alone.tokens
        totals["rejecting_passes"] += drafter.rejecting_passes
        totals["fully_kept_passes"] += drafter.fully_kept_passes
        totals["kept_at_position_3_or_later"] += sum(drafted.stats.accepted_at[2:])
    return totals


# Every drafting configuration with one sampling each (rotating) in the fast suite; all pairs in the slow one.
FAST_CASES = [(speculative, list(SAMPLINGS)[i % len(SAMPLINGS)]) for i, speculative in enumerate(SPECULATIVE)]
ALL_CASES = [
    pytest.param(speculative, sampling, marks=[] if (speculative, sampling) in FAST_CASES else [pytest.mark.slow])
    for speculative in SPECULATIVE
    for sampling in SAMPLINGS
]


@pytest.mark.slow
@pytest.mark.parametrize(("speculative_name", "sampling_name"), ALL_CASES)
def test_speculative_tokens_equal_target_only_tokens(pair, speculative_name: str, sampling_name: str) -> None:
    target, draft = pair
    totals = _compare(target, draft, SAMPLINGS[sampling_name], SPECULATIVE[speculative_name])
    assert totals["differing_seeds"] == 0
    # The identity held through rejections and through fully kept drafts (then the target's token is a bonus).
    assert totals["rejecting_passes"] > 0 and totals["fully_kept_passes"] > 0
    speculative = SPECULATIVE[speculative_name]
    if not speculative.adaptive and speculative.strategy != "ngram" and speculative.longest_draft >= 3:
        assert totals["kept_at_position_3_or_later"] > 0  # long model drafts were kept deep into the pass
    if speculative.strategy == "hybrid":  # both sides drafted: lookup passes and model passes
        assert totals["lookup_passes"] > 0 and totals["model_passes"] > 0


class _NoiseKeyedByDrawOrder(CoupledSampler):
    """A wrong coupling: noise keyed by how many draws came before instead of the position."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.draws = 0

    def _scores(self, probs: Probs, position: int) -> np.ndarray:  # (what `draw` and `draw_with_lead` draw by)
        self.draws += 1
        with np.errstate(divide="ignore"):
            return np.log(probs.values) + gumbel(self.seed, self.draws, probs.ids)


@pytest.mark.slow
def test_a_wrong_coupling_fails_the_identity_test(pair, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generation_module, "make_sampler", lambda verify, seed: _NoiseKeyedByDrawOrder(seed))
    target, draft = pair
    totals = _compare(target, draft, SAMPLINGS["t1.0"], SPECULATIVE["model-3"])
    assert totals["differing_seeds"] > N_SEEDS // 2


@pytest.mark.slow
@pytest.mark.parametrize("speculative_name", ["model-3", "hybrid-adaptive"])
def test_penalised_rows_give_target_only_tokens_and_rows_that_leave_out_the_drafts_do_not(
        pair, monkeypatch: pytest.MonkeyPatch, speculative_name: str) -> None:
    target, draft = pair
    totals = _compare(target, draft, SAMPLINGS["penalties"], SPECULATIVE[speculative_name])
    assert totals["differing_seeds"] == 0 and totals["rejecting_passes"] > 0 and totals["fully_kept_passes"] > 0

    def each_row_without_the_drafts(self, rows, text, drafted):
        return [self.apply(row, self.window(text)) for row in rows]

    monkeypatch.setattr(Penalties, "each_row", each_row_without_the_drafts)
    assert _compare(target, draft, SAMPLINGS["penalties"], SPECULATIVE[speculative_name])["differing_seeds"] > 0


def test_rejection_verification_does_not_promise_identity(pair) -> None:
    """With `verify = rejection` the text is only equally distributed: most seeds differ from target-only."""
    target, draft = pair
    speculative = SpeculativeParams(strategy="model", draft_max=3, verify="rejection")
    totals = _compare(target, draft, SAMPLINGS["t1.0"], speculative)
    assert totals["differing_seeds"] > N_SEEDS // 2


@pytest.mark.parametrize("max_tokens", [1, 2, 5])
def test_identity_where_max_tokens_cuts_the_drafts(pair, max_tokens: int) -> None:
    """The room left (max_tokens - 1) shortens the last drafts: the tokens are still the target's own."""
    target, draft = pair
    for seed in range(N_SEEDS):
        settings = GenerationSettings(SAMPLINGS["t1.0"], SPECULATIVE["model-8"], max_tokens=max_tokens, seed=seed)
        drafted = generate_text(target, PROMPT, settings, build_drafter(settings.speculative, settings.sampling, draft))
        assert drafted.tokens == generate_text(target, PROMPT, settings).tokens
        assert len(drafted.tokens) == max_tokens or drafted.stop_reason == "eos"


def test_the_first_token_comes_from_the_prompts_evaluation_not_from_a_pass(pair, monkeypatch) -> None:
    """Both ways of decoding draw the first token from the row the prompt's evaluation leaves: N tokens take
    N-1 passes without drafts, and (padded where a lone token rounds unlike a batch) nothing is read alone."""
    target, _ = pair
    monkeypatch.setattr(target, "_lone_reads_differ", True)
    lengths = []
    for seed in range(N_SEEDS):
        settings = GenerationSettings(SAMPLINGS["t1.0"], max_tokens=6, seed=seed)
        target.clear()
        alone = generate_text(target, PROMPT, settings)
        assert alone.stats.tokens_from_prompt == 1 and target.tokens_read_in_batches == len(target.tokens)
        if alone.stop_reason == "length":
            assert alone.stats.target_passes == len(alone.tokens) - 1 == 5
            lengths.append(seed)
        first = generate_text(target, PROMPT, dataclasses.replace(settings, max_tokens=1))  # the prompt's evaluation only
        assert first.tokens == alone.tokens[:1] and first.stats.target_passes == 0
    assert lengths  # (not every one ended at an end token)


def test_identity_where_a_stop_string_ends_the_text_inside_a_pass(pair) -> None:
    """A stop string found in the middle of a pass's accepted tokens ends both texts at the same place."""
    target, draft = pair
    stopped = 0
    for seed in range(N_SEEDS):
        free = GenerationSettings(SAMPLINGS["t0.7"], SPECULATIVE["hybrid-8"], max_tokens=MAX_TOKENS, seed=seed)
        text = generate_text(target, PROMPT, free).text
        if len(text) < 6:
            continue
        settings = dataclasses.replace(free, stop=(text[3:5],))
        alone = generate_text(target, PROMPT, settings)
        drafted = generate_text(target, PROMPT, settings, build_drafter(settings.speculative, settings.sampling, draft))
        assert (drafted.tokens, drafted.text, drafted.stop_reason) == (alone.tokens, alone.text, alone.stop_reason)
        stopped += alone.stop_reason == "stop"
    assert stopped > N_SEEDS // 2


def test_identity_where_the_context_fills(tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """When the context is nearly full, drafts are cut to the room left; the last tokens still match. Where
    passes are padded, the last position is left free for the second row: read alone there, a token's logits
    differed from the same position read in a speculative batch (a near-tie drew another token)."""
    small = ModelSettings(n_ctx=256)
    with Model(tiny_pair[0], small) as target, Model(tiny_pair[1], small) as draft:
        assert target.pads_a_lone_token  # (llama.cpp's default CPU build: llamafile's kernels)
        rows: list[int] = []
        evaluate = target.eval
        monkeypatch.setattr(target, "eval", lambda tokens, **kwargs: rows.append(len(tokens)) or evaluate(tokens, **kwargs))
        prompt = (PROMPT * 40)[: target.n_ctx - 12]
        for seed in range(4):
            settings = GenerationSettings(SAMPLINGS["t1.0"], SPECULATIVE["model-8"], max_tokens=64, seed=seed)
            drafted = generate_text(target, prompt, settings, build_drafter(settings.speculative, settings.sampling, draft))
            rows.clear()
            alone = generate_text(target, prompt, settings)
            assert drafted.tokens == alone.tokens and drafted.stop_reason == alone.stop_reason
            assert drafted.stop_reason == "eos" or len(prompt) + len(drafted.tokens) == target.n_ctx
            assert min(rows[1:]) == 2  # every target-only pass after the prompt was padded, the last one too


def test_passes_without_a_draft_are_padded_where_a_lone_token_rounds_unlike_a_batch(pair, monkeypatch) -> None:
    """On a llama.cpp built with llamafile's kernels a one-token pass gets a second row (dropped after),
    target-only decoding's too: the text and the cache are as without it, and every pass of a run is a batch."""
    target, draft = pair
    monkeypatch.setattr(target, "_lone_reads_differ", True)
    batch_sizes: list[int] = []
    evaluate = target.eval
    monkeypatch.setattr(target, "eval", lambda tokens, **kwargs: batch_sizes.append(len(tokens)) or evaluate(tokens, **kwargs))
    speculative = SpeculativeParams(strategy="model", draft_max=4, draft_min=4)  # short drafts are dropped: lone passes
    settings = GenerationSettings(SAMPLINGS["t1.0"], speculative, max_tokens=MAX_TOKENS, seed=5)
    drafted = generate_text(target, PROMPT, settings, build_drafter(speculative, settings.sampling, draft))
    passes = batch_sizes[1:]  # after the prompt
    assert passes and min(passes) >= 2 and 2 in passes  # padded lone passes happened, and no pass was one row
    assert list(target.tokens) == [*PROMPT, *drafted.tokens][: len(target.tokens)]
    batch_sizes.clear()
    padded_alone = generate_text(target, PROMPT, settings)
    assert min(batch_sizes[1:]) == 2 and list(target.tokens) == [*PROMPT, *padded_alone.tokens][: len(target.tokens)]
    monkeypatch.undo()
    assert drafted.tokens == padded_alone.tokens == generate_text(target, PROMPT, settings).tokens


@pytest.mark.parametrize("strategy", [None, "ngram"])
def test_without_the_same_text_promise_a_lone_token_is_a_pass_of_one_row(pair, monkeypatch, strategy: str | None) -> None:
    """`speculative.same_text = false` gives up the padded pair for llama.cpp's faster single-row pass: target-only
    decoding and a speculative pass that drafted nothing decode one row, and no guess rides along."""
    target, _ = pair
    monkeypatch.setattr(target, "_lone_reads_differ", True)
    batch_sizes: list[int] = []
    evaluate = target.eval
    monkeypatch.setattr(target, "eval", lambda tokens, **kwargs: batch_sizes.append(len(tokens)) or evaluate(tokens, **kwargs))
    speculative = SpeculativeParams(strategy=strategy or "ngram", draft_max=4, ngram_min=3, ngram_max=3, same_text=False)
    settings = GenerationSettings(SAMPLINGS["t1.0"], speculative, max_tokens=MAX_TOKENS, seed=5)
    drafter = build_drafter(speculative, settings.sampling, None) if strategy else None
    generated = generate_text(target, PROMPT, settings, drafter)
    assert 1 in batch_sizes[1:] and generated.stats.guesses == 0
    assert list(target.tokens) == [*PROMPT, *generated.tokens][: len(target.tokens)]
    batch_sizes.clear()
    promised = dataclasses.replace(settings, speculative=dataclasses.replace(speculative, same_text=True))
    generate_text(target, PROMPT, promised, build_drafter(speculative, settings.sampling, None) if strategy else None)
    assert min(batch_sizes[1:]) >= 2  # the promise kept: no pass of one row


def test_what_a_generation_without_the_promise_read_alone_is_read_again_by_one_with_it(pair, monkeypatch) -> None:
    """A chat turned back to `same_text` (or a conversation loaded from one without it) does not reuse the
    tokens the turns before read alone: its text is the padded target-only text, as from an empty cache."""
    target, _ = pair
    monkeypatch.setattr(target, "_lone_reads_differ", True)
    promised = GenerationSettings(SAMPLINGS["t1.0"], SpeculativeParams(strategy="ngram"), max_tokens=MAX_TOKENS, seed=3)
    unpromised = dataclasses.replace(promised, speculative=SpeculativeParams(strategy="ngram", same_text=False))
    target.clear()
    first = generate_text(target, PROMPT, unpromised)  # target-only, each token read alone
    assert target.tokens_read_in_batches < len(target.tokens)
    follow_up = [*PROMPT, *first.tokens, *PROMPT[:5]]
    again = generate_text(target, follow_up, promised)
    # re-read from the first lone token: the first generated one (the prompt was read in a batch, which gave it)
    assert again.stats.prompt_tokens_evaluated == len(follow_up) - len(PROMPT)
    target.clear()
    assert again.tokens == generate_text(target, follow_up, promised).tokens


def test_a_token_past_256_cached_tokens_is_computed_alike_in_a_pass_of_its_own_and_in_a_batch(tmp_path: Path) -> None:
    """Past 256 cached tokens the CPU's flash attention split a lone token's attention unlike a batch's
    rows (logits 0.01-0.05 apart on the demo target): target-only and speculative text then parted at
    near-ties. Targets on the CPU run without it. (Where llamafile's kernels compute a lone token unlike
    a batch, a pass of its own is a padded pair, as target-only decoding makes it.)"""
    from tiny_models import write_pair

    target_path, _ = write_pair(tmp_path, context_length=1024)
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(259, 283, size=700)]
    with Model(target_path, ModelSettings(n_ctx=1024)) as target:
        for length in (200, 300, 600):
            target.sync(tokens[: length - 1])
            pass_of_its_own = tokens[length - 1 : length] * (2 if target.lone_reads_differ else 1)
            alone = target.eval(pass_of_its_own, logits=len(pass_of_its_own))[0].copy()
            target.sync(tokens[: length - 1])
            in_batch = target.eval(tokens[length - 1 : length + 4], logits="all")[0]
            assert np.array_equal(alone, in_batch), length


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_padded_pass_carries_a_guess_and_the_text_is_the_same(pair, monkeypatch, temperature: float) -> None:
    """Where a pass with nothing drafted is padded to two rows, the second row carries a guess (the token that
    followed the last token's latest occurrence): some are kept, and the text is target-only's."""
    target, _ = pair
    monkeypatch.setattr(target, "_lone_reads_differ", True)
    speculative = SpeculativeParams(strategy="ngram", draft_max=4, ngram_min=3, ngram_max=3)  # few lookups: many guesses
    guesses = kept = 0
    for seed in range(N_SEEDS):
        settings = GenerationSettings(SamplingParams(temperature=temperature), speculative, max_tokens=MAX_TOKENS, seed=seed)
        drafted = generate_text(target, PROMPT, settings, build_drafter(speculative, settings.sampling, None))
        assert drafted.tokens == generate_text(target, PROMPT, settings).tokens
        stats = drafted.stats  # every token came from the prompt's evaluation, a pass, a kept draft or a kept guess
        assert stats.tokens_from_prompt + stats.target_passes + stats.draft_tokens_accepted + stats.guesses_kept \
            >= stats.tokens_generated
        guesses, kept = guesses + drafted.stats.guesses, kept + drafted.stats.guesses_kept
    assert guesses > kept > 0


def test_no_guess_where_the_text_would_depend_on_it(pair, monkeypatch) -> None:
    """Under rejection verification at T > 0 the text depends on the drafts: padded passes stay padded."""
    target, _ = pair
    monkeypatch.setattr(target, "_lone_reads_differ", True)
    speculative = SpeculativeParams(strategy="ngram", draft_max=4, verify="rejection")
    settings = GenerationSettings(SAMPLINGS["t1.0"], speculative, max_tokens=MAX_TOKENS, seed=1)
    assert generate_text(target, PROMPT, settings, build_drafter(speculative, settings.sampling, None)).stats.guesses == 0
    unpadded = dataclasses.replace(speculative, verify="coupled")
    monkeypatch.setattr(target, "_lone_reads_differ", False)  # (no padded pass, no guess)
    settings = dataclasses.replace(settings, speculative=unpadded)
    assert generate_text(target, PROMPT, settings, build_drafter(unpadded, settings.sampling, None)).stats.guesses == 0
