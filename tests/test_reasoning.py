"""A thinking model's thinking is kept apart from its answer: sorted as it streams, sent as `reasoning_content`."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Iterator

import pytest
from gguf import TokenType
from grammar_helpers import accepts as accepts_bytes
from starlette.testclient import TestClient
from tiny_models import N_SPECIAL_AND_BYTE_TOKENS, random_weights, write_model

from localspec.app import serving
from localspec.app.generation_queue import GenerationQueue
from localspec.app.harmony import HarmonySplitter, split_harmony
from localspec.app.reasoning import InlineThought, Sorted, ThoughtSplitter, split_thought, thought_tags
from localspec.app.serving import ServedModel
from localspec.app.session import Session
from localspec.app.tool_call_frames import template_frame
from localspec.app.openai_request import parse_request
from localspec.app.tool_calls import ToolSyntax, chat_input, marker_tokens, prepare_tools, tool_request
from localspec.runtime.chat_template import render_chat
from localspec.runtime.model import Model
from localspec.settings import ChatSettings, GenerationSettings, ModelSettings

CHAT = "/v1/chat/completions"


@pytest.mark.parametrize("text, opened, reasoning, content", [
    ("<think>\nLet me see.\n\nOK.\n</think>\n\nThe answer is 4.", False, "Let me see.\n\nOK.", "The answer is 4."),
    ("\n<think>x</think>y", False, "x", "y"),
    ("Hello <think>x</think>", False, "", "Hello <think>x</think>"),  # (a block later on is answer text)
    ("Let me think.\n</think>\n\nFour.", True, "Let me think.", "Four."),  # the prompt opened the thought
    ("<thi", False, "", "<thi"),  # a tag begun and never finished is text
    ("  <think>never closed  ", False, "never closed", ""),
    ("<think></think>\n\nA", False, "", "A"),
    ("a </thin b </think> c", True, "a </thin b", "c"),
    ("", True, "", ""),
])
def test_an_output_is_sorted_alike_whole_and_in_any_pieces(text: str, opened: bool, reasoning: str,
                                                          content: str) -> None:
    assert split_thought(text, opened) == Sorted(reasoning, content)
    rng = random.Random(len(text))
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 8)))) if len(text) > 1 else []
        splitter, got = ThoughtSplitter(opened), Sorted()
        for start, end in zip([0, *cuts], [*cuts, len(text)]):
            got += splitter.feed(text[start:end])
        assert got + splitter.finish() == Sorted(reasoning, content), (text, cuts)


def test_only_a_template_with_both_tags_thinks() -> None:
    assert thought_tags("{{ '<think>\\n' }}{{ m.content.split('</think>')[-1] }}") == ("<think>", "</think>")
    assert thought_tags("{% for m in messages %}{{ m.content }}{% endfor %}") is None and thought_tags(None) is None
    assert thought_tags("<think> but never closed") is None


# A template that opens the thought in its prompt, and renders an earlier reply's thinking where it has one.
OPENING = ("{% for m in messages %}{% if m.role == 'assistant' and m.reasoning_content %}[{{ m.reasoning_content }}]"
           "{% endif %}{{ m.content }} {% endfor %}<think>\n{% if false %}</think>{% endif %}")


@pytest.fixture(scope="module")
def thinking_client(tiny_pair: tuple[Path, Path]) -> Iterator[TestClient]:
    one_thread = ModelSettings(n_threads=1)
    session = Session(Model(tiny_pair[0], one_thread), Model(tiny_pair[1], one_thread), ChatSettings(template=OPENING))
    defaults = GenerationSettings.from_values({"sampling.max_tokens": 12})
    served = ServedModel(GenerationQueue(session, queue_size=1), defaults, "tiny")
    with TestClient(serving.create_app(served)) as client:
        yield client
    served.queue.close()
    session.close()


def ask(client: TestClient, **extra: Any) -> dict[str, Any]:
    reply = client.post(CHAT, json={"messages": [{"role": "user", "content": "hi"}], "seed": 1, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_reply_in_a_thought_the_prompt_opened_is_reasoning_content(thinking_client: TestClient) -> None:
    unsorted = ask(thinking_client, reasoning_format="none")["choices"][0]["message"]
    sorted_ = ask(thinking_client)["choices"][0]["message"]
    assert unsorted["content"] and "reasoning_content" not in unsorted
    expected = split_thought(unsorted["content"], opened=True)  # (the tiny model writes no </think>: all thinking)
    assert sorted_["reasoning_content"] == expected.reasoning and sorted_["content"] == expected.content == ""


def test_streamed_thinking_is_the_reasoning_content_of_the_whole_reply(thinking_client: TestClient) -> None:
    whole = ask(thinking_client)["choices"][0]["message"]
    body = {"messages": [{"role": "user", "content": "hi"}], "seed": 1, "stream": True}
    reply = thinking_client.post(CHAT, json=body)
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in reply.text.splitlines()
              if line.startswith("data: {") and json.loads(line[6:])["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == whole["reasoning_content"]
    assert "".join(d.get("content", "") for d in deltas) == whole["content"]


def test_deepseek_legacy_streams_the_thought_in_the_content_between_its_tags(thinking_client: TestClient) -> None:
    """llama-server's "deepseek-legacy": sorted as "deepseek" sorts it, but a stream's thought stays in its content."""
    whole = ask(thinking_client)["choices"][0]["message"]
    assert ask(thinking_client, reasoning_format="deepseek-legacy")["choices"][0]["message"] == whole
    body = {"messages": [{"role": "user", "content": "hi"}], "seed": 1, "stream": True,
            "reasoning_format": "deepseek-legacy"}
    lines = thinking_client.post(CHAT, json=body).text.splitlines()
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in lines
              if line.startswith("data: {") and json.loads(line[6:])["choices"]]
    assert not any("reasoning_content" in delta for delta in deltas)
    assert "".join(d.get("content", "") for d in deltas) == "<think>" + whole["reasoning_content"]  # (never closed)


@pytest.mark.parametrize("text", ["<think>\nLet me see.\n</think>\n\nFour.", "Four.", "<think>never closed"])
def test_an_inline_thought_is_the_sorted_text_put_back_between_its_tags(text: str) -> None:
    splitter, inline, streamed = ThoughtSplitter(), InlineThought(), ""
    for piece in (text[:5], text[5:9], text[9:]):
        streamed += inline.inlined(splitter.feed(piece)).content
    streamed += inline.inlined(splitter.finish()).content
    whole = split_thought(text)
    assert streamed == (f"<think>{whole.reasoning}" + ("</think>" if "</think>" in text else "") if whole.reasoning
                        else "") + whole.content


def test_a_response_format_reply_closes_the_thought_its_prompt_opened_first(thinking_client: TestClient) -> None:
    """The prompt opened a thought (its tags spelled in the tiny vocabulary): the format holds what follows the
    thought's end, so a reply cut short inside the thought has no content yet; unsorted (`reasoning_format` "none"),
    the reply is held to the format from its first token."""
    choice = ask(thinking_client, response_format={"type": "json_object"}, max_tokens=40)["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["reasoning_content"]
    assert not choice["message"]["content"] and "</think>" not in choice["message"]["reasoning_content"]
    unsorted = ask(thinking_client, response_format={"type": "json_object"}, max_tokens=40,
                   reasoning_format="none")["choices"][0]["message"]
    assert "reasoning_content" not in unsorted and unsorted["content"].startswith("{")


def test_an_earlier_replys_reasoning_content_reaches_the_template(thinking_client: TestClient) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "A", "reasoning_content": "R"},
                {"role": "user", "content": "and?"}]
    with_it = thinking_client.post(CHAT, json={"messages": messages, "max_tokens": 1}).json()
    without = thinking_client.post(CHAT, json={"messages": [{**m, "reasoning_content": None} for m in messages],
                                               "max_tokens": 1}).json()
    assert with_it["usage"]["prompt_tokens"] == without["usage"]["prompt_tokens"] + 3  # "[R]", spelled in bytes
    wrong = thinking_client.post(CHAT, json={"messages": [messages[0], {**messages[1], "reasoning_content": 5}]})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "messages[1].reasoning_content"
    bad_format = thinking_client.post(CHAT, json={"messages": messages[:1], "reasoning_format": "deepseek-r1"})
    assert bad_format.status_code == 400 and bad_format.json()["error"]["param"] == "reasoning_format"


# -- gpt-oss's harmony channels ---------------------------------------------------------------------------------

ANALYSIS, FINAL = "<|channel|>analysis<|message|>", "<|channel|>final<|message|>"
NEXT = "<|end|><|start|>assistant"
CALL = ' to=functions.add<|channel|>commentary json<|message|>{"a": 1, "b": 2}'


@pytest.mark.parametrize("text, reasoning, content", [
    (f"{ANALYSIS}Simple sum.{NEXT}{FINAL}It is 3.", "Simple sum.", "It is 3."),
    (f"{FINAL}It is 3.", "", "It is 3."),
    (f"{ANALYSIS}Call add.{NEXT}{CALL}", "Call add.", CALL),  # (the call read back by its frame)
    ("Hello", "", "Hello"),
    (f"{ANALYSIS}never closed <|en", "never closed <|en", ""),
    ("<|chan", "", "<|chan"),
])
def test_a_harmony_output_is_sorted_alike_whole_and_in_any_pieces(text: str, reasoning: str, content: str) -> None:
    assert split_harmony(text) == Sorted(reasoning, content)
    rng = random.Random(len(text))
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 8))))
        splitter, got = HarmonySplitter(), Sorted()
        for start, end in zip([0, *cuts], [*cuts, len(text)]):
            got += splitter.feed(text[start:end])
        assert got + splitter.finish() == Sorted(reasoning, content), (text, cuts)


GPT_OSS = (Path(__file__).parent / "data" / "gpt-oss.jinja").read_text()
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


@pytest.mark.slow
def test_gpt_oss_calls_one_tool_a_message_and_may_think_first() -> None:
    frame = template_frame(GPT_OSS)
    assert frame is not None and frame.harmony and frame.one_call
    assert frame.opening == (" to=functions.",) and frame.name_end == ("<|channel|>commentary json<|message|>",)
    for choice in ("auto", "required"):
        setup = prepare_tools(tool_request([ADD], choice), GPT_OSS, lambda text: None)
        assert setup.syntax is ToolSyntax.FRAMED
        for text in (CALL + "<|call|>", ANALYSIS + "Call add." + NEXT + CALL + "<|call|>"):
            assert accepts_bytes(setup.grammar, text)
            calls = setup.calls_in(setup.answer(text).content)
            assert calls and [(c.name, c.arguments) for c in calls] == [("add", '{"a": 1, "b": 2}')]
        assert not accepts_bytes(setup.grammar, CALL + CALL + "<|call|>")  # one call a message
        answer = ANALYSIS + "No call." + NEXT + FINAL + "It is 3."
        assert accepts_bytes(setup.grammar, answer) is (choice == "auto")
        assert not accepts_bytes(setup.grammar, "It is 3.")  # text only as a final message


def a_call_whole_and_streamed(client: TestClient, seed: int, max_tokens: int,
                              **extra: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A forced call of `add` asked with `seed`, whole and streamed: the whole reply's choice, the stream's deltas."""
    body = {"messages": [{"role": "user", "content": "Add 1 and 2."}], "tools": [ADD], "tool_choice": "required",
            "seed": seed, "max_tokens": max_tokens, **extra}
    whole = client.post(CHAT, json=body).json()["choices"][0]
    streamed = client.post(CHAT, json={**body, "stream": True})
    chunks = [json.loads(line[6:])["choices"] for line in streamed.text.splitlines() if line.startswith("data: {")]
    return whole, [choices[0]["delta"] for choices in chunks if choices]


