#!/usr/bin/env python3
"""What a network adds when the target lives on RPC workers: round trips and bytes per target pass.

    python scripts/rpc_traffic.py                        # demo pair, two loopback workers it starts itself
    python scripts/rpc_traffic.py --workers 1 --prompts 6 --tokens 96 --json
    python scripts/rpc_traffic.py --rpc 10.0.0.2:50052   # workers already running elsewhere

Each worker is reached through a counting TCP relay in this process, so every
byte and every request/response turn between llama.cpp's RPC client and the
workers is counted. For target-only and speculative generation (same prompts
and seeds) it reports, per target pass and per generated token, the round trips
(a reply after a request: a wait for the network) and the bytes each way, then
the time that adds at a given round-trip time, projected onto speeds measured
beside it with the target on local devices:

    added per token = round trips per token x RTT (+ bytes per token / bandwidth)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import subprocess
import sys
import threading

from localspec.app.bench import BENCH_PROMPTS
from localspec.app.plan import resolve
from localspec.app.session import open_session

RTTS_MS = (0.2, 1.0)
BANDWIDTH_BITS = 1e9  # a gigabit link, for the bytes' share


class CountingRelay:
    """A TCP relay from a local port to one worker that counts bytes each way and request/response turns."""

    def __init__(self, worker: str) -> None:
        host, _, port = worker.rpartition(":")
        self.worker = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.up = self.down = self.round_trips = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.round_trips, self.up, self.down

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            upstream = socket.create_connection(self.worker)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            state = {"last": None}
            threading.Thread(target=self._pipe, args=(client, upstream, "up", state), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, "down", state), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, direction: str, state: dict) -> None:
        try:
            while data := source.recv(1 << 20):
                with self._lock:
                    if direction == "up":
                        self.up += len(data)
                    else:
                        self.down += len(data)
                        if state["last"] == "up":
                            self.round_trips += 1
                    state["last"] = direction
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def start_workers(n: int) -> tuple[list[str], list[subprocess.Popen]]:
    endpoints, processes = [], []
    for _ in range(n):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        process = subprocess.Popen([sys.executable, "-m", "localspec", "worker", "--port", str(port), "--threads", "1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        while "listening" not in process.stdout.readline():
            if process.poll() is not None:
                sys.exit("a worker did not start")
        endpoints.append(f"127.0.0.1:{port}")
        processes.append(process)
    return endpoints, processes


def measure(profile: str | None, flags: dict, prompts: list[str], temperatures: list[float], relays=()) -> dict:
    """Per temperature and mode: tokens/s, target passes, tokens, and the relays' counts (when given)."""
    plan = resolve(profile, flags)
    rows = {}
    with open_session(plan) as session:
        prompt_tokens = [session.chat_prompt_tokens([{"role": "user", "content": text}]) for text in prompts]
        for temperature in temperatures:
            settings = dataclasses.replace(plan.generation, sampling=dataclasses.replace(plan.generation.sampling, temperature=temperature))
            for speculative in (False, True):
                totals = {"tokens": 0, "passes": 0, "seconds": 0.0, "round_trips": 0, "up": 0, "down": 0}
                for tokens in prompt_tokens:
                    session.target.sync(tokens[:-1])  # the prompt is not what is measured
                    if session.draft is not None:
                        session.draft.sync(tokens[:-1])
                    before = [relay.snapshot() for relay in relays]
                    generation = session.generation(tokens, settings, speculative=speculative)
                    for _ in generation:
                        pass
                    after = [relay.snapshot() for relay in relays]
                    totals["tokens"] += generation.stats.tokens_generated
                    totals["passes"] += generation.stats.target_passes
                    totals["seconds"] += generation.stats.generation_seconds
                    for (rt0, up0, down0), (rt1, up1, down1) in zip(before, after):
                        totals["round_trips"] += rt1 - rt0
                        totals["up"] += up1 - up0
                        totals["down"] += down1 - down0
                rows[(temperature, "speculative" if speculative else "target-only")] = totals
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-p", "--profile", default=None)
    parser.add_argument("--rpc", default=None, help="Workers already running (HOST:PORT,...); default: start --workers here.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--temperatures", default="0,0.8")
    parser.add_argument("--n-gpu-layers", type=int, default=None,
                        help="Target layers to put on the workers (default: all).")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    temperatures = [float(t) for t in args.temperatures.split(",")]
    prompts = BENCH_PROMPTS[: args.prompts]
    flags = {"sampling.max_tokens": args.tokens, "sampling.seed": 1}
    processes = []
    if args.rpc:
        workers = args.rpc.split(",")
    else:
        workers, processes = start_workers(args.workers)
    try:
        relays = [CountingRelay(worker) for worker in workers]
        remote = {**flags, "target.rpc": [relay.endpoint for relay in relays], "target.n_gpu_layers": args.n_gpu_layers}
        counted = measure(args.profile, remote, prompts, temperatures, relays)
        local = measure(args.profile, flags, prompts, temperatures)
    finally:
        for process in processes:
            process.kill()
    report = []
    for (temperature, mode), traffic in counted.items():
        speed = local[(temperature, mode)]
        row = {
            "temperature": temperature, "mode": mode, "workers": len(workers),
            "tokens": traffic["tokens"], "target_passes": traffic["passes"],
            "round_trips_per_pass": traffic["round_trips"] / traffic["passes"],
            "round_trips_per_token": traffic["round_trips"] / traffic["tokens"],
            "bytes_up_per_pass": traffic["up"] / traffic["passes"],
            "bytes_down_per_pass": traffic["down"] / traffic["passes"],
            "local_tokens_per_second": speed["tokens"] / speed["seconds"],
        }
        seconds_per_token = 1 / row["local_tokens_per_second"]
        bytes_per_token = (traffic["up"] + traffic["down"]) / traffic["tokens"]
        for rtt_ms in RTTS_MS:
            added = row["round_trips_per_token"] * rtt_ms / 1000 + bytes_per_token * 8 / BANDWIDTH_BITS
            row[f"projected_tokens_per_second_rtt_{rtt_ms}ms"] = 1 / (seconds_per_token + added)
        report.append(row)
    for row in report:
        twin = next(r for r in report if r["temperature"] == row["temperature"] and r["mode"] == "target-only")
        for key in [k for k in row if k.startswith("projected") or k == "local_tokens_per_second"]:
            row[key.replace("tokens_per_second", "speedup")] = row[key] / twin[key]
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for row in report:
        print(f"T={row['temperature']} {row['mode']:<11} {row['round_trips_per_pass']:5.1f} round trips/pass "
              f"({row['round_trips_per_token']:5.1f}/token), {row['bytes_up_per_pass'] / 1024:7.1f} KiB up, "
              f"{row['bytes_down_per_pass'] / 1024:7.1f} KiB down per pass; local {row['local_tokens_per_second']:5.1f} tok/s"
              + "".join(f"; at {rtt} ms RTT {row[f'projected_tokens_per_second_rtt_{rtt}ms']:5.1f} tok/s "
                        f"({row[f'projected_speedup_rtt_{rtt}ms']:.2f}x)" for rtt in RTTS_MS))


if __name__ == "__main__":
    main()
