#!/usr/bin/env python3
"""Drafting from memory on repetitive work: speculative with the memory vs without vs target-only, side by side.

    python scripts/bench_memory.py                                  # demo pair, every workload, T=0
    python scripts/bench_memory.py --workloads extraction --requests 10 --temperatures 0,0.8
    python scripts/bench_memory.py --llamacpp-bin LLAMA_CPP/build/bin   # adds llama-lookup with a dynamic cache

Workloads (their prompts are written for this script):

  extraction   one extraction instruction over many different inputs (an agent's or a script's loop)
  code         a sequence of coding requests whose answers reuse earlier answers
  repeat       the ordinary questions asked twice over (a script run again, an agent's retries): the second
               round's answers are in the memory whole
  ordinary     unrelated questions, with a memory first filled with unrelated text (localspec's own
               source code): drafting from memory must cost nothing where it finds nothing

One process loads the pair once. Requests run in order; per request the contenders run one after
the other (target-only; hybrid and ngram, each without and with the memory), same seed, so their texts are
identical (coupled verification) and the memory holds the same earlier requests whichever arm wrote
them. The memory is a temporary one: the user's is never read or written. With --llamacpp-bin,
`llama-lookup` runs each request too, in order, sharing one `--lookup-cache-dynamic` file (llama.cpp's
n-gram cache that persists across runs), at --lookup-draft-max, sampling in localspec's order (see compare_llamacpp).

Speed is generated tokens over generation time (prompt excluded), summed over the workload's
requests; ratios are per request, then the geometric mean, with a paired 95% confidence interval.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_llamacpp import LOCALSPEC_SAMPLER_ORDER, parse_llamacpp_output, rendered_prompt, t_quantile  # noqa: E402

from localspec.app.memory import SessionMemory  # noqa: E402
from localspec.app.memory_store import MemoryStore  # noqa: E402
from localspec.app.plan import resolve  # noqa: E402
from localspec.app.session import open_session  # noqa: E402
from localspec.engine.draft_length import LearnedLengths  # noqa: E402
from localspec.settings import SamplingParams  # noqa: E402

PEOPLE = [
    ("Jonas Berg", 52, "Trondheim", "a ferry captain", "sailing and chess"),
    ("Amara Okafor", 34, "Lagos", "a software engineer", "running and jazz"),
    ("Lucia Ferrante", 27, "Turin", "a pastry chef", "cycling and painting"),
    ("Kenji Watanabe", 45, "Osaka", "a dentist", "fishing and go"),
    ("Priya Raman", 31, "Chennai", "a civil engineer", "dance and photography"),
    ("Tomás Herrera", 60, "Seville", "a retired teacher", "gardening and guitar"),
    ("Greta Lindqvist", 23, "Uppsala", "a nursing student", "skiing and knitting"),
    ("Samuel Mensah", 38, "Accra", "an architect", "football and cooking"),
    ("Chloé Martin", 41, "Lyon", "a lawyer", "tennis and opera"),
    ("Dmitri Volkov", 55, "Kazan", "a truck driver", "hockey and history books"),
    ("Hana Novak", 29, "Brno", "a veterinarian", "climbing and board games"),
    ("Omar Haddad", 47, "Amman", "a pharmacist", "hiking and poetry"),
    ("Isla MacLeod", 36, "Inverness", "a journalist", "swimming and birdwatching"),
    ("Mateo Rossi", 19, "Verona", "a barista", "skateboarding and films"),
    ("Aiko Tanaka", 63, "Sapporo", "a librarian", "calligraphy and tea"),
]
SENTENCES = [
    "{name} is {age} and works as {job} in {city}. In her free time she enjoys {hobbies}.",
    "Meet {name}, {job} from {city}. At {age}, {name} still finds time for {hobbies}.",
    "{name} ({age}) lives in {city}, where she is {job}; her weekends are for {hobbies}.",
]

EXTRACTION_INSTRUCTION = (
    "Extract the person described below as a JSON object with the keys name, age, city, occupation and"
    " hobbies (a list of strings). Answer with the JSON object only.\n\nText: {text}"
)

CODE_REQUESTS = [
    "Write a Python function read_rows(path) that reads a CSV file with a header line and returns its rows as a list of dicts.",
    "Write a Python function read_rows(path) that reads a CSV file with a header line and returns its rows as a list of dicts, skipping empty lines.",
    "Write a Python function read_rows(path, delimiter) that reads a CSV file with a header line and returns its rows as a list of dicts.",
    "Write a Python function read_rows(path) that reads a CSV file with a header line and returns its rows as a list of dicts, with type hints.",
    "Write a Python function count_rows(path) that reads a CSV file with a header line and returns how many rows it has.",
    "Write a Python function read_rows(path) that reads a CSV file with a header line and returns its rows as a list of dicts, stripping spaces from every value.",
    "Write a Python function read_columns(path) that reads a CSV file with a header line and returns the column names.",
    "Write a Python function read_rows(path) that reads a CSV file with a header line and returns its rows as a list of dicts, with a docstring.",
    "Write a Python function write_rows(path, rows) that writes a list of dicts to a CSV file with a header line.",
    "Write a Python function read_rows(path) that reads a CSV file with a header line and returns its rows as a list of dicts, and raises ValueError when the file is empty.",
]

ORDINARY_PROMPTS = [
    "What should I pack for a three-day hiking trip in autumn?",
    "Explain how a refrigerator keeps food cold, in simple words.",
    "Write a short poem about a lighthouse keeper.",
    "Why do cats purr? Give two possible reasons.",
    "Describe the rules of chess for a complete beginner.",
    "How can a small team run better meetings? Give four suggestions.",
    "Summarise the water cycle in a paragraph.",
    "What are the pros and cons of working from home?",
]

CONTENDERS = ("target-only", "hybrid", "hybrid + memory", "ngram", "ngram + memory")
RATIOS = (("hybrid + memory", "hybrid"), ("hybrid + memory", "target-only"), ("hybrid", "target-only"),
          ("ngram + memory", "ngram"), ("ngram + memory", "target-only"),
          ("hybrid + memory", "llama-lookup"), ("ngram + memory", "llama-lookup"))


def extraction_prompts(n: int) -> list[str]:
    prompts = []
    for i in range(n):
        name, age, city, job, hobbies = PEOPLE[i % len(PEOPLE)]
        sentence = SENTENCES[(i + i // len(PEOPLE)) % len(SENTENCES)]
        text = sentence.format(name=name, age=age + i // len(PEOPLE), city=city, job=job, hobbies=hobbies)
        prompts.append(EXTRACTION_INSTRUCTION.format(text=text))
    return prompts


def unrelated_corpus() -> list[str]:
    """localspec's own source files: plenty of text that shares nothing with the ordinary prompts."""
    package = Path(__file__).resolve().parents[1] / "localspec"
    return [path.read_text(encoding="utf-8") for path in sorted(package.rglob("*.py"))]