HARMONY_MARKERS = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>")


@pytest.mark.slow
def test_a_gpt_oss_call_is_drawn_in_its_markers_read_back_and_its_analysis_sent_apart(tmp_path: Path) -> None:
    """On a tiny model with gpt-oss's markers (llama.cpp writes `<|channel|>`, `<|message|>`, `<|start|>` and
    `<|end|>` as text for such a vocabulary, `<|call|>` ends the generation): a forced call, drawn with or without
    an analysis before it, reads back through `serve`, streamed and whole alike."""
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    path = write_model(tmp_path / "harmony.gguf", random_weights(n_vocab, seed=4), n_vocab=n_vocab, space_token=True,
                       context_length=4096, special_pieces=[(m, TokenType.CONTROL) for m in HARMONY_MARKERS])
    model = Model(path, ModelSettings(n_threads=1))
    session = Session(model, chat=ChatSettings(template=GPT_OSS))
    served = ServedModel(GenerationQueue(session, queue_size=1), GenerationSettings(), "tiny")
    try:
        with TestClient(serving.create_app(served)) as client:
            for seed, reasoning_format in ((0, "auto"), (1, "auto"), (2, "auto"), (0, "none")):
                whole, deltas = a_call_whole_and_streamed(client, seed, 300, reasoning_format=reasoning_format)
                assert whole["finish_reason"] == "tool_calls", whole
                assert [c["function"]["name"] for c in whole["message"]["tool_calls"]] == ["add"]
                reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
                assert reasoning == (whole["message"]["reasoning_content"] or "")
                arguments = "".join(call["function"]["arguments"] for d in deltas for call in d.get("tool_calls", []))
                assert arguments == whole["message"]["tool_calls"][0]["function"]["arguments"]
    finally:
        served.queue.close()
        session.close()


