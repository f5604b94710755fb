"""Tool calls on tiny models: definitions checked, each call syntax rendered by its real chat template, held to by
its grammar (an llguidance matcher on the tiny model's tokenizer), and read back; request bodies checked.

The Qwen2.5, Qwen3-Coder, GLM 4.6 and 4.7 Flash, Llama 3.1, Mistral Nemo and Mistral Small 3.2 templates in
tests/data are the models' published Jinja texts.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Iterator

import llguidance
import jsonschema
import pytest
from cli_helpers import cli, one_error_line
from grammar_helpers import accepts as accepts_bytes
from conftest import TINY_TEMPLATE
from gguf import TokenType
from starlette.testclient import TestClient
from tiny_models import N_SPECIAL_AND_BYTE_TOKENS, random_weights, write_model

from localspec.app.generation_queue import GenerationQueue
from localspec.app.openai_request import ApiError, parse_request
from localspec.app.serving import ServedModel, create_app
from localspec.app.session import Session
from localspec.app.tool_call_frames import Hole, template_frame
from localspec.app.tool_call_xml import XmlLayout, read_function
from localspec.app.tool_calls import (
    MAX_CALLS,
    CallStream,
    Tool,
    ToolCall,
    ToolError,
    ToolSetup,
    ToolSyntax,
    arguments_json,
    chat_input,
    detect_syntax,
    marker_tokens,
    mistral_id,
    parse_calls,
    prepare_tools,
    tool_grammar,
    tool_request,
)
from localspec.config.paths import user_profiles_dir
from localspec.engine.generation import Generation, StopReason
from localspec.errors import InputError
from localspec.runtime.chat_template import render_chat
from localspec.runtime.model import Model
from localspec.settings import ChatSettings, GenerationSettings, ModelSettings

DATA = Path(__file__).parent / "data"
QWEN = (DATA / "qwen2.5-instruct.jinja").read_text()
LLAMA = (DATA / "llama3.1-instruct.jinja").read_text()
QWEN_CODER = (DATA / "qwen3-coder.jinja").read_text()
GLM, GLM_FLASH = ((DATA / name).read_text() for name in ("glm-4.6.jinja", "glm-4.7-flash.jinja"))
NEMO = (DATA / "mistral-nemo-instruct-2407.jinja").read_text()
MISTRAL_SMALL = (DATA / "mistral-small-3.2-instruct-2506.jinja").read_text()
KIMI, DEEPSEEK = ((DATA / name).read_text() for name in ("kimi-k2-instruct.jinja", "deepseek-v3.1.jinja"))
SEED, MINIMAX, DSML = ((DATA / name).read_text()
                       for name in ("seed-oss.jinja", "minimax-m2.jinja", "deepseek-v3.2.jinja"))
GEMMA, LFM = ((DATA / name).read_text() for name in ("gemma-4.jinja", "lfm2.5.jinja"))
LFM_CALL = "<|tool_call_start|>[add(a=1, b=2)]<|tool_call_end|>"
GEMMA_CALL = '<|tool_call>call:add{a:1,b:2}<tool_call|>'
KIMI_CALL = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>"
             '{"a": 1, "b": 2}<|tool_call_end|><|tool_calls_section_end|>')
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
    ToolSyntax.XML: ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                     "</tool_call>",
                     ["<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                      "<parameter=days>\n0\n</parameter>\n</function>\n</tool_call>",
                      "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n"
                      "</tool_call>",
                      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>']),
    ToolSyntax.ARG_KEYS: ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
                          ["<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                           "<arg_key>days</arg_key>\n<arg_value>0</arg_value>\n</tool_call>",
                           "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
                           "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"]),
    ToolSyntax.MISTRAL: ('[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "a1B2c3D4e"}]',
                         ['[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "short"}]',
                          '[TOOL_CALLS][{"name": "add", "arguments": {"a": "1", "b": 2}}]',
                          '[TOOL_CALLS]{"name": "add", "arguments": {"a": 1, "b": 2}}']),
    ToolSyntax.MISTRAL_ARGS: ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
                              ['[TOOL_CALLS]get_weather[ARGS]{"city": 5}',
                               '[TOOL_CALLS]get_weather{"city": "Paris"}',
                               '[TOOL_CALLS]get_time[ARGS]{}']),
    ToolSyntax.FRAMED: (KIMI_CALL,
                        [KIMI_CALL.replace('"a": 1', '"a": "1"'), KIMI_CALL.replace('"b": 2', '"b": 2, "c": 3'),
                         KIMI_CALL.replace("add:0", "add")]),
    ToolSyntax.GEMMA: (GEMMA_CALL,
                       [GEMMA_CALL.replace("a:1", 'a:<|"|>1<|"|>'), GEMMA_CALL.replace("{a:1,b:2}", "{b:2,a:1}"),
                        GEMMA_CALL.replace("b:2", "b:2,c:3")]),
    ToolSyntax.PYTHONIC: (LFM_CALL, [LFM_CALL.replace("a=1", "a='1'"), LFM_CALL.replace("a=1, b=2", "b=2, a=1"),
                                     LFM_CALL.replace("[add", "add").replace(")]", ")")]),
    ToolSyntax.JSON: ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]}',
                      ['{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 0}}]}',
                       '{"tool_calls": []}',
                       '{"name": "get_weather", "arguments": {"city": "Paris"}}']),
}
TEMPLATES = {ToolSyntax.HERMES: QWEN, ToolSyntax.XML: QWEN_CODER, ToolSyntax.ARG_KEYS: GLM, ToolSyntax.LLAMA3: LLAMA,
             ToolSyntax.MISTRAL: NEMO,
             ToolSyntax.MISTRAL_ARGS: MISTRAL_SMALL, ToolSyntax.FRAMED: KIMI, ToolSyntax.GEMMA: GEMMA,
             ToolSyntax.PYTHONIC: LFM, ToolSyntax.JSON: PLAIN}
# A call of `add` (a=1, b=2) in each syntax but those with tagged parameters (`add_call` writes those).
ADD_CALLS = {ToolSyntax.HERMES: '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
             ToolSyntax.LLAMA3: '{"name": "add", "parameters": {"a": 1, "b": 2}}',
             ToolSyntax.MISTRAL: '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}]',
             ToolSyntax.MISTRAL_ARGS: '[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}',
             ToolSyntax.FRAMED: KIMI_CALL,
             ToolSyntax.GEMMA: GEMMA_CALL,
             ToolSyntax.PYTHONIC: LFM_CALL,
             ToolSyntax.JSON: '{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}'}


def add_call(syntax: ToolSyntax, name: str = "add", arguments: str = '{"a": 1, "b": 2}') -> str:
    """A call of `add` in `syntax` (`ADD_CALLS`), or of another tool or with other arguments (JSON values)."""
    if syntax is ToolSyntax.XML:
        parameters = "".join(f"<parameter={key}>\n{json.dumps(value)}\n</parameter>\n"
                             for key, value in json.loads(arguments).items())
        return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"
    if syntax is ToolSyntax.ARG_KEYS:
        parameters = "".join(f"<arg_key>{key}</arg_key>\n<arg_value>{json.dumps(value)}</arg_value>\n"
                             for key, value in json.loads(arguments).items())
        return f"<tool_call>{name}\n{parameters}</tool_call>"
    if syntax is ToolSyntax.GEMMA:  # (keys bare and sorted, strings between <|"|> marks)
        quote = '<|"|>'
        written = ",".join(f"{key}:{quote + value + quote if isinstance(value, str) else json.dumps(value)}"
                           for key, value in sorted(json.loads(arguments).items()))
        return f"<|tool_call>call:{name}{{{written}}}<tool_call|>"
    if syntax is ToolSyntax.PYTHONIC:  # (keyword arguments, strings between single quotes)
        written = ", ".join(f"{key}={chr(39) + value + chr(39) if isinstance(value, str) else json.dumps(value)}"
                            for key, value in json.loads(arguments).items())
        return f"<|tool_call_start|>[{name}({written})]<|tool_call_end|>"
    call = ADD_CALLS[syntax].replace('{"a": 1, "b": 2}', arguments)
    return call.replace('"add"', json.dumps(name)).replace("]add[", f"]{name}[").replace(".add:", f".{name}:")


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
    assert detect_syntax(NEMO) is ToolSyntax.MISTRAL and detect_syntax(MISTRAL_SMALL) is ToolSyntax.MISTRAL_ARGS
    assert detect_syntax(QWEN_CODER) is ToolSyntax.XML
    assert detect_syntax(PLAIN) is ToolSyntax.JSON and detect_syntax(None) is ToolSyntax.JSON


def test_qwen_renders_the_tools_earlier_calls_and_their_results() -> None:
    messages, tools = chat_input(HISTORY, prepare_tools(request(), QWEN, lambda text: None), QWEN)
    text = render_chat(QWEN, messages, tools=tools)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps({"type": "function", "function": WEATHER["function"]}) + "\n" in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
            '<|im_end|>') in text
    assert "<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text


def test_llama_renders_the_tools_in_the_first_user_message_and_results_as_ipython() -> None:
    messages, tools = chat_input(HISTORY, prepare_tools(request(), LLAMA, lambda text: None), LLAMA)
    text = render_chat(LLAMA, messages, tools=tools)
    assert "Environment: ipython\n" in text
    assert ('Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}'
            in text)
    assert json.dumps({"type": "function", "function": WEATHER["function"]}, indent=4) in text
    assert ('<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Paris"}}'
            '<|eot_id|>') in text
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n"18 C, sunny"<|eot_id|>' in text


def test_a_template_without_tool_syntax_gets_the_tools_in_its_system_message() -> None:
    messages, tools = chat_input(HISTORY, prepare_tools(request(), PLAIN, lambda text: None), PLAIN)
    assert tools is None  # described in the system message instead
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("Be brief.\n\nYou can call these tools")
    assert json.dumps(WEATHER["function"]) in messages[0]["content"]
    assert messages[2] == {"role": "assistant",
                           "content": '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'}
    assert messages[3] == {"role": "user", "content": "Tool result for call call_1: 18 C, sunny"}


def test_an_earlier_call_with_a_number_past_a_floats_range_is_rendered_as_written() -> None:
    """Read as JSON, `1e999` became infinity, which the templates wrote `Infinity` into the prompt."""
    from localspec.app.tool_calls import history_message

    def history(arguments: str) -> Any:
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
        message = history_message({"role": "assistant", "tool_calls": [call]}, "assistant", None, "messages[1]")
        return message["tool_calls"][0]["function"]["arguments"]

    assert history('{"x": 1e999}') == '{"x": 1e999}' and history('{"x": NaN}') == '{"x": NaN}'
    assert history('{"x": 1.5, "y": [1]}') == {"x": 1.5, "y": [1]}
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": history('{"x": 1e999}')}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    assert "Infinity" not in render_chat(QWEN, messages)


def test_results_of_parallel_calls_are_one_user_message_for_a_template_whose_roles_alternate() -> None:
    """Gemma 3's template refuses two user messages in a row: each result as its own message failed there."""
    alternating = ("{% for m in messages %}{% if (m['role'] == 'user') != loop.index0 is even %}"
                   "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
                   "{% endif %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>")
    calls = [{"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}
             for i, city in enumerate(["Paris", "Rome"])]
    history = [{"role": "user", "content": "Weather in Paris and Rome?"},
               {"role": "assistant", "content": "", "tool_calls": calls},
               {"role": "tool", "content": "18 C", "tool_call_id": "call_0"},
               {"role": "tool", "content": "24 C", "tool_call_id": "call_1"},
               {"role": "user", "content": "And tomorrow?"}]
    messages, _ = chat_input(history, prepare_tools(request(), alternating, lambda text: None), alternating)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[3]["content"] == ("Tool result for call call_0: 18 C\n\nTool result for call call_1: 24 C"
                                      "\n\nAnd tomorrow?")
    assert "<user>Tool result for call call_0" in render_chat(alternating, messages[1:])


@pytest.mark.parametrize("syntax", list(ToolSyntax))
@pytest.mark.slow
def test_each_template_renders_tool_history_on_a_tiny_model(tiny_target: Model, syntax: ToolSyntax) -> None:
    template = TEMPLATES[syntax]
    session = Session(tiny_target, chat=ChatSettings(template=template))
    messages, tools = chat_input(HISTORY, prepare_tools(request(), template, lambda text: None), template)
    tokens = session.chat_prompt_tokens(messages, tools)
    text = render_chat(template, messages, tools=tools, eos_token=tiny_target.detokenize_special(tiny_target.eos_token))
    assert tokens == [tiny_target.bos_token, *tiny_target.tokenize(text, add_special=False, parse_special=True)]


# -- the grammar of each syntax ---------------------------------------------------------------------------


@pytest.mark.parametrize("syntax", list(ToolSyntax))
@pytest.mark.slow
def test_the_grammar_takes_a_whole_call_and_refuses_a_malformed_one(tiny_target: Model, syntax: ToolSyntax) -> None:
    valid, malformed = CALLS[syntax]
    for choice in ("auto", "required"):
        grammar = prepare_tools(request(choice), TEMPLATES[syntax], lambda text: None).grammar
        assert accepts(tiny_target, grammar, valid), (choice, valid)
        for text in malformed:
            assert not accepts(tiny_target, grammar, text), (choice, text)
        assert accepts(tiny_target, grammar, "The sky is blue.") is (choice == "auto")
    assert parse_calls(valid, syntax, request().tools, frame=template_frame(TEMPLATES[syntax]))


@pytest.mark.parametrize("syntax", list(ToolSyntax))
def test_a_named_tool_is_the_only_one_callable(tiny_target: Model, syntax: ToolSyntax) -> None:
    named = prepare_tools(request({"type": "function", "function": {"name": "add"}}), TEMPLATES[syntax],
                          lambda text: None).grammar
    assert accepts(tiny_target, named, add_call(syntax))
    assert not accepts(tiny_target, named, add_call(syntax, "get_weather"))


def test_auto_text_may_not_start_like_a_call(tiny_target: Model) -> None:
    hermes = prepare_tools(request(), QWEN, lambda text: None).grammar
    assert not accepts(tiny_target, hermes, "  <tool_call>\nnot a call")
    json_form = prepare_tools(request(), PLAIN, lambda text: None).grammar
    assert not accepts(tiny_target, json_form, ' {"answer": 4}')
    assert accepts(tiny_target, json_form, "The answer is {4}.")
    for template in (NEMO, MISTRAL_SMALL):
        mistral = prepare_tools(request(), template, lambda text: None).grammar
        assert not accepts(tiny_target, mistral, " [TOOL_CALLS]not a call")
        assert accepts(tiny_target, mistral, "[1, 2] is a list.")


@pytest.mark.parametrize("template", [NEMO, MISTRAL_SMALL])
def test_mistral_templates_get_call_ids_they_take(template: str) -> None:
    """Both refuse an id that is not nine letters or digits (`call_1`, OpenAI's `call_…`): such ids are rendered
    as nine hex digits of their hash, alike in the call and in its result; ids of nine are kept."""
    kept = "a1B2c3D4e"
    history = [*HISTORY, {"role": "assistant", "content": "", "tool_calls": [
        {"id": kept, "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
               {"role": "tool", "content": "3", "tool_call_id": kept}]
    messages, tools = chat_input(history, prepare_tools(request(), template, lambda text: None), template)
    text = render_chat(template, messages, tools=tools)
    mapped = mistral_id("call_1")
    assert len(mapped) == 9 and mapped.isalnum() and mistral_id(kept) == kept
    assert text.count(mapped) == 2 and text.count(kept) == 2 and "call_1" not in text
    assert "[AVAILABLE_TOOLS]" in text and '"get_weather"' in text
    with pytest.raises(Exception, match="alphanumeric strings with length 9"):
        render_chat(template, history, tools=tools)  # (what the template says of the ids as a client sent them)
    no_calls = [*HISTORY[:2], {"role": "assistant", "content": "Sunny.", "tool_calls": []},
                {"role": "user", "content": "Thanks"}]
    parsed = parse({"messages": no_calls})  # (`[]` was taken for calls: the template refused the roles' order)
    assert parsed.messages is not None and "tool_calls" not in parsed.messages[2]
    render_chat(template, chat_input(parsed.messages, None, template)[0])


def test_mistral_calls_are_bounded_and_can_be_turned_off(tiny_target: Model) -> None:
    def several(n: int) -> str:
        return "".join(['[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}'] * n)

    parallel = prepare_tools(request("required"), MISTRAL_SMALL, lambda text: None).grammar
    assert accepts(tiny_target, parallel, several(MAX_CALLS))
    assert not accepts(tiny_target, parallel, several(MAX_CALLS + 1))
    single = prepare_tools(request("required", parallel=False), MISTRAL_SMALL, lambda text: None).grammar
    assert accepts(tiny_target, single, several(1)) and not accepts(tiny_target, single, several(2))
    listed = prepare_tools(request("required"), NEMO, lambda text: None).grammar
    two = '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "add", "arguments": {"a": 3, "b": 4}}]'
    assert accepts(tiny_target, listed, two)
    assert accepts(tiny_target, listed, two.replace("[TOOL_CALLS][", "[TOOL_CALLS] ["))  # (7B v0.3's spacing)


def test_parallel_calls_are_bounded_and_can_be_turned_off(tiny_target: Model) -> None:
    one = '{"name": "add", "arguments": {"a": 1, "b": 2}}'

    def several(n: int) -> str:
        return '{"tool_calls": [' + ", ".join([one] * n) + "]}"

    parallel = prepare_tools(request("required"), PLAIN, lambda text: None).grammar
    assert accepts(tiny_target, parallel, several(MAX_CALLS))
    assert not accepts(tiny_target, parallel, several(MAX_CALLS + 1))
    single = prepare_tools(request("required", parallel=False), PLAIN, lambda text: None).grammar
    assert accepts(tiny_target, single, several(1)) and not accepts(tiny_target, single, several(2))
    calls = parse_calls(several(2), ToolSyntax.JSON)
    assert calls and [call.name for call in calls] == ["add", "add"] and calls[0].id != calls[1].id


def test_an_arguments_schema_llguidance_rejects_is_one_line() -> None:
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "pattern": "(unclosed"}}}}}
    with pytest.raises(ToolError, match=r"^tools\[1\]\.function\.parameters: .*unclosed group") as error:
        prepare_tools(request(tools=[ADD, bad]), PLAIN, lambda text: None)
    assert error.value.param == "tools[1].function.parameters"


