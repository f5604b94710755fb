"""The serve API on tiny models, in-process: one uvicorn server in a thread for the module, spoken to over HTTP.

Fast enough for the fast suite; the process-level behaviour (the command, its
flags, SIGTERM, the demo pair) is in test_serve.py.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
import uvicorn
from cli_helpers import cli, one_error_line
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient
from tiny_models import write_pair

from localspec.app import serving
from localspec.app.generation_queue import GenerationQueue
from localspec.app.http_protocol import H11WithHeaderDeadline
from localspec.app.openai_request import UNSUPPORTED, CompletionRequest
from localspec.app.serving import ServedModel, create_app
from localspec.app.session import Session
from localspec.engine.generation import StopReason
from localspec.runtime.model import Model
from localspec.settings import ChatSettings, GenerationSettings, ModelSettings

TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
CONTEXT = 2048  # room for a generation long enough to outlast a client that leaves
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


@dataclass
class Api:
    base: str
    served: ServedModel
    http: httpx.Client  # one client, its connections reused

    @property
    def session(self) -> Session:
        return self.served.queue.session

    def post(self, path: str, body: Any, timeout: float = 30) -> httpx.Response:
        """POST `body` as JSON the way Python writes it: NaN and lone surrogates (escaped) included."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.http.post(self.base + path, content=content, timeout=timeout)

    def still_serves(self) -> None:
        reply = self.post(COMPLETIONS, {"prompt": "the cat", "max_tokens": 2})
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 2

    def wait_until(self, condition: Callable[[], bool], what: str, seconds: float = 10) -> None:
        deadline = time.time() + seconds
        while not condition():
            assert time.time() < deadline, what
            time.sleep(0.02)

    def disconnected(self) -> int:
        return self.served.metrics.requests.get("disconnected", 0)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    target, draft = write_pair(tmp_path_factory.mktemp("tiny-long"), context_length=CONTEXT)
    one_thread = ModelSettings(n_threads=1)  # the machine's cores are shared: threads that spin wait slow it down
    session = Session(Model(target, one_thread), Model(draft, one_thread), ChatSettings(template=TEMPLATE))
    defaults = GenerationSettings.from_values({"sampling.max_tokens": 8})
    served = ServedModel(GenerationQueue(session, queue_size=1), defaults, "tiny")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY needs the proto
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(served), log_level="warning", http=H11WithHeaderDeadline))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    with httpx.Client() as http:
        yield Api(f"http://127.0.0.1:{listener.getsockname()[1]}", served, http)
    server.should_exit = True
    thread.join(timeout=10)
    session.close()


def chat_body(content: Any, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], **extra}


def sse_data(response: httpx.Response) -> list[str]:
    return [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]


# -- defect 1: a malformed request never wedges the server ---------------------------------


def test_the_bodies_that_wedged_the_server_are_answered_and_the_server_goes_on(api: Api) -> None:
    for text in (5, None):
        refused = api.post(CHAT, chat_body([{"type": "text", "text": text}]))
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "messages[0].content[0]"
    surrogate_chat = api.post(CHAT, chat_body("\ud800 hi"))
    assert surrogate_chat.status_code == 200, surrogate_chat.text
    surrogate = api.post(COMPLETIONS, {"prompt": "\ud800 hi"})
    assert surrogate.status_code == 200, surrogate.text
    # The lone surrogate became U+FFFD, the replacement character.
    assert surrogate.json()["usage"]["prompt_tokens"] == len(api.session.raw_prompt_tokens("\ufffd hi"))
    api.still_serves()


def test_a_repeated_key_or_a_compressed_body_is_refused_not_guessed_at(api: Api) -> None:
    """A body with a key twice had its last taken silently (which did the client mean?); a gzipped one was said
    to be invalid UTF-8."""
    repeated = api.http.post(api.base + CHAT, content=b'{"messages": [{"role": "user", "content": "hi"}],'
                             b' "max_tokens": 2, "max_tokens": 3}', timeout=30)
    assert repeated.status_code == 400 and 'the key "max_tokens" appears twice' in repeated.json()["error"]["message"]
    # Two lone surrogates that both become U+FFFD were two keys, then one.
    alike = api.http.post(api.base + CHAT, content=b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,'
                          b' "chat_template_kwargs": {"v": {"\\ud800": 1, "\\udc00": 2}}}', timeout=30)
    assert alike.status_code == 400 and "two keys of one object read alike" in alike.json()["error"]["message"]
    body = gzip.compress(json.dumps(chat_body("hi", max_tokens=2)).encode())
    compressed = api.http.post(api.base + CHAT, content=body, headers={"Content-Encoding": "gzip"}, timeout=30)
    assert compressed.status_code == 415 and "Content-Encoding gzip" in compressed.json()["error"]["message"]
    api.still_serves()


@pytest.mark.parametrize("content, param", [
    ([{"type": "image_url", "image_url": {"url": "x"}}], "messages[0].content[0]"),
    ([{"text": "no type"}], "messages[0].content[0]"),
    (["a bare string"], "messages[0].content[0]"),
    (None, "messages[0].content"),
    ({"text": "hi"}, "messages[0].content"),
])
def test_content_must_be_text_or_text_parts(api: Api, content: Any, param: str) -> None:
    refused = api.post(CHAT, chat_body(content))
    assert refused.status_code == 400 and refused.json()["error"]["param"] == param


def test_roles_must_be_known(api: Api) -> None:
    for role in ("function", 5, None, "USER"):
        refused = api.post(CHAT, {"messages": [{"role": role, "content": "hi"}]})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "messages[0].role"
    assert api.post(CHAT, {"messages": [{"role": "developer", "content": "hi"}], "max_tokens": 1}).status_code == 200


