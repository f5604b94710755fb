"""Output formats in `run` and `chat`: compiling them, bad input, valid output on the tiny pair, cut-short output."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cli_helpers import cli, one_error_line
from click.testing import CliRunner, Result

from localspec.app.history import HistoryStore
from localspec.cli import main
from localspec.config.paths import history_file
from localspec.engine.grammar import JSON_WHITESPACE, OutputFormat, compile_format, is_gbnf
from localspec.errors import InputError

# Forced structure (keys, booleans, an enum): the tiny random models can only choose values and whitespace.
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "flag.json"
    path.write_text(json.dumps(SCHEMA))
    return path


@pytest.fixture
def tiny_args(tiny_pair: tuple[Path, Path]) -> list[str]:
    return ["--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--temperature", "0", "--threads", "1"]


def run_tiny(tiny_args: list[str], *args: str) -> Result:
    return cli("run", *tiny_args, "--raw", *args, "the cat")


# -- compiling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, fragments", [
    (OutputFormat("json_schema", '{"type": "foo"}', "s.json"), ["s.json: `type` must be a type name", '"foo"']),
    # (Python reads 1e999 as infinity, which llguidance was handed as null: "Expected f64 for 'maximum', got null")
    (OutputFormat("json_schema", '{"type": "number", "maximum": 1e999}', "s.json"),
     ["s.json: not valid JSON (1e999 is too large for a number)"]),
    (OutputFormat("json_schema", '{"type":\n "object",}', "s.json"), ["s.json: not valid JSON (line 2, column 11"]),
    (OutputFormat("json_schema", "[1]", "s.json"), ["s.json: a JSON schema must be a JSON object", "an array"]),
    (OutputFormat("json_schema", '{"maximum": NaN}', "/format schema"), ["/format schema: not valid JSON (NaN is not a JSON number)"]),
    # (Python keeps the last of two keys silently: this schema would have asked for an array)
    (OutputFormat("json_schema", '{"type": "object", "properties": {}, "type": "array"}', "s.json"),
     ['s.json: the key "type" appears twice in one object: keep one']),
    (OutputFormat("json_schema", '{"$ref": "#/nowhere"}', "--json-schema"), ["--json-schema: ", "/nowhere"]),
    # (was Python's `invalid literal for int() with base 10: '²'`: "²".isdigit() is True)
    (OutputFormat("json_schema", '{"$ref": "#/anyOf/\u00b2", "anyOf": [{"type": "string"}]}', "--json-schema"),
     ["--json-schema: ", "#/anyOf/\u00b2"]),
    (OutputFormat("json_schema", '{"type": "string", "format": "date", "minLength": 20}', "s.json"),  # (was 370
     ["s.json: no text can satisfy it: a string's pattern, format and lengths leave no string between them"]),  # bytes)
    # (was "Unimplemented keys": a warning)
    (OutputFormat("json_schema", '{"properties": {"a": {"not": 5}}}', "s.json"),
     ["s.json: `not` must be a schema (an object, or true or false), not 5 (at #/properties/a)"]),
    (OutputFormat("regex", "(a", "--regex"), ["--regex: ", "unclosed group"]),
    (OutputFormat("regex", "abc\\", "--regex"), ["--regex: invalid regex: it ends with a backslash"]),  # (dropped, else)
    (OutputFormat("regex", "[^\\s\\S]", "--regex"), ["--regex: no text can satisfy it"]),  # valid, matching nothing
    (OutputFormat("regex", "", "--regex"), ["--regex: cannot be used: it matches only the empty text"]),  # (was: "")
    (OutputFormat("grammar", 'start: ""\n', "g.lark"), ["g.lark: cannot be used: it matches only the empty text"]),
    (OutputFormat("grammar", 'start: /[^\\s\\S]/ "a"\n', "g.lark"), ["g.lark: no text can satisfy it"]),
    # a rule that always needs itself: llguidance forced "((((…" until its limit, at generation time
    (OutputFormat("grammar", 'start: a\na: "(" a ")"\n', "g.lark"), ["g.lark: cannot be used: it forces more text without a"
                                                                     " choice than llguidance follows (a rule that always needs itself"]),
    # ... or a fixed text that long (it had been called unsatisfiable: it is not, but llguidance cannot follow it)
    (OutputFormat("regex", "a{100000}", "--regex"), ["--regex: cannot be used: it forces more text", "a very long fixed text"]),
    (OutputFormat("grammar", 'start: "a" | b', "g.lark"), ["g.lark: line 1, column 8: ", 'unknown name: "b"']),
    (OutputFormat("grammar", '{"type": "object"}', "s.json"), ["s.json: JSON, not a Lark or GBNF grammar"]),
    (OutputFormat("grammar", "root ::= answer", "g.gbnf"), ["g.gbnf: cannot convert the GBNF grammar", "answer"]),
    # The converter names no line for an undefined rule: its first use outside strings, classes and comments is given.
    (OutputFormat("grammar", 'root ::= "bar" [bar] x # bar\nx ::= "b" |\n  bar\n', "g.gbnf"),
     ["g.gbnf: cannot convert the GBNF grammar: Rule 'bar' not found (used on line 3)"]),
    # llguidance's position would be in the grammar's Lark conversion, not the file: left out
    (OutputFormat("grammar", 'root ::= x\nx ::= "a"{3,1}\n', "g.gbnf"), ["g.gbnf: range end must be >= start"]),
    # A position past the last line was said as one ("line 4" of two lines; the converter's lost a character).
    (OutputFormat("grammar", "/system\nhi\n", "g.txt"), ["g.txt: at the end of the file: lexer error (a string or"]),
    (OutputFormat("grammar", 'root ::= "a"\nx ::= (\n', "g.gbnf"), ["g.gbnf: cannot convert the GBNF grammar: at the"
                                                                    " end of the file: Expected ')'"]),
    (OutputFormat("grammar", 'root ::= "a" x\nx := "b"\n', "g.gbnf"), ["GBNF grammar: line 2, column 3: Expected ::="]),
])
def test_an_invalid_format_is_one_line_naming_llguidances_message(fmt: OutputFormat, fragments: list[str]) -> None:
    with pytest.raises(InputError) as raised:
        compile_format(fmt)
    message = str(raised.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_gbnf_is_converted_and_lark_kept() -> None:
    gbnf = 'root ::= "yes" | "no"\n'
    assert is_gbnf(gbnf) and not is_gbnf('start: "yes" | "no"\n')
    assert '"yes"' in compile_format(OutputFormat("grammar", gbnf, "g.gbnf")).grammar
    assert compile_format(OutputFormat("grammar", 'start: "yes" | "no"', "g.lark")).warnings == ()


@pytest.mark.parametrize(("gbnf", "accepted", "refused"), [
    ('root ::= "caf\\u00e9"', "café", "cafe"),
    ('root ::= [\\u0041-\\u005A]+', "ABC", "abc"),
    ('root ::= "\\U0001F600!"', "😀!", "!"),
    ('root ::= "\\u20ac" [0-9]', "€5", "E5"),
    ('root ::= "\\\\u0041"', "\\u0041", "A"),  # an escaped backslash, then the text u0041
])
def test_gbnf_unicode_escapes_mean_their_characters(gbnf: str, accepted: str, refused: str) -> None:
    """llguidance's converter drops an escape's leading zeros (\\u00e9 would become \\ue9, which llguidance
    refuses): the escapes are spelled out before it converts."""
    from llguidance import LLMatcher

    from localspec.engine.byte_tokenizer import byte_tokenizer

    grammar = compile_format(OutputFormat("grammar", gbnf, "g.gbnf")).grammar

    def matches(text: str) -> bool:
        matcher = LLMatcher(byte_tokenizer(), grammar)
        return matcher.consume_tokens(list(text.encode())) and not matcher.is_error() and matcher.is_accepting()

    assert matches(accepted) and not matches(refused)


def test_schema_keywords_llguidance_does_not_enforce_are_warnings() -> None:
    compiled = compile_format(OutputFormat("json_schema", '{"type": "array", "uniqueItems": true}', "s.json"))
    assert compiled.warnings == ('s.json: Unimplemented keys: ["uniqueItems"] (not enforced: the output may not satisfy it)',)


# -- bad flags and files (refused before any model loads) ------------------------------------------


@pytest.mark.parametrize("command", ["run", "chat"])
def test_two_formats_at_once_are_refused(command: str) -> None:
    result = cli(command, "--format", "json", "--regex", "a+", *(["hi"] if command == "run" else []))
    one_error_line(result, 2, "--format and --regex cannot be combined")


def run_with_stdin(tiny_args: list[str], stdin: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["run", *tiny_args, "--max-tokens", "8", *args], input=stdin,
                              catch_exceptions=False)


@pytest.mark.slow  # two runs
def test_a_schema_or_grammar_file_named_dash_is_read_from_stdin(tiny_args: list[str]) -> None:
    schema = run_with_stdin(tiny_args, '{"type": "object"}', "--raw", "--json-schema", "-", "--json", "the cat")
    assert schema.exit_code in (0, 1), schema.stderr  # (1: cut short by max_tokens)
    assert json.loads(schema.stdout)["format"] == {"kind": "json_schema", "origin": "stdin", "warnings": []}
    grammar = run_with_stdin(tiny_args, 'start: "yes" | "no"', "--raw", "--grammar", "-", "the cat")
    assert grammar.exit_code == 0 and grammar.stdout in ("yes", "no"), (grammar.stdout, grammar.stderr)


def test_a_file_named_dash_reads_stdin_where_nothing_else_does(tiny_args: list[str]) -> None:
    one_error_line(run_with_stdin(tiny_args, "[", "--tools", "-", "the cat"), 2, "stdin: not valid JSON")
    one_error_line(run_with_stdin(tiny_args, "\ufeff{}", "--json-schema", "-", "the cat"), 2,  # (as a file's)
                   "--json-schema - (stdin): starts with a byte order mark")
    one_error_line(run_with_stdin(tiny_args, "{}", "--json-schema", "-"), 2,
                   "--json-schema - reads stdin, which the prompt is read from: give the prompt as an argument")
    one_error_line(run_with_stdin(tiny_args, "[]", "--tools", "-", "-"), 2,
                   "--tools - reads stdin, which the prompt is read from")
    chat = CliRunner().invoke(main, ["chat", "--grammar", "-"], input="hi\n", catch_exceptions=False)
    one_error_line(chat, 2, "--grammar - reads stdin, which chat reads its messages from: give a file")


def bad_files(folder: Path) -> dict[str, tuple[Path, str]]:
    (folder / "folder.json").mkdir()
    (folder / "latin1.json").write_bytes(b'{"description": "caf\xe9"}')
    (folder / "broken.json").write_text('{"type": "object",\n  "properties": }')
    return {
        "missing": (folder / "missing.json", "cannot read it"),
        "a folder": (folder / "folder.json", "not a regular file"),
        "not UTF-8": (folder / "latin1.json", "not UTF-8"),
        "not JSON": (folder / "broken.json", "not valid JSON (line 2, column 17"),
    }


@pytest.mark.parametrize("problem", ["missing", "a folder", "not UTF-8", "not JSON"])
def test_a_bad_schema_file_is_one_line_naming_it(tmp_path: Path, problem: str) -> None:
    path, fragment = bad_files(tmp_path)[problem]
    one_error_line(cli("run", "--json-schema", str(path), "hi"), 2, str(path), fragment)


def test_bad_grammar_file_and_bad_inline_schema_and_regex(tmp_path: Path) -> None:
    one_error_line(cli("run", "--grammar", str(tmp_path / "none.lark"), "hi"), 2, "none.lark", "cannot read it")
    one_error_line(cli("run", "--json-schema", '{"type": "foo"}', "hi"), 2, "--json-schema: `type` must be a type name")
    one_error_line(cli("chat", "--regex", "[a-"), 2, "--regex: ", "unclosed character class")


# -- run on the tiny pair ----------------------------------------------------------------------------


@pytest.mark.slow  # (a process of its own: what it tests would end the test run's)
def test_a_schema_chaining_many_refs_is_an_error_not_the_end_of_the_process(tiny_args: list[str],
                                                                             tmp_path: Path) -> None:
    """llguidance compiles by recursion in native code: 1,200 chained `$ref`s overflowed the stack (SIGSEGV,
    nothing said; through `serve`, one request ended the server)."""
    n = 1200
    definitions = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"type": "integer"}]} for i in range(n)}
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps({"$defs": {**definitions, f"d{n}": {"type": "integer"}}, "$ref": "#/$defs/d0"}))
    done = subprocess.run([sys.executable, "-m", "localspec", "run", *tiny_args, "--max-tokens", "3",
                           "--json-schema", str(chain), "the cat"], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1, 2), done  # (was: -11)
    assert "Traceback" not in done.stderr


def test_run_output_parses_validates_and_is_the_same_with_and_without_speculation(
    tiny_args: list[str], schema_file: Path,
) -> None:
    texts = []
    for speculative in ([], ["--no-speculative"]):
        result = run_tiny(tiny_args, "--json-schema", str(schema_file), "--max-tokens", "80", "--seed", "3", *speculative)
        assert result.exit_code == 0, result.stderr
        jsonschema.validate(json.loads(result.stdout), SCHEMA)
        # The tiny models favour whitespace: each run of it between JSON tokens stays within the bound.
        assert all(re.fullmatch(JSON_WHITESPACE, gap) for gap in re.findall(r"\s+", result.stdout)), repr(result.stdout)
        texts.append(result.stdout)
    assert texts[0] == texts[1]


def test_run_json_reports_the_format_and_completeness(tiny_args: list[str], schema_file: Path) -> None:
    result = run_tiny(tiny_args, "--json-schema", str(schema_file), "--max-tokens", "80", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["format"] == {"kind": "json_schema", "origin": str(schema_file), "warnings": []}
    assert report["complete"] is True and report["stop_reason"] == "eos"
    jsonschema.validate(json.loads(report["text"]), SCHEMA)


def test_output_cut_short_by_max_tokens_is_said_and_exits_1(tiny_args: list[str], schema_file: Path) -> None:
    result = run_tiny(tiny_args, "--json-schema", str(schema_file), "--max-tokens", "3")
    assert result.exit_code == 1
    assert result.stdout.startswith('{"') and result.stderr.splitlines()[-1] == (
        "localspec: output cut short by max_tokens or the context (stop reason length): it may not match the format")
    report = json.loads(run_tiny(tiny_args, "--json-schema", str(schema_file), "--max-tokens", "3", "--json").stdout)
    assert report["complete"] is False and report["stop_reason"] == "length"


def test_output_stopped_by_max_tokens_where_the_format_accepts_it_is_cut_short_and_says_it_matches(
        tiny_args: list[str]) -> None:
    """`--regex '[^\\n]*'` cut at 4 tokens matches whole, yet the model had not finished: an integer cut to `123`
    of `123456789001234` also matches, and was reported complete with exit 0, a wrong number for a script. It is
    cut short (exit 1, complete false), and says that it matches (`matches_format` true)."""
    result = run_tiny(tiny_args, "--regex", "[^\n]*", "--max-tokens", "4", "--json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["complete"] is False and report["matches_format"] is True and report["stop_reason"] == "length"
    assert len(report["tokens"]) == 4 and re.fullmatch("[^\n]*", report["text"])
    assert result.stderr.splitlines()[-1] == ("localspec: output cut short by max_tokens or the context (stop reason"
                                              " length): it matches the format, but the model had not finished")
    unfinished = run_tiny(tiny_args, "--regex", "[^\n]{40}!", "--max-tokens", "4", "--json")  # 4 tokens cannot reach '!'
    assert unfinished.exit_code == 1
    assert json.loads(unfinished.stdout)["complete"] is False and json.loads(unfinished.stdout)["matches_format"] is False


def test_a_regex_holds_the_output_and_warnings_reach_stderr(tiny_args: list[str]) -> None:
    result = run_tiny(tiny_args, "--regex", "(yes|no)!", "--max-tokens", "10")
    assert result.exit_code == 0, result.stderr
    assert result.stdout in ("yes!", "no!")
    schema = '{"type": "array", "items": {"type": "object"}, "uniqueItems": true, "maxItems": 2}'  # (objects: not held)
    result = run_tiny(tiny_args, "--json-schema", schema, "--max-tokens", "4")
    assert 'localspec: warning: --json-schema: Unimplemented keys: ["uniqueItems"]' in result.stderr
    enforced = '{"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": true}'  # spelled out by localspec
    assert "warning" not in run_tiny(tiny_args, "--json-schema", enforced, "--max-tokens", "4").stderr


@pytest.mark.parametrize("name, grammar", [
    ("answer.lark", 'start: ANSWER "!"\nANSWER: "yes" | "no"\n'),
    ("answer.gbnf", 'root ::= answer "!"\nanswer ::= "yes" | "no"\n'),  # converted to Lark
])
def test_a_grammar_file_holds_the_output(tiny_args: list[str], tmp_path: Path, name: str, grammar: str) -> None:
    path = tmp_path / name
    path.write_text(grammar, encoding="utf-8")
    for extra in ([], ["--no-speculative"], ["--temperature", "1", "--seed", "3"]):
        result = run_tiny(tiny_args, "--grammar", str(path), "--max-tokens", "10", *extra)
        assert result.exit_code == 0, result.stderr
        assert result.stdout in ("yes!", "no!"), result.stdout


@pytest.mark.slow  # (a model loads)
def test_a_grammar_the_models_vocabulary_refuses_is_one_line_naming_the_file(tiny_args: list[str],
                                                                            tmp_path: Path) -> None:
    """Found only over the model's vocabulary (a special token it lacks): the line did not name the file."""
    path = tmp_path / "special.lark"
    path.write_text('start: <|nonexistent|> "a"\n', encoding="utf-8")
    one_error_line(run_tiny(tiny_args, "--grammar", str(path)), 2,
                   f"{path}: the output format cannot be used", "unknown special token")


