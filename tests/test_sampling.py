"""next_token_probs (through its dense form): each filter keeps exactly the support it promises; the sparse form agrees with the dense one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dense import logits_to_probs, sample, to_dense, to_probs
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from localspec.engine.noise import gumbel
from localspec.engine.sampling import (
    Confidence,
    CoupledSampler,
    Probs,
    StreamSampler,
    _nucleus,
    coupled_lead,
    next_token_probs,
    softmax,
)
from localspec.errors import InputError, LocalspecError
from localspec.settings import SamplingParams

LOGITS = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])


def test_greedy_is_one_hot_on_argmax() -> None:
    probs = logits_to_probs(LOGITS, SamplingParams(temperature=0))
    assert probs[0] == 1.0 and probs.sum() == 1.0


def test_plain_temperature_one_is_softmax() -> None:
    probs = logits_to_probs(LOGITS, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(probs, softmax(LOGITS))


def test_temperature_sharpens() -> None:
    cold = logits_to_probs(LOGITS, SamplingParams(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(cold, softmax(LOGITS / 0.5))


@pytest.mark.parametrize("temperature", [5e-324, 1e-300, 1e-30])
@pytest.mark.parametrize("filters", [{}, {"top_k": 0, "top_p": 1.0, "min_p": 0.0}, {"top_k": 3, "top_p": 0.9}])
def test_a_tiny_positive_temperature_is_as_good_as_greedy(temperature: float, filters: dict) -> None:
    logits = np.array([1e30, -1e30, 3.0, 2.0, 3.5, -2.0], dtype=np.float32)  # scaled without care: inf - inf
    probs = logits_to_probs(logits, SamplingParams(temperature=temperature, **filters))
    assert probs[0] == 1.0 and probs.sum() == 1.0
    tied = logits_to_probs(np.array([2.0, 5.0, 5.0, 1.0]), SamplingParams(temperature=temperature, **filters))
    np.testing.assert_array_equal(tied, [0.0, 0.5, 0.5, 0.0])


def test_top_k_keeps_k_most_likely_and_renormalises() -> None:
    probs = logits_to_probs(LOGITS, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert np.count_nonzero(probs) == 2
    np.testing.assert_allclose(probs[:2], softmax(LOGITS[:2]))


def test_top_p_keeps_smallest_set_reaching_mass() -> None:
    full = softmax(LOGITS)
    probs = logits_to_probs(LOGITS, SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0))
    n_kept = np.count_nonzero(probs)
    assert full[: n_kept - 1].sum() < 0.8 <= full[:n_kept].sum()


def test_top_p_zero_keeps_the_most_likely_token_alone() -> None:
    """As OpenAI's API and llama.cpp read it (it was refused: `--top-p` took 0 < x <= 1)."""
    from localspec.settings import GenerationSettings

    assert GenerationSettings.from_values({"sampling.top_p": 0}).sampling.top_p == 0
    probs = logits_to_probs(LOGITS, SamplingParams(temperature=1.0, top_k=0, top_p=0.0, min_p=0.0))
    assert np.flatnonzero(probs).tolist() == [int(np.argmax(LOGITS))]


def test_min_p_drops_tokens_below_fraction_of_max() -> None:
    full = softmax(LOGITS)
    probs = logits_to_probs(LOGITS, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.2))
    assert set(np.flatnonzero(probs)) == set(np.flatnonzero(full >= 0.2 * full.max()))


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_k=-1), dict(top_p=-0.1), dict(top_p=1.5),
                                 dict(min_p=2)])
def test_invalid_params_are_refused(bad: dict) -> None:
    with pytest.raises(InputError, match=f"sampling.{next(iter(bad))} must be"):
        SamplingParams(**bad)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(300, 700), elements=st.floats(-20, 20)), st.floats(0.05, 0.999))
def test_partial_sort_nucleus_equals_full_sort(logits: np.ndarray, top_p: float) -> None:
    probs = softmax(logits)
    kept = _nucleus(probs, top_p)
    order = np.argsort(-probs, kind="stable")
    n_keep = int(np.searchsorted(np.cumsum(probs[order]), top_p)) + 1
    assert np.isclose(probs[kept].sum(), probs[order[:n_keep]].sum())
    assert len(kept) == n_keep


