"""The `localspec` command line.

stdout carries only generated text (or the `--json` object), so output pipes
cleanly; progress, statistics and errors go to stderr. A user error is one line
and a non-zero exit code (2: bad input, 1: runtime failure), never a traceback.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from . import __version__
from .errors import InputError, LocalspecError
from .generate import GenerationSettings, SpeculativeParams
from .model import ModelSettings
from .resolve import resolve_models
from .sampling import SamplingParams
from .session import Session

stderr_console = Console(stderr=True, highlight=False)


class LocalspecGroup(click.Group):
    """Turns LocalspecError into a one-line message and its exit code."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except LocalspecError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("", err=True)
            sys.exit(130)
        except BrokenPipeError:
            sys.stderr.close()  # the reader went away (e.g. `| head`): stop quietly
            sys.exit(0)


@click.group(cls=LocalspecGroup)
@click.version_option(__version__, prog_name="localspec")
def main() -> None:
    """Faster local LLM generation with speculative decoding, the same output as the target model alone."""


def _write_stdout(text: str) -> None:
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.buffer.flush()


def _read_prompt(prompt: str | None) -> str:
    if prompt == "-" or (prompt is None and not sys.stdin.isatty()):
        prompt = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    if prompt is None:
        raise click.UsageError("give a PROMPT, or pipe one on stdin")
    if not prompt.strip():
        raise click.UsageError("the prompt is empty")
    return prompt


@contextmanager
def _status(enabled: bool) -> Iterator["_StatusLine"]:
    line = _StatusLine(enabled)
    try:
        yield line
    finally:
        line.stop()


class _StatusLine:
    """A rich status spinner and progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._status = None
        self._progress: Progress | None = None
        self._task = None

    def show(self, message: str) -> None:
        if not self.enabled:
            return
        if self._status is None:
            self._status = stderr_console.status(message)
            self._status.start()
        else:
            self._status.update(message)

    def derive_started(self) -> None:
        message = "preparing the demo target: SmolLM2-135M-Instruct F32 from its Q4_1 file (one time)"
        if not self.enabled:
            click.echo(f"localspec: {message}...", err=True)
            return
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=stderr_console
        )
        self._progress.start()
        self._task = self._progress.add_task(message, total=None)

    def derive_progress(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._status is not None:
            self._status.stop()
            self._status = None


@main.command()
@click.argument("prompt", required=False)
@click.option("--profile", "-p", envvar="LOCALSPEC_PROFILE", help="Profile to run (built in: demo).")
@click.option("--target", type=click.Path(dir_okay=True), help="Target model GGUF file.")
@click.option("--draft", type=click.Path(dir_okay=True), help="Draft model GGUF file (same vocabulary as the target).")
@click.option("--max-tokens", type=click.IntRange(min=0), default=512, show_default=True, help="Most tokens to generate.")
@click.option("--temperature", type=click.FloatRange(min=0), default=0.8, show_default=True, help="0 = greedy.")
@click.option("--top-k", type=click.IntRange(min=0), default=40, show_default=True, help="0 = off.")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=0.95, show_default=True, help="1 = off.")
@click.option("--min-p", type=click.FloatRange(0, 1), default=0.05, show_default=True, help="0 = off.")
@click.option("--seed", type=int, help="Random seed: same seed and settings, same output.")
@click.option("--stop", multiple=True, help="Stop when this text appears (repeatable).")
@click.option("--draft-max", type=click.IntRange(min=1), default=8, show_default=True, help="Most draft tokens per target pass.")
@click.option("--p-min", type=click.FloatRange(0, 1), default=0.0, show_default=True, help="Stop drafting below this draft confidence.")
@click.option("--no-speculative", is_flag=True, help="Target only: the baseline, one target pass per token.")
@click.option("--raw", is_flag=True, help="Plain completion: no chat template.")
@click.option("--system", help="System prompt (chat mode).")
@click.option("--n-ctx", type=click.IntRange(min=16), default=4096, show_default=True, help="Context size in tokens.")
@click.option("--n-gpu-layers", type=int, help="Layers to offload to the GPU (default: llama.cpp's).")
@click.option("--threads", type=click.IntRange(min=1), help="CPU threads (default: all cores).")
@click.option("--stats", is_flag=True, help="Print a one-line summary on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
@click.option("--verbose", is_flag=True, help="Show llama.cpp's own log on stderr.")
def run(
    prompt: str | None,
    profile: str | None,
    target: str | None,
    draft: str | None,
    max_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    min_p: float,
    seed: int | None,
    stop: tuple[str, ...],
    draft_max: int,
    p_min: float,
    no_speculative: bool,
    raw: bool,
    system: str | None,
    n_ctx: int,
    n_gpu_layers: int | None,
    threads: int | None,
    stats: bool,
    as_json: bool,
    verbose: bool,
) -> None:
    """Generate a completion for PROMPT (or stdin) and stream it to stdout.

    \b
    Examples:
      localspec run "Why is the sky blue?"
      echo "Write a haiku" | localspec run --temperature 0 --stats
      localspec run --target big.gguf --draft small.gguf --json "Hi"
    """
    text = _read_prompt(prompt)
    settings = GenerationSettings(
        sampling=SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p),
        speculative=SpeculativeParams(draft_max=draft_max, p_min=p_min),
        max_tokens=max_tokens,
        stop=stop,
        seed=seed,
    ).with_seed()
    model_settings = ModelSettings(n_gpu_layers=n_gpu_layers, n_threads=threads, n_ctx=n_ctx)

    with _status(stderr_console.is_terminal and not verbose) as status:
        choice = resolve_models(
            profile=profile,
            target=target,
            draft=draft,
            settings=model_settings,
            on_derive_start=status.derive_started,
            on_derive_progress=status.derive_progress,
        )
        status.stop()
        session = Session(choice.target, choice.draft, on_status=status.show, verbose=verbose)
    with session:
        if raw:
            prompt_tokens = session.raw_prompt_tokens(text)
        else:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
            prompt_tokens = session.chat_prompt_tokens(messages)
        generation = session.generation(prompt_tokens, settings, speculative=not no_speculative)
        for chunk in generation:
            if not as_json and chunk.text:
                _write_stdout(chunk.text)
        if as_json:
            report = {
                "text": generation.text,
                "tokens": generation.tokens,
                "stop_reason": generation.stop_reason,
                "model": {
                    "target": str(choice.target.path),
                    "draft": str(choice.draft.path) if choice.draft and not no_speculative else None,
                },
                "settings": {**generation.settings.to_dict(), "speculative_enabled": generation.drafter is not None},
                "stats": generation.stats.to_dict(),
            }
            _write_stdout(json.dumps(report, ensure_ascii=False) + "\n")
        elif generation.text and not generation.text.endswith("\n") and sys.stdout.isatty():
            _write_stdout("\n")
        if stats:
            click.echo(f"[{generation.stop_reason}] {generation.stats.summary()}", err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