def test_text_parts_are_joined(api: Api) -> None:
    parts = api.post(CHAT, chat_body([{"type": "text", "text": "the "}, {"type": "text", "text": "cat"}],
                                     temperature=0, max_tokens=4))
    whole = api.post(CHAT, chat_body("the cat", temperature=0, max_tokens=4))
    assert parts.json()["choices"][0]["message"]["content"] == whole.json()["choices"][0]["message"]["content"]
    assert parts.json()["usage"] == whole.json()["usage"]
    refusal = [{"type": "refusal", "refusal": "No."}]  # (as an OpenAI reply may have written it; was: a 400)
    history = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": refusal},
                            {"role": "user", "content": "the cat"}], "max_tokens": 1}
    assert api.post(CHAT, history).status_code == 200
    history["messages"][0]["content"] = refusal  # (a user writes no refusal)
    assert api.post(CHAT, history).json()["error"]["param"] == "messages[0].content[0]"


def test_an_unforeseen_failure_is_a_logged_500_and_the_server_goes_on(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(api.session, "chat_prompt_tokens", broken)
    with caplog.at_level(logging.ERROR, logger="localspec.serve"):
        failed = api.post(CHAT, chat_body("hi"))
    assert failed.status_code == 500
    assert failed.json()["error"] == {"message": "internal error", "type": "server_error", "param": None, "code": None}
    assert "Traceback" not in failed.text and "a bug" not in failed.text
    logged = [record for record in caplog.records if record.name == "localspec.serve"]
    assert logged and logged[0].exc_info is not None  # the operator gets the traceback
    monkeypatch.undo()

    monkeypatch.setattr(api.session, "generation", broken)  # fails in the worker thread, mid-stream
    streamed = api.post(COMPLETIONS, {"prompt": "the cat", "stream": True})
    events = sse_data(streamed)
    assert json.loads(events[-1])["error"]["message"] == "internal error"
    assert api.post(COMPLETIONS, {"prompt": "the cat"}).status_code == 500
    monkeypatch.undo()
    api.still_serves()


def test_every_stop_reason_has_an_openai_finish_reason() -> None:
    assert set(serving.FINISH_REASONS) == set(StopReason)  # every reason, a new one included
    assert all(isinstance(reason, StopReason) for reason in serving.FINISH_REASONS)


def test_a_stream_whose_response_cannot_be_built_lets_go_of_the_models(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        monkeypatch.undo()  # once
        raise RuntimeError("a bug")

    monkeypatch.setattr(serving.HeldEventSource, "__init__", broken)
    assert api.post(COMPLETIONS, {"prompt": "the cat", "stream": True}).status_code == 500
    assert not api.served.queue.busy  # the admission was let go, not left held by a stream that never was
    reply = api.post(COMPLETIONS, {"prompt": "the cat", "max_tokens": 2}, timeout=5)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 2


def test_a_stream_whose_client_stops_reading_lets_go_of_the_models_once_generated(tiny_pair: tuple[Path, Path]) -> None:
    """A client that reads nothing more (its socket's buffers full) holds its stream, not the server."""
    one_thread = ModelSettings(n_threads=1)
    session = Session(Model(tiny_pair[0], one_thread), Model(tiny_pair[1], one_thread), ChatSettings(template=TEMPLATE))
    served = ServedModel(GenerationQueue(session, queue_size=1), GenerationSettings(), "tiny")
    app = serving.create_app(served)
    body = json.dumps({"prompt": "the cat", "max_tokens": 64, "stream": True}).encode()

    async def scenario() -> None:
        requested = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if not requested.is_set():
                requested.set()
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client never leaves
            raise AssertionError

        bodies = 0

        async def send(message: dict[str, Any]) -> None:
            nonlocal bodies
            bodies += message["type"] == "http.response.body"
            if bodies >= 2:
                await asyncio.Event().wait()  # nothing more is read

        scope = {"type": "http", "method": "POST", "path": COMPLETIONS, "raw_path": COMPLETIONS.encode(),
                 "query_string": b"", "headers": [(b"content-type", b"application/json")], "http_version": "1.1",
                 "scheme": "http", "server": ("test", 80), "client": ("test", 1), "root_path": ""}
        stalled = asyncio.ensure_future(app(scope, receive, send))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            reply = await asyncio.wait_for(client.post(COMPLETIONS, json={"prompt": "the dog", "max_tokens": 2}), 20)
        assert reply.status_code == 200, (reply.text, served.queue.waiting, served.queue.admitted)
        assert reply.json()["usage"]["completion_tokens"] == 2
        assert bodies == 2 and not stalled.done()  # the first stream is still stuck where its client stopped
        stalled.cancel()

    try:
        asyncio.run(scenario())
    finally:
        served.queue.close()
        session.close()


def test_a_chat_request_to_a_model_without_a_chat_template_says_to_send_plain_text(tiny_pair: tuple[Path, Path]) -> None:
    session = Session(Model(tiny_pair[0], ModelSettings(n_threads=1)))  # the tiny model has no template of its own
    served = ServedModel(GenerationQueue(session, queue_size=1), GenerationSettings(), "tiny")
    try:
        with TestClient(serving.create_app(served)) as client:
            reply = client.post(CHAT, json=chat_body("hi"))
            assert reply.status_code == 400 and reply.json()["error"]["param"] == "messages"
            assert reply.json()["error"]["message"] == "this model has no chat template: send plain text to /v1/completions"
            assert client.post(COMPLETIONS, json={"prompt": "the cat", "max_tokens": 2}).status_code == 200
    finally:
        served.queue.close()
        session.close()


def test_a_template_that_renders_nothing_for_the_messages_is_400_saying_so(tiny_pair: tuple[Path, Path]) -> None:
    session = Session(Model(tiny_pair[0], ModelSettings(n_threads=1)),
                      chat=ChatSettings(template="{% for m in messages %}{{ m['content'] }}{% endfor %}"))
    served = ServedModel(GenerationQueue(session, queue_size=1), GenerationSettings(), "tiny")
    try:
        with TestClient(serving.create_app(served)) as client:
            reply = client.post(CHAT, json=chat_body(""))
            assert reply.status_code == 400 and reply.json()["error"]["param"] == "messages"
            # (was: "nothing to answer", the part naming the template cut off)
            assert "the chat template rendered no text for these messages" in reply.json()["error"]["message"]
    finally:
        served.queue.close()
        session.close()


# -- defect 3: non-finite numbers -----------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("field, value", [
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", 10**400),
    ("top_p", float("nan")), ("min_p", float("-inf")), ("p_min", float("nan")),
])
def test_non_finite_numbers_are_refused(api: Api, stream: bool, field: str, value: Any) -> None:
    refused = api.post(CHAT, chat_body("hi", stream=stream, **{field: value}))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == field and "finite" in refused.json()["error"]["message"]


