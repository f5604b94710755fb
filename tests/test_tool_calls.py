"""Tool calls on tiny models: definitions checked, each call syntax rendered by its real chat template, held to by
its grammar (an llguidance matcher on the tiny model's tokenizer), and read back; request bodies checked.

The Qwen2.5 and Llama 3.1 templates in tests/data are the models' published Jinja texts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import llguidance
import pytest
from cli_helpers import cli, one_error_line

from localspec.app.openai_request import ApiError, parse_request
from localspec.app.session import Session
from localspec.app.tool_calls import (
    MAX_CALLS,
    CallStream,
    ToolError,
    ToolSyntax,
    chat_input,
    detect_syntax,
    parse_calls,
    prepare_tools,
    tool_request,
)
from localspec.errors import InputError
from localspec.runtime.chat_template import render_chat
from localspec.runtime.model import Model
from localspec.settings import ChatSettings, GenerationSettings, ModelSettings

DATA = Path(__file__).parent / "data"
QWEN = (DATA / "qwen2.5-instruct.jinja").read_text()
LLAMA = (DATA / "llama3.1-instruct.jinja").read_text()
PLAIN = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}<|assistant|>"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
                   "required": ["city"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                  "required": ["a", "b"]}}}
TOOLS = [WEATHER, ADD]

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "18 C, sunny", "tool_call_id": "call_1"},
]

# A whole call in each syntax, a malformed one (wrong argument type, unknown argument, or bad framing), plain text.
CALLS = {
    ToolSyntax.HERMES: ('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
                        ['<tool_call>\n{"name": "add", "arguments": {"a": "1", "b": 2}}\n</tool_call>',
                         '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2, "c": 3}}\n</tool_call>',
                         '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>']),
    ToolSyntax.LLAMA3: ('{"name": "get_weather", "parameters": {"city": "Paris"}}',
                        ['{"name": "get_weather", "arguments": {"city": "Paris"}}',
                         '{"name": "get_weather", "parameters": {"days": 2}}',
                         '{"name": "get_time", "parameters": {}}']),
    ToolSyntax.JSON: ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]}',
                      ['{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 0}}]}',
                       '{"tool_calls": []}',
                       '{"name": "get_weather", "arguments": {"city": "Paris"}}']),
}
TEMPLATES = {ToolSyntax.HERMES: QWEN, ToolSyntax.LLAMA3: LLAMA, ToolSyntax.JSON: PLAIN}


@pytest.fixture(scope="module")
def tiny_target(tiny_pair: tuple[Path, Path]) -> Iterator[Model]:
    model = Model(tiny_pair[0], ModelSettings(n_threads=1))
    yield model
    model.close()


def accepts(model: Model, grammar: str, text: str) -> bool:
    """Whether the grammar takes `text` whole, token by token, and may end there."""
    tokenizer = model.grammar_tokenizer()
    matcher = llguidance.LLMatcher(tokenizer, grammar)
    tokens = tokenizer.greedy_tokenize(text)  # the tokens spelling `text` byte for byte
    return matcher.validate_tokens(tokens) == len(tokens) and matcher.consume_tokens(tokens) and matcher.is_accepting()


def request(choice: Any = None, parallel: Any = None, tools: Any = TOOLS):
    made = tool_request(tools, choice, parallel)
    assert made is not None
    return made


# -- the syntax each template shows, and how it renders tools and their history -------------------------


def test_the_syntax_is_read_from_the_template() -> None:
    assert detect_syntax(QWEN) is ToolSyntax.HERMES
    assert detect_syntax(LLAMA) is ToolSyntax.LLAMA3
    assert detect_syntax(PLAIN) is ToolSyntax.JSON and detect_syntax(None) is ToolSyntax.JSON


def test_qwen_renders_the_tools_earlier_calls_and_their_results() -> None:
    messages, tools = chat_input(HISTORY, prepare_tools(request(), QWEN, lambda text: False), QWEN)
    text = render_chat(QWEN, messages, tools=tools)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps({"type": "function", "function": WEATHER["function"]}) + "\n" in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
            '<|im_end|>') in text
    assert "<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text


def test_llama_renders_the_tools_in_the_first_user_message_and_results_as_ipython() -> None:
    messages, tools = chat_input(HISTORY, prepare_tools(request(), LLAMA, lambda text: False), LLAMA)
    text = render_chat(LLAMA, messages, tools=tools)
    assert "Environment: ipython\n" in text
    assert ('Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}'
            in text)
    assert json.dumps({"type": "function", "function": WEATHER["function"]}, indent=4) in text
    assert ('<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Paris"}}'
            '<|eot_id|>') in text
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n"18 C, sunny"<|eot_id|>' in text


def test_a_template_without_tool_syntax_gets_the_tools_in_its_system_message() -> None:
    messages, tools = chat_input(HISTORY, prepare_tools(request(), PLAIN, lambda text: False), PLAIN)
    assert tools is None  # described in the system message instead
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("Be brief.\n\nYou can call these tools")
    assert json.dumps(WEATHER["function"]) in messages[0]["content"]
    assert messages[2] == {"role": "assistant",
                           "content": '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'}
    assert messages[3] == {"role": "user", "content": "Tool result for call call_1: 18 C, sunny"}


@pytest.mark.parametrize("syntax", list(ToolSyntax))
def test_each_template_renders_tool_history_on_a_tiny_model(tiny_target: Model, syntax: ToolSyntax) -> None:
    template = TEMPLATES[syntax]
    session = Session(tiny_target, chat=ChatSettings(template=template))
    messages, tools = chat_input(HISTORY, prepare_tools(request(), template, lambda text: False), template)
    tokens = session.chat_prompt_tokens(messages, tools)
    text = render_chat(template, messages, tools=tools)
    assert tokens == [tiny_target.bos_token, *tiny_target.tokenize(text, add_special=False, parse_special=True)]


# -- the grammar of each syntax ---------------------------------------------------------------------------


@pytest.mark.parametrize("syntax", list(ToolSyntax))
def test_the_grammar_takes_a_whole_call_and_refuses_a_malformed_one(tiny_target: Model, syntax: ToolSyntax) -> None:
    valid, malformed = CALLS[syntax]
    for choice in ("auto", "required"):
        grammar = prepare_tools(request(choice), TEMPLATES[syntax], lambda text: False).grammar
        assert accepts(tiny_target, grammar, valid), (choice, valid)
        for text in malformed:
            assert not accepts(tiny_target, grammar, text), (choice, text)
        assert accepts(tiny_target, grammar, "The sky is blue.") is (choice == "auto")
    assert parse_calls(valid, syntax)


@pytest.mark.parametrize("syntax", list(ToolSyntax))
def test_a_named_tool_is_the_only_one_callable(tiny_target: Model, syntax: ToolSyntax) -> None:
    named = prepare_tools(request({"type": "function", "function": {"name": "add"}}), TEMPLATES[syntax],
                          lambda text: False).grammar
    add_call = {ToolSyntax.HERMES: '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
                ToolSyntax.LLAMA3: '{"name": "add", "parameters": {"a": 1, "b": 2}}',
                ToolSyntax.JSON: '{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}'}[syntax]
    assert accepts(tiny_target, named, add_call)
    assert not accepts(tiny_target, named, add_call.replace('"add"', '"get_weather"'))


def test_auto_text_may_not_start_like_a_call(tiny_target: Model) -> None:
    hermes = prepare_tools(request(), QWEN, lambda text: False).grammar
    assert not accepts(tiny_target, hermes, "  <tool_call>\nnot a call")
    json_form = prepare_tools(request(), PLAIN, lambda text: False).grammar
    assert not accepts(tiny_target, json_form, ' {"answer": 4}')
    assert accepts(tiny_target, json_form, "The answer is {4}.")


def test_parallel_calls_are_bounded_and_can_be_turned_off(tiny_target: Model) -> None:
    one = '{"name": "add", "arguments": {"a": 1, "b": 2}}'

    def several(n: int) -> str:
        return '{"tool_calls": [' + ", ".join([one] * n) + "]}"

    parallel = prepare_tools(request("required"), PLAIN, lambda text: False).grammar
    assert accepts(tiny_target, parallel, several(MAX_CALLS))
    assert not accepts(tiny_target, parallel, several(MAX_CALLS + 1))
    single = prepare_tools(request("required", parallel=False), PLAIN, lambda text: False).grammar
    assert accepts(tiny_target, single, several(1)) and not accepts(tiny_target, single, several(2))
    calls = parse_calls(several(2), ToolSyntax.JSON)
    assert calls and [call.name for call in calls] == ["add", "add"] and calls[0].id != calls[1].id


def test_an_arguments_schema_llguidance_rejects_is_one_line() -> None:
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "pattern": "(unclosed"}}}}}
    with pytest.raises(ToolError, match=r"^tools\[1\]\.function\.parameters: .*unclosed group") as error:
        prepare_tools(request(tools=[ADD, bad]), PLAIN, lambda text: False)
    assert error.value.param == "tools[1].function.parameters"


# -- reading calls back, and sorting a stream --------------------------------------------------------------


def test_calls_are_read_back_and_anything_else_is_text() -> None:
    hermes = parse_calls('<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
                         '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>', ToolSyntax.HERMES)
    assert hermes and [(c.name, json.loads(c.arguments)) for c in hermes] == [("a", {"x": 1}), ("b", {})]
    assert all(call.id.startswith("call_") for call in hermes)
    assert parse_calls("Hello", ToolSyntax.HERMES) is None
    assert parse_calls('<tool_call>\n{"name": "a", "argu', ToolSyntax.HERMES) is None  # cut short
    assert parse_calls('{"name": "a", "parameters": [1]}', ToolSyntax.LLAMA3) is None
    assert parse_calls('{"tool_calls": [{"name": "a"', ToolSyntax.JSON) is None


def test_a_stream_passes_text_at_once_and_holds_a_call() -> None:
    text = CallStream(ToolSyntax.HERMES, forced=False)
    assert text.feed("  <to") == ""  # may still become a call
    assert text.feed("day") == "  <today"
    assert text.feed(" it rains") == " it rains" and text.rest() == ""
    call = CallStream(ToolSyntax.JSON, forced=False)
    assert call.feed(' {"tool') == "" and call.feed('_calls"') == ""
    assert call.rest() == ' {"tool_calls"'
    forced = CallStream(ToolSyntax.LLAMA3, forced=True)
    assert forced.feed("Hello") == "" and forced.rest() == "Hello"


# -- tool definitions and request bodies -------------------------------------------------------------------


@pytest.mark.parametrize("tools, choice, param", [
    ("get_weather", None, "tools"),
    ([{"type": "retrieval"}], None, "tools[0]"),
    ([{"type": "function"}], None, "tools[0].function"),
    ([{"type": "function", "function": {"name": "a b"}}], None, "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "f", "parameters": []}}], None, "tools[0].function.parameters"),
    ([{"type": "function", "function": {"name": "f", "description": 5}}], None, "tools[0].function.description"),
    ([WEATHER, WEATHER], None, "tools[1].function.name"),
    (TOOLS, "sometimes", "tool_choice"),
    (TOOLS, {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
    (None, "required", "tool_choice"),
])
def test_wrong_tools_and_choices_name_the_field(tools: Any, choice: Any, param: str) -> None:
    with pytest.raises(ToolError) as error:
        tool_request(tools, choice)
    assert error.value.param == param


def test_no_tools_or_choice_none_offers_none() -> None:
    assert tool_request(None) is None and tool_request([]) is None and tool_request(TOOLS, "none") is None
    assert tool_request(None, "auto") is None


def parse(body: dict[str, Any], chat: bool = True):
    return parse_request({"messages": [{"role": "user", "content": "hi"}], **body}, chat=chat,
                         defaults=GenerationSettings(), has_draft=True)


@pytest.mark.parametrize("body, param", [
    ({"response_format": "json"}, "response_format"),
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format.json_schema.name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": []}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": "yes"}}},
     "response_format.json_schema.strict"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
     "response_format.json_schema.schema"),
    ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [{"role": "tool", "content": "18 C"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]},
     "messages[0].tool_calls[0]"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content"),
])
def test_wrong_shapes_are_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as error:
        parse(body)
    assert error.value.status == 400 and error.value.param == param, str(error.value)


def test_an_invalid_schema_names_what_llguidance_reported() -> None:
    with pytest.raises(ApiError) as error:
        parse({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}})
    assert "nonsense" in str(error.value)


def test_tools_are_for_chat_completions_only() -> None:
    with pytest.raises(ApiError) as error:
        parse_request({"prompt": "hi", "tools": [WEATHER]}, chat=False, defaults=GenerationSettings(), has_draft=True)
    assert error.value.param == "tools"


def test_good_bodies_parse_into_a_grammar_or_tools() -> None:
    assert parse({"response_format": {"type": "text"}}).grammar is None
    assert parse({"response_format": {"type": "json_object"}}).grammar
    schema = parse({"response_format": {"type": "json_schema", "json_schema": {
        "name": "p", "strict": True, "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}}})
    assert schema.grammar and schema.tools is None
    tools = parse({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "add"}},
                   "parallel_tool_calls": False,
                   "messages": [{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": None, "tool_calls": [
                                    {"id": "c1", "type": "function",
                                     "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
                                {"role": "tool", "tool_call_id": "c1", "content": "3"}]})
    assert tools.tools is not None and tools.tools.choice == "add" and not tools.tools.parallel
    assert tools.messages is not None
    assert tools.messages[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1, "b": 2}  # an object for templates
    assert tools.messages[2] == {"role": "tool", "content": "3", "tool_call_id": "c1"}


# -- run --tools: bad input before any model loads ---------------------------------------------------------


def test_run_tools_bad_files_are_one_line(tmp_path: Path) -> None:
    not_json = tmp_path / "tools.json"
    not_json.write_text("[{")
    one_error_line(cli("run", "--tools", str(not_json), "hi"), 2, "tools.json", "not valid JSON")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{"type": "function", "function": {"name": "a b"}}]))
    one_error_line(cli("run", "--tools", str(wrong), "hi"), 2, "wrong.json[0].function.name")
    one_error_line(cli("run", "--tools", str(tmp_path / "missing.json"), "hi"), 2, "missing.json")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(TOOLS))
    one_error_line(cli("run", "--tools", str(good), "--tool-choice", "nope", "hi"), 2, "--tool-choice", "nope")
    one_error_line(cli("run", "--tool-choice", "required", "hi"), 2, "--tool-choice needs --tools")
    one_error_line(cli("run", "--tools", str(good), "--format", "json", "hi"), 2, "--tools cannot be combined")


def test_a_schema_that_cannot_be_written_as_json_is_one_line() -> None:
    infinite = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "number", "maximum": float("inf")}}}}}
    with pytest.raises(InputError, match="cannot be written as JSON"):
        prepare_tools(request(tools=[infinite]), PLAIN, lambda text: False)