def _reference_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The filters applied literally in order, on the full vocabulary."""
    probs = softmax(logits / params.temperature)
    order = np.argsort(-probs, kind="stable")
    keep = np.zeros(len(probs), dtype=bool)
    keep[order[: params.top_k] if params.top_k else order] = True
    probs = np.where(keep, probs, 0.0)
    probs /= probs.sum()
    if params.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        n_keep = int(np.searchsorted(np.cumsum(probs[order]), params.top_p)) + 1
        mask = np.zeros(len(probs), dtype=bool)
        mask[order[:n_keep]] = True
        probs = np.where(mask, probs, 0.0) / probs[mask].sum()
    if params.min_p > 0.0:
        probs = np.where(probs >= params.min_p * probs.max(), probs, 0.0)
        probs /= probs.sum()
    return probs


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    # Logits at least 0.5 apart: no ties, so "the k largest" is one well-defined set.
    arrays(np.float64, st.integers(2, 120), elements=st.integers(-60, 60).map(lambda x: x / 2), unique=True),
    st.floats(0.1, 2.0),
    st.sampled_from([0, 1, 5, 40]),
    st.sampled_from([1.0, 0.9, 0.5]),
    st.sampled_from([0.0, 0.05, 0.3]),
)
def test_fast_paths_equal_the_literal_filter_chain(logits, temperature, top_k, top_p, min_p) -> None:
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    np.testing.assert_allclose(logits_to_probs(logits, params), _reference_probs(logits, params), atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float32, st.integers(2, 300), elements=st.floats(-30, 30, width=32)),
    st.floats(0.1, 2.0),
    st.sampled_from([0.01, 0.05, 0.3]),
)
def test_min_p_on_float32_logits_keeps_what_float64_keeps(logits, temperature, min_p) -> None:
    """The prefilter compares llama.cpp's float32 logits with a float64 threshold: nothing on the edge is lost."""
    params = SamplingParams(temperature=temperature, top_k=0, top_p=1.0, min_p=min_p)
    reference = _reference_probs(logits.astype(np.float64), params)
    np.testing.assert_allclose(logits_to_probs(logits, params), reference, atol=1e-12)


@pytest.mark.slow  # (0.4 s: sixty examples)
@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(2, 80), elements=st.floats(0, 1)), arrays(np.float64, 80, elements=st.floats(0, 1)), st.integers(0, 2**32))
def test_sparse_distribution_agrees_with_the_dense_vector(p_dense, q_dense, seed) -> None:
    """Sampling (one rng draw, the same token), lookups and the residual max(0, p - q), sparse vs dense."""
    if p_dense.sum() == 0:
        p_dense[0] = 1.0
    q_dense = q_dense[: len(p_dense)]
    p, q = to_probs(p_dense), to_probs(q_dense)
    assert p.sample(np.random.default_rng(seed)) == sample(p_dense, np.random.default_rng(seed))
    tokens = np.arange(len(p_dense))
    np.testing.assert_array_equal(p.at(tokens), p_dense)
    assert [p[int(t)] for t in tokens] == list(p_dense)
    np.testing.assert_array_equal(to_dense(p, len(p_dense)), p_dense)
    residual = np.maximum(p_dense - q_dense, 0.0)
    difference = p.minus(q)
    if residual.sum() > 0:
        np.testing.assert_allclose(to_dense(difference, len(p_dense)), residual / residual.sum(), rtol=1e-12)
    else:
        assert difference is None


def test_a_tokens_lead_is_how_far_it_outweighs_the_likeliest_other() -> None:
    logits = np.array([0.0, 2.0, 1.5, -1.0], dtype=np.float32)
    confidence = Confidence(logits)
    assert confidence.lead(1) == pytest.approx(1 - np.exp(-0.5), rel=1e-6)  # the top token, over the second
    assert confidence.lead(2) == 0.0 and confidence.lead(0) == 0.0  # another token is likelier
    assert Confidence(np.array([3.0, 3.0], dtype=np.float32)).lead(0) == 0.0  # a tie leads nothing
    # Under a grammar's mask only the allowed tokens compete: token 2 leads token 0 there.
    masked = Confidence(logits, np.array([0, 2]))
    assert masked.lead(2) == pytest.approx(1 - np.exp(-1.5), rel=1e-6)
    assert Confidence(logits, np.array([3])).lead(3) == 1.0  # the only token allowed
    assert confidence.certainty(1, greedy=True) == confidence.lead(1)
    assert confidence.certainty(2, greedy=False) == confidence[2]


def test_a_coupled_draw_comes_with_the_margin_of_its_noisy_score() -> None:
    sampler = CoupledSampler(seed=7)
    probs = Probs(np.array([3, 8, 20, 41]), np.array([0.4, 0.3, 0.2, 0.1]))
    for position in range(20):
        token, margin = sampler.draw_with_margin(probs, position)
        scores = np.log(probs.values) + gumbel(7, position, probs.ids)
        runner_up, top = np.sort(scores)[-2:]
        assert token == sampler.draw(probs, position) == probs.ids[np.argmax(scores)]
        assert margin == pytest.approx(top - runner_up, rel=1e-12)
    assert sampler.draw_with_margin(Probs(np.array([5]), np.ones(1)), 0) == (5, math.inf)  # nothing to lead
    assert sampler.draw_with_margin(Probs(np.array([5, 6]), np.array([1.0, 0.0])), 0) == (5, math.inf)  # a runner-up of no mass
    assert sampler.draw_with_margin(Probs(np.array([5, 6]), np.array([0.0, 0.0])), 0)[1] == 0.0  # nothing has mass
    tied = Probs(np.array([1, 2]), np.array([0.5, 0.5]))
    assert any(sampler.draw_with_margin(tied, position)[1] >= 0 for position in range(5))
    assert StreamSampler(np.random.default_rng(0)).draw_with_margin(probs, 0)[1] is None  # a stream's draw has none