@pytest.mark.slow
def test_output_held_to_a_format_gets_a_longer_budget_unless_one_is_given(tiny_args: list[str]) -> None:
    """Cut short, structured output is no use: without --max-tokens it gets STRUCTURED_MAX_TOKENS, free text
    FREE_TEXT_MAX_TOKENS; a budget given is kept either way (here in a serve request too)."""
    from localspec.app.openai_request import parse_request
    from localspec.settings import FREE_TEXT_MAX_TOKENS, STRUCTURED_MAX_TOKENS, GenerationSettings

    def budget(*args: str) -> int:
        return json.loads(run_tiny(tiny_args, "--json", *args).stdout)["settings"]["max_tokens"]

    assert budget("--regex", "(yes|no)!") == STRUCTURED_MAX_TOKENS > FREE_TEXT_MAX_TOKENS
    assert budget("--regex", "(yes|no)!", "--max-tokens", "7") == 7
    assert budget("--stop", "e") == FREE_TEXT_MAX_TOKENS
    body = {"messages": [{"role": "user", "content": "hi"}]}
    as_json = {**body, "response_format": {"type": "json_object"}}

    def served(request: dict[str, Any]) -> int:
        return parse_request(request, chat=True, defaults=GenerationSettings(), has_draft=True).fitted(10, 4096).max_tokens

    assert served(as_json) == STRUCTURED_MAX_TOKENS and served(body) == FREE_TEXT_MAX_TOKENS
    assert served({**as_json, "max_tokens": 9}) == 9
    assert served({**as_json, "max_tokens": 9000}) == 4096 - 10  # the context's room


