"""How many tokens to draft each pass: a fixed number, or chosen to maximise expected speed.

`AdaptiveLength` keeps three running estimates, all from the generation in
progress:
- the acceptance rate α_i at each draft position i (of the drafts that reached
  it), pooled towards the overall rate where a position has few samples;
- the cost of drafting: the first token of a pass (which also evaluates the
  draft model's own last token of the pass before; what lookup passes added is
  not counted: it is paid whenever the model drafts next) and each further token;
  and what each token costs a draft model that catches up on passes it sat out
  (lookups, passes that drafted nothing) in one batch when it next drafts: a
  step for one token, much less per token after a run of such passes (on the
  demo draft a batch of 8 costs 2.85 ms a token against a step's 5.8);
- the cost of a verify pass of n tokens, V(n) = a + b·n, fitted to recent
  passes of two tokens or more (once four sizes or more are measured, its
  slope is the weighted median of the slopes between them, so that one slow
  pass at a long size does not tilt it);
  a one-token pass (nothing drafted) is measured
  apart, since llama.cpp computes a lone token with other kernels: cheaper than
  the line through batches says (on the demo target 14.5 ms, where the line
  through 2..17 rows gives about 17.5), or dearer where a build with llamafile's
  kernels has it padded to two rows. Every pass measures the same target,
  whoever drafted it, so the controllers of one session share these costs
  (`VerifyCosts`). A pass that took more than 1.5 times what the estimates
  expect of it counts as 1.5 times: a moment when the machine was busy (another
  process, a virtual machine's stolen time) otherwise skews the fitted slope
  and shortens the drafts for many passes.

It also measures what a draft model's reading of a prompt costs per token
(batched), which with the expected saving per generated token decides when a
draft model reads a long prompt at all (`worth_reading`).

Each pass it drafts the k that maximises expected tokens per second,

    E[tokens](k) / (D(k) + V(k+1)),   E[tokens](k) = 1 + Σ_{i≤k} Π_{j≤i} α_j,
    D(k) = c_first + (k − 1)·c_next for k ≥ 1, D(0) = c_catch_up (c_next until measured)

(which is (1 − α^(k+1)) / (1 − α) when every α_j = α). While drafting it stops
early once one more token is worth less than it costs at that rate, and goes
on past k while one more is worth more (`most_to_draft`: the plan weighs the
average token at each position, a run of sure ones is worth drafting long;
on the demo pair at T=0.8 that drafted 7–8 tokens a pass where the plan gave
5.6, 1.05–1.07× faster, and changed nothing at T=0): the chance
that the tokens drafted so far are all kept is estimated from the drafter's
certainty of each of them, through an acceptance rate measured per certainty
bin (a draft model's probabilities are rarely calibrated as they are). A draft
model's certainty of a token is its lead over the runner-up where the tokens are
greedy, or sampled under coupled verification (the lead of its noisy score, on
the logits' scale whatever the temperature: the target, drawing with the same
noise, keeps the token unless its own scores reorder the two; `coupled_lead`),
and its probability where they are sampled and verified by rejection
(`Confidence.certainty`). Leads and probabilities mean different
things, so under rejection verification a draft model's greedy bins are never
lent to its sampled ones or back (`LearnedLengths`). On the demo pair at T=0.8
the lead sorts drafts far better than the probability did (area under the ROC
curve for "kept" 0.93 against 0.81; tokens leading by under 0.1 were kept 70%
of the time, by over 0.3 99%), so a pass stops before the draws the target is
likely to redraw. Every 8 passes it tries k ± 1, so that the verify cost's slope stays
measurable; where it plans to draft nothing and such tries keep losing their
first token (a memory of unrelated text), it tries less and less often.

What a controller learned comes in two parts that `LearnedLengths` keeps apart,
so that one does not spoil the other: its costs (a property of the machine and
the models' files) and its acceptance (a property of the pair, the drafting
side, the verification mode and the temperature). Both can be saved and
restored as plain JSON-able dicts, so a later process starts where this one
stopped (`localspec/app/learned_lengths.py`). A machine's speed moves (another
process, a busy host), so restored costs are kept as shares of the smallest
target pass saved beside them (one token, unless every pass of that process
drafted), and follow this process's passes of that size until measured again:
costs saved while the machine was three times slower do not make drafting look
worthless on an idle one, where the draft model, never reading the prompt,
would never measure them again. (A pass over a long context costs a little more
too, and scales the restored costs with it.)
"""

from __future__ import annotations

import math
from typing import Any

from ..settings import ADAPTIVE_DRAFT_LIMIT

