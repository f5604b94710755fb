"""Drafting from a large body of earlier text: the longest match of a context's tail, and what usually followed it.

The text is one int32 array of documents, each followed by `SEPARATOR`. A
suffix array of the text *reversed* lets the context's tail, read backwards
(`context[-1]`, `context[-2]`, ...), narrow one interval of that array token
by token: the interval holds every place where the tail read so far occurs.
Two binary searches narrow it on each new token (on Python integers read
through memoryviews, so a frequent token never gathers a large column), and
wherever the interval's first and last suffixes both agree with the context
for several more tokens, every suffix between them does too, so the match
jumps ahead without searching. The arrays may be read-only memory maps: an
index opens without reading them.

A match's occurrences propose the frequency-weighted continuation of
SuffixDecoding: walking forward from them, each step takes the token most of
the occurrences still on the path continue with, and a running share (the
product of each step's count over the occurrences on the path before it)
stops the walk once it would fall below `min_share`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pydivsufsort

SEPARATOR = -1  # ends every document; contexts never hold it and no continuation crosses it
MAX_OCCURRENCES = 64  # a match keeps this many occurrences, the latest (later text is more recent)
# Occurrences a lookup examines at most, over all the match lengths it tries (the first in suffix order of each):
# a context of one token repeated, or a tail that thousands of documents end with (each occurrence followed by
# a separator, at every length), would otherwise have it read hundreds of thousands (1.4–4 ms at 3M tokens).
SCAN_LIMIT = 1 << 12


@dataclass(frozen=True)
class Match:
    """Where a context's last `length` tokens occur, each time followed by a token.

    `positions`: forward positions just after each occurrence (where its
    continuation starts), ascending, the latest `MAX_OCCURRENCES`; `count`: how
    many such occurrences there are (of at most `SCAN_LIMIT` examined per lookup).
    """

    length: int
    positions: np.ndarray
    count: int


@dataclass(frozen=True)
class Proposal:
    """A continuation to draft: its tokens, the match it came from, and the running share after each token."""

    tokens: list[int]
    match_length: int
    occurrences: int  # occurrences the continuation was weighed over (at most MAX_OCCURRENCES)
    shares: list[float]


def join_documents(documents: Sequence[Sequence[int]]) -> np.ndarray:
    """The documents as one int32 token array, each followed by `SEPARATOR`."""
    parts: list[np.ndarray] = []
    for document in documents:
        parts.append(np.asarray(document, dtype=np.int32).reshape(-1))
        parts.append(np.array([SEPARATOR], dtype=np.int32))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def reversed_suffix_array(tokens: np.ndarray) -> np.ndarray:
    """The suffix array (int32) of `tokens` reversed: entry s is the text read backwards from position len-1-s."""
    if len(tokens) == 0:
        return np.zeros(0, dtype=np.int32)
    ranks = _dense_ranks(np.asarray(tokens))
    return np.ascontiguousarray(pydivsufsort.divsufsort(np.ascontiguousarray(ranks[::-1])), dtype=np.int32)


def suffix_array_fault(tokens: np.ndarray, suffix_array: np.ndarray, samples: int = 64, depth: int = 64) -> str | None:
    """What is wrong with `suffix_array` as `reversed_suffix_array(tokens)`, judged from `samples` pairs of
    neighbouring entries spread over it (each in range, distinct, and in order over `depth` tokens), or None.

    A cheap check for opening a memory-mapped index (a few thousand reads): an
    array overwritten or truncated to other contents fails it; a few wrong
    entries may pass (their lookups then propose wrong drafts, or raise IndexError).
    """
    size = len(tokens)
    if size < 2:
        return None
    text = memoryview(np.ascontiguousarray(tokens))
    for i in np.unique(np.linspace(0, size - 2, num=min(samples, size - 1)).astype(np.int64)):
        a, b = int(suffix_array[i]), int(suffix_array[i + 1])
        if not (0 <= a < size and 0 <= b < size) or a == b:
            return f"entry {i} or {i + 1} is out of range or repeated"
        # Entry s reads the text backwards from position size-1-s; ranks order like the token ids.
        for offset in range(depth):
            if a + offset >= size or b + offset >= size:
                if b + offset >= size and a + offset < size:
                    return f"entries {i} and {i + 1} are out of order"
                break
            x, y = text[size - 1 - a - offset], text[size - 1 - b - offset]
            if x != y:
                if x > y:
                    return f"entries {i} and {i + 1} are out of order"
                break
    return None


def _dense_ranks(tokens: np.ndarray) -> np.ndarray:
    """Each token's rank among the distinct tokens (order kept), as narrow as they fit.

    The suffix sort works on bytes: two bytes a token instead of four halve its work and memory.
    """
    shifted = tokens.astype(np.int64) - int(tokens.min())
    if int(shifted.max()) < 1 << 24:
        rank_of = np.cumsum(np.bincount(shifted) > 0) - 1
        ranks = rank_of[shifted]
    else:  # ids too far apart for a table
        ranks = np.unique(tokens, return_inverse=True)[1].reshape(-1)
    return ranks.astype(np.uint16 if int(ranks.max()) < 1 << 16 else np.uint32)


class SuffixIndex:
    """Longest matches and their continuations in one token array (documents joined by `join_documents`)."""

    def __init__(self, tokens: np.ndarray, suffix_array: np.ndarray) -> None:
        """`suffix_array` must be `reversed_suffix_array(tokens)`; both may be read-only memory maps.

        Raises ValueError when the two cannot belong together (shapes, types, a
        text that does not end with `SEPARATOR`); a suffix array that is wrong
        in content gives wrong proposals (harmless: drafts are verified) or an
        IndexError from a lookup.
        """
        if tokens.ndim != 1 or tokens.dtype != np.int32:
            raise ValueError("tokens: expected a one-dimensional int32 array")
        if suffix_array.shape != tokens.shape or suffix_array.dtype not in (np.int32, np.int64):
            raise ValueError(f"suffix array: expected {len(tokens)} int32 or int64 entries")
        if len(tokens) and int(tokens[-1]) != SEPARATOR:
            raise ValueError("tokens: the last document does not end with a separator")
        self._tokens = np.ascontiguousarray(tokens)
        self._suffixes = np.ascontiguousarray(suffix_array)
        self._size = len(tokens)
        self._token_view = memoryview(self._tokens) if self._size else memoryview(b"")
        self._suffix_view = memoryview(self._suffixes) if self._size else memoryview(b"")

    @classmethod
    def build(cls, tokens: np.ndarray) -> SuffixIndex:
        """An index over `tokens` (SEPARATOR-joined documents), its suffix array built in memory."""
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        return cls(tokens, reversed_suffix_array(tokens))

    @classmethod
    def of_documents(cls, documents: Sequence[Sequence[int]]) -> SuffixIndex:
        return cls.build(join_documents(documents))

    def __len__(self) -> int:
        """Entries in the token array, separators included."""
        return self._size

    @property
    def tokens(self) -> np.ndarray:
        return self._tokens

    def lookup(
        self, context: Sequence[int], max_tokens: int, min_length: int = 4, max_length: int = 64,
        min_share: float = 0.3,
    ) -> Proposal | None:
        """The continuation of the longest match of `context`'s tail; None without a match or a token to propose."""
        match = self.longest_match(context, min_length, max_length)
        if match is None:
            return None
        proposal = self.continuation(match, max_tokens, min_share)
        return proposal if proposal.tokens else None

    def longest_match(self, context: Sequence[int], min_length: int, max_length: int) -> Match | None:
        """The longest n in [min_length, max_length] such that context[-n:] occurs followed by a token (no separator).

        Only the tail after the context's last negative token (a separator) is matched.
        """
        if min_length < 1 or max_length < min_length:
            raise ValueError(f"match lengths: need 1 <= min_length <= max_length, got {min_length} and {max_length}")
        backwards = _backwards_tail(context, max_length)
        if len(backwards) < min_length or self._size == 0:
            return None
        budget = SCAN_LIMIT
        for depth, lo, hi in reversed(self._intervals(backwards)):
            if depth < min_length or budget <= 0:
                break
            examined = min(hi - lo, budget)
            budget -= examined
            after = self._followed_positions(lo, lo + examined)
            if after.size:
                return Match(depth, after[-MAX_OCCURRENCES:], int(after.size))
        return None

    def continuation(self, match: Match, max_tokens: int, min_share: float) -> Proposal:
        """The frequency-weighted continuation of `match`'s occurrences (see `weighted_continuation`)."""
        tokens, shares = weighted_continuation(self.following(match.positions, max_tokens), min_share)
        return Proposal(tokens, match.length, len(match.positions), shares)

    def following(self, positions: np.ndarray, width: int) -> np.ndarray:
        """The `width` tokens from each position, one row each (separators past the text's end)."""
        if width <= 0 or len(positions) == 0:
            return np.zeros((len(positions), max(width, 0)), dtype=np.int32)
        spots = np.asarray(positions, dtype=np.int64)[:, None] + np.arange(width, dtype=np.int64)
        np.minimum(spots, self._size - 1, out=spots)  # the last entry is a separator
        return self._tokens[spots]

    def _intervals(self, backwards: np.ndarray) -> list[tuple[int, int, int]]:
        """Each (depth, lo, hi) where the interval narrowed: suffix array entries lo..hi-1 start with backwards[:depth].

        Deepest last; the list is empty when backwards[0] does not occur at all.
        """
        suffixes, text, size = self._suffix_view, self._token_view, self._size
        length = len(backwards)
        levels: list[tuple[int, int, int]] = []
        lo, hi, depth = 0, size, 0
        while depth < length:
            # Narrow on the symbol at `depth`: entry s reads text[size - 1 - depth - s] there (text[-1], the
            # final separator, for a suffix that has just run out: all matched `depth` symbols, so none runs further).
            base = size - 1 - depth
            target = int(backwards[depth])
            new_lo = bisect.bisect_left(suffixes, target, lo, hi, key=lambda s: text[base - s])
            new_hi = bisect.bisect_right(suffixes, target, new_lo, hi, key=lambda s: text[base - s])
            if new_lo == new_hi:
                break
            lo, hi, depth = new_lo, new_hi, depth + 1
            # Jump ahead as far as the first and the last suffix of the interval both agree (so all between do).
            if depth < length:
                agreed = self._agreement(suffixes[lo], depth, backwards)
                if agreed and hi - lo > 1:
                    agreed = self._agreement(suffixes[hi - 1], depth, backwards[: depth + agreed])
                depth += agreed
            levels.append((depth, lo, hi))
        return levels

    def _agreement(self, suffix: int, depth: int, backwards: np.ndarray) -> int:
        """How many symbols from `depth` on the suffix shares with `backwards` (which holds no separator)."""
        end = self._size - 1 - suffix - depth  # forward position of the suffix's symbol at `depth`
        want = len(backwards) - depth
        if end < 0 or want <= 0:
            return 0
        start = max(end - want + 1, 0)  # a suffix running out of text stops agreeing there
        read = self._tokens[start : end + 1][::-1]
        differ = np.flatnonzero(read != backwards[depth : depth + len(read)])
        return int(differ[0]) if differ.size else len(read)

    def _followed_positions(self, lo: int, hi: int) -> np.ndarray:
        """Forward positions just after the occurrences in entries lo..hi-1 followed by a token (no separator), ascending."""
        starts = np.asarray(self._suffixes[lo:hi], dtype=np.int64)
        after = self._size - starts
        after = after[(after > 0) & (after < self._size)]  # always so for a sound suffix array
        after = after[self._tokens[after] != SEPARATOR]
        after.sort()
        return after


