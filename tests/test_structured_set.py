"""The built-in structured-output set, and `bench` over it (`--structured`, `--json-schema`) on tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from cli_helpers import cli, one_error_line, run_script, script_module
from conftest import TINY_TEMPLATE
from tiny_models import write_pair

from localspec.app.structured_set import StructuredCase, structured_set
from localspec.config.paths import user_profiles_dir
from localspec.engine.grammar import compile_format
from localspec.runtime.model import Model

CASES = structured_set()
FIRST_BYTE_TOKEN = 3  # tiny_models.vocabulary: <unk>, <s>, </s>, then the 256 byte tokens in order


def _keywords(schema: object) -> set[str]:
    """Every keyword used anywhere in a schema (plus `format:<name>` for each format)."""
    if isinstance(schema, list):
        return set().union(*map(_keywords, schema)) if schema else set()
    if not isinstance(schema, dict):
        return set()
    found = set(schema) | ({f"format:{schema['format']}"} if isinstance(schema.get("format"), str) else set())
    nested = [value for key, value in schema.items() if key in ("properties",)]
    children = [child for props in nested for child in props.values()]
    children += [value for key, value in schema.items() if key not in ("properties", "enum", "const")]
    return found | set().union(*map(_keywords, children)) if children else found


def test_the_set_is_large_and_covers_the_schema_features() -> None:
    assert len(CASES) >= 20 and len({case.name for case in CASES}) == len(CASES)
    used = _keywords([case.schema for case in CASES])
    assert {"enum", "items", "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum", "pattern", "anyOf",
            "const", "additionalProperties", "format:date", "format:email", "format:ipv4", "format:uuid"} <= used
    assert any(set(case.schema.get("required", [])) < set(case.schema.get("properties", {})) for case in CASES)  # optional fields
    nested = [case for case in CASES if any(p.get("type") == "object" for p in case.schema.get("properties", {}).values())]
    assert nested


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
@pytest.mark.slow
def test_every_schema_is_valid_compiles_cleanly_and_accepts_its_example(case: StructuredCase) -> None:
    jsonschema.Draft202012Validator.check_schema(case.schema)
    compiled = compile_format(case.output_format())
    assert compiled.grammar and compiled.warnings == ()  # llguidance enforces every keyword the set uses
    validator = jsonschema.Draft202012Validator(case.schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    validator.validate(case.example)
    assert case.prompt.strip() and "JSON" in case.prompt


def test_every_grammar_accepts_its_example_token_by_token(tiny_pair: tuple[Path, Path]) -> None:
    """The compiled grammars, as the generation loop holds them, accept the examples written as json.dumps does,
    spelled in the tiny vocabulary's byte tokens."""
    from llguidance import LLMatcher

    with Model(tiny_pair[0]) as model:
        tokenizer = model.grammar_tokenizer()
        for case in CASES:
            tokens = [FIRST_BYTE_TOKEN + byte for byte in json.dumps(case.example, ensure_ascii=False).encode()]
            matcher = LLMatcher(tokenizer, compile_format(case.output_format()).grammar, log_level=0)
            assert matcher.validate_tokens(tokens) == len(tokens), case.name
            assert matcher.consume_tokens(tokens) and matcher.is_accepting(), case.name


@pytest.fixture(scope="module")
def long_context_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny pair whose context holds the set's prompts (their bytes are tokens on the tiny vocabulary)."""
    return write_pair(tmp_path_factory.mktemp("tiny-1k"), context_length=1024)


@pytest.fixture
def long_context_profile(long_context_pair: tuple[Path, Path]) -> str:
    """A user profile "tiny1k" on that pair, with a chat template, one thread per model (tiny models need no more,
    and a loaded machine slows many threads most)."""
    path = user_profiles_dir() / "tiny1k.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    target, draft = long_context_pair
    path.write_text(f'[target]\npath = "{target}"\nn_threads = 1\n[draft]\npath = "{draft}"\nn_threads = 1\n'
                    f'[chat]\ntemplate = "{TINY_TEMPLATE}"\n')
    return "tiny1k"


