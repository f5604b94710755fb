"""The suffix index against brute force: longest matches, their occurrences, the weighted continuation."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localspec.engine.suffix_index import (
    MAX_OCCURRENCES,
    SCAN_LIMIT,
    SEPARATOR,
    MultiIndex,
    Proposal,
    SuffixIndex,
    join_documents,
    reversed_suffix_array,
    suffix_array_fault,
    weighted_continuation,
)

# Brute-force references -------------------------------------------------------------------------------------------


def reference_match(
    text: list[int], context: list[int], min_length: int, max_length: int
) -> tuple[int, list[int]] | None:
    """(n, every position just after an occurrence of context[-n:] followed by a token), n longest, by scanning."""
    for n in range(min(max_length, len(context)), min_length - 1, -1):
        pattern = context[len(context) - n :]
        after = [i + n for i in range(len(text) - n) if text[i : i + n] == pattern and text[i + n] != SEPARATOR]
        if after:
            return n, after
    return None


def reference_continuation(rows: list[list[int]], min_share: float) -> tuple[list[int], list[float]]:
    """The continuation rule step by step: majority of the rows on the path (ties: latest row), running share."""
    on_path = list(range(len(rows)))
    tokens: list[int] = []
    shares: list[float] = []
    share = 1.0
    for depth in range(len(rows[0]) if rows else 0):
        column = [rows[row][depth] for row in on_path]
        counts = Counter(token for token in column if token != SEPARATOR)
        if not counts:
            break
        best = max(counts.values())
        token = next(token for token in reversed(column) if counts.get(token) == best)
        if share * best / len(on_path) < min_share:
            break
        share *= best / len(on_path)
        tokens.append(token)
        shares.append(share)
        on_path = [row for row in on_path if rows[row][depth] == token]
    return tokens, shares


def following_rows(text: list[int], positions: list[int], width: int) -> list[list[int]]:
    return [[text[p + j] if p + j < len(text) else SEPARATOR for j in range(width)] for p in positions]


def reference_lookup(
    texts: list[list[int]], context: list[int], max_tokens: int, min_length: int, max_length: int, min_share: float
) -> tuple[int, list[int], list[float], int] | None:
    """(match length, tokens, shares, occurrences weighed) over several texts, oldest first, as MultiIndex promises."""
    matches = [reference_match(text, context, min_length, max_length) for text in texts]
    found = [(text, match) for text, match in zip(texts, matches) if match is not None]
    if not found:
        return None
    length = max(match[0] for _, match in found)
    rows: list[list[int]] = []
    for text, (n, after) in found:
        if n == length:
            rows += following_rows(text, after[-MAX_OCCURRENCES:], max_tokens)
    rows = rows[-MAX_OCCURRENCES:]
    tokens, shares = reference_continuation(rows, min_share)
    return (length, tokens, shares, len(rows)) if tokens else None


# Random small texts with repeats -----------------------------------------------------------------------------------

SMALL = st.integers(min_value=0, max_value=3)  # a small alphabet, so that everything repeats
documents_strategy = st.lists(st.lists(SMALL, max_size=25), max_size=6)


@st.composite
def text_and_context(draw: st.DrawFn) -> tuple[list[list[int]], list[int]]:
    """Documents and a context: random, or a piece of a document followed by a few random tokens."""
    documents = draw(documents_strategy)
    if documents and draw(st.booleans()):
        source = draw(st.sampled_from(documents))
        end = draw(st.integers(0, len(source)))
        start = draw(st.integers(0, end))
        context = source[start:end] + draw(st.lists(SMALL, max_size=2))
    else:
        context = draw(st.lists(SMALL, max_size=20))
    return documents, context


def text_of(documents: list[list[int]]) -> list[int]:
    return [int(token) for token in join_documents(documents)]


@pytest.mark.slow  # the lookup test below covers both paths in the fast suite
@settings(max_examples=100, deadline=None)
@given(text_and_context(), st.integers(1, 4), st.integers(0, 12))
def test_longest_match_and_its_occurrences_equal_brute_force(
    case: tuple[list[list[int]], list[int]], min_length: int, extra: int
) -> None:
    documents, context = case
    max_length = min_length + extra
    index = SuffixIndex.of_documents(documents)
    match = index.longest_match(context, min_length, max_length)
    expected = reference_match(text_of(documents), context, min_length, max_length)
    if expected is None:
        assert match is None
    else:
        assert match is not None
        assert (match.length, match.count) == (expected[0], len(expected[1]))
        assert match.positions.tolist() == expected[1][-MAX_OCCURRENCES:]


@settings(max_examples=100, deadline=None)
@given(text_and_context(), st.integers(1, 3), st.integers(1, 12), st.sampled_from([0.0, 0.3, 0.5, 0.9]))
@pytest.mark.slow
def test_lookup_equals_the_continuation_rule_by_brute_force(
    case: tuple[list[list[int]], list[int]], min_length: int, max_tokens: int, min_share: float
) -> None:
    documents, context = case
    proposal = SuffixIndex.of_documents(documents).lookup(context, max_tokens, min_length, 16, min_share)
    expected = reference_lookup([text_of(documents)], context, max_tokens, min_length, 16, min_share)
    assert_same_proposal(proposal, expected)
    if proposal is not None:
        assert all(a >= b >= min_share for a, b in zip(proposal.shares, proposal.shares[1:]))


def assert_same_proposal(proposal: Proposal | None, expected: tuple | None) -> None:
    """`proposal` is what the brute-force reference found: (match length, tokens, shares, occurrences), or None."""
    if expected is None:
        assert proposal is None
    else:
        assert proposal is not None
        assert (proposal.match_length, proposal.tokens, proposal.occurrences) == expected[:2] + expected[3:]
        assert proposal.shares == pytest.approx(expected[2])


@pytest.mark.slow  # the lookup test below covers both paths in the fast suite
@settings(max_examples=100, deadline=None)
@given(documents_strategy, documents_strategy, st.lists(SMALL, max_size=12), st.integers(1, 8))
def test_multi_index_keeps_the_longest_match_and_weighs_equal_ones_together(
    old: list[list[int]], recent: list[list[int]], context: list[int], max_tokens: int
) -> None:
    multi = MultiIndex([SuffixIndex.of_documents(old), SuffixIndex.of_documents(recent)])
    proposal = multi.lookup(context, max_tokens, 2, 10, 0.3)
    expected = reference_lookup([text_of(old), text_of(recent)], context, max_tokens, 2, 10, 0.3)
    assert_same_proposal(proposal, expected)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([SEPARATOR, 0, 1, 2, 70_000, 2**31 - 1]), max_size=30))
def test_the_suffix_array_sorts_the_reversed_text(tokens: list[int]) -> None:
    backwards = tokens[::-1]
    expected = sorted(range(len(tokens)), key=lambda start: backwards[start:])
    assert reversed_suffix_array(np.array(tokens, dtype=np.int32)).tolist() == expected


def test_occurrences_kept_are_the_latest_when_there_are_many() -> None:
    documents = [[7, 8, 9, position] for position in range(200)]
    match = SuffixIndex.of_documents(documents).longest_match([7, 8, 9], 3, 3)
    assert match is not None and match.count == 200
    assert match.positions.tolist() == [5 * i + 3 for i in range(200 - MAX_OCCURRENCES, 200)]


def test_a_lookup_examines_at_most_scan_limit_occurrences_over_every_match_length(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every document ends with a tail of the same 12 tokens: at every length each occurrence is followed by a
    # separator (was: up to 65,536 occurrences read at each length, 3-4 ms at 3M tokens)
    tail = list(range(100, 112))
    index = SuffixIndex.of_documents([[i % 50, *tail[-(4 + i % 9):]] for i in range(3 * SCAN_LIMIT)])
    examined = []
    read = SuffixIndex._followed_positions
    monkeypatch.setattr(SuffixIndex, "_followed_positions",
                        lambda self, lo, hi: examined.append(hi - lo) or read(self, lo, hi))
    assert index.longest_match(tail, 4, 12) is None
    assert len(examined) > 1 and sum(examined) == SCAN_LIMIT


def test_a_continuation_never_crosses_a_separator() -> None:
    index = SuffixIndex.of_documents([[1, 2, 3, 4], [5, 1, 2, 3]])
    proposal = index.lookup([1, 2, 3], 8, min_length=3)
    assert proposal is not None and proposal.tokens == [4]
    # An occurrence at a document's very end is no match: nothing follows it there.
    assert SuffixIndex.of_documents([[5, 1, 2, 3], [4]]).longest_match([1, 2, 3], 1, 8) is None


def test_a_context_longer_than_max_length_matches_its_tail_only() -> None:
    index = SuffixIndex.of_documents([[1, 2, 3, 4, 5, 6, 7], [9, 9, 4, 5, 6, 8]])
    match = index.longest_match([1, 2, 3, 4, 5, 6], 1, 3)
    assert match is not None and (match.length, match.positions.tolist()) == (3, [6, 13])
    long_match = index.longest_match([1, 2, 3, 4, 5, 6], 1, 64)
    assert long_match is not None and (long_match.length, long_match.positions.tolist()) == (6, [6])


def test_empty_and_one_token_inputs() -> None:
    empty = SuffixIndex.of_documents([])
    assert len(empty) == 0 and empty.lookup([1, 2, 3], 4, 1) is None
    assert SuffixIndex.of_documents([[]]).lookup([1], 4, 1) is None  # one empty document: just a separator
    one = SuffixIndex.of_documents([[5, 6]])
    assert one.lookup([], 4, 1) is None
    proposal = one.lookup([5], 4, 1)
    assert proposal is not None and (proposal.tokens, proposal.match_length) == ([6], 1)
    assert one.lookup([5], 4, 2) is None  # shorter than min_length
    assert one.lookup([5], 0, 1) is None  # nothing asked for
    assert MultiIndex([]).lookup([5], 4, 1) is None


def test_a_separator_in_the_context_cuts_the_tail_there() -> None:
    index = SuffixIndex.of_documents([[1, 2, 3, 4]])
    match = index.longest_match([1, 2, SEPARATOR, 3], 1, 8)
    assert match is not None and match.length == 1


def test_bad_arrays_and_lengths_are_refused() -> None:
    tokens = join_documents([[1, 2]])
    with pytest.raises(ValueError):
        SuffixIndex(tokens[:-1], reversed_suffix_array(tokens[:-1]))  # no final separator
    with pytest.raises(ValueError):
        SuffixIndex(tokens, reversed_suffix_array(tokens)[:-1])
    with pytest.raises(ValueError):
        SuffixIndex.of_documents([[1, 2]]).longest_match([1, 2], 3, 2)


def test_a_damaged_part_is_left_out_with_a_problem_line() -> None:
    tokens = join_documents([[1, 2, 3, 4]])
    broken = SuffixIndex(tokens, np.full(len(tokens), 10**6, dtype=np.int32))
    multi = MultiIndex([broken, SuffixIndex.of_documents([[1, 2, 3, 9]])], names=["base", "recent"])
    proposal = multi.lookup([1, 2, 3], 4, 2)
    assert proposal is not None and proposal.tokens == [9]
    assert multi.problems == ["base: damaged (a lookup read past its text); left out"]


def test_weighted_continuation_on_hand_made_rows() -> None:
    rows = np.array([[1, 2, 3], [1, 2, 4], [1, 5, 6], [1, 2, 4]])
    assert weighted_continuation(rows, 0.3) == ([1, 2, 4], [1.0, 0.75, 0.5])
    assert weighted_continuation(rows, 0.6) == ([1, 2], [1.0, 0.75])
    assert weighted_continuation(np.array([[SEPARATOR, 1]]), 0.0) == ([], [])


def test_memory_mapped_arrays_answer_as_in_memory_ones(tmp_path: Path) -> None:
    tokens = join_documents([[1, 2, 3, 4], [2, 3, 5]])
    np.save(tmp_path / "tokens.npy", tokens)
    np.save(tmp_path / "sa.npy", reversed_suffix_array(tokens))
    mapped = SuffixIndex(np.load(tmp_path / "tokens.npy", mmap_mode="r"), np.load(tmp_path / "sa.npy", mmap_mode="r"))
    assert mapped.lookup([9, 2, 3], 4, 2) == SuffixIndex.build(tokens).lookup([9, 2, 3], 4, 2)


@pytest.mark.slow
def test_lookup_time_at_three_million_tokens() -> None:
    rng = np.random.default_rng(0)
    size = 3_000_000
    text = rng.integers(0, 50_000, size=size, dtype=np.int32)
    text[rng.random(size) < 0.08] = 13  # one very frequent token, as a newline is
    text[rng.random(size) < 0.001] = SEPARATOR
    planted = rng.integers(0, 50_000, size=(20, 200), dtype=np.int32)  # each planted 30 times
    for row, piece in enumerate(planted):
        for spot in rng.integers(0, size - 300, size=30):
            text[spot : spot + 200] = piece
    text[-1] = SEPARATOR
    started = time.perf_counter()
    index = SuffixIndex.build(text)
    built = time.perf_counter() - started

    contexts = [list(planted[i % 20][: 40 + i % 100]) for i in range(200)]  # tails of planted text: long matches
    contexts += [list(rng.integers(0, 50_000, size=100)) + [13, 13] for _ in range(100)]  # random: short or none
    contexts += [list(text[spot : spot + 100]) for spot in rng.integers(0, size - 100, size=100)]  # ordinary text
    times = []
    for number, context in enumerate(contexts):
        started = time.perf_counter()
        proposal = index.lookup(context, 16, 4, 64, 0.3)
        times.append(time.perf_counter() - started)
        if number < 200:
            assert proposal is not None and proposal.match_length >= 40
    for i, context in enumerate(contexts[:200]):
        proposal = index.lookup(context, 16, 4, 64, 0.3)
        start = len(context)
        assert proposal is not None and proposal.tokens == planted[i % 20][start : start + 16].tolist()
    milliseconds = np.array(times) * 1000
    print(
        f"\n3M tokens: built in {built:.2f} s; lookup mean {milliseconds.mean():.3f} ms,"
        f" median {np.median(milliseconds):.3f} ms, p99 {np.percentile(milliseconds, 99):.3f} ms,"
        f" max {milliseconds.max():.3f} ms"
    )


def test_the_sampled_check_passes_every_true_suffix_array_and_fails_other_contents() -> None:
    rng = np.random.default_rng(7)
    texts = [[5], [1, 2, 3], rng.integers(0, 3, size=2000).tolist(), [7] * 500 + [8] * 500,
             rng.integers(0, 50000, size=5000).tolist()]
    for documents in (texts, [texts[2], texts[3]], [[4, 4, 4]] * 30):
        tokens = join_documents(documents)
        suffixes = reversed_suffix_array(tokens)
        assert suffix_array_fault(tokens, suffixes) is None
        assert suffix_array_fault(tokens, np.zeros_like(suffixes)) is not None
        assert suffix_array_fault(tokens, suffixes[::-1].copy()) is not None
        assert suffix_array_fault(tokens, suffixes + len(tokens)) is not None
