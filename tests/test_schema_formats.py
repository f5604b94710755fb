"""Formats llguidance does not know, held as the patterns their standards define (schema_formats.py)."""

from __future__ import annotations

import json
import random
import re

import pytest
from jsonschema import Draft202012Validator

from grammar_helpers import accepts
from localspec.engine.grammar import OutputFormat, compile_format
from localspec.engine.schema_formats import FORMAT_PATTERNS, formats_as_patterns

CHECKER = Draft202012Validator.FORMAT_CHECKER  # (with the format-nongpl validators: rfc3986-validator, …)
CHARACTERS = list("aZ09:/?#[]@!$&'()*+,;=-._~%Af \"<>{}|\\^`v125") + ["é", "\ue000", "\U0001f600", "\x7f", "\uf900",
                                                                       "\ufdd0", "\x9f"]
PIECES = ["http://", "//", "[", "]", "::", "ffff:", "1.2.3.4", "v1.x", "%41", "%4", "{", "}", "{+x}", "{x:3}", "{x*}",
          "/~0", "~1", "~2", "0", "1#", "#", "a:", "[::1]", "[2001:db8::7]", "user@"]


def texts(count: int, seed: int = 1) -> list[str]:
    """Strings of the characters and pieces URIs, templates and pointers are made of (a third of them valid)."""
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) if rng.random() < 0.4 else rng.choice(CHARACTERS)
                    for _ in range(rng.randint(0, 6))) for _ in range(count)]


def takes(name: str, text: str) -> bool:
    return re.fullmatch(FORMAT_PATTERNS[name], text) is not None


def validator_misreads(name: str, text: str) -> bool:
    """Where rfc3987-syntax refuses what RFC 3987 takes: an IRI whose host is an IP literal and that holds a
    character beyond ASCII (`http://[::1]/é`)."""
    return name.startswith("iri") and "]" in text and not text.isascii()


@pytest.mark.parametrize("name, count", [("uri-reference", 2000), ("iri", 200), ("iri-reference", 120),
                                         ("json-pointer", 2000)])  # (rfc3987-syntax takes a millisecond a text)
@pytest.mark.slow
def test_a_formats_pattern_takes_what_jsonschemas_validator_takes(name: str, count: int) -> None:
    disagreements = [text for text in texts(count) if takes(name, text) != CHECKER.conforms(text, name)
                     and not validator_misreads(name, text)]
    assert disagreements == []


def test_an_ip_literal_before_letters_beyond_ascii_and_no_newline_at_the_end() -> None:
    assert takes("iri", "http://[::1]/é") and takes("iri-reference", "//[::1]/é")
    assert not takes("uri-reference", "/a\n")  # (jsonschema's validators let `$` take one)


@pytest.mark.parametrize("year", ["0000", "0001", "0004", "0100", "0400", "1900", "1999", "2000", "2023", "2024",
                                  "2100", "9996", "9999"])
def test_a_date_is_one_of_the_calendar_as_the_validator_reads_it(year: str) -> None:
    """Every month and day of years leap or not (February's 29th in 2024 and 2000, not 1900 or 2023)."""
    for month in range(14):
        for day in range(33):
            text = f"{year}-{month:02d}-{day:02d}"
            assert takes("date", text) == CHECKER.conforms(text, "date"), text


def test_a_time_and_a_date_time_are_taken_as_the_validator_takes_them() -> None:
    """Seconds 00 to 59 (no leap second: the validator refuses it), at most nine decimals, an offset of at most
    23:59, `T` and `Z` in either case."""
    rng = random.Random(4)
    hours, minutes = ["00", "09", "19", "23", "24", "7"], ["00", "30", "59", "60", "5"]
    fractions = ["", ".5", ".123456789", ".", ".1234567890"]
    offsets = ["Z", "z", "+14:00", "-23:59", "+24:00", "", "+1:00", "-00:00"]
    for _ in range(1500):
        fraction = rng.choice(fractions)
        time = f"{rng.choice(hours)}:{rng.choice(minutes)}:{rng.choice(minutes)}{fraction}{rng.choice(offsets)}"
        date_time = f"{rng.choice(['2024-02-29', '2023-02-29', '2023-12-31'])}{rng.choice('Tt ')}{time}"
        if fraction != ".1234567890":  # (the validator takes any number of decimals)
            assert takes("time", time) == CHECKER.conforms(time, "time"), time
            assert takes("date-time", date_time) == CHECKER.conforms(date_time, "date-time"), date_time
    assert not takes("time", "12:00:00.1234567890Z")  # (ten decimals: more than a nanosecond)


