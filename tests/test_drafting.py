"""What the drafting settings do, on tiny models: p_min, draft_min, and drafts that must fit a batch."""

from __future__ import annotations

import dataclasses

from pathlib import Path

import numpy as np
import pytest

from localspec.engine.draft_length import AdaptiveLength, FixedLength
from localspec.engine.drafters import (
    Draft,
    NO_DRAFT,
    HybridDrafter,
    ModelDrafter,
    NGramDrafter,
    build_drafter,
)
from localspec.engine.drafters.ngram import NGramIndex
from localspec.engine.generation import Generation, generate_text
from localspec.engine.noise import gumbel
from localspec.engine.sampling import CoupledSampler, StreamSampler, softmax
from localspec.engine.suffix_index import MAX_OCCURRENCES
from localspec.runtime.model import Model
from localspec.settings import (
    GenerationSettings,
    ModelSettings,
    SamplingParams,
    SpeculativeParams,
)

PROMPT = [1, 260, 265, 270]
SAMPLED = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
SAMPLED_COOL = SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0)


def draft_lengths(stats) -> dict[int, int]:
    """{n: target passes that verified a draft of exactly n tokens}."""
    at = [*stats.proposed_at, 0]
    return {n: at[n - 1] - at[n] for n in range(1, len(at))}


@pytest.fixture(scope="module")
def models(tiny_pair: tuple[Path, Path]):
    with Model(tiny_pair[0]) as target, Model(tiny_pair[1]) as draft:
        yield target, draft


@pytest.mark.parametrize("p_min", [0.25, 0.3, 0.4])
def test_p_min_stops_exactly_where_the_draft_model_is_unsure(models, p_min: float) -> None:
    _, draft = models
    drafter = ModelDrafter(draft, SAMPLED, p_min=p_min)
    lengths = []
    for seed in range(40):
        context = [*PROMPT, 259]
        proposal = drafter.propose(context, 6, StreamSampler(np.random.default_rng(seed)), 0)
        # Every proposed token was drawn where the draft's top probability reached p_min,
        # and drafting stopped at the first position where it did not (or at the limit).
        confidences = [softmax(draft.next_logits([*context, *proposal.tokens[:i]])).max() for i in range(len(proposal.tokens) + 1)]
        assert all(c >= p_min for c in confidences[:-1])
        assert len(proposal.tokens) == 6 or confidences[-1] < p_min
        lengths.append(len(proposal.tokens))
    assert min(lengths) < 6  # the threshold really cut drafts short


class _RecordingLength(FixedLength):
    """A fixed length that asks for, and keeps, the drafter's certainty of each token."""

    uses_confidence = True

    def __init__(self, k: int) -> None:
        super().__init__(k)
        self.certainties: list[float] = []

    def keep_going(self, n_drafted: int, confidence: float) -> bool:
        self.certainties.append(confidence)
        return True


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0.0), SAMPLED], ids=["greedy", "sampled"])
def test_under_rejection_the_length_controller_weighs_greedy_drafts_by_their_lead_and_sampled_ones_by_their_probability(
    models, sampling: SamplingParams,
) -> None:
    _, draft = models
    length = _RecordingLength(5)
    proposal = ModelDrafter(draft, sampling, length=length).propose(PROMPT, 5, StreamSampler(np.random.default_rng(3)), 0)
    assert len(length.certainties) == len(proposal.tokens) - 1 == 4  # (the last token needs no verdict)
    for i, (token, certainty) in enumerate(zip(proposal.tokens, length.certainties)):
        p = softmax(draft.next_logits([*PROMPT, *proposal.tokens[:i]]).astype(np.float64))
        if sampling.greedy:
            runner_up = np.sort(p)[-2]
            assert token == int(np.argmax(p)) and certainty == pytest.approx(1 - runner_up / p[token], abs=1e-5)
        else:
            assert certainty == pytest.approx(p[token], rel=1e-4)


def test_under_coupled_verification_sampled_drafts_are_weighed_by_the_lead_of_their_noisy_score(models) -> None:
    _, draft = models
    length = _RecordingLength(6)
    sampler = CoupledSampler(seed=5)
    proposal = ModelDrafter(draft, SAMPLED_COOL, length=length).propose(PROMPT, 6, sampler, 10)
    assert len(length.certainties) == 5
    for i, (token, certainty) in enumerate(zip(proposal.tokens, length.certainties)):
        logits = draft.next_logits([*PROMPT, *proposal.tokens[:i]])
        scores = np.log(softmax(logits.astype(np.float64) / SAMPLED_COOL.temperature)) + gumbel(5, 10 + i, np.arange(len(logits)))
        runner_up, top = np.sort(scores)[-2:]
        lead = 1 - np.exp(-SAMPLED_COOL.temperature * (top - runner_up))  # the margin on the logits' scale
        assert token == int(np.argmax(scores)) and certainty == pytest.approx(lead, abs=1e-6)
    assert len({round(c, 3) for c in length.certainties}) > 1  # not a constant


def test_without_p_min_every_draft_uses_all_its_room(models) -> None:
    _, draft = models
    proposal = ModelDrafter(draft, SAMPLED).propose(PROMPT, 5, StreamSampler(np.random.default_rng(0)), 0)
    assert len(proposal.tokens) == 5 and len(proposal.q_draft) == 5
    # Each token was drawn from its q, which is a distribution over the draft's vocabulary.
    for token, q in zip(proposal.tokens, proposal.q_draft):
        assert q[token] > 0 and abs(q.values.sum() - 1) < 1e-9 and q.ids.max() < draft.n_vocab


def test_draft_min_drops_drafts_the_room_cuts_short(models) -> None:
    target, draft = models
    # max_tokens 4 leaves room, after the first token, for a 2-token draft; draft_min 3 drops it: no drafting at all.
    for draft_min, drafted in ((3, False), (2, True)):
        settings = GenerationSettings(SAMPLED, SpeculativeParams(draft_max=8, draft_min=draft_min), max_tokens=4, seed=1)
        stats = generate_text(target, PROMPT, settings, ModelDrafter(draft, SAMPLED)).stats
        assert (stats.draft_tokens_proposed > 0) == drafted
        assert all(count == 0 for n, count in draft_lengths(stats).items() if n < draft_min)


