"""`localspec run`: one completion for a prompt (argument or stdin), streamed or as one JSON object."""

from __future__ import annotations

import json
import signal
import sys
from typing import Any, Callable

import click

from ..app.reasoning import Sorted, Splitter, sorted_whole
from ..app.session import Session
from ..app.thinking_first import BUDGET_UNHELD, ReplyForm, budget_held, reply_form
from ..engine.constraint import UnusableFormat
from ..engine.generation import StopReason
from ..engine.grammar import CompiledGrammar, OutputFormat
from ..errors import InputError
from ..textin import clean_text
from .common import check_prompt_parts, ended_by_signals, prompt_reads_stdin, read_prompt, write_stdout
from .loading import check_prompt_form, load_session, resolve_plan
from .options import (
    PROFILE_OPTION,
    SPECULATIVE_OPTION,
    STATS_OPTION,
    TEMPLATE_VARIABLES_OPTION,
    VERBOSE_OPTION,
    setting_flags,
    setting_options,
    template_variables_from_option,
)
from .output_format import (
    OUTPUT_FORMAT_OPTIONS,
    compile_output_format,
    cut_short_message,
    output_format_from_options,
)
from .stdio import stdout_error, stdout_is_closed
from .tool_options import TOOL_OPTIONS, ToolRun, json_with_calls, tool_run_from_options


class Shown:
    """A reply as `run` shows it: a thinking model's thought on stderr (dimmed on a terminal), apart from its answer
    on stdout, which a pipe then reads alone; every reply all answer where `splitter` is None."""

    def __init__(self, splitter: Callable[[], Splitter] | None) -> None:
        self.splitter = splitter
        self._sorting = splitter() if splitter is not None else None
        self.answered = ""  # the answer written so far
        self._thought_open = False  # the thought's last line is not ended yet

    def write(self, text: str) -> None:
        """Show the next piece of the output."""
        self._show(self._sorting.feed(text) if self._sorting is not None else Sorted(content=text))

    def finish(self) -> None:
        """Show what was held back (what may have been the start of a tag) once the output is over."""
        if self._sorting is not None:
            self._show(self._sorting.finish())
        if self._thought_open:
            click.echo("", err=True)

    def _show(self, text: Sorted) -> None:
        if text.reasoning:
            click.echo(click.style(text.reasoning, dim=True), err=True, nl=False)
            self._thought_open = not text.reasoning.endswith("\n")
        if text.content:
            if self._thought_open:  # (the answer on a line of its own)
                click.echo("", err=True)
                self._thought_open = False
            write_stdout(text.content)
            self.answered += text.content


def _reply_form(session: Session, prompt_tokens: list[int], raw: bool, tool_run: ToolRun | None,
                fmt: OutputFormat | None, compiled: CompiledGrammar | None, budget: int | None) -> ReplyForm:
    """The grammar the reply is held to, what sorts it into thought and answer as `run` shows it (a reply with
    tools is printed as its calls) and whether it may think first (`thinking_first.reply_form`; `budget`: the most
    tokens the thought may hold)."""
    grammar = compiled.grammar if compiled is not None else None
    if tool_run is not None:
        return ReplyForm(tool_run.grammar, None, tool_run.setup.splitter is not None)
    if raw:
        return ReplyForm(grammar, None, False)
    return reply_form(session.chat_template(), session.target, prompt_tokens, fmt, grammar, budget)


