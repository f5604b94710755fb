"""Generation held to a grammar, on the tiny model pair.

Losslessness w.r.t. the constrained target: over many seeds the first two
tokens the speculative loop emits follow the target's distribution masked by
the grammar (each step's mask from the grammar's state after the tokens
before it), for rejection and coupled verification, model and lookup drafts.
After rejected drafts the grammar is where target-only decoding would leave it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import llguidance
import numpy as np
import pytest
from stats_helpers import chi_square_pvalue
from tiny_models import write_pair

from localspec.engine.constraint import TokenGrammar
from localspec.engine.draft_length import FixedLength
from localspec.engine.drafters import ModelDrafter, build_drafter
from localspec.engine.generation import Generation, StopReason, generate_text
from localspec.engine.sampling import CoupledSampler, next_token_probs
from localspec.errors import LocalspecError, OutputFormatError
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, SamplingParams, SpeculativeParams

PROMPT = [1, 260, 265, 270]
REPEATING_PROMPT = [1, 260, 265, 270, 262, 260, 265]  # lookup drafts [270, 262, ...], which the grammar cuts
N_SEEDS = 1200
ALPHA = 1e-3
T1 = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)

# Words of the tiny vocabulary, each a token of its own ("▁the" ...) or spelled from byte tokens:
# the grammar leaves a real choice at every step and forbids most of the vocabulary.
WORDS_GRAMMAR = llguidance.LLMatcher.grammar_from_regex(r"( the| cat| dog| sat| on| mat| red| sun| sky| sea)+")
# A forced opening and closing around one choice: forced tokens, then a choice, then the end.
FORCED_GRAMMAR = llguidance.LLMatcher.grammar_from_regex(r" the (cat|dog|sun) is blue")


@pytest.fixture(scope="module")
def spaced_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny pair with a lone-space token, so that forced text with spaces tokenizes as it reads."""
    return write_pair(tmp_path_factory.mktemp("tiny-spaced"), space_token=True)


def exact_masked_two_tokens(target: Model, grammar: str, sampling: SamplingParams, prompt: list[int]) -> dict:
    """P(t1, t2) under the target's distribution masked by the grammar at each step."""
    state = TokenGrammar.start(target, grammar)
    first = next_token_probs(target.next_logits(prompt), sampling, state.allowed())
    joint = {}
    for t1, p1 in zip(first.ids, first.values):
        state.consume([int(t1)])
        second = next_token_probs(target.next_logits([*prompt, int(t1)]), sampling, state.allowed())
        for t2, p2 in zip(second.ids, second.values):
            joint[(int(t1), int(t2))] = float(p1 * p2)
        state._rollback(1)
    return joint


CASES = {
    # name: (speculative settings, prompt)
    "rejection-model": (SpeculativeParams(strategy="model", draft_max=3, verify="rejection"), PROMPT),
    "coupled-model": (SpeculativeParams(strategy="model", draft_max=3), PROMPT),
    "rejection-hybrid": (SpeculativeParams(strategy="hybrid", draft_max=3, ngram_min=2, ngram_max=2, verify="rejection"), REPEATING_PROMPT),
}
FAST_CASES: tuple[str, ...] = ()  # each case draws 1200 generations: the slow suite runs them


@pytest.mark.parametrize("case", [pytest.param(name, marks=[] if name in FAST_CASES else [pytest.mark.slow]) for name in CASES])
def test_constrained_speculation_matches_the_masked_target_distribution(spaced_pair: tuple[Path, Path], case: str) -> None:
    speculative, prompt = CASES[case]
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        exact = exact_masked_two_tokens(target, WORDS_GRAMMAR, T1, prompt)
        counts: Counter = Counter()
        proposed = accepted = 0
        for seed in range(N_SEEDS):
            settings = GenerationSettings(T1, speculative, max_tokens=3, seed=seed)
            generation = generate_text(target, prompt, settings, build_drafter(speculative, T1, draft), WORDS_GRAMMAR)
            counts[tuple(generation.tokens[:2])] += 1
            proposed += generation.stats.draft_tokens_proposed
            accepted += generation.stats.draft_tokens_accepted
    assert len(exact) > 20  # the grammar leaves a real choice
    assert accepted > 100 and proposed - accepted > 100  # both sides of the acceptance rule were exercised
    assert chi_square_pvalue(counts, exact) > ALPHA