def test_a_coupled_lead_is_on_the_logits_scale_and_goes_to_the_greedy_lead_as_the_temperature_falls() -> None:
    logits = np.array([2.0, 1.0, 0.0])
    greedy = Confidence(logits.astype(np.float32)).lead(0)
    leads = {}
    for temperature in (1.0, 0.5, 0.05):
        probs = Probs(np.arange(3), softmax(logits / temperature))
        margins = [CoupledSampler(seed).draw_with_margin(probs, 0)[1] for seed in range(400)]
        leads[temperature] = float(np.median([coupled_lead(m, temperature) for m in margins]))
    assert leads[0.05] == pytest.approx(greedy, abs=0.02)
    assert abs(leads[0.5] - greedy) < 0.1 and abs(leads[1.0] - greedy) < 0.1  # the same scale at every temperature
    assert coupled_lead(math.inf, 0.8) == 1.0 and coupled_lead(0.0, 0.8) == 0.0


@pytest.mark.slow  # (over a third of a second)
def test_the_lead_of_a_coupled_draft_foretells_whether_a_nearby_target_draws_the_same_token() -> None:
    """What the draft length relies on: over many positions, a draft token that led by little is redrawn by a
    target whose distribution is near the draft's far more often than one that led by much."""
    rng = np.random.default_rng(0)
    ids = np.arange(40)
    sampler = CoupledSampler(seed=11)
    kept = {"low": [], "high": []}
    for position in range(4000):
        logits = rng.standard_normal(40) * 2
        q = softmax(logits)
        p = softmax(logits + rng.standard_normal(40) * 0.3)  # the target: near the draft
        token, margin = sampler.draw_with_margin(Probs(ids, q), position)
        lead = coupled_lead(margin, 1.0)
        agreed = sampler.draw(Probs(ids, p), position) == token
        if lead < 0.2:
            kept["low"].append(agreed)
        elif lead > 0.8:
            kept["high"].append(agreed)
    low, high = np.mean(kept["low"]), np.mean(kept["high"])
    assert len(kept["low"]) > 300 and len(kept["high"]) > 300
    assert high > 0.97 and low < 0.8 and high - low > 0.2


def test_confidence_is_the_plain_softmax() -> None:
    logits = (np.random.default_rng(0).standard_normal(5000) * 4).astype(np.float32)
    confidence, exact = Confidence(logits), softmax(logits)
    assert confidence.max() == pytest.approx(exact.max(), rel=1e-5)
    for token in (0, int(np.argmax(logits)), 4999):
        assert confidence[token] == pytest.approx(exact[token], rel=1e-5)


def test_a_draw_rounded_up_to_the_total_lands_on_the_last_token_with_mass() -> None:
    """With a denormal total, u * total rounds to the total for u >= 0.5: never an index past the support."""
    p_dense = np.array([5e-324, 0.0])
    draws = {sample(p_dense, np.random.default_rng(seed)) for seed in range(20)}
    assert draws == {0}
    assert {to_probs(p_dense).sample(np.random.default_rng(seed)) for seed in range(20)} == {0}
    with_a_zero_last = Probs(np.array([3, 7]), np.array([5e-324, 0.0]))  # (min_p 0 keeps tokens of no mass)
    assert {with_a_zero_last.sample(np.random.default_rng(seed)) for seed in range(20)} == {3}


@pytest.mark.parametrize("row", [[0.0, 1.0, np.nan], [0.0, np.inf, 1.0], [np.nan] * 3])
@pytest.mark.parametrize("temperature, min_p, top_p", [(0.8, 0.05, 1.0), (0.8, 0.0, 1.0), (0.0, 0.05, 1.0), (0.8, 0.0, 0.9)])
def test_scores_that_are_not_numbers_are_one_error_not_a_draw(row: list[float], temperature: float, min_p: float,
                                                              top_p: float) -> None:
    params = SamplingParams(temperature=temperature, min_p=min_p, top_p=top_p)
    logits = np.array(row, dtype=np.float32)
    with pytest.raises(LocalspecError, match="NaN or infinity"):
        next_token_probs(logits, params)
    with pytest.raises(LocalspecError, match="NaN or infinity"):
        next_token_probs(logits, params, allowed=np.array([0, 1, 2]))
    assert next_token_probs(np.array([-np.inf, 1.0, 2.0], dtype=np.float32), params).ids[-1] == 2  # -inf: masked


def test_a_huge_temperature_keeps_every_token_without_a_numpy_warning() -> None:
    """min-p's threshold at T=1e39 lies below float32's range: every token passes, quietly (the server's log
    showed numpy's overflow warning)."""
    import warnings

    from localspec.engine.sampling import _min_p_prefilter

    logits = np.random.default_rng(0).normal(size=100).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(_min_p_prefilter(logits, SamplingParams(temperature=1e39))) == 100
