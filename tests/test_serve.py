"""`localspec serve` started for real on a loopback port, spoken to with the official `openai` client.

The API's edges (malformed bodies, disconnects, the fuzz test) are tested in-process in test_serve_api.py.
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from localspec.config.paths import user_profiles_dir

if TYPE_CHECKING:  # openai takes most of a second to import: only the tests that speak to a server load it
    import openai

pytestmark = pytest.mark.slow  # real server processes (tiny models, and the demo pair in the last test)

TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "localspec", "serve", "--port", str(self.port), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ),
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(f"{self.base}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
            if self.process.poll() is not None:
                raise RuntimeError(self.process.stderr.read().decode())
        raise RuntimeError("the server did not start")

    def client(self, api_key: str = "none") -> openai.OpenAI:
        import openai

        return openai.OpenAI(base_url=f"{self.base}/v1", api_key=api_key, max_retries=0)

    def stop(self) -> str:
        self.process.terminate()
        self.process.wait(timeout=30)
        return self.process.stderr.read().decode()


@pytest.fixture
def tiny_server(tiny_pair: tuple[Path, Path]):
    path = user_profiles_dir() / "tiny.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[target]\npath = "{tiny_pair[0]}"\n[draft]\npath = "{tiny_pair[1]}"\n[chat]\ntemplate = "{TEMPLATE}"\n')
    server = Server("-p", "tiny")
    yield server
    server.stop()


def ask(client: openai.OpenAI, text: str, **extra):
    return client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": text}], **extra)


def test_chat_completions_plain_and_streamed(tiny_server: Server) -> None:
    import openai

    client = tiny_server.client()
    plain = ask(client, "the cat sat", max_tokens=12, temperature=0)
    assert plain.choices[0].message.content and plain.choices[0].finish_reason == "length"  # tiny models never emit EOS
    assert plain.usage.completion_tokens == 12 and plain.usage.total_tokens == plain.usage.prompt_tokens + 12
    assert plain.model_extra["speculative"]["target_passes"] > 0
    chunks = list(ask(client, "the cat sat", max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == plain.choices[0].message.content  # temperature 0: the same reply either way
    assert chunks[-1].usage.completion_tokens == 12
    assert [m.id for m in client.models.list()] == ["tiny"]
    assert client.models.retrieve("tiny").id == "tiny"  # (was: a 404 for the route)
    with pytest.raises(openai.NotFoundError) as unknown:
        client.models.retrieve("gpt-9")
    assert unknown.value.body["code"] == "model_not_found"
    completion = client.completions.create(model="tiny", prompt="the cat", max_tokens=5, temperature=0)
    assert completion.usage.completion_tokens == 5


def test_bad_requests_get_the_right_status_and_the_server_goes_on(tiny_server: Server) -> None:
    import openai

    client = tiny_server.client()
    with pytest.raises(openai.BadRequestError) as bad:
        ask(client, "hi", temperature=-1)
    assert bad.value.body["param"] == "temperature" and "must be >= 0" in bad.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as long:
        ask(client, "the cat " * 400)
    assert long.value.body["code"] == "context_length_exceeded"
    malformed = httpx.post(f"{tiny_server.base}/v1/chat/completions", content=b"{not json", timeout=10)
    assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "invalid_request_error"
    huge = httpx.post(f"{tiny_server.base}/v1/chat/completions", content=b"x" * (2 << 20), timeout=10)
    assert huge.status_code == 413
    assert "Traceback" not in malformed.text
    assert ask(client, "still here?", max_tokens=3).usage.completion_tokens == 3
    metrics = httpx.get(f"{tiny_server.base}/metrics").text
    assert 'localspec_requests_total{outcome="ok"} 1' in metrics and "localspec_tokens_generated_total 3" in metrics


def test_concurrent_clients_get_their_sequential_answers(tiny_server: Server) -> None:
    """Same seed, same reply, whatever ran before: with a fixed draft length (an adaptive one learns across
    requests, so its draft lengths, and the random draws with them, depend on what came before)."""
    client = tiny_server.client()
    prompts = ["the cat", "a big red", "sun and sea"]
    fixed = {"draft_max": 4}
    sequential = [ask(client, p, max_tokens=16, temperature=1.0, seed=i, extra_body=fixed).choices[0].message.content
                  for i, p in enumerate(prompts)]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(ask, tiny_server.client(), p, max_tokens=16, temperature=1.0, seed=i, extra_body=fixed)
                   for i, p in enumerate(prompts)]
        concurrent_answers = [f.result().choices[0].message.content for f in futures]
    assert concurrent_answers == sequential


def test_an_api_key_guards_everything_but_health(tiny_pair: tuple[Path, Path]) -> None:
    import openai

    server = Server("--target", str(tiny_pair[0]), "--api-key", "s3cret")
    try:
        assert httpx.get(f"{server.base}/health").status_code == 200
        assert httpx.get(f"{server.base}/v1/models").status_code == 401
        with pytest.raises(openai.AuthenticationError):
            server.client("wrong").models.list()
        assert [m.id for m in server.client("s3cret").models.list()] == [tiny_pair[0].stem]
    finally:
        server.stop()


def test_demo_pair_matches_run_frees_the_engine_on_disconnect_and_queues(smollm_f32: Path, smollm_q4_1: Path) -> None:
    server = Server("--target", str(smollm_f32), "--draft", str(smollm_q4_1), "--queue", "0")
    try:
        client = server.client()
        model = smollm_f32.stem
        reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Why is the sky blue?"}],
                                               max_tokens=40, temperature=0)
        via_run = subprocess.run(
            [sys.executable, "-m", "localspec", "run", "--target", str(smollm_f32), "--draft", str(smollm_q4_1),
             "--temperature", "0", "--max-tokens", "40", "Why is the sky blue?"], capture_output=True, timeout=300,
        ).stdout.decode()
        assert reply.choices[0].message.content == via_run

        # A long streamed reply, dropped after a few chunks: the engine is free again at once.
        body = {"model": model, "messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 2000, "stream": True}
        with httpx.stream("POST", f"{server.base}/v1/chat/completions", json=body, timeout=60) as stream:
            for i, _ in enumerate(stream.iter_lines()):
                if i > 6:
                    break
        dropped = time.time()
        while 'outcome="disconnected"' not in httpx.get(f"{server.base}/metrics").text:
            assert time.time() - dropped < 10, "the dropped stream was never noticed"
            time.sleep(0.1)
        # The worker stops after the target pass in progress (the 2000-token reply would take far longer);
        # with --queue 0 a request is a 429 while the engine is busy.
        hi = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        while (quick := httpx.post(f"{server.base}/v1/chat/completions", json=hi, timeout=30)).status_code == 429:
            assert time.time() - dropped < 10, "the dropped stream kept the engine"
            time.sleep(0.05)
        assert quick.json()["usage"]["completion_tokens"] == 4

        # With --queue 0, a request arriving while one generates is refused with 429 and Retry-After.
        with httpx.stream("POST", f"{server.base}/v1/chat/completions", json=body, timeout=60) as stream:
            lines = stream.iter_lines()  # kept: a dropped iterator closes the response
            next(lines)
            busy = httpx.post(f"{server.base}/v1/chat/completions", json={**body, "stream": False}, timeout=30)
        assert busy.status_code == 429 and busy.headers["Retry-After"] and busy.json()["error"]["code"] == "queue_full"

        # SIGTERM during a stream: the stream ends with an error event, the server exits and frees the port.
        deadline = time.time() + 10
        while httpx.post(f"{server.base}/v1/chat/completions", json={**body, "stream": False, "max_tokens": 1}).status_code == 429:
            assert time.time() < deadline, "the dropped stream never freed the engine"
            time.sleep(0.2)
        with httpx.stream("POST", f"{server.base}/v1/chat/completions", json=body, timeout=60) as stream:
            lines = stream.iter_lines()
            next(lines)
            server.process.terminate()
            rest = list(lines)
        assert any('"code": "shutting_down"' in line for line in rest)
        server.process.wait(timeout=15)
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a restarted server would
            sock.bind(("127.0.0.1", server.port))  # nothing listens there any more
            sock.listen()
    finally:
        print(server.stop())  # the server's log, shown when the test fails


def test_ctrl_c_while_the_server_starts_ends_it_quietly(tiny_pair: tuple[Path, Path]) -> None:
    import signal

    path = user_profiles_dir() / "tiny.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[target]\npath = "{tiny_pair[0]}"\n[draft]\npath = "{tiny_pair[1]}"\n')
    for delay in (0.0, 0.002, 0.02):
        process = subprocess.Popen([sys.executable, "-m", "localspec", "serve", "-p", "tiny", "--port", "0"],
                                   stderr=subprocess.PIPE, text=True)
        seen = ""
        while "Ctrl-C stops" not in seen:
            line = process.stderr.readline()
            assert line, seen
            seen += line
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        try:
            rest = process.communicate(timeout=30)[1]
        finally:
            process.kill()  # (a server that ran on is not left behind)
        assert process.returncode in (0, 130) and "Traceback" not in rest and "never awaited" not in rest, rest