def test_draft_min_never_drops_a_sampled_draft_that_p_min_cut(models) -> None:
    """Dropping those would keep only drafts of confident tokens: no longer samples of q_draft."""
    target, draft = models
    settings = GenerationSettings(SAMPLED, SpeculativeParams(draft_max=6, draft_min=6, p_min=0.3, verify="rejection"), max_tokens=40, seed=3)
    stats = generate_text(target, [*PROMPT, 259], settings, ModelDrafter(draft, SAMPLED, p_min=0.3)).stats
    assert sum(count for n, count in draft_lengths(stats).items() if n < 6) > 0


def test_no_sampled_draft_is_made_into_room_below_draft_min(models) -> None:
    """There every full draft would be dropped, so keeping the ones that stopped short would select their tokens."""
    target, draft = models
    settings = GenerationSettings(SAMPLED, SpeculativeParams(draft_max=6, draft_min=6, p_min=0.3, verify="rejection"),
                                  max_tokens=5, seed=3)
    for seed in range(20):  # (room 4 at most: below draft_min throughout)
        stats = generate_text(target, [*PROMPT, 259], dataclasses.replace(settings, seed=seed),
                              ModelDrafter(draft, SAMPLED, p_min=0.3)).stats
        assert stats.draft_tokens_proposed == 0 and stats.tokens_generated == 5


def test_greedy_drafts_below_draft_min_are_dropped(models) -> None:
    """At temperature 0 the output is the target's argmax whatever is drafted, so short drafts can go."""
    target, draft = models
    greedy = SamplingParams(temperature=0)
    lengths = {}
    for draft_min in (0, 2):
        settings = GenerationSettings(greedy, SpeculativeParams(draft_max=6, draft_min=draft_min, p_min=0.35), max_tokens=60, seed=3)
        stats = generate_text(target, [*PROMPT, 259], settings, ModelDrafter(draft, greedy, p_min=0.35)).stats
        lengths[draft_min] = draft_lengths(stats)
    assert lengths[0].get(1, 0) > 0  # p_min leaves one-token drafts...
    assert lengths[2].get(1, 0) == 0  # ...which draft_min 2 drops


def test_a_draft_never_outgrows_one_target_batch(tiny_pair: tuple[Path, Path]) -> None:
    with Model(tiny_pair[0], ModelSettings(n_batch=4)) as target, Model(tiny_pair[1]) as draft:
        settings = GenerationSettings(SAMPLED, SpeculativeParams(draft_max=8), max_tokens=30, seed=0)
        stats = generate_text(target, PROMPT, settings, ModelDrafter(draft, SAMPLED)).stats
    assert len(stats.proposed_at) == 3 and stats.tokens_generated == 30


def test_ngram_lookup_proposes_what_followed_the_longest_match() -> None:
    lookup = NGramDrafter(n_min=2, n_max=3)
    context = [1, 5, 6, 7, 8, 9, 5, 6]
    lookup.begin(context)
    assert lookup.propose(context, 3, StreamSampler(np.random.default_rng(0)), 0) == Draft([7, 8, 9], None)
    context += [7, 3]  # (7, 3) never occurred, nor (6, 7, 3)... but (7,) alone is below n_min
    assert lookup.propose(context, 3, StreamSampler(np.random.default_rng(0)), 0).tokens == []
    context += [5, 6, 7]  # now (5, 6, 7) occurred twice, going on with 8 and with 3: a tie goes to the latest
    assert lookup.propose(context, 2, StreamSampler(np.random.default_rng(0)), 0).tokens == [3, 5]


def test_a_lookup_follows_what_most_earlier_occurrences_continue_with_and_stops_where_they_part() -> None:
    """', and the baker … , and the smell … , and the farmers … , and fresh … , and': the three occurrences
    that go on with ' the' outvote the latest one; after ' the' they part three ways, so the draft stops."""
    lookup = NGramDrafter(n_min=2, n_max=4)
    sampler = StreamSampler(np.random.default_rng(0))
    comma, and_, the = 1, 2, 3
    context = [10, comma, and_, the, 20, 11, comma, and_, the, 21, 12, comma, and_, the, 22,
               13, comma, and_, 30, 31, 14, comma, and_]
    lookup.begin(context)
    assert lookup.propose(context, 8, sampler, 0).tokens == [the]
    context += [the]  # (', and the') went on three ways: a third of them would agree with any draft
    assert lookup.propose(context, 8, sampler, 0).tokens == []
    context += [21]  # ('and the 21') occurred once: its continuation, as far as it goes
    assert lookup.propose(context, 5, sampler, 0).tokens == [12, comma, and_, the, 22]


def test_a_frequent_n_gram_keeps_its_latest_occurrences() -> None:
    index = NGramIndex(2, 2)
    context = [7, 8, 1] * 300 + [7, 8]
    index.extend_to(context)
    n, starts = index.match()
    assert n == 2 and starts == [3 * i + 2 for i in range(300 - MAX_OCCURRENCES, 300)]
    assert index.continuation(starts, 5) == [1, 7, 8, 1, 7]  # all of them agree


def test_in_a_loop_the_latest_turns_abstain_where_they_reach_the_end_of_the_context() -> None:
    """A loop of period 8 at the end of its fourth turn: the tail (7, 8) occurred three times before, and
    the later two occurrences' continuations run into the end of the context after 16 and 8 tokens. What
    they go on with is being written now, not a disagreement: the draft goes on as the oldest turn does
    (counted as disagreeing, they cut it at 16 tokens)."""
    index = NGramIndex(2, 2)
    turn = [1, 2, 3, 4, 5, 6, 7, 8]
    context = [50, 51] + turn * 4
    index.extend_to(context)
    n, starts = index.match()
    assert n == 2 and [len(context) - start for start in starts] == [24, 16, 8]
    assert index.continuation(starts, 24) == turn * 3
    # Past that, every turn goes round the loop again (the context's last 8 and 16 tokens repeat those before).
    assert index.continuation(starts, 36) == (turn * 5)[:36]