def test_a_uri_template_as_rfc_6570_writes_it_is_one_the_validator_takes() -> None:
    """The validator is lenient (a lone `%`, a quote, `<`): the pattern takes no template it refuses."""
    taken = [text for text in texts(2000) if takes("uri-template", text)]
    assert len(taken) > 200 and all(CHECKER.conforms(text, "uri-template") for text in taken)
    assert takes("uri-template", "http://example.com/{user}/repos{?page,per_page}{#frag*}")
    assert not any(takes("uri-template", text) for text in ["{}", "{x", "{x:0}", "a'b", "{x,}", "%4"])


def test_a_relative_json_pointer_is_a_number_then_a_pointer_or_a_hash() -> None:
    """As the draft writes it; the validator refuses any digit after a 0 (`10` itself passes, `101` does not)."""
    for text in texts(2000, seed=2):
        if not re.search("0[0-9]", text):
            assert takes("relative-json-pointer", text) == CHECKER.conforms(text, "relative-json-pointer"), text
    assert [takes("relative-json-pointer", text) for text in ["0", "1/a~1b", "2#", "101/x", "01", "#", "1~"]] == \
        [True, True, True, True, False, False, False]


@pytest.mark.parametrize("reference", [
    "ftp://ftp.is.co.za/rfc/rfc1808.txt", "ldap://[2001:db8::7]/c=GB?objectClass?one", "mailto:John.Doe@example.com",
    "news:comp.infosystems.www.servers.unix", "tel:+1-816-555-1212", "telnet://192.0.2.16:80/",
    "urn:oasis:names:specification:docbook:dtd:xml:4.1.2", "http://[::ffff:192.0.2.1]/", "http://[v7.x:y]/",
    "g;x?y#s", "../../g", "", "#s", "//g", "./g:h", "%7Euser/",
])
def test_the_examples_of_rfc_3986_are_uri_references(reference: str) -> None:
    assert takes("uri-reference", reference) and CHECKER.conforms(reference, "uri-reference")


@pytest.mark.parametrize("address", ["::", "::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:1.2.3.4", "1::8", "::1.2.3.4",
                                     "1:2:3:4:5::7:8", "1:2:3:4:5:6:7::", "1::3:4:5:6:7:8"])
def test_every_shape_of_an_ipv6_address_is_taken_in_brackets(address: str) -> None:
    assert takes("uri-reference", f"http://[{address}]/")


@pytest.mark.parametrize("address", ["1:2:3:4:5:6:7:8:9", "1::2::3", ":1", "1:2:3:4:5:6:7", "12345::", "1.2.3.4::",
                                     "::256.1.1.1", "1:2:3:4:5:6:7:1.2.3.4"])
def test_what_is_no_ipv6_address_is_refused_in_brackets(address: str) -> None:
    assert not takes("uri-reference", f"http://[{address}]/")


@pytest.mark.slow
def test_llguidance_holds_a_string_to_the_same_language() -> None:
    """The pattern as llguidance reads it, fed the JSON of each text, takes what Python's `re` takes."""
    for name in FORMAT_PATTERNS:
        grammar = compile_format(OutputFormat("json_schema", json.dumps({"type": "string", "format": name}))).grammar
        for text in [*texts(60, seed=3), "2024-02-29", "2023-02-29", "23:59:59.5Z", "23:59:60Z",
                     "2024-02-29T12:00:00+01:00", "2023-02-29T12:00:00Z", "2024-01-01T00:00:00.1234567890Z"]:
            assert accepts(grammar, json.dumps(text, ensure_ascii=False)) == takes(name, text), (name, text)


def test_a_format_becomes_its_pattern_but_beside_a_pattern_of_its_own() -> None:
    schema = {"type": "object", "properties": {
        "home": {"type": "string", "format": "uri-reference", "maxLength": 80},
        "path": {"type": "string", "format": "json-pointer", "pattern": "^/a"},
        "site": {"type": "string", "format": "uri"}}}
    rewritten = formats_as_patterns(schema)
    assert rewritten["properties"]["home"] == {"type": "string", "pattern": FORMAT_PATTERNS["uri-reference"],
                                               "maxLength": 80}
    assert rewritten["properties"]["path"] == schema["properties"]["path"]  # (one pattern a schema)
    assert rewritten["properties"]["site"] == schema["properties"]["site"]  # (llguidance holds uri itself)
    assert schema["properties"]["home"]["format"] == "uri-reference"  # (the input untouched)


def test_a_schema_with_these_formats_compiles_without_a_warning_and_holds_unique_references() -> None:
    links = {"type": "array", "items": {"type": "string", "format": "uri-reference"}, "uniqueItems": True}
    schema = {"type": "object", "properties": {"links": links, "at": {"type": "string", "format": "json-pointer"}}}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()
    assert accepts(compiled.grammar, '{"links": ["../a", "#top"], "at": "/a/0"}')
    assert not accepts(compiled.grammar, '{"links": ["a b"]}')
    assert not accepts(compiled.grammar, '{"at": "a"}')
