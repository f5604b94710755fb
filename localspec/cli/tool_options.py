"""`run --tools FILE [--tool-choice auto|required|NAME]`: offer tools to the model and print its calls as JSON.

FILE is a JSON list of tool definitions in OpenAI's shape (`{"type": "function",
"function": {"name", "description", "parameters"}}`). The prompt is rendered with
them, the output is held to the model's call syntax (see `app.tool_calls`), and
what the model answers is printed whole at the end: its calls as one JSON
object, `{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}`, or its text
as it is. Output cut short (max_tokens, a stop string) is printed as text with
one line on stderr and exit code 1.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import click

from ..app.session import Session
from ..app.thinking_first import prompt_end, tools_think_otherwise
from ..app.tool_calls import (
    ToolCall,
    ToolError,
    ToolRequest,
    ToolSetup,
    chat_input,
    check_parameters,
    check_tools,
    marker_tokens,
    prepare_tools,
    tool_request,
)
from ..config.files import parse_user_json, read_user_text
from ..config.paths import user_path
from ..engine.generation import Generation
from ..errors import InputError
from .common import STDIN, file_from_stdin, write_stdout
from .options import all_of
from .output_format import cut_short_message

TOOL_OPTIONS = all_of(
    click.option("--tools", "tools_file", metavar="FILE", type=click.Path(),
                 help="Offer the tools in FILE (a JSON list, OpenAI's shape; - reads stdin) and print the calls as"
                      " JSON."),
    click.option("--tool-choice", "tool_choice", metavar="auto|required|NAME",
                 help="With --tools: let the model choose (auto, the default), make it call a tool "
                      "(required), or call the tool NAME."),
)


def tool_run_from_options(options: dict[str, Any], constrained: bool, stdin_taken: str | None = None) -> ToolRun | None:
    """A `ToolRun` for --tools (None without it); `constrained`: --raw or an output format was given too;
    `stdin_taken`: what else reads stdin (None: `--tools -` may)."""
    if constrained and options.get("tools_file") is not None:
        raise click.UsageError("--tools cannot be combined with --raw or an output format")
    request = tools_from_options(options, stdin_taken)
    return None if request is None else ToolRun(request)


def tools_from_options(options: dict[str, Any], stdin_taken: str | None = None) -> ToolRequest | None:
    """The tools the options offer (None: no --tools; `-`: stdin's, unless `stdin_taken` names what reads it);
    removes both options from `options`. Bad input is InputError."""
    path, choice = options.pop("tools_file", None), options.pop("tool_choice", None)
    if path is None:
        if choice is not None:
            raise InputError("--tool-choice needs --tools FILE")
        return None
    if path == STDIN:
        path, text = "stdin", file_from_stdin("--tools", stdin_taken)
    else:
        path = user_path(path, "--tools")
        text = read_user_text(path, pipes_ok=True)
    definitions = parse_user_json(text, path)
    try:
        tools = check_tools(definitions, where=str(path))
        if choice is not None and choice not in ("auto", "required", "none"):
            choice = {"type": "function", "function": {"name": choice}}
        request = tool_request([tool.definition for tool in tools], choice)
    except ToolError as exc:
        raise InputError(f"{exc}".replace("tool_choice", "--tool-choice")) from None
    if request is None:
        if not tools:
            raise InputError(f"{path}: holds no tools (an empty list): leave out --tools instead")
        raise InputError("--tool-choice none offers no tools: leave out --tools instead")
    try:
        check_parameters(request)  # (before any model loads)
    except ToolError as exc:
        raise InputError(str(exc).replace("tools[", f"{path}[", 1)) from None
    return request


class ToolRun:
    """One `run` with tools: the prompt rendered with them, the grammar, the answer printed."""

    def __init__(self, request: ToolRequest) -> None:
        self.request = request
        self.setup: ToolSetup | None = None

    def prompt_tokens(self, session: Session, messages: list[dict[str, Any]], budget: int | None = None) -> list[int]:
        """The chat prompt with the tools offered, in the session's model's own syntax; `budget`: the most tokens a
        thought before the calls may hold."""
        template = session.chat_template()
        self.setup = prepare_tools(self.request, template, marker_tokens(session.target), budget=budget)
        for warning in self.setup.warnings:
            click.echo(f"localspec: warning: {warning}", err=True)
        rendered, definitions = chat_input(messages, self.setup, template)
        tokens = session.chat_prompt_tokens(rendered, definitions)
        thinking, end = self.setup.thinking, prompt_end(session.target, tokens)
        if thinking is not None and tools_think_otherwise(thinking, end):  # (a template variable's doing)
            self.setup = prepare_tools(self.request, template, marker_tokens(session.target), end, budget)
        return tokens

    @property
    def grammar(self) -> str | None:
        return self.setup.grammar if self.setup is not None else None

    def calls(self, generation: Generation) -> list[ToolCall] | None:
        """The calls of a whole output (None: plain text, or cut short)."""
        if self.setup is None or cut_short_message(generation.stop_reason) is not None:
            return None
        return self.setup.calls_in(self.setup.answer(generation.text).content)

    def print_answer(self, generation: Generation) -> None:
        """The calls as one JSON object, or the text (output cut short is text: `run` then says so and exits 1)."""
        calls = self.calls(generation)
        if calls:
            write_stdout(json_with_calls({}, calls) + "\n")
            return
        # (a thinking model's answer without the thought its grammar let come first, as `serve` sends it)
        text = self.setup.answer(generation.text).content if self.setup is not None else generation.text
        write_stdout(text + ("" if text.endswith("\n") else "\n"))


def json_with_calls(report: dict[str, Any], calls: list[ToolCall] | None) -> str:
    """`report` as one line of JSON with "tool_calls" added (null where there are none), calls as scripts read
    them: the name, and the arguments as an object, written as the model wrote them (Python would read 1e999 as
    infinity and write `Infinity`, which is no JSON)."""
    if not calls:
        return json.dumps({**report, "tool_calls": None}, ensure_ascii=False)
    holders = [f"arguments-{uuid.uuid4().hex}" for _ in calls]
    listed = [{"name": call.name, "arguments": holder} for call, holder in zip(calls, holders)]
    text = json.dumps({**report, "tool_calls": listed}, ensure_ascii=False)
    for call, holder in zip(calls, holders):
        text = text.replace(json.dumps(holder), call.arguments, 1)
    return text
