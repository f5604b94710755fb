"""Streaming text: no split UTF-8 characters, stop strings found across token boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from localspec.engine.textstream import TextStream


def _feed(stream: TextStream, pieces: list[bytes]) -> str:
    return "".join(stream.push(piece) for piece in pieces) + stream.finish()


@given(st.text(), st.data())
def test_any_split_of_the_bytes_streams_the_same_text(text: str, data: st.DataObject) -> None:
    raw = text.encode("utf-8")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
    stream = TextStream()
    emitted = [stream.push(piece) for piece in pieces]
    assert "".join(emitted) + stream.finish() == text
    for chunk in emitted:  # (no replacement character for a character cut in two: only those the text holds)
        assert chunk.count("\ufffd") <= text.count("\ufffd")


def test_multibyte_character_is_held_until_complete() -> None:
    stream = TextStream()
    snowman = "☃".encode("utf-8")
    assert stream.push(snowman[:1]) == ""
    assert stream.push(snowman[1:2]) == ""
    assert stream.push(snowman[2:]) == "☃"


def test_stop_string_across_pieces_is_cut_and_stops() -> None:
    stream = TextStream(stop=["END"])
    out = _feed(stream, [b"hello E", b"N", b"D and more"])
    assert out == "hello " and stream.stopped


def test_text_that_only_looks_like_a_stop_prefix_is_released() -> None:
    stream = TextStream(stop=["END"])
    assert stream.push(b"hello EN") == "hello "
    assert stream.push(b"x") == "ENx"
    assert not stream.stopped


@given(st.text(max_size=40), st.text(min_size=1, max_size=4), st.data())
def test_output_is_the_text_before_the_first_stop(text: str, stop: str, data: st.DataObject) -> None:
    raw = text.encode("utf-8")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
    stream = TextStream(stop=[stop])
    out = _feed(stream, pieces)
    expected = text.split(stop)[0] if stop in text else text
    assert out == expected
    assert stream.stopped == (stop in text)


def test_a_character_cut_off_at_the_end_is_dropped_not_shown_as_a_replacement() -> None:
    stream = TextStream()
    assert _feed(stream, [b"ok", b"\xe2\x98"]) == "ok" and stream.text == "ok"


def test_invalid_bytes_inside_the_text_still_become_replacement_characters() -> None:
    assert _feed(TextStream(), [b"a\xff", b"b\xe2\x98"]) == "a\ufffdb"


def _reference_cut(pieces: list[bytes], stops: list[str]) -> tuple[str, bool]:
    """What generation should show: the text up to the first piece after which some stop
    string has appeared, cut at the earliest place any stop string then starts."""
    seen = b""
    for piece in pieces:
        seen += piece
        text = seen.decode("utf-8", errors="replace")
        hits = [text.find(stop) for stop in stops if stop and stop in text]
        if hits:
            return text[: min(hits)], True
    return seen.decode("utf-8", errors="replace"), False


def test_a_multi_character_stop_spread_over_many_pieces() -> None:
    stream = TextStream(stop=["</answer>"])
    pieces = [b"42 <", b"/", b"ans", b"w", b"er", b"> trailing"]
    emitted = [stream.push(piece) for piece in pieces]
    assert "".join(emitted) + stream.finish() == "42 " and stream.stopped
    assert emitted[0] == "42 "  # the possible start of the stop string is held back, nothing more


def test_with_several_stop_strings_the_earliest_wins() -> None:
    stream = TextStream(stop=["world", "lo w", "o"])
    assert _feed(stream, [b"hello world"]) == "hel"  # "lo w" starts before "o" and "world"
    stream = TextStream(stop=["END", "STOP"])
    assert _feed(stream, [b"a STO", b"P b END"]) == "a "


@given(
    st.lists(st.text(alphabet="abcé", max_size=5), max_size=8),
    st.lists(st.text(alphabet="abcé", min_size=1, max_size=3), min_size=1, max_size=3),
)
def test_several_stops_over_any_split_match_the_reference(parts: list[str], stops: list[str]) -> None:
    pieces = [part.encode("utf-8") for part in parts]
    stream = TextStream(stop=stops)
    out = _feed(stream, pieces)
    expected, stopped = _reference_cut(pieces, stops)
    assert (out, stream.stopped) == (expected, stopped)