def test_the_rejected_schema_is_named_among_callable_tools_only() -> None:
    """A tool left out of the grammar (tool_choice names another) is neither compiled nor blamed, even one whose
    schema could not be written as JSON."""
    unwritable = {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {
        "x": {"type": "number", "maximum": float("nan")}}}}}
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "pattern": "(unclosed"}}}}}
    forced_bad = {"type": "function", "function": {"name": "f"}}
    with pytest.raises(ToolError, match=r"^tools\[1\]\.function\.parameters: .*unclosed group"):
        prepare_tools(request(forced_bad, tools=[unwritable, bad]), PLAIN, lambda text: None)


def test_arguments_a_schema_leaves_open_are_bounded_as_for_a_json_schema() -> None:
    from localspec.engine.grammar import NUMBER_MAGNITUDE_LIMIT, STRING_LENGTH_LIMIT

    parameters = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    held_to = json.loads(arguments_json(Tool("forecast", parameters, {})))["properties"]
    assert held_to["city"]["maxLength"] == STRING_LENGTH_LIMIT
    assert held_to["days"]["exclusiveMaximum"] == NUMBER_MAGNITUDE_LIMIT
    assert parameters["properties"]["city"] == {"type": "string"}  # the request's own schema is left as it was
    long_code = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[a-z]{300}$"}}, "required": ["code"]}
    assert "maxLength" not in json.loads(arguments_json(Tool("f", long_code, {})))["properties"]["code"]  # bounds that do not fit: none


# -- reading calls back, and sorting a stream --------------------------------------------------------------


def test_calls_are_read_back_and_anything_else_is_text() -> None:
    hermes = parse_calls('<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
                         '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>', ToolSyntax.HERMES)
    assert hermes and [(c.name, json.loads(c.arguments)) for c in hermes] == [("a", {"x": 1}), ("b", {})]
    assert all(call.id.startswith("call_") for call in hermes)
    assert parse_calls("Hello", ToolSyntax.HERMES) is None
    assert parse_calls('<tool_call>\n{"name": "a", "argu', ToolSyntax.HERMES) is None  # cut short
    assert parse_calls('Hi <tool_call>{"name": "a", "arguments": {}}</tool_call>', ToolSyntax.HERMES) is None
    quoting = parse_calls('<tool_call>{"name": "a", "arguments": {"x": "1</tool_call>2"}}</tool_call>', ToolSyntax.HERMES)
    assert quoting and json.loads(quoting[0].arguments) == {"x": "1</tool_call>2"}  # the tag inside a string is text
    assert parse_calls('{"name": "a", "parameters": [1]}', ToolSyntax.LLAMA3) is None
    assert parse_calls('{"tool_calls": [{"name": "a"', ToolSyntax.JSON) is None


NOTE = {"type": "function", "function": {"name": "save_note", "parameters": {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 12}, "body": {"type": "string"}, "tags": {"type": "array", "items": {
        "type": "string"}}, "priority": {"type": "string", "enum": ["low", "high"]}}, "required": ["title", "body"]}}}


def xml_call(*parameters: tuple[str, str]) -> str:
    written = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters)
    return f"<tool_call>\n<function=save_note>\n{written}</function>\n</tool_call>"


def test_xml_calls_write_strings_as_text_and_the_rest_as_json(tiny_target: Model) -> None:
    """A string's text may span lines and hold `</parameter>` not followed by a newline; it reads back as a
    JSON string, other values as the JSON the model wrote; parameters keep the schema's order, required ones."""
    setup = prepare_tools(request("required", tools=[NOTE]), QWEN_CODER, lambda text: None)
    body = 'line one\n  "quoted" </parameter> and \\ more'
    call = xml_call(("title", "Groceries"), ("body", body), ("tags", '["food", "weekly"]'), ("priority", "high"))
    assert accepts(tiny_target, setup.grammar, call)
    calls = setup.calls_in(call)
    assert calls and calls[0].name == "save_note"
    assert calls[0].arguments == ('{"title": "Groceries", "body": ' + json.dumps(body) + ', "tags": ["food", "weekly"],'
                                  ' "priority": "high"}')
    assert json.loads(calls[0].arguments)["body"] == body
    for wrong in [xml_call(("title", "A title too long"), ("body", "x")),  # maxLength 12
                  xml_call(("body", "x"), ("title", "T")),  # out of the schema's order
                  xml_call(("title", "T")),  # the required body left out
                  xml_call(("title", "T"), ("body", "x"), ("priority", "urgent")),  # not in its enum
                  xml_call(("title", "T"), ("body", "x"), ("tags", "food")),  # not JSON
                  xml_call(("title", "T"), ("body", "x"), ("color", "red"))]:  # not a parameter
        assert not accepts(tiny_target, setup.grammar, wrong), wrong
    assert parse_calls(xml_call(("title", "T"), ("body", "x")), ToolSyntax.XML) is None  # no tool offered by that name


