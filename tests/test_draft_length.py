"""The adaptive draft length on synthetic acceptance and cost sequences: it must find the analytic optimum."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.engine.draft_length import AdaptiveLength, FixedLength


def analytic_best(alpha: float, draft_cost: float, a: float, b: float, limit: int = 32) -> tuple[int, float]:
    """argmax_k of E[tokens](k) / (k·c_draft + a + b·(k+1)) with E = (1 - α^(k+1)) / (1 - α); and that best rate."""
    rates = [(1 - alpha ** (k + 1)) / (1 - alpha) / (k * draft_cost + a + b * (k + 1)) for k in range(limit + 1)]
    return int(np.argmax(rates)), max(rates)


def simulate(controller: AdaptiveLength, alpha: float, draft_cost: float, a: float, b: float, passes: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(passes):
        k = controller.plan(32)
        for _ in range(k):
            controller.record_draft_step(draft_cost * rng.uniform(0.9, 1.1), first=False)
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        controller.observe(k, accepted, (a + b * (k + 1)) * rng.uniform(0.95, 1.05))


@pytest.mark.parametrize(
    "alpha, draft_cost, a, b",
    [
        (0.9, 0.008, 0.021, 0.005),  # the demo pair's shape: cheap-ish draft, high agreement
        (0.6, 0.008, 0.021, 0.005),  # lower agreement: shorter drafts
        (0.95, 0.001, 0.050, 0.002),  # a 7B target with a tiny draft: long drafts
        (0.3, 0.010, 0.020, 0.010),  # a poor draft: drafting barely pays, or not at all
    ],
)
def test_the_controller_converges_to_the_analytic_optimum(alpha: float, draft_cost: float, a: float, b: float) -> None:
    controller = AdaptiveLength()
    simulate(controller, alpha, draft_cost, a, b, passes=250)
    best_k, best_rate = analytic_best(alpha, draft_cost, a, b)
    chosen = controller.best_length(32)
    true_rate = (1 - alpha ** (chosen + 1)) / (1 - alpha) / (chosen * draft_cost + a + b * (chosen + 1))
    assert true_rate >= 0.97 * best_rate  # within 3% of the best possible speed
    assert abs(chosen - best_k) <= max(2, best_k // 4), (chosen, best_k)  # and near the optimum (flat when it is long)


def test_estimates_match_the_synthetic_truth() -> None:
    controller = AdaptiveLength()
    simulate(controller, alpha=0.8, draft_cost=0.01, a=0.02, b=0.004, passes=800, seed=3)
    assert controller.overall_acceptance() == pytest.approx(0.8, abs=0.05)
    assert controller.draft_cost == pytest.approx(0.01, rel=0.1)
    assert controller.verify_cost(9) == pytest.approx(0.02 + 0.004 * 9, rel=0.1)


def test_early_stop_when_the_draft_is_unsure() -> None:
    controller = AdaptiveLength()
    simulate(controller, alpha=0.9, draft_cost=0.008, a=0.021, b=0.005, passes=250)
    controller.plan(32)
    assert controller.keep_going(1, confidence=0.9)
    controller.plan(32)
    for _ in range(3):  # pretend the draft's probabilities of low-confidence tokens predict rejections
        controller.bin_reached[0] += 50
    assert not controller.keep_going(1, confidence=0.05)  # one more token would cost more than it brings


def test_fixed_length_is_fixed() -> None:
    fixed = FixedLength(6)
    assert fixed.plan(10) == 6 and fixed.plan(3) == 3 and fixed.keep_going(5, confidence=0.0)
