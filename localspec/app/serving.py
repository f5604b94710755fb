"""The speculative engine behind an OpenAI-compatible HTTP API (FastAPI, served by uvicorn).

One model pair serves one generation at a time (a llama.cpp context holds a
single sequence): requests wait in a bounded queue, and past it get 429. A
generation runs in a worker thread and hands its chunks to the response; when a
streaming client goes away the generation stops after the target pass in
progress. Request fields are checked against the same setting declarations as
the command line; errors use OpenAI's body, `{"error": {"message", "type",
"param", "code"}}`, and never carry a traceback or a file path.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from sse_starlette.sse import EventSourceResponse

from ..engine.generation import Generation
from ..engine.stats import SpecStats
from ..errors import LocalspecError
from ..settings import SETTINGS, GenerationSettings
from .session import Session

# OpenAI request field -> localspec setting key.
REQUEST_FIELDS = {
    "temperature": "sampling.temperature",
    "top_p": "sampling.top_p",
    "top_k": "sampling.top_k",
    "min_p": "sampling.min_p",
    "max_tokens": "sampling.max_tokens",
    "max_completion_tokens": "sampling.max_tokens",
    "stop": "sampling.stop",
    "seed": "sampling.seed",
    "draft_max": "speculative.draft_max",
    "strategy": "speculative.strategy",
}
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "interrupted": "length"}
MAX_BODY_BYTES = 1 << 20


class ApiError(Exception):
    """A request the server refuses, with its HTTP status and OpenAI-style error fields."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.param, self.code, self.headers = status, kind, param, code, headers or {}

    def response(self) -> JSONResponse:
        body = {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


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


class Engine:
    """The loaded models, used by one generation at a time, with a bounded queue in front."""

    def __init__(self, session: Session, defaults: GenerationSettings, model_id: str, queue_size: int) -> None:
        self.session = session
        self.defaults = defaults
        self.model_id = model_id
        self.queue_size = queue_size
        self.waiting = 0
        self.metrics = Metrics()
        self.shutting_down: Callable[[], bool] = lambda: False  # set by whoever runs the HTTP server
        self._lock = asyncio.Lock()

    # -- requests to generations ---------------------------------------------------------

    def settings_for(self, body: dict[str, Any]) -> GenerationSettings:
        values = self.defaults.to_values()
        for name, key in REQUEST_FIELDS.items():
            if body.get(name) is None:
                continue
            value = body[name]
            if key == "sampling.stop" and isinstance(value, str):
                value = [value]
            problem = SETTINGS[key].problem(value)
            if problem is not None:
                raise ApiError(400, problem.replace(key, name), param=name)
            values[key] = value
        settings = GenerationSettings.from_values(values)
        if settings.speculative.uses_draft_model and self.session.draft is None and body.get("strategy"):
            raise ApiError(400, f"strategy {settings.speculative.strategy!r} needs a draft model, and none is loaded", param="strategy")
        return settings.with_seed()

    def prompt_tokens(self, body: dict[str, Any], chat: bool) -> list[int]:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise ApiError(400, "messages must be a non-empty list", param="messages")
            clean = []
            for message in messages:
                if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
                    raise ApiError(400, "each message needs a role: system, user or assistant", param="messages")
                content = message.get("content")
                if isinstance(content, list):  # content parts: keep the text ones
                    content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
                if not isinstance(content, str):
                    raise ApiError(400, "message content must be text", param="messages")
                clean.append({"role": message["role"], "content": content})
            try:
                tokens = self.session.chat_prompt_tokens(clean)
            except LocalspecError as exc:
                raise ApiError(400, str(exc).split(": ", 1)[-1], param="messages") from None
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str) or not prompt:
                raise ApiError(400, "prompt must be a non-empty string", param="prompt")
            tokens = self.session.raw_prompt_tokens(prompt)
        if len(tokens) >= self.session.target.n_ctx:
            raise ApiError(400, f"the prompt is {len(tokens)} tokens but the context holds {self.session.target.n_ctx}",
                           param="messages" if chat else "prompt", code="context_length_exceeded")
        return tokens

    # -- one generation at a time --------------------------------------------------------

    async def admitted(self) -> None:
        """Wait for the engine; refuse with 429 when the queue is full."""
        if self._lock.locked() and self.waiting >= self.queue_size:
            self.metrics.count("rejected")
            raise ApiError(429, "the server is busy: too many requests waiting", kind="rate_limit_error",
                           code="queue_full", headers={"Retry-After": "1"})
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1

    def release(self) -> None:
        self._lock.release()

    async def run(self, tokens: list[int], settings: GenerationSettings, speculative: bool,
                  on_chunk: Callable[[str], None] | None, cancelled: threading.Event) -> Generation:
        """Generate in a worker thread; `on_chunk` gets text as it is accepted; `cancelled` stops it between passes."""

        def work() -> Generation:
            generation = self.session.generation(tokens, settings, speculative=speculative)
            for chunk in generation:
                if chunk.text and on_chunk is not None:
                    on_chunk(chunk.text)
                if cancelled.is_set():
                    break
            if generation.stop_reason == "interrupted":
                self.session.recover_caches()
            return generation

        generation = await asyncio.to_thread(work)
        self.metrics.totals.add(generation.stats)
        return generation


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
    }