def run_localspec(session: Any, prompt_tokens: list[int], settings: Any, memory: SessionMemory | None,
                  contender: str, learned: LearnedLengths) -> dict[str, Any]:
    """One contender: target-only, or a strategy ("hybrid", "ngram") with or without the memory, with the
    draft lengths it has learned (`learned`: its own, so that no arm starts from what another measured)."""
    session.memory = memory if contender.endswith("+ memory") else None
    session.learned_lengths = learned
    strategy = contender.split()[0]
    if strategy != "target-only":
        settings = dataclasses.replace(settings, speculative=dataclasses.replace(settings.speculative, strategy=strategy))
    generation = session.generation(prompt_tokens, settings, speculative=strategy != "target-only")
    for _ in generation:
        pass
    stats = generation.stats
    return {"tokens": list(generation.tokens), "generated": stats.tokens_generated,
            "seconds": stats.generation_seconds, "generation": generation}


def run_lookup(bin_dir: Path, target: Path, rendered: str, cache: Path, settings: Any, draft_max: int,
               threads: int) -> dict[str, Any]:
    sampling = SamplingParams()
    command = [str(bin_dir / "llama-lookup"), "-m", str(target), "-p", rendered, "-n", str(settings.max_tokens),
               "-c", "4096", "-t", str(threads), "--temp", f"{settings.sampling.temperature:g}",
               "--top-k", str(sampling.top_k), "--top-p", f"{sampling.top_p:g}", "--min-p", f"{sampling.min_p:g}",
               "--samplers", LOCALSPEC_SAMPLER_ORDER, "-s", str(settings.seed), "--spec-draft-n-max", str(draft_max), "--lookup-cache-dynamic", str(cache)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"llama-lookup failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    report = parse_llamacpp_output(done.stdout + done.stderr)
    return {"generated": report.tokens_generated, "seconds": report.generation_seconds}


def paired_ratio(numerator: list[float], denominator: list[float]) -> dict[str, float]:
    """Geometric mean of per-request ratios with a 95% confidence interval."""
    logs = [math.log(a / b) for a, b in zip(numerator, denominator) if a > 0 and b > 0]
    mean = statistics.fmean(logs)
    half = t_quantile(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0
    return {"ratio": math.exp(mean), "low": math.exp(mean - half), "high": math.exp(mean + half), "n": len(logs)}


def bench_workload(name: str, prompts: list[str], session: Any, base_settings: Any, temperature: float,
                   args: argparse.Namespace, target: Path) -> dict[str, Any]:
    sampling = dataclasses.replace(base_settings.sampling, temperature=temperature)
    settings = dataclasses.replace(base_settings, sampling=sampling, max_tokens=args.max_tokens, seed=args.seed)
    with tempfile.TemporaryDirectory() as folder:
        store = MemoryStore(Path(folder) / "memory")
        memory = SessionMemory(lambda: store)
        if name == "ordinary":
            for text in unrelated_corpus():
                store.add(session.target.tokenize(text, add_special=False), source="file", tag="corpus", compact=False)
            store.compact()
        lookup_cache = Path(folder) / "lookup-dynamic.bin"
        rows: list[dict[str, Any]] = []
        learned = {contender: LearnedLengths() for contender in CONTENDERS}
        for i, text in enumerate(prompts):
            tokens = session.chat_prompt_tokens([{"role": "user", "content": text}])
            row: dict[str, Any] = {}
            turn = i % len(CONTENDERS)
            for contender in CONTENDERS[turn:] + CONTENDERS[:turn]:  # rotate who runs first
                row[contender] = run_localspec(session, tokens, settings, memory, contender, learned[contender])
            if args.llamacpp_bin is not None:
                row["llama-lookup"] = run_lookup(args.llamacpp_bin, target, rendered_prompt(target, text), lookup_cache,
                                                 settings, args.lookup_draft_max, args.threads)
            memory.remember(tokens, row["hybrid + memory"]["tokens"], "run")
            identical = all(row[name]["tokens"] == row["target-only"]["tokens"] for name in CONTENDERS)
            rows.append({"identical": identical, **{k: {"generated": v["generated"], "seconds": v["seconds"]}
                                                   for k, v in row.items()}})
            print(f"  [{name} T={temperature:g}] {i + 1}/{len(prompts)} " + ", ".join(
                f"{k} {v['generated'] / v['seconds']:.1f}" for k, v in row.items() if v["seconds"] > 0) +
                ("" if identical else "  (texts differ)"), file=sys.stderr)
        use = dataclasses.asdict(memory.use)
        memory.close()
    return summarise(name, temperature, rows, use)


def summarise(name: str, temperature: float, rows: list[dict[str, Any]], use: dict[str, Any]) -> dict[str, Any]:
    names = [k for k in rows[0] if k != "identical"]
    speed = {k: [row[k]["generated"] / row[k]["seconds"] if row[k]["seconds"] else 0.0 for row in rows] for k in names}
    totals = {k: sum(row[k]["generated"] for row in rows) / sum(row[k]["seconds"] for row in rows) for k in names}
    ratios = {f"{a} / {b}": paired_ratio(speed[a], speed[b]) for a, b in RATIOS if a in speed and b in speed}
    lookups = use["lookups"]
    return {"workload": name, "temperature": temperature, "requests": len(rows),
            "identical": sum(row["identical"] for row in rows), "tokens_per_second": totals, "ratios": ratios,
            "memory": {**use, "ms_per_lookup": use["seconds"] / lookups * 1000 if lookups else 0.0,
                       "hit_rate": use["hits"] / lookups if lookups else 0.0,
                       "acceptance": use["accepted"] / use["proposed"] if use["proposed"] else 0.0}}


def print_summary(result: dict[str, Any]) -> None:
    print(f"\n{result['workload']}, T={result['temperature']:g}: {result['requests']} requests, "
          f"{result['identical']}/{result['requests']} identical to target-only")
    for name, value in result["tokens_per_second"].items():
        print(f"  {name:<36} {value:7.1f} tok/s")
    for name, ratio in result["ratios"].items():
        print(f"  {name:<36} {ratio['ratio']:.3f}x  [{ratio['low']:.3f}, {ratio['high']:.3f}]")
    memory = result["memory"]
    print(f"  memory: {memory['lookups']} lookups, hit rate {memory['hit_rate']:.1%}, drafts kept "
          f"{memory['acceptance']:.1%}, {memory['ms_per_lookup']:.3f} ms a lookup")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-p", "--profile", default=None, help="profile (default: the demo pair)")
    parser.add_argument("--workloads", default="extraction,code,ordinary")
    parser.add_argument("--requests", type=int, default=30, help="extraction requests (default 30)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperatures", default="0")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--llamacpp-bin", type=Path, default=None, help="llama.cpp's bin folder (adds llama-lookup)")
    parser.add_argument("--lookup-draft-max", type=int, default=8)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    plan = resolve(args.profile, {"speculative.strategy": "hybrid"})
    workloads = {"extraction": extraction_prompts(args.requests), "code": CODE_REQUESTS, "ordinary": ORDINARY_PROMPTS,
                 "repeat": ORDINARY_PROMPTS * 2}
    results = []
    with open_session(plan, remember_lengths=False, memory_owner=None) as session:
        for name in args.workloads.split(","):
            if name not in workloads:
                raise SystemExit(f"unknown workload {name!r} (choose from {', '.join(workloads)})")
            for temperature in (float(t) for t in args.temperatures.split(",")):
                result = bench_workload(name, workloads[name], session, plan.generation, temperature, args, plan.target.path)
                results.append(result)
                if not args.json:
                    print_summary(result)
        session.memory = None
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