class MultiIndex:
    """Several indexes asked as one: the big persistent one and a small one over recent documents, oldest first.

    The longest match wins; where several indexes match equally long, their
    occurrences are weighed together, the later index's counted as the more
    recent (ties between continuations go to the latest occurrence). An index
    whose arrays prove damaged (an IndexError) is left out from then on, with a
    line in `problems`.
    """

    def __init__(self, parts: Sequence[SuffixIndex], names: Sequence[str] | None = None) -> None:
        names = names or [f"index {number}" for number in range(len(parts))]
        self.parts = [part for part in parts if len(part)]
        self._names = [name for name, part in zip(names, parts) if len(part)]
        self.problems: list[str] = []

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def lookup(
        self, context: Sequence[int], max_tokens: int, min_length: int = 4, max_length: int = 64,
        min_share: float = 0.3,
    ) -> Proposal | None:
        """As `SuffixIndex.lookup`, over every part."""
        found: list[tuple[SuffixIndex, Match]] = []
        for part, name in list(zip(self.parts, self._names)):
            try:
                match = part.longest_match(context, min_length, max_length)
            except IndexError:
                self._drop(part, name)
                continue
            if match is not None:
                found.append((part, match))
        if not found:
            return None
        length = max(match.length for _, match in found)
        longest = [part.following(match.positions, max_tokens) for part, match in found if match.length == length]
        rows = np.concatenate(longest)[-MAX_OCCURRENCES:]
        tokens, shares = weighted_continuation(rows, min_share)
        return Proposal(tokens, length, len(rows), shares) if tokens else None

    def _drop(self, part: SuffixIndex, name: str) -> None:
        index = self.parts.index(part)
        del self.parts[index], self._names[index]
        self.problems.append(f"{name}: damaged (a lookup read past its text); left out")


