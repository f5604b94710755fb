"""Text from outside: whatever arrives, what comes out encodes as UTF-8, and valid text passes unchanged."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest
from click.testing import CliRunner
from cli_helpers import one_error_line
from hypothesis import given, settings
from hypothesis import strategies as st

from localspec.cli import main
from localspec.config import files
from localspec.textin import clean_data, clean_text, decode_bytes

ANY_CODE_POINTS = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=30)  # surrogates too


@settings(max_examples=200)
@given(ANY_CODE_POINTS)
@pytest.mark.slow
def test_clean_text_always_gives_encodable_text(text: str) -> None:
    cleaned, replaced = clean_text(text)
    cleaned.encode("utf-8")  # raises if a surrogate survived
    if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        assert (cleaned, replaced) == (text, False)
    elif replaced:
        assert "\ufffd" in cleaned


def test_what_python_makes_of_invalid_bytes_becomes_replacement_characters() -> None:
    argv = b"caf\xe9 \xff ok".decode("utf-8", "surrogateescape")  # how Python hands over such a command-line argument
    assert clean_text(argv) == ("caf\ufffd \ufffd ok", True)
    assert clean_text("\ud83d\ude00") == ("\U0001F600", False)  # a pair left split by a decoder is one character


@settings(max_examples=200)
@given(st.binary(max_size=40))
def test_decode_bytes_always_gives_encodable_text(data: bytes) -> None:
    text, replaced = decode_bytes(data)
    text.encode("utf-8")
    try:
        valid = data.decode("utf-8")
    except UnicodeDecodeError:
        assert replaced
    else:
        assert text == valid.removeprefix("\ufeff") and not replaced


def test_clean_data_reaches_every_string_in_parsed_json() -> None:
    data = {"k\udce9": ["ok", {"deep": "\ud800"}], "n": 5, "none": None}
    assert clean_data(data) == ({"k\ufffd": ["ok", {"deep": "\ufffd"}], "n": 5, "none": None}, True)
    assert clean_data({"a": ["b"]}) == ({"a": ["b"]}, False)
    deep: object = "\ud800"
    for _ in range(5_000):  # deeper than recursion goes: what comes after says what is wrong, and where
        deep = {"not": [deep]}
    cleaned, replaced = clean_data(deep)
    for _ in range(5_000):
        cleaned = cleaned["not"][0]
    assert (cleaned, replaced) == ("\ufffd", True)


def test_json_a_person_wrote_has_its_escaped_lone_surrogates_replaced() -> None:
    from localspec.config.files import parse_user_json

    assert parse_user_json('{"a\\ud800": ["b\\udfff", "\\ud83d\\ude00"]}', "tools.json") == {"a\ufffd": ["b\ufffd", "\U0001f600"]}


# -- the prompt on stdin ---------------------------------------------------------------------------

def _run_with_stdin(data: bytes):
    return CliRunner().invoke(main, ["run", "--max-tokens", "2"], input=data, catch_exceptions=False)


def test_stdin_is_read_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """`yes | localspec run` must not fill the memory before anything is checked: refused before any model
    loads."""
    monkeypatch.setattr(files, "MAX_PIPED_BYTES", 1000)
    one_error_line(_run_with_stdin(b"y\n" * 600), 2, "stdin: more than", "more than any context can hold")


def test_text_after_a_utf16_byte_order_mark_is_read_as_utf16() -> None:
    """A prompt piped from PowerShell or a file Notepad saved: read, not refused (stdin), skipped as binary
    (`memory add`) or refused (`bench --prompts`), as each did before."""
    assert decode_bytes("Say h\u00e9llo \U0001f600".encode("utf-16")) == ("Say h\u00e9llo \U0001f600", False)
    assert decode_bytes(codecs.BOM_UTF16_BE + "Hi".encode("utf-16-be")) == ("Hi", False)
    assert decode_bytes(codecs.BOM_UTF8 + b"Hi") == ("Hi", False)
    assert decode_bytes(codecs.BOM_UTF16_LE + b"H\x00\x00\xd8") == ("H\ufffd", True)  # a lone surrogate
    assert decode_bytes(b"caf\xe9") == ("caf\ufffd", True)
    assert decode_bytes("Hi".encode("utf-32")) == ("Hi", False)  # (its mark starts as UTF-16's: was read as "\0H\0i")


@pytest.mark.parametrize(("flag", "named"), [("--json-schema", "--json-schema"), ("--grammar", "--grammar"),
                                            ("--tools", "--tools"), ("--target", "target.path")])
def test_an_empty_path_is_named_as_empty_not_taken_for_the_current_folder(flag: str, named: str) -> None:
    result = CliRunner().invoke(main, ["run", "--max-tokens", "2", flag, "", "hi"], catch_exceptions=False)
    one_error_line(result, 2, f"{named}: the path is empty")


def test_a_prompts_file_is_decoded_as_a_piped_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`bench --prompts` refused a byte order mark and a stray byte that stdin and `memory add` take."""
    from localspec.app.bench import read_prompts

    for encoding in ("utf-16", "utf-8-sig"):
        (tmp_path / encoding).write_text("the cat\n\nthe d\u00f6g\n", encoding=encoding)
        assert read_prompts(tmp_path / encoding) == ("the cat", "the d\u00f6g")
    assert capsys.readouterr().err == ""
    (tmp_path / "latin-1").write_bytes(b"caf\xe9\n")
    assert read_prompts(tmp_path / "latin-1") == ("caf\ufffd",)
    assert "latin-1 is not valid UTF-8 text" in capsys.readouterr().err
    named = tmp_path / "a\x1b[2Jna\nme"  # (was: the escape sequence reached the terminal, the line broken in two)
    named.write_bytes(b"caf\xe9\n")
    assert read_prompts(named) == ("caf\ufffd",)
    warning = capsys.readouterr().err
    assert "a\\x1b[2Jna\\nme is not valid UTF-8" in warning and warning.count("\n") == 1


def test_bench_prompts_come_from_a_pipe_or_stdin(tmp_path: Path) -> None:
    """(was: `--prompts <(grep ...)` refused as not a regular file; `-` taken for a file named "-")"""
    import os
    import threading

    from localspec.app.bench import read_prompts

    pipe = tmp_path / "prompts"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_bytes("the cat\n\nthe d\u00f6g\n".encode("utf-16")))
    writer.start()
    assert read_prompts(pipe) == ("the cat", "the d\u00f6g")
    writer.join()
    blank = CliRunner().invoke(main, ["bench", "--prompts", "-"], input=b"\n \n", catch_exceptions=False)
    one_error_line(blank, 2, "stdin: no prompts in it (one per line)")
