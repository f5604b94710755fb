"""Tool calls: definitions checked, the model's call syntax, the grammar that holds output to it, calls parsed back.

A request's `tools` (OpenAI's `{"type": "function", "function": {"name",
"description", "parameters"}}`) and `tool_choice` become a `ToolRequest`. The
chat template decides how the model writes a call (`detect_syntax`):

- `hermes`: Qwen2.5, Hermes and others whose template shows `<tool_call>`:
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, one block per call;
- `llama3`: Llama 3.1 to 3.3's JSON tool calling: one object `{"name": ..., "parameters": {...}}`;
- `xml`: Qwen3-Coder, Qwen3.5, Nemotron 3 Nano and others whose template shows `<function=` and
  `<parameter=` inside `<tool_call>`: each parameter in tags of its own, a string as its text;
  `arg-keys`: GLM 4.5 to 4.7 and others whose template shows `<arg_key>`: the name, then
  `<arg_key>…</arg_key><arg_value>…</arg_value>` per parameter (the layout of both read from the
  template's own rendering of a call: see `tool_call_xml`);
- `mistral`: Mistral 7B v0.3 and Nemo, whose template shows `[TOOL_CALLS]`: the marker, then a JSON list
  `[{"name": ..., "arguments": {...}, "id": ...}, ...]` (the id, nine letters or digits, optional);
- `mistral-args`: Mistral Small 3.2, Magistral, Devstral, whose template shows `[ARGS]` too:
  `[TOOL_CALLS]name[ARGS]{...}` per call (a `[CALL_ID]` and its id between them, optional);
- `json`: a template with no tool syntax (SmolLM2's): the tools are described in a
  system message and a reply that calls them is one object
  `{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}`.

`tool_grammar` writes the Lark grammar (for llguidance) that holds the output
to that syntax: one alternative per tool, so the name fixes the schema the
arguments follow (`%json`). A marker that is one special token of the model's
vocabulary (Mistral's `[TOOL_CALLS]`) is named as that token, which the
generation then shows as its text; other markers are spelled out. `required` or a named tool forces a call; `auto`
allows plain text too, which then may not start like a call. `parse_calls`
reads the calls back from a finished output; `CallStream` decides, as text
streams in, whether it is plain text (passed on at once) or a call (held
until the end).

Definitions and messages arrive with their text cleaned (`parse_request` and
`parse_user_json` replace lone surrogates in every string); only the JSON text
of earlier calls' `arguments` is parsed, and so cleaned, here.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from dataclasses import dataclass
from functools import lru_cache
from enum import Enum
from typing import Any, Callable, Sequence, TypeVar

from ..engine.calls_cursor import call_schemas
from ..engine.grammar import (
    NOTHING_SATISFIES,
    CompiledGrammar,
    OutputFormat,
    closed_object,
    compile_format,
    fitted_schema,
    refuse_unusable_schema,
    value_error_message,
)
from ..engine.schema_places import survey_held
from ..errors import InputError, LocalspecError
from ..runtime.chat_template import render_chat
from ..textin import clean_data
from .harmony import HarmonySplitter, thinking_rules as harmony_rules
from .reasoning import (
    Sorted,
    Splitter,
    Thinking,
    ThoughtSplitter,
    sorted_whole,
    template_thinking,
    thinking_rules,
)
from .tool_call_frames import CallFrame, ends_as_closing, grammar_text, read_parts, template_frame
from .tool_call_gemma import OPEN as GEMMA_OPEN, gemma_problem, gemma_rules, read_gemma_calls, writes_gemma_calls
from .tool_call_pythonic import (
    CLOSE as PYTHONIC_CLOSE,
    OPEN as PYTHONIC_OPEN,
    pythonic_calls_rule,
    pythonic_problem,
    pythonic_rules,
    read_pythonic_calls,
    writes_pythonic_calls,
)
from .tool_call_xml import (  # (TOOL_NAME: OpenAI's rule for function names; the whole name: fullmatch)
    ARG_KEYS,
    TOOL_NAME,
    QWEN_XML,
    XmlLayout,
    function_rules,
    layout_shown,
    probe_call,
    read_function,
    regex_text,
    tagged_problem,
    writes_as_text,
)

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"  # what a Hermes call is written between
MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"  # Mistral's markers
MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")  # the call ids Mistral's templates take (the whole id: fullmatch)
CHOICES = ("auto", "required", "none")
# How the arguments are written inside a call: compact separators as json.dumps writes them (and the templates
# render earlier calls), no free whitespace for a small model to loop on. `lenient`: schema keywords llguidance
# does not implement (`uniqueItems`, `not`, an unknown `format`, ...) are warnings, not errors, as for
# response_format; the rest of the schema is still enforced.
ARGUMENT_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}
_SCHEMA_FAILURE = re.compile(r"^line \d+, column \d+: (?:failed to compile JSON schema: )?")
MAX_CALLS = 4  # calls in one reply, at most: a small model can otherwise repeat calls until max_tokens


class ToolError(InputError):
    """A tool definition, tool choice or tool message that is not right; `param` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class ToolSyntax(str, Enum):
    HERMES = "hermes"
    XML = "xml"
    ARG_KEYS = "arg-keys"
    LLAMA3 = "llama3"
    MISTRAL = "mistral"
    MISTRAL_ARGS = "mistral-args"
    FRAMED = "framed"  # JSON arguments framed by the template's own texts (`tool_call_frames`)
    GEMMA = "gemma"  # Gemma 4's `<|tool_call>call:NAME{key:VALUE}<tool_call|>` (`tool_call_gemma`)
    PYTHONIC = "pythonic"  # LFM2.5's `<|tool_call_start|>[name(key='text')]<|tool_call_end|>` (`tool_call_pythonic`)
    JSON = "json"

    @property
    def is_mistral(self) -> bool:
        return self in (ToolSyntax.MISTRAL, ToolSyntax.MISTRAL_ARGS)

    @property
    def has_tagged_parameters(self) -> bool:
        """Each parameter in tags of its own, a string as its text (`tool_call_xml`)."""
        return self in (ToolSyntax.XML, ToolSyntax.ARG_KEYS)

    def opening(self, frame: CallFrame | None = None) -> str:
        """What a reply that makes calls starts with (after whitespace); for FRAMED, `frame`'s opening."""
        if self is ToolSyntax.FRAMED and frame is not None:
            return frame.opening_text.lstrip()  # (as the stream and the reader skip whitespace first)
        if self in (ToolSyntax.HERMES, ToolSyntax.XML, ToolSyntax.ARG_KEYS):
            return OPEN_TAG
        if self is ToolSyntax.GEMMA:
            return GEMMA_OPEN
        if self is ToolSyntax.PYTHONIC:
            return PYTHONIC_OPEN
        return MISTRAL_CALLS if self.is_mistral else "{"


@dataclass(frozen=True)
class Tool:
    """One function the model may call: its name, its arguments' JSON schema, and its definition as given."""

    name: str
    parameters: dict[str, Any]
    definition: dict[str, Any]


