"""response_format and tool calls through `localspec serve` on the demo pair, spoken to with the official `openai`
client (one server for the module), and `run --tools` on the same pair.

Every call must parse and its arguments validate against the tool's parameters; every JSON reply must validate
against its schema.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import jsonschema
import pytest
from test_serve import Server

from localspec.app.tool_calls import ToolSyntax, parse_calls

if TYPE_CHECKING:  # imported where used: openai takes most of a second, and these tests are all slow
    import openai

pytestmark = pytest.mark.slow  # the demo pair's real weights

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
TOOLS = [WEATHER, ADD]
PARAMETERS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}
ASK = {"model": "SmolLM2-135M-Instruct.F32", "temperature": 0, "seed": 7, "max_tokens": 96}


@pytest.fixture(scope="module")
def client(smollm_f32: Path, smollm_q4_1: Path) -> Iterator[openai.OpenAI]:
    server = Server("--target", str(smollm_f32), "--draft", str(smollm_q4_1))
    try:
        yield server.client()
    finally:
        server.stop()


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def check_calls(calls: Any, names: set[str]) -> list[tuple[str, dict]]:
    """Each call well formed, named among `names`, its arguments valid for its tool; (name, arguments) back."""
    assert calls, "no tool calls"
    assert len({call.id for call in calls}) == len(calls)
    made = []
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_") and call.function.name in names
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, PARAMETERS[call.function.name])
        made.append((call.function.name, arguments))
    return made


def check_text(choice: Any) -> None:
    """A reply that is no call: text that may not start like a call (SmolLM2's template has no tool syntax, so a
    call is the JSON form `{"tool_calls": ...}`), unless it was cut short, and then it is no whole call either
    (a whole call comes back as tool_calls)."""
    content = choice.message.content
    assert choice.finish_reason in ("stop", "length") and not choice.message.tool_calls
    if content is None:  # a call cut short: no call, and no text either
        assert choice.finish_reason == "length"
        return
    assert isinstance(content, str)
    if choice.finish_reason == "stop":
        assert not content.lstrip().startswith("{"), content
    assert parse_calls(content, ToolSyntax.JSON) is None, content


def test_required_forces_calls_that_validate(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(messages=user("What is the weather in Paris?"), tools=TOOLS,
                                           tool_choice="required", **ASK)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    check_calls(choice.message.tool_calls, {"get_weather", "add"})


def test_a_named_tool_is_called_once(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(messages=user("What is 2 plus 3?"), tools=TOOLS,
                                           tool_choice={"type": "function", "function": {"name": "add"}}, **ASK)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [name for name, _ in check_calls(choice.message.tool_calls, {"add"})] == ["add"]


def test_auto_answers_with_calls_or_text_never_a_broken_call(client: openai.OpenAI) -> None:
    for question in ("What is the weather in Paris? Call the tool.", "Say hello."):
        choice = client.chat.completions.create(messages=user(question), tools=TOOLS, **ASK).choices[0]
        if choice.finish_reason == "tool_calls":
            check_calls(choice.message.tool_calls, {"get_weather", "add"})
            assert choice.message.content is None
        else:
            check_text(choice)


def test_streamed_calls_arrive_as_tool_call_deltas(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(messages=user("What is the weather in Rome?"), tools=TOOLS,
                                            tool_choice="required", stream=True, **ASK)
    calls: dict[int, dict[str, str]] = {}
    finish, content = None, ""
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for part in delta.tool_calls or []:
            call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += part.id or ""
            call["name"] += (part.function.name or "") if part.function else ""
            call["arguments"] += (part.function.arguments or "") if part.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == "" and calls
    for call in calls.values():
        assert call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["arguments"]), PARAMETERS[call["name"]])


def test_a_conversation_with_calls_and_results_goes_on(client: openai.OpenAI) -> None:
    history = [*user("What is the weather in Paris?"),
               {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                   "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees celsius, sunny"}]
    choice = client.chat.completions.create(messages=history, tools=TOOLS, **ASK).choices[0]
    if choice.finish_reason == "tool_calls":
        check_calls(choice.message.tool_calls, {"get_weather", "add"})
    else:
        check_text(choice)


def test_response_format_json_object_and_schema_parse_and_validate(client: openai.OpenAI) -> None:
    question = user('Reply with only a JSON object {"name": ..., "age": ...} for Ada, who is 36.')
    plain = client.chat.completions.create(messages=question, response_format={"type": "json_object"}, **ASK)
    assert plain.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(plain.choices[0].message.content), dict)
    schema = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}
    reply = client.chat.completions.create(messages=question, response_format=schema, **ASK)
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content), PERSON)
    streamed = client.chat.completions.create(messages=question, response_format=schema, stream=True, **ASK)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    jsonschema.validate(json.loads(text), PERSON)


def test_bad_shapes_and_schemas_are_400_naming_the_field(client: openai.OpenAI) -> None:
    import openai

    for extra, param in (
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}}}, "response_format.json_schema.name"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
         "response_format.json_schema.schema"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"x": {"type": "string", "pattern": "(unclosed"}}}}}]},
         "tools[0].function.parameters"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ):
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(messages=user("hi"), **extra, **ASK)
        assert error.value.param == param, error.value.message
    assert client.chat.completions.create(messages=user("hi"), **{**ASK, "max_tokens": 2}).choices[0].message.content


def test_run_tools_prints_the_calls_as_json(smollm_f32: Path, smollm_q4_1: Path, tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    done = subprocess.run(
        [sys.executable, "-m", "localspec", "run", "--target", str(smollm_f32), "--draft", str(smollm_q4_1),
         "--tools", str(tools), "--tool-choice", "get_weather", "--temperature", "0", "--max-tokens", "160",
         "What is the weather in Paris?"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)["tool_calls"]
    assert [call["name"] for call in calls] == ["get_weather"]
    jsonschema.validate(calls[0]["arguments"], PARAMETERS["get_weather"])
    cut = subprocess.run(
        [sys.executable, "-m", "localspec", "run", "--target", str(smollm_f32), "--draft", str(smollm_q4_1),
         "--tools", str(tools), "--tool-choice", "get_weather", "--temperature", "0", "--max-tokens", "3", "--json",
         "What is the weather in Paris?"], capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(cut.stdout)
    assert cut.returncode == 1 and report["complete"] is False and report["tool_calls"] is None  # cut short, not text