def test_each_template_shows_its_layout_of_tagged_parameters() -> None:
    """Read from the template's own rendering of a call: GLM 4.7 writes no newlines where 4.6 does."""
    from localspec.app.tool_call_xml import ARG_KEYS, QWEN_XML

    layouts = {name: prepare_tools(request(), template, lambda text: None).layout
               for name, template in [("qwen", QWEN_CODER), ("glm", GLM), ("flash", GLM_FLASH)]}
    assert layouts["qwen"] == QWEN_XML and layouts["glm"] == ARG_KEYS
    assert (layouts["flash"].after_name, layouts["flash"].after_key, layouts["flash"].value_end) == (
        "", "</arg_key><arg_value>", "</arg_value>")
    flash = prepare_tools(request("required", tools=[NOTE]), GLM_FLASH, lambda text: None)
    call = ("<tool_call>save_note<arg_key>title</arg_key><arg_value>Milk</arg_value><arg_key>body</arg_key>"
            "<arg_value>two\nlitres</arg_value><arg_key>tags</arg_key><arg_value>[\"food\"]</arg_value></tool_call>")
    calls = flash.calls_in(call)
    assert calls and json.loads(calls[0].arguments) == {"title": "Milk", "body": "two\nlitres", "tags": ["food"]}
    assert flash.calls_in(call.replace("save_note<arg_key>", "save_note\n<arg_key>")) is None
    broken = "{% for m in messages %}{{ m.content }}<tool_call><arg_key>{{ raise_exception('no') }}{% endfor %}"
    assert prepare_tools(request(), broken, lambda text: None).layout == ARG_KEYS  # (its rendering fails)


def target_only_and_speculative(model: Model, template: str, setup: ToolSetup, ask: str,
                                 seed: int) -> list[Generation]:
    """A forced call drawn target-only and then speculatively (ngram) from the same seed, each run to its end."""
    session = Session(model, chat=ChatSettings(template=template))
    messages, definitions = chat_input([{"role": "user", "content": ask}], setup, template)
    generations = []
    for speculative in (False, True):
        settings = GenerationSettings.from_values({"sampling.max_tokens": 800, "sampling.seed": seed,
                                                   "speculative.strategy": "ngram"})
        generation = session.generation(session.chat_prompt_tokens(messages, definitions), settings,
                                        speculative=speculative, grammar=setup.grammar)
        list(generation)
        assert generation.stop_reason is StopReason.EOS, generation.text
        generations.append(generation)
    return generations


@pytest.mark.parametrize("template", [QWEN_CODER, GLM_FLASH, SEED, DSML])
@pytest.mark.slow
def test_a_call_with_tagged_parameters_is_drawn_and_read_back_on_a_tiny_model(tmp_path: Path, template: str) -> None:
    """Target-only and speculative decoding held to the grammar of tagged parameters (a lazy lexeme for each text
    value: drafts are rolled back over it) give the same call, which reads back."""
    short = json.loads(json.dumps(NOTE))
    short["function"]["parameters"]["properties"]["body"]["maxLength"] = 6
    short["function"]["parameters"]["properties"]["tags"] = {"type": "array", "maxItems": 2,
                                                             "items": {"type": "string", "maxLength": 4}}
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24  # (a context for the template's long tool prompt, spelled in bytes)
    model = Model(write_model(tmp_path / "long.gguf", random_weights(n_vocab, seed=3), n_vocab=n_vocab,
                              space_token=True, context_length=4096), ModelSettings(n_threads=1))
    try:
        setup = prepare_tools(request("required", parallel=False, tools=[short]), template, lambda text: None)
        generations = target_only_and_speculative(model, template, setup, "Note it.", seed=3)
        for generation in generations:
            calls = setup.calls_in(generation.text)
            assert calls and calls[0].name == "save_note", generation.text
            arguments = json.loads(calls[0].arguments)
            assert len(arguments["title"]) <= 12 and len(arguments["body"]) <= 6
        assert generations[0].text == generations[1].text
    finally:
        model.close()


def test_a_string_its_text_cannot_hold_is_json_and_a_schema_tags_cannot_hold_is_json_inside_tool_call(
        tiny_target: Model) -> None:
    """A pattern, a format or a minLength the text alone would not hold: that value is written as JSON, held to
    them. A schema that asks more of the arguments than their parameters one by one (or that no tag can write):
    the whole call is JSON inside <tool_call>, as Hermes's, with a note; these crashed or were held to less."""
    patterned = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"}, "note": {"type": "string", "minLength": 2}},
        "required": ["code"]}}}
    setup = prepare_tools(request("required", tools=[patterned]), QWEN_CODER, lambda text: None)
    assert setup.syntax is ToolSyntax.XML and not setup.warnings
    call = '<tool_call>\n<function=f>\n<parameter=code>\n"ABC"\n</parameter>\n</function>\n</tool_call>'
    assert accepts(tiny_target, setup.grammar, call)
    assert not accepts(tiny_target, setup.grammar, call.replace('"ABC"', '"abc"'))
    assert not accepts(tiny_target, setup.grammar, call.replace('"ABC"', "ABC"))
    calls = setup.calls_in(call)
    assert calls and json.loads(calls[0].arguments) == {"code": "ABC"}
    for parameters in [{"type": "object", "properties": {"a": False}},
                       {"type": "object", "properties": {"a>b": {"type": "string"}}},
                       {"type": "object", "properties": {"a": {"type": "string"}}, "anyOf": [{"required": ["a"]}]},
                       {"type": "object", "additionalProperties": {"type": "integer"}},
                       {"type": "object", "properties": {"name": {"type": "string"},
                                                         "children": {"type": "array", "items": {"$ref": "#"}}},
                        "required": ["name"]},
                       {"type": "object", "properties": {"node": {"$ref": "#/$defs/node"}},
                        "$defs": {"node": {"type": "object", "properties": {"up": {"$ref": "#"}}}}}]:
        tool = {"type": "function", "function": {"name": "g", "parameters": parameters}}
        held = prepare_tools(request("required", tools=[tool]), QWEN_CODER, lambda text: None)
        assert held.syntax is ToolSyntax.HERMES, parameters
        assert any("held as JSON inside <tool_call>" in note for note in held.warnings), held.warnings


def test_mistral_calls_are_read_back_with_the_ids_the_model_wrote() -> None:
    listed = parse_calls(' [TOOL_CALLS][{"name": "a", "arguments": {"x": 1}, "id": "a1B2c3D4e"}, '
                         '{"name": "b", "arguments": {}, "id": "nope"}]', ToolSyntax.MISTRAL)
    assert listed and [(c.name, c.arguments) for c in listed] == [("a", '{"x": 1}'), ("b", "{}")]
    assert listed[0].id == "a1B2c3D4e" and len(listed[1].id) == 9 and listed[1].id.isalnum()
    marked = parse_calls('[TOOL_CALLS]a[ARGS]{"x": [1, 2]}\n[TOOL_CALLS]b[CALL_ID]a1B2c3D4e[ARGS]{}',
                         ToolSyntax.MISTRAL_ARGS)
    assert marked and [(c.name, c.arguments, len(c.id)) for c in marked] == [("a", '{"x": [1, 2]}', 9), ("b", "{}", 9)]
    assert marked[1].id == "a1B2c3D4e" and marked[0].id.isalnum()
    copied = parse_calls('[TOOL_CALLS] [{"name": "a", "arguments": {}, "id": "a1B2c3D4e"}, '
                         '{"name": "b", "arguments": {}, "id": "a1B2c3D4e"}]', ToolSyntax.MISTRAL)
    assert copied and copied[0].id == "a1B2c3D4e" and copied[1].id != "a1B2c3D4e"  # (one id, one call)
    for text in ['[{"name": "a", "arguments": {}}]', '[TOOL_CALLS][{"name": "a", "arguments": {}}',
                 "Hi [TOOL_CALLS][]"]:
        assert parse_calls(text, ToolSyntax.MISTRAL) is None, text
    for text in ['[TOOL_CALLS]a{"x": 1}', "[TOOL_CALLS]a[ARGS][1]", "[TOOL_CALLS]a[CALL_ID]abc[ARGS]{}",
                 '[TOOL_CALLS]a[ARGS]{"x": 1} and text', 'a[ARGS]{"x": 1}']:
        assert parse_calls(text, ToolSyntax.MISTRAL_ARGS) is None, text


def test_arguments_are_passed_on_as_the_model_wrote_them() -> None:
    """Not re-encoded: Python reads 1e999 as infinity and wrote it back as `Infinity`, which no JSON parser takes."""
    written = '{"a": 1e999, "b": 1.50, "c": "\\u00e9"}'
    for syntax, text in [
        (ToolSyntax.HERMES, f'<tool_call>\n{{"name": "f", "arguments": {written}}}\n</tool_call>'),
        (ToolSyntax.LLAMA3, f'{{"name": "f", "parameters": {written}}}'),
        (ToolSyntax.JSON,
         f'{{"tool_calls": [{{"name": "g", "arguments": {{}}}}, {{"name": "f", "arguments": {written}}}]}}'),
    ]:
        calls = parse_calls(text, syntax)
        assert calls and calls[-1].name == "f" and calls[-1].arguments == written, (syntax, calls)
    assert parse_calls('{"tool_calls": [{"name": "f", "arguments": {}}, 1]}', ToolSyntax.JSON) is None
    deep = '{"name": "f", "parameters": {"a": ' + "[" * 5000 + "]" * 5000 + "}}"  # (a recursive schema allows it)
    assert parse_calls(deep, ToolSyntax.LLAMA3) is None  # not a RecursionError
    assert parse_calls('{"name": "f", "parameters": {}} {}', ToolSyntax.LLAMA3) is None


def test_run_prints_the_arguments_as_the_model_wrote_them() -> None:
    from localspec.cli.tool_options import json_with_calls

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} is no JSON")

    calls = [ToolCall("f", '{"a": 1e999, "b": "x"}'), ToolCall("g", "{}")]
    text = json_with_calls({"text": "…"}, calls)
    assert '"arguments": {"a": 1e999, "b": "x"}' in text and '"arguments": {}' in text
    assert json.loads(text, parse_constant=no_constants)["tool_calls"][1] == {"name": "g", "arguments": {}}
    assert json.loads(json_with_calls({}, None)) == {"tool_calls": None}