STRUCTURED_FIELDS = {
    "constrained_speedup", "free_speedup", "constrained_speculative_tokens_per_second",
    "constrained_baseline_tokens_per_second", "speculative_mask_ms_per_token", "baseline_mask_ms_per_token",
    "speculative_forced_tokens", "baseline_forced_tokens", "complete_speculative", "complete_baseline",
    "identical_prompts", "free_identical_prompts", "runs",
}


@pytest.mark.slow  # over a third of a second: a subprocess
def test_per_pass_profile_of_structured_output_times_the_grammar_masks(long_context_profile: str) -> None:
    result = run_script("profile_passes", "-p", long_context_profile, "--structured", "--prompts", "2", "--tokens", "24",
                        "--strategy", "model", "--temperatures", "0", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    for row in json.loads(result.stdout):
        assert row["ms_per_pass_by_part"]["grammar masks (target rows)"] > 0
        assert 0 < row["forced_share"] < 1  # the schemas' first keys are forced, their values are not
        assert row["tokens_per_pass"] >= 1


@pytest.mark.slow  # over a third of a second: a subprocess
def test_profile_passes_refuses_structured_with_its_own_prompts_in_one_line(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    result = run_script("profile_passes", "--structured", "--prompts-file", str(prompts), timeout=60)
    assert result.returncode == 2 and "not with --prompts-file" in result.stderr and "Traceback" not in result.stderr


def test_bench_structured_reports_constrained_and_free_side_by_side(long_context_profile: str) -> None:
    result = cli("bench", "-p", long_context_profile, "--structured", "--limit", "1", "--max-tokens", "12",
                 "--temperatures", "1", "--draft-max", "3", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schemas"] == [CASES[0].name] and report["prompts"] == 1
    (row,) = report["results"]
    assert STRUCTURED_FIELDS <= set(row) and row["runs"] == 1 and row["temperature"] == 1.0
    assert row["constrained_speedup"] == pytest.approx(
        row["constrained_speculative_tokens_per_second"] / row["constrained_baseline_tokens_per_second"])
    assert row["speculative_tokens"] == row["baseline_tokens"] > 0
    # The schema's opening `{"name": "` is forced, and the target's masks were timed.
    assert row["baseline_forced_tokens"] > 0 and row["baseline_mask_ms_per_token"] > 0
    # Coupled verification: constrained and free speculative outputs are the target-only ones, at T=1 too.
    assert row["identical_prompts"] == row["free_identical_prompts"] == 1


@pytest.mark.slow
def test_bench_json_schema_holds_every_prompt_to_one_schema(long_context_profile: str, tmp_path: Path) -> None:
    schema = tmp_path / "answer.json"
    schema.write_text('{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],'
                      ' "additionalProperties": false}')
    result = cli("bench", "-p", long_context_profile, "--json-schema", str(schema), "--prompts", "2",
                 "--max-tokens", "160", "--temperatures", "0", "--draft-max", "2", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schemas"] == [str(schema)] and report["prompts"] == 2
    (row,) = report["results"]
    assert row["runs"] == 2 and row["identical_prompts"] == 2
    # Past `{"answer": "`, yes or no and the closing brace, only bounded whitespace is free: every output is
    # complete, even on a random model.
    assert row["complete_speculative"] == row["complete_baseline"] == 2



@pytest.mark.slow
def test_bench_says_why_a_row_reads_zero_where_no_token_was_timed(long_context_profile: str) -> None:
    """(was: `0.0 tok/s`, `0.00x` in the table, without a word)"""
    result = cli("bench", "-p", long_context_profile, "--raw", "--prompt", "x", "--json-schema",
                 '{"type": "string", "pattern": "^(a+)+$"}', "--max-tokens", "2", "--temperatures", "0",
                 "--strategy", "ngram", "--draft-max", "2")
    assert result.exit_code == 0 and "0.0 tok/s" in result.stdout, result.stderr
    assert "no token of its outputs was timed" in result.stderr

@pytest.mark.parametrize("args, fragment", [
    (("--structured", "--json-schema", "{}"), "not both"),
    (("--structured", "--prompts", "2"), "its own prompts"),
    (("--prompt", "hi", "--prompts", "2"), "--prompt or --prompts"),
    (("--limit", "2",), "with --structured"),
    (("--structured", "--save"), "--save tunes free generation"),
    (("--json-schema", '{"type": "nope"}'), "--json-schema"),
])
def test_bench_refuses_conflicting_structured_options_in_one_line(args: tuple[str, ...], fragment: str) -> None:
    one_error_line(cli("bench", *args), 2, fragment)


def test_the_check_script_fails_what_does_not_parse_validate_or_finish() -> None:
    check_output = script_module("check_structured").check_output
    case = next(case for case in CASES if case.name == "contact_card")
    good = json.dumps(case.example)
    assert check_output(good, False, case.schema) == ""
    assert check_output(good, True, case.schema) == "cut short by max_tokens"
    assert check_output(good[:-1], False, case.schema).startswith("not JSON")
    bad_email = json.dumps({**case.example, "email": "tomasz at nordvik"})
    assert "does not validate" in check_output(bad_email, False, case.schema) and "email" in check_output(bad_email, False, case.schema)
    extra = json.dumps({**case.example, "company": "Nordvik"})
    assert "does not validate" in check_output(extra, False, case.schema)


def test_the_check_script_takes_prices_to_the_cent_that_float_division_refuses() -> None:
    check_output = script_module("check_structured").check_output
    price = {"type": "object", "properties": {"amount": {"type": "number", "multipleOf": 0.01, "maximum": 1.5},
                                              "count": {"type": "integer"}}}
    assert check_output('{"amount": 0.07, "count": 3}', False, price) == ""  # 0.07 / 0.01 = 7.000000000000001
    assert check_output('{"amount": 1.11, "count": 3.0}', False, price) == ""
    assert "multiple" in check_output('{"amount": 0.075}', False, price)
    assert "maximum" in check_output('{"amount": 1.51}', False, price)
    assert "integer" in check_output('{"count": 3.5}', False, price)


@pytest.mark.slow
def test_the_check_script_runs_both_doors_and_exits_by_its_count(long_context_profile: str) -> None:
    """End to end on the tiny pair (its random outputs may or may not validate: the exit status must say which)."""
    result = run_script("check_structured", "-p", long_context_profile, "--limit", "1", "--max-tokens", "64",
                        "--temperatures", "0.8", "--json")
    report = json.loads(result.stdout)
    assert report["outputs"] == 4 and set(report["by_group"]) == {
        f"{door} T=0.8 {mode}" for door in ("api", "serve") for mode in ("speculative", "target-only")}
    assert result.returncode == (0 if report["valid"] == 4 else 1), result.stderr
    assert len(report["failures"]) == 4 - report["valid"]
    # Coupled verification and the same seed: each door's speculative text is its target-only text.
    assert report["speculative_identical_to_target_only"] == {"api": "1/1", "serve": "1/1"}


def test_the_check_script_reads_a_folder_of_schemas_and_refuses_a_bad_one_in_one_line(tmp_path: Path) -> None:
    cases_from_folder = script_module("check_structured").cases_from_folder
    (tmp_path / "b.json").write_text('{"type": "integer"}')
    (tmp_path / "b.txt").write_text("A number, please.\n")
    (tmp_path / "a.json").write_text('{"type": "string", "maxLength": 5}')
    (tmp_path / "a.txt").write_text("A word.")
    (tmp_path / "notes.txt").write_text("not a prompt of any schema")
    cases = cases_from_folder(tmp_path)
    assert [(case.name, case.prompt, case.schema) for case in cases] == [
        ("a", "A word.", {"type": "string", "maxLength": 5}), ("b", "A number, please.", {"type": "integer"})]
    (tmp_path / "c.json").write_text('{"type": "string"}')
    with pytest.raises(SystemExit, match=r"c\.txt: cannot read it"):
        cases_from_folder(tmp_path)
    (tmp_path / "c.txt").write_text("x")
    (tmp_path / "c.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match=r"c\.json: a JSON schema must be a JSON object"):
        cases_from_folder(tmp_path)
    with pytest.raises(SystemExit, match="no NAME.json schemas"):
        cases_from_folder(tmp_path / "a.txt")