_PRIOR_ACCEPTANCE = 0.8
_PRIOR_WEIGHT = 2.0  # position estimates lean on the overall rate until they have this many samples
_DECAY = 0.98  # per pass: older passes count less, so the estimates follow the text
_PRIOR_SLOPE = 0.2  # V(n) = a + b·n with b = 0.2·a until the slope is measured (CPU: a 9-token batch ≈ 2.3 single steps)
_PRIOR_DRAFT_SHARE = 0.3  # a draft token costs this share of a one-token target pass until measured
_EXPLORE_EVERY = 8
_PATIENCE = 2  # from a plan of nothing, explorations that lost their first token, in a row, before backing off
_MAX_BACKOFF = 4  # ...after which each further one doubles the wait for the next, up to 8·2⁴ passes
_OUTLIER = 1.5  # a pass slower than this many times the cost expected of it counts as this many times it
_MEASURED_BEFORE_CLIPPING = 4  # passes of its own a process records before it limits outliers
_RESTORED_WEIGHT = 0.1  # a cost saved by an earlier process serves until this process measures it (its first sample weighs 0.9)
_FAINTEST_WEIGHT = 1e-9  # (a restored batch size's weight never reaches 0: the fit divides by their sum)
_ROBUST_FROM_SIZES = 4  # batch sizes measured before V(n)'s slope is a median of slopes rather than least squares
# A prompt token read in a batch, until measured: this share of a draft step (0.7 measured on a 2-core
# Xeon, about 0.25 on a 2-core EPYC; erring low keeps reading, as every prompt was read before).
_PRIOR_READ_SHARE = 0.3
# The tokens still to come that `worth_reading` expects early in an answer (at most the budget):
# about a paragraph, what a chat's or a one-shot run's answer is as a rule.
EXPECTED_ANSWER_TOKENS = 256
_CHEAP_READ_SHARE = 0.1  # a prompt reading costing at most this share of target-only decoding of the answer is always taken
_STEP_COSTS = ("first_step_cost", "draft_cost", "read_cost", "catch_up_cost")  # a draft model's costs, in seconds
# A restored cost is where a process starts, not a verdict: until this process measures it, it counts as at most
# this share of a one-token target pass (a draft step on the demo pair costs 0.25-0.3 of one, a batched prompt
# token 0.1). Saved while the machine was busy (a profiler, another heavy process), costs made drafting look
# worthless, and a draft model that then neither read its prompt nor drafted never measured them again.
_RESTORED_COST_CAPS = {"first_step_cost": 0.5, "draft_cost": 0.5, "catch_up_cost": 0.5, "read_cost": 0.25}
_ADDED_LATER = ("read_cost", "catch_up_cost")  # (older saves lack them)
_CONFIDENCE_BINS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)  # upper edges; the last bin is (0.99, 1]


class FixedLength:
    """Always draft up to `k` tokens."""

    uses_confidence = False  # keep_going ignores the drafter's certainty: the drafter need not compute it

    def __init__(self, k: int) -> None:
        self.k = k

    def plan(self, room: int) -> int:
        return min(self.k, room)

    def keep_going(self, n_drafted: int, confidence: float) -> bool:
        return True

    def most_to_draft(self, planned: int, room: int) -> int:
        return planned

    def record_draft_step(self, seconds: float, first: bool = False) -> None:
        pass

    def record_catch_up(self, n_tokens: int, seconds: float) -> None:
        pass

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float | None) -> None:
        pass


def _bin(confidence: float) -> int:
    return next((i for i, edge in enumerate(_CONFIDENCE_BINS) if confidence <= edge), len(_CONFIDENCE_BINS))