# -- thinking before a call, in <think> tags ---------------------------------------------------------------------

DATA = Path(__file__).parent / "data"
QWEN3, R1 = ((DATA / name).read_text() for name in ("qwen3.jinja", "deepseek-r1.jinja"))
THINK_TAGS = ("<think>", "</think>")
R1_MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")


@pytest.mark.slow  # (2 s: the tiny model thinks for hundreds of tokens before it closes the thought)
@pytest.mark.parametrize("template, markers, opened", [
    (QWEN3, ("<tool_call>", "</tool_call>"), False),  # Qwen3: a reply may open with a <think> block
    (R1, R1_MARKERS, True),  # DeepSeek R1: the prompt opens the thought, which the reply must close
])
def test_a_thinking_model_may_think_before_its_call(tmp_path: Path, template: str, markers: tuple[str, ...],
                                                    opened: bool) -> None:
    """With its tags one special token each (as in Qwen3's and R1's vocabularies), the grammar for tools lets the
    reply think first: the call reads back past the thinking, which goes to `reasoning_content`, streamed and
    whole alike."""
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    pieces = [(m, TokenType.USER_DEFINED) for m in (*THINK_TAGS, *markers)]
    path = write_model(tmp_path / "thinking.gguf", random_weights(n_vocab, seed=6), n_vocab=n_vocab,
                       space_token=True, context_length=4096, special_pieces=pieces)
    model = Model(path, ModelSettings(n_threads=1))
    session = Session(model, chat=ChatSettings(template=template))
    served = ServedModel(GenerationQueue(session, queue_size=1), GenerationSettings(), "tiny")
    setup = prepare_tools(tool_request([ADD], "required"), template, marker_tokens(model))
    assert setup.thinking is not None and setup.thinking.opened is opened
    called_after_thinking = 0
    try:
        with TestClient(serving.create_app(served)) as client:
            for seed in range(6):
                whole, deltas = a_call_whole_and_streamed(client, seed, max_tokens=600)
                message = whole["message"]
                assert "".join(d.get("reasoning_content", "") for d in deltas) == (message["reasoning_content"] or "")
                if whole["finish_reason"] == "length":  # (the tiny model may think to the end of its budget)
                    assert message["content"] is None and "tool_calls" not in message and message["reasoning_content"]
                    continue
                assert whole["finish_reason"] == "tool_calls", whole
                assert [c["function"]["name"] for c in message["tool_calls"]][:1] == ["add"]
                called_after_thinking += bool(message["reasoning_content"])
    finally:
        served.queue.close()
        session.close()
    assert called_after_thinking  # (a call after thinking: the grammar let the reply think first)