@dataclass(frozen=True)
class ToolRequest:
    """The tools offered and how the model must use them: `choice` is "auto", "required" or one tool's name."""

    tools: tuple[Tool, ...]
    choice: str = "auto"
    parallel: bool = True

    @property
    def callable(self) -> tuple[Tool, ...]:
        """The tools the grammar lets the model call (a named choice: only that one)."""
        if self.choice in ("auto", "required"):
            return self.tools
        return tuple(tool for tool in self.tools if tool.name == self.choice)

    @property
    def several(self) -> bool:
        """The reply may hold more than one call (parallel calls allowed, and no single tool named)."""
        return self.parallel and self.choice in ("auto", "required")

    @property
    def forced(self) -> bool:
        """The reply must be a call (no plain text)."""
        return self.choice != "auto"

    def definitions(self) -> list[dict[str, Any]]:
        """The definitions as the chat template reads them."""
        return [tool.definition for tool in self.tools]


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: `arguments` is the JSON text of the arguments object."""

    name: str
    arguments: str
    id: str = ""

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


# -- checking a request ---------------------------------------------------------------------------


def tool_request(tools: Any, choice: Any = None, parallel: Any = None) -> ToolRequest | None:
    """The request's tools checked (None: no tools to offer, or `tool_choice` "none"); ToolError names the field."""
    if parallel is not None and not isinstance(parallel, bool):
        raise ToolError(f"parallel_tool_calls must be true or false, got {_quote(parallel)}", "parallel_tool_calls")
    checked = check_tools(tools) if tools is not None else ()
    chosen = _choice(choice, checked)
    if not checked or chosen == "none":
        return None
    return ToolRequest(checked, chosen, parallel if parallel is not None else True)


def check_tools(tools: Any, where: str = "tools") -> tuple[Tool, ...]:
    """A list of OpenAI tool definitions checked: function tools with a valid, unique name and object parameters."""
    if not isinstance(tools, list):
        raise ToolError(f"{where} must be a list of {{\"type\": \"function\", \"function\": {{...}}}} objects", where)
    checked: list[Tool] = []
    for index, tool in enumerate(tools):
        checked.append(_tool(tool, f"{where}[{index}]"))
        if any(earlier.name == checked[-1].name for earlier in checked[:-1]):
            raise ToolError(f"{where}[{index}].function.name {checked[-1].name!r} is given twice",
                            f"{where}[{index}].function.name")
    return tuple(checked)


def _tool(tool: Any, where: str) -> Tool:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise ToolError(f"{where} must be {{\"type\": \"function\", \"function\": {{...}}}}, got {_quote(tool)}", where)
    function = tool.get("function")
    if not isinstance(function, dict):
        raise ToolError(f"{where}.function must be an object with name, description and parameters", f"{where}.function")
    name = function.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise ToolError(f"{where}.function.name must be 1 to 64 letters, digits, '_' or '-', got {_quote(name)}",
                        f"{where}.function.name")
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise ToolError(f"{where}.function.description must be a string", f"{where}.function.description")
    if function.get("strict") is not None and not isinstance(function["strict"], bool):
        raise ToolError(f"{where}.function.strict must be true or false, got {_quote(function['strict'])}",
                        f"{where}.function.strict")
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict):
        raise ToolError(f"{where}.function.parameters must be a JSON schema object, got {_quote(parameters)}",
                        f"{where}.function.parameters")
    if not _allows_an_object(parameters.get("type", "object")):
        raise ToolError(f"{where}.function.parameters must describe an object (the arguments), got type "
                        f"{_quote(parameters['type'])}", f"{where}.function.parameters")
    # (a description always: Apertus's, Functionary's and Command R+'s templates read it, and fail without)
    definition = {"name": name, "description": description or "", "parameters": parameters}
    return Tool(name, parameters, {"type": "function", "function": definition})


def _allows_an_object(schema_type: Any) -> bool:
    """Whether a schema's `type` lets the value be an object."""
    return schema_type == "object" or (isinstance(schema_type, list) and "object" in schema_type)


def _choice(choice: Any, tools: tuple[Tool, ...]) -> str:
    """tool_choice as "auto", "required", "none" or a tool's name."""
    if choice is None:
        return "auto"
    if isinstance(choice, str) and choice in CHOICES:
        name = choice
    elif (isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict)
          and isinstance(choice["function"].get("name"), str)):
        name = choice["function"]["name"]
        if not any(tool.name == name for tool in tools):
            raise ToolError(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
    else:
        raise ToolError(f"tool_choice must be \"auto\", \"required\", \"none\" or "
                        f"{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {_quote(choice)}", "tool_choice")
    if name == "required" and not tools:
        raise ToolError("tool_choice \"required\" needs tools", "tool_choice")
    return name


def history_message(message: dict[str, Any], role: str, content: str | None, where: str) -> dict[str, Any]:
    """A conversation message with its tool fields checked: an assistant's `tool_calls` (content may then be
    null), a tool result's `tool_call_id`. Other messages need content."""
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise ToolError(f"{where}.tool_call_id must be a string (the id of the call this answers)",
                            f"{where}.tool_call_id")
        return {"role": "tool", "content": content or "", "tool_call_id": call_id}
    calls = message.get("tool_calls")
    if role != "assistant" or calls is None or calls == []:  # (no calls: templates take `[]` for some)
        return {"role": role, "content": content or ""}
    if not isinstance(calls, list):
        raise ToolError(f"{where}.tool_calls must be a list of calls", f"{where}.tool_calls")
    return {"role": role, "content": content or "",
            "tool_calls": [_history_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)]}


def _finite(text: str) -> float:
    """A JSON number's value; ValueError for one a float cannot hold (1e999) or a constant JSON does not have."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _history_call(call: Any, where: str) -> dict[str, Any]:
    """An earlier call as templates read it: `function.arguments` an object when its JSON text parses to one."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"] \
            or not isinstance(function.get("arguments", ""), str) or call.get("type", "function") != "function":
        raise ToolError(f"{where} must be {{\"id\", \"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}"
                        f" with a name and arguments a JSON string, got {_quote(call)}", where)
    arguments: Any = function.get("arguments", "")
    try:
        # ("\ud800" escapes: lone surrogates; a number past a float's range, 1e999, would be rendered `Infinity`)
        if arguments:
            arguments = clean_data(json.loads(arguments, parse_float=_finite, parse_constant=_finite))[0]
        else:
            arguments = {}
    except ValueError:
        pass  # kept as the text it is
    except RecursionError:
        raise ToolError(f"{where}.function.arguments is nested too deeply", f"{where}.function.arguments") from None
    if not isinstance(arguments, (dict, str)):  # (templates read a call's arguments as an object: `.items()`)
        raise ToolError(f"{where}.function.arguments must be the JSON text of an object (the call's arguments by"
                        f" name), got {_quote(function['arguments'])}", f"{where}.function.arguments")
    call_id = call.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise ToolError(f"{where}.id must be a string (the call's id), got {_quote(call_id)}", f"{where}.id")
    return {"id": call_id or "", "type": "function",
            "function": {"name": function["name"], "arguments": arguments}}


# -- the model's syntax and its prompt ------------------------------------------------------------