def test_a_continuation_that_reaches_the_end_of_a_loop_goes_round_it_again() -> None:
    """A line of 6 tokens written twice: its last two tokens occurred once before, 6 tokens back, and what
    followed them is the line itself. The draft goes round the loop as far as asked, not one turn only; where
    the context's end does not repeat the period before it, the continuation stops at the end."""
    line = [1, 2, 3, 4, 5, 6]
    lookup = NGramDrafter(n_min=2, n_max=4)
    context = [50, 51, *line, *line]
    lookup.begin(context)
    assert lookup.propose(context, 20, StreamSampler(np.random.default_rng(0)), 0).tokens == (line * 4)[:20]
    no_loop = [50, 51, *line, 9, 9, 5, 6]  # (5, 6) went on with 9 9 5 6: the last 4 tokens do not repeat 3 4 5 6
    lookup.begin(no_loop)
    assert lookup.propose(no_loop, 20, StreamSampler(np.random.default_rng(0)), 0).tokens == [9, 9, 5, 6]


def _lookup_whose_matches_were_kept(rarely: int, always: int) -> tuple[NGramDrafter, dict[int, AdaptiveLength]]:
    """A lookup (n-grams of 2 to 4) whose `rarely`-token matches' drafts have been kept rarely and `always`-token
    ones' nearly always, and its controllers by match length."""
    lengths = {n: AdaptiveLength() for n in (2, 3, 4, 8, 16)}
    for _ in range(40):
        lengths[rarely].observe(4, 0, 0.01)
        lengths[always].observe(4, 4, 0.01)
    return NGramDrafter(n_min=2, n_max=4, length_for=lengths.__getitem__), lengths


def test_each_match_length_has_its_own_length_controller() -> None:
    lookup, lengths = _lookup_whose_matches_were_kept(rarely=2, always=4)
    sampler = StreamSampler(np.random.default_rng(0))
    long_match = [9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3]  # (9, 1, 2, 3) occurred before: continue with 4, 5...
    lookup.begin(long_match)
    drafted = lookup.propose(long_match, 8, sampler, 0)
    assert lookup.length is lengths[4] and len(drafted.tokens) >= 4 and drafted.tokens[:4] == [4, 5, 6, 7]
    short_match = [20, 21, 30, 31, 32, 33, 34, 35, 36, 37, 20, 21]  # only (20, 21) occurred before
    lookup.begin(short_match)
    assert lookup.propose(short_match, 8, sampler, 0).tokens == []  # not worth a verify row: no draft
    assert lookup.length is lengths[2]
    # The verdict goes to the controller that planned the pass.
    before = sum(lengths[2].reached)
    lookup.observe(1, 0, 0.01)
    assert sum(lengths[2].reached) > before


def test_a_match_that_goes_further_back_than_n_max_has_a_controller_of_its_own() -> None:
    """A quote matches its source far back; a phrase met again matches n_max tokens and little more. Here
    four-token matches have been kept rarely and eight-token ones nearly always: the quote is drafted, the
    phrase is not."""
    lookup, lengths = _lookup_whose_matches_were_kept(rarely=4, always=8)
    sampler = StreamSampler(np.random.default_rng(0))
    passage = list(range(100, 130))
    for quoted, controller in ((5, 4), (9, 8), (12, 8), (20, 16)):
        context = [7, *passage, 50, 51, 99, *passage[:quoted]]  # (99, not 7, before it: the quote matches back whole)
        lookup.begin(context)
        drafted = lookup.propose(context, 8, sampler, 0).tokens
        assert lookup.length is lengths[controller], quoted
        if controller == 4:
            assert drafted == []  # (not worth a verify row)
        elif controller == 8:
            assert drafted == passage[quoted : quoted + 8]


def test_lookups_match_a_word_however_it_was_tokenized_and_draft_what_the_source_wrote() -> None:
    """An answer's first word (`The`, 50) stands in its prompt with a space before it (` The`, 150): compared by
    word form, the answer's `The harbour` matches the prompt's ` The harbour`, and the draft is the prompt's text."""
    spaced = {50: 150, 51: 151}  # the unspaced forms of two words and their spaced tokens
    prompt = [1, 2, 150, 160, 161, 162, 163, 3]
    answer = [*prompt, 4, 50, 160]
    by_id = NGramDrafter(2, 4)
    by_id.begin(answer)
    assert by_id.propose(answer, 3, StreamSampler(np.random.default_rng(0)), 0).tokens == []
    by_form = NGramDrafter(2, 4, word_form=lambda token: spaced.get(token, token))
    by_form.begin(answer)
    assert by_form.propose(answer, 3, StreamSampler(np.random.default_rng(0)), 0).tokens == [161, 162, 163]
    # A single token too, for a padded pass's guess (`Generation`): what followed ` The` follows `The`.
    guesses = NGramIndex(1, 1, lambda token: spaced.get(token, token))
    guesses.extend_to([*prompt, 4, 50])
    found = guesses.match()
    assert found is not None and guesses.continuation(found[1][-1:], 1) == [160]

def test_a_copy_that_lost_its_thread_resumes_where_it_left_off() -> None:
    """The answer copies its prompt, then changes a word (999 for 111): no n-gram of the tail occurred
    before, but the token after the changed word is found just where the copy stood, and the copy goes on
    from there. The same token found with no copy under way, or long after the copy left off, is not taken."""
    sampler = StreamSampler(np.random.default_rng(0))
    source = list(range(100, 140))
    prompt = [1, 2, *source, 3, 4]

    def copying() -> tuple[NGramDrafter, list[int]]:
        lookup = NGramDrafter(2, 4, resume_length=FixedLength(8))
        context = prompt + source[:6]
        lookup.begin(context)
        assert lookup.propose(context, 8, sampler, 0).tokens == source[6:14]
        lookup.observe(8, 5, 0.01)  # kept 106..110; the target's own token replaced 111
        return lookup, context + [*source[6:11], 999]

    lookup, context = copying()
    assert lookup.propose(context, 8, sampler, 0).tokens == []  # 999 is nowhere near: nothing to resume
    context.append(112)  # the copy goes on after the changed word
    drafted = lookup.propose(context, 8, sampler, 0)
    assert drafted.tokens == source[13:21] and lookup.length is lookup.resume_length

    unrelated = NGramDrafter(2, 4, resume_length=FixedLength(8))  # no copy under way: 112 alone says little
    unrelated.begin(context)
    assert unrelated.propose(context, 8, sampler, 0).tokens == []
    without = NGramDrafter(2, 4)  # (resuming is off without a controller for it)
    without.begin(context)
    assert without.propose(context, 8, sampler, 0).tokens == []

    lookup, context = copying()
    context += [900 + i for i in range(12)] + [112]  # the copy left off a dozen tokens ago
    assert lookup.propose(context, 8, sampler, 0).tokens == []


