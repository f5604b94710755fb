"""The `localspec` command line: `run`, plus the `profile`, `models`, `draft` and `pull` commands.

stdout carries only generated text (or the `--json` object), so output pipes
cleanly; progress, statistics and errors go to stderr. A user error is one line
and a non-zero exit code (2: bad input, 1: runtime failure), never a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

import click

from . import __version__
from .cli_common import LocalspecGroup, read_prompt, status_line, stderr_console, write_stdout
from .resolve import DEFAULTS, RunPlan, plan_run, resolve_models
from .session import ModelSpec, Session


@click.group(cls=LocalspecGroup)
@click.version_option(__version__, prog_name="localspec")
def main() -> None:
    """Faster local LLM generation with speculative decoding, the same output as the target model alone."""


def run_flags(**options: Any) -> dict[str, Any]:
    """Command-line options as dotted profile keys (None: not given, the profile or default applies)."""
    flags: dict[str, Any] = {
        "target.path": options["target"],
        "draft.path": options["draft"],
        "sampling.max_tokens": options["max_tokens"],
        "sampling.temperature": options["temperature"],
        "sampling.top_k": options["top_k"],
        "sampling.top_p": options["top_p"],
        "sampling.min_p": options["min_p"],
        "sampling.seed": options["seed"],
        "sampling.stop": list(options["stop"]) or None,
        "speculative.draft_max": options["draft_max"],
        "speculative.p_min": options["p_min"],
        "chat.system_prompt": options["system"],
    }
    for role in ("target", "draft"):
        flags[f"{role}.n_ctx"] = options["n_ctx"]
        flags[f"{role}.n_gpu_layers"] = options["n_gpu_layers"]
        flags[f"{role}.n_threads"] = options["threads"]
    return flags


GENERATION_OPTIONS = [
    click.option("--profile", "-p", envvar="LOCALSPEC_PROFILE", help="Profile to run (default: the configured one, else demo)."),
    click.option("--target", type=click.Path(), help="Target model GGUF file (overrides the profile's)."),
    click.option("--draft", type=click.Path(), help="Draft model GGUF file, same vocabulary as the target."),
    click.option("--max-tokens", type=click.IntRange(min=0), help=f"Most tokens to generate [{DEFAULTS['sampling.max_tokens']}]."),
    click.option("--temperature", type=click.FloatRange(min=0), help=f"0 = greedy [{DEFAULTS['sampling.temperature']}]."),
    click.option("--top-k", type=click.IntRange(min=0), help=f"0 = off [{DEFAULTS['sampling.top_k']}]."),
    click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), help=f"1 = off [{DEFAULTS['sampling.top_p']}]."),
    click.option("--min-p", type=click.FloatRange(0, 1), help=f"0 = off [{DEFAULTS['sampling.min_p']}]."),
    click.option("--seed", type=click.IntRange(min=0), help="Random seed: same seed and settings, same output."),
    click.option("--stop", multiple=True, help="Stop when this text appears (repeatable)."),
    click.option("--draft-max", type=click.IntRange(1, 256), help=f"Most draft tokens per target pass [{DEFAULTS['speculative.draft_max']}]."),
    click.option("--p-min", type=click.FloatRange(0, 1), help=f"Stop drafting below this draft confidence [{DEFAULTS['speculative.p_min']}]."),
    click.option("--no-speculative", is_flag=True, help="Target only: the baseline, one target pass per token."),
    click.option("--system", help="System prompt."),
    click.option("--n-ctx", type=click.IntRange(min=16), help=f"Context size in tokens [{DEFAULTS['target.n_ctx']}]."),
    click.option("--n-gpu-layers", type=int, help="Layers to offload to the GPU (default: llama.cpp's)."),
    click.option("--threads", type=click.IntRange(min=1), help="CPU threads (default: all cores)."),
    click.option("--stats", is_flag=True, help="Print a one-line summary on stderr after each reply."),
    click.option("--verbose", is_flag=True, help="Show llama.cpp's own log on stderr."),
]


def generation_options(command: Callable) -> Callable:
    """The options `run` and `chat` share: profile, models, sampling, drafting, runtime."""
    for option in reversed(GENERATION_OPTIONS):
        command = option(command)
    return command


def open_session(plan: RunPlan, verbose: bool) -> tuple[Session, ModelSpec, ModelSpec | None]:
    """Resolve and load the plan's models, showing progress on stderr when it is a terminal."""
    with status_line(stderr_console.is_terminal and not verbose) as status:
        target, draft = resolve_models(plan, status.derive_started, status.advance)
        status.stop()
        session = Session(target, draft, on_status=status.show, verbose=verbose)
    return session, target, draft


@main.command()
@click.argument("prompt", required=False)
@generation_options
@click.option("--raw", is_flag=True, help="Plain completion: no chat template.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
def run(prompt: str | None, profile: str | None, no_speculative: bool, raw: bool, stats: bool, as_json: bool, verbose: bool, **options: Any) -> None:
    """Generate a completion for PROMPT (or stdin) and stream it to stdout.

    Settings come from the command line, else the profile, else built-in defaults.

    \b
    Examples:
      localspec run "Why is the sky blue?"
      echo "Write a haiku" | localspec run --temperature 0 --stats
      localspec run -p qwen2.5-7b --json "Hi"
      localspec run --target big.gguf --draft small.gguf "Hi"
    """
    text = read_prompt(prompt)
    plan = plan_run(profile, run_flags(**options))
    settings = plan.generation_settings().with_seed()

    session, target, draft = open_session(plan, verbose)
    with session:
        if raw:
            prompt_tokens = session.raw_prompt_tokens(text)
        else:
            system = plan.system_prompt
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
            prompt_tokens = session.chat_prompt_tokens(messages, plan.template)
        generation = session.generation(prompt_tokens, settings, speculative=not no_speculative)
        for chunk in generation:
            if not as_json and chunk.text:
                write_stdout(chunk.text)
        if as_json:
            report = {
                "text": generation.text,
                "tokens": generation.tokens,
                "stop_reason": generation.stop_reason,
                "model": {
                    "target": str(target.path),
                    "draft": str(draft.path) if draft and generation.drafter is not None else None,
                },
                "profile": plan.profile.name if plan.profile else None,
                "settings": {**generation.settings.to_dict(), "speculative_enabled": generation.drafter is not None},
                "stats": generation.stats.to_dict(),
            }
            write_stdout(json.dumps(report, ensure_ascii=False) + "\n")
        elif generation.text and not generation.text.endswith("\n") and sys.stdout.isatty():
            write_stdout("\n")
        if stats:
            click.echo(f"[{generation.stop_reason}] {generation.stats.summary()}", err=True)
        if draft is None and not no_speculative and not as_json:
            click.echo("localspec: no draft model, generated with the target alone", err=True)


def _register_subcommands() -> None:
    from .cli_bench import bench
    from .cli_chat import chat
    from .cli_models import draft_group, models_group, pull
    from .cli_profiles import profile_group

    main.add_command(chat)
    main.add_command(bench)
    main.add_command(profile_group)
    main.add_command(models_group)
    main.add_command(draft_group)
    main.add_command(pull)


_register_subcommands()

if __name__ == "__main__":  # pragma: no cover
    main()
