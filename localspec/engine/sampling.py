"""Turning logits into the distribution that is sampled from.

The same `next_token_probs` serves the draft and the target, so the acceptance
rule compares like with like. Order of the transforms: a grammar's mask (when
the output is constrained), temperature, then top-k, top-p and min-p
truncation, then renormalisation. Temperature 0 means greedy.

A distribution is kept as `Probs`: the token ids it gives mass to and their
probabilities, nothing for the rest of the vocabulary. With min-p (the default)
that is a few dozen tokens out of tens of thousands, so sampling, the acceptance
ratio p/q and the residual max(0, p - q) touch only those (the tests check it
against dense probability vectors, `tests/dense.py`).

A `Sampler` draws one token from such a distribution at a position of the
generation. How it draws is `speculative.verify`:
- `CoupledSampler` ("coupled", the default): the Gumbel-max trick with noise
  keyed by (seed, position, token id) (`noise.py`). Draft and target draw with
  the same noise, and target-only decoding draws exactly what speculative
  decoding emits: same seed, same text.
- `StreamSampler` ("rejection"): draws from one random stream in order; drafts
  are then verified by rejection sampling, exact in distribution.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from ..errors import LocalspecError
from ..settings import SamplingParams
from .noise import gumbel

# Float32 logits are compared with a threshold computed in float64: prefilter with
# this much slack, then apply the exact min-p rule to the few candidates in float64.
_PREFILTER_SLACK = 1e-3

# Before a full sort for top-p, look at this many of the most likely tokens first:
# they almost always hold the nucleus, and partitioning is far cheaper than sorting.
_TOP_P_PARTIAL_SORT = 256


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax in float64."""
    shifted = np.asarray(logits, dtype=np.float64) - np.max(logits)
    exp = np.exp(shifted)
    return exp / exp.sum()


class Probs:
    """A next-token distribution over its support: sorted token `ids` and their probabilities `values`."""

    __slots__ = ("ids", "values")

    def __init__(self, ids: np.ndarray, values: np.ndarray) -> None:
        self.ids = ids
        self.values = values

    def __getitem__(self, token: int) -> float:
        """The probability of one token (0 outside the support)."""
        i = int(np.searchsorted(self.ids, token))
        return float(self.values[i]) if i < len(self.ids) and self.ids[i] == token else 0.0

    def at(self, tokens: np.ndarray) -> np.ndarray:
        """The probabilities of several tokens (0 outside the support)."""
        if len(self.ids) == 0:
            return np.zeros(len(tokens))
        i = np.minimum(np.searchsorted(self.ids, tokens), len(self.ids) - 1)
        return np.where(self.ids[i] == tokens, self.values[i], 0.0)

    def sample(self, rng: np.random.Generator) -> int:
        """Draw one token id (the values need not sum to 1), with one `rng.random()`."""
        cumulative = np.cumsum(self.values)
        i = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
        if i == len(self.ids):  # a draw rounded up to the total: the last token with mass
            i = int(np.flatnonzero(self.values)[-1])
        return int(self.ids[i])

    def minus(self, other: "Probs") -> "Probs | None":
        """norm(max(0, self - other)), or None where self <= other everywhere (p == q up to rounding)."""
        residual = np.maximum(self.values - other.at(self.ids), 0.0)
        total = residual.sum()
        return Probs(self.ids, residual / total) if total > 0.0 else None


class Sampler(Protocol):
    """Draws a token from a distribution at a position of the generation (0 = its first token)."""

    verifies_by_rejection: bool  # drafts carry q_draft and are verified by rejection sampling

    def draw(self, probs: Probs, position: int) -> int: ...

    def draw_with_margin(self, probs: Probs, position: int) -> tuple[int, float | None]:
        """The draw, and how far its score led the runner-up's where the sampler draws by scores (else None)."""
        ...


def _margin(scores: np.ndarray) -> float:
    """s₁ − s₂ for the two highest of `scores` (inf where there is no runner-up with any mass, 0 where nothing has any)."""
    if len(scores) < 2:
        return math.inf
    runner_up, top = np.partition(scores, -2)[-2:]
    with np.errstate(invalid="ignore"):  # (-inf - -inf: nothing had any mass)
        margin = float(top - runner_up)
    return 0.0 if math.isnan(margin) else margin


def coupled_lead(margin: float, temperature: float) -> float:
    """The lead a coupled draw's score `margin` stands for, in [0, 1]: 1 − exp(−T·(s₁ − s₂)).

    A draw at temperature T is the argmax of l/T + g over the tokens' logits l and the noise g; a
    target whose logits differ from the draft's by δ draws another token about where T·(s₁ − s₂) < δ.
    So the margin is taken back to the logits' scale, where it means the same at every temperature
    and goes to a greedy draft's lead (`Confidence.lead`) as T goes to 0.
    """
    return float(-math.expm1(-temperature * margin))


