"""The OpenAI-compatible HTTP API (FastAPI, served by uvicorn) in front of a generation queue.

Requests are checked by `openai_request`, wait their turn in the
`GenerationQueue`, and generate in its worker thread. A client that goes away
stops its generation after the target pass (or prompt batch) in progress,
streaming or not, and a client that left while queued is never admitted. Every answer is JSON (or
server-sent events): errors use OpenAI's body, `{"error": {"message", "type",
"param", "code"}}`, 404 and 405 included; an unforeseen failure is logged with
its traceback for the operator and answered with a 500 that carries neither a
traceback nor a file path, and the server goes on serving.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from sse_starlette.sse import EventSourceResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from ..engine.generation import Generation, StopReason
from ..engine.stats import SpecStats
from ..errors import LocalspecError, OutputFormatError, PromptTooLongError
from ..settings import GenerationSettings
from .generation_queue import POLL_SECONDS, ClientGone, GenerationQueue, QueueFull, Slot
from .openai_request import ApiError, CompletionRequest, parse_body, parse_request, quote_json
from .reasoning import CLOSE, OPEN, InlineThought, Sorted, sorted_whole
from .thinking_first import (
    BUDGET_UNHELD,
    ReplyForm,
    budget_held,
    may_think,
    prompt_end,
    reply_form,
    tools_think_otherwise,
)
from .web_origin import PageCors, PageGuard, allowed_origin
from .tool_calls import (
    CallStream,
    ToolCall,
    ToolSetup,
    chat_input,
    marker_tokens,
    prepare_tools,
)

# OpenAI's finish_reason for each way a generation ends (cut short counts as "length", as OpenAI does)
FINISH_REASONS = {StopReason.EOS: "stop", StopReason.LENGTH: "length", StopReason.STOP: "stop", StopReason.INTERRUPTED: "length"}
MAX_BODY_BYTES = 1 << 20
SEND_TIMEOUT_SECONDS = 60  # a stream whose client reads nothing for this long is dropped
BODY_IDLE_SECONDS = 30.0  # a request whose body stops arriving for this long is refused (408)
BODY_SECONDS = 120.0  # and one whose body takes longer than this in all (a byte now and then)
CLIENT_CLOSED = 499  # the status logged for a request whose client left before its answer
log = logging.getLogger("localspec.serve")


@dataclass
class Metrics:
    requests: dict[str, int] = field(default_factory=dict)  # by outcome: ok, error, rejected, disconnected
    totals: SpecStats = field(default_factory=SpecStats)

    def count(self, outcome: str) -> None:
        self.requests[outcome] = self.requests.get(outcome, 0) + 1

    def text(self, queue_length: int) -> str:
        lines = ["# TYPE localspec_requests_total counter"]
        lines += [f'localspec_requests_total{{outcome="{k}"}} {v}' for k, v in sorted(self.requests.items())]
        for name, value in (
            ("tokens_generated", self.totals.tokens_generated),
            ("target_passes", self.totals.target_passes),
            ("draft_tokens_proposed", self.totals.draft_tokens_proposed),
            ("draft_tokens_accepted", self.totals.draft_tokens_accepted),
        ):
            lines += [f"# TYPE localspec_{name}_total counter", f"localspec_{name}_total {value}"]
        lines += ["# TYPE localspec_queue_length gauge", f"localspec_queue_length {queue_length}"]
        return "\n".join(lines) + "\n"


@dataclass
class ServedModel:
    """What the API serves: the queue in front of the models, their defaults and name, and the counters."""

    queue: GenerationQueue
    defaults: GenerationSettings
    model_id: str
    metrics: Metrics = field(default_factory=Metrics)
    shutting_down: Callable[[], bool] = lambda: False  # set by whoever runs the HTTP server

    @property
    def has_draft(self) -> bool:
        return self.queue.session.draft is not None


class Guard:
    """ASGI middleware: the API key (every path but /health) and the body size, checked before anything runs
    (inside `web_origin`'s checks and CORS: a browser's preflight carries no key)."""

    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int) -> None:
        self.app, self.api_key, self.max_body_bytes = app, api_key, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.refusal(scope) if scope["type"] == "http" else None
        if refusal is not None:
            await refusal.response()(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> ApiError | None:
        headers = Headers(scope=scope)
        if self.api_key is not None and scope["path"] != "/health" and not self.authorized(headers.get("authorization", "")):
            return ApiError(401, "missing or wrong API key", kind="authentication_error", code="invalid_api_key")
        length = headers.get("content-length")
        if length is not None and (not (length.isascii() and length.isdigit()) or int(length) > self.max_body_bytes):
            return ApiError(413, f"request body larger than {self.max_body_bytes} bytes")
        return None

    def authorized(self, header: str) -> bool:
        """`Authorization: Bearer KEY`, the scheme in any case (RFC 7235)."""
        scheme, _, token = header.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("latin-1"),
                                                                  self.api_key.encode("latin-1"))  # type: ignore[union-attr]


def create_app(served: ServedModel, api_key: str | None = None, max_body_bytes: int = MAX_BODY_BYTES,
               allowed_origins: tuple[str, ...] = (), listening_on: str | None = None) -> FastAPI:
    """The FastAPI application serving `served`; `allowed_origins`: web pages (`https://ui.example`, or `*`) that
    may call it beside this machine's own (see `web_origin`), answered with CORS headers so that a browser lets
    them read the replies; `listening_on`: the address the server listens on (None: each connection's)."""
    # (redirect_slashes off: `/v1/models/` is a 404 like any unknown path, not a redirect to a Location built from
    # the client's Host header)
    app = FastAPI(title="localspec", docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    pages = frozenset(allowed_origin(origin) for origin in allowed_origins)
    app.add_middleware(Guard, api_key=api_key, max_body_bytes=max_body_bytes)
    app.add_middleware(PageCors, allowed_origins=pages)  # (outside the key's check: a preflight carries no key)
    app.add_middleware(PageGuard, allowed_origins=pages, listening_on=listening_on)  # (the outermost)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        """404, 405 and the like as OpenAI error bodies."""
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return ApiError(exc.status_code, message, code=code, headers=dict(exc.headers or {})).response()

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.api_route("/metrics", methods=["GET", "HEAD"])
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(served.metrics.text(served.queue.waiting))

    def model_object() -> dict[str, Any]:
        return {"id": served.model_id, "object": "model", "created": 0, "owned_by": "localspec"}

    @app.api_route("/v1/models", methods=["GET", "HEAD"])
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_object()]}

    @app.api_route("/v1/models/{model_id:path}", methods=["GET", "HEAD"])
    async def model(model_id: str) -> Response:  # (`client.models.retrieve`)
        if not model_id:  # (`/v1/models/`: an unknown path, as with the slash anywhere else)
            raise HTTPException(404, "Not Found")
        if model_id != served.model_id:
            return ApiError(404, f"the model {quote_json(model_id)} does not exist; this server has"
                                 f" {served.model_id!r}", param="model", code="model_not_found").response()
        return JSONResponse(model_object())

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await answer(served, request, chat=True, max_body_bytes=max_body_bytes)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(served, request, chat=False, max_body_bytes=max_body_bytes)

    return app