@pytest.mark.parametrize("syntax", list(ToolSyntax))
def test_text_the_grammar_lets_through_as_text_is_never_read_as_a_call(tiny_target: Model, syntax: ToolSyntax) -> None:
    """U+001C to U+001F are whitespace to Python's strip but not to llguidance's `\\s`: text that starts with one
    before a call's opening is plain text to the grammar (`auto`), so it must be to the reader too. And a call
    reads back only as a call of a tool offered."""
    setup = prepare_tools(request("auto"), TEMPLATES[syntax], lambda text: None)
    call = add_call(syntax, "rm_rf", "{}")
    text = "\x1c" + call
    assert accepts(tiny_target, setup.grammar, text)  # plain text, as far as the grammar goes
    assert setup.calls_in(text) is None
    stream = setup.stream()
    assert stream.feed(text) == text and not stream.call
    rm_rf = Tool("rm_rf", {"type": "object", "properties": {}}, {})
    assert parse_calls(call, syntax, [rm_rf], frame=setup.frame)  # a whole call…
    assert setup.calls_in(call) is None  # …of a tool not offered


def test_a_stream_passes_text_at_once_and_holds_a_call() -> None:
    text = CallStream(ToolSyntax.HERMES.opening(), forced=False)
    assert text.feed("  <to") == ""  # may still become a call
    assert text.feed("day") == "  <today"
    assert text.feed(" it rains") == " it rains" and text.rest() == ""
    call = CallStream(ToolSyntax.JSON.opening(), forced=False)
    assert call.feed(' {"tool') == "" and call.feed('_calls"') == ""
    assert call.rest() == ' {"tool_calls"'
    forced = CallStream(ToolSyntax.LLAMA3.opening(), forced=True)
    assert forced.feed("Hello") == "" and forced.rest() == "Hello"
    mistral = CallStream(ToolSyntax.MISTRAL.opening(), forced=False)
    assert mistral.feed("[TOOL") == "" and mistral.feed("_CALLS][") == "" and mistral.call
    listing = CallStream(ToolSyntax.MISTRAL_ARGS.opening(), forced=False)
    assert listing.feed("[1, 2]") == "[1, 2]" and not listing.call


# -- tool definitions and request bodies -------------------------------------------------------------------


@pytest.mark.parametrize("tools, choice, param", [
    ("get_weather", None, "tools"),
    ([{"type": "retrieval"}], None, "tools[0]"),
    ([{"type": "function"}], None, "tools[0].function"),
    ([{"type": "function", "function": {"name": "a b"}}], None, "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "get_weather\n"}}], None, "tools[0].function.name"),  # ($ before \n)
    ([{"type": "function", "function": {"name": "f", "parameters": []}}], None, "tools[0].function.parameters"),
    ([{"type": "function", "function": {"name": "f", "description": 5}}], None, "tools[0].function.description"),
    ([{"type": "function", "function": {"name": "f", "strict": "yes"}}], None, "tools[0].function.strict"),
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
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": 5, "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]},
     "messages[0].tool_calls[0].id"),
    # A call of another type, or without a name; arguments that are not an object's text (templates read them so).
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "zzz", "function": {"name": "f", "arguments": "{}"}}]}]}, "messages[0].tool_calls[0]"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "", "arguments": "{}"}}]}]}, "messages[0].tool_calls[0]"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    # A result that answers no call: after none, or naming an id no earlier call had.
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "zz", "content": "1"}]},
     "messages[1]"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "zz", "content": "1"}]}, "messages[1].tool_call_id"),
])
def test_wrong_shapes_are_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as error:
        parse(body)
    assert error.value.status == 400 and error.value.param == param, str(error.value)


@pytest.mark.parametrize("field, value", [
    ("grammar", 'root ::= "yes"'), ("json_schema", {"type": "object"}), ("n_predict", 8),
    ("min_tokens", 4), ("ignore_eos", True), ("modalities", ["text", "audio"]), ("prediction", {"content": "x"}),
    ("dry_multiplier", 0.8), ("typical_p", 0.9), ("mirostat", 2), ("guided_json", {"type": "object"}),
    ("n_probs", 5), ("chat_template_kwargs", {"add_generation_prompt": False}), ("stop_token_ids", [2]),
    ("return_tokens", True), ("skip_special_tokens", False), ("t_max_predict_ms", 500),
])
def test_other_servers_fields_that_change_the_output_are_refused(field: str, value: Any) -> None:
    with pytest.raises(ApiError) as error:
        parse({field: value})
    assert error.value.status == 400 and error.value.param == field, str(error.value)
    assert parse({"modalities": ["text"], "repeat_penalty": 1.0, "user": "u1", "metadata": {"a": "b"}}).messages


def test_what_llama_servers_clients_send_is_taken() -> None:
    """Its web UI sends its samplers at the values that turn them off, and options that change nothing here: one
    of them was refused as a misspelling (`dry_penalty_last_n`, of `penalty_last_n`). Its per-request draft
    settings are taken under its names."""
    sent = {"dry_multiplier": 0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1,
            "dry_sequence_breakers": ["\n"], "xtc_probability": 0, "xtc_threshold": 0.1, "typical_p": 1,
            "mirostat": 0.0, "n_probs": 0.0, "top_n_sigma": -1, "samplers": ["top_k", "min_p"], "cache_prompt": True,
            "timings_per_token": False, "speculative.n_max": 6, "speculative.n_min": 2, "speculative.p_min": 0.5}
    settings = parse(sent).settings.speculative
    assert (settings.draft_max, settings.draft_min, settings.p_min) == (6, 2, 0.5)