def test_the_unmasked_target_fails_the_same_test(spaced_pair: tuple[Path, Path]) -> None:
    """Power check: target-only samples without the grammar are far from the masked distribution."""
    with Model(spaced_pair[0]) as target:
        exact = exact_masked_two_tokens(target, WORDS_GRAMMAR, T1, PROMPT)
        counts = Counter(
            tuple(generate_text(target, PROMPT, GenerationSettings(T1, max_tokens=2, seed=seed)).tokens)
            for seed in range(200)
        )
    assert chi_square_pvalue(counts, exact) < ALPHA


@pytest.mark.slow
def test_the_grammar_follows_the_emitted_tokens_after_rejections(spaced_pair: tuple[Path, Path]) -> None:
    """After every step, the generation's grammar allows exactly what a grammar fed the emitted tokens allows."""
    speculative = SpeculativeParams(strategy="model", draft_max=4, verify="rejection")
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        rejections = 0
        for seed in range(6):
            settings = GenerationSettings(T1, speculative, max_tokens=24, seed=seed)
            generation = Generation(target, PROMPT, settings, build_drafter(speculative, T1, draft), WORDS_GRAMMAR)
            for _ in generation:
                replay = TokenGrammar.start(target, WORDS_GRAMMAR)
                replay.consume(generation.tokens)
                assert np.array_equal(generation.grammar.allowed(), replay.allowed())
            rejections += generation.stats.draft_tokens_proposed - generation.stats.draft_tokens_accepted
            text = target.detokenize(generation.tokens)
            assert text.startswith(" ") and set(text.split()) <= {"the", "cat", "dog", "sat", "on", "mat", "red", "sun", "sky", "sea"}
    assert rejections > 10


@pytest.mark.slow
def test_penalised_rows_under_a_grammar_give_target_only_tokens(spaced_pair: tuple[Path, Path]) -> None:
    """Forced tokens count in the penalties' window as drawn ones do, masked rows are penalised, and speculative
    decoding emits what target-only decoding does."""
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.5, presence_penalty=0.8,
                              repeat_last_n=6)
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        for speculative in (SpeculativeParams(strategy="model", draft_max=3), SpeculativeParams(strategy="hybrid")):
            for seed in range(6):
                settings = GenerationSettings(sampling, speculative, max_tokens=24, seed=seed)
                for grammar in (WORDS_GRAMMAR, FORCED_GRAMMAR):
                    alone = generate_text(target, PROMPT, settings, None, grammar)
                    drafter = build_drafter(speculative, sampling, draft)
                    drafted = generate_text(target, PROMPT, settings, drafter, grammar)
                    assert drafted.tokens == alone.tokens


@pytest.mark.parametrize("verify", ["coupled", "rejection"])
def test_forced_tokens_and_the_grammars_end(spaced_pair: tuple[Path, Path], verify: str) -> None:
    """Forced text is appended without sampling; the generation stops when the grammar is complete,
    and speculative decoding emits what target-only decoding does (coupled: for every seed)."""
    speculative = SpeculativeParams(strategy="model", draft_max=3, verify=verify)
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        for seed in range(8):
            settings = GenerationSettings(T1, speculative, max_tokens=40, seed=seed)
            alone = generate_text(target, PROMPT, settings, None, FORCED_GRAMMAR)
            drafted = generate_text(target, PROMPT, settings, build_drafter(speculative, T1, draft), FORCED_GRAMMAR)
            for generation in (alone, drafted):
                assert generation.stop_reason is StopReason.EOS
                assert generation.text in {" the cat is blue", " the dog is blue", " the sun is blue"}
                assert generation.stats.forced_tokens > 0
            if verify == "coupled":
                assert drafted.tokens == alone.tokens
                # Every forced token counted once, whether appended, drafted through or drawn as the bonus,
                # and never as a draft kept.
                assert drafted.stats.forced_tokens == alone.stats.forced_tokens
                assert drafted.stats.draft_tokens_accepted + drafted.stats.forced_tokens <= len(drafted.tokens)