def create_app(engine: Engine, api_key: str | None = None, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The FastAPI application serving `engine`."""
    app = FastAPI(title="localspec", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def guard(request: Request, call_next):  # type: ignore[no-untyped-def]
        if api_key is not None and request.url.path != "/health":
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return ApiError(401, "missing or wrong API key", kind="authentication_error", code="invalid_api_key").response()
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body_bytes):
            return ApiError(413, f"request body larger than {max_body_bytes} bytes").response()
        try:
            return await call_next(request)
        except Exception:  # never a traceback or a path to the client
            engine.metrics.count("error")
            return ApiError(500, "internal error", kind="server_error").response()

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        if exc.status != 429:
            engine.metrics.count("error")
        return exc.response()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(engine.metrics.text(engine.waiting))

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": engine.model_id, "object": "model", "created": 0, "owned_by": "localspec"}]}

    async def read_body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if len(raw) > max_body_bytes:
            raise ApiError(413, f"request body larger than {max_body_bytes} bytes")
        try:
            body = json.loads(raw)
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != engine.model_id:
            raise ApiError(404, f"the model {model!r} does not exist; this server has {engine.model_id!r}",
                           param="model", code="model_not_found")
        return body

    async def complete(request: Request, chat: bool) -> Any:
        body = await read_body(request)
        settings = engine.settings_for(body)
        speculative = body.get("speculative", True) is not False
        stream = body.get("stream") is True
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        await engine.admitted()
        try:
            tokens = engine.prompt_tokens(body, chat)
        except ApiError:
            engine.release()
            raise
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        if not stream:
            try:
                generation = await engine.run(tokens, settings, speculative, None, threading.Event())
            except LocalspecError as exc:
                raise ApiError(500, str(exc), kind="server_error") from None
            finally:
                engine.release()
            engine.metrics.count("ok")
            finish = FINISH_REASONS[generation.stop_reason or "length"]
            choice = ({"index": 0, "message": {"role": "assistant", "content": generation.text}, "finish_reason": finish}
                      if chat else {"index": 0, "text": generation.text, "finish_reason": finish, "logprobs": None})
            return {"id": request_id, "object": "chat.completion" if chat else "text_completion", "created": created,
                    "model": engine.model_id, "choices": [choice], "usage": _usage(generation),
                    "speculative": _speculative(generation)}
        return EventSourceResponse(_stream(engine, tokens, settings, speculative, chat, include_usage, request_id, created),
                                   ping=15)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await complete(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await complete(request, chat=False)

    return app


async def _stream(engine: Engine, tokens: list[int], settings: GenerationSettings, speculative: bool, chat: bool,
                  include_usage: bool, request_id: str, created: int) -> AsyncIterator[str]:
    """Server-sent events for one generation; the engine is released however the stream ends."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[str | None] = asyncio.Queue()
    cancelled = threading.Event()
    kind = "chat.completion.chunk" if chat else "text_completion"

    def event(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> str:
        choices = [] if delta is None else [
            {"index": 0, "delta": delta, "finish_reason": finish} if chat else {"index": 0, "text": delta.get("content", ""), "finish_reason": finish}
        ]
        return json.dumps({"id": request_id, "object": kind, "created": created, "model": engine.model_id, "choices": choices, **extra})

    def on_chunk(text: str) -> None:
        loop.call_soon_threadsafe(pieces.put_nowait, text)

    task = asyncio.create_task(engine.run(tokens, settings, speculative, on_chunk, cancelled))
    task.add_done_callback(lambda _: pieces.put_nowait(None))
    task.add_done_callback(lambda _: engine.release())  # only once the worker has really finished
    try:
        if chat:
            yield event({"role": "assistant", "content": ""})
        next_piece: asyncio.Task = asyncio.ensure_future(pieces.get())
        while True:
            done, _ = await asyncio.wait({next_piece}, timeout=0.25)
            if engine.shutting_down():  # end the stream with an error event rather than cut it
                next_piece.cancel()
                cancelled.set()
                yield json.dumps({"error": {"message": "the server is shutting down", "type": "server_error",
                                            "param": None, "code": "shutting_down"}})
                return
            if not done:
                continue
            text = next_piece.result()
            if text is None:
                break
            yield event({"content": text})
            next_piece = asyncio.ensure_future(pieces.get())
        try:
            generation = await task
        except LocalspecError as exc:
            engine.metrics.count("error")
            yield json.dumps({"error": {"message": str(exc), "type": "server_error", "param": None, "code": None}})
            return
        yield event({}, FINISH_REASONS[generation.stop_reason or "length"], speculative=_speculative(generation))
        if include_usage:
            yield event(None, usage=_usage(generation))
        yield "[DONE]"
        engine.metrics.count("ok")
    except asyncio.CancelledError:  # the client went away, or the server is shutting down
        engine.metrics.count("disconnected")
        raise
    finally:
        cancelled.set()  # the worker stops after the target pass in progress