def test_a_copy_that_can_be_resumed_goes_before_a_short_match_elsewhere() -> None:
    """After the changed word (999) the tail (999, 112) occurred before, far from the copy: a two-token match
    there drafts what followed it unless a copy is under way, which resumes at its own place instead; a match
    of the longest n-gram still goes first."""
    sampler = StreamSampler(np.random.default_rng(0))
    source = list(range(100, 140))
    elsewhere = [999, 112, 500, 501, 502, 503]
    lookup = NGramDrafter(2, 4, resume_length=FixedLength(8))
    context = [1, *elsewhere, 2, *source, 3, 4, *source[:6]]
    lookup.begin(context)
    assert lookup.propose(context, 8, sampler, 0).tokens == source[6:14]
    lookup.observe(8, 5, 0.01)  # kept 106..110; the target's own token replaced 111
    context += [*source[6:11], 999, 112]
    assert lookup.propose(context, 8, sampler, 0).tokens == source[13:21]
    assert lookup.length is lookup.resume_length
    no_copy = NGramDrafter(2, 4, resume_length=FixedLength(8))
    no_copy.begin(context)
    assert no_copy.propose(context, 4, sampler, 0).tokens == elsewhere[2:]


def test_a_copy_resumes_in_the_occurrence_its_draft_followed() -> None:
    """(1 2 3 4) occurred three times: twice going on with X, lately with Y. The draft follows the majority,
    X, so the copy resumes in X's text, not in the latest occurrence's (which holds 106 too)."""
    sampler = StreamSampler(np.random.default_rng(0))
    x, y = list(range(100, 130)), list(range(200, 230))
    y[7] = 106
    context = [1, 2, 3, 4, *x, 7, 1, 2, 3, 4, *x, 8, 1, 2, 3, 4, *y, 9, 1, 2, 3, 4]
    lookup = NGramDrafter(2, 4, resume_length=FixedLength(8))
    lookup.begin(context)
    assert lookup.propose(context, 8, sampler, 0).tokens == x[:8]
    lookup.observe(8, 5, 0.01)
    context += [*x[:5], 999, 106]
    assert lookup.propose(context, 8, sampler, 0).tokens == x[7:15]


def test_a_lookup_pass_that_kept_a_token_or_two_starts_no_copy_to_resume() -> None:
    sampler = StreamSampler(np.random.default_rng(0))
    source = list(range(100, 140))
    lookup = NGramDrafter(2, 4, resume_length=FixedLength(8))
    context = [1, 2, *source, 3, 4, *source[:6]]
    lookup.begin(context)
    assert lookup.propose(context, 8, sampler, 0).tokens == source[6:14]
    lookup.observe(8, 2, 0.01)  # a common phrase's first two tokens, then the answer goes its own way
    context += [106, 107, 999, 109]
    assert lookup.propose(context, 8, sampler, 0).tokens == []


class _CostsAsSet(AdaptiveLength):
    """An adaptive length whose draft-step costs stay as a test sets them: the tiny draft model's real steps
    (fractions of a millisecond, or far more on a busy machine) are not measured into them."""

    def record_draft_step(self, seconds: float, first: bool = False) -> None:
        pass


def test_hybrid_drafts_by_lookup_when_it_matches_and_by_the_model_otherwise(models) -> None:
    _, draft = models
    hybrid = HybridDrafter(NGramDrafter(2, 2), ModelDrafter(draft, SAMPLED))
    repeating = [1, 260, 265, 270, 262, 260, 265]
    hybrid.begin(repeating)
    looked_up = hybrid.propose(repeating, 3, StreamSampler(np.random.default_rng(0)), 0)
    assert looked_up == Draft([270, 262, 260], None)
    fresh = [*repeating, 275]
    by_model = hybrid.propose(fresh, 3, StreamSampler(np.random.default_rng(0)), 0)
    assert len(by_model.tokens) == 3 and len(by_model.q_draft) == 3
    # The draft model's cache followed the context although the lookup drafted the pass before.
    assert list(draft.tokens[: len(fresh)]) == fresh


def test_a_model_draft_that_begins_to_copy_the_context_is_continued_by_a_lookup(models) -> None:
    """Where the draft model's draft comes to match an earlier n_max tokens of the context (an answer that begins
    to copy its prompt), the lookup drafts the rest of the copy: no more draft steps. Each side learns from its
    own part of the pass."""
    _, draft = models
    greedy = SamplingParams(temperature=0.0)
    coupled = CoupledSampler(seed=1)
    continued = ModelDrafter(draft, greedy, length=FixedLength(4)).propose(
        [*PROMPT, 259], 10, coupled, 0, continued=lambda context, so_far: [7, 8, 9] if len(so_far) == 2 else [])
    assert len(continued.tokens) == 5 and continued.tokens[2:] == [7, 8, 9]
    # Drawn at a temperature and verified by rejection sampling, the draft decides the text: not continued.
    drawn = ModelDrafter(draft, SAMPLED, length=FixedLength(4))
    assert len(drawn.propose([*PROMPT, 259], 10, StreamSampler(np.random.default_rng(0)), 0,
                             continued=lambda context, so_far: [7, 8, 9]).tokens) == 4 and drawn.continued == 0

    model_length, lookup_length = AdaptiveLength(), AdaptiveLength()
    lookup = NGramDrafter(2, 4, lambda n: lookup_length if n == 4 else AdaptiveLength())
    hybrid = HybridDrafter(lookup, ModelDrafter(draft, greedy, length=model_length))
    context = [1, *range(260, 272), 280, 281]  # a prompt, then an answer that has not matched it yet
    hybrid.begin(context)
    assert hybrid._continuation(context, [262, 263]) == []  # (the tail 280, 281, 262, 263 occurs nowhere)
    copy = hybrid._continuation(context, [261, 262, 263, 264])  # (as long as its controller plans)
    assert copy and copy == list(range(265, 265 + len(copy)))
    hybrid._last, hybrid.by_model.continued = hybrid.by_model, 3  # a pass of 2 drawn and 3 looked-up tokens
    hybrid.observe(5, 4, 0.02)
    assert model_length.reached[:3] == [1, 1, 0] and model_length.accepted[:2] == [1, 1]
    assert lookup_length.reached[:3] == [1, 1, 1] and lookup_length.accepted[:3] == [1, 1, 0]  # (its 3rd lost)