async def answer(served: ServedModel, request: Request, *, chat: bool, max_body_bytes: int) -> Response:
    """A completion request's response, whatever happens: refusals as OpenAI errors, failures as a logged 500."""
    try:
        return await _complete(served, request, chat, max_body_bytes)
    except ApiError as exc:
        served.metrics.count("rejected" if exc.status == 429 else "error")
        return exc.response()
    except QueueFull:
        served.metrics.count("rejected")
        return ApiError(429, "the server is busy: too many requests waiting", kind="rate_limit_error",
                        code="queue_full", headers={"Retry-After": "1"}).response()
    except ClientGone:
        served.metrics.count("disconnected")
        return Response(status_code=CLIENT_CLOSED)
    except LocalspecError as exc:  # e.g. an output format that cannot be completed: said in one line, no traceback
        served.metrics.count("error")
        return ApiError(500, str(exc), kind="server_error").response()
    except Exception:
        log.exception("error: %s %s failed (the server goes on)", request.method, request.url.path)
        served.metrics.count("error")
        return ApiError(500, "internal error", kind="server_error").response()


async def _complete(served: ServedModel, request: Request, chat: bool, max_body_bytes: int) -> Response:
    body = parse_body(await _read_body(request, max_body_bytes))
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, f"model must be a string, got {quote_json(model)}", param="model")
    if model is not None and model != served.model_id:
        raise ApiError(404, f"the model {quote_json(model)} does not exist; this server has {served.model_id!r}",
                       param="model", code="model_not_found")
    # Compiling a grammar, rendering and tokenizing take real time on a large schema or many tools: off the
    # event loop, so that other clients' streams and /health go on meanwhile.
    parsed = await asyncio.to_thread(parse_request, body, chat=chat, defaults=served.defaults,
                                     has_draft=served.has_draft)
    async with AsyncExitStack() as hold:
        slot = await hold.enter_async_context(served.queue.admission(gone=request.is_disconnected))
        tools, tokens, form = await asyncio.to_thread(_prepared_prompt, served, parsed)
        settings = parsed.fitted(len(tokens), served.queue.session.target.n_ctx, thinking=form.thinks)
        reply = Reply(served, chat, parsed, tools, form)
        if parsed.stream:
            held = hold.pop_all()
            events = reply.events(slot, tokens, settings, parsed.speculative, on_generated=lambda: _let_go_soon(held))
            return await _held_stream(events, held, reply)
        return await reply.whole(slot, tokens, settings, parsed.speculative, request)