def detect_syntax(template: str | None) -> ToolSyntax:
    """How the model writes calls, read from its chat template: its markers, else the frame its rendering of
    probe calls shows (`tool_call_frames`), else none (JSON)."""
    if template is None:
        return ToolSyntax.JSON
    if OPEN_TAG in template:
        if "<arg_key>" in template:
            return ToolSyntax.ARG_KEYS
        if "<function=" in template and "<parameter=" in template:
            return ToolSyntax.XML
        frame = template_frame(template)  # (Apriel 1.5's names `<tool_call>` but writes `<tool_calls>[…]`)
        return ToolSyntax.FRAMED if frame is not None and OPEN_TAG not in frame.opening_text else ToolSyntax.HERMES
    if MISTRAL_CALLS in template:
        return ToolSyntax.MISTRAL_ARGS if MISTRAL_ARGS in template else ToolSyntax.MISTRAL
    if '"parameters": dictionary of argument name' in template:
        return ToolSyntax.LLAMA3
    if writes_gemma_calls(template):
        return ToolSyntax.GEMMA
    if writes_pythonic_calls(template):
        return ToolSyntax.PYTHONIC
    return ToolSyntax.JSON if template_frame(template) is None else ToolSyntax.FRAMED


def template_messages(messages: Sequence[dict[str, Any]], request: ToolRequest | None,
                      syntax: ToolSyntax, frame: CallFrame | None = None) -> list[dict[str, Any]]:
    """The messages to render: as they are for a template with tool syntax; for one without (`json`), the
    tools described in the system message, earlier calls written in the JSON form and results as user messages;
    for a `frame` whose template writes no tools (DeepSeek V3.1's), the tools and the frame described."""
    if syntax.is_mistral:
        return [_with_mistral_ids(message) for message in messages]
    if syntax is ToolSyntax.FRAMED and frame is not None and not frame.shows_tools and request is not None:
        return _with_system_text(list(messages), framed_tools_prompt(request, frame))
    if syntax is not ToolSyntax.JSON:
        return list(messages)
    rendered = _results_together(messages)
    if request is None:
        return rendered
    return _with_system_text(rendered, json_tools_prompt(request))


