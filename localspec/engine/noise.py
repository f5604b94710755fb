"""Gumbel noise that depends only on (seed, position, token id): the randomness of coupled sampling.

Coupled sampling draws the token at position n of a generation as
argmax over the support of (log p_n(t) + g(seed, n, t)), the Gumbel-max trick.
Because g is a pure function of its three arguments, any two samplers that look
at the same position with the same seed use the same noise, whichever order
they ask in, however often and in whichever process: the draft's proposal and
the target's own token at a position are coupled, and target-only decoding
draws exactly the tokens speculative decoding emits.

The noise is a counter-based hash: splitmix64's finaliser applied three times,
keyed by the seed, then the position, then the token id, in uint64 arithmetic
(which wraps). Its top 53 bits give a uniform u in (0, 1), and g = -log(-log u).
Changing any constant here changes every seeded output users have seen, so
`tests/test_noise.py` freezes golden values.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment (2^64 / golden ratio)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_SHIFT_30, _SHIFT_27, _SHIFT_31, _SHIFT_11 = (np.uint64(s) for s in (30, 27, 31, 11))
_MASK_64 = (1 << 64) - 1
_TWO_TO_MINUS_53 = 2.0**-53


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 with full avalanche."""
    z = (z ^ (z >> _SHIFT_30)) * _MIX_1
    z = (z ^ (z >> _SHIFT_27)) * _MIX_2
    return z ^ (z >> _SHIFT_31)


def _uint64(value: int) -> np.ndarray:
    return np.array([value & _MASK_64], dtype=np.uint64)


def hash_tokens(seed: int, position: int, token_ids: np.ndarray) -> np.ndarray:
    """A uint64 hash of (seed, position, token id) for each id in `token_ids`."""
    with np.errstate(over="ignore"):
        key = _mix(_uint64(seed) + _GOLDEN)
        key = _mix(key + _uint64(position) * _GOLDEN)
        ids = np.asarray(token_ids).astype(np.uint64)
        return _mix(key + (ids + np.uint64(1)) * _GOLDEN)


def uniforms(seed: int, position: int, token_ids: np.ndarray) -> np.ndarray:
    """Uniforms in (0, 1), one per token id: ((h >> 11) + 0.5) * 2^-53, never 0 or 1."""
    bits = hash_tokens(seed, position, token_ids) >> _SHIFT_11
    return (bits.astype(np.float64) + 0.5) * _TWO_TO_MINUS_53


def gumbel(seed: int, position: int, token_ids: np.ndarray) -> np.ndarray:
    """Standard Gumbel noise, -log(-log u), one value per token id (float64)."""
    return -np.log(-np.log(uniforms(seed, position, token_ids)))