def test_before_the_draft_model_reads_lookups_are_tried_until_one_loses_its_first_token(models) -> None:
    _, draft = models
    model_length = AdaptiveLength()
    for _ in range(40):  # drafting by the model pays: 3 of 3 kept, each draft token a tenth of a pass
        model_length.observe(3, 3, 0.013)
        model_length.observe(0, 0, 0.010)
    model_length.record_draft_step(0.001, first=True)
    model_length.record_draft_step(0.001)
    model_length.record_read(100, 0.5)
    lookup_lengths = {n: AdaptiveLength() for n in (2, 3, 4)}
    for i in range(60):  # 2-token matches' drafts were kept a third of the time: a weak record
        lookup_lengths[2].observe(1, int(i % 3 == 0), 0.011)
        lookup_lengths[2].observe(0, 0, 0.010)
    lookup_lengths[2].record_draft_step(1e-5)  # (a lookup costs next to nothing)
    lookup = NGramDrafter(2, 4, lookup_lengths.__getitem__)
    hybrid = HybridDrafter(lookup, ModelDrafter(draft, SAMPLED, length=model_length))
    prompt = [1, *range(260, 300)]
    draft.clear()
    hybrid.begin(prompt, read_later=True)
    quoting = [*prompt, 500, 270, 271]  # the answer's tail is a 2-token match in the prompt, weak by its record
    assert 0 < lookup.expected_kept(quoting) < 1
    assert not hybrid.ready_to_read(quoting, 3, 100)  # tried first: the answer may be quoting its prompt
    assert hybrid.propose(quoting, 4, StreamSampler(np.random.default_rng(0)), 3).tokens[0] == 272
    hybrid.observe(1, 0, 0.011)  # its first token lost: no quote, and the trial is over for this generation
    assert lookup.expected_kept(quoting) > 0 and hybrid.ready_to_read(quoting, 3, 100)
    # A last token that occurred once before (the answer's first word tokenized unlike the prompt's): one pass.
    hybrid.begin(prompt, read_later=True)
    assert lookup.expected_kept([*prompt, 500, 280]) == 0
    assert not hybrid.ready_to_read([*prompt, 500, 280], 2, 100)
    assert hybrid.ready_to_read([*prompt, 500, 280, 501, 285], 4, 100)  # (once a generation)
    # Without such a token, and without a match, the model reads at once, as before.
    hybrid.begin(prompt, read_later=True)
    assert hybrid.ready_to_read([*prompt, 500, 501], 2, 100)

def test_hybrid_passes_over_a_lookup_the_model_beats_and_retries_it_now_and_then(models) -> None:
    _, draft = models
    model_length, lookup_lengths = _CostsAsSet(), {n: AdaptiveLength() for n in (2, 3)}
    for i in range(40):  # the draft model's drafts have all been kept, the 2-token matches' half the time
        model_length.observe(3, 3, 0.01)
        lookup_lengths[2].observe(1, i % 2, 0.01)
    model_length.first_step_cost = model_length.draft_cost = 0.0005
    lookup = NGramDrafter(2, 3, lookup_lengths.__getitem__)
    hybrid = HybridDrafter(lookup, ModelDrafter(draft, SAMPLED, length=model_length))
    repeating = [1, 260, 265, 270, 262, 260, 265]  # ends in a 2-token match only
    hybrid.begin(repeating)
    sides = []
    for _ in range(16):
        hybrid.propose(repeating, 3, StreamSampler(np.random.default_rng(0)), 0)
        sides.append("lookup" if hybrid._last is lookup else "model")
    assert sides.count("lookup") == 2  # one declined lookup in 8 drafts anyway
    # Once its drafts are kept as often as the model's, the lookup (free to draft) is taken every time
    # (the tiny draft model drafted above almost for free: here its tokens cost a fifth of a pass).
    for _ in range(40):
        lookup_lengths[2].observe(3, 3, 0.01)
    model_length.first_step_cost = model_length.draft_cost = 0.002
    for _ in range(4):
        assert hybrid.propose(repeating, 3, StreamSampler(np.random.default_rng(0)), 0).tokens == [270, 262, 260]
        assert hybrid._last is lookup