# -- defect 8: the server's edges --------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("n", 2), ("best_of", 3), ("logprobs", True), ("logprobs", 2), ("top_logprobs", 3), ("echo", True),
    ("functions", [{"name": "f"}]), ("function_call", "auto"), ("logit_bias", {"5": 1}),
])
def test_fields_that_would_change_the_reply_are_refused_by_name(api: Api, field: str, value: Any) -> None:
    refused = api.post(CHAT, chat_body("hi", **{field: value}))
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == field and "not supported (yet)" in error["message"]


def test_the_harmless_values_of_those_fields_are_accepted(api: Api) -> None:
    harmless = {"n": 1, "logprobs": False, "top_logprobs": 0, "echo": False, "logit_bias": {}}
    assert set(harmless) <= set(UNSUPPORTED)
    no_format_no_tools = {"response_format": {"type": "text"}, "tools": [], "tool_choice": "none"}
    assert api.post(CHAT, chat_body("hi", max_tokens=1, **harmless, **no_format_no_tools)).status_code == 200
    also = {"n": 1.0, "logit_bias": {"42": 0}, "user": "u1", "metadata": {"a": "b"}, "store": False}  # (were refused)
    answered = api.post(CHAT, chat_body("hi", max_tokens=1, **also))
    assert answered.status_code == 200 and "warnings" not in answered.json()
    remembered = api.post(CHAT, chat_body("hi", max_tokens=1, memory=True))  # (was: taken silently)
    assert remembered.status_code == 200 and "this server keeps no memory" in remembered.json()["warnings"][0]


@pytest.mark.parametrize("field, value", [
    ("stream", "yes"), ("stream", 1), ("stream_options", "x"), ("stream_options", ["include_usage"]),
    ("speculative", "no"), ("max_tokens", "8"), ("max_tokens", 10**30), ("max_tokens", 0),
    ("max_completion_tokens", 0), ("seed", 1.5), ("stop", [1]),
    ("strategy", "bogus"), ("draft_max", 0), ("model", "gpt-9"),
    ("draft_min", -1), ("ngram_min", "abc"), ("ngram_max", 17), ("same_text", "x"), ("memory", "x"),
])
def test_wrong_types_and_values_are_400_or_404_never_500(api: Api, field: str, value: Any) -> None:
    refused = api.post(CHAT, chat_body("hi", **{field: value}))
    assert refused.status_code == (404 if field == "model" else 400), refused.text
    assert refused.json()["error"]["param"] == field


@pytest.mark.parametrize("fields, param, says", [
    ({"model": 5}, "model", "model must be a string"),
    ({"max_tokens": -5}, "max_tokens", "max_tokens must be >= 1, got -5"),
    ({"max_tokens": 4, "max_completion_tokens": 8}, "max_completion_tokens", "max_tokens is 4 but max_completion_tokens is 8"),
    ({"stop": ""}, "stop", "empty text"),
    ({"ngram_min": 5, "ngram_max": 2}, "ngram_min", "ngram_min (5) must not exceed ngram_max (2)"),
    # (a setting the request left out named by its field, which a client can send, not its profile key)
    ({"draft_min": 40}, "draft_min", "must not exceed draft_max (adaptive, which drafts up to 32) (draft_max is"),
    ({"temprature": 0}, "temprature", "unknown field \"temprature\": did you mean 'temperature'?"),
    ({"stream_option": {"include_usage": True}}, "stream_option", "did you mean 'stream_options'?"),
    # (was: "n=0 is not supported (yet): one choice per request"; the ignored fields' types were not checked)
    ({"n": 0}, "n", "n must be a whole number of at least 1, got 0"), ({"user": 5}, "user", "user must be a string"),
    ({"metadata": [1]}, "metadata", "metadata must be an object"), ({"store": "yes"}, "store", "store must be true or"),
])
def test_a_field_of_the_wrong_kind_or_twice_given_is_400_saying_which(api: Api, fields: dict, param: str, says: str) -> None:
    refused = api.post(CHAT, chat_body("hi", **fields))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == param and says in refused.json()["error"]["message"]


