"""The output-format flags of `run` and `chat` (`--format json`, `--json-schema`, `--grammar`, `--regex`).

Declared once here (`OUTPUT_FORMAT_OPTIONS`); `output_format_from_options`
turns what was given into an `OutputFormat` (at most one of the four, files
read as UTF-8), `compile_output_format` checks it before any model loads and
prints llguidance's warnings, and `format_from_command` reads chat's
`/format json|off|schema FILE|grammar FILE|regex PATTERN`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import click

from ..config.files import read_user_text
from ..config.paths import user_path
from ..engine.generation import StopReason
from ..engine.grammar import CompiledGrammar, OutputFormat, compile_format
from ..errors import InputError
from ..textin import clean_input
from .common import STDIN, file_from_stdin
from .options import all_of
from .typed_paths import first_word, typed_path

FLAGS = ("--format", "--json-schema", "--grammar", "--regex")
_PARAMS = ("output_format", "json_schema", "grammar", "regex")
FORMAT_COMMAND_USAGE = "/format json|off|schema FILE_OR_JSON|grammar FILE|regex PATTERN"


OUTPUT_FORMAT_OPTIONS = all_of(
    click.option("--format", "output_format", type=click.Choice(["json"]),
                 help="Hold the output to a valid JSON object (any JSON value: --json-schema '{}')."),
    click.option("--json-schema", "json_schema", metavar="FILE_OR_JSON",
                 help="Hold the output to a JSON schema: a file (run: - reads stdin), or the schema itself as"
                      " JSON."),
    click.option("--grammar", "grammar", metavar="FILE", type=click.Path(),
                 help="Hold the output to a grammar file (run: - reads stdin): llguidance's Lark syntax, or"
                      " llama.cpp's GBNF."),
    click.option("--regex", "regex", metavar="PATTERN", help="Hold the output to a regular expression."),
)


def output_format_from_options(options: dict[str, Any], stdin_taken: str | None = None) -> OutputFormat | None:
    """The format the parsed options ask for (None: no constraint); removes the four options from `options`.

    More than one given is a usage error (exit 2); a file that cannot be read is an InputError naming it. A file
    given as `-` is stdin, where it is free (`stdin_taken`: else what reads it, said in the usage error).
    """
    given = {flag: options.pop(param, None) for flag, param in zip(FLAGS, _PARAMS)}
    given = {flag: value for flag, value in given.items() if value is not None}
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)} cannot be combined: give one of {', '.join(FLAGS)}")
    if not given:
        return None
    flag, value = next(iter(given.items()))
    if value == STDIN and flag in ("--json-schema", "--grammar"):
        kind = "json_schema" if flag == "--json-schema" else "grammar"
        return OutputFormat(kind, file_from_stdin(flag, stdin_taken), "stdin")
    if flag == "--format":
        return OutputFormat("json", "", "--format json")
    if flag == "--json-schema":
        return schema_format(value)
    if flag == "--grammar":
        return grammar_format(value)
    return OutputFormat("regex", clean_input(value, "--regex"), "--regex")


def schema_format(value: str, given_as: str = "--json-schema", pipes_ok: bool = True) -> OutputFormat:
    """`--json-schema` / `/format schema`: inline JSON when it starts with '{' or, naming no file, is JSON of
    another kind ('[1,2]', '42': refused as a schema when it is parsed), else a file's text (or a pipe's, where
    `pipes_ok`: a flag's `<(jq ...)`; elsewhere, a chat's command, the file's `$VARIABLES` expanded, as a shell
    expands a flag's)."""
    if value.lstrip().startswith("{"):
        return OutputFormat("json_schema", clean_input(value, given_as), given_as, inline=True)
    path = _file_named(value, given_as, pipes_ok)
    if not os.path.lexists(path) and _is_json(value) and not value.lstrip().startswith('"'):  # ("x": a file's name)
        return OutputFormat("json_schema", clean_input(value, given_as), given_as, inline=True)
    return OutputFormat("json_schema", read_user_text(path, pipes_ok=pipes_ok), str(path))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def grammar_format(value: str, given_as: str = "--grammar", pipes_ok: bool = True) -> OutputFormat:
    """`--grammar` / `/format grammar`: a grammar file's text (Lark or GBNF; a pipe's too, where `pipes_ok`)."""
    path = _file_named(value, given_as, pipes_ok)
    return OutputFormat("grammar", read_user_text(path, pipes_ok=pipes_ok), str(path))


def _file_named(value: str, given_as: str, from_a_shell: bool) -> Path:
    """The file a flag (which the shell expanded) or a chat's command (read as a shell would: `typed_path`) names."""
    return user_path(value, given_as) if from_a_shell else typed_path(value, given_as)


def compile_output_format(fmt: OutputFormat | None, warn: Callable[[str], None] | None = None) -> CompiledGrammar | None:
    """Compile `fmt` (None stays None), passing each of llguidance's warnings to `warn` (default: stderr)."""
    if fmt is None:
        return None
    compiled = compile_format(fmt)
    for warning in compiled.warnings:
        (warn or _warn_on_stderr)(f"localspec: warning: {warning}")
    return compiled


def format_from_command(argument: str) -> OutputFormat | None:
    """Chat's `/format ARGUMENT`: the new format, or None for `off`; bad input is InputError."""
    word, rest = first_word(argument)
    rest = rest.strip()
    if word == "off" and not rest:
        return None
    if word == "json" and not rest:
        return OutputFormat("json", "", "--format json")
    if word in ("schema", "grammar", "regex") and rest:
        # No pipes: a chat has no shell to make a `<(...)`, and a named one would hold the chat until written to.
        if word == "schema":  # (inline JSON as typed, its backslashes too; else a file's name, quoted or not)
            return schema_format(rest, "/format schema", pipes_ok=False)
        if word == "grammar":
            return grammar_format(rest, "/format grammar", pipes_ok=False)
        return OutputFormat("regex", rest, "/format regex")
    raise InputError(FORMAT_COMMAND_USAGE)


def cut_short_message(stop_reason: StopReason | str | None, matches_format: bool = False) -> str | None:
    """Why constrained output is not complete; None where it is: the generation ended on EOS (the format, or the
    model where the format let it, ended it). Output cut short that `matches_format` whole (`Generation.matches_format`:
    `123` of an integer, any text of `.*`) is said to, and is still cut short: more was to come."""
    if stop_reason == StopReason.EOS:
        return None
    cause = {
        StopReason.LENGTH: "max_tokens or the context",
        StopReason.STOP: "a stop string",
        StopReason.INTERRUPTED: "an interruption",
    }.get(stop_reason, "an interruption")  # type: ignore[call-overload]
    verdict = "it matches the format, but the model had not finished" if matches_format else "it may not match the format"
    return f"output cut short by {cause} (stop reason {stop_reason}): {verdict}"


def _warn_on_stderr(text: str) -> None:
    click.echo(text, err=True)
