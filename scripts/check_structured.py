#!/usr/bin/env python3
"""Every schema of the built-in structured set, asked for and checked: does every output validate?

    python scripts/check_structured.py                    # the demo pair, all 24 schemas (a few minutes)
    python scripts/check_structured.py --limit 2          # a quick check that it all runs
    python scripts/check_structured.py -p mine --temperatures 0 --json
    python scripts/check_structured.py --schemas my-schemas/ --doors api   # your own schemas instead

`--schemas DIR` checks the schemas in a folder instead of the built-in set:
every `NAME.json` (a JSON schema) with `NAME.txt` beside it (the prompt that
asks for it).

Each schema's prompt is answered at every temperature, speculative and
target-only, through two doors:

  api    the Python API: `Session.generation(..., grammar=...)` with the schema compiled
         by `engine.grammar.compile_format`, as `run --json-schema` does
  serve  `localspec serve` started on a free loopback port, asked with the official
         `openai` client: `response_format` {"type": "json_schema", ...}, and
         `"speculative": false` for target-only

An output counts as valid when it parses as JSON and validates against its schema
with `jsonschema` (Draft 2020-12, formats checked: date, email, ipv4, uuid, ...; numbers
read as decimals, so that a `multipleOf` of 0.01 takes 0.07, which floats refuse).
An output cut short (max_tokens: stop reason / finish_reason "length") counts as a
failure too. The report gives the fraction valid per door, temperature and mode,
every failure in one line, and how many speculative outputs were the target-only
ones token for token (all of them with coupled verification, the default). Exit
status 1 when any output fails, 0 when all validate.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.app.plan import resolve  # noqa: E402
from localspec.app.session import open_session  # noqa: E402
from localspec.app.structured_set import StructuredCase, structured_set  # noqa: E402
from localspec.engine.generation import StopReason  # noqa: E402
from localspec.engine.grammar import compile_format, parse_schema  # noqa: E402
from localspec.errors import LocalspecError  # noqa: E402
from localspec.settings import GenerationSettings  # noqa: E402

MODES = ("speculative", "target-only")
SERVER_START_TIMEOUT_S = 300


@dataclass
class Outcome:
    """One output, checked."""

    door: str  # "api" or "serve"
    schema: str
    temperature: float
    mode: str  # "speculative" or "target-only"
    valid: bool
    problem: str  # "" when valid
    text: str

    def line(self) -> str:
        """The output named, with its problem when there is one."""
        name = f"{self.door} {self.schema} T={self.temperature:g} {self.mode}"
        return f"{name}: {self.problem}" if self.problem else name


def _is_integer(checker: Any, instance: Any) -> bool:
    """JSON Schema's integers: any number without a fraction (`1.0` too), a decimal one included."""
    if isinstance(instance, Decimal):
        return instance == instance.to_integral_value()
    return _PLAIN_TYPES.is_type(instance, "integer")


# Numbers are read as decimals, schemas' and outputs' alike: `jsonschema` divides floats for `multipleOf`, and so
# refuses about one in nine prices to the cent (0.07 / 0.01 = 7.000000000000001), which decimals divide exactly.
_PLAIN_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER
_DecimalValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator,
                                                 type_checker=_PLAIN_TYPES.redefine("integer", _is_integer))