# -- chat ----------------------------------------------------------------------------------------------


def chat(stdin: str, *args: str) -> Result:
    command = ["chat", "-p", "tiny", "--temperature", "0", "--max-tokens", "80", "--threads", "1", *args]
    return CliRunner().invoke(main, command, input=stdin.encode(), catch_exceptions=False)


def stored_replies() -> list[str]:
    store = HistoryStore(history_file())
    try:
        return [m["content"] for m in store.get(store.latest())["messages"] if m["role"] == "assistant"]
    finally:
        store.close()


def test_chat_format_command_sets_shows_and_clears_the_format(tiny_profile: str, schema_file: Path) -> None:
    script = (f"/format\n/format schema {schema_file}\nthe cat\n/set\n/format bogus\n/format schema {schema_file}.none\n"
              "/format off\n/format\n")
    result = chat(script)
    assert result.exit_code == 1, result.stderr  # (/format bogus and a missing file: errors said)
    lines = result.stderr.splitlines()
    assert lines[0].startswith("(format: off; change it with /format json|off|")
    assert f"(format: JSON schema {schema_file})" in lines
    assert any(re.fullmatch(rf"\s+format\s+JSON schema {re.escape(str(schema_file))} \(/format\)", line) for line in lines)
    assert "error: /format json|off|schema FILE_OR_JSON|grammar FILE|regex PATTERN" in lines
    assert any(line.startswith(f"error: {schema_file}.none: cannot read it") for line in lines)
    assert lines[-1].startswith("(format: off;")
    (reply,) = stored_replies()
    jsonschema.validate(json.loads(reply), SCHEMA)


def test_chat_format_grammar_regex_and_json_hold_the_replies_that_follow(tiny_profile: str, tmp_path: Path) -> None:
    grammar = tmp_path / "answer.lark"
    grammar.write_text('start: ("yes" | "no") "!"\n', encoding="utf-8")
    result = chat(f"/format grammar {grammar}\nthe cat\n/format regex (red|blue)\\.\nthe dog\n/format json\nthe bird\n")
    held, regex, as_json = stored_replies()
    assert held in ("yes!", "no!") and regex in ("red.", "blue.")
    assert as_json.startswith("{")  # a JSON object, whole or (random weights ramble in a string) said to be cut short
    cut_short = "(reply output cut short by max_tokens or the context (stop reason length): it may not match the format)"
    was_cut_short = cut_short in result.stderr.splitlines()
    assert was_cut_short or isinstance(json.loads(as_json), dict)
    assert result.exit_code == (1 if was_cut_short else 0), result.stderr  # (a reply cut short: as `run` exits)