async def _held_stream(events: AsyncIterator[str], held: AsyncExitStack, reply: Reply) -> HeldEventSource:
    """The stream's response, which holds the models until it ends, however it ends (or lets go at once if it cannot be built)."""
    try:
        return HeldEventSource(events, held, on_close=reply.closed, ping=15, send_timeout=SEND_TIMEOUT_SECONDS)
    except BaseException:
        await held.aclose()
        raise


_letting_go: set[asyncio.Task] = set()  # (a task the loop holds only weakly would be collected mid-way)


def _let_go_soon(held: AsyncExitStack) -> None:
    """Hand the models on once a stream's generation is done, while its client may still be reading the
    events: a client that stops reading holds a socket, not the server."""
    task = asyncio.ensure_future(held.aclose())
    _letting_go.add(task)
    task.add_done_callback(_letting_go.discard)


def _reply_form(served: ServedModel, parsed: CompletionRequest, tokens: list[int], tools: ToolSetup | None
                ) -> ReplyForm:
    """How the reply is held and sorted into thinking and answer (`thinking_first.reply_form`), and whether it may
    think first (it then gets `THINKING_MAX_TOKENS` where it gives no max_tokens): tools' grammar, their calls read
    past the thinking whatever `reasoning_format` says; a completion's format as given, unsorted; a chat reply's
    format after the thought a thinking model may write, where the reply is sorted (`reasoning_format` "none"
    leaves the thought in the content, which would then not be what the format holds: held from its first
    token); a thought held to the request's reasoning budget either way."""
    if tools is not None:
        return ReplyForm(tools.grammar, tools.splitter, tools.splitter is not None)
    if not parsed.chat:
        return ReplyForm(parsed.grammar, None, False)
    session = served.queue.session
    budget = parsed.settings.thought_budget
    form = reply_form(session.chat_template(), session.target, tokens, None, parsed.grammar, budget)
    if not parsed.reasoning:
        thinks = parsed.grammar is None and may_think(session.chat_template(), prompt_end(session.target, tokens))
        return ReplyForm(form.grammar if thinks else parsed.grammar, None, thinks)  # (a budget's grammar, unsorted)
    return form