def weighted_continuation(rows: np.ndarray, min_share: float, unknown: int | None = None) -> tuple[list[int], list[float]]:
    """Tokens (and the running share after each) that the rows of following tokens, oldest row first, agree on most.

    At each step, among the rows still on the path, the token most of them
    continue with (ties: the latest row's), never a separator; the share is
    multiplied by its count over the rows on the path (rows that end there
    included), and the walk stops before the share would fall below
    `min_share`, when no row goes on, or after the rows' width. A row that
    reaches `unknown` (the sequence's own end: what follows is not written
    yet) leaves the path there without counting against the others.
    """
    on_path = np.arange(len(rows))
    tokens: list[int] = []
    shares: list[float] = []
    share, depth, width = 1.0, 0, rows.shape[1] if rows.ndim == 2 else 0
    while depth < width and on_path.size:
        # Every row on the path agrees for a stretch: take it whole, the share unchanged.
        block = rows[on_path, depth:]
        lead = block[0]
        agreed = (block == lead).all(axis=0) & (lead != SEPARATOR) & (lead != unknown)
        run = int(np.argmin(agreed)) if not agreed.all() else len(agreed)
        tokens.extend(int(token) for token in lead[:run])
        shares.extend([share] * run)
        depth += run
        if depth >= width:
            break
        if unknown is not None:
            on_path = on_path[rows[on_path, depth] != unknown]
            if not on_path.size:
                break
        column = rows[on_path, depth]
        token, count = _most_frequent(column)
        if token is None or share * count / len(on_path) < min_share:
            break
        share *= count / len(on_path)
        tokens.append(token)
        shares.append(share)
        on_path = on_path[column == token]
        depth += 1
    return tokens, shares


def _most_frequent(column: np.ndarray) -> tuple[int | None, int]:
    """The most frequent token of `column` but a separator (ties: the one latest in the column), and its count."""
    values, counts = np.unique(column[column != SEPARATOR], return_counts=True)
    if not values.size:
        return None, 0
    best = int(counts.max())
    tied = {int(value) for value in values[counts == best]}
    for value in column[::-1]:
        if int(value) in tied:
            return int(value), best
    raise AssertionError("unreachable: a tied value is in the column")


def _backwards_tail(context: Sequence[int], max_length: int) -> np.ndarray:
    """The context's last `max_length` tokens, last first, cut at the first separator (or other negative id) met."""
    tail = np.asarray(context[-max_length:] if len(context) else [], dtype=np.int32).reshape(-1)
    backwards = tail[::-1]
    negative = np.flatnonzero(backwards < 0)
    return np.ascontiguousarray(backwards[: negative[0]] if negative.size else backwards)