def test_chat_set_shows_the_budget_the_format_gives(tiny_profile: str) -> None:
    from localspec.settings import FREE_TEXT_MAX_TOKENS, STRUCTURED_MAX_TOKENS

    command = ["chat", "-p", "tiny", "--threads", "1"]
    result = CliRunner().invoke(main, command, input=b"/set\n/format json\n/set\n", catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    shown = [line.split(None, 1)[1] for line in result.stderr.splitlines() if line.strip().startswith("max_tokens")]
    assert shown == [f"{FREE_TEXT_MAX_TOKENS} (the default for free text)", f"{STRUCTURED_MAX_TOKENS} (the default for a format)"]


def test_chat_format_flag_holds_every_reply_and_says_when_one_is_cut_short(tiny_profile: str, schema_file: Path) -> None:
    result = chat("the cat\n/set max_tokens 3\nthe dog\n", "--json-schema", str(schema_file))
    assert result.exit_code == 1, result.stderr  # (a reply cut short of its format, as `run` exits)
    first, second = stored_replies()
    jsonschema.validate(json.loads(first), SCHEMA)
    assert "(reply output cut short by max_tokens or the context (stop reason length): it may not match the format)" \
        in result.stderr.splitlines()


# -- the demo pair ---------------------------------------------------------------------------------------


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                   "city": {"type": "string"}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


@pytest.mark.slow
def test_person_schema_on_the_demo_pair(smollm_f32: Path, smollm_q4_1: Path, tmp_path: Path) -> None:
    person = tmp_path / "person.json"
    person.write_text(json.dumps(PERSON))
    prompt = "Extract the person from: Maria Lopez, 34, is a nurse who lives in Madrid."
    texts = []
    for speculative in ([], ["--no-speculative"]):
        result = cli("run", "--target", str(smollm_f32), "--draft", str(smollm_q4_1), "--json-schema", str(person),
                     "--temperature", "0.8", "--seed", "7", "--max-tokens", "100", *speculative, prompt)
        assert result.exit_code == 0, result.stderr
        jsonschema.validate(json.loads(result.stdout), PERSON)
        texts.append(result.stdout)
    assert texts[0] == texts[1]
    assert json.loads(texts[0])["age"] == 34


def grammar_takes(model: Any, grammar: str, text: str, whole: bool = False) -> bool:
    """Whether `grammar` lets the output be `text` (so far, or `whole`: complete), in `model`'s tokens."""
    from llguidance import LLMatcher

    marker = model.tokenize("{", add_special=False)[:-1]  # the word-start mark this vocabulary prepends
    tokens = model.tokenize(text, add_special=False)[len(marker):]
    matcher = LLMatcher(model.grammar_tokenizer(), grammar)
    if matcher.validate_tokens(tokens) != len(tokens):
        return False
    return not whole or (matcher.consume_tokens(tokens) and matcher.is_accepting())


def test_numbers_a_schema_leaves_open_are_bounded_and_its_own_bounds_kept(tiny_pair: tuple[Path, Path]) -> None:
    from localspec.engine.grammar import NUMBER_MAGNITUDE_LIMIT, NUMBER_STEP, bounded_values
    from localspec.runtime.model import Model

    own = {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.25}
    schema = {"type": "object", "properties": {"x": {"type": "number"}, "n": {"type": ["integer", "null"]}, "own": own,
                                               "type": {"const": {"type": "number"}}},  # a property named "type"; data
              "required": ["x", "n", "own"]}
    bounded = bounded_values(schema)
    assert bounded["properties"]["x"] == {"type": "number", "exclusiveMaximum": NUMBER_MAGNITUDE_LIMIT,
                                          "exclusiveMinimum": -NUMBER_MAGNITUDE_LIMIT, "multipleOf": NUMBER_STEP}
    assert "multipleOf" not in bounded["properties"]["n"] and bounded["properties"]["own"] == own
    assert bounded["properties"]["type"] == {"const": {"type": "number"}}
    assert schema["properties"]["x"] == {"type": "number"}  # the caller's schema is left as it was
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar
    with Model(tiny_pair[0]) as model:
        def takes(text: str) -> bool:
            return grammar_takes(model, grammar, text)

        assert takes('{"x":-12.123456789,"n":999999999999999,"own":0.75}')  # compact: the tiny vocabulary has no space
        assert not takes('{"x":0.1234567891')  # a tenth decimal
        assert not takes('{"x":1,"n":1000000000000000')  # a sixteenth digit
        assert not takes('{"x":1,"n":null,"own":0.3')  # the schema's own multipleOf


def test_strings_a_schema_leaves_open_are_bounded_and_its_own_bounds_kept(tiny_pair: tuple[Path, Path]) -> None:
    from localspec.engine.grammar import STRING_LENGTH_LIMIT, bounded_values
    from localspec.runtime.model import Model

    schema = {"type": "object", "properties": {
        "open": {"type": "string"}, "nullable": {"type": ["string", "null"]}, "own": {"type": "string", "maxLength": 3},
        "choice": {"type": "string", "enum": ["ab"]},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["open"], "additionalProperties": False}
    bounded = bounded_values(schema)["properties"]
    assert bounded["open"]["maxLength"] == bounded["nullable"]["maxLength"] == STRING_LENGTH_LIMIT
    assert bounded["tags"]["items"]["maxLength"] == STRING_LENGTH_LIMIT  # inside arrays too
    assert bounded["own"] == schema["properties"]["own"] and bounded["choice"] == schema["properties"]["choice"]
    # Never below a length the schema names anywhere (here in an allOf, or a minLength):
    longer = {"allOf": [{"type": "string"}, {"maxLength": STRING_LENGTH_LIMIT + 100}]}
    assert bounded_values(longer)["allOf"][0]["maxLength"] == STRING_LENGTH_LIMIT + 100
    assert bounded_values({"type": "string", "minLength": STRING_LENGTH_LIMIT + 10})["maxLength"] == STRING_LENGTH_LIMIT + 10
    assert "maxLength" not in schema["properties"]["open"]  # the caller's schema is left as it was
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar
    with Model(tiny_pair[0]) as model:
        def takes(text: str) -> bool:
            return grammar_takes(model, grammar, text)

        assert takes('{"open":"' + "a" * STRING_LENGTH_LIMIT + '"}')
        assert not takes('{"open":"' + "a" * (STRING_LENGTH_LIMIT + 1))
        assert not takes('{"open":"a","own":"abcd')  # the schema's own maxLength


def test_times_durations_and_digit_runs_are_bounded_to_the_length_of_real_ones() -> None:
    from llguidance import LLMatcher

    from localspec.engine.byte_tokenizer import byte_tokenizer
    from localspec.engine.grammar import DIGIT_RUN_LIMIT, FORMAT_LENGTH_LIMITS, STRING_LENGTH_LIMIT, bounded_values

    def takes(schema: dict, text: str) -> bool:
        grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar
        matcher = LLMatcher(byte_tokenizer(), grammar)
        return matcher.consume_tokens(list(text.encode())) and matcher.is_accepting()

    time, stamp = {"type": "string", "format": "time"}, {"type": "string", "format": "date-time"}
    assert takes(time, '"23:59:59.123456789+14:00"') and takes(stamp, '"2026-12-31T23:59:59.123456789-09:30"')
    assert not takes(time, '"23:59:60Z"')  # (no leap second: see schema_formats.py)
    assert takes(time, '"08:15:00Z"') and takes(stamp, '"2026-12-04T08:15:00Z"')
    # (was: a fraction of a second to the string bound, `20:00:00.0000000121111…`, until max_tokens)
    assert not takes(time, '"20:00:00.' + "1" * 20 + 'Z"') and not takes(stamp, '"2026-12-04T20:00:00.' + "1" * 20)
    assert bounded_values(time)["maxLength"] == FORMAT_LENGTH_LIMITS["time"]
    assert bounded_values({**time, "maxLength": 12})["maxLength"] == 12  # the schema's own bound is kept
    assert bounded_values({**time, "minLength": 30})["maxLength"] == STRING_LENGTH_LIMIT  # room for its minLength
    assert bounded_values({**time, "allOf": [{"minLength": 30}]})["maxLength"] == STRING_LENGTH_LIMIT  # anywhere
    # A format in a branch or a part that does not say `type` itself: the string there must take it.
    for schema in ({"type": "string", "anyOf": [{"format": "date-time"}, {"format": "date"}]},
                   {"allOf": [{"type": "string"}, {"format": "date-time"}]}):
        assert takes(schema, '"2026-12-04T08:15:00.5Z"') and not takes(schema, '"2026-12-04T20:00:00.' + "1" * 30)
    assert bounded_values({"type": "string", "format": "email"})["maxLength"] == STRING_LENGTH_LIMIT
    assert bounded_values({"type": "string", "format": "hostname"})["maxLength"] == 253  # (RFC 1035's most)
    duration = {"type": "string", "format": "duration"}
    assert takes(duration, '"PT50M"') and takes(duration, '"P10Y11M30DT23H59M59S"')
    # (was: `P15000…0D` to the string bound, in every duration of a workout log, until max_tokens)
    assert takes(duration, '"P1' + "0" * 37 + 'D"') and not takes(duration, '"P1' + "0" * 38 + 'D"')
    # A run of digits in a pattern (was: a release age `"3000…0 day"` to the string bound, in each rule of a config).
    age = {"type": "string", "pattern": "^[0-9]+ (minute|hour|day)s?$"}
    assert takes(age, '"' + "3" * DIGIT_RUN_LIMIT + ' days"') and not takes(age, '"' + "3" * (DIGIT_RUN_LIMIT + 1))
    # Not where the schema says how long (a minLength beyond the bound stayed reachable), nor `{40,}`.
    for long_digits in ({"type": "string", "pattern": "^[0-9]+$", "minLength": 40},
                        {"type": "string", "pattern": "^[0-9]{40,}$"}):
        assert takes(long_digits, '"' + "1" * 41 + '"')


def test_a_pattern_llguidance_cannot_hold_to_the_string_bound_has_its_repeats_bounded_instead() -> None:
    """A cron schedule's `^(\\S+\\s+){4}\\S+$` within 256 characters: llguidance cannot tell whether any string
    matches, and refused the bounded grammar, so every bound of the schema was dropped (a held-out tool's
    arguments)."""
    from grammar_helpers import accepts

    schema = {"type": "object", "properties": {"schedule": {"type": "string", "pattern": "^(\\S+\\s+){4}\\S+$"},
                                               "note": {"type": "string"}}}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    assert compiled.warnings == ()  # (was: "the bounds localspec puts on open strings ... do not fit this schema")
    assert accepts(compiled.grammar, '{"schedule": "0 5 * * 1-5", "note": "' + "a" * 256 + '"}')
    assert not accepts(compiled.grammar, '{"note": "' + "a" * 257 + '"}')  # (the other string still bounded)
    assert not accepts(compiled.grammar, '{"schedule": "0 5 * *"}')
    # Its repeats bounded instead (the demo target wrote `0:00:00:…` to max_tokens in it): 64 a field.
    assert accepts(compiled.grammar, '{"schedule": "' + "0" * 64 + ' 5 * * 1"}')
    assert not accepts(compiled.grammar, '{"schedule": "' + "0" * 65 + ' 5 * * 1"}')
    with pytest.raises(InputError):  # (a pattern that is no string: the schema's own error, one line; was a TypeError)
        compile_format(OutputFormat("json_schema", json.dumps({"type": "string", "pattern": ["a"]}), "s.json"))


def test_arrays_a_schema_leaves_open_are_bounded_and_its_own_bounds_kept(tiny_pair: tuple[Path, Path]) -> None:
    from localspec.engine.grammar import COLLECTION_LIMIT, bounded_values
    from localspec.runtime.model import Model

    schema = {"type": "object", "properties": {"open": {"type": "array", "items": {"type": "integer", "maximum": 9}},
                                               "own": {"type": "array", "maxItems": 2},
                                               "pair": {"type": "array", "prefixItems": [{"const": 1}], "items": False}}}
    bounded = bounded_values(schema)["properties"]
    assert bounded["open"]["maxItems"] == COLLECTION_LIMIT
    assert bounded["own"]["maxItems"] == 2 and "maxItems" not in bounded["pair"]  # its own bound, or a closed tuple
    assert bounded_values({"type": "array", "minItems": COLLECTION_LIMIT + 5})["maxItems"] == COLLECTION_LIMIT + 5
    many = {f"p{i}": {"const": i} for i in range(COLLECTION_LIMIT + 1)}  # an open object listing more than the limit
    patterned = {"type": "object", "properties": many, "required": list(many), "patternProperties": {"^x": {}}}
    assert bounded_values(patterned)["maxProperties"] >= len(many)
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar
    with Model(tiny_pair[0]) as model:
        items = ",".join(["1"] * COLLECTION_LIMIT)
        assert grammar_takes(model, grammar, '{"open":[' + items + "]}", whole=True)
        assert not grammar_takes(model, grammar, '{"open":[' + items + ",1")


def test_format_json_takes_any_object_with_its_values_and_depth_bounded(tiny_pair: tuple[Path, Path]) -> None:
    from localspec.engine.grammar import COLLECTION_LIMIT, JSON_DEPTH_LIMIT, KEY_LENGTH_LIMIT, STRING_LENGTH_LIMIT
    from localspec.runtime.model import Model

    grammar = compile_format(OutputFormat("json", "")).grammar
    with Model(tiny_pair[0]) as model:
        def takes(text: str, whole: bool = False) -> bool:
            return grammar_takes(model, grammar, text, whole)

        assert takes('{"a":[1,-2.5,true,null,{"b":{"c":[]}}],"d":"' + "x" * STRING_LENGTH_LIMIT + '"}', whole=True)
        assert not takes('[1]')  # an object, as OpenAI's json_object means it
        assert not takes('{"a":[{"b":"' + "x" * (STRING_LENGTH_LIMIT + 1))  # a string at any depth
        assert not takes('{"a":[0.1234567891')  # a tenth decimal
        deepest = JSON_DEPTH_LIMIT - 1  # arrays inside the object
        assert takes('{"a":' + "[" * deepest + "1" + "]" * deepest + "}", whole=True)
        assert not takes('{"a":' + "[" * (deepest + 1))
        assert takes('{"a":[' + ",".join(["1"] * COLLECTION_LIMIT) + "]}", whole=True)
        assert not takes('{"a":[' + ",".join(["1"] * (COLLECTION_LIMIT + 1)))
        assert not takes("{" + ",".join(f'"k{i}":1' for i in range(COLLECTION_LIMIT + 1)))  # properties too
        assert takes('{"' + "k" * KEY_LENGTH_LIMIT + '":{"' + "é" * KEY_LENGTH_LIMIT + '":1}}', whole=True)
        assert not takes('{"a":{"' + "k" * (KEY_LENGTH_LIMIT + 1))  # keys at any depth


def test_unique_items_over_a_few_listed_values_are_enforced(tiny_pair: tuple[Path, Path]) -> None:
    """llguidance does not enforce uniqueItems: over an enum of up to 5 values every ordering of distinct
    values is spelled out; over more, the array is at least no longer than the values it may take."""
    from localspec.engine.grammar import COLLECTION_LIMIT, UNIQUE_VALUES_SPELLED_OUT, bounded_values
    from localspec.runtime.model import Model

    tags = {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c", 1]}, "uniqueItems": True,
            "description": "tags"}
    spelled = bounded_values(tags)
    assert "uniqueItems" not in spelled and spelled["description"] == "tags"
    assert len(spelled["anyOf"]) == 1 + 3 + 6 + 6  # 0 to 3 of "a", "b", "c" (1 is not a string)
    assert len(bounded_values({**tags, "minItems": 2})["anyOf"]) == 6 + 6
    equal_numbers = {"type": "array", "items": {"enum": [1, 1.0, 0, -0.0, 2]}, "uniqueItems": True}  # 1 == 1.0, 0 == -0.0
    assert len(bounded_values(equal_numbers)["anyOf"]) == 1 + 3 + 6 + 6  # three values, not five
    many = {"type": "array", "items": {"enum": list(range(UNIQUE_VALUES_SPELLED_OUT + 1))}, "uniqueItems": True}
    assert bounded_values(many) == {**many, "maxItems": UNIQUE_VALUES_SPELLED_OUT + 1}
    assert bounded_values({**many, "maxItems": 2})["maxItems"] == 2  # the schema's own, tighter
    assert bounded_values({**many, "items": {"type": "boolean"}})["anyOf"][-1]["maxItems"] == 2
    open_items = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    assert bounded_values(open_items)["uniqueItems"] is True  # (and bounded as any open array is)
    assert bounded_values(open_items)["maxItems"] == COLLECTION_LIMIT

    schema = {"type": "object", "properties": {"t": tags}, "required": ["t"]}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar
    with Model(tiny_pair[0]) as model:
        def takes(text: str) -> bool:
            return grammar_takes(model, grammar, text)

        assert takes('{"t":["c","a"]}') and takes('{"t":[]}')
        assert not takes('{"t":["a","a"')  # a repeat
        assert not takes('{"t":["a","b","c",')  # a fourth item


def test_bounds_leave_names_data_and_listed_values_alone_and_never_break_a_schema() -> None:
    from localspec.engine.grammar import bounded_values

    keyword_names = {"type": "object", "properties": {"uniqueItems": {"type": "boolean"}, "items": {"enum": ["a", "b"]},
                                                      "const": {"type": "string"}}}
    assert bounded_values(keyword_names)["properties"]["const"]["maxLength"]  # a property, however it is named
    assert "anyOf" not in bounded_values(keyword_names)["properties"]
    assert bounded_values({"type": "number", "enum": [1e20]}) == {"type": "number", "enum": [1e20]}
    assert bounded_values({"type": "number", "const": 3.14159265358979}) == {"type": "number", "const": 3.14159265358979}
    untyped = bounded_values({"uniqueItems": True, "items": {"enum": ["a", "b"]}})
    assert "anyOf" not in untyped  # without "type": "array" other values are allowed too
    with_prefix = {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"enum": ["a", "b"]}, "uniqueItems": True}
    assert "anyOf" not in bounded_values(with_prefix)
    for items in ({"const": "a", "enum": ["b"]}, {"enum": {}}, {"type": {"a": 1}, "enum": ["a"]}):
        assert "anyOf" not in bounded_values({"type": "array", "items": items, "uniqueItems": True})
    whole = bounded_values({"type": "array", "items": {"type": "integer", "enum": [1.0, 2]}, "uniqueItems": True})
    assert len(whole["anyOf"]) == 1 + 2 + 2  # 1.0 is a whole number: an integer

    # Each of these compiles as it did before the bounds (a $ref into a spelled-out array; a pattern longer than
    # the string bound: that string left as long as its pattern asks, the rest bounded, see _length_bound_holds).
    tags = {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True}
    pointing = {"type": "object", "properties": {"tags": tags, "first": {"$ref": "#/properties/tags/items"}}}
    assert compile_format(OutputFormat("json_schema", json.dumps(pointing))).warnings == ()
    long_pattern = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]{300}$"}}, "required": ["a"]}
    compiled = compile_format(OutputFormat("json_schema", json.dumps(long_pattern), "p.json"))
    assert compiled.warnings == ()
    from grammar_helpers import accepts
    assert accepts(compiled.grammar, '{"a": "' + "a" * 300 + '"}')


