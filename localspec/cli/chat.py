"""`localspec chat`: a conversation in the terminal, on the same engine as `run`.

Each turn re-renders the whole conversation with the chat template; the KV
caches keep the longest common prefix, so earlier turns are not evaluated again.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

import click

from ..engine.generation import Chunk, Generation
from ..errors import LocalspecError
from .common import write_stdout
from .loading import load_session, resolve_plan
from .options import (
    PROFILE_OPTION,
    SPECULATIVE_OPTION,
    STATS_OPTION,
    VERBOSE_OPTION,
    setting_flags,
    setting_options,
)

HELP_TEXT = "commands: /reset (forget the conversation), /stats (last reply's statistics), /exit (or Ctrl-D)"


@click.command()
@PROFILE_OPTION
@setting_options()
@SPECULATIVE_OPTION
@STATS_OPTION
@VERBOSE_OPTION
@click.option("--highlight/--no-highlight", default=None, help="Colour text the draft proposed and the target kept [on in a terminal].")
def chat(profile: str | None, no_speculative: bool, stats: bool, verbose: bool, highlight: bool | None, **options: Any) -> None:
    """Chat with the profile's model in the terminal.

    \b
    Examples:
      localspec chat
      localspec chat -p qwen2.5-7b --system "Answer briefly."
    """
    plan = resolve_plan(profile, setting_flags(options), verbose=verbose)
    settings = plan.generation.with_seed()
    interactive = sys.stdin.isatty()
    highlight = sys.stdout.isatty() if highlight is None else highlight
    last: Generation | None = None
    if interactive:
        drafts = plan.draft is not None or not plan.generation.speculative.uses_draft_model
        mode = f"speculative, {plan.generation.speculative.strategy}" if drafts and not no_speculative else "target only"
        click.echo(f"localspec chat ({mode}); {HELP_TEXT}", err=True)
    load_draft = not no_speculative and plan.generation.speculative.uses_draft_model
    with load_session(plan, load_draft=load_draft, verbose=verbose) as session:
        system = session.system_messages()
        messages = list(system)
        while True:
            line = _read_line(interactive)
            if line is None or line.strip() in ("/exit", "/quit"):
                break
            text = line.strip()
            if not text:
                continue
            if text == "/reset":
                messages = list(system)
                click.echo("(conversation cleared)", err=True)
                continue
            if text == "/stats":
                click.echo(last.stats.summary() if last else "no reply yet", err=True)
                continue
            if text.startswith("/"):
                click.echo(f"unknown command {text.split()[0]}; {HELP_TEXT}", err=True)
                continue
            messages.append({"role": "user", "content": text})
            turn_settings = replace(settings, seed=settings.seed + len(messages))
            reply = None
            try:
                tokens = session.chat_prompt_tokens(messages)
                reply = session.generation(tokens, turn_settings, speculative=not no_speculative)
                for chunk in reply:
                    write_stdout(_render(chunk, highlight))
            except LocalspecError as exc:  # e.g. the conversation outgrew the context
                messages.pop()
                click.echo(f"error: {exc} (/reset starts a new conversation)", err=True)
                continue
            except KeyboardInterrupt:  # Ctrl-C stops the reply, not the chat
                session.reset_caches()
                click.echo("\n(reply interrupted)", err=True)
                if reply is None:
                    messages.pop()
                    continue
            write_stdout("\n")
            messages.append({"role": "assistant", "content": reply.text})
            last = reply
            if stats:
                click.echo(f"[{last.stop_reason}] {last.stats.summary()}", err=True)


def _read_line(interactive: bool) -> str | None:
    """One line of user input, or None at end of input."""
    if interactive:
        try:
            return input(click.style("> ", fg="green", bold=True))
        except EOFError:
            click.echo("", err=True)
            return None
    line = sys.stdin.readline()
    return line if line else None


def _render(chunk: Chunk, highlight: bool) -> str:
    if not highlight or not chunk.drafted_text:
        return chunk.text
    target_part = chunk.text[len(chunk.drafted_text) :]
    return click.style(chunk.drafted_text, fg="cyan") + target_part