def test_a_schema_beside_json_object_holds_the_reply_to_it() -> None:
    """llama-server's form; it was ignored, and any JSON object passed."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    held = parse({"response_format": {"type": "json_object", "schema": schema}}).grammar
    assert held is not None and held != parse({"response_format": {"type": "json_object"}}).grammar
    with pytest.raises(ApiError) as error:
        parse({"response_format": {"type": "json_object", "schema": [1]}})
    assert error.value.param == "response_format.schema"


def test_a_body_that_is_not_utf8_is_refused_as_such() -> None:
    from localspec.app.openai_request import parse_body

    assert parse_body('\ufeff{"a": 1}'.encode()) == {"a": 1}
    for encoding in ("utf-16", "utf-32"):  # (json.loads of bytes guessed these, and took them)
        with pytest.raises(ApiError, match="not valid UTF-8"):
            parse_body('{"a": 1}'.encode(encoding))


def test_a_messages_name_reaches_the_template() -> None:
    named = parse({"messages": [{"role": "user", "content": "hi", "name": "alice"}]}).messages
    assert named == [{"role": "user", "content": "hi", "name": "alice"}]


def test_escaped_lone_surrogates_anywhere_in_a_body_become_replacement_characters() -> None:
    body = json.loads('{"messages": [{"role": "user", "content": "a\\ud800b"}, {"role": "assistant", "content": null,'
                      ' "tool_calls": [{"id": "c\\udfff", "type": "function", "function": {"name": "add",'
                      ' "arguments": "{\\"a\\": \\"\\\\ud83d\\"}"}}]}], "stop": ["\\ud800"]}')
    request = parse_request(body, chat=True, defaults=GenerationSettings(), has_draft=True)
    assert request.messages[0]["content"] == "a\ufffdb"
    call = request.messages[1]["tool_calls"][0]
    assert call["id"] == "c\ufffd" and call["function"]["arguments"] == {"a": "\ufffd"}
    assert request.settings.stop == ("\ufffd",)


def test_arguments_nested_too_deeply_are_400_naming_them() -> None:
    deep = "[" * 5_000 + "]" * 5_000
    call = {"id": "c", "type": "function", "function": {"name": "add", "arguments": deep}}
    with pytest.raises(ApiError) as error:
        parse({"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]})
    assert error.value.status == 400 and error.value.param == "messages[0].tool_calls[0].function.arguments"


def test_stream_options_and_stop_strings_are_checked_by_name_and_count() -> None:
    with pytest.raises(ApiError) as error:
        parse({"stream_options": {"include_usage": "yes"}})
    assert error.value.param == "stream_options.include_usage"
    with pytest.raises(ApiError, match="only allowed with stream: true") as error:
        parse({"stream_options": {"include_usage": True}})  # (as OpenAI answers it)
    assert error.value.param == "stream_options"
    assert parse({"stream": True, "stream_options": {"include_usage": True}}).include_usage
    with pytest.raises(ApiError) as error:
        parse({"stop": [f"s{n}" for n in range(17)]})  # each is looked for in every token's text
    assert error.value.param == "stop" and "at most 16" in str(error.value)
    assert parse({"stop": [f"s{n}" for n in range(16)]}).settings.stop


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
    # A parameters schema llguidance refuses is refused before any model is looked for (none is here).
    refused = tmp_path / "refused.json"
    refused.write_text(json.dumps([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "strng"}}}}}]))
    one_error_line(cli("run", "--target", str(tmp_path / "none.gguf"), "--tools", str(refused), "hi"), 2,
                   "refused.json[0].function.parameters", "strng")


def test_a_parameters_number_past_64_bits_is_named_with_its_tool() -> None:
    huge = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 10**30}}}}}
    with pytest.raises(ToolError, match=r"^tools\[1\]\.function\.parameters: the number 1000+ does not fit") as error:
        prepare_tools(request(tools=[ADD, huge]), PLAIN, lambda text: None)
    assert error.value.param == "tools[1].function.parameters"


def test_a_schema_that_cannot_be_written_as_json_is_one_line() -> None:
    infinite = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "number", "maximum": float("inf")}}}}}
    with pytest.raises(InputError, match="cannot be written as JSON"):
        prepare_tools(request(tools=[infinite]), PLAIN, lambda text: None)


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_a_deeply_nested_tools_file_or_schema_is_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    one_error_line(cli("run", "--tools", str(deep), "hi"), 2, "deep.json", "nested too deeply")
    schema: dict[str, Any] = {}
    for _ in range(100_000):
        schema = {"not": schema}
    with pytest.raises(ApiError) as error:
        parse({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert error.value.status == 400 and error.value.param == "response_format.json_schema.schema"


# -- schemas: keywords llguidance does not enforce, and what `arguments` may be ------------------------------

UNENFORCED = {"type": "function", "function": {"name": "contact", "parameters": {"type": "object", "properties": {
    "tags": {"type": "array", "items": {"type": "number", "minimum": 0}, "uniqueItems": True, "contains": {"const": 0.5}},
    "phone": {"type": "string", "format": "phone"},
    "name": {"type": "string", "not": {"pattern": "^ "}, "if": {"minLength": 1}, "then": {"maxLength": 9}}}}}}


def calls_text(name: str, arguments: str) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": json.loads(arguments)}]})


def test_keywords_llguidance_does_not_enforce_are_warnings_naming_the_tool(tiny_target: Model) -> None:
    setup = prepare_tools(request("required", tools=[ADD, UNENFORCED]), PLAIN, lambda text: None)
    assert setup.warnings and all(w.startswith("tools[1].function.parameters: ") for w in setup.warnings)
    for keyword in ("uniqueItems", "contains", "phone", "not", "if"):
        assert any(keyword in warning for warning in setup.warnings), (keyword, setup.warnings)
    assert accepts(tiny_target, setup.grammar, calls_text("contact", '{"tags": [1.5, 1.5], "phone": "x"}'))
    assert not accepts(tiny_target, setup.grammar, calls_text("contact", '{"tags": ["1"]}'))  # the rest holds
    named = prepare_tools(request({"type": "function", "function": {"name": "add"}}, tools=[ADD, UNENFORCED]), PLAIN,
                          lambda text: None)
    assert named.warnings == ()  # only the tools the model may call


@pytest.mark.parametrize("parameters, valid, invalid", [
    ({}, ['{"x": [1]}', "{}"], ["false", "[]", '"x"']),
    ({"type": "object"}, ['{"x": 1, "y": "z"}', "{}"], ["null"]),
    ({"type": "object", "required": ["x"]}, ['{"x": 1}', '{"x": 1, "y": 2}'], ["{}"]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "x"]}, ['{"a": 1, "x": true}'],
     ['{"a": 1}']),
    ({"type": "object", "allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}]}, ['{"a": 1}'],
     ["{}", '{"a": "1"}']),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "anyOf": [{"required": ["a"]}, {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
     ['{"a": 1}', '{"b": "x"}'], ["{}"]),
    ({"type": "object", "patternProperties": {"^n_": {"type": "integer"}}}, ['{"n_1": 1}'], ['{"n_1": "1"}']),
    ({"type": ["object", "null"], "properties": {"a": {"type": "integer"}}}, ['{"a": 1}', "{}"],
     ["null", '{"a": 1, "b": 2}']),
])
def test_arguments_are_an_object_and_closing_keeps_the_schemas_meaning(tiny_target: Model, parameters: dict[str, Any],
                                                                        valid: list[str], invalid: list[str]) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    grammar = prepare_tools(request("required", tools=[tool]), PLAIN, lambda text: None).grammar
    for arguments in valid:
        assert accepts(tiny_target, grammar, calls_text("f", arguments)), arguments
        calls = parse_calls(calls_text("f", arguments), ToolSyntax.JSON)
        assert calls and json.loads(calls[0].arguments) == json.loads(arguments)
    for arguments in invalid:
        assert not accepts(tiny_target, grammar, calls_text("f", arguments)), arguments


def test_parameters_no_call_can_satisfy_are_refused_as_response_format_refuses_them() -> None:
    """A call to such a tool could never be finished: it ran to max_tokens (a "not enforced" warning beside it)."""
    unique = {"type": "object", "properties": {"a": {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True,
                                                      "minItems": 3}}, "required": ["a"]}
    tools = [WEATHER, {"type": "function", "function": {"name": "f", "parameters": unique}}]
    for choice in ("auto", "required", {"type": "function", "function": {"name": "f"}}):
        refused = (r"^tools\[1\]\.function\.parameters: no text can satisfy it: uniqueItems asks for 3 distinct items"
                   r" \(minItems\), and its items take 2 values$")
        with pytest.raises(ToolError, match=refused) as error:
            prepare_tools(request(choice, tools=tools), PLAIN, lambda text: None)
        assert error.value.param == "tools[1].function.parameters"
    prepare_tools(request({"type": "function", "function": {"name": "get_weather"}}, tools=tools), PLAIN,
                  lambda text: None)  # (a tool that cannot be called is not held to)
    crashing = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"const": -2**63}}}}}  # (llguidance ended the process on it)
    with pytest.raises(ToolError, match="too close to -2\\^63") as error:
        prepare_tools(request("required", tools=[crashing]), PLAIN, lambda text: None)
    assert error.value.param == "tools[0].function.parameters"


def test_parameters_that_cannot_be_an_object_are_refused() -> None:
    with pytest.raises(ToolError, match="must describe an object") as error:
        tool_request([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}])
    assert error.value.param == "tools[0].function.parameters"


# -- calls framed by the template's own texts ---------------------------------------------------------------

FUNCTIONARY = ("{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
               "{% if m.tool_calls %}{% for c in m.tool_calls %}<function={{ c.function.name }}>"
               "{{ c.function.arguments | tojson }}</function>{% endfor %}<|eom_id|>"
               "{% else %}{{ m.content }}<|eot_id|>{% endif %}{% endfor %}"
               "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
# Solar Open's shape: each call's id before its name
WITH_IDS = ("{% for m in messages %}<|begin|>{{ m.role }}{% if m.tool_calls %}<|tool_calls|>{% for c in m.tool_calls %}"
            "<|tool_call:begin|>{{ c.id }}<|tool_call:name|>{{ c.function.name }}<|tool_call:args|>"
            "{{ c.function.arguments | tojson }}<|tool_call:end|>{% endfor %}<|calls|>{% else %}<|content|>"
            "{{ m.content }}<|end|>{% endif %}{% endfor %}{% if add_generation_prompt %}<|begin|>assistant{% endif %}")


def test_frames_are_read_from_the_templates_rendering_of_probe_calls() -> None:
    kimi = template_frame(KIMI)
    assert kimi is not None and detect_syntax(KIMI) is ToolSyntax.FRAMED
    assert kimi.opening == ("<|tool_calls_section_begin|><|tool_call_begin|>functions.",)
    assert kimi.name_end == (":", Hole.INDEX, "<|tool_call_argument_begin|>")  # the call's index
    assert kimi.separator == ("<|tool_call_end|><|tool_call_begin|>functions.",)
    assert kimi.closing == ("<|tool_call_end|><|tool_calls_section_end|>",) and kimi.shows_tools
    deepseek = template_frame(DEEPSEEK)
    assert deepseek is not None and detect_syntax(DEEPSEEK) is ToolSyntax.FRAMED
    assert (deepseek.opening, deepseek.name_end, deepseek.closing) == (
        ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>",), ("<｜tool▁sep｜>",), ("<｜tool▁call▁end｜><｜tool▁calls▁end｜>",))
    assert not deepseek.shows_tools  # (its template writes no tools: see the next test)
    with_ids = template_frame(WITH_IDS)
    assert with_ids is not None and with_ids.opening == ("<|tool_calls|><|tool_call:begin|>", Hole.ID,
                                                         "<|tool_call:name|>")
    assert template_frame(FUNCTIONARY).closing == ("</function><|eom_id|>",)  # (a text reply ends otherwise)
    for template in (QWEN, LLAMA, PLAIN):  # markers of their own; none rendered
        assert template_frame(template) is None or detect_syntax(template) is not ToolSyntax.FRAMED
    assert template_frame(PLAIN) is None


def test_a_template_that_writes_no_tools_gets_them_and_its_frame_in_the_system_message() -> None:
    setup = prepare_tools(request("auto"), DEEPSEEK, lambda text: None)
    messages, _ = chat_input(HISTORY, setup, DEEPSEEK)
    system = messages[0]["content"]
    assert system.startswith("Be brief.\n\nYou can call these tools") and '"name": "get_weather"' in system
    assert ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>TOOL_NAME<｜tool▁sep｜>{ARGUMENTS}<｜tool▁call▁end｜>"
            "<｜tool▁calls▁end｜>") in system and system.endswith("otherwise reply with plain text.")
    prompt = render_chat(DEEPSEEK, messages)
    assert ('<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>' in prompt
            and "<｜tool▁output▁begin｜>18 C, sunny" in prompt)  # the earlier call and its result, as it writes them
    kimi_messages, definitions = chat_input(HISTORY, prepare_tools(request(), KIMI, lambda text: None), KIMI)
    assert kimi_messages == HISTORY and definitions == request().definitions()  # (Kimi's writes the tools)


def test_framed_calls_are_read_back_whole_or_not_at_all() -> None:
    kimi = prepare_tools(request(), KIMI, lambda text: None)
    two = ('<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>{"a": 1, "b": 2}'
           '<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Oslo"}'
           "<|tool_call_end|><|tool_calls_section_end|>")
    calls = kimi.calls_in(two)
    assert calls and [(c.name, c.arguments) for c in calls] == [("add", '{"a": 1, "b": 2}'),
                                                               ("get_weather", '{"city": "Oslo"}')]
    assert calls[0].id != calls[1].id
    unseparated = two.replace("<|tool_call_end|><|tool_call_begin|>", "")
    for broken in (two[:-5], two + "x", two.replace(":1<", "<"), unseparated, "Hi " + two):
        assert kimi.calls_in(broken) is None, broken
    functionary = prepare_tools(request(), FUNCTIONARY, lambda text: None)
    for ending in ("</function>", "</function><|eom_id|>"):  # (an end-of-generation token ends it unwritten)
        assert functionary.calls_in('<function=add>{"a": 1, "b": 2}' + ending)
    assert functionary.calls_in('<function=add>{"a": 1, "b": 2}</function>x') is None
    with_ids = prepare_tools(request(), WITH_IDS, lambda text: None)
    written = with_ids.calls_in('<|tool_calls|><|tool_call:begin|>call7<|tool_call:name|>add<|tool_call:args|>'
                                '{"a": 1, "b": 2}<|tool_call:end|><|calls|>')
    assert written and written[0].id == "call7"  # the id the model wrote
    stream = kimi.stream()
    assert stream.feed("<|tool_calls_sec") == "" and stream.feed("tion_begin|>") == "" and not stream.call
    assert stream.feed("<|tool_call_begin|>functions.add") == "" and stream.call  # held: a call


DEEPSEEK_MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                    "<｜tool▁calls▁end｜>")


def test_a_deepseek_call_is_drawn_in_its_control_tokens_and_read_back(tmp_path: Path) -> None:
    """DeepSeek V3.1's frame on a tiny model whose vocabulary has its markers as control tokens: target-only and
    speculative decoding write the same call, the markers as those tokens, and it reads back."""
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    path = write_model(tmp_path / "deepseek.gguf", random_weights(n_vocab, seed=2), n_vocab=n_vocab, space_token=True,
                       context_length=4096, special_pieces=[(m, TokenType.CONTROL) for m in DEEPSEEK_MARKERS])
    model = Model(path, ModelSettings(n_threads=1))
    try:
        setup = prepare_tools(request("required", parallel=False, tools=[ADD]), DEEPSEEK, marker_tokens(model))
        assert "<[" in setup.grammar and setup.warnings == ()
        generations = target_only_and_speculative(model, DEEPSEEK, setup, "Add 1 and 2.", seed=5)
        for generation in generations:
            calls = setup.calls_in(generation.text)
            assert calls and all(call.name == "add" for call in calls), generation.text
            assert generation.text.startswith(DEEPSEEK_MARKERS[0] + DEEPSEEK_MARKERS[1] + "add" + DEEPSEEK_MARKERS[2])
            marker_ids = {model.tokenize(m, add_special=False, parse_special=True)[0] for m in DEEPSEEK_MARKERS}
            assert marker_ids <= set(generation.tokens)
        assert generations[0].text == generations[1].text
    finally:
        model.close()


def test_frames_of_tagged_parameters_are_read_from_the_templates() -> None:
    """Seed-OSS, MiniMax-M2 and DeepSeek V3.2 tag each parameter, each inside wrappers of its own; DeepSeek V3.2
    marks a value written as JSON apart from one written as text."""
    seed, minimax, dsml = (template_frame(template) for template in (SEED, MINIMAX, DSML))
    assert all(detect_syntax(template) is ToolSyntax.FRAMED for template in (SEED, MINIMAX, DSML))
    assert seed.opening == ("<seed:tool_call>\n<function=",) and seed.closing == ("</function>\n</seed:tool_call>",)
    assert seed.separator == ("</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=",)
    assert seed.layout == XmlLayout("", ">\n", "<parameter=", ">", "</parameter>\n", "")
    assert minimax.opening == ('\n<minimax:tool_call>\n<invoke name="',)
    assert minimax.closing == ("</invoke>\n</minimax:tool_call>",)  # (its turn's end, `[e~[`, left out)
    assert minimax.layout == XmlLayout("", '">\n', '<parameter name="', '">', "</parameter>\n", "")
    assert dsml.layout.after_key_of(True) == '" string="true">'
    assert dsml.layout.after_key_of(False) == '" string="false">'
    setup = prepare_tools(request(tools=[NOTE]), DSML, lambda text: None)
    call = ('\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="save_note">\n<｜DSML｜parameter name="title" '
            'string="true">Milk</｜DSML｜parameter>\n<｜DSML｜parameter name="body" string="true">two\nlitres'
            '</｜DSML｜parameter>\n<｜DSML｜parameter name="tags" string="false">["food"]</｜DSML｜parameter>\n'
            "</｜DSML｜invoke>\n</｜DSML｜function_calls>")
    assert accepts_bytes(setup.grammar, call)
    calls = setup.calls_in(call)
    assert calls and json.loads(calls[0].arguments) == {"title": "Milk", "body": "two\nlitres", "tags": ["food"]}
    wrong_mark = call.replace('"tags" string="false"', '"tags" string="true"')
    assert not accepts_bytes(setup.grammar, wrong_mark) and setup.calls_in(wrong_mark) is None
    whole = {"type": "function", "function": {"name": "either", "parameters": {
        "anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}]}}}
    held = prepare_tools(request(tools=[whole]), SEED, lambda text: None)  # (tags cannot hold a root anyOf)
    assert held.syntax is ToolSyntax.JSON and any("JSON form" in warning for warning in held.warnings)


# A frame whose opening starts with a newline (as Apriel's), and one whose calls have nothing between them.
LEADING = ("{% for m in messages %}{% if m.tool_calls %}{{ '\\n' }}<calls>{% for c in m.tool_calls %}"
           "{{ c.function.name }}={{ c.function.arguments | tojson }};{% endfor %}</calls>"
           "{% else %}{{ m.content }}{% endif %}|{% endfor %}")
TOGETHER = LEADING.replace(";", "")


def test_framed_calls_stream_and_read_back_whatever_starts_or_parts_them() -> None:
    leading = prepare_tools(request(), LEADING, lambda text: None)
    assert leading.frame.opening == ("\n<calls>",) and leading.frame.closing == (";</calls>",)
    call = '\n<calls>add={"a": 1, "b": 2};</calls>'
    stream = leading.stream()
    assert stream.feed("\n<calls>ad") == "" and stream.call  # held: a call, not text (was: streamed as text)
    assert leading.text_of(call[:12], cut_short=True) is None and leading.calls_in(call)
    together = prepare_tools(request(), TOGETHER, lambda text: None)
    assert together.frame.separator == ()
    both = '\n<calls>add={"a": 1, "b": 2}get_weather={"city": "Oslo"}</calls>'
    calls = together.calls_in(both)
    assert calls and [call.name for call in calls] == ["add", "get_weather"]  # (was: read as no call)
    assert accepts_bytes(together.grammar, both)


@pytest.mark.parametrize("template", [
    # an opening that starts with the call's index: plain text could not be told from a call
    "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ loop.index0 }}) {{ c.function.name }} "
    "{{ c.function.arguments | tojson }}\n{% endfor %}{{ m.content }}|{% endfor %}",
    # a text after the name that a name could go on into: the name would be read as `NAME-args`
    "{% for m in messages %}{% for c in m.tool_calls or [] %}[{{ c.function.name }}-args "
    "{{ c.function.arguments | tojson }}]{% endfor %}{{ m.content }}|{% endfor %}",
])
def test_a_frame_that_could_not_be_read_back_is_none(template: str) -> None:
    assert template_frame(template) is None and detect_syntax(template) is ToolSyntax.JSON


def test_a_tool_without_a_description_renders_with_templates_that_read_one() -> None:
    """Apertus's and Functionary's templates read each tool's description: one left out failed to render."""
    reads = ("{% for t in tools %}{{ t.function.name }}: {{ t.function.description }}\n{% endfor %}"
             "{{ messages[0].content }}")
    bare = request(tools=[{"type": "function", "function": {"name": "ping"}}])
    assert bare.definitions()[0]["function"]["description"] == ""
    assert render_chat(reads, [{"role": "user", "content": "hi"}], tools=bare.definitions()) == "ping: \nhi"