@click.command()
@click.argument("prompt", nargs=-1)
@PROFILE_OPTION
@setting_options()
@SPECULATIVE_OPTION
@click.option("--raw", is_flag=True, help="Plain completion: no chat template.")
@OUTPUT_FORMAT_OPTIONS
@TOOL_OPTIONS
@TEMPLATE_VARIABLES_OPTION
@STATS_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
@VERBOSE_OPTION
def run(prompt: tuple[str, ...], profile: str | None, no_speculative: bool, raw: bool, stats: bool, as_json: bool,
        template_kwargs: str | None, verbose: bool, **options: Any) -> None:
    """Generate a completion for PROMPT (or stdin; with - beside PROMPT, both) and stream it to stdout.

    Settings come from the command line, else the profile, else built-in defaults.

    \b
    Examples:
      localspec run "Why is the sky blue?"
      echo "Write a haiku" | localspec run --temperature 0 --stats
      git diff | localspec run "Write a commit message for this diff:" -
      localspec run -p qwen2.5-7b --json "Hi"
      localspec run --target big.gguf --draft small.gguf "Hi"
      localspec run --json-schema person.json "Extract the person from: ..."
      localspec run --tools tools.json --tool-choice required "Weather in Paris?"
    """
    check_prompt_parts(prompt)
    if stdout_is_closed():  # `>&-`: said before the models load
        raise stdout_error()
    ended_by: list[int] = []
    if as_json:  # (SIGTERM, SIGHUP: the result so far is written, as on Ctrl-C)
        ended_by_signals(ended_by)
    prompt_on_stdin = "the prompt is read from: give the prompt as an argument" if prompt_reads_stdin(prompt) else None
    output_format = output_format_from_options(options, stdin_taken=prompt_on_stdin)
    compiled = compile_output_format(output_format)
    tool_run = tool_run_from_options(options, raw or output_format is not None, stdin_taken=prompt_on_stdin)
    variables = template_variables_from_option(template_kwargs)
    if raw and variables:
        raise InputError("--chat-template-kwargs is for the chat template, which --raw leaves out")
    text = read_prompt(prompt)
    plan = resolve_plan(profile, setting_flags(options), verbose=verbose, speculative=not no_speculative)
    check_prompt_form(plan, raw)
    load_draft = not no_speculative and plan.generation.speculative.uses_draft_model
    # The contexts are sized for this one run once the prompt's length is known, and created where first needed.
    with load_session(plan, load_draft=load_draft, verbose=verbose, size_contexts_later=True,
                      prompt_cache=True) as session:
        session.template_variables = variables
        session.refuse_text_too_long([text])
        budget = plan.generation.thought_budget
        if tool_run is not None:
            messages = [*session.system_messages(), {"role": "user", "content": text}]
            prompt_tokens = tool_run.prompt_tokens(session, messages, budget)
        elif raw:
            prompt_tokens = session.raw_prompt_tokens(text)
        else:
            prompt_tokens = session.chat_prompt_tokens([*session.system_messages(), {"role": "user", "content": text}])
        grammar, splitter, thinks = _reply_form(session, prompt_tokens, raw, tool_run, output_format, compiled, budget)
        if thinks and budget is not None and not budget_held(session.chat_template(), session.target):
            click.echo(f"localspec: warning: the reasoning budget is not held: {BUDGET_UNHELD}", err=True)
        shown = Shown(splitter)
        settings = plan.generation.with_seed().with_budget(grammar is not None, thinking=thinks)
        session.reserve_context(len(prompt_tokens) + settings.max_tokens)
        try:
            generation = session.generation(prompt_tokens, settings, speculative=not no_speculative, grammar=grammar)
        except UnusableFormat as exc:  # (named as every other problem of the user's format is)
            raise exc if output_format is None else InputError(f"{output_format.origin or output_format.describe()}:"
                                                               f" {exc}") from None
        interrupted = False
        try:
            for chunk in generation:
                if not as_json and chunk.text and tool_run is None:
                    shown.write(chunk.text)
            if not as_json and tool_run is None:
                shown.finish()
        except KeyboardInterrupt:
            if not as_json and tool_run is None:  # (what was held back: the start of a tag, whitespace)
                shown.finish()
            if output_format is not None or tool_run is not None:  # never passed off as complete
                click.echo(f"\nlocalspec: {cut_short_message(StopReason.INTERRUPTED)}", err=True)
            if not as_json:
                raise
            # (--json: the result so far, `stop_reason` "interrupted", then the status Ctrl-C gives)
            session.recover_caches()
            interrupted = True
        if not interrupted:
            session.remember(generation, "run")
        session_placement = session.placement()
        context_size = session.target.n_ctx
    # (a reply that may call tools is complete only where it ended: text matches its grammar at any length)
    whole_match = generation.matches_format and tool_run is None
    if as_json:
        answer = sorted_whole(shown.splitter, generation.text)
        report = {
            "text": answer.content,
            "reasoning": answer.reasoning or None,  # (as `serve`'s reasoning_content)
            "tokens": generation.tokens,
            "stop_reason": generation.stop_reason,
            "model": {  # (a path's bytes that are not UTF-8 shown as U+FFFD: JSON is text)
                "target": clean_text(str(plan.target.path))[0],
                "draft": clean_text(str(plan.draft.path))[0] if load_draft and plan.draft and generation.drafter is not None
                else None,
            },
            "profile": plan.profile_name,
            "placement": session_placement,
            "settings": {**generation.settings.to_dict(), "speculative_enabled": generation.drafter is not None},
            "stats": generation.stats.to_dict(),
        }
        if output_format is not None:
            report["format"] = {**output_format.to_dict(), "warnings": list(compiled.warnings) if compiled else []}
        if output_format is not None or tool_run is not None:  # (with tools: null calls cut short, not text)
            report["complete"] = cut_short_message(generation.stop_reason, whole_match) is None
            report["matches_format"] = whole_match or report["complete"]
        if tool_run is not None:
            report["tool_warnings"] = list(tool_run.setup.warnings) if tool_run.setup is not None else []
            write_stdout(json_with_calls(report, tool_run.calls(generation)) + "\n")
        else:
            write_stdout(json.dumps(report, ensure_ascii=False) + "\n")
    elif tool_run is not None:
        tool_run.print_answer(generation)
    elif shown.answered and not shown.answered.endswith("\n") and sys.stdout.isatty():
        write_stdout("\n")
    if stats:
        settings = generation.settings
        click.echo(
            f"[{generation.stop_reason}] {generation.stats.summary()}, seed {settings.seed} ({settings.speculative.verify})",
            err=True,
        )
        for role, placement in session_placement.items():
            click.echo(f"{role}: {placement['summary']}", err=True)
    if generation.drafter is None and not no_speculative and not as_json:
        click.echo("localspec: no draft model, generated with the target alone", err=True)
    if interrupted:  # (Ctrl-C's status, or the signal's)
        sys.exit(128 + (ended_by[0] if ended_by else signal.SIGINT))
    cut_short = cut_short_message(generation.stop_reason, whole_match)
    if (output_format is not None or tool_run is not None) and cut_short:
        click.echo(f"localspec: {cut_short}", err=True)
        sys.exit(1)
    if generation.stop_reason == StopReason.LENGTH and not as_json:  # free text may stop anywhere: say where it did
        budget = generation.settings.max_tokens
        if len(generation.tokens) < budget:
            click.echo(f"localspec: stopped where the context ends ({context_size} tokens), before --max-tokens {budget}",
                       err=True)
        else:
            click.echo(f"localspec: stopped at --max-tokens {budget}", err=True)