def _with_system_text(rendered: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """`rendered` with `prompt` after its system message's text, or as a system message of its own first."""
    if rendered and rendered[0]["role"] == "system":
        return [{"role": "system", "content": f"{rendered[0]['content']}\n\n{prompt}"}, *rendered[1:]]
    return [{"role": "system", "content": prompt}, *rendered]


def mistral_id(call_id: str) -> str:
    """A call's id as Mistral's templates take it (nine letters or digits; they refuse others): as it is where it
    is one, else nine hex digits of its hash, so that a call and the result that names it still match."""
    if MISTRAL_ID.fullmatch(call_id):
        return call_id
    return hashlib.sha256(call_id.encode("utf-8", errors="replace")).hexdigest()[:9]


def _with_mistral_ids(message: dict[str, Any]) -> dict[str, Any]:
    if message["role"] == "tool":
        return {**message, "tool_call_id": mistral_id(message["tool_call_id"])}
    if message.get("tool_calls"):
        return {**message, "tool_calls": [{**call, "id": mistral_id(call["id"])} for call in message["tool_calls"]]}
    return message


def json_tools_prompt(request: ToolRequest) -> str:
    """The system text that offers the tools to a model whose template has no tool syntax."""
    return (_tools_offered(request) + 'To call tools, reply with only this JSON object: {"tool_calls": [{"name": '
            '"<tool name>", "arguments": {<the arguments>}}]}' + _or_text(request))


def framed_tools_prompt(request: ToolRequest, frame: CallFrame) -> str:
    """The system text that offers the tools to a model whose template writes calls in `frame` but not the tools."""
    return (_tools_offered(request) + f"To call a tool, reply with only: {frame.example()}\n(TOOL_NAME the tool's "
            "name, ARGUMENTS its arguments as a JSON object)" + _or_text(request))


def _tools_offered(request: ToolRequest) -> str:
    tools = "\n".join(json.dumps(tool.definition["function"], ensure_ascii=False) for tool in request.callable)
    return f"You can call these tools (name, description, and parameters as a JSON schema):\n{tools}\n\n"


def _or_text(request: ToolRequest) -> str:
    return ("" if request.forced else "; otherwise reply with plain text") + "."


def _results_together(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as `_plain_message` writes them, a tool's results joined to the user message next to them
    (the results of parallel calls, one by one, would be user messages in a row, which templates such as Gemma's
    refuse: roles must alternate)."""
    rendered: list[dict[str, Any]] = []
    for message, before in zip(messages, [None, *messages]):
        plain = _plain_message(message)
        if rendered and rendered[-1]["role"] == plain["role"] == "user" and "tool" in (message["role"], before["role"]):
            rendered[-1] = {"role": "user", "content": f"{rendered[-1]['content']}\n\n{plain['content']}"}
        else:
            rendered.append(plain)
    return rendered


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message for a template without tool syntax: calls as the JSON form, a tool's result as a user message."""
    if message["role"] == "tool":
        return {"role": "user", "content": f"Tool result for call {message['tool_call_id']}: {message['content']}"}
    if message.get("tool_calls"):
        calls = [{"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
                 for call in message["tool_calls"]]
        text = json.dumps({"tool_calls": calls}, ensure_ascii=False)
        rest = {key: value for key, value in message.items() if key != "tool_calls"}  # (a name, its thinking)
        return {**rest, "content": f"{message['content']}\n{text}" if message["content"] else text}
    return dict(message)


# -- the grammar ----------------------------------------------------------------------------------


def tool_grammar(request: ToolRequest, syntax: ToolSyntax,
                 marker_token: Callable[[str], int | None] = lambda text: None, layout: XmlLayout | None = None,
                 frame: CallFrame | None = None, thinking: Thinking | None = None, budget: int | None = None) -> str:
    """Lark text (llguidance) holding the output to `syntax`'s calls of `request.callable`.

    `marker_token(text)`: the id of the one special token of the vocabulary that is `text` (`<tool_call>`,
    `[TOOL_CALLS]`), which the grammar then names as that token rather than spelling it; else None.
    `layout`: where a syntax with tagged parameters puts the name and parameters (else its usual one);
    `frame`: the texts around FRAMED calls (required for that syntax). `thinking`: a thinking model's tags,
    which the reply may then open with (`reasoning.thinking_rules`), and `budget`, the most tokens its thought may
    hold (gpt-oss's analysis too).
    """
    tools = request.callable
    start = "calls" if request.forced else "TEXT | calls"
    lines = []
    if syntax is ToolSyntax.HERMES or syntax.has_tagged_parameters:
        opening, closing = (_marker(text, marker_token) for text in (OPEN_TAG, CLOSE_TAG))
        tagged = syntax.has_tagged_parameters  # (a tagged layout has the newlines inside the tags)
        separator = '"\\n"?' if tagged else '"\\n"'
        more = f" ({separator} call){{0,{MAX_CALLS - 1}}}" if request.several else ""
        inside = "body" if tagged else '"\\n" body "\\n"'
        lines += [f"calls: call{more}", f"call: {opening} {inside} {closing}",
                  r"TEXT: /(?s:.*)/ & ~/\s*<tool_call>(?s:.*)/"]
        if tagged:
            lines += _xml_alternatives(tools, layout or default_layout(syntax))
        else:
            lines += _alternatives(tools, "arguments")
    elif syntax is ToolSyntax.LLAMA3:  # Llama 3.1's template renders one call per message
        lines += ["calls: body", r"TEXT: /(?s:.*)/ & ~/\s*\{(?s:.*)/"]
        lines += _alternatives(tools, "parameters")
    elif syntax is ToolSyntax.MISTRAL:
        more = f' (", " body){{0,{MAX_CALLS - 1}}}' if request.several else ""
        # (7B v0.3's template writes a space after the marker, Nemo's none)
        lines += [f'calls: {_marker(MISTRAL_CALLS, marker_token)} " "? "[" body{more} "]"',
                  r'call_id: ", \"id\": \"" ID "\""', *_MISTRAL_RULES]
        lines += _alternatives(tools, "arguments", before_end=" call_id?")
    elif syntax is ToolSyntax.MISTRAL_ARGS:  # a marker before each call
        opening, call_id, arguments = (_marker(text, marker_token)
                                       for text in (MISTRAL_CALLS, MISTRAL_CALL_ID, MISTRAL_ARGS))
        more = f" body{{0,{MAX_CALLS - 1}}}" if request.several else ""
        lines += [f"calls: body{more}", _body_rule(tools), *_MISTRAL_RULES]
        for i, tool in enumerate(tools):
            lines.append(f"call_{i}: {opening} {json.dumps(tool.name)} ({call_id} ID)? {arguments} arguments_{i}")
            lines.append(f"arguments_{i}: %json {arguments_json(tool)}")
    elif syntax is ToolSyntax.FRAMED:
        assert frame is not None, "FRAMED calls need their frame"
        lines += _framed_lines(request, frame, marker_token, plain_text=not frame.harmony)
        if frame.harmony:  # (gpt-oss: its analysis first, as it was trained to; text only as a final message)
            start = f"analysis? {'calls' if request.forced else '(final | calls)'}"
            lines += harmony_rules(marker_token, budget=budget)
    elif syntax is ToolSyntax.GEMMA:  # (calls one after another, nothing between)
        more = f" body{{0,{MAX_CALLS - 1}}}" if request.several else ""
        lines += [f"calls: body{more}", _body_rule(tools), r"TEXT: /(?s:.*)/ & ~/\s*<\|tool_call>(?s:.*)/"]
        for i, tool in enumerate(tools):
            lines += gemma_rules(f"call_{i}", tool.name, json.loads(arguments_json(tool)), marker_token,
                                 ARGUMENT_LAYOUT)
    elif syntax is ToolSyntax.PYTHONIC:  # (one list of calls)
        lines += [pythonic_calls_rule("body", MAX_CALLS if request.several else 1, marker_token), _body_rule(tools),
                  r"TEXT: /(?s:.*)/ & ~/\s*<\|tool_call_start\|>(?s:.*)/"]
        for i, tool in enumerate(tools):
            lines += pythonic_rules(f"call_{i}", tool.name, json.loads(arguments_json(tool)), ARGUMENT_LAYOUT)
    else:
        more = f' (", " body){{0,{MAX_CALLS - 1}}}' if request.several else ""
        lines += [r'calls: "{\"tool_calls\": [" body' + more + ' "]}"',
                  r"TEXT: /(?s:.*)/ & ~/\s*\{(?s:.*)/"]
        lines += _alternatives(tools, "arguments")
    if thinking is not None:  # (a thought first, where the model may write one)
        answer = "calls" if request.forced else "(ANSWER_TEXT | calls)?"
        plain = regex_text(syntax.opening(frame).lstrip())
        start, rules = thinking_rules(thinking, start, answer, plain, budget)
        lines += rules
    return "\n".join(["%llguidance {}", f"start: {start}", *lines]) + "\n"


def _framed_lines(request: ToolRequest, frame: CallFrame, marker_token: Callable[[str], int | None],
                  plain_text: bool = True) -> list[str]:
    """The calls in `frame`, their bodies (JSON arguments after the name, or tagged parameters), and (with
    `plain_text`) plain text, which may not start as they do."""
    tools = request.callable
    opening, separator, closing = (grammar_text(parts, marker_token)
                                   for parts in (frame.opening, frame.separator, frame.closing))
    more = f" ({separator} body){{0,{MAX_CALLS - 1}}}" if request.several and not frame.one_call else ""
    lines = [f"calls: {opening} body{more} {closing}", _body_rule(tools)]
    if plain_text:
        lines.append(f"TEXT: /(?s:.*)/ & ~/\\s*{regex_text(frame.opening_text.lstrip())}(?s:.*)/")
    if frame.layout is not None:  # (tagged parameters: the name's own tag is in the frame's texts)
        return lines + _xml_alternatives(tools, frame.layout)[1:]
    name_end = grammar_text(frame.name_end, marker_token)
    for i, tool in enumerate(tools):
        lines.append(f"call_{i}: {json.dumps(tool.name)} {name_end} arguments_{i}")
        lines.append(f"arguments_{i}: %json {arguments_json(tool)}")
    return lines


# A Mistral call's id, and plain text, which may not start as a call does (spelled out, `[TOOL_CALLS]` would read
# back as one).
_MISTRAL_RULES = ["ID: /[A-Za-z0-9]{9}/", r"TEXT: /(?s:.*)/ & ~/\s*\[TOOL_CALLS\](?s:.*)/"]


def _marker(text: str, marker_token: Callable[[str], int | None]) -> str:
    """`text` in a grammar: the special token it is, named by its id, or else spelled out (as a frame's)."""
    return grammar_text((text,), marker_token)


def _body_rule(tools: Sequence[Tool]) -> str:
    """`body`: a call of any one of `tools`, rule `call_i` for the i-th."""
    return "body: " + " | ".join(f"call_{i}" for i in range(len(tools)))


def _alternatives(tools: Sequence[Tool], arguments_key: str, before_end: str = "") -> list[str]:
    """`body` as one alternative per tool: the name written out, then the arguments held to its schema (then
    `before_end`, Lark for what may follow them inside the object)."""
    lines = [_body_rule(tools)]
    for i, tool in enumerate(tools):
        head = json.dumps(f'{{"name": "{tool.name}", "{arguments_key}": ')
        lines.append(f'call_{i}: {head} arguments_{i}{before_end} "}}"')
        lines.append(f"arguments_{i}: %json {arguments_json(tool)}")
    return lines


def _xml_alternatives(tools: Sequence[Tool], layout: XmlLayout) -> list[str]:
    """`body` as one alternative per tool, each a call with tagged parameters (`tool_call_xml.function_rules`)."""
    lines = [_body_rule(tools)]
    for i, tool in enumerate(tools):
        lines += function_rules(f"call_{i}", tool.name, json.loads(arguments_json(tool)), layout, ARGUMENT_LAYOUT)
    return lines


def default_layout(syntax: ToolSyntax) -> XmlLayout:
    """The usual layout of a syntax with tagged parameters (where its template's own is not read)."""
    return QWEN_XML if syntax is ToolSyntax.XML else ARG_KEYS


def template_layout(template: str, syntax: ToolSyntax) -> XmlLayout:
    """The layout `template` renders a call of a syntax with tagged parameters in (GLM 4.7 puts no newlines
    where 4.6 does), read from its rendering of a probe call; the syntax's usual one where that fails."""
    try:
        text = render_chat(template, [{"role": "user", "content": "probe"}, probe_call()], add_generation_prompt=False)
        start = text.rfind(OPEN_TAG, 0, text.index("probe_fn")) + len(OPEN_TAG)
        shown = layout_shown(text[start:text.index(CLOSE_TAG, start)])
    except (LocalspecError, ValueError):
        shown = None
    return shown or default_layout(syntax)


def _text_parameters(tool: Tool) -> set[str]:
    """The parameters a syntax with tagged parameters writes as their text (strings), not as JSON."""
    properties = json.loads(arguments_json(tool)).get("properties") or {}
    return {name for name, schema in properties.items() if writes_as_text(schema)}


def arguments_json(tool: Tool) -> str:
    """The JSON text of the schema a call's arguments are held to (with the layout and options of `%json`;
    values it leaves open bounded, as for `--json-schema`, where the bounds fit it). ValueError for a schema
    that cannot be written as JSON (NaN)."""
    return _fitted_arguments(_parameters_text(tool))[0]


def _argument_notes(tool: Tool) -> tuple[str, ...]:
    """What fitting a tool's parameters schema left out (a property count llguidance cannot hold)."""
    return _fitted_arguments(_parameters_text(tool))[1]


def _parameters_text(tool: Tool) -> str:
    """A tool's parameters schema as JSON text (what `_fitted_arguments` remembers its answers by)."""
    return json.dumps(tool.parameters, ensure_ascii=False, allow_nan=False)


@lru_cache(maxsize=128)
def _fitted_arguments(parameters: str) -> tuple[str, tuple[str, ...]]:
    """`arguments_json` of a parameters schema's JSON text, and its notes: fitting it compiles it with llguidance
    once or twice, which an agent sending the same tools with every request need not pay again."""
    fitted = fitted_schema(json.loads(parameters))
    schema = {**closed_object(_as_object(fitted.schema)), "x-guidance": ARGUMENT_LAYOUT}
    return json.dumps(schema, ensure_ascii=False, allow_nan=False), fitted.notes


def _as_object(schema: dict[str, Any]) -> dict[str, Any]:
    """The parameters schema held to objects: the arguments are always a JSON object, even for `{}` (which
    alone allows any value) or a `type` list that allows others too."""
    return schema if schema.get("type") == "object" else {**schema, "type": "object"}


# -- reading calls back -----------------------------------------------------------------------------


def parse_calls(text: str, syntax: ToolSyntax, tools: Sequence[Tool] = (),
                layout: XmlLayout | None = None, frame: CallFrame | None = None) -> list[ToolCall] | None:
    """The calls a finished output makes, each with the id the model wrote (Mistral's, a frame's) or a fresh one
    (None: it is plain text, or not a whole call).
    Each call's arguments are the JSON text the model wrote (as OpenAI passes them on), not a re-encoding:
    Python would write `1e999` back as `Infinity`, which is no JSON."""
    try:
        if syntax is ToolSyntax.HERMES:
            bodies = _tagged_blocks(text, lambda at: _members(text, _after_space(text, at)))
            calls = [_call(body, "arguments", syntax) for body in bodies]
        elif syntax.has_tagged_parameters:  # (which values are text: the offered `tools` say)
            layout = layout or default_layout(syntax)
            calls = [ToolCall(name, arguments, _new_id(syntax)) for name, arguments in _xml_calls(text, tools, layout)]
        elif syntax is ToolSyntax.MISTRAL:
            calls = [_call(members, "arguments", syntax) for members in _mistral_list(text)]
        elif syntax is ToolSyntax.MISTRAL_ARGS:
            calls = _mistral_args_calls(text)
        elif syntax is ToolSyntax.FRAMED:
            calls = _framed_calls(text, frame, tools) if frame is not None else []
        elif syntax is ToolSyntax.GEMMA:
            calls = [ToolCall(name, arguments, _new_id(syntax))
                     for name, arguments in read_gemma_calls(text[_after_space(text, 0):], {t.name for t in tools})]
        elif syntax is ToolSyntax.PYTHONIC:
            calls = [ToolCall(name, arguments, _new_id(syntax))
                     for name, arguments in read_pythonic_calls(text[_after_space(text, 0):], _text_reader(tools))]
        elif not text.startswith("{", _after_space(text, 0)):
            return None
        elif syntax is ToolSyntax.LLAMA3:
            calls = [_call(_whole(text, _members), "parameters", syntax)]
        else:
            listed = _whole(text, _members)["tool_calls"][1]
            calls = [_call(members, "arguments", syntax) for members in _whole(listed, _objects)]
    except (ValueError, KeyError, TypeError, RecursionError):  # (RecursionError: nested deeper than Python reads)
        return None
    return _distinct_ids(calls, syntax) or None


def _distinct_ids(calls: list[ToolCall], syntax: ToolSyntax) -> list[ToolCall]:
    """The calls, each with an id of its own: a model that wrote an id twice (a Mistral model, Solar Open;
    copied from an earlier call, say) gets a fresh one for the repeat, so that each result names one call."""
    seen: set[str] = set()
    for i, call in enumerate(calls):
        if call.id in seen:
            calls[i] = ToolCall(call.name, call.arguments, _new_id(syntax))
        seen.add(calls[i].id)
    return calls


# A JSON value as written: the value, and its text.
Written = tuple[Any, str]
_Body = TypeVar("_Body")  # what is read of one `<tool_call>` block
_JSON_SPACE = " \t\n\r"
# What `\s` matches in llguidance's regular expressions (Unicode White_Space): the grammar lets text start with
# these before a call's opening no more than a call itself (Python's str.isspace also takes U+001C to U+001F).
_GRAMMAR_SPACE = re.compile(r"[\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*")


def _tagged_blocks(text: str, read: Callable[[int], tuple[_Body, int]]) -> list[_Body]:
    """What `read` finds in each `<tool_call>` … `</tool_call>` block that makes up the whole of `text`
    (whitespace around them aside): `read(at)`, from just after an opening tag, gives a block's body and where
    it ends (a Hermes body is read as JSON to its end, so a closing tag inside a string stays text). ValueError
    when the text is anything else."""
    bodies, at = [], _after_space(text, 0)
    while at < len(text):
        if not text.startswith(OPEN_TAG, at):
            raise ValueError("not a tool call")
        body, at = read(at + len(OPEN_TAG))
        at = _after_space(text, at)
        if not text.startswith(CLOSE_TAG, at):
            raise ValueError("a tool call not closed")
        bodies.append(body)
        at = _after_space(text, at + len(CLOSE_TAG))
    return bodies


def _xml_calls(text: str, tools: Sequence[Tool], layout: XmlLayout) -> list[tuple[str, str]]:
    """The name and arguments (JSON text) of each call in `<tool_call>` blocks with tagged parameters in `layout`
    that make up the whole of `text` (whitespace around them aside). ValueError when the text is anything else,
    or calls a tool not among `tools`."""
    takes_text = _text_reader(tools)

    def read(at: int) -> tuple[tuple[str, str], int]:
        name, arguments, end = read_function(text, at, layout, takes_text)
        return (name, arguments), end

    return _tagged_blocks(text, read)


def _text_reader(tools: Sequence[Tool]) -> Callable[[str, str], bool]:
    """Whether a tagged parameter of a call (its tool's name, the parameter's) is written as its text; ValueError
    for a tool not among `tools`."""
    texts = {tool.name: _text_parameters(tool) for tool in tools}

    def takes_text(name: str, parameter: str) -> bool:
        if name not in texts:
            raise ValueError(f"{name} is not offered")
        return parameter in texts[name]

    return takes_text


def _mistral_list(text: str) -> list[dict[str, Written]]:
    """The members of each object in `[TOOL_CALLS][{…}, …]`, the whole of `text` (whitespace around it aside)."""
    at = _after_space(text, 0)
    if not text.startswith(MISTRAL_CALLS, at):
        raise ValueError("not a tool call")
    return _whole(text[at + len(MISTRAL_CALLS):], _objects)


def _written_id(members: dict[str, Written]) -> str | None:
    """The id a Mistral call was written with, where it is one its templates take."""
    call_id = members.get("id", (None, ""))[0]
    return call_id if isinstance(call_id, str) and MISTRAL_ID.fullmatch(call_id) else None


def _mistral_args_calls(text: str) -> list[ToolCall]:
    """The calls `[TOOL_CALLS]name([CALL_ID]id)?[ARGS]{…}` that make up the whole of `text` (whitespace around
    them aside). ValueError when the text is anything else."""
    calls, at = [], _after_space(text, 0)
    while at < len(text):
        name = TOOL_NAME.match(text, at + len(MISTRAL_CALLS)) if text.startswith(MISTRAL_CALLS, at) else None
        if name is None:
            raise ValueError("not a tool call")
        at, call_id = name.end(), None
        if text.startswith(MISTRAL_CALL_ID, at):
            written = MISTRAL_ID.match(text, at + len(MISTRAL_CALL_ID))
            if written is None:
                raise ValueError("not a call id")
            at, call_id = written.end(), written.group()
        if not text.startswith(MISTRAL_ARGS, at):
            raise ValueError("no arguments")
        start = at + len(MISTRAL_ARGS)
        _, end = _members(text, start)
        calls.append(ToolCall(name.group(), text[start:end], call_id or _new_id(ToolSyntax.MISTRAL_ARGS)))
        at = _after_space(text, end)
    return calls


def _framed_calls(text: str, frame: CallFrame, tools: Sequence[Tool]) -> list[ToolCall]:
    """The calls in `frame` that make up the whole of `text` (whitespace before them aside); tagged parameters
    are read as `tools` say (which values are text). ValueError when the text is anything else."""
    calls, parts = [], (frame.opening_text.lstrip(), *frame.opening[1:])  # (Apriel's opening "\n")
    at = _after_space(text, 0)
    while True:
        at, call_id = read_parts(text, at, parts)
        if frame.layout is not None:
            name, arguments, end = read_function(text, at, frame.layout, _text_reader(tools))
        else:
            written = TOOL_NAME.match(text, at)
            if written is None:
                raise ValueError("no tool name")
            start, written_id = read_parts(text, written.end(), frame.name_end)
            name, end, call_id = written.group(), _members(text, start)[1], call_id or written_id
            arguments = text[start:end]
        calls.append(ToolCall(name, arguments, call_id or _new_id(ToolSyntax.FRAMED)))
        if ends_as_closing(text[end:], frame.closing):
            return calls
        if frame.one_call:
            raise ValueError("more than the call")
        at, parts = end, frame.separator


def _after_space(text: str, at: int) -> int:
    return _GRAMMAR_SPACE.match(text, at).end()


def _after_json_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _JSON_SPACE:
        at += 1
    return at


def _whole(text: str, read: Callable[[str, int], tuple[Any, int]]) -> Any:
    """What `read` finds in `text`, which must hold nothing else but JSON whitespace around it."""
    found, end = read(text, _after_json_space(text, 0))
    if _after_json_space(text, end) != len(text):
        raise ValueError("more than one JSON value")
    return found


def _members(text: str, at: int) -> tuple[dict[str, Written], int]:
    """The members of the JSON object that starts at `at`, each value with its text, and where the object ends."""
    return _container(text, at, "{}", keyed=True)


def _objects(text: str, at: int) -> tuple[list[dict[str, Written]], int]:
    """The members of each object in the JSON array of objects that starts at `at`, and where the array ends."""
    items, end = _container(text, at, "[]", keyed=False)
    return [_whole(written, _members) for _, written in items], end


def _container(text: str, at: int, brackets: str, keyed: bool) -> tuple[Any, int]:
    """The entries of the JSON object (`keyed`) or array that starts at `at` with `brackets[0]`: a dict of
    key -> (value, its text), or a list of (value, its text); and where it ends."""
    if not text.startswith(brackets[0], at):
        raise ValueError(f"expected {brackets[0]}")
    entries: list[tuple[str, Written]] = []
    at = _after_json_space(text, at + 1)
    while not text.startswith(brackets[1], at):
        if entries:
            if not text.startswith(",", at):
                raise ValueError("expected a comma")
            at = _after_json_space(text, at + 1)
        key = ""
        if keyed:
            key, at = _DECODER.raw_decode(text, at)
            at = _after_json_space(text, at)
            if not isinstance(key, str) or not text.startswith(":", at):
                raise ValueError("expected a key")
            at = _after_json_space(text, at + 1)
        value, end = _DECODER.raw_decode(text, at)
        entries.append((key, (value, text[at:end])))
        at = _after_json_space(text, end)
    return (dict(entries) if keyed else [entry for _, entry in entries]), at + 1


_DECODER = json.JSONDecoder()


def _call(members: dict[str, Written], arguments_key: str, syntax: ToolSyntax) -> ToolCall:
    """The call an object's members make, with the id a Mistral model wrote in it, else a fresh one."""
    name, (arguments, written) = members["name"][0], members[arguments_key]
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise TypeError("not a call")
    return ToolCall(name, written, (syntax is ToolSyntax.MISTRAL and _written_id(members)) or _new_id(syntax))


def _new_id(syntax: ToolSyntax) -> str:
    """A fresh call id: nine hex digits for a Mistral model (its templates take no other), else OpenAI's form."""
    if syntax.is_mistral:
        return uuid.uuid4().hex[:9]
    return f"call_{uuid.uuid4().hex[:24]}"


class CallStream:
    """Streamed text sorted as it comes: plain text is passed on at once, a call is held until the output ends."""

    def __init__(self, opening: str, forced: bool) -> None:
        self.opening = opening
        self.held = ""
        self.plain = False  # the output is plain text: pass it on
        self.call = forced  # the output is a call: hold it

    def feed(self, text: str) -> str:
        """The text to send now (maybe none) after `text` came."""
        if self.plain:
            return text
        self.held += text
        if not self.call:
            start = self.held[_after_space(self.held, 0):]
            if start.startswith(self.opening):
                self.call = True
            elif start and not self.opening.startswith(start):
                self.plain = True
                text, self.held = self.held, ""
                return text
        return ""

    def rest(self, cut_short: bool = False) -> str:
        """What was held back, sent as text when the output turns out not to be a whole call; nothing where a
        call was `cut_short` (max_tokens, a stop string): half a call is no text for the client."""
        text, self.held = self.held, ""
        return "" if cut_short and self.call else text


def _quote(value: Any) -> str:
    """`value` as JSON for an error message, cut short when long."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return "(a value nested too deeply to show)"
    return text if len(text) <= 120 else text[:119] + "…"


# -- a request's tools on a loaded model ------------------------------------------------------------

CUT_CANDIDATES = 256  # the ends of whole calls looked for in an output cut short, the latest first
_CLOSING_CHARACTERS = frozenset("}>)]\n")  # what a call (or the tag, line or list around it) ends with
_NEXT_CALL_STARTS = frozenset(",<[")  # what comes after a whole call where another follows it: `, {`, `<tool_call>`


def _ends_before_another_call(text: str) -> list[int]:
    """Where in `text` a whole call may end: just after a closing character, where what follows (spaces aside) is
    nothing or may start another call. (One pass: the next character that is not a space, for each place.)"""
    next_shown = [len(text)] * (len(text) + 1)
    for at in range(len(text) - 1, -1, -1):
        next_shown[at] = next_shown[at + 1] if text[at].isspace() else at
    return [at + 1 for at, char in enumerate(text) if char in _CLOSING_CHARACTERS
            and (next_shown[at + 1] == len(text) or text[next_shown[at + 1]] in _NEXT_CALL_STARTS)]
# What closes the list the calls are in: none (tags), `[…]`, `{"tool_calls": […]}`, LFM2.5's
# `[…]<|tool_call_end|>`.
_LIST_CLOSINGS = ("", "]", "]}", PYTHONIC_CLOSE)


@dataclass(frozen=True)
class ToolSetup:
    """A request's tools made ready for one model: its call syntax, the compiled grammar for them, and what
    llguidance does not enforce of their parameters schemas (warnings that name the tool's schema)."""

    request: ToolRequest
    syntax: ToolSyntax
    grammar: str
    warnings: tuple[str, ...] = ()
    layout: XmlLayout | None = None  # where a syntax with tagged parameters puts them, in this model's template
    frame: CallFrame | None = None  # the texts this model's template writes around FRAMED calls
    thinking: Thinking | None = None  # a thinking model's tags: a reply may think before its call or text

    @property
    def splitter(self) -> Callable[[], Splitter] | None:
        """What sorts an output into the thinking its grammar lets come first (a harmony analysis, a thought in
        tags) and the answer, made anew for each output; None where the grammar lets none come."""
        if self.frame is not None and self.frame.harmony:
            return HarmonySplitter
        thinking = self.thinking
        return None if thinking is None else lambda: ThoughtSplitter(thinking.opened, thinking.tags)

    def answer(self, output: str) -> Sorted:
        """An `output` sorted into its thinking and its answer (what `calls_in` reads; all answer where the
        grammar lets no thinking come)."""
        return sorted_whole(self.splitter, output)

    def calls_in(self, text: str) -> list[ToolCall] | None:
        """The calls `text`, an answer (see `answer`), makes (None: plain text, or not whole calls of the tools
        offered)."""
        calls = parse_calls(text, self.syntax, self.request.callable, self.layout, self.frame)
        offered = {tool.name for tool in self.request.callable}
        return calls if calls and all(call.name in offered for call in calls) else None

    def calls_before_cut(self, text: str) -> list[ToolCall] | None:
        """The whole calls an answer cut short (max_tokens, a stop string) made before the cut (None: none whole).

        A call is whole where the model closed it: the longest start of `text` that ends just after a closing
        character, before what may start another call (`,`, a tag or marker, or nothing but spaces), and reads as
        whole calls, as written or with the list the calls are in closed (`]`, `]}`). Only the last
        `CUT_CANDIDATES` such ends are tried (each try reads the text)."""
        ends = _ends_before_another_call(text)
        for end in reversed(ends[-CUT_CANDIDATES:]):
            for closing in _LIST_CLOSINGS:
                calls = self.calls_in(text[:end] + closing)
                if calls is not None:
                    return calls
        return None

    def stream(self) -> CallStream:
        return CallStream(self.syntax.opening(self.frame), self.request.forced)

    def text_of(self, output: str, cut_short: bool) -> str | None:
        """The message content of an `output` that makes no whole call: the output, or None where it is a
        call `cut_short` (as `CallStream.rest` leaves it out of a stream)."""
        stream = self.stream()
        stream.feed(output)
        return None if cut_short and stream.call else output


def prepare_tools(request: ToolRequest, template: str | None, marker_token: Callable[[str], int | None],
                  prompt_end: str | None = None, budget: int | None = None) -> ToolSetup:
    """The syntax `template` shows and the grammar for it; an arguments schema llguidance rejects is InputError.
    `prompt_end`: the end of the prompt (`thinking_first.prompt_end`), which may open a thought or close one (None:
    as the template's own prompt does, without variables); `budget`: the most tokens a thought may hold."""
    syntax = detect_syntax(template)
    for index, tool in _callable_tools(request):
        _refuse_as_json_schema_does(tool, index)
    frame = template_frame(template) if template is not None and syntax is ToolSyntax.FRAMED else None
    syntax, held_as_json = _tagged_or_json(request, syntax, frame)
    frame = frame if syntax is ToolSyntax.FRAMED else None
    layout = template_layout(template, syntax) if template is not None and syntax.has_tagged_parameters else None
    thinking = template_thinking(template, marker_token) if frame is None or not frame.harmony else None
    if thinking is not None and prompt_end is not None:
        thinking = thinking.after_prompt(prompt_end)
    try:
        lark = tool_grammar(request, syntax, marker_token, layout, frame, thinking, budget)
    except (ValueError, RecursionError):  # NaN, a number past 64 bits, or nested too deeply to write out
        _blame_unwritable(request)
        raise InputError("tools: a parameters schema cannot be written as JSON") from None
    try:
        compiled = compile_format(OutputFormat("grammar", lark, "tools"))
    except InputError:
        _blame_schema(request)  # name the tool whose schema llguidance rejects
        raise
    warnings = (_schema_warnings(request) if compiled.warnings else ()) + _unfollowed_unique_items(request, lark)
    notes = tuple(f"{_schema_origin(index)}: {note}" for index, tool in _callable_tools(request)
                  for note in _argument_notes(tool))
    return ToolSetup(request, syntax, compiled.grammar, (warnings or compiled.warnings) + notes + held_as_json, layout,
                     frame, thinking)


def _unfollowed_unique_items(request: ToolRequest, grammar: str) -> tuple[str, ...]:
    """For each callable tool, the arrays localspec would hold unique in its arguments alone but cannot in this
    syntax: where no JSON value of the grammar takes them (Gemma's notation, Python calls) or its head does not tell
    it apart from another tool's (`calls_cursor.call_schemas`)."""
    followed: dict[int, int] = {}
    for value in call_schemas(grammar):
        if value.head is not None and value.tool_index is not None:
            followed[value.tool_index] = followed.get(value.tool_index, 0) + len(survey_held(value.schema).held)
    index_of = {tool.name: index for index, tool in _callable_tools(request)}
    warnings = []
    for position, tool in enumerate(request.callable):
        missing = len(survey_held(json.loads(arguments_json(tool))).held) - followed.get(position, 0)
        if missing > 0:
            warnings.append(f"{_schema_origin(index_of[tool.name])}: uniqueItems on {missing} array"
                            f"{'s' if missing > 1 else ''} (not enforced in this template's calls: the output may"
                            " repeat an item)")
    return tuple(warnings)


def _tagged_or_json(request: ToolRequest, syntax: ToolSyntax,
                    frame: CallFrame | None = None) -> tuple[ToolSyntax, tuple[str, ...]]:
    """`syntax`; or, for a syntax with tagged parameters (or a `frame` with them, or Gemma's notation) where a
    callable tool's schema asks more than tags one parameter at a time can hold (`tool_call_xml.tagged_problem`,
    `tool_call_gemma.gemma_problem`), JSON that holds it exactly, with a note saying so: Hermes's inside
    `<tool_call>`, or for a frame or Gemma the JSON form."""
    framed = frame is not None and frame.layout is not None or syntax in (ToolSyntax.GEMMA, ToolSyntax.PYTHONIC)
    if not (syntax.has_tagged_parameters or framed):
        return syntax, ()
    problem_of = {ToolSyntax.GEMMA: gemma_problem, ToolSyntax.PYTHONIC: pythonic_problem}.get(syntax, tagged_problem)
    for index, tool in _callable_tools(request):
        try:
            problem = problem_of(json.loads(arguments_json(tool)))
        except (ValueError, RecursionError):  # (said where the grammar is written)
            return syntax, ()
        if problem is not None and framed:
            return ToolSyntax.JSON, (f"{_schema_origin(index)}: {problem}, so calls are held to the JSON form"
                                     " described in the system message rather than in this model's own tags",)
        if problem is not None:
            return ToolSyntax.HERMES, (f"{_schema_origin(index)}: {problem}, so calls are held as JSON inside"
                                       " <tool_call> rather than in this model's own tags",)
    return syntax, ()


def check_parameters(request: ToolRequest) -> None:
    """ToolError naming the first callable tool whose parameters schema cannot be held to (what `prepare_tools`
    would find once a model is loaded), for a command to refuse before it loads one."""
    for index, tool in _callable_tools(request):
        _refuse_as_json_schema_does(tool, index)
    _blame_unwritable(request)
    _blame_schema(request)


def _blame_unwritable(request: ToolRequest) -> None:
    """Raise ToolError naming the first callable tool whose parameters schema cannot be written out for llguidance
    (NaN, a number past 64 bits, nesting too deep), with what was wrong."""
    for index, tool in _callable_tools(request):
        origin = _schema_origin(index)
        try:
            arguments_json(tool)
        except ValueError as exc:  # (llguidance names a number past 64 bits; JSON, a NaN or an infinity)
            message = value_error_message(exc)
            if not message.startswith(("the number", NOTHING_SATISFIES)):
                message = f"the schema cannot be written as JSON ({message})"
            raise ToolError(f"{origin}: {message}", origin) from None
        except RecursionError:
            raise ToolError(f"{origin}: the schema is nested too deeply", origin) from None


def _refuse_as_json_schema_does(tool: Tool, index: int) -> None:
    """ToolError for parameters `--json-schema` refuses before llguidance compiles them: an integer llguidance
    would crash on, a `uniqueItems` no text can satisfy."""
    origin = _schema_origin(index)
    try:
        refuse_unusable_schema(tool.parameters, origin)
    except InputError as exc:
        raise ToolError(str(exc), origin) from None
    except RecursionError:  # (nested too deeply: said where the schema is written out)
        return


def _schema_warnings(request: ToolRequest) -> tuple[str, ...]:
    """What llguidance does not enforce of each callable tool's parameters schema, named by the tool."""
    return tuple(_named(warning, index) for index, tool in _callable_tools(request)
                 for warning in _compile_arguments(tool, index).warnings)


def _blame_schema(request: ToolRequest) -> None:
    """Raise ToolError naming the first tool whose parameters schema llguidance rejects on its own (if one does),
    compiled as the grammar compiles it (the same `%json` options)."""
    for index, tool in _callable_tools(request):
        try:
            _compile_arguments(tool, index)
        except InputError as exc:
            raise ToolError(_named(str(exc), index), _schema_origin(index)) from None


def _callable_tools(request: ToolRequest) -> list[tuple[int, Tool]]:
    """The tools the grammar holds calls to, each with its index in the request (which messages name it by)."""
    callable_names = {tool.name for tool in request.callable}
    return [(index, tool) for index, tool in enumerate(request.tools) if tool.name in callable_names]


def _compile_arguments(tool: Tool, index: int) -> CompiledGrammar:
    return compile_format(OutputFormat("grammar", f"start: %json {arguments_json(tool)}\n", _schema_origin(index)))


def _schema_origin(index: int) -> str:
    return f"tools[{index}].function.parameters"


def _named(message: str, index: int) -> str:
    """A message about tool `index`'s lone `%json` grammar, without the grammar's position in it."""
    origin = _schema_origin(index)
    return f"{origin}: {_SCHEMA_FAILURE.sub('', message[len(origin) + 2:])}" if message.startswith(origin) else message


def marker_tokens(model: Any) -> Callable[[str], int | None]:
    """The id of the one special token of `model`'s vocabulary (as its grammar tokenizer marks them) that is a
    text, or None. A control token counts too: rendered as no text where a text is read without special tokens,
    it is shown as its text in an output held to a grammar (`Generation`), so a call opened with one reads back."""

    def token_of(text: str) -> int | None:
        tokens = model.tokenize(text, add_special=False, parse_special=True)
        if (len(tokens) == 1 and model.grammar_tokenizer().is_special_token(tokens[0])
                and model.token_bytes(tokens[0], special=True) == text.encode()):
            return tokens[0]
        return None

    return token_of


def chat_input(messages: Sequence[dict[str, Any]], setup: ToolSetup | None,
               template: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and the `tools` to render with `template`: a template with tool syntax gets the definitions
    itself; for one without, they are described in the system message (see `template_messages`)."""
    syntax = setup.syntax if setup is not None else detect_syntax(template)
    request = setup.request if setup is not None else None
    if setup is not None:
        frame = setup.frame
    else:
        frame = template_frame(template) if template is not None and syntax is ToolSyntax.FRAMED else None
    rendered = template_messages(messages, request, syntax, frame)
    if request is None or syntax is ToolSyntax.JSON:
        return rendered, None
    return rendered, request.definitions()