def test_a_frame_leaves_out_an_empty_thought_and_a_turn_end_written_twice() -> None:
    """Kimi K2 Thinking's template writes `<think></think>` before an earlier call (a thought the model may write
    or leave out: not part of the call); R1 Distill's writes its end of turn twice after calls."""
    kimi_thinking = template_frame((DATA / "kimi-k2-thinking.jinja").read_text())
    assert kimi_thinking is not None and kimi_thinking.opening == template_frame(KIMI).opening
    distill = template_frame((DATA / "deepseek-r1-distill-qwen.jinja").read_text())
    assert distill is not None and distill.closing == ("\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",)


def test_an_id_written_after_the_name_is_the_calls_id() -> None:
    after_name = ("{% for m in messages %}{% if m.tool_calls %}<calls>{% for c in m.tool_calls %}{{ c.function.name }}"
                  "@{{ c.id }}:{{ c.function.arguments | tojson }};{% endfor %}</calls>{% else %}{{ m.content }}"
                  "{% endif %}|{% endfor %}")
    setup = prepare_tools(request(), after_name, lambda text: None)
    assert setup.frame.name_end == ("@", Hole.ID, ":")
    calls = setup.calls_in('<calls>add@xyz9:{"a": 1, "b": 2};get_weather@xyz9:{"city": "Oslo"};</calls>')
    assert calls and calls[0].id == "xyz9" and calls[1].id.startswith("call_")  # (written twice: a fresh one)


def test_gemma_4_calls_are_held_in_its_notation_and_read_back(tmp_path: Path) -> None:
    """Gemma 4's keys bare and sorted, a string between `<|"|>` marks (its special token, named by id), other values
    as JSON; drawn alike target-only and speculatively on a tiny model with its markers; a schema its notation
    cannot hold is held to the JSON form."""
    coded = json.loads(json.dumps(NOTE))
    coded["function"]["parameters"]["properties"]["title"]["pattern"] = "^[A-Z]"  # (a pattern the text cannot hold)
    note = prepare_tools(request(tools=[coded]), GEMMA, lambda text: None)
    assert note.syntax is ToolSyntax.JSON and any("JSON form" in warning for warning in note.warnings)
    weather = prepare_tools(request(), GEMMA, lambda text: None)
    both = '<|tool_call>call:get_weather{city:<|"|>Paris, TX<|"|>,days:3}<tool_call|>' + GEMMA_CALL
    assert accepts_bytes(weather.grammar, both)
    calls = weather.calls_in(both)
    assert calls and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris, TX", "days": 3}), ("add", {"a": 1, "b": 2})]
    assert not accepts_bytes(weather.grammar, '<|tool_call>call:get_weather{days:3}<tool_call|>')  # (city required)
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    path = write_model(tmp_path / "gemma.gguf", random_weights(n_vocab, seed=8), n_vocab=n_vocab, space_token=True,
                       context_length=4096,
                       special_pieces=[(m, TokenType.USER_DEFINED) for m in ('<|tool_call>', '<tool_call|>', '<|"|>')])
    model = Model(path, ModelSettings(n_threads=1))
    try:
        short = json.loads(json.dumps(WEATHER))
        short["function"]["parameters"]["properties"]["city"]["maxLength"] = 12
        setup = prepare_tools(request("required", parallel=False, tools=[short]), GEMMA, marker_tokens(model))
        assert '<[' in setup.grammar
        generations = target_only_and_speculative(model, GEMMA, setup, "Weather in Paris?", seed=2)
        for generation in generations:
            drawn = setup.calls_in(generation.text)
            assert drawn and drawn[0].name == "get_weather" and len(json.loads(drawn[0].arguments)["city"]) <= 12
        assert generations[0].text == generations[1].text
    finally:
        model.close()


def test_lfm_calls_are_held_as_python_calls_and_read_back() -> None:
    """LFM2.5's keyword arguments in the schema's order, strings between single quotes, booleans as Python
    writes them, numbers and objects as JSON; a schema with a list of objects is held to the JSON form."""
    listed = json.loads(json.dumps(NOTE))
    listed["function"]["parameters"]["properties"]["tags"]["items"] = {"type": "object", "properties": {}}
    note = prepare_tools(request(tools=[listed]), LFM, lambda text: None)
    assert note.syntax is ToolSyntax.JSON and any("tags[] is not a string" in warning for warning in note.warnings)
    flag = {"type": "function", "function": {"name": "flag", "parameters": {"type": "object", "properties": {
        "on": {"type": "boolean"}, "where": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "required": ["on"]}}}
    setup = prepare_tools(request(tools=[WEATHER, flag]), LFM, lambda text: None)
    both = ("<|tool_call_start|>[get_weather(city='Paris, TX', days=3), flag(on=False, where={\"x\": 1})]"
            "<|tool_call_end|>")
    assert accepts_bytes(setup.grammar, both)
    calls = setup.calls_in(both)
    assert calls and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris, TX", "days": 3}), ("flag", {"on": False, "where": {"x": 1}})]
    for wrong in ("flag(on=false)", "flag(on=True, where=5)", "get_weather(city='it's')"):
        assert not accepts_bytes(setup.grammar, f"<|tool_call_start|>[{wrong}]<|tool_call_end|>"), wrong



def rendered_call(template: str, name: str, arguments: dict, opening: str, closing: str) -> str:
    """The call of `name` with `arguments` as `template` renders it in an earlier assistant message, from `opening`
    to `closing`."""
    rendered = render_chat(template, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}],
        add_generation_prompt=False)
    return rendered[rendered.index(opening):rendered.index(closing) + len(closing)]


def takes_exactly(setup: ToolSetup, written: str, arguments: dict, wrong: list[str]) -> None:
    """The grammar takes the call `written` and reads back its `arguments`, and refuses each `wrong` variant."""
    assert accepts_bytes(setup.grammar, written)
    calls = setup.calls_in(written)
    assert calls and json.loads(calls[0].arguments) == arguments
    for variant in wrong:
        assert not accepts_bytes(setup.grammar, variant), variant


def test_lfm_holds_lists_as_python_shows_them_as_its_template_writes_them() -> None:
    """(was: a tool with a list among its parameters was held to the JSON form) The template writes a list with
    Jinja's `string` filter, so as Python shows it: what it renders of such a call the grammar takes, and the
    arguments read back are those given."""
    tag = {"type": "function", "function": {"name": "tag", "parameters": {"type": "object", "properties": {
        "names": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}, "maxItems": 2},
        "flags": {"type": "array", "items": {"type": "boolean"}},
        "level": {"type": "array", "items": {"type": "string", "enum": ["low", "high"]}}}, "required": ["names"]}}}
    setup = prepare_tools(request(tools=[NOTE, tag]), LFM, lambda text: None)
    assert setup.syntax is ToolSyntax.PYTHONIC and not setup.warnings
    arguments = {"names": ["a b", "c"], "grid": [[1, 2], [3]], "flags": [True, False], "level": ["low"]}
    written = rendered_call(LFM, "tag", arguments, "<|tool_call_start|>", "<|tool_call_end|>")
    assert written == ("<|tool_call_start|>[tag(names=['a b', 'c'], grid=[[1, 2], [3]], flags=[True, False],"
                       " level=['low'])]<|tool_call_end|>")
    takes_exactly(setup, written, arguments, [
        written.replace("names=['a b', 'c']", "names=[]"),  # (at least one)
        written.replace("[[1, 2], [3]]", "[[1], [2], [3]]"),  # (two at most)
        written.replace("'a b', 'c'", "'a b','c'"),  # (Python's separator)
        written.replace("'a b'", "'a\\nb'"),  # (an escape Python would write: no way to read it back)
        written.replace("[True, False]", "[true, false]")])
    escaped = json.loads(json.dumps(tag))
    escaped["function"]["parameters"]["properties"]["level"]["items"]["enum"] = ["a\\b"]
    assert prepare_tools(request(tools=[escaped]), LFM, lambda text: None).syntax is ToolSyntax.JSON