def test_a_hybrids_draft_model_waits_to_read_a_long_prompt_while_lookups_draft_the_answer(models) -> None:
    _, draft = models

    class Recording(AdaptiveLength):
        def worth_reading(self, n_unread: int, n_generated: int, budget_left: int, later_turns: bool = False,
                          uncovered_share: float = 1.0) -> bool:
            self.shares.append(uncovered_share)
            return super().worth_reading(n_unread, n_generated, budget_left, later_turns, uncovered_share)

    model_length = Recording()
    model_length.shares = []
    for _ in range(40):  # drafting by the model pays: 3 of 3 kept, each draft token a tenth of a pass
        model_length.observe(3, 3, 0.013)
        model_length.observe(0, 0, 0.010)
    model_length.record_draft_step(0.001, first=True)
    model_length.record_draft_step(0.001)
    model_length.record_read(100, 0.5)  # 5 ms a prompt token: more than a tenth of target-only decoding
    lookup = NGramDrafter(2, 4, lambda n: AdaptiveLength())
    hybrid = HybridDrafter(lookup, ModelDrafter(draft, SAMPLED, length=model_length))
    prompt = [1, *range(260, 300)]  # 40 tokens the draft model has not seen
    draft.clear()
    hybrid.begin(prompt, read_later=True)
    # The first token tells nothing about whether the answer copies the prompt: no reading yet.
    assert not hybrid.ready_to_read([*prompt, 260], 1, 100) and model_length.shares == []
    # The answer's tail occurs in the prompt: a lookup drafts this pass, so reading would save nothing now.
    copying = [*prompt, 260, 261]
    assert lookup.expected_kept(copying) >= 1
    assert not hybrid.ready_to_read(copying, 2, 100) and model_length.shares == []  # (the model is not even asked)
    model_length.read_cost, cost = 1e-9, model_length.read_cost  # however cheap the reading
    assert not hybrid.ready_to_read(copying, 2, 100)
    model_length.read_cost = cost
    # Nothing to look up, and nothing drafted by lookups yet: the whole saving counts, and the reading pays.
    assert hybrid.ready_to_read([*prompt, 299, 5], 2, 100) and model_length.shares[-1] == 1.0
    # After lookups kept 9 of the last 10 tokens, only the rest counts; here too little to pay for the reading.
    hybrid.propose(copying, 9, StreamSampler(np.random.default_rng(0)), 2)
    assert hybrid._last is lookup
    hybrid.observe(9, 9, 0.02)
    made = [*copying, *range(262, 271), 5]  # the 9 drafts kept and the target's own token, not from the prompt
    assert not hybrid.ready_to_read(made, 12, 100)
    assert model_length.shares[-1] == pytest.approx(1 / 11)  # all 10 of that pass's tokens came without the model
    # A new generation starts with nothing known of its lookups.
    model_length.made_unread = 0
    hybrid.begin(prompt, read_later=True)
    assert hybrid.ready_to_read([*prompt, 299, 5], 2, 100) and model_length.shares[-1] == 1.0
    # Under a grammar, lookups are cut short and answers are short: the reading is not put off to the second token.
    hybrid.begin(prompt, read_later=True)
    from localspec.engine.constraint import TokenGrammar
    from localspec.engine.grammar import OutputFormat, compile_format

    grammar = TokenGrammar.start(draft, compile_format(OutputFormat("regex", ".*")).grammar)
    hybrid.propose([*prompt, 299], 4, StreamSampler(np.random.default_rng(0)), 0, grammar=grammar)
    assert hybrid.ready_to_read([*prompt, 299, 5], 1, 100)
    # A fixed draft length weighs nothing: its model reads after the first token, lookup or not.
    fixed = HybridDrafter(NGramDrafter(2, 4), ModelDrafter(draft, SAMPLED, length=FixedLength(4)))
    fixed.begin(prompt, read_later=True)
    assert fixed.ready_to_read([*prompt, 260], 1, 100) and fixed.ready_to_read(copying, 2, 100)


def test_where_lookups_copy_the_prompt_faster_than_the_model_drafts_a_pass_they_miss_is_left_to_the_target(models) -> None:
    _, draft = models
    model_length = _CostsAsSet()
    for _ in range(40):  # the model's plan: 3 of 3 kept, each draft token a tenth of a pass: about 150 tokens a second
        model_length.observe(3, 3, 0.013)
        model_length.observe(0, 0, 0.010)
    model_length.first_step_cost = model_length.draft_cost = 0.001
    model_rate = model_length.rate(model_length.best_length(4))
    assert 100 < model_rate < 300
    def copying_lookup() -> NGramDrafter:  # whose drafts have all been kept
        length = AdaptiveLength()
        for _ in range(40):
            length.observe(3, 3, 0.012)
        return NGramDrafter(2, 2, lambda n: length)

    lookup = copying_lookup()
    hybrid = HybridDrafter(lookup, ModelDrafter(draft, SAMPLED, length=model_length))
    copying = [1, 260, 265, 270, 262, 260, 265]
    missed = [*copying, 270, 275]  # the target's own token after the copy: no lookup matches it
    sampler = StreamSampler(np.random.default_rng(0))

    def lookup_pass(kept: int) -> None:
        hybrid.propose(copying, 3, sampler, 0)
        assert hybrid._last is lookup
        hybrid.observe(3, kept, 0.012)  # a pass of 4 tokens that made kept + 1 of them

    hybrid.begin(copying)
    # One lookup that kept its draft sets no pace yet: the model drafts the pass it misses.
    lookup_pass(3)
    assert len(hybrid.propose(missed, 4, sampler, 0).tokens) > 0 and hybrid._last is hybrid.by_model
    hybrid.begin(copying)
    lookup_pass(3)
    lookup_pass(3)  # two: 4 tokens each in 12 ms, over 300 a second, above the model's plan
    assert hybrid.propose(missed, 4, sampler, 0) == NO_DRAFT and hybrid._last is lookup
    hybrid.observe(0, 0, 0.010)
    # While lookups go on missing, one-token passes drag the pace down to the target's, and the model drafts again.
    for _ in range(8):
        if hybrid.propose(missed, 4, sampler, 0).tokens:
            break
        hybrid.observe(0, 0, 0.010)
    assert hybrid._last is hybrid.by_model
    # Nor is a draft model that has yet to read the prompt told to read it while lookups keep that pace.
    waiting_hybrid = HybridDrafter(copying_lookup(), ModelDrafter(draft, SAMPLED, length=model_length))
    waiting_hybrid.begin(copying, read_later=True)
    for _ in range(2):
        waiting_hybrid.propose(copying, 3, sampler, 0)
        waiting_hybrid.observe(3, 3, 0.012)
    assert not waiting_hybrid.ready_to_read(missed, 10, 4)
    assert waiting_hybrid.ready_to_read(missed, 10, 100)  # (a long answer to come: the model's long plans outpace them)
    # A fixed draft length weighs nothing: its model drafts whatever the lookups' pace.
    fixed = HybridDrafter(NGramDrafter(2, 2), ModelDrafter(draft, SAMPLED, length=FixedLength(4)))
    fixed.begin(copying)
    for _ in range(2):
        fixed.propose(copying, 3, sampler, 0)
        fixed.observe(3, 3, 0.012)
    assert len(fixed.propose(missed, 4, sampler, 0).tokens) == 4