def test_objects_that_list_their_properties_take_no_others(tiny_pair: tuple[Path, Path]) -> None:
    """At any depth an object that lists its properties and leaves the rest open takes only those: a small model
    otherwise adds keys until max_tokens. Where closing could refuse a valid value, nothing is closed."""
    from localspec.engine.grammar import bounded_values
    from localspec.runtime.model import Model

    person = {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "maxLength": 8},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}}}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(person))).grammar
    with Model(tiny_pair[0]) as model:
        assert grammar_takes(model, grammar, '{"name":"a","address":{"city":"b"}}', whole=True)
        assert not grammar_takes(model, grammar, '{"name":"a","age"')
        assert not grammar_takes(model, grammar, '{"name":"a","address":{"city":"b","zip"')

    open_ = {"type": "object", "properties": {"a": {"const": 1}}, "additionalProperties": {"type": "integer"}}
    assert bounded_values(open_)["additionalProperties"] == {"type": "integer", "exclusiveMaximum": 10**15,
                                                             "exclusiveMinimum": -(10**15)}  # as written, bounded
    unlisted_required = {"type": "object", "properties": {"a": {"const": 1}}, "required": ["b"]}
    assert "additionalProperties" not in bounded_values(unlisted_required)
    patterned = {"type": "object", "properties": {"a": {"const": 1}}, "patternProperties": {"^x": {"const": 2}}}
    assert "additionalProperties" not in bounded_values(patterned)
    # Merged objects: a closed part would refuse the properties its partner adds.
    for merged in ({"allOf": [{"properties": {"a": {"const": 1}}}, {"properties": {"b": {"const": 2}}}]},
                   {"$defs": {"base": {"properties": {"a": {"const": 1}}}},
                    "$ref": "#/$defs/base", "properties": {"b": {"const": 2}}},
                   {"properties": {"kind": {"const": 1}}, "anyOf": [{"properties": {"a": {"const": 1}}}]}):
        assert "additionalProperties: false" not in json.dumps(bounded_values(merged)).replace('"', "")
    either = bounded_values({"anyOf": [{"properties": {"a": {"const": 1}}}, {"properties": {"b": {"const": 2}}}]})
    assert all(branch["additionalProperties"] is False for branch in either["anyOf"])  # alternatives, not merged