def test_a_framed_grammar_names_the_markers_that_are_special_tokens() -> None:
    ids = {"<|tool_calls_section_begin|>": 90, "<|tool_call_begin|>": 91, "<|tool_call_argument_begin|>": 92}
    grammar = tool_grammar(request(), ToolSyntax.FRAMED, ids.get, frame=template_frame(KIMI))
    assert 'calls: <[90]> <[91]> "functions." body' in grammar
    assert 'call_1: "add" ":" /[0-9]{1,2}/ <[92]> arguments_1' in grammar
    assert '"<|tool_call_end|>"' in grammar  # (not a special token of this vocabulary: spelled out)


# -- markers that are special tokens -----------------------------------------------------------------------

EMPTY = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
PING_CALL = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'


def marked_model(folder: Path, kind: TokenType) -> Path:
    """A tiny model whose vocabulary has <tool_call> and </tool_call> as tokens of type `kind`."""
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    return write_model(folder / f"marked-{kind.name.lower()}.gguf", random_weights(n_vocab, seed=1), n_vocab=n_vocab,
                       space_token=True, context_length=1024, special_pieces=[("<tool_call>", kind), ("</tool_call>", kind)])


@pytest.fixture(scope="module")
def control_marked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    model = Model(marked_model(tmp_path_factory.mktemp("marked"), TokenType.CONTROL), ModelSettings(n_threads=1))
    yield model
    model.close()


@pytest.mark.parametrize("kind", [TokenType.CONTROL, TokenType.USER_DEFINED])
def test_a_call_opened_by_a_special_marker_token_is_read_back(tmp_path: Path, control_marked: Model,
                                                              kind: TokenType) -> None:
    """The grammar names a marker that is one special token as that token, a control token (no text where the
    output is read without special tokens: the output held to a grammar shows it) as a user-defined one; the forced
    call reads back."""
    model = control_marked if kind is TokenType.CONTROL else Model(marked_model(tmp_path, kind), ModelSettings(n_threads=1))
    try:
        marker = model.tokenize("<tool_call>", add_special=False, parse_special=True)
        assert len(marker) == 1
        assert marker_tokens(model)("<tool_call>") == marker[0]
        session = Session(model, chat=ChatSettings(template=QWEN))
        setup = prepare_tools(request("required", parallel=False, tools=[EMPTY]), QWEN, marker_tokens(model))
        assert setup.warnings == ()  # (llguidance's "no tokenizer - can't validate <special_token>" was one)
        messages, definitions = chat_input(HISTORY[:2], setup, QWEN)
        generation = session.generation(session.chat_prompt_tokens(messages, definitions),
                                        GenerationSettings.from_values({"sampling.max_tokens": 80}),
                                        speculative=False, grammar=setup.grammar)
        list(generation)
        assert generation.stop_reason is StopReason.EOS and generation.text == PING_CALL
        assert marker[0] in generation.tokens
        calls = setup.calls_in(generation.text)
        assert calls and [(call.name, call.arguments) for call in calls] == [("ping", "{}")]
    finally:
        if model is not control_marked:
            model.close()


@pytest.fixture(scope="module")
def tools_api(control_marked: Model) -> Iterator[TestClient]:
    """The serve API in-process on the model with control-token markers, speaking Qwen's template."""
    session = Session(control_marked, chat=ChatSettings(template=QWEN))
    served = ServedModel(GenerationQueue(session, queue_size=1),
                         GenerationSettings.from_values({"sampling.max_tokens": 80}), "marked")
    with TestClient(create_app(served)) as client:
        yield client


def test_tools_and_earlier_calls_too_long_for_the_context_are_refused_before_tokenizing(
        tools_api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a message's content is: tokenizing 300 kB of text without spaces held the one generation slot for 20 s
    (a template variable or a `tool_call_id` of that size still did)."""
    tokenized: list[str] = []
    original = Model.tokenize
    monkeypatch.setattr(Model, "tokenize",
                        lambda self, text, *a, **k: tokenized.append(text) or original(self, text, *a, **k))
    long = "x" * 200_000
    described = {"type": "function", "function": {"name": "ping", "description": long}}
    called = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "ping", "arguments": json.dumps({"q": long})}}]}
    answered = {"role": "tool", "content": "ok", "tool_call_id": long}  # (after a call without an id: any id)
    unnamed = {**called, "tool_calls": [{"type": "function", "function": {"name": "ping", "arguments": "{}"}}]}
    for body, param in (({"messages": [{"role": "user", "content": "ping"}], "tools": [described]}, "tools"),
                        ({"messages": [{"role": "user", "content": "ping"}, called,
                                       {"role": "tool", "content": "ok", "tool_call_id": "call_1"}]}, "messages"),
                        ({"messages": [{"role": "user", "content": "ping"}, unnamed, answered]}, "messages"),
                        ({"messages": [{"role": "user", "content": "ping"}], "chat_template_kwargs": {"x": long}},
                         "chat_template_kwargs")):  # (the field that holds the most of it named: was "messages")
        reply = tools_api.post("/v1/chat/completions", json=body)
        assert reply.status_code == 400 and reply.json()["error"]["code"] == "context_length_exceeded", reply.text
        assert reply.json()["error"]["param"] == param
    assert not any(long in text for text in tokenized)


def test_serve_reads_back_a_call_and_reports_what_its_schema_does_not_enforce(tools_api: TestClient) -> None:
    ping = {"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}, "not": {"anyOf": [{"required": ["x"]}, {"required": ["y"]}]}}}}
    for stream in (False, True):
        reply = tools_api.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "ping"}], "tools": [ping], "tool_choice": "required",
            "parallel_tool_calls": False, "temperature": 0, "stream": stream})
        assert reply.status_code == 200, reply.text
        if stream:
            events = [json.loads(line[6:]) for line in reply.text.splitlines()
                      if line.startswith("data: {")]
            assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == ""
            calls = [part for e in events if e["choices"] for part in e["choices"][0]["delta"].get("tool_calls", [])]
            assert calls[0]["function"]["name"] == "ping" and calls[1]["function"]["arguments"] == "{}"
            body = events[-1]
        else:
            body = reply.json()
            message = body["choices"][0]["message"]
            assert message["content"] is None and message["tool_calls"][0]["function"] == {"name": "ping",
                                                                                             "arguments": "{}"}
        assert body["choices"][0]["finish_reason"] == "tool_calls"
        assert [w for w in body["warnings"] if w.startswith("tools[0].function.parameters: ") and "not" in w], body


MISTRAL_MARKERS = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[INST]",
                   "[/INST]")


@pytest.fixture(scope="module")
def mistral_marked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    """A tiny model whose vocabulary has Mistral's markers as control tokens, as Mistral's GGUF files have them."""
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    path = write_model(tmp_path_factory.mktemp("mistral") / "mistral-marked.gguf", random_weights(n_vocab, seed=2),
                       n_vocab=n_vocab, space_token=True, context_length=1024,
                       special_pieces=[(marker, TokenType.CONTROL) for marker in MISTRAL_MARKERS])
    model = Model(path, ModelSettings(n_threads=1))
    yield model
    model.close()


@pytest.mark.parametrize("template, opening", [(NEMO, '[TOOL_CALLS][{"name": "ping", "arguments": {}'),
                                               (MISTRAL_SMALL, "[TOOL_CALLS]ping")])
def test_a_mistral_call_opened_by_its_control_token_is_read_back(mistral_marked: Model, template: str,
                                                                 opening: str) -> None:
    """The model writes `[TOOL_CALLS]` as the one control token it was trained on (no text where the output is
    read without special tokens); held to the tools' grammar, the output shows it, and the call reads back."""
    marker = mistral_marked.tokenize("[TOOL_CALLS]", add_special=False, parse_special=True)
    assert len(marker) == 1 and mistral_marked.token_bytes(marker[0]) == b""
    assert marker_tokens(mistral_marked)("[TOOL_CALLS]") == marker[0] and marker_tokens(mistral_marked)("[X]") is None
    session = Session(mistral_marked, chat=ChatSettings(template=template))
    setup = prepare_tools(request("required", parallel=False, tools=[EMPTY]), template, marker_tokens(mistral_marked))
    asked = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Ping?"}]
    messages, definitions = chat_input(asked, setup, template)
    for speculative in (False, True):
        generation = session.generation(session.chat_prompt_tokens(messages, definitions),
                                        GenerationSettings.from_values({"sampling.max_tokens": 80,
                                                                        "speculative.strategy": "ngram"}),
                                        speculative=speculative, grammar=setup.grammar)
        list(generation)
        assert generation.stop_reason is StopReason.EOS and generation.tokens[0] == marker[0]
        assert generation.text.replace("[TOOL_CALLS] [", "[TOOL_CALLS][").startswith(opening), generation.text
        calls = setup.calls_in(generation.text)
        assert calls and [(call.name, call.arguments) for call in calls] == [("ping", "{}")]
        assert len(calls[0].id) == 9 and calls[0].id.isalnum()


def test_serve_answers_a_mistral_call_with_an_id_its_template_takes_back(mistral_marked: Model) -> None:
    session = Session(mistral_marked, chat=ChatSettings(template=NEMO))
    served = ServedModel(GenerationQueue(session, queue_size=1),
                         GenerationSettings.from_values({"sampling.max_tokens": 80}), "mistral")
    ping = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
    asked = [{"role": "user", "content": "Ping?"}]
    with TestClient(create_app(served)) as client:
        for stream in (False, True):
            reply = client.post("/v1/chat/completions", json={
                "messages": asked, "tools": [ping], "tool_choice": "required", "temperature": 0, "stream": stream})
            assert reply.status_code == 200, reply.text
            if stream:
                events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
                call = next(part for e in events if e["choices"]
                            for part in e["choices"][0]["delta"].get("tool_calls", []))
            else:
                call = reply.json()["choices"][0]["message"]["tool_calls"][0]
            assert call["function"]["name"] == "ping" and len(call["id"]) == 9 and call["id"].isalnum(), call
        answered = [*asked, {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": call["id"], "content": "pong"}]
        reply = client.post("/v1/chat/completions", json={"messages": answered, "tools": [ping], "max_tokens": 4})
        assert reply.status_code == 200, reply.text  # (the template refuses any other id)


def test_a_call_cut_short_is_never_sent_as_text(tools_api: TestClient) -> None:
    """A call stopped by max_tokens is no call and no text: content null (a stream: no content) and finish_reason
    length, where the half-written call had come back as the assistant's text."""
    ping = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
    for stream in (False, True):
        reply = tools_api.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "ping"}], "tools": [ping], "tool_choice": "required",
            "temperature": 0, "max_tokens": 3, "stream": stream})
        assert reply.status_code == 200, reply.text
        if stream:
            events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
            deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
            assert "".join(d.get("content") or "" for d in deltas) == "" and not any("tool_calls" in d for d in deltas)
            finish = events[-1]["choices"][0]["finish_reason"]
        else:
            message = reply.json()["choices"][0]["message"]
            assert message["content"] is None and "tool_calls" not in message, message
            finish = reply.json()["choices"][0]["finish_reason"]
        assert finish == "length"