def _finish_reason(generation: Generation) -> str:
    """OpenAI's finish_reason for a finished generation (one with no reason was cut short: INTERRUPTED)."""
    return FINISH_REASONS[generation.stop_reason or StopReason.INTERRUPTED]


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` (a chunked body has no Content-Length), and with
    415 where it is compressed (its bytes would be taken for text)."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ApiError(415, f"Content-Encoding {encoding} is not supported: send the body uncompressed")
    parts, size = [], 0
    stream = request.stream()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BODY_SECONDS
    try:
        while True:
            try:
                part = await asyncio.wait_for(anext(stream), min(BODY_IDLE_SECONDS, deadline - loop.time()))
            except StopAsyncIteration:
                break
            size += len(part)
            if size > limit:
                raise ApiError(413, f"request body larger than {limit} bytes")
            parts.append(part)
    except ClientDisconnect:  # the client left before it finished sending
        raise ClientGone() from None
    except asyncio.TimeoutError:  # (a client that holds a connection open by sending nothing more, or little)
        why = (f"the request body took more than {BODY_SECONDS:.0f} s to arrive" if loop.time() >= deadline
               else f"the request body stopped arriving: nothing for {BODY_IDLE_SECONDS:.0f} s")
        raise ApiError(408, why, headers={"Connection": "close"}) from None  # (and the connection is let go)
    return b"".join(parts)


def _prepared_prompt(served: ServedModel, parsed: CompletionRequest) -> tuple[ToolSetup | None, list[int], ReplyForm]:
    """The request's tools made ready (if any), its prompt tokens, and the form of its reply (`_reply_form`); run
    in a worker thread."""
    _refuse_too_long(served, parsed)
    tools = _tool_setup(served, parsed)
    tokens = _prompt_tokens(served, parsed, tools)
    if tools is not None and tools.thinking is not None:  # (a template variable may open or close the thought)
        end = prompt_end(served.queue.session.target, tokens)
        if tools_think_otherwise(tools.thinking, end):
            tools = _tool_setup(served, parsed, end)
    return tools, tokens, _reply_form(served, parsed, tokens, tools)


def _refuse_too_long(served: ServedModel, parsed: CompletionRequest) -> None:
    """A 400 for a prompt whose texts cannot fit the largest context, found before tokenizing (see
    `Session.refuse_text_too_long`): the messages' contents and all else they hold (names, thoughts, earlier
    calls, `tool_call_id`s), the tools' definitions and the template's variables, every text a template may
    render and llama.cpp would tokenize (a few hundred kB took it a minute, the models held)."""
    fields: dict[str, list[str]] = {"prompt": [parsed.prompt or ""]}  # each field's texts, to name the largest
    if parsed.messages is not None:
        fields = {"messages": [m["content"] for m in parsed.messages if isinstance(m.get("content"), str)]}
        fields["messages"] += [_json_text({k: v for k, v in m.items() if k not in ("role", "content")})
                               for m in parsed.messages]
        if parsed.tools is not None:
            fields["tools"] = [_json_text(parsed.tools.definitions())]
    if parsed.template_variables:
        fields["chat_template_kwargs"] = [_json_text(parsed.template_variables)]
    try:
        served.queue.session.refuse_text_too_long([text for texts in fields.values() for text in texts])
    except PromptTooLongError as exc:
        largest = max(fields, key=lambda name: sum(len(text.encode("utf-8", "replace")) for text in fields[name]))
        raise ApiError(400, f"{exc} (the most of it: {largest})" if len(fields) > 1 else str(exc), param=largest,
                       code="context_length_exceeded") from None


def _json_text(value: Any) -> str:
    """`value` as JSON text, as a template would write it (empty where it cannot be: rendering will say so)."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return ""


def _tool_setup(served: ServedModel, parsed: CompletionRequest, end: str | None = None) -> ToolSetup | None:
    """The request's tools made ready for the served model (its call syntax, their grammar), if it offers any;
    `end`: the prompt's end, where it may open or close a thought (see `prepare_tools`)."""
    if parsed.tools is None:
        return None
    session = served.queue.session
    try:
        return prepare_tools(parsed.tools, session.chat_template(), marker_tokens(session.target), end,
                             parsed.settings.thought_budget)
    except LocalspecError as exc:  # an arguments schema llguidance rejects
        raise ApiError(400, str(exc), param=getattr(exc, "param", "tools")) from None


def _reply_begun(parsed: CompletionRequest) -> tuple[list[dict[str, Any]], str]:
    """The messages to render, and the start of the reply where the conversation ends with an assistant message
    (without tool calls) after another: that message is continued, as llama-server continues it (its
    `--prefill-assistant`, on by default), and the reply is what follows it. Not under a response format or
    tools, whose grammar holds a whole reply (the message then stays a turn of its own, as before)."""
    messages = parsed.messages or []
    last = messages[-1] if messages else None
    if (last is None or last["role"] != "assistant" or last.get("tool_calls") or not last["content"]
            or len(messages) < 2 or parsed.tools is not None or parsed.response_format is not None):
        return messages, ""
    return messages[:-1], last["content"]


def _prompt_tokens(served: ServedModel, parsed: CompletionRequest, tools: ToolSetup | None = None) -> list[int]:
    session = served.queue.session
    if parsed.messages is not None and session.chat_template() is None:
        raise ApiError(400, "this model has no chat template: send plain text to /v1/completions", param="messages")
    try:
        if parsed.messages is not None:
            asked, begun = _reply_begun(parsed)
            messages, definitions = chat_input(asked, tools, served.queue.session.chat_template())
            variables = {**session.template_variables, **parsed.template_variables}  # (the request's first)
            tokens = session.chat_prompt_tokens(messages, definitions, variables)
            tokens += session.target.tokenize(begun, add_special=False) if begun else []  # (plain text, as typed)
        else:
            tokens = session.raw_prompt_tokens(parsed.prompt or "")
    except LocalspecError as exc:  # e.g. a chat template that fails on these messages
        raise ApiError(400, str(exc), param="messages" if parsed.chat else "prompt") from None
    except RecursionError:  # e.g. tool-call arguments nested too deeply for the template's tojson
        raise ApiError(400, "the messages are nested too deeply to render", param="messages") from None
    if len(tokens) >= session.target.n_ctx:
        raise ApiError(400, f"the prompt is {len(tokens)} tokens but the context holds {session.target.n_ctx}",
                       param="messages" if parsed.chat else "prompt", code="context_length_exceeded")
    return tokens


class HeldEventSource(EventSourceResponse):
    """Server-sent events that keep `hold` (the request's admission) at most until the response ends, however it
    ends (the generation lets go of it as soon as it is over: `_let_go_soon`), then call `on_close`."""

    def __init__(self, content: AsyncIterator[str], hold: AsyncExitStack, on_close: Callable[[], None],
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.hold, self.on_close = hold, on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with self.hold:
                await super().__call__(scope, receive, send)
        finally:
            self.on_close()


class Reply:
    """The response bodies of one completion request, whole or as server-sent events."""

    def __init__(self, served: ServedModel, chat: bool, parsed: CompletionRequest | None = None,
                 tools: ToolSetup | None = None, form: ReplyForm | None = None) -> None:
        """`tools`: the request's tools on this model (the output is read back as calls); `form`: the grammar the
        output is held to (the tools', or `parsed`'s response_format, perhaps after the thinking the model may do
        first) and what sorts it into thinking (`reasoning_content`) and answer (see `_reply_form`; None: free
        text, all answer)."""
        self.served, self.chat, self.tools = served, chat, tools
        self.grammar, self.splitter = (form.grammar, form.splitter) if form is not None else (None, None)
        self.thought_inline = parsed is not None and parsed.thought_inline_in_stream  # (`InlineThought`)
        # What a format that fails while generating (a limit of llguidance's) is put down to.
        self.format_param = "tools" if tools is not None else "response_format"
        self.warnings = list(parsed.response_format.warnings) if parsed and parsed.response_format else []
        self.warnings += tools.warnings if tools is not None else ()
        session = served.queue.session
        if (form is not None and form.thinks and parsed is not None and parsed.settings.thought_budget is not None
                and not budget_held(session.chat_template(), session.target)):
            self.warnings.append(f"the reasoning budget is not held: {BUDGET_UNHELD}")
        if parsed is not None and parsed.memory_asked and session.memory is None:
            self.warnings.append("memory: this server keeps no memory (start it with --memory): nothing was drafted"
                                 " from one or added to one")
        for warning in self.warnings:
            log.warning("warning: %s", warning)
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.ended = False  # the stream sent its last event
        # Under `stream_options.include_usage` every chunk but the last carries `"usage": null`, as OpenAI's do.
        self.usage_in_chunks = parsed is not None and parsed.include_usage

    def closed(self) -> None:
        """The stream's response is over: a stream that had not ended lost its client."""
        if not self.ended:
            self.served.metrics.count("disconnected")

    async def whole(self, slot: Slot, tokens: list[int], settings: GenerationSettings, speculative: bool,
                    request: Request) -> Response:
        """Generate while watching the connection: a client that leaves stops its generation."""
        work = asyncio.ensure_future(slot.generate(tokens, settings, speculative, grammar=self.grammar))
        while not (await asyncio.wait({work}, timeout=POLL_SECONDS))[0]:
            if await request.is_disconnected():
                slot.cancelled.set()  # the models are handed on once the worker stops (admission's exit)
                work.cancel()
                self.served.metrics.count("disconnected")
                return Response(status_code=CLIENT_CLOSED)
        try:
            generation = self._finished(work.result())
        except OutputFormatError as exc:  # the request's schema or tools, found unusable only while generating
            raise ApiError(400, str(exc), param=self.format_param) from None
        reply = self._sorted(generation.text)
        calls = self._calls(generation, reply.content)
        finish = self._finish(generation, calls)
        message: dict[str, Any] = {"role": "assistant",
                                   "content": None if calls else self._text(generation, reply.content)}
        if self.splitter is not None:
            message["reasoning_content"] = reply.reasoning or None
        if calls:
            message["tool_calls"] = [call.to_openai() for call in calls]
        choice = ({"index": 0, "message": message, "finish_reason": finish}
                  if self.chat else {"index": 0, "text": generation.text, "finish_reason": finish, "logprobs": None})
        return JSONResponse({"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                             "created": self.created, "model": self.served.model_id, "choices": [choice],
                             "usage": _usage(generation), "speculative": _speculative(generation), **self._warnings()})

    def _sorted(self, text: str) -> Sorted:
        """A whole output sorted into thinking and answer (all answer where nothing sorts it)."""
        return sorted_whole(self.splitter, text)

    def _calls(self, generation: Generation, answer: str) -> list[ToolCall] | None:
        """The tool calls an output's `answer` makes (None: plain text, or no tools); of an output cut short, the
        whole calls it made before the cut (as OpenAI's, a reply cut short still carries its calls)."""
        if self.tools is None:
            return None
        if generation.stop_reason is not StopReason.EOS:
            return self.tools.calls_before_cut(answer)
        return self.tools.calls_in(answer)

    def _finish(self, generation: Generation, calls: list[ToolCall] | None) -> str:
        """The reply's finish_reason: "tool_calls" for calls made in a whole output, else how it ended."""
        return "tool_calls" if calls and generation.stop_reason is StopReason.EOS else _finish_reason(generation)

    def _text(self, generation: Generation, answer: str) -> str | None:
        """A reply's content where it makes no call: its `answer`, or None for a call cut short (see
        `ToolSetup.text_of`)."""
        if self.tools is None:
            return answer
        return self.tools.text_of(answer, cut_short=generation.stop_reason is not StopReason.EOS)

    def _warnings(self) -> dict[str, list[str]]:
        """`warnings`: what llguidance does not enforce of the response_format's or the tools' schemas (absent
        when nothing)."""
        return {"warnings": self.warnings} if self.warnings else {}

    def _finished(self, generation: Generation) -> Generation:
        self.served.metrics.totals.add(generation.stats)
        self.served.metrics.count("ok")
        return generation

    async def events(self, slot: Slot, tokens: list[int], settings: GenerationSettings, speculative: bool,
                     on_generated: Callable[[], None]) -> AsyncIterator[str]:
        """The stream's events (the usage last where the request asked for it); a failure ends it with an error
        event rather than a cut connection.
        `on_generated` is called once the generation is over, however far the client has read."""
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str] = asyncio.Queue()
        work = asyncio.ensure_future(slot.generate(tokens, settings, speculative,
                                                   lambda text: loop.call_soon_threadsafe(pieces.put_nowait, text),
                                                   grammar=self.grammar))
        work.add_done_callback(lambda _: on_generated())
        sorting = self.tools.stream() if self.tools is not None else None  # plain text passes, a call waits
        thoughts = self.splitter() if self.splitter is not None else None
        inline = None
        if thoughts is not None and self.thought_inline:  # (the model's own tags where its splitter knows them)
            inline = InlineThought((getattr(thoughts, "opening", OPEN), getattr(thoughts, "closing", CLOSE)))
        try:
            if self.chat:
                yield self._event({"role": "assistant", "content": ""})
            async for text in self._pieces(pieces, work, slot):
                for event in self._sorted_events(thoughts.feed(text) if thoughts else Sorted(content=text), sorting,
                                                 inline):
                    yield event
            if self.served.shutting_down():  # end the stream with an error event rather than cut it
                self.ended = True
                yield _error_event("the server is shutting down", "shutting_down")
                return
            if thoughts is not None:
                for event in self._sorted_events(thoughts.finish(), sorting, inline):
                    yield event
            generation = self._finished(work.result())
            calls = self._calls(generation, self._sorted(generation.text).content)
            if calls:
                for event in self._call_events(calls):
                    yield event
            elif sorting is not None and (held := sorting.rest(cut_short=generation.stop_reason is not StopReason.EOS)):
                yield self._event({"content": held})  # not a whole call: the text as it is
            yield self._event({}, self._finish(generation, calls),
                              speculative=_speculative(generation), **self._warnings())
            if self.usage_in_chunks:
                yield self._event(None, usage=_usage(generation))
            self.ended = True
            yield "[DONE]"
        except OutputFormatError as exc:  # the request's schema or tools, found unusable only while generating
            self.served.metrics.count("error")
            self.ended = True
            yield _error_event(str(exc), None, kind="invalid_request_error", param=self.format_param)
        except LocalspecError as exc:
            self.served.metrics.count("error")
            self.ended = True
            yield _error_event(str(exc), None)
        except Exception:
            log.exception("error: a stream failed (the server goes on)")
            self.served.metrics.count("error")
            self.ended = True
            yield _error_event("internal error", None)
        finally:
            slot.cancelled.set()  # the worker stops after the target pass (or prompt batch) in progress
            work.cancel()  # only the wait for it: the admission hands the models on once the worker is done
            if work.done() and not work.cancelled():
                work.exception()  # seen (a failure nobody was left to hear of is not logged again at exit)

    def _sorted_events(self, text: Sorted, sorting: CallStream | None, inline: InlineThought | None = None
                       ) -> Iterator[str]:
        """Thinking as `delta.reasoning_content` (or, `inline`, as content between its tags), then the answer as
        `delta.content` (each where there is some; the answer passed through `sorting`, which holds back a call)."""
        if inline is not None:
            text = inline.inlined(text)
        if text.reasoning:
            yield self._event({"reasoning_content": text.reasoning})
        content = sorting.feed(text.content) if sorting is not None else text.content
        if content:
            yield self._event({"content": content})

    def _call_events(self, calls: list[ToolCall]) -> Iterator[str]:
        """Each call as `delta.tool_calls` chunks: its index, id, type and name, then its arguments."""
        for index, call in enumerate(calls):
            yield self._event({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                               "function": {"name": call.name, "arguments": ""}}]})
            yield self._event({"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]})

    async def _pieces(self, pieces: asyncio.Queue[str], work: asyncio.Future, slot: Slot) -> AsyncIterator[str]:
        """Text as the worker accepts it, until it finishes (or the server starts shutting down)."""
        while True:
            while not pieces.empty():
                yield pieces.get_nowait()
            if work.done():
                return
            if self.served.shutting_down():
                slot.cancelled.set()
                return
            getting = asyncio.ensure_future(pieces.get())
            try:
                await asyncio.wait({getting, work}, timeout=POLL_SECONDS, return_when=asyncio.FIRST_COMPLETED)
            finally:
                getting.cancel()  # a no-op when it got a piece
            if getting.done() and not getting.cancelled():
                yield getting.result()

    def _event(self, delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> str:
        choices = [] if delta is None else [
            {"index": 0, "delta": delta, "finish_reason": finish} if self.chat
            else {"index": 0, "text": delta.get("content", ""), "finish_reason": finish, "logprobs": None}
        ]
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        usage = {"usage": None} if self.usage_in_chunks else {}
        return json.dumps({"id": self.id, "object": kind, "created": self.created, "model": self.served.model_id,
                           "choices": choices, **usage, **extra})


def _error_event(message: str, code: str | None, kind: str = "server_error", param: str | None = None) -> str:
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def _usage(generation: Generation) -> dict[str, int]:
    prompt = generation.stats.prompt_tokens
    completion = generation.stats.tokens_generated
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _speculative(generation: Generation) -> dict[str, Any]:
    stats = generation.stats
    return {
        "acceptance_rate": stats.acceptance_rate,
        "mean_accepted_length": stats.mean_accepted_length,
        "tokens_per_second": stats.tokens_per_second,
        "target_passes": stats.target_passes,
        "draft_tokens_proposed": stats.draft_tokens_proposed,
        "draft_tokens_accepted": stats.draft_tokens_accepted,
        "guesses": stats.guesses,
        "guesses_kept": stats.guesses_kept,
    }