class VerifyCosts:
    """The target's measured cost of a pass of n tokens: V(1) apart, V(n) = a + b·n fitted to the batches."""

    def __init__(self) -> None:
        self.by_size: dict[int, list[float]] = {}  # tokens in the batch -> [running mean seconds, decayed count]
        self._line: tuple[float, float] | None = None  # V(n)'s fitted (a, b); None: to be fitted again
        self.own: dict[int, int] = {}  # batch size -> passes of it this process recorded (restored costs are not)
        # The smallest restored batch size, and its restored cost: the other restored sizes follow its drift.
        self.reference: int | None = None
        self._unit = 0.0

    def drift(self) -> float:
        """How much slower (>1) or faster this process's passes of the reference size run than the restored ones."""
        if self.reference is None or not self.own.get(self.reference):
            return 1.0
        return self.by_size[self.reference][0] / self._unit

    def mean(self, n_tokens: int) -> float | None:
        """The mean cost of passes of `n_tokens` (None: none measured or restored); a restored size not measured
        here follows the drift."""
        if n_tokens not in self.by_size:
            return None
        mean = self.by_size[n_tokens][0]
        return mean if self.own.get(n_tokens) or n_tokens == self.reference else mean * self.drift()

    def record(self, n_tokens: int, seconds: float) -> None:
        """One pass over `n_tokens` took `seconds`; above _OUTLIER times what this process's measurements
        expect of it, it counts as that."""
        if self._expects_from_own_measurements(n_tokens):
            expected = self.cost(n_tokens)
            if self.own.get(n_tokens):  # (the line may miss a size it measured)
                expected = max(expected, self.by_size[n_tokens][0])
            seconds = min(seconds, _OUTLIER * expected)
        if n_tokens in self.by_size and n_tokens != self.reference:
            self.by_size[n_tokens][0] = self.mean(n_tokens)  # a restored cost in this process's terms, averaged in
        size = self.by_size.setdefault(n_tokens, [seconds, 0.0])
        self.own[n_tokens] = self.own.get(n_tokens, 0) + 1
        self._line = None
        size[0], size[1] = _running_mean(size[0], size[1], seconds)
        for other in self.by_size.values():
            other[1] *= _DECAY

    def _expects_from_own_measurements(self, n_tokens: int) -> bool:
        """Whether what `cost(n_tokens)` says rests on passes this process measured (a restored cost is
        replaced by the first pass of its size: see `_running_mean`), after _MEASURED_BEFORE_CLIPPING in all."""
        if sum(self.own.values()) < _MEASURED_BEFORE_CLIPPING:
            return False
        if n_tokens == 1:
            return bool(self.own.get(1))
        return bool(self.own.get(n_tokens)) or sum(1 for n in self.own if n >= 2) >= 2

    def cost(self, n_tokens: int) -> float:
        """Seconds for a target pass over `n_tokens` tokens: the measured mean of one-token passes,
        else a + b·n fitted to the running mean cost of each batch size."""
        if n_tokens == 1 and 1 in self.by_size:
            return self.by_size[1][0]
        intercept, slope = self.line()
        return intercept + slope * n_tokens

    def line(self) -> tuple[float, float]:
        """(a, b) of V(n) = a + b·n (computed once per change of the measurements)."""
        if self._line is None:
            self._line = self._fit_line()
        return self._line

    def _fit_line(self) -> tuple[float, float]:
        points = [(n, self.mean(n), weight) for n, (_, weight) in sorted(self.by_size.items())]
        batches = [point for point in points if point[0] >= 2]
        if len(batches) >= 2:
            points = batches  # a lone token's kernels are not on the batches' line (see `cost`)
        if not points:
            return 1.0, _PRIOR_SLOPE  # arbitrary unit: only ratios matter before any measurement
        total = sum(w for _, _, w in points)
        mean_n = sum(n * w for n, _, w in points) / total
        mean_t = sum(t * w for _, t, w in points) / total
        if len(points) >= _ROBUST_FROM_SIZES:
            # The weighted median of the slopes between sizes (Theil-Sen; a pair weighs its sizes' weights
            # and how far apart they are): one pass slowed by a busy moment, at a size seldom measured,
            # would pull a least-squares slope far (a long draft's size has the most leverage), and every
            # draft would then look dearer the longer it is.
            slope = _weighted_median([((t_j - t_i) / (n_j - n_i), w_i * w_j * (n_j - n_i))
                                      for i, (n_i, t_i, w_i) in enumerate(points) for n_j, t_j, w_j in points[i + 1:]])
            intercept = _weighted_median([(t - slope * n, w) for n, t, w in points])
        else:  # (with the plan's size and its neighbours alone, a median would jump between two neighbours' slopes)
            spread = sum(w * (n - mean_n) ** 2 for n, _, w in points)
            slope = sum(w * (n - mean_n) * (t - mean_t) for n, t, w in points) / spread if spread > 0 else 0.0
            intercept = mean_t - slope * mean_n
        if slope > 0 and intercept > 0:
            return intercept, slope
        a = mean_t / (1 + _PRIOR_SLOPE * mean_n)
        return a, a * _PRIOR_SLOPE

    def as_dict(self) -> dict[str, list[float]]:
        return {str(n): [self.mean(n), weight] for n, (_, weight) in self.by_size.items()}

    def restore(self, state: dict[str, Any], largest: int) -> None:
        """Start from `as_dict()`'s output, weighing little; ValueError (nothing changed) when it is not one.

        The entries keep their weights relative to one another, scaled so that the heaviest weighs
        _RESTORED_WEIGHT: a size measured once, long ago (while the machine was busy, say), stays a
        faint point beside the sizes measured pass after pass, rather than pulling the fitted slope
        as hard as they do (which made every draft look dearer the longer it was, and kept drafts
        short: the long sizes were then never measured again).
        """
        by_size = {}
        for n, (mean, weight) in state.items():
            if not 1 <= int(n) <= largest:
                raise ValueError(f"batch size {n} out of range")
            by_size[int(n)] = [_seconds(mean), _count(weight)]
        heaviest = max((weight for _, weight in by_size.values()), default=0.0)
        scale = _RESTORED_WEIGHT / heaviest if heaviest > _RESTORED_WEIGHT else 1.0
        for size in by_size.values():
            size[1] = max(size[1] * scale, _FAINTEST_WEIGHT)
        self.by_size, self._line = by_size, None
        self.reference = min(by_size) if by_size else None
        self._unit = by_size[self.reference][0] if by_size else 0.0


