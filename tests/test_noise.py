"""The coupled-sampling noise: a pure function of (seed, position, token id), uniform and independent."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from stats_helpers import pearson_pvalue

from localspec.engine.noise import gumbel, hash_tokens, uniforms
from localspec.engine.sampling import CoupledSampler, Probs

# Frozen: a change of the noise function silently changes every seeded output users have seen.
# Positions other than 0 (where position · constant vanishes), the largest seed, token ids of a 262k vocabulary.
GOLDEN_HASHES = {
    (42, 0, 0): 14241928491073317330,
    (7, 41, 5): 12460845959692418281,
    (2**63 - 1, 1_000_003, 262143): 9509869780558200083,
}
GOLDEN_UNIFORMS = {  # (seed, position, token ids) -> their uniforms
    (42, 0, (0, 1, 2, 49151)): [0.7720564905202447, 0.38165122758074327, 0.7058461526830684, 0.41260606909534764],
    (123456789, 17, (3, 49151)): [0.7037622091245939, 0.6149518214002443],
    (2**63 - 1, 1_000_003, (0, 131071, 262143)): [0.11823119859324266, 0.2471537684921989, 0.5155310738067724],
}


def test_golden_values_are_frozen() -> None:
    for (seed, position, token), expected in GOLDEN_HASHES.items():
        assert int(hash_tokens(seed, position, np.array([token]))[0]) == expected
    for (seed, position, tokens), expected in GOLDEN_UNIFORMS.items():
        np.testing.assert_allclose(uniforms(seed, position, np.array(tokens)), expected, rtol=0, atol=1e-15)


def test_same_arguments_same_noise_in_another_process() -> None:
    ids = np.array([0, 7, 262143])
    here = gumbel(2**63 - 1, 123_456, ids).tolist()
    code = "import numpy as np; from localspec.engine.noise import gumbel; print(gumbel(2**63 - 1, 123456, np.array([0, 7, 262143])).tolist())"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert here == eval(there)  # the same float64 values, bit for bit


def test_noise_depends_on_each_argument() -> None:
    ids = np.arange(64)
    base = uniforms(1, 5, ids)
    assert not np.array_equal(base, uniforms(2, 5, ids))
    assert not np.array_equal(base, uniforms(1, 6, ids))
    assert not np.array_equal(base[1:], base[:-1])
    # Keyed by token id, not by index: a token's value does not depend on which others are asked for.
    np.testing.assert_array_equal(uniforms(1, 5, ids[10:20]), base[10:20])


def test_uniforms_are_uniform_and_independent_across_positions_and_tokens() -> None:
    ids = np.arange(4000)
    grid = np.stack([uniforms(9, position, ids) for position in range(50)])  # 200,000 values
    assert 0 < grid.min() and grid.max() < 1
    counts, _ = np.histogram(grid, bins=100, range=(0, 1))
    assert pearson_pvalue(counts) > 1e-3
    # Pairs (same token at neighbouring positions; neighbouring tokens at one position) fill the square evenly.
    for a, b in ((grid[:-1].ravel(), grid[1:].ravel()), (grid[:, :-1].ravel(), grid[:, 1:].ravel())):
        pairs, _, _ = np.histogram2d(a, b, bins=10, range=((0, 1), (0, 1)))
        assert pearson_pvalue(pairs) > 1e-3
        assert abs(np.corrcoef(a, b)[0, 1]) < 0.01


@pytest.mark.slow
def test_gumbel_max_draws_each_token_with_its_probability() -> None:
    probs = Probs(np.array([3, 10, 11, 40]), np.array([0.5, 0.25, 0.15, 0.10]))
    sampler = CoupledSampler(seed=77)
    draws = [sampler.draw(probs, position) for position in range(20_000)]
    counts = [draws.count(token) for token in probs.ids]
    assert pearson_pvalue(counts, probs.values * len(draws)) > 1e-3
    # A pure function: asking again at a position gives the same token.
    assert [sampler.draw(probs, position) for position in range(100)] == draws[:100]