def test_a_body_of_more_fields_than_any_api_has_is_refused_before_they_are_spell_checked(api: Api) -> None:
    """75,000 unknown fields (under a megabyte) cost five seconds of the server's time, each spell-checked against
    the known ones before the queue's limit applied."""
    refused = api.post(CHAT, chat_body("hi", max_tokens=1, **{f"k{i}": 0 for i in range(10_000)}))
    assert refused.status_code == 400 and "holds 10002 fields, more than the 256" in refused.json()["error"]["message"]
    assert api.post(CHAT, chat_body("hi", max_tokens=1, **{f"k{i}": 0 for i in range(200)})).status_code == 200


def test_a_conversation_ending_with_an_assistant_message_continues_it(api: Api) -> None:
    """As llama-server continues it: the reply goes on from that message's text (a client's "continue"), where
    it had been rendered as a finished turn with a new one begun after it."""
    from types import SimpleNamespace

    from localspec.app.openai_request import parse_request
    from localspec.app.serving import _prompt_tokens

    turns = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
             "{% if add_generation_prompt %}<assistant>{% endif %}")
    session = Session(api.session.target, chat=ChatSettings(template=turns))  # (the served model's, another template)
    served = SimpleNamespace(queue=SimpleNamespace(session=session))
    asked = [{"role": "user", "content": "Write a haiku"}]
    begun = [*asked, {"role": "assistant", "content": "Autumn moon"}]

    def prompt(**body: Any) -> list[int]:
        return _prompt_tokens(served, parse_request({"messages": begun, **body}, chat=True,
                                                    defaults=GenerationSettings(), has_draft=True))

    assert prompt() == session.chat_prompt_tokens(asked) + session.target.tokenize("Autumn moon", add_special=False)
    assert prompt(response_format={"type": "json_object"}) == session.chat_prompt_tokens(begun)  # (a turn of its own)
    continued = api.post(CHAT, {"messages": begun, "max_tokens": 2, "temperature": 0})
    assert continued.status_code == 200, continued.text


def test_every_speculative_setting_may_be_given_and_other_servers_fields_are_ignored(api: Api) -> None:
    """localspec's own settings in a request are the command line's (p_min and the rest had been ignored, NaN
    too); a field no misspelling of a known one (`user`, another server's `max_new_tokens`) changes nothing."""
    body = chat_body("hi", max_tokens=2, p_min=0.2, draft_min=1, ngram_min=2, ngram_max=3, same_text=False,
                     memory=False, user="u1", metadata={"a": "b"}, max_new_tokens=50, cache_prompt=True)
    answered = api.post(CHAT, body)
    assert answered.status_code == 200 and answered.json()["usage"]["completion_tokens"] <= 2, answered.text


def test_max_tokens_and_max_completion_tokens_may_both_be_given_alike(api: Api) -> None:
    answered = api.post(CHAT, chat_body("hi", max_tokens=3, max_completion_tokens=3))
    assert answered.status_code == 200 and answered.json()["usage"]["completion_tokens"] <= 3, answered.text


def test_a_message_name_that_is_not_text_is_400(api: Api) -> None:
    refused = api.post(CHAT, {"messages": [{"role": "user", "content": "hi", "name": 5}], "max_tokens": 2})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "messages[0].name", refused.text


def test_malformed_json_is_400(api: Api) -> None:
    for body in (b"[" * 20_000, b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"{not json", b"\xff\xfe",
                 b'["a list"]', b"null", b'{"messages": []}', b'{"prompt": [1, 2, 3]}'):
        for path in (CHAT, COMPLETIONS):
            refused = api.post(path, body)
            assert refused.status_code == 400, (body[:40], refused.text)
            assert refused.json()["error"]["type"] == "invalid_request_error"
    api.still_serves()


def test_a_body_that_is_not_utf8_says_so_and_where(api: Api) -> None:
    """Invalid UTF-8 was "not valid JSON", which sends a client looking for a syntax error."""
    body = '{"messages": [{"role": "user", "content": "caf\u00e9"}], "max_tokens": 2}'.encode("latin-1")
    refused = api.post(CHAT, body)
    assert refused.status_code == 400, refused.text
    offset = body.index(b"\xe9")
    assert refused.json()["error"]["message"] == f"the request body is not valid UTF-8 (byte 0xe9 at offset {offset})"


def test_values_in_messages_are_shown_as_the_client_wrote_them(api: Api) -> None:
    """JSON's forms (`true`, `"no"`), not Python's (`True`, `'no'`); a 5000-digit integer is not "invalid JSON"."""
    for fields, shown in (({"max_tokens": True}, "got true"), ({"same_text": "no"}, 'got "no"'),
                          ({"stop": [""]}, 'got [""]')):
        refused = api.post(CHAT, chat_body("the cat", **fields))
        assert refused.status_code == 400 and refused.json()["error"]["message"].endswith(shown), refused.text
    huge = api.post(CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": ' + b"9" * 5000 + b"}")
    assert huge.status_code == 400
    assert huge.json()["error"]["message"] == "the request body holds a number with more than 4300 digits"