@pytest.mark.parametrize("rule", ['x[max_tokens=12]: /( the| cat| dog| sat)+/', 'x[stop=" sun"]: /( the| cat| dog)+/'])
def test_a_grammar_llguidance_cannot_step_back_is_drafted_along_a_copy(spaced_pair: tuple[Path, Path],
                                                                        rule: str) -> None:
    """llguidance cannot roll a matcher back over a lexeme with a token limit or a stop string: drafts are checked
    along a copy of it (speculative decoding failed with "the grammar could not step back"), the same text."""
    grammar = llguidance.LLMatcher.grammar_from_lark(f"start: x\n{rule}\n")
    speculative = SpeculativeParams(strategy="model", draft_max=3)
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        for seed in range(4):
            settings = GenerationSettings(T1, speculative, max_tokens=16, seed=seed)
            alone = generate_text(target, PROMPT, settings, None, grammar)
            drafted = generate_text(target, PROMPT, settings, build_drafter(speculative, T1, draft), grammar)
            assert drafted.tokens == alone.tokens and drafted.stop_reason is alone.stop_reason
            assert drafted.stats.draft_tokens_accepted > 0


def test_max_tokens_cuts_a_grammar_short(spaced_pair: tuple[Path, Path]) -> None:
    with Model(spaced_pair[0]) as target:
        generation = generate_text(target, PROMPT, GenerationSettings(T1, max_tokens=2, seed=0), None, FORCED_GRAMMAR)
    assert generation.stop_reason is StopReason.LENGTH and len(generation.tokens) == 2


@pytest.mark.parametrize("pattern", [r"[^\s\S]", r" the[^\s\S]"])
def test_a_format_that_cannot_be_completed_is_an_error_not_a_complete_output(spaced_pair: tuple[Path, Path], pattern: str) -> None:
    """A regex that matches nothing (here or after " the") puts llguidance's matcher in an error state:
    a one-line error, target-only and speculative alike, never an empty output reported complete."""
    grammar = llguidance.LLMatcher.grammar_from_regex(pattern)
    speculative = SpeculativeParams(strategy="model", draft_max=3)
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        for drafter in (None, build_drafter(speculative, T1, draft)):
            with pytest.raises(LocalspecError, match="cannot be completed"):
                generate_text(target, PROMPT, GenerationSettings(T1, speculative, max_tokens=8, seed=0), drafter, grammar)


def test_a_rule_that_always_needs_itself_after_a_choice_is_an_error_target_only_and_speculative(
        spaced_pair: tuple[Path, Path]) -> None:
    """llguidance computes such a rule's forced text up to its limit, after which its matcher cannot step back
    (a draft checked along the grammar then failed as "the grammar could not step back"): said plainly, both ways."""
    grammar = llguidance.LLMatcher.grammar_from_lark('start: (" the" | " cat") more\nmore: " dog" more\n')
    speculative = SpeculativeParams(strategy="model", draft_max=3)
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        for drafter in (None, build_drafter(speculative, T1, draft)):
            with pytest.raises(OutputFormatError, match="cannot be completed from here: it forces more text without a choice than llguidance follows"):
                generate_text(target, PROMPT, GenerationSettings(T1, speculative, max_tokens=8, seed=0), drafter, grammar)


def test_hybrid_drafts_with_the_model_where_the_grammar_cuts_a_lookup_to_a_token_or_two(spaced_pair: tuple[Path, Path]) -> None:
    """A lookup the grammar cut short (an earlier key's continuation) gives way to the draft model, held to the
    grammar, which drafts further; without a grammar any lookup is used."""
    from localspec.engine.draft_length import FixedLength
    from localspec.engine.drafters import (
        Draft,
        HybridDrafter,
        ModelDrafter,
        NGramDrafter,
    )
    from localspec.engine.sampling import make_sampler

    class ShortLookup(NGramDrafter):
        def propose(self, context, max_tokens, sampler, position, grammar=None):
            return Draft([259], None)  # "▁the": one token, which the grammar allows

    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft_model:
        by_model = ModelDrafter(draft_model, T1, length=FixedLength(4))
        hybrid = HybridDrafter(ShortLookup(2, 2), by_model)
        hybrid.begin(PROMPT)
        sampler = make_sampler("coupled", 0)
        held = hybrid.propose(PROMPT, 4, sampler, 0, TokenGrammar.start(target, WORDS_GRAMMAR))
        assert hybrid._last is by_model and len(held.tokens) == 4
        free = hybrid.propose(PROMPT, 4, sampler, 0)
        assert hybrid._last is hybrid.lookup and free.tokens == [259]


class _StepLog(FixedLength):
    """Drafts up to k tokens and logs each draft step the drafter measures (True: a pass's first)."""

    def __init__(self, k: int) -> None:
        super().__init__(k)
        self.steps: list[bool] = []

    def record_draft_step(self, seconds: float, first: bool = False) -> None:
        self.steps.append(first)