def test_other_thinking_tags_are_found_and_sorted() -> None:
    seed = (DATA / "seed-oss.jinja").read_text()
    assert thought_tags(seed) == ("<seed:think>", "</seed:think>")
    assert thought_tags("<|START_THINKING|>{{ m }}<|END_THINKING|>") == ("<|START_THINKING|>", "<|END_THINKING|>")
    assert thought_tags(QWEN3) == ("<think>", "</think>") and thought_tags(GPT_OSS) is None
    tags = ("<seed:think>", "</seed:think>")
    assert split_thought("<seed:think>Hmm.</seed:think>\n\nDone.", tags=tags) == Sorted("Hmm.", "Done.")
    assert split_thought("<think>x</think>y", tags=tags) == Sorted("", "<think>x</think>y")


def test_an_earlier_analysis_reaches_gpt_oss_as_its_thinking() -> None:
    """gpt-oss's template reads an earlier reply's `thinking`, Qwen3's its `reasoning_content`: both are given."""
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    body = {"messages": [{"role": "user", "content": "Add 1 and 2."},
                         {"role": "assistant", "content": None, "reasoning_content": "I MUST CALL ADD",
                          "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "call_1", "content": "3"}], "tools": [ADD]}
    parsed = parse_request(body, chat=True, defaults=GenerationSettings(), has_draft=False)
    setup = prepare_tools(parsed.tools, GPT_OSS, lambda text: None)
    messages, definitions = chat_input(parsed.messages, setup, GPT_OSS)
    assert "<|channel|>analysis<|message|>I MUST CALL ADD<|end|>" in render_chat(GPT_OSS, messages, tools=definitions)