class CoupledSampler:
    """Gumbel-max sampling: argmax over the support of log p(t) + g(seed, position, t).

    An exact sample of `probs`, and a function of (seed, position, distribution)
    alone: whoever draws at a position with the same seed uses the same noise.
    Ties go to the lowest token id (the support is sorted).
    """

    verifies_by_rejection = False

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def draw(self, probs: Probs, position: int) -> int:
        return int(probs.ids[int(np.argmax(self._scores(probs, position)))])

    def draw_with_margin(self, probs: Probs, position: int) -> tuple[int, float]:
        """The draw, and how far its score led the runner-up's (`_margin`; see `coupled_lead`).

        Another distribution drawn at this position with the same noise (the target's, where
        this is the draft's) draws the same token unless it reorders the two highest scores:
        the margin foretells that, as the lead of a greedy draft's logits does at temperature 0,
        and far better than the token's probability does (a token of probability 0.05 that led
        by a wide margin is drawn by a target that is near this distribution all the same).
        Only the support is scored: where it holds the drawn token alone, a target that draws a
        token the draft's filters left out is not foreseen (the margin is inf).
        """
        scores = self._scores(probs, position)
        return int(probs.ids[int(np.argmax(scores))]), _margin(scores)

    def _scores(self, probs: Probs, position: int) -> np.ndarray:
        with np.errstate(divide="ignore"):  # a probability that underflowed to 0 scores -inf
            return np.log(probs.values) + gumbel(self.seed, position, probs.ids)


class StreamSampler:
    """Draws from one random stream in order, whatever the position (rejection verification)."""

    verifies_by_rejection = True

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def draw(self, probs: Probs, position: int) -> int:
        return probs.sample(self.rng)

    def draw_with_margin(self, probs: Probs, position: int) -> tuple[int, None]:
        """The draw, and no margin: a draw from the stream foretells nothing of the target's verdict but its
        probability (see `Confidence.certainty`)."""
        return self.draw(probs, position), None


def make_sampler(verify: str, seed: int) -> CoupledSampler | StreamSampler:
    """The sampler for `speculative.verify` ("coupled" or "rejection") and a generation's seed."""
    return CoupledSampler(seed) if verify == "coupled" else StreamSampler(np.random.default_rng(seed))


class Confidence:
    """The model's own next-token probabilities (temperature 1, no filter but a grammar's mask), for p_min and the
    draft length (greedy drafts, and sampled drafts under rejection verification).

    A heuristic, not part of what is sampled, so it is computed in float32 over
    the whole vocabulary: one pass of exp (only once a probability is asked for:
    a greedy draft's lead needs none), no float64 copy of the row.
    """

    __slots__ = ("_logits", "_within", "_top", "_top_logit", "_normalizer")

    def __init__(self, logits: np.ndarray, allowed: np.ndarray | None = None) -> None:
        """`allowed`: a grammar's mask; the probabilities are then those renormalised over it."""
        self._logits = logits
        self._within = logits if allowed is None else logits[allowed]
        self._top = int(np.argmax(self._within))  # (its index in `_within`)
        self._top_logit = np.float32(self._within[self._top])
        self._normalizer: float | None = None

    def _sum(self) -> float:
        if self._normalizer is None:
            self._normalizer = float(np.exp(np.asarray(self._within, dtype=np.float32) - self._top_logit).sum())
        return self._normalizer

    def max(self) -> float:
        """The largest probability."""
        return 1.0 / self._sum()

    def __getitem__(self, token: int) -> float:
        """One token's probability (read while `logits` is still valid)."""
        return float(np.exp(np.float32(self._logits[token]) - self._top_logit)) / self._sum()

    def lead(self, token: int) -> float:
        """How far `token` leads every other token: 1 − p(the likeliest other) / p(token), in [0, 1]
        (0 where another is at least as likely; 1 where no other is possible)."""
        logit = np.float32(self._logits[token])
        if logit < self._top_logit:
            return 0.0
        others = [part for part in (self._within[: self._top], self._within[self._top + 1 :]) if len(part)]
        if not others:
            return 1.0
        runner_up = max(np.float32(np.max(part)) for part in others)  # (the top logit again where two tie: lead 0)
        return float(1.0 - np.exp(runner_up - logit))

    def certainty(self, token: int, greedy: bool) -> float:
        """What the draft length weighs a drafted token by (see `AdaptiveLength.keep_going`).

        Greedy, the target keeps the draft model's choice exactly where its own argmax is
        the same token: the draft's lead over its runner-up foretells that (on the demo pair, of the
        drafted tokens the target rejected 25 in 26 led by under 0.22, where 460 tokens
        drafted with probability 0.2 to 0.5 held most of the rejections and were 96% kept).
        Sampled and verified by rejection, the token's probability foretells it best; sampled
        under coupled verification, the lead of its noisy score (`coupled_lead`), computed by the drafter.
        """
        return self.lead(token) if greedy else self[token]