def _step_cost(name: str, what: str) -> property:
    """An `AdaptiveLength` cost as an attribute: read through `_cost` (a restored one in this process's
    terms), set as measured."""
    return property(lambda self: self._cost(name), lambda self, seconds: self._set_cost(name, seconds),
                    doc=f"Seconds for {what}; None: not measured.")


class AdaptiveLength:
    """Chooses each pass's draft length from measured acceptance and costs (see the module docstring)."""

    uses_confidence = True

    def __init__(self, limit: int = ADAPTIVE_DRAFT_LIMIT, verify: VerifyCosts | None = None) -> None:
        """`verify`: the target's pass costs, shared with the session's other controllers (None: its own)."""
        self.limit = limit
        self.reached = [0.0] * limit  # decayed count of drafts that reached position i+1
        self.accepted = [0.0] * limit  # ... and were accepted there
        # Seconds, by name (see the properties below), how many measurements each stands for, and which of
        # them were restored and not measured since (those follow the verify costs' drift: see `_cost`).
        self._costs: dict[str, float | None] = dict.fromkeys(_STEP_COSTS)
        self._weights: dict[str, float] = dict.fromkeys(_STEP_COSTS, 0.0)
        self._restored: set[str] = set()
        self._verify_saved: VerifyCosts | None = None  # the target's costs saved beside the restored ones
        self.made_unread = 0  # tokens generated (this session) since a draft model left a long prompt unread
        self.verify = verify if verify is not None else VerifyCosts()
        self.bin_reached = [0.0] * (len(_CONFIDENCE_BINS) + 1)  # judged draft tokens by the drafter's certainty of them
        self.bin_accepted = [0.0] * (len(_CONFIDENCE_BINS) + 1)
        self.passes = 0
        self._rate = 0.0  # expected tokens per second of the current plan
        self._kept_so_far = 1.0  # estimated chance that every token of the draft in progress is kept
        self._confidences: list[float] = []  # the drafter's certainty of each token it drafted this pass
        self._exploring = False  # this pass drafts its planned length whatever keep_going would say
        self._probing = False  # ...and the plan was to draft nothing
        self._fruitless = 0  # probes in a row whose first draft token was rejected
        self._tries = 0  # exploring passes so far (they alternate longer and shorter)

    # -- estimates ------------------------------------------------------------------------

    first_step_cost = _step_cost("first_step_cost", "a pass's first draft token (its own catch-up included)")
    draft_cost = _step_cost("draft_cost", "each further draft token")
    read_cost = _step_cost("read_cost", "each prompt token a draft model reads in a batch")
    catch_up_cost = _step_cost("catch_up_cost", "each token a draft model evaluates to catch up with passes it sat out")

    def _cost(self, name: str) -> float | None:
        """A cost in this process's terms: a restored one scaled as the target's pass of the reference size
        costs now to what it cost beside it (the machine may be busier or idler now), and bounded until
        measured here (`_RESTORED_COST_CAPS`)."""
        seconds = self._costs[name]
        if seconds is None or name not in self._restored or self._verify_saved is None:
            return seconds
        reference = self._verify_saved.reference
        now = self.verify.mean(reference) if reference is not None else None
        # (the ratio first: where the pass costs what it did, the cost is exactly the saved one)
        scaled = seconds * (now / self._verify_saved.mean(reference)) if now is not None else seconds
        return min(scaled, _RESTORED_COST_CAPS[name] * self.verify_cost(1))

    def _set_cost(self, name: str, seconds: float | None) -> None:
        self._costs[name] = seconds
        self._restored.discard(name)

    def _measure(self, name: str, seconds: float) -> None:
        """Average one measurement into a cost (a restored one first taken in this process's terms)."""
        mean = self._cost(name)
        self._restored.discard(name)
        self._costs[name], self._weights[name] = _running_mean(mean, self._weights[name], seconds)

    def overall_acceptance(self) -> float:
        reached, accepted = sum(self.reached), sum(self.accepted)
        return (accepted + _PRIOR_WEIGHT * _PRIOR_ACCEPTANCE) / (reached + _PRIOR_WEIGHT)

    def acceptance(self, position: int) -> float:
        """Estimated probability that the draft token at `position` (1-based) is kept, given the earlier ones were."""
        return self._acceptance(position, self.overall_acceptance())

    def _acceptance(self, position: int, overall: float) -> float:
        i = position - 1
        return (self.accepted[i] + _PRIOR_WEIGHT * overall) / (self.reached[i] + _PRIOR_WEIGHT)

    def acceptance_at_confidence(self, confidence: float) -> float:
        """Measured acceptance of draft tokens drafted with about this certainty."""
        i = _bin(confidence)
        return (self.bin_accepted[i] + _PRIOR_WEIGHT * self.overall_acceptance()) / (self.bin_reached[i] + _PRIOR_WEIGHT)

    def expected_tokens(self, k: int) -> float:
        """E[tokens emitted by a pass that drafts k]: 1 + Σ_{i≤k} Π_{j≤i} α_j."""
        overall = self.overall_acceptance()
        total, keep = 1.0, 1.0
        for position in range(1, k + 1):
            keep *= self._acceptance(position, overall)
            total += keep
        return total

    def verify_cost(self, n_tokens: int) -> float:
        """Seconds for a target pass over `n_tokens` tokens (see `VerifyCosts.cost`)."""
        return self.verify.cost(n_tokens)

    @property
    def verify_by_size(self) -> dict[int, list[float]]:
        return self.verify.by_size

    def pass_cost(self, k: int) -> float:
        """Seconds for a pass that drafts k tokens and verifies k+1.

        A pass that drafts nothing still leaves its token to a draft model, to be
        evaluated when it next drafts, with whatever else it sat out: what such a
        token has cost (`catch_up_cost`: a step alone, much less in the batch that
        follows a run of passes without drafts), a draft step until measured (next
        to nothing for a lookup).
        """
        if k == 0:
            return self.verify_cost(1) + self._catch_up_step()
        return self._drafting_cost(k, *self._step_costs()) + self.verify_cost(k + 1)

    def _step_costs(self) -> tuple[float, float]:
        """(first, further): seconds for a pass's first draft token and for each one after it."""
        step, first = self._draft_step(), self.first_step_cost
        return (first if first is not None else step), step

    @staticmethod
    def _drafting_cost(k: int, first: float, step: float) -> float:
        """Seconds to draft k ≥ 1 tokens."""
        return first + (k - 1) * step

    def rate(self, k: int) -> float:
        return self.expected_tokens(k) / self.pass_cost(k)

    def saving_per_token(self) -> float:
        """Seconds drafting is expected to save per generated token: a target-only pass, less the best
        plan's cost per token it emits (0 where drafting is not expected to pay)."""
        k = self.best_length(self.limit)
        return max(0.0, self.verify_cost(1) - self.pass_cost(k) / self.expected_tokens(k))

    def reading_cost(self, n_tokens: int) -> float:
        """Seconds for a draft model to read `n_tokens` prompt tokens (a prior share of a draft step until measured)."""
        if self.read_cost is not None:
            return n_tokens * self.read_cost
        return n_tokens * _PRIOR_READ_SHARE * self._draft_step()

    def _catch_up_step(self) -> float:
        """Seconds for each token a draft model sat out, evaluated when it next drafts: measured, else a draft
        step (0 for a drafter without a model, which measures no step)."""
        if self.catch_up_cost is not None:
            return self.catch_up_cost
        return self.draft_cost or 0.0

    def _draft_step(self) -> float:
        """Seconds for a further draft token: measured, else _PRIOR_DRAFT_SHARE of a target pass."""
        return self.draft_cost if self.draft_cost is not None else _PRIOR_DRAFT_SHARE * self.verify_cost(1)

    def worth_reading(self, n_unread: int, n_generated: int, budget_left: int, later_turns: bool = False,
                      uncovered_share: float = 1.0) -> bool:
        """Whether a draft model that has `n_unread` tokens to read (the prompt and what was generated
        since) should read them now, after `n_generated` tokens were made without it (in this generation
        and, `later_turns`, earlier ones of a session whose next generations will use what it reads: a
        chat's, or `serve`'s), with room for `budget_left` more drafts in this generation, where lookups
        are expected to draft all but `uncovered_share` of the tokens to come (its drafts save time on those only).

        Reading pays once the tokens drafted after it save more than it costs. How many are to come is
        unknown: `EXPECTED_ANSWER_TOKENS` early in an answer, as many again as were made once more than
        that were (the ski-rental rule: a long prompt is read once the time drafting would have saved
        reaches what the reading costs, so a short answer never pays for a read it cannot earn back and
        a long one loses at most that much); never more than this generation's budget, unless later
        turns will draft too. A reading that costs at most a tenth of target-only decoding over those
        tokens is taken in any case, so that a controller whose estimates say drafting does not pay
        still measures it now and then.
        """
        horizon = min(max(n_generated, EXPECTED_ANSWER_TOKENS), budget_left)
        if later_turns:
            horizon = max(horizon, n_generated)
        cost = self.reading_cost(n_unread)
        if cost <= _CHEAP_READ_SHARE * horizon * self.verify_cost(1):
            return True  # cheap next to the answer: read, so that drafts keep being measured where they seemed not to pay
        return horizon * uncovered_share * self.saving_per_token() >= cost

    def best_length(self, room: int) -> int:
        """The k in 0..min(room, limit) with the highest rate (the shortest of equals): one sweep over k."""
        overall = self.overall_acceptance()
        first, step = self._step_costs()  # (read once: restored costs are scaled on every read)
        best_k, best_rate = 0, self.rate(0)
        expected, keep = 1.0, 1.0
        for k in range(1, min(room, self.limit) + 1):
            keep *= self._acceptance(k, overall)
            expected += keep
            rate = expected / (self._drafting_cost(k, first, step) + self.verify_cost(k + 1))
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k

    # -- the drafter's calls --------------------------------------------------------------

    def plan(self, room: int) -> int:
        """The draft length for this pass (at most `room`)."""
        k = self.best_length(room)
        self._rate = self.rate(k)
        self._kept_so_far = 1.0
        self._confidences = []
        self.passes += 1
        # Now and then, measure a neighbouring length in full: otherwise an estimate that
        # stopped drafting early (a cost measured while the machine was busy) is never corrected.
        # Where drafting has not paid, probes that keep losing their first token wait longer and
        # longer for the next (drafts that are never kept would otherwise cost a pass in 8 a few rows).
        if k > 0:
            self._fruitless = 0
        backoff = min(max(self._fruitless - _PATIENCE, 0), _MAX_BACKOFF)
        self._exploring = self.passes % (_EXPLORE_EVERY << backoff) == 0
        self._probing = self._exploring and k == 0
        if self._exploring:  # one longer and one shorter, in turn; at least 2 tokens up, which measures a further step's cost
            self._tries += 1
            k = max(k + 1, 2) if self._tries % 2 else max(k - 1, 1)
            k = min(k, room, self.limit)
        return k

    def most_to_draft(self, planned: int, room: int) -> int:
        """How far this pass may draft: past its plan while `keep_going` finds each further token worth what
        it costs (a run of tokens the drafter is sure of), up to `room` and the limit; a pass that explores
        a length drafts that length."""
        return planned if self._exploring else min(room, self.limit)

    def keep_going(self, n_drafted: int, confidence: float) -> bool:
        """Whether to draft token n_drafted+1, given the drafter's certainty of the token it just drafted.

        One more token adds P(all n_drafted kept)·α_{n+1} expected tokens and costs one
        draft step plus one more verify row; below the plan's rate it is a loss.
        """
        self._confidences.append(confidence)
        self._kept_so_far *= self.acceptance_at_confidence(confidence)
        if n_drafted >= self.limit:
            return False
        if self._exploring:
            return True
        gain = self._kept_so_far * self.acceptance(n_drafted + 1)
        marginal_cost = self.pass_cost(n_drafted + 1) - self.pass_cost(n_drafted)
        return gain >= self._rate * marginal_cost

    def record_draft_step(self, seconds: float, first: bool = False) -> None:
        """The measured cost of one draft token (`first`: a pass's first, which includes the draft's own catch-up)."""
        self._measure("first_step_cost" if first else "draft_cost", seconds)

    def record_catch_up(self, n_tokens: int, seconds: float) -> None:
        """The measured cost of a draft model's catching up, in one batch, on the `n_tokens` tokens of passes it
        sat out (the batch holds one more, which it would have evaluated anyway)."""
        if n_tokens > 0:
            self._measure("catch_up_cost", seconds / n_tokens)

    def record_read(self, n_tokens: int, seconds: float) -> None:
        """The measured cost of a draft model's reading `n_tokens` prompt tokens at once."""
        if n_tokens > 0:
            self._measure("read_cost", seconds / n_tokens)

    def observe(self, n_proposed: int, n_accepted: int, verify_seconds: float | None) -> None:
        """A pass's verdict and cost; a pass that drafted nothing (n_proposed 0) measures V(1) only, and one
        that evaluated forced tokens too (verify_seconds None) no cost at all."""
        if verify_seconds is not None:
            self.verify.record(n_proposed + 1, verify_seconds)
        if n_proposed == 0:
            return
        if self._probing:
            self._fruitless = self._fruitless + 1 if n_accepted == 0 else 0
            self._probing = False
        for counts in (self.reached, self.accepted, self.bin_reached, self.bin_accepted):
            counts[:] = [count * _DECAY for count in counts]
        for i in range(min(n_proposed, self.limit)):
            kept = i < n_accepted
            self.reached[i] += 1
            self.accepted[i] += kept
            if i < len(self._confidences):
                self.bin_reached[_bin(self._confidences[i])] += 1
                self.bin_accepted[_bin(self._confidences[i])] += kept
            if not kept:
                break  # positions after the first rejection were never judged


    # -- what it learned, as plain data ---------------------------------------------------

    def costs(self) -> dict[str, Any]:
        """The measured costs (seconds), to be restored by `restore_costs`."""
        return {
            "first_step_cost": self.first_step_cost,
            "draft_cost": self.draft_cost,
            "read_cost": self.read_cost,
            "catch_up_cost": self.catch_up_cost,
            "verify_by_size": self.verify.as_dict(),
        }

    def acceptance_counts(self) -> dict[str, Any]:
        """The decayed acceptance counts, to be restored by `restore_acceptance`."""
        return {"reached": self.reached, "accepted": self.accepted,
                "bin_reached": self.bin_reached, "bin_accepted": self.bin_accepted}

    def restore_costs(self, state: dict[str, Any]) -> None:
        """Start from costs saved by `costs()`; ValueError (nothing changed) when `state` is not such a dict.

        Verify costs shared with other controllers are taken only while none are measured or restored yet.
        The draft costs follow this process's passes of the smallest size saved beside them (see `_cost`).
        """
        costs = {name: _seconds_or_none(state.get(name) if name in _ADDED_LATER else state[name]) for name in _STEP_COSTS}
        saved_verify = VerifyCosts()
        saved_verify.restore(state["verify_by_size"], self.limit + 1)  # checked before anything changes
        if not self.verify.by_size:
            self.verify.restore(state["verify_by_size"], self.limit + 1)
        self._costs, self._verify_saved = costs, saved_verify
        self._restored = {name for name, seconds in costs.items() if seconds is not None}
        self._weights = dict.fromkeys(_STEP_COSTS, _RESTORED_WEIGHT)

    def restore_acceptance(self, state: dict[str, Any]) -> None:
        """Start from counts saved by `acceptance_counts()`; ValueError (nothing changed) when `state` is not such a dict."""
        sizes = {"reached": self.limit, "accepted": self.limit,
                 "bin_reached": len(self.bin_reached), "bin_accepted": len(self.bin_accepted)}
        restored = {}
        for name, size in sizes.items():
            values = [_count(value) for value in state[name]]
            if len(values) != size:
                raise ValueError(f"{name} has {len(values)} entries, not {size}")
            restored[name] = values
        if any(a > r + 1e-9 for a, r in zip(restored["accepted"], restored["reached"])):
            raise ValueError("more accepted than reached")
        for name, values in restored.items():
            setattr(self, name, values)


