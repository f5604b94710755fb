#!/usr/bin/env python3
"""Load check for `localspec serve`: N concurrent streaming clients for a fixed time, loopback only.

    python scripts/load_serve.py                       # starts `localspec serve` (demo pair) on a free port
    python scripts/load_serve.py --clients 8 --seconds 60 --queue 4
    python scripts/load_serve.py --url http://127.0.0.1:8080 --model demo

Reports requests completed and rejected (429), generated tokens per second over
the run, p50/p95 latency to the first and to the last token, and checks that
every request ended with a complete answer ([DONE]) or a clear HTTP status:
nothing hung, nothing lost.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx

PROMPTS = [
    "Why is the sky blue?",
    "List five fruits.",
    "Write a haiku about rain.",
    "Explain what a CPU does.",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def client(url: str, model: str, max_tokens: int, stop_at: float, results: list[dict], index: int) -> None:
    n = 0
    while time.time() < stop_at:
        body = {"model": model, "stream": True, "max_tokens": max_tokens, "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": PROMPTS[(index + n) % len(PROMPTS)]}]}
        n += 1
        started = time.time()
        record = {"status": None, "first": None, "last": None, "tokens": 0, "done": False}
        try:
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as response:
                record["status"] = response.status_code
                if response.status_code != 200:
                    response.read()
                else:
                    for line in response.iter_lines():
                        if not line.startswith("data: "):
                            continue
                        data = line[6:]
                        if data == "[DONE]":
                            record["done"] = True
                            break
                        event = json.loads(data)
                        if record["first"] is None and any(c["delta"].get("content") for c in event.get("choices", [])):
                            record["first"] = time.time() - started
                        if event.get("usage"):
                            record["tokens"] = event["usage"]["completion_tokens"]
            record["last"] = time.time() - started
        except httpx.HTTPError as exc:
            record["status"] = f"transport error: {exc}"
        results.append(record)
        if record["status"] == 429:
            time.sleep(1.0)  # as Retry-After says


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100)[int(p) - 1] if len(values) >= 2 else (values[0] if values else 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="A running server (default: start `localspec serve` on the demo pair).")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--queue", type=int, default=2, help="The started server's --queue.")
    args = parser.parse_args()
    if not 1 <= args.clients <= 64 or not 1 <= args.seconds <= 600:
        parser.error("--clients 1..64 and --seconds 1..600")
    server = None
    url = args.url
    if url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([sys.executable, "-m", "localspec", "serve", "--port", str(port), "--queue", str(args.queue)],
                                  stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
    results: list[dict] = []
    started = time.time()
    threads = [threading.Thread(target=client, args=(url, args.model, args.max_tokens, started + args.seconds, results, i))
               for i in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=args.seconds + 600)
    elapsed = time.time() - started
    hung = sum(thread.is_alive() for thread in threads)
    if server is not None:
        server.terminate()
        server.wait(timeout=30)
    completed = [r for r in results if r["status"] == 200 and r["done"]]
    rejected = [r for r in results if r["status"] == 429]
    lost = [r for r in results if r not in completed and r not in rejected]
    tokens = sum(r["tokens"] for r in completed)
    firsts = [r["first"] for r in completed if r["first"] is not None]
    lasts = [r["last"] for r in completed]
    report = {
        "clients": args.clients, "seconds": round(elapsed, 1), "completed": len(completed), "rejected_429": len(rejected),
        "incomplete_or_other_status": len(lost), "hung_clients": hung, "tokens_per_second": round(tokens / elapsed, 1),
        "first_token_p50_s": round(percentile(firsts, 50), 3), "first_token_p95_s": round(percentile(firsts, 95), 3),
        "last_token_p50_s": round(percentile(lasts, 50), 3), "last_token_p95_s": round(percentile(lasts, 95), 3),
    }
    print(json.dumps(report, indent=2))
    return 0 if not lost and not hung else 1


if __name__ == "__main__":
    sys.exit(main())