@pytest.mark.slow
def test_hybrid_retries_a_declined_lookup_less_often_while_its_retries_are_rejected(models) -> None:
    _, draft = models
    model_length, lookup_lengths = AdaptiveLength(), {n: AdaptiveLength() for n in (2, 3)}
    measured = model_length.record_draft_step
    # Draft steps cost what they are said to cost, not what this machine's load makes of them.
    model_length.record_draft_step = lambda seconds, first=False: measured(0.001, first)
    for i in range(40):
        model_length.observe(3, 3, 0.01)
        lookup_lengths[2].observe(1, i % 2, 0.01)
    lookup = NGramDrafter(2, 3, lookup_lengths.__getitem__)
    hybrid = HybridDrafter(lookup, ModelDrafter(draft, SAMPLED, length=model_length))
    repeating = [1, 260, 265, 270, 262, 260, 265]
    hybrid.begin(repeating)
    retries = []
    for i in range(400):
        draft_ = hybrid.propose(repeating, 3, StreamSampler(np.random.default_rng(0)), 0)
        if hybrid._last is lookup:
            retries.append(i)
        hybrid.observe(len(draft_.tokens), 0, 0.01)  # nothing kept, whoever drafted
        model_length.observe(3, 3, 0.01)  # (the model's record stays as it was)
    # The 8th declined draft is retried; each fruitless retry doubles the wait, up to 128.
    assert retries[0] == 7 and list(np.diff(retries)) == [16, 32, 64, 128, 128]


def test_the_draft_model_stops_drafting_after_an_end_of_generation_token(models, monkeypatch) -> None:
    _, draft = models
    drafter = ModelDrafter(draft, SAMPLED, length=FixedLength(6))
    drafter.begin(PROMPT)
    assert len(drafter.propose(PROMPT, 6, StreamSampler(np.random.default_rng(0)), 0).tokens) == 6
    monkeypatch.setattr(draft, "is_end_of_generation", lambda token: True)  # whatever it drafts ends the text
    assert len(drafter.propose(PROMPT, 6, StreamSampler(np.random.default_rng(0)), 0).tokens) == 1