@pytest.mark.slow
def test_the_bounds_add_no_warning_and_never_undo_the_rest_of_the_schema() -> None:
    """What localspec adds must not make llguidance warn, nor make it refuse the bounded schema (which would
    leave every value open): llguidance counts properties only where every listed one is required, and a
    schema with many spelled-out uniqueItems arrays is too large for it."""
    from localspec.engine.grammar import COLLECTION_LIMIT, SPELLED_OUT_ORDERINGS, bounded_values, fitted_schema

    def warnings(schema: dict[str, Any]) -> tuple[str, ...]:
        return compile_format(OutputFormat("json_schema", json.dumps(schema))).warnings

    some_required = {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"], "additionalProperties": True}
    merged = {"allOf": [{"$ref": "#/$defs/x"}], "$defs": {"x": {"type": "object", "properties": {"a": {"type": "string"}}}}}
    assert warnings(some_required) == () and warnings(merged) == ()
    assert bounded_values({"type": "object", "additionalProperties": {"type": "integer"}})["maxProperties"] == COLLECTION_LIMIT
    five = {"type": "array", "items": {"enum": ["a", "b", "c", "d", "e"]}, "uniqueItems": True}  # 326 orderings
    many = {"type": "object", "properties": {f"g{i}": five for i in range(2)}}
    assert 2 * 326 > SPELLED_OUT_ORDERINGS
    fitted = fitted_schema(many)
    assert fitted.bounded and fitted.schema["properties"]["g0"]["maxItems"] == 5 and "anyOf" not in fitted.schema["properties"]["g0"]
    assert fitted_schema({"type": "object", "properties": {"g": five}}).schema["properties"]["g"]["anyOf"]
    # Lists longer than the bound: a 70-name `required`, a 70-item tuple
    names = [f"k{i}" for i in range(COLLECTION_LIMIT + 6)]
    assert fitted_schema({"type": "object", "required": names}).bounded
    assert bounded_values({"type": "array", "prefixItems": [{"const": 1}] * len(names)})["maxItems"] >= len(names)
    with pytest.raises(InputError, match="`required` must be a list of property names"):  # one line, not a TypeError
        compile_format(OutputFormat("json_schema", '{"type": "object", "properties": {"a": {}}, "required": [["a"]]}'))


def test_untyped_values_are_any_json_bounded_as_format_json_values_are() -> None:
    """`"details": {}` (or a property with only a description) let a small model nest objects for ever at T=0:
    now any JSON, five containers deep at most inside the property, strings and collections bounded."""
    from llguidance import LLMatcher

    from localspec.engine.byte_tokenizer import byte_tokenizer
    from localspec.engine.grammar import (ANY_VALUE_DEFINITION, COLLECTION_LIMIT, FREE_KEY_PATTERN, STRING_LENGTH_LIMIT,
                                          bounded_values)

    schema = {"type": "object", "properties": {"event": {"type": "string"}, "details": {}, "meta": {"description": "x"},
                                               "tags": {"type": "array", "items": {}}},
              "required": ["event", "details"], "$defs": {"mine": {"type": "integer"}}}
    bounded = bounded_values(schema)
    any_value = {"$ref": f"#/$defs/{ANY_VALUE_DEFINITION}1"}
    assert [bounded["properties"][name] for name in ("details", "meta")] == [any_value, any_value]
    assert bounded["properties"]["tags"]["items"] == any_value and bounded["$defs"]["mine"]["type"] == "integer"
    assert bounded["properties"]["event"] == {"type": "string", "maxLength": STRING_LENGTH_LIMIT}
    assert bounded_values({"type": "object", "additionalProperties": {}})["patternProperties"] == \
        {FREE_KEY_PATTERN: any_value}  # (keys bounded: test_keys_a_schema_takes_freely_are_bounded_and_no_others)
    assert bounded_values({"type": "object", "additionalProperties": True})["patternProperties"] == \
        {FREE_KEY_PATTERN: any_value}
    assert bounded_values({"type": "array", "prefixItems": [{}]})["prefixItems"] == [any_value]
    assert bounded_values({"anyOf": [{"type": "integer"}, True]})["anyOf"][1] == any_value
    assert bounded_values({"allOf": [{"type": "string", "maxLength": 999}, {}]})["allOf"][1] == {}
    # Not where `#/$defs/…` would name another resource's definitions, nor in `not` (which would then allow more).
    other_resource = {"properties": {"a": {"$id": "other", "properties": {"b": {}}}}}
    assert bounded_values(other_resource)["properties"]["a"]["properties"]["b"] == {}
    assert bounded_values({"not": {}}) == {"not": {}}
    grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar

    def valid(details: str) -> bool:
        text = f'{{"event": "jazz", "details": {details}}}'
        matcher = LLMatcher(byte_tokenizer(), grammar)
        return matcher.consume_tokens(list(text.encode())) and not matcher.is_error() and matcher.is_accepting()

    assert valid('{"a": [1, {"b": [[true]]}]}') and valid('"x"') and valid("null")
    assert valid("[[[[[1]]]]]") and not valid("[[[[[[1]]]]]]")
    assert valid(json.dumps("x" * STRING_LENGTH_LIMIT)) and not valid(json.dumps("x" * (STRING_LENGTH_LIMIT + 1)))
    assert valid(json.dumps(list(range(COLLECTION_LIMIT)))) and not valid(json.dumps(list(range(COLLECTION_LIMIT + 1))))


def test_a_schema_of_any_value_is_any_value_bounded() -> None:
    """`{}` (or annotations alone) as the whole schema: a number of any exponent came out (`51843E9518151185907203921`,
    which JSON parsers read as infinity); now any JSON bounded as an untyped property's value is."""
    from grammar_helpers import accepts

    from localspec.engine.grammar import ANY_VALUE_DEFINITION, bounded_values

    assert bounded_values({"title": "anything"})["$ref"] == f"#/$defs/{ANY_VALUE_DEFINITION}1"
    for schema in ({}, {"description": "anything"}):
        grammar = compile_format(OutputFormat("json_schema", json.dumps(schema))).grammar
        assert accepts(grammar, '{"a": [1, "b", null]}') and accepts(grammar, "2.5") and accepts(grammar, '"x"')
        assert not accepts(grammar, "51843E9518151185907203921") and not accepts(grammar, "1" * 16)
        assert not accepts(grammar, "[[[[[[1]]]]]]")


def test_keys_a_schema_takes_freely_are_bounded_and_no_others() -> None:
    """A map's keys (`dict[str, int]`): the demo target wrote a character sheet's ability `"thrax: 10, stealth:
    13, …, Deception: 15, Deception: 15, …` as one key until max_tokens at T=0 (a held-out schema)."""
    from grammar_helpers import accepts

    from localspec.engine.grammar import COLLECTION_LIMIT, KEY_LENGTH_LIMIT

    def takes(schema: dict, document: str) -> bool:
        return accepts(compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json")).grammar, document)

    scores = {"type": "object", "additionalProperties": {"type": "integer", "maximum": 18}, "maxProperties": 6}
    assert takes(scores, '{"strength": 10, "' + "d" * KEY_LENGTH_LIMIT + '": 18}')
    assert not takes(scores, '{"' + "d" * (KEY_LENGTH_LIMIT + 1) + '": 18}')
    assert not takes(scores, '{"strength": 19}')  # (values as before)
    assert not takes(scores, "{" + ",".join(f'"k{i}": 1' for i in range(7)) + "}")  # (and their count)
    # Keys it lists, or takes by its own pattern, are left as they are: a listed key is no free one.
    listed = {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": {"type": "integer"}}
    assert takes(listed, '{"name": "x", "' + "d" * (KEY_LENGTH_LIMIT + 1) + '": 1}')
    by_pattern = {"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False}
    assert takes(by_pattern, '{"x' + "d" * KEY_LENGTH_LIMIT + '": 1}')
    # Nor where objects merge (llguidance reads no pattern for a branch's `required` key: every bound was lost),
    # nor where a required key is longer; their other bounds stay.
    either = {"type": "object", "additionalProperties": {"type": "string"},
              "anyOf": [{"required": ["email"]}, {"required": ["phone"]}]}
    assert takes(either, '{"email": "x"}') and not takes(either, '{"email": "' + "x" * 300 + '"}')
    long_key = "k" * (KEY_LENGTH_LIMIT + 2)
    required = {"type": "object", "additionalProperties": {"type": "integer"}, "required": [long_key]}
    assert takes(required, '{"' + long_key + '": 1}') and not takes(required, '{"' + long_key + '": 1' + "0" * 20 + "}")
    # A map that refuses some names still holds at most COLLECTION_LIMIT keys.
    refusing = {"type": "object", "propertyNames": {"not": {"const": "default"}},
                "additionalProperties": {"type": "integer"}}
    assert not takes(refusing, "{" + ",".join(f'"k{i}": 1' for i in range(COLLECTION_LIMIT + 1)) + "}")


@pytest.mark.parametrize("schema, message", [
    ({"const": -2**63 + 2}, "the number -9223372036854775806 is too close to -2^63 for llguidance"),
    ({"enum": [1, -2**63]}, "the number -9223372036854775808 is too close to -2^63 for llguidance"),
    ({"properties": {"a": {"type": "integer", "minimum": -2**63 + 2, "maximum": -2**63 + 9}}},
     "the number -9223372036854775806 is too close"),
    ({"type": "integer", "const": -1e308}, "the number -1e+308 is too close to -2^63"),  # (read as -2^63 there)
    # Inside a listed array or object (each ended the process).
    ({"const": [-2**63]}, "the number -9223372036854775808 is too close to -2^63"),
    ({"enum": [{"a": [1, -2**63 + 1000]}]}, "the number -9223372036854774808 is too close to -2^63"),
    ({"const": [-9.223372036854775808e18]}, "the number -9.223372036854776e+18 is too close to -2^63"),
    ({"type": "array", "items": {"type": "integer"}, "const": [-1e19]}, "the number -1e+19 is too close to -2^63"),
    ({"type": "integer", "multipleOf": 2**24}, "multipleOf 16777216 is a multiple of 2^18, which llguidance cannot"),
    ({"type": "number", "multipleOf": 3.0 * 2**20}, "multipleOf 3145728.0 is a multiple of 2^18"),
    ({"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(2500)}}, "2500 definitions, more than the 2000"),
])


def test_a_schema_llguidance_would_crash_or_hang_on_is_one_line(schema: dict[str, Any], message: str) -> None:
    """llguidance ended the process (a segmentation fault) on an exact integer range near -2^63 and on a chain of
    2,500 `$ref`s, and ran on for minutes over a multipleOf of 2^24: one request killed or held `serve`."""
    with pytest.raises(InputError, match="^s\\.json: " + re.escape(message)):
        compile_format(OutputFormat("json_schema", json.dumps(schema), "s.json"))
    for fine in ({"type": "number", "const": -1e308}, {"type": "integer", "multipleOf": 10**6},
                 {"const": [-2**63 + 2048, {"a": [-2**62]}]}):
        compile_format(OutputFormat("json_schema", json.dumps(fine), "s.json"))
    with pytest.raises(InputError, match=r"^s\.json: "):  # (one line from llguidance; it was an OverflowError here)
        compile_format(OutputFormat("json_schema", '{"type": "integer", "multipleOf": ' + "9" * 400 + "}", "s.json"))


@pytest.mark.parametrize("lark", [
    'start: %json {"const": -9223372036854775808}\n',
    'start: "a" | b\nb: %json {"type": "array", "items": {"enum": [[1, -9223372036854775807]]}}\n',
])
def test_a_schema_llguidance_would_crash_on_inside_a_lark_grammar_is_one_line(lark: str) -> None:
    """A grammar's own `%json` schema is read as a schema is (llguidance ended the process on these)."""
    with pytest.raises(InputError, match=r"^g\.lark: the number -922337203685477580[78] is too close to -2\^63"):
        compile_format(OutputFormat("grammar", lark, "g.lark"))
    compile_format(OutputFormat("grammar", 'start: %json {"type": "integer"} | "%json {"\n', "g.lark"))


def test_a_schema_nested_too_deeply_is_one_line() -> None:
    deep = '{"items": ' * 600 + "{}" + "}" * 600
    with pytest.raises(InputError, match=r"^deep\.json: the schema is nested too deeply$"):
        compile_format(OutputFormat("json_schema", deep, "deep.json"))


@pytest.mark.parametrize("keyword", ["maxLength", "maximum", "enum"])
def test_a_number_llguidance_cannot_take_is_one_line(keyword: str) -> None:
    """Said in plain words (llguidance's own: "Value is not JSON serializable: 1000…")."""
    kind, value = {"maxLength": ("string", 10**30), "maximum": ("integer", 10**30),
                   "enum": ("integer", [1, -2**63 - 1])}[keyword]
    schema = f'{{"type": "object", "properties": {{"a": {{"type": "{kind}", "{keyword}": {value}}}}}}}'
    number = 10**30 if keyword != "enum" else -2**63 - 1
    with pytest.raises(InputError, match=rf"^big\.json: the number {number} does not fit llguidance's 64-bit"
                                         r" integers$"):
        compile_format(OutputFormat("json_schema", schema, "big.json"))


def test_a_grammar_that_forces_text_without_end_after_a_choice_is_one_line(tiny_args: list[str], tmp_path: Path) -> None:
    """Past the grammar's first choice, a rule that always needs itself shows only while generating: said in plain
    words (llguidance's "Too many items (limit 50000; ff_tokens)" said nothing of the grammar), exit 2."""
    grammar = tmp_path / "endless.lark"
    grammar.write_text('start: ("a" | "b") more\nmore: "c" more\n')
    one_error_line(run_tiny(tiny_args, "--grammar", str(grammar), "--max-tokens", "8"), 2,
                   "the output format ", "it forces more text without a choice than llguidance follows")


@pytest.mark.slow  # (2 s: llguidance compiles 2500 alternatives)
def test_a_schema_that_fails_only_while_generating_is_bad_input(tiny_args: list[str], tmp_path: Path) -> None:
    """A schema past one of llguidance's limits that its checks let through (2500 items in a row, where it takes
    2000) fails at the first tokens: one line, exit 2, as for any schema it refuses."""
    schema = tmp_path / "wide.json"
    schema.write_text(json.dumps({"enum": [{"a": i} for i in range(2500)]}))
    one_error_line(run_tiny(tiny_args, "--json-schema", str(schema), "--max-tokens", "8"), 2, "output format",
                   "max is 2000")


@pytest.mark.parametrize("word", ["schema", "grammar"])
def test_chat_format_refuses_a_named_pipe_at_once(tmp_path: Path, word: str) -> None:
    """A chat has no shell to make a `<(...)` of: `/format schema FIFO` waited for a writer that never came,
    and the chat hung. (The flags still read a pipe: `--json-schema <(jq ...)`.)"""
    import os

    from localspec.cli.output_format import format_from_command

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused: list[str] = []

    def attempt() -> None:
        try:
            format_from_command(f"{word} {fifo}")
        except InputError as exc:
            refused.append(str(exc))

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # waiting for a writer: let it go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not worker.is_alive() and refused and "not a regular file" in refused[0], refused


def test_an_inline_schema_is_shown_by_its_text_and_a_file_by_its_path(tmp_path: Path) -> None:
    """`/format schema {...}` and `/set` showed an inline schema as "JSON schema /format schema"."""
    from localspec.cli.output_format import format_from_command

    inline = format_from_command('schema {"type": "object",\n    "required": ["name"]}')
    assert inline.describe() == 'JSON schema {"type": "object", "required": ["name"]}'
    long = format_from_command("schema {" + ", ".join(f'"k{i}": {i}' for i in range(40)) + "}")
    assert long.describe().endswith("…") and len(long.describe()) == len("JSON schema ") + 60
    schema_path = tmp_path / "person.json"
    schema_path.write_text('{"type": "object"}', encoding="utf-8")
    assert format_from_command(f"schema {schema_path}").describe() == f"JSON schema {schema_path}"
    for typed in ('{"type":"string","pattern":"^\\\\d+$"}', '{"description": "a \\"quoted\\" word"}'):
        assert json.loads(format_from_command(f"schema {typed}").source) == json.loads(typed)  # (was: shell-unquoted)


def test_a_regexs_digits_and_word_characters_are_ascii_as_in_a_schemas_pattern() -> None:
    """`--regex '\\d{3}'` let the demo model write `𝟡۸۸` (Unicode digits, as Rust's regex reads `\\d`)."""
    from grammar_helpers import accepts

    from localspec.engine.grammar import ascii_shorthands

    assert ascii_shorthands(r"[^\d]\D[\w.]\\d[]\d]") == r"[^0-9][^0-9][0-9A-Za-z_.]\\d[]0-9]"
    digits = compile_format(OutputFormat("regex", r"\d{3}-\w+", "--regex")).grammar
    assert accepts(digits, "123-ab_9") and not accepts(digits, "𝟡۸۸-ab") and not accepts(digits, "123-é")
    others = compile_format(OutputFormat("regex", r"\D\W", "--regex")).grammar
    assert accepts(others, "۸!") and not accepts(others, "5!") and not accepts(others, "a_")


@pytest.mark.slow
def test_a_forced_text_the_vocabulary_cannot_write_is_said_in_plain_words(tiny_profile: str) -> None:
    """The tiny vocabulary has no lone "▁": llama.cpp's tokenizer writes a forced space as that piece's first byte.
    (was: llguidance's `Parser Error: token "�" doesn't satisfy the grammar; forced bytes: got ' '; applying 'â'`)"""
    result = cli("run", "-p", "tiny", "--seed", "1", "--regex", "xx yy", "x")
    one_error_line(result, 2, "the format forces here (' ') with tokens that write 'â': its vocabulary cannot write")


@pytest.mark.parametrize(("typed", "name"), [
    ("my chat.json", "my chat.json"),  # (spaces need no quotes)
    ("chat's notes.json", "chat's notes.json"), ('trail.json"', 'trail.json"'),  # (as typed: no quote begins it)
    ('"my chat.json"', "my chat.json"), ("'my chat.json'", "my chat.json"), ("my\\ chat.json", "my chat.json"),
    ("'it'\\''s.json'", "it's.json"),
])
def test_a_chat_commands_file_name_is_read_as_a_shell_reads_a_quoted_or_escaped_one(typed: str, name: str) -> None:
    from localspec.cli.typed_paths import typed_path

    assert typed_path(typed) == Path(name)


def test_a_chat_commands_file_name_expands_variables_where_a_shell_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """(was: `$5` in a name could not be escaped: no file named `price$5.json` could be written)"""
    from localspec.cli.typed_paths import typed_path

    monkeypatch.setenv("NOTES", "/tmp/notes")
    for typed, name in [("'price$5.json'", "price$5.json"), ("price\\$5.json", "price$5.json"),
                        ('"$NOTES/a b.json"', "/tmp/notes/a b.json"), ("${NOTES}/x.json", "/tmp/notes/x.json"),
                        ("'$NOTES'/x", "$NOTES/x"), ('"a\\b\\"c"', 'a\\b"c'), ("'a'\\$NOTES", "a$NOTES")]:
        assert typed_path(typed) == Path(name), typed
    with pytest.raises(InputError, match=r"\$UNSET_HERE is not set"):
        typed_path('"$UNSET_HERE.json"')


@pytest.mark.parametrize(("typed", "message"), [
    ("'a'b'", "a quote is not closed"), ('"x.json', "a quote is not closed"), ("x\\", "a backslash ends it"),
    ('"x.json" extra', "give one file name"),  # (was: "the quote it opens is not closed")
])
def test_a_chat_commands_file_name_with_unbalanced_quotes_is_refused(typed: str, message: str) -> None:
    from localspec.cli.typed_paths import typed_path

    with pytest.raises(InputError, match=message):
        typed_path(typed)