def _seconds(value: Any) -> float:
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"not a duration: {value!r}")
    return seconds


def _seconds_or_none(value: Any) -> float | None:
    return None if value is None else _seconds(value)


def _count(value: Any) -> float:
    count = float(value)
    if not (math.isfinite(count) and count >= 0):
        raise ValueError(f"not a count: {value!r}")
    return count


_UNFIT = (ValueError, TypeError, KeyError, AttributeError, OverflowError)  # what a saved entry that does not fit raises
TEMPERATURE_BANDS = ("greedy", "low", "medium", "high")
# A band with no acceptance of its own starts from the nearest band's counts, at this weight: a pair that
# agrees at one temperature mostly agrees at the next (the demo pair's draft model, replayed by
# scripts/replay_lengths.py: 5-7% faster than starting from the priors with the costs known).
_BORROWED_WEIGHT = 0.25


def temperature_band(temperature: float) -> str:
    """Temperatures whose acceptance is alike: greedy, low (≤ 0.5), medium (≤ 1) and high."""
    if temperature == 0:
        return "greedy"
    return "low" if temperature <= 0.5 else "medium" if temperature <= 1.0 else "high"


class LearnedLengths:
    """Adaptive controllers kept across generations, and what earlier processes learned.

    One controller per drafting side ("model", "ngram<n>" by match length, "resume", "memory"), verification mode,
    temperature band and output held to a grammar or not, all sharing the target's verify costs (started from
    the saved side that measured most). A new controller starts
    from the saved costs of its side (`saved_costs[side]`) and the saved acceptance
    of its key (`saved_acceptance["side/verify/band"]`, with "/constrained" added
    under a grammar); a saved entry that does not fit is ignored. A key with no acceptance of its own starts
    from the nearest temperature band's of the same side, verification and constraint (`_BORROWED_WEIGHT`),
    else from the priors.
    """

    def __init__(self, saved_costs: dict[str, Any] | None = None, saved_acceptance: dict[str, Any] | None = None) -> None:
        self.saved_costs = dict(saved_costs or {})
        self.saved_acceptance = dict(saved_acceptance or {})
        self.controllers: dict[tuple[str, ...], AdaptiveLength] = {}
        self.verify = VerifyCosts()  # one target: every controller's passes measure the same costs
        self.dropped: list[str] = []  # saved entries that did not fit (for --verbose)
        self._restore_verify()

    def _restore_verify(self) -> None:
        """Start the shared verify costs from the saved side that measured most (a side's entry that does not
        fit is left for `_restored` to drop)."""
        def measured(side: str) -> float:
            try:
                return sum(float(weight) for _, weight in self.saved_costs[side]["verify_by_size"].values())
            except _UNFIT:
                return -1.0

        for side in sorted(self.saved_costs, key=measured, reverse=True):
            try:
                self.verify.restore(self.saved_costs[side]["verify_by_size"], ADAPTIVE_DRAFT_LIMIT + 1)
                return
            except _UNFIT:
                continue

    def controller(self, side: str, verify: str, temperature: float, constrained: bool = False) -> AdaptiveLength:
        key = (side, verify, temperature_band(temperature), *(("constrained",) if constrained else ()))
        if key not in self.controllers:
            self.controllers[key] = self._restored(side, "/".join(key))
        return self.controllers[key]

    def _restored(self, side: str, acceptance_key: str) -> AdaptiveLength:
        controller = AdaptiveLength(verify=self.verify)
        for name, saved, restore in ((side, self.saved_costs, controller.restore_costs),
                                     (acceptance_key, self.saved_acceptance, controller.restore_acceptance)):
            if name in saved:
                try:
                    restore(saved[name])
                except _UNFIT as exc:
                    self.dropped.append(f"{name}: {exc}")
                    del saved[name]  # neither tried again nor saved back
        if acceptance_key not in self.saved_acceptance:
            self._borrow_acceptance(controller, acceptance_key)
        return controller

    def _borrow_acceptance(self, controller: AdaptiveLength, acceptance_key: str) -> None:
        """Start `controller` from the acceptance saved for the nearest other temperature band of the same side,
        verification and constraint, its counts weighing `_BORROWED_WEIGHT` as much (its priors where none fits).
        Under rejection verification only the counts by position are lent between a draft model's greedy and
        sampled bands: its certainties differ there (see `Confidence.certainty`)."""
        side, verify, band, *constrained = acceptance_key.split("/")
        here = TEMPERATURE_BANDS.index(band)
        for other in sorted(TEMPERATURE_BANDS, key=lambda name: abs(TEMPERATURE_BANDS.index(name) - here)):
            state = self.saved_acceptance.get("/".join((side, verify, other, *constrained)))
            if other == band or state is None:
                continue
            # (a lookup's or the memory's certainty is the share of earlier occurrences agreeing at any temperature)
            alike = side != "model" or verify == "coupled" or (other == "greedy") == (band == "greedy")
            lent = _BORROWED_WEIGHT if alike else 0.0
            try:
                controller.restore_acceptance({name: [float(count) * (lent if name.startswith("bin_") else _BORROWED_WEIGHT)
                                                      for count in counts]
                                               for name, counts in state.items()})
                return
            except _UNFIT:
                continue  # (dropped, with a line for --verbose, when its own band is asked for)

    def costs(self) -> dict[str, Any]:
        """Costs by side: the saved ones, updated by this process's controllers (for a side with several, the last made)."""
        learned = dict(self.saved_costs)
        for (side, *_), controller in self.controllers.items():
            if controller.passes:
                learned[side] = controller.costs()
        return learned

    def acceptance(self) -> dict[str, Any]:
        """Acceptance counts by "side/verify/band": the saved ones, updated by this process's controllers."""
        learned = dict(self.saved_acceptance)
        for key, controller in self.controllers.items():
            if controller.passes:
                learned["/".join(key)] = controller.acceptance_counts()
        return learned


def _weighted_median(values: list[tuple[float, float]]) -> float:
    """The value at which half of the total weight lies on each side ((value, weight) pairs, not all weightless);
    where half of it lies exactly up to one value, the mean of that value and the next."""
    ordered = sorted(values)
    half, below = sum(weight for _, weight in ordered) / 2, 0.0
    for i, (value, weight) in enumerate(ordered):
        below += weight
        if below >= half:
            if math.isclose(below, half, rel_tol=1e-12) and i + 1 < len(ordered):
                return (value + ordered[i + 1][0]) / 2
            return value
    return ordered[-1][0]


def _running_mean(mean: float | None, weight: float, sample: float) -> tuple[float, float]:
    """A plain mean over the first ten samples, then a running one (each new sample weighing 0.1)."""
    weight += 1
    if mean is None:
        return sample, weight
    return mean + (sample - mean) * max(0.1, 1 / weight), weight


DraftLength = FixedLength | AdaptiveLength