def test_a_draft_step_after_forced_tokens_is_not_measured_as_a_draft_step(spaced_pair: tuple[Path, Path]) -> None:
    """The step after a forced run also evaluated that run in the draft model: timing it as one draft
    step would make drafting look dearer than it is (and drafts shorter) under a grammar."""
    grammar = llguidance.LLMatcher.grammar_from_regex(r" the (cat|dog) on (red|sun) sat (mat|sky)")
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        state = TokenGrammar.start(target, grammar)
        context = [*PROMPT]
        while (forced := state.forced()) is not None:  # " the", as the loop would append it
            state.consume([forced])
            context.append(forced)
        length = _StepLog(10)
        drafter = ModelDrafter(draft, T1, length=length)
        proposal = drafter.propose(context, 10, CoupledSampler(0), 0, state)
    text = target.detokenize(proposal.tokens)
    assert text in {f" {a} on {b} sat {c}" for a in ("cat", "dog") for b in ("red", "sun") for c in ("mat", "sky")}
    # Three drawn tokens: the first (measured as a pass's first step); the two after forced " on" and " sat", not.
    assert length.steps == [True]

    # Two drawn in a row, then forced " on", then one more: the second is measured, the third is not.
    grammar = llguidance.LLMatcher.grammar_from_regex(r" the (cat|dog) (red|sun) on (mat|sky)")
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        state = TokenGrammar.start(target, grammar)
        context = [*PROMPT]
        while (forced := state.forced()) is not None:
            state.consume([forced])
            context.append(forced)
        length = _StepLog(10)
        proposal = ModelDrafter(draft, T1, length=length).propose(context, 10, CoupledSampler(1), 0, state)
        assert target.detokenize(proposal.tokens).endswith((" mat", " sky"))
    assert length.steps == [True, False]


def test_a_pass_that_also_evaluated_forced_tokens_is_not_timed_as_a_verify_pass(spaced_pair: tuple[Path, Path]) -> None:
    """Its batch held the forced tokens besides the draft: its time would overstate what verifying the draft costs."""
    speculative = SpeculativeParams(strategy="model", draft_max=3)
    events: list[tuple[str, object]] = []
    with Model(spaced_pair[0]) as target, Model(spaced_pair[1]) as draft:
        for seed, grammar in [(seed, grammar) for seed in range(4) for grammar in (FORCED_GRAMMAR, WORDS_GRAMMAR)]:
            drafter = build_drafter(speculative, T1, draft)
            observe = drafter.observe
            drafter.observe = lambda n, k, seconds: (events.append(("observe", seconds)), observe(n, k, seconds))
            generation = Generation(target, PROMPT, GenerationSettings(T1, speculative, max_tokens=12, seed=seed),
                                    drafter, grammar)
            emit_forced = generation._emit_forced
            generation._emit_forced = lambda context: (chunk := emit_forced(context), events.append(("forced", len(chunk.tokens))))[0]
            for _ in generation:
                pass
    timed = {True: [], False: []}  # after forced tokens or not -> what observe was told
    forced_before = 0
    for kind, value in events:
        if kind == "forced":
            forced_before = value
        else:
            timed[forced_before > 0].append(value)
    assert timed[True] and all(seconds is None for seconds in timed[True])
    assert timed[False] and all(isinstance(seconds, float) for seconds in timed[False])


def test_a_padded_pass_guesses_only_what_the_grammar_allows(spaced_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a pass with nothing drafted is padded to two rows, its second row's guess (the last token's latest
    follower: 270 after the prompt, which the grammar forbids) is validated first; the matcher never sees a token
    it has not allowed, and the text is target-only's."""
    speculative = SpeculativeParams(strategy="ngram", draft_max=4, ngram_min=4, ngram_max=4)  # few lookups: guesses
    with Model(spaced_pair[0]) as target:
        monkeypatch.setattr(target, "_lone_reads_differ", True)
        guesses = 0
        for seed in range(6):
            settings = GenerationSettings(T1, speculative, max_tokens=24, seed=seed)
            drafted = generate_text(target, REPEATING_PROMPT, settings, build_drafter(speculative, T1, None), WORDS_GRAMMAR)
            assert drafted.tokens == generate_text(target, REPEATING_PROMPT, settings, None, WORDS_GRAMMAR).tokens
            guesses += drafted.stats.guesses
    assert guesses > 0