def check_output(text: str, cut_short: bool, schema: dict[str, Any]) -> str:
    """What is wrong with one output ("" when it parses and validates)."""
    if cut_short:
        return "cut short by max_tokens"
    try:
        value = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    validator = _DecimalValidator(json.loads(json.dumps(schema), parse_float=Decimal),
                                  format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    return "" if error is None else f"does not validate: {error.message} (at {error.json_path})"


def cases_from_folder(folder: Path) -> tuple[StructuredCase, ...]:
    """Every `NAME.json` schema in `folder` with the prompt in `NAME.txt` beside it (SystemExit, one line, when
    a schema has no prompt, a file cannot be read or is not a schema, or there is none)."""
    cases = []
    for schema_path in sorted(folder.glob("*.json")):
        prompt_path = schema_path.with_suffix(".txt")
        try:
            schema = parse_schema(schema_path.read_text(encoding="utf-8"), str(schema_path))
            prompt = prompt_path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(f"{getattr(exc, 'filename', None) or schema_path}: cannot read it ({exc.__class__.__name__})") from None
        except LocalspecError as exc:
            raise SystemExit(str(exc)) from None
        cases.append(StructuredCase(schema_path.stem, prompt, schema, example=None))
    if not cases:
        raise SystemExit(f"{folder}: no NAME.json schemas (each with its prompt in NAME.txt) in it")
    return tuple(cases)


def with_temperature(settings: GenerationSettings, temperature: float) -> GenerationSettings:
    return dataclasses.replace(settings, sampling=dataclasses.replace(settings.sampling, temperature=temperature))


def check_api(plan: Any, cases: tuple[StructuredCase, ...], temperatures: list[float]) -> Iterator[Outcome]:
    """Every case through `Session.generation`, as `run --json-schema` does."""
    with open_session(plan, remember_lengths=False) as session:
        for case in cases:
            grammar = compile_format(case.output_format()).grammar
            tokens = session.chat_prompt_tokens([{"role": "user", "content": case.prompt}])
            for temperature in temperatures:
                settings = with_temperature(plan.generation, temperature)
                for mode in MODES:
                    generation = session.generation(tokens, settings, speculative=mode == "speculative", grammar=grammar)
                    text = "".join(chunk.text for chunk in generation)
                    problem = check_output(text, generation.stop_reason != StopReason.EOS, case.schema)
                    if generation.stop_reason not in (StopReason.EOS, StopReason.LENGTH):
                        problem = problem or f"stopped by {generation.stop_reason}"
                    yield Outcome("api", case.name, temperature, mode, not problem, problem, text)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(args: argparse.Namespace, port: int) -> subprocess.Popen:
    """`localspec serve` with the same model choice, ready to answer (or an exit with its stderr)."""
    import httpx

    command = [sys.executable, "-m", "localspec", "serve", "--port", str(port), "--max-tokens", str(args.max_tokens),
               "--seed", str(args.seed), *model_flags(args)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"localspec serve exited ({server.returncode}): {server.stderr.read().strip()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.3)
    server.kill()
    raise SystemExit(f"localspec serve did not answer within {SERVER_START_TIMEOUT_S} s")


def check_serve(args: argparse.Namespace, cases: tuple[StructuredCase, ...], temperatures: list[float]) -> Iterator[Outcome]:
    """Every case through `serve` and the official `openai` client."""
    from openai import OpenAI

    port = free_port()
    server = start_server(args, port)
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        penalty = {} if args.repeat_penalty is None else {"repeat_penalty": args.repeat_penalty}
        for case in cases:
            response_format = {"type": "json_schema", "json_schema": {"name": case.name, "schema": case.schema, "strict": True}}
            for temperature in temperatures:
                for mode in MODES:
                    reply = client.chat.completions.create(
                        model=model, messages=[{"role": "user", "content": case.prompt}], temperature=temperature,
                        max_tokens=args.max_tokens, seed=args.seed, response_format=response_format,
                        extra_body={"speculative": mode == "speculative", **penalty},
                    )
                    choice = reply.choices[0]
                    text = choice.message.content or ""
                    problem = check_output(text, choice.finish_reason == "length", case.schema)
                    yield Outcome("serve", case.name, temperature, mode, not problem, problem, text)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def model_flags(args: argparse.Namespace) -> list[str]:
    """The model choice as localspec flags (none: the demo pair)."""
    flags = ["--profile", args.profile] if args.profile else []
    flags += ["--target", args.target] if args.target else []
    flags += ["--draft", args.draft] if args.draft else []
    return flags


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """Valid outputs overall and per door, temperature and mode; speculative texts equal to target-only per door."""
    groups: dict[str, list[Outcome]] = {}
    pairs: dict[tuple[str, str, float], dict[str, str]] = {}
    for outcome in outcomes:
        groups.setdefault(f"{outcome.door} T={outcome.temperature:g} {outcome.mode}", []).append(outcome)
        pairs.setdefault((outcome.door, outcome.schema, outcome.temperature), {})[outcome.mode] = outcome.text
    valid = sum(outcome.valid for outcome in outcomes)
    identical: dict[str, list[bool]] = {}
    for (door, _, _), texts in pairs.items():
        if len(texts) == len(MODES):
            identical.setdefault(door, []).append(texts["speculative"] == texts["target-only"])
    return {
        "valid": valid,
        "outputs": len(outcomes),
        "fraction_valid": valid / len(outcomes) if outcomes else None,
        "by_group": {name: f"{sum(o.valid for o in group)}/{len(group)}" for name, group in groups.items()},
        "speculative_identical_to_target_only": {door: f"{sum(same)}/{len(same)}" for door, same in identical.items()},
        "failures": [outcome.line() for outcome in outcomes if not outcome.valid],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-p", "--profile", help="A localspec profile (default: the demo pair).")
    parser.add_argument("--target", help="A target GGUF file instead.")
    parser.add_argument("--draft", help="A draft GGUF file instead.")
    parser.add_argument("--limit", type=int, help="Only the first N schemas of the set.")
    parser.add_argument("--schemas", type=Path, metavar="DIR",
                        help="Check the schemas in DIR (NAME.json, with its prompt in NAME.txt) instead of the built-in set.")
    parser.add_argument("--temperatures", default="0,0.8", help="Comma-separated (default 0,0.8).")
    parser.add_argument("--max-tokens", type=int, default=1024, help="Budget per output (default 1024: the set's largest answers, digit strings at their maximum length, take up to about 700 tokens).")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--repeat-penalty", type=float, help="A repetition penalty for every output (small models loop"
                        " inside strings without one; see README, How it works).")
    parser.add_argument("--doors", default="api,serve", help="Which of api,serve to go through (default both).")
    parser.add_argument("--json", action="store_true", help="One JSON object on stdout, outputs included.")
    args = parser.parse_args()
    temperatures = [float(t) for t in args.temperatures.split(",") if t.strip()]
    doors = {door.strip() for door in args.doors.split(",") if door.strip()}
    if not doors <= {"api", "serve"} or not doors:
        parser.error("--doors takes api, serve or both")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit takes a positive number")
    cases = cases_from_folder(args.schemas)[: args.limit] if args.schemas else structured_set(args.limit)

    outcomes: list[Outcome] = []
    runs = []
    if "api" in doors:
        flags = {"sampling.max_tokens": args.max_tokens, "sampling.seed": args.seed,
                 "sampling.repeat_penalty": args.repeat_penalty, "target.path": args.target, "draft.path": args.draft}
        runs.append(check_api(resolve(args.profile, flags), cases, temperatures))
    if "serve" in doors:
        runs.append(check_serve(args, cases, temperatures))
    for door_outcomes in runs:
        for outcome in door_outcomes:
            outcomes.append(outcome)
            print(f"{'ok ' if outcome.valid else 'BAD'} {outcome.line()}", file=sys.stderr)

    report = summary(outcomes)
    if args.json:
        print(json.dumps({**report, "outcomes": [asdict(outcome) for outcome in outcomes]}, indent=2, ensure_ascii=False))
    else:
        for name, count in report["by_group"].items():
            print(f"{name:<28} {count} valid")
        identical = ", ".join(f"{door} {count}" for door, count in report["speculative_identical_to_target_only"].items())
        print(f"valid: {report['valid']}/{report['outputs']} ({report['fraction_valid']:.1%});"
              f" speculative text identical to target-only: {identical}")
        for line in report["failures"]:
            print(f"FAILED {line}")
    return 0 if outcomes and report["valid"] == report["outputs"] else 1


if __name__ == "__main__":
    sys.exit(main())
