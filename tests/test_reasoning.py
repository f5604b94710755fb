"""A thinking model's thinking is kept apart from its answer: sorted as it streams, sent as `reasoning_content`."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Iterator

import pytest
from starlette.testclient import TestClient

from localspec.app import serving
from localspec.app.generation_queue import GenerationQueue
from localspec.app.reasoning import Sorted, ThoughtSplitter, split_thought, thinks
from localspec.app.serving import ServedModel
from localspec.app.session import Session
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
    assert thinks("{{ '<think>\\n' }}{{ m.content.split('</think>')[-1] }}")
    assert not thinks("{% for m in messages %}{{ m.content }}{% endfor %}") and not thinks(None)
    assert not thinks("<think> but never closed")


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


def test_a_response_format_reply_is_not_sorted(thinking_client: TestClient) -> None:
    """Held to a format from its first token, the reply is the answer, though the prompt opened a thought."""
    message = ask(thinking_client, response_format={"type": "json_object"}, max_tokens=40)["choices"][0]["message"]
    assert "reasoning_content" not in message and message["content"].startswith("{")


def test_an_earlier_replys_reasoning_content_reaches_the_template(thinking_client: TestClient) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "A", "reasoning_content": "R"},
                {"role": "user", "content": "and?"}]
    with_it = thinking_client.post(CHAT, json={"messages": messages, "max_tokens": 1}).json()
    without = thinking_client.post(CHAT, json={"messages": [{**m, "reasoning_content": None} for m in messages],
                                               "max_tokens": 1}).json()
    assert with_it["usage"]["prompt_tokens"] == without["usage"]["prompt_tokens"] + 3  # "[R]", spelled in bytes
    wrong = thinking_client.post(CHAT, json={"messages": [messages[0], {**messages[1], "reasoning_content": 5}]})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "messages[1].reasoning_content"
    bad_format = thinking_client.post(CHAT, json={"messages": messages[:1], "reasoning_format": "deepseek-legacy"})
    assert bad_format.status_code == 400 and bad_format.json()["error"]["param"] == "reasoning_format"