def test_unknown_paths_and_methods_get_openai_error_bodies_and_head_requests_work(api: Api) -> None:
    missing = api.http.get(api.base + "/v1/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong_method = api.http.get(api.base + COMPLETIONS)
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"
    assert wrong_method.headers["allow"] == "POST"
    for path in ("/health", "/v1/models", "/metrics"):
        assert api.http.head(api.base + path).status_code == 200, path
    slash = api.http.post(api.base + CHAT + "/", json=chat_body("the cat"))  # (was a 307 to a Location from Host)
    assert slash.status_code == 404 and slash.json()["error"]["code"] == "not_found"
    listing = api.http.get(api.base + "/v1/models/")  # (was: "the model \"\" does not exist")
    assert listing.status_code == 404 and listing.json()["error"]["code"] == "not_found"



def test_preparing_a_request_never_holds_up_the_server(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiling tools' grammar (or a large schema) runs beside the event loop: /health answers meanwhile."""
    entered, release, stood_still = threading.Event(), threading.Event(), []
    real = serving.prepare_tools

    def slow_prepare(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        if not release.wait(10):
            stood_still.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(serving, "prepare_tools", slow_prepare)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = {"messages": [{"role": "user", "content": "the cat"}], "tools": [tool], "max_tokens": 2}
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(api.http.post, api.base + CHAT, json=body, timeout=60)
        assert entered.wait(10)
        health = httpx.get(api.base + "/health", timeout=5)  # a connection of its own
        release.set()
        answer = pending.result(timeout=60)
    assert health.status_code == 200 and answer.status_code == 200, answer.text
    assert not stood_still


def test_the_bearer_scheme_is_case_insensitive(api: Api) -> None:
    with TestClient(create_app(api.served, api_key="s3cret")) as client:
        for header in ("Bearer s3cret", "bearer s3cret", "BEARER  s3cret"):
            assert client.get("/v1/models", headers={"Authorization": header}).status_code == 200, header
        for header in ("Bearer wrong", "s3cret", "Basic s3cret", ""):
            refused = client.get("/v1/models", headers={"Authorization": header})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        assert client.get("/health").status_code == 200


@pytest.mark.slow
def test_max_tokens_is_lowered_to_the_room_the_context_leaves(api: Api) -> None:
    def n_tokens(repeats: int) -> int:
        return len(api.session.raw_prompt_tokens("the cat " * repeats))

    per_repeat = n_tokens(2) - n_tokens(1)
    prompt = "the cat " * ((CONTEXT - 12 - n_tokens(0)) // per_repeat)
    n_prompt = len(api.session.raw_prompt_tokens(prompt))
    room = CONTEXT - n_prompt
    assert 0 < room < 30
    reply = api.post(COMPLETIONS, {"prompt": prompt, "max_tokens": 1_000_000, "temperature": 0})
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == room
    assert reply.json()["choices"][0]["finish_reason"] == "length"
    request = CompletionRequest(None, "x", GenerationSettings(max_tokens=1_000_000), True, False, False)
    assert request.fitted(n_prompt, CONTEXT).max_tokens == room
    assert request.fitted(10, CONTEXT).max_tokens == CONTEXT - 10


def _send_and_leave(api: Api, path: str, body: dict[str, Any]) -> socket.socket:
    """A client that sends its request over a raw socket (closed by the caller, without reading the answer)."""
    content = json.dumps(body).encode()
    client = socket.create_connection(("127.0.0.1", int(api.base.rpartition(":")[2])))
    client.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(content)}\r\n\r\n".encode() + content)
    return client


@pytest.mark.slow  # (0.2 s: the idle time waited out)
def test_a_body_that_stops_arriving_is_refused_rather_than_held_for_ever(api: Api,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends seven bytes of a hundred and then nothing held its connection open for ever."""
    from localspec.app import serving

    monkeypatch.setattr(serving, "BODY_IDLE_SECONDS", 0.2)
    client = socket.create_connection(("127.0.0.1", int(api.base.rpartition(":")[2])))
    try:
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 100\r\n\r\n{\"prom\"")
        client.settimeout(10)
        answer = ""
        while "}}" not in answer:  # (the headers and the body may come apart)
            part = client.recv(4096).decode()
            answer += part
            if not part:
                break
    finally:
        client.close()
    assert answer.startswith("HTTP/1.1 408") and "the request body stopped arriving" in answer
    api.still_serves()


def _answer_to(api: Api, sent: list[bytes], pause: float = 0.0) -> str:
    """What the server answers a client that sends `sent`, one part after another `pause` seconds apart, and then
    waits, until the server closes the connection."""
    client = socket.create_connection(("127.0.0.1", int(api.base.rpartition(":")[2])))
    answer = b""
    try:
        client.settimeout(10)
        for part in sent:
            client.sendall(part)
            time.sleep(pause)
        while part := client.recv(4096):
            answer += part
    except (ConnectionResetError, BrokenPipeError):  # (closed while sending: what came back is the answer)
        pass
    finally:
        client.close()
    return answer.decode()


@pytest.mark.slow  # (0.6 s: the deadlines waited out)
def test_headers_or_a_body_that_arrive_a_byte_now_and_then_are_refused(api: Api,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection sending nothing, or part of its headers, was held for ever; a body's bytes each within the
    idle time, but slower than any client sends, held one for as long as they came."""
    from localspec.app import http_protocol, serving

    monkeypatch.setattr(http_protocol, "HEADER_SECONDS", 0.3)
    for sent in ([], [b"POS"], [b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"]):
        answer = _answer_to(api, sent)
        assert answer.startswith("HTTP/1.1 408"), (sent, answer)
        error = json.loads(answer.partition("\r\n\r\n")[2])["error"]  # (was: plain text)
        assert error["message"] == "the request's headers did not arrive in 0 s" and error["code"] == "request_timeout"
    monkeypatch.setattr(serving, "BODY_IDLE_SECONDS", 0.25)
    monkeypatch.setattr(serving, "BODY_SECONDS", 0.35)
    headers = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n"
    answer = _answer_to(api, [headers, b" ", b" "], pause=0.1)  # (each byte within the idle time)
    assert answer.startswith("HTTP/1.1 408") and "the request body took more than 0 s to arrive" in answer
    # Answered before its body was read (404): the rest of the body, trickling, held the socket for as long.
    unrouted = b"POST /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n"
    client = socket.create_connection(("127.0.0.1", int(api.base.rpartition(":")[2])))
    try:
        client.settimeout(10)
        client.sendall(unrouted)
        assert client.recv(4096).startswith(b"HTTP/1.1 404")
        started = time.monotonic()
        with pytest.raises(OSError):  # (reset, or a broken pipe: closed while the client still sends)
            for _ in range(100):
                client.sendall(b" ")
                time.sleep(0.05)
        assert time.monotonic() - started < 2
    finally:
        client.close()
    api.still_serves()


def test_a_request_http_cannot_read_is_refused_as_json(api: Api) -> None:
    """uvicorn answered a malformed request line, or headers too large, in plain text."""
    for sent in (b"GARBAGE\r\n\r\n", b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 200_000 + b"\r\n\r\n"):
        answer = _answer_to(api, [sent])
        assert answer.startswith("HTTP/1.1 400") and "application/json" in answer.partition("\r\n\r\n")[0], answer
        assert json.loads(answer.partition("\r\n\r\n")[2])["error"]["code"] == "invalid_http_request"
    api.still_serves()


def test_a_broken_body_of_a_request_being_answered_is_refused_without_a_traceback(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    """The app answered a GET after h11 had refused its broken chunk: h11's LocalProtocolError, a traceback on
    stderr; the 400 said only "Invalid HTTP request received." (h11's reason thrown away)."""
    errors = logging.getLogger("uvicorn.error")
    errors.addHandler(caplog.handler)
    try:
        for path in ("/v1/models", "/v1/nothing"):
            sent = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
            answer = _answer_to(api, [sent.encode()])
            assert answer.startswith("HTTP/1.1 400") and answer.count("HTTP/1.1") == 1, answer
            assert "illegal chunk header" in json.loads(answer.partition("\r\n\r\n")[2])["error"]["message"]
        time.sleep(0.2)  # (the app's own answer, had it gone on, comes after the 400)
    finally:
        errors.removeHandler(caplog.handler)
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR], caplog.text
    api.still_serves()


def test_a_web_page_of_another_site_or_a_rebound_host_name_is_refused(api: Api) -> None:
    """A page could make a keyless local server generate with a simple `text/plain` POST, and one whose name
    resolves to 127.0.0.1 read the replies; pages of this machine, and programs (no `Origin`), are answered."""
    body = json.dumps(chat_body("hi", max_tokens=1))
    page = api.http.post(api.base + CHAT, content=body, headers={"Origin": "https://evil.example",
                                                                 "Content-Type": "text/plain"}, timeout=30)
    assert page.status_code == 403
    assert "the web page 'https://evil.example' are refused" in page.json()["error"]["message"]
    rebound = api.http.post(api.base + CHAT, content=body, headers={"Host": "evil.example:8080"}, timeout=30)
    assert rebound.status_code == 403 and "host name 'evil.example' is refused" in rebound.json()["error"]["message"]
    assert rebound.json()["error"]["code"] == "host_not_allowed"
    local = api.http.post(api.base + CHAT, content=body, headers={"Origin": "http://localhost:3000",
                                                                  "Host": "localhost"}, timeout=30)
    assert local.status_code == 200 and local.headers["access-control-allow-origin"] == "http://localhost:3000"
    preflight = api.http.options(api.base + CHAT, headers={"Origin": "http://127.0.0.1:5173",
                                                            "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 200 and "POST" in preflight.headers["access-control-allow-methods"]
    api.still_serves()


def test_an_allowed_origin_is_answered_with_cors_headers_and_others_refused(api: Api) -> None:
    with TestClient(create_app(api.served, allowed_origins=("https://UI.example/",))) as client:
        body = chat_body("hi", max_tokens=1)
        allowed = client.post(CHAT, json=body, headers={"Origin": "https://ui.example"})
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://ui.example"
        assert client.post(CHAT, json=body, headers={"Origin": "https://other.example"}).status_code == 403
    one_error_line(cli("serve", "--allow-origin", "ui.example"), 2, "--allow-origin 'ui.example': give a web page's")
    one_error_line(cli("serve", "--allow-origin", "https://[::1"), 2, "--allow-origin 'https://[::1': give")  # (a traceback)
    one_error_line(cli("serve", "--allow-origin", "null"), 2, "--allow-origin 'null': a page without an origin")


def test_a_non_streaming_client_that_leaves_stops_its_generation(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    n_prompt = len(api.session.raw_prompt_tokens("the cat"))
    long = CONTEXT - n_prompt - 1
    before = api.disconnected()
    # The tiny model at a real one's pace (2 ms a pass, the whole length 4 s and more): its 0.35 s had once all
    # been written before the server's look at the connection noticed the client gone.
    decode = api.session.target._decode

    def slow_decode(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.002)
        decode(*args, **kwargs)

    monkeypatch.setattr(api.session.target, "_decode", slow_decode)
    client = _send_and_leave(api, COMPLETIONS, {"prompt": "the cat", "max_tokens": long, "speculative": False})
    api.wait_until(lambda: api.served.queue.busy, "the request never started")
    client.close()
    api.wait_until(lambda: api.disconnected() > before, "the departure was never noticed")
    api.wait_until(lambda: not api.served.queue.busy, "the generation went on")
    assert len(api.session.target.tokens) < n_prompt + long * 9 // 10  # stopped early, its cache kept consistent
    api.still_serves()


def test_a_queued_client_that_leaves_is_never_admitted(api: Api) -> None:
    body = {"prompt": "the cat", "max_tokens": 1500, "stream": True}
    with api.http.stream("POST", api.base + COMPLETIONS, content=json.dumps(body), timeout=30) as holder:
        lines = holder.iter_lines()  # kept: a dropped iterator closes the response
        next(lines)  # generating: the models are taken
        admitted = api.served.queue.admitted
        before = api.disconnected()
        queued = _send_and_leave(api, COMPLETIONS, body)
        api.wait_until(lambda: api.served.queue.waiting == 1, "the second request never queued")
        queued.close()
        api.wait_until(lambda: api.disconnected() > before, "the queued departure was never noticed")
        assert api.served.queue.waiting == 0
    # The holder left too: its generation stops, and nobody else was admitted meanwhile.
    api.wait_until(lambda: not api.served.queue.busy, "the dropped stream kept the models")
    assert api.served.queue.admitted == admitted
    assert api.disconnected() == before + 2
    api.still_serves()


# -- the command's own edges (in-process: a refused start loads nothing) ------------------------


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_taken_port_is_one_line_and_exit_1_before_serving(tiny_pair: tuple[Path, Path], taken_port: int) -> None:
    result = cli("serve", "--target", str(tiny_pair[0]), "--port", str(taken_port))
    one_error_line(result, 1, f"cannot listen on 127.0.0.1:{taken_port}")
    assert "serving" not in result.stderr


def test_a_host_name_that_cannot_be_encoded_is_one_line(tiny_pair: tuple[Path, Path]) -> None:
    """Python's IDNA codec raised UnicodeError (a traceback) for these."""
    for host in ("a" * 64, "a..b", "caf\udcff"):
        one_error_line(cli("serve", "--target", str(tiny_pair[0]), "--host", host), 2, "not a host name or address")
    for host in ("", " "):  # (was "cannot listen on : Name or service not known")
        one_error_line(cli("serve", "--target", str(tiny_pair[0]), "--host", host), 2, "--host is empty")


def test_an_empty_api_key_means_no_key_with_a_warning(tiny_pair: tuple[Path, Path], taken_port: int) -> None:
    for args, env in ((["--api-key", ""], {}), ([], {"LOCALSPEC_API_KEY": ""})):
        result = cli("serve", "--target", str(tiny_pair[0]), "--port", str(taken_port), *args, env=env)
        assert result.exit_code == 1  # stopped by the taken port, after reading the key
        warning = result.stderr.splitlines()[0]
        assert "warning: the API key is empty: serving without one" in warning, result.stderr
    one_error_line(cli("serve", "--target", str(tiny_pair[0]), "--api-key", "two words"), 2, "--api-key must be")
    one_error_line(cli("serve", "--target", str(tiny_pair[0]), env={"LOCALSPEC_API_KEY": " "}), 2,
                   "LOCALSPEC_API_KEY must be")
    one_error_line(cli("serve", "--target", str(tiny_pair[0]), "--max-tokens", "0"), 2, "--max-tokens", "x>=1")


# -- requests the review found untested ----------------------------------------------------------


def test_stop_ends_the_reply_where_the_stop_text_starts(api: Api) -> None:
    plain = api.post(CHAT, chat_body("the cat", temperature=0, max_tokens=8)).json()["choices"][0]
    assert plain["finish_reason"] == "length"  # tiny models never emit EOS: only `length` is possible here
    text = plain["message"]["content"]
    word = text.split()[2]
    expected = text[: text.index(word)]
    for stream in (False, True):
        reply = api.post(CHAT, chat_body("the cat", temperature=0, max_tokens=8, stop=word, stream=stream))
        if stream:
            events = [json.loads(e) for e in sse_data(reply)[:-1]]
            content = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
            finish = events[-1]["choices"][0]["finish_reason"]
        else:
            content, finish = reply.json()["choices"][0]["message"]["content"], reply.json()["choices"][0]["finish_reason"]
        assert (content, finish) == (expected, "stop")


def test_streamed_completions_match_the_whole_reply(api: Api) -> None:
    body = {"prompt": "a big red", "temperature": 0, "max_tokens": 10}
    whole = api.post(COMPLETIONS, body).json()
    streamed = api.post(COMPLETIONS, {**body, "stream": True, "stream_options": {"include_usage": True}})
    events = sse_data(streamed)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert all(c["choices"][0]["logprobs"] is None for c in chunks if c["choices"])  # (as in a whole reply's choice)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == whole["choices"][0]["text"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == whole["usage"]
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])  # (as OpenAI's chunks are)
    plain = [json.loads(e) for e in sse_data(api.post(COMPLETIONS, {**body, "stream": True}))[:-1]]
    assert not any("usage" in c for c in plain)


def test_strategy_draft_max_and_speculative_fields_choose_how_the_reply_is_drafted(api: Api) -> None:
    def ask(**fields: Any) -> dict[str, Any]:
        reply = api.post(COMPLETIONS, {"prompt": "the cat sat", "temperature": 0, "max_tokens": 24, **fields})
        assert reply.status_code == 200, reply.text
        return reply.json()

    alone = ask(speculative=False)
    # (a pass a token but the first, which the prompt's evaluation gives)
    assert alone["speculative"]["draft_tokens_proposed"] == 0 and alone["speculative"]["target_passes"] == 23
    model = ask(strategy="model", draft_max=2)
    stats = model["speculative"]
    assert 0 < stats["draft_tokens_proposed"] <= 2 * stats["target_passes"]
    assert stats["target_passes"] < 24
    wide = ask(strategy="model", draft_max=6)["speculative"]
    assert wide["draft_tokens_proposed"] > stats["draft_tokens_proposed"]
    ngram = ask(strategy="ngram")
    # Temperature 0: whatever drafts, the reply is the target's own greedy text.
    assert model["choices"][0]["text"] == ngram["choices"][0]["text"] == alone["choices"][0]["text"]


def test_the_same_seed_gives_the_same_reply_however_it_is_drafted(api: Api) -> None:
    """Coupled verification: at T=1 the reply depends on the seed alone, not on drafting or what was learned before."""
    def text(**fields: Any) -> str:
        reply = api.post(CHAT, {"messages": [{"role": "user", "content": "the cat"}], "temperature": 1.0,
                                "max_tokens": 16, "seed": 7, **fields})
        assert reply.status_code == 200, reply.text
        return reply.json()["choices"][0]["message"]["content"]

    alone = text(speculative=False)
    assert text() == text() == text(strategy="model", draft_max=3) == text(strategy="ngram") == alone
    assert text(seed=8) != alone
    assert text(verify="rejection", strategy="model", draft_max=3) != alone  # equal in distribution only


def test_repetition_penalties_change_the_reply_and_the_same_seed_gives_it_however_it_is_drafted(api: Api) -> None:
    penalties = {"presence_penalty": 1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.3}

    def text(**fields: Any) -> str:
        reply = api.post(COMPLETIONS, {"prompt": "the cat", "temperature": 1.0, "max_tokens": 24, "seed": 3, **fields})
        assert reply.status_code == 200, reply.text
        return reply.json()["choices"][0]["text"]

    alone = text(speculative=False, **penalties)
    assert alone != text(speculative=False)
    drafted = [text(**penalties), text(strategy="model", draft_max=3, **penalties), text(strategy="ngram", **penalties)]
    assert drafted == [alone] * 3
    assert text(speculative=False, **penalties, repeat_last_n=1) != alone  # (the window is the request's too)
    for field, value in (("presence_penalty", 2.5), ("frequency_penalty", "1"), ("repetition_penalty", 0)):
        refused = api.post(COMPLETIONS, {"prompt": "the cat", field: value})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == field, refused.text


# -- the fuzz test --------------------------------------------------------------------------------

SURROGATES = st.sampled_from(["\ud800", "\udfff", "\ud83d", "\ude00"])
TEXT = st.lists(st.one_of(st.characters(), SURROGATES), max_size=8).map("".join)
NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True))
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
                    max_leaves=8)
SMALL_COUNT = st.one_of(st.integers(0, 6), st.none(), TEXT, st.booleans(), st.floats(allow_nan=True))  # short replies
PART = st.fixed_dictionaries({}, optional={"type": st.one_of(st.just("text"), JSON), "text": st.one_of(TEXT, JSON)})
CONTENT = st.one_of(TEXT, st.lists(st.one_of(PART, JSON), max_size=3), JSON)
MESSAGE = st.one_of(st.fixed_dictionaries({}, optional={
    "role": st.one_of(st.sampled_from(["system", "user", "assistant", "developer", "tool"]), JSON),
    "content": CONTENT,
}), JSON)
FIELDS = {name: JSON for name in ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty",
                                  "frequency_penalty", "repeat_last_n", "penalty_last_n", "seed", "stop", "strategy",
                                  "draft_max", "draft_min", "p_min", "ngram_min", "ngram_max", "same_text", "memory",
                                  "speculative", "stream", "stream_options", "model", "response_format", "tools",
                                  "tool_choice", "parallel_tool_calls", *UNSUPPORTED)}
BODY = st.fixed_dictionaries({}, optional={
    **FIELDS,
    "messages": st.one_of(st.lists(MESSAGE, max_size=3), JSON),
    "prompt": st.one_of(TEXT, JSON),
    "max_tokens": SMALL_COUNT,
    "max_completion_tokens": SMALL_COUNT,
    "stream": st.one_of(st.booleans(), JSON),
    "temperature": st.one_of(NUMBERS, JSON),
})


def _check_answer(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        events = sse_data(response)
        assert events and (events[-1] == "[DONE]" or "error" in json.loads(events[-1])), response.text
        for event in events[:-1]:
            json.loads(event)
        return
    answer = response.json()
    if response.status_code == 200:
        assert answer["choices"] and "usage" in answer
    else:
        assert isinstance(answer["error"]["message"], str) and answer["error"]["type"], answer


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(path=st.sampled_from([CHAT, COMPLETIONS]),
       body=st.one_of(BODY, JSON, st.binary(max_size=40)))
def test_fuzz_any_body_gets_a_well_formed_answer_and_the_server_goes_on(api: Api, path: str, body: Any) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    _check_answer(api.post(path, content))
    api.still_serves()


@pytest.mark.slow  # (1.4 s: llguidance compiles 2500 alternatives)
def test_a_schema_that_fails_only_while_generating_is_the_requests_fault(api: Api) -> None:
    """Some schemas pass llguidance's checks and reach one of its limits only once tokens are fed (here its
    parser's 2000 items in a row): a 400 naming response_format (an error event of that kind when streamed),
    never a 500, and the server goes on."""
    schema = {"enum": [{"a": i} for i in range(2500)]}
    body = {"prompt": "the cat", "max_tokens": 8, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    reply = api.post(COMPLETIONS, body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "response_format"
    assert "output format" in error["message"]
    events = sse_data(api.post(COMPLETIONS, {**body, "stream": True}))
    failed = json.loads(events[-1])["error"]
    assert failed["type"] == "invalid_request_error" and failed["param"] == "response_format"
    api.still_serves()