def next_token_probs(logits: np.ndarray, params: SamplingParams, allowed: np.ndarray | None = None) -> Probs:
    """The processed next-token distribution over its support.

    `allowed` (sorted token ids) is a grammar's mask, applied first: the filters
    and the normalisation see only the allowed tokens (min-p's threshold comes
    from the most likely allowed token). `logits` is read, never written or
    copied whole (a view of llama.cpp's buffer will do).
    """
    if allowed is not None:
        within = next_token_probs(logits[allowed], params)
        return Probs(allowed[within.ids], within.values)
    if params.greedy:
        return Probs(np.array([masked_argmax(logits, None)]), np.ones(1))

    candidates = _min_p_prefilter(logits, params)  # (none when a score is NaN)
    kept = np.asarray(logits[candidates], dtype=np.float64)
    top = _finite(kept.max() if len(kept) else math.nan)
    with np.errstate(over="ignore"):  # shifted first: a tiny temperature gives -inf, never inf - inf
        scaled = (kept - top) / params.temperature
    if 0 < params.top_k < len(candidates):
        best = np.argpartition(-scaled, params.top_k - 1)[: params.top_k]
        candidates, scaled = candidates[best], scaled[best]
    candidate_probs = softmax(scaled)

    if params.top_p < 1.0:
        keep = _nucleus(candidate_probs, params.top_p)
        candidates, candidate_probs = candidates[keep], candidate_probs[keep]
    if params.min_p > 0.0:
        keep = candidate_probs >= params.min_p * candidate_probs.max()
        candidates, candidate_probs = candidates[keep], candidate_probs[keep]

    order = np.argsort(candidates)
    return Probs(candidates[order], candidate_probs[order] / candidate_probs.sum())


def masked_argmax(logits: np.ndarray, allowed: np.ndarray | None) -> int:
    """The most likely token among `allowed` (every token when None)."""
    if allowed is None:
        best = int(np.argmax(logits))  # (the first NaN, if there is one)
        _finite(logits[best])
        return best
    within = int(np.argmax(logits[allowed]))
    _finite(logits[allowed[within]])
    return int(allowed[within])


def _finite(score: float) -> float:
    """`score` (the best of a row of logits), which a working model never computes as NaN or infinity."""
    if not math.isfinite(score):
        raise LocalspecError("the model computed scores that are not numbers (NaN or infinity): its file may be"
                             " damaged, or its numbers overflow on this backend")
    return float(score)


def _min_p_prefilter(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Token ids that can survive the filters (sorted), found cheaply when top-p is off.

    min-p keeps p_i >= min_p * p_max, i.e. logit_i >= max(logits) + T ln(min_p);
    without top-p (whose cumulative sums depend on every top-k survivor) this
    commutes with top-k, so applying it first changes nothing but the cost. The
    comparison runs on the raw logits with a little slack; the exact rule is
    applied afterwards to the survivors.
    """
    if params.min_p > 0.0 and params.top_p >= 1.0:
        threshold = float(np.max(logits)) + params.temperature * math.log(params.min_p) - _PREFILTER_SLACK  # (a huge T: -inf)
        # (below the logits' own float range every token passes: compared as such, numpy would warn of an overflow)
        return np.flatnonzero(logits >= max(threshold, float(np.finfo(logits.dtype).min)))
    return np.arange(logits.shape[-1])


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Indices of the smallest set of most likely tokens whose mass reaches `top_p`."""
    if len(probs) > _TOP_P_PARTIAL_SORT:
        head = np.argpartition(-probs, _TOP_P_PARTIAL_SORT - 1)[:_TOP_P_PARTIAL_SORT]
        if probs[head].sum() >= top_p:
            order = head[np.argsort(-probs[head], kind="stable")]
        else:
            order = np.argsort(-probs, kind="stable")
    else:
        order = np.argsort(-probs, kind="stable")
    cumulative = np.cumsum(probs[order])
    n_keep = int(np.searchsorted(cumulative, top_p)) + 1
    return order[: min(n_keep, len(order))]