class _SameDraftEveryPass:
    """Proposes the same tokens every pass and records how many the target was asked to judge."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens, self.judged = tokens, []
        self.tokens_copied = 0

    def prompt_to_read(self, prompt_tokens) -> int:
        return 0

    def begin(self, prompt_tokens, read_later: bool = False) -> None:
        pass

    def read(self, context) -> None:
        pass

    def propose(self, context, max_tokens, sampler, position, grammar=None) -> Draft:
        return Draft(self.tokens[:max_tokens], None)

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float) -> None:
        self.judged.append(n_proposed)


def test_a_draft_is_judged_only_up_to_its_first_end_of_generation_token(models) -> None:
    target, _ = models
    drafter = _SameDraftEveryPass([265, 2, 270, 262])  # 2: the tiny vocabulary's EOS
    settings = GenerationSettings(SAMPLED, SpeculativeParams(draft_max=4), max_tokens=12, seed=0)
    generate_text(target, PROMPT, settings, drafter)
    assert max(drafter.judged) == 2  # nothing after the end token could have been emitted


def test_ngram_strategy_needs_no_draft_model(models) -> None:
    target, _ = models
    settings = GenerationSettings(SAMPLED, SpeculativeParams(strategy="ngram", draft_max=4), max_tokens=30, seed=2)
    generation = generate_text(target, [1, 260, 265, 270, 262, 260, 265], settings, build_drafter(settings.speculative, SAMPLED, None))
    assert generation.stats.draft_tokens_proposed > 0 and len(generation.tokens) == 30


class _Recorded:
    """A drafter that records, in order, when it read the prompt and when it proposed."""

    def __init__(self, drafter, events: list) -> None:
        self.drafter, self.events = drafter, events

    @property
    def tokens_copied(self) -> int:
        return self.drafter.tokens_copied

    def prompt_to_read(self, prompt_tokens) -> int:
        return self.drafter.prompt_to_read(prompt_tokens)

    def begin(self, prompt_tokens, read_later: bool = False) -> None:
        self.events.append(("begin", len(prompt_tokens), read_later))
        self.drafter.begin(prompt_tokens, read_later)

    def ready_to_read(self, context, n_generated: int, budget_left: int) -> bool:
        return self.drafter.ready_to_read(context, n_generated, budget_left)

    def read(self, context) -> None:
        self.events.append(("read", len(context)))
        self.drafter.read(context)

    def propose(self, context, max_tokens, sampler, position, grammar=None) -> Draft:
        self.events.append(("propose", len(context)))
        return self.drafter.propose(context, max_tokens, sampler, position, grammar)

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float) -> None:
        self.drafter.observe(n_proposed, n_accepted, verify_seconds)


def test_a_draft_model_reads_a_long_prompt_after_the_first_token(models) -> None:
    target, draft = models
    settings = GenerationSettings(SAMPLED, SpeculativeParams(draft_max=3), max_tokens=8, seed=4)
    long_prompt = [1, *range(260, 280)]  # 20 tokens the draft model has not seen
    draft.clear()
    events: list = []
    generation = Generation(target, long_prompt, settings, _Recorded(ModelDrafter(draft, SAMPLED, length=FixedLength(3)), events))
    for _ in generation:
        events.append(("emitted", len(generation.tokens)))
    # The first token came from the prompt's evaluation; then the draft model read the prompt and that token.
    assert events[:4] == [("emitted", 1), ("begin", len(long_prompt) + 1, True), ("read", len(long_prompt) + 1),
                          ("propose", len(long_prompt) + 1)]
    assert generation.stats.draft_tokens_proposed > 0
    reference = generate_text(target, long_prompt, settings)  # same seed, target-only
    assert generation.tokens == reference.tokens

    # A prompt the draft model holds already (a chat's next turn) is read before the first draft, as before.
    events.clear()
    draft.sync(long_prompt[:-1])
    generation = Generation(target, long_prompt, settings, _Recorded(ModelDrafter(draft, SAMPLED, length=FixedLength(3)), events))
    for _ in generation:
        events.append(("emitted", len(generation.tokens)))
    assert events[:3] == [("emitted", 1), ("begin", len(long_prompt) + 1, False), ("propose", len(long_prompt) + 1)]
    assert ("read", len(long_prompt) + 1) not in events


def test_a_draft_model_leaves_a_long_prompt_unread_for_a_short_answer_it_cannot_pay_back(models) -> None:
    target, draft = models
    long_prompt = [1, *range(260, 280), *range(279, 259, -1)]  # 40 tokens the draft model has not seen
    length = AdaptiveLength()
    length.record_read(100, 100.0)  # a second a token: reading this prompt costs far more than drafting could save
    settings = GenerationSettings(SAMPLED, SpeculativeParams(draft_max="adaptive"), max_tokens=12, seed=4)
    draft.clear()
    events: list = []
    generation = Generation(target, long_prompt, settings, _Recorded(ModelDrafter(draft, SAMPLED, length=length), events))
    for _ in generation:
        pass
    assert not any(event[0] == "read" for event in events) and draft.tokens == ()
    assert generation.stats.draft_tokens_proposed == 0
    assert generation.tokens == generate_text(target, long_prompt, settings).tokens  # same seed, target-only
    # Cheap to read: the draft model reads it after the first token, as a fixed length does.
    length.read_cost = 1e-6
    events.clear()
    generation = Generation(target, long_prompt, settings, _Recorded(ModelDrafter(draft, SAMPLED, length=length), events))
    for _ in generation:
        events.append(("emitted", len(generation.tokens)))
    assert events[:3] == [("emitted", 1), ("begin", len(long_prompt) + 1, True), ("read", len(long_prompt) + 1)]
    assert generation.stats.draft_tokens_proposed > 0


def test_tokens_made_while_the_draft_model_lagged_count_on_into_the_next_turn(models) -> None:
    _, draft = models

    class Recording(AdaptiveLength):
        def worth_reading(self, n_unread: int, n_generated: int, budget_left: int, later_turns: bool = False,
                          uncovered_share: float = 1.0) -> bool:
            self.asked = (n_unread, n_generated, later_turns)
            return False

    length = Recording()
    prompt = [1, *range(260, 280), *range(279, 259, -1)]
    draft.clear()
    first = ModelDrafter(draft, SAMPLED, length=length)
    first.begin(prompt, read_later=True)
    assert not first.ready_to_read(prompt, 30, 100) and length.asked == (40 + 30, 30, False)
    # The chat's next turn: the prompt holds the first answer and a new message; the 30 tokens made
    # without drafts still count towards paying for the reading.
    second_prompt = [*prompt, *range(260, 280), *range(260, 270), 261, 262]
    second = ModelDrafter(draft, SAMPLED, length=length)
    second.begin(second_prompt, read_later=True)
    assert not second.ready_to_read(second_prompt, 5, 100) and length.asked == (len(second_prompt) - 1 + 5, 35, True)
    second.read([*second_prompt, 263])
    assert length.made_unread == 0 and draft.tokens == (*second_prompt,)


def test_a_prompt_longer_than_the_draft_models_context_is_not_read(models) -> None:
    _, draft = models
    draft.sync([1, 260, 261])
    too_long = [1, *[260 + i % 20 for i in range(draft.n_ctx)]]  # no room left to draft in: reading it would be wasted
    drafter = ModelDrafter(draft, SAMPLED)
    assert drafter.prompt_to_read(too_long) == 0
    drafter.begin(too_long)
    assert draft.tokens == (1, 260, 261)
    assert drafter.propose(too_long, 4, StreamSampler(np.random.default_rng(0)), 0).tokens == []


def test_while_the_draft_model_waits_to_read_the_prompt_a_lookup_may_draft_the_first_pass(models) -> None:
    target, draft = models
    speculative = SpeculativeParams(strategy="hybrid", draft_max="adaptive", ngram_min=1)  # (it reads from the 2nd token on)
    # Every word of the vocabulary, then some again: whatever word comes first, it occurred before, so a lookup drafts
    repeating = [1, *range(259, 283), *range(259, 270)]
    for seed in range(4):
        settings = GenerationSettings(SAMPLED, speculative, max_tokens=10, seed=seed)
        draft.clear()
        events: list = []
        hybrid = build_drafter(speculative, SAMPLED, draft)
        generation = Generation(target, repeating, settings, _Recorded(hybrid, events))
        passes = []
        for _ in generation:
            passes.append(hybrid._last)
        assert events[0] == ("begin", len(repeating) + 1, True)  # (after the first token)
        assert passes[1] is hybrid.lookup  # the first pass drafted by lookup, the draft model still unread
        assert generation.tokens == generate_text(target, repeating, settings).tokens


@pytest.mark.parametrize("max_tokens", [1, 2])
def test_a_draft_model_that_waits_reads_nothing_when_no_draft_can_follow(models, max_tokens: int) -> None:
    """With one token to go there is no room for a draft (a pass always adds one of the target's own)."""
    target, draft = models
    settings = GenerationSettings(SAMPLED, SpeculativeParams(draft_max=3), max_tokens=max_tokens, seed=0)
    long_prompt = [1, *range(260, 280)]
    draft.clear()
    events: list = []
    generation = generate_text(target, long_prompt, settings, _Recorded(ModelDrafter(draft, SAMPLED, length=FixedLength(3)), events))
    assert len(generation.tokens) == max_tokens and not any(event[0] == "read" for event in events)
    assert draft.tokens == ()  # the prompt was never evaluated for nothing


def test_a_draft_model_times_catching_up_on_passes_it_sat_out_per_token(models) -> None:
    """Tokens added by passes without the model's drafts (lookups, passes that drafted nothing) are evaluated in
    one batch when it drafts next: what that cost per token is what such a pass costs the length controller."""
    _, draft = models
    length = AdaptiveLength()
    drafter = ModelDrafter(draft, SamplingParams(temperature=0.0), length=length)
    drafter.begin(PROMPT)  # (reading the prompt is timed apart)
    drafter.propose(PROMPT, 2, StreamSampler(np.random.default_rng(0)), 0)
    assert length.catch_up_cost is None  # nothing sat out yet
    context = [*PROMPT, *range(261, 269)]  # eight tokens it never drafted
    drafter.propose(context, 2, StreamSampler(np.random.default_rng(0)), 0)
    assert length.catch_up_cost is not None and 0 < length.catch_up_cost
    assert list(draft.tokens[:len(context) - 1]) == context[:-1]
    assert length.pass_cost(0) == pytest.approx(length.verify_cost(1) + length.catch_up_cost)