ONE_ADD = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
# An output cut short after one whole call of `add`, inside the next, in each syntax.
CUT_AFTER_ONE = {
    ToolSyntax.HERMES: ADD_CALLS[ToolSyntax.HERMES] + "\n" + ADD_CALLS[ToolSyntax.HERMES][:20],
    ToolSyntax.JSON: '{"tool_calls": [' + ONE_ADD + ", " + ONE_ADD[:15],
    ToolSyntax.MISTRAL: "[TOOL_CALLS][" + ONE_ADD + ", " + ONE_ADD[:12],
    ToolSyntax.MISTRAL_ARGS: ADD_CALLS[ToolSyntax.MISTRAL_ARGS] + '[TOOL_CALLS]add[ARGS]{"a": ',
    ToolSyntax.PYTHONIC: "<|tool_call_start|>[add(a=1, b=2), add(a=",
    ToolSyntax.GEMMA: GEMMA_CALL + GEMMA_CALL[:12],
    ToolSyntax.FRAMED: KIMI_CALL + KIMI_CALL[:40],
    ToolSyntax.XML: add_call(ToolSyntax.XML) + "\n" + add_call(ToolSyntax.XML)[:30],
    ToolSyntax.ARG_KEYS: add_call(ToolSyntax.ARG_KEYS) + "\n" + add_call(ToolSyntax.ARG_KEYS)[:30],
}


@pytest.mark.parametrize("syntax", list(CUT_AFTER_ONE))
def test_the_whole_calls_before_a_cut_are_read_and_a_call_cut_inside_is_not(syntax: ToolSyntax) -> None:
    """An output that max_tokens cut in its second call came back with no call at all."""
    setup = prepare_tools(request("required"), TEMPLATES[syntax], lambda text: None)
    calls = setup.calls_before_cut(CUT_AFTER_ONE[syntax])
    assert calls is not None
    assert [(call.name, json.loads(call.arguments)) for call in calls] == [("add", {"a": 1, "b": 2})]
    whole = add_call(syntax)
    assert setup.calls_before_cut(whole[:whole.rindex("2")]) is None  # (cut inside its arguments)
    code = "f(x) {}\n]" * 300  # (a second call's arguments with hundreds of closing characters: once, none was read)
    calls = setup.calls_before_cut(CUT_AFTER_ONE[syntax] + code)
    assert calls is not None and [call.name for call in calls] == ["add"]


def test_a_reply_cut_short_keeps_its_whole_calls_with_finish_reason_length(tools_api: TestClient) -> None:
    """(was: content null and no call where max_tokens cut the second of a model's calls.)"""
    ping = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
    kept = []
    for seed, max_tokens, stream in itertools.product((0, 1, 2), (40, 80), (False, True)):
        reply = tools_api.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "ping"}], "tools": [ping], "tool_choice": "required",
            "temperature": 1, "seed": seed, "max_tokens": max_tokens, "stream": stream})
        assert reply.status_code == 200, reply.text
        if stream:
            events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
            deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
            calls = [c for d in deltas for c in d.get("tool_calls", []) if "name" in c.get("function", {})]
            arguments = [c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", [])
                         if "name" not in c["function"]]
            finish = events[-1]["choices"][0]["finish_reason"]
        else:
            calls = reply.json()["choices"][0]["message"].get("tool_calls", [])
            arguments = [call["function"]["arguments"] for call in calls]
            finish = reply.json()["choices"][0]["finish_reason"]
        assert all(call["function"]["name"] == "ping" for call in calls) and all(json.loads(a) == {} for a in arguments)
        kept += [len(calls)] if finish == "length" else []
    assert any(kept), "no reply was cut short after a whole call"


def test_text_that_is_no_call_is_kept_whole_and_a_cut_call_is_dropped() -> None:
    held = CallStream(ToolSyntax.JSON.opening(), forced=False)
    assert held.feed(' {"tool_calls": [{"na') == "" and held.rest(cut_short=True) == ""
    text = CallStream(ToolSyntax.JSON.opening(), forced=False)
    assert text.feed("Hello") == "Hello" and text.rest(cut_short=True) == ""


@pytest.mark.slow  # (0.4 s: a `run` process's work in this one)
def test_run_tools_prints_what_a_schema_does_not_enforce_as_warning_lines(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}, "not": {"anyOf": [{"required": ["x"]}]}, "uniqueItems": True}}}]))
    profile = user_profiles_dir() / "marked.toml"  # a context that holds the tools' prompt, and a chat template
    profile.parent.mkdir(parents=True, exist_ok=True)
    profile.write_text(f'[target]\npath = "{marked_model(tmp_path, TokenType.CONTROL)}"\n'
                       f'[chat]\ntemplate = "{TINY_TEMPLATE}"\n')
    done = cli("run", "-p", "marked", "--tools", str(tools), "--tool-choice", "required", "--temperature", "0",
               "--max-tokens", "200", "--no-speculative", "hi")
    assert done.exit_code == 0, (done.output, done.stderr)
    assert {call["name"] for call in json.loads(done.stdout)["tool_calls"]} == {"ping"}
    warnings = [line for line in done.stderr.splitlines() if line.startswith("localspec: warning: ")]
    assert warnings and all("tools[0].function.parameters: " in line for line in warnings), done.stderr
    assert "not" in done.stderr and "uniqueItems" in done.stderr
    as_json = cli("run", "-p", "marked", "--tools", str(tools), "--tool-choice", "required", "--temperature", "0",
                  "--max-tokens", "200", "--no-speculative", "--json", "hi")
    report = json.loads(as_json.stdout)
    assert {call["name"] for call in report["tool_calls"]} == {"ping"}
    assert report["tool_warnings"] and all("tools[0].function.parameters: " in w for w in report["tool_warnings"])


def test_run_tools_cut_short_in_text_is_not_complete(tmp_path: Path) -> None:
    """Text that may yet become a call matches the tools' grammar at any length: where max_tokens stopped it,
    `run --tools` still says it was cut short (exit 1, complete false), as serve's finish_reason says length."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}]))
    profile = user_profiles_dir() / "marked.toml"
    profile.parent.mkdir(parents=True, exist_ok=True)
    profile.write_text(f'[target]\npath = "{marked_model(tmp_path, TokenType.CONTROL)}"\n'
                       f'[chat]\ntemplate = "{TINY_TEMPLATE}"\n')
    cut = cli("run", "-p", "marked", "--tools", str(tools), "--tool-choice", "auto", "--temperature", "0",
              "--max-tokens", "3", "--no-speculative", "--json", "hi")
    report = json.loads(cut.stdout)
    assert cut.exit_code == 1 and report["stop_reason"] == "length" and report["complete"] is False
    assert report["tool_calls"] is None


def test_a_text_value_in_cdata_is_read_as_its_text() -> None:
    """MiniCPM 5's template asks for a value holding `<`, `&` or a newline in CDATA, and writes it so."""
    layout = XmlLayout('<function name="', '">', '<param name="', '">', "</param>", "")
    text = '<function name="note"><param name="body"><![CDATA[a < b & c]]></param>'
    name, arguments, _ = read_function(text, 0, layout, lambda name, key: True)
    assert (name, json.loads(arguments)) == ("note", {"body": "a < b & c"})


@pytest.mark.slow
def test_gemma_4_holds_arrays_and_objects_in_its_own_notation_as_its_template_writes_them(tmp_path: Path) -> None:
    """(was: a tool with an array or an object among its parameters was held to the JSON form, which Gemma 4 was
    not trained to write) Keys sorted at every level as Jinja's `dictsort` sorts them (case ignored), arrays
    as `[a,b]`; what the template renders of such a call is what the grammar takes and reads back."""
    place = {"type": "function", "function": {"name": "place", "parameters": {"type": "object", "properties": {
        "Name": {"type": "string", "maxLength": 20},
        "at": {"type": "object", "properties": {"lat": {"type": "number"}, "Lon": {"type": "number"},
                                                "tags": {"type": "array", "items": {"type": "string"}}},
               "required": ["lat", "Lon"]},
        "sizes": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}},
        "required": ["Name", "at"]}}}
    setup = prepare_tools(request(tools=[NOTE, place]), GEMMA, lambda text: None)
    assert setup.syntax is ToolSyntax.GEMMA and not any("JSON form" in warning for warning in setup.warnings)
    arguments = {"sizes": [1, 2], "at": {"tags": ["old", "a, b"], "Lon": 2.5, "lat": 48}, "Name": "Quay"}
    written = rendered_call(GEMMA, "place", arguments, "<|tool_call>", "<tool_call|>")
    assert written == ('<|tool_call>call:place{at:{lat:48,Lon:2.5,tags:[<|"|>old<|"|>,<|"|>a, b<|"|>]},'
                       'Name:<|"|>Quay<|"|>,sizes:[1,2]}<tool_call|>')
    takes_exactly(setup, written, arguments, [
        written.replace("sizes:[1,2]", "sizes:[]"),  # (at least one)
        written.replace("sizes:[1,2]", "sizes:[1,2,3,4]"),  # (three at most)
        written.replace("lat:48,Lon:2.5", "Lon:2.5,lat:48"),  # (sorted)
        written.replace("lat:48,", ""),  # (required)
        written.replace("tags:[", "tags: [")])  # (no spaces)
    tagged = '<|tool_call>call:save_note{body:<|"|>b<|"|>,tags:[<|"|>x<|"|>],title:<|"|>t<|"|>}<tool_call|>'
    assert accepts_bytes(setup.grammar, tagged)
    assert json.loads(setup.calls_in(tagged)[0].arguments) == {"body": "b", "tags": ["x"], "title": "t"}
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    path = write_model(tmp_path / "gemma.gguf", random_weights(n_vocab, seed=8), n_vocab=n_vocab, space_token=True,
                       context_length=4096,
                       special_pieces=[(m, TokenType.USER_DEFINED) for m in ('<|tool_call>', '<tool_call|>', '<|"|>')])
    small = json.loads(json.dumps(place))
    small["function"]["parameters"]["properties"]["Name"]["maxLength"] = 4
    small["function"]["parameters"]["properties"]["at"]["properties"]["tags"].update(
        maxItems=2, items={"type": "string", "maxLength": 3})
    model = Model(path, ModelSettings(n_threads=1))
    try:
        setup = prepare_tools(request("required", parallel=False, tools=[small]), GEMMA, marker_tokens(model))
        generations = target_only_and_speculative(model, GEMMA, setup, "Where?", seed=3)
        drawn = setup.calls_in(generations[1].text)
        assert drawn and drawn[0].name == "place" and generations[0].text == generations[1].text
        jsonschema.validate(json.loads(drawn[0].arguments), small["function"]["parameters"])
    finally:
        model.close()
