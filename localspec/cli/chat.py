"""`localspec chat`: a conversation in the terminal, on the same engine as `run`.

Each turn re-renders the whole conversation with the chat template; the KV
caches keep the longest common prefix, so earlier turns are not evaluated again.
Input has line editing and a history kept across sessions (prompt_toolkit)
when stdin is a terminal; conversations are stored as they go (`history`).
This module is the terminal (lines in, slash commands, printing); the turns
themselves, trimming and storing are `app/chat_session.ChatSession`.
"""

from __future__ import annotations

import array
import difflib
import io
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from ..app.chat_session import ChatSession, Reply
from ..app.conversation import Conversation, chat_keys, resolve_key
from ..app.history import HistoryStore, HistoryUnavailable
from ..app.plan import lacks_chat_template
from ..app.reasoning import Sorted
from ..app.thinking_first import template_thinks
from ..app.session import Session
from ..config.atomic import write_text_atomic
from ..config.files import MAX_PIPED_BYTES
from ..config.paths import check_folder_of, history_file, input_history_file, keep_private
from ..config.profiles import did_you_mean, typed_form
from ..engine.generation import Chunk, Generation
from ..engine.grammar import OutputFormat
from ..errors import InputError, LocalspecError
from ..settings import SEED_MAX, GenerationSettings
from ..shown import shown_plainly
from ..textin import clean_input, clean_text, decode_input, replaced_warning, stream_encoding, warn_replaced
from .common import ended_by_signals, os_error_text, say, terminal_takes_colour, write_stdout
from .loading import load_session, resolve_plan
from .options import (
    PROFILE_OPTION,
    SPECULATIVE_OPTION,
    TEMPLATE_VARIABLES_OPTION,
    VERBOSE_OPTION,
    WholeNumbers,
    setting_flags,
    setting_options,
    template_variables_from_option,
)
from .output_format import (
    FORMAT_COMMAND_USAGE,
    OUTPUT_FORMAT_OPTIONS,
    compile_output_format,
    cut_short_message,
    format_from_command,
    output_format_from_options,
)
from .stdio import stdout_error, stdout_is_closed
from .typed_paths import first_word, typed_path

if TYPE_CHECKING:
    from prompt_toolkit.history import FileHistory

COMMANDS = {
    "/help": "this list",
    "/set": "KEY VALUE: change a setting (/set alone lists them; /set stats on|off)",
    "/system": "TEXT: set the system prompt",
    "/speculative": "on|off: draft, or generate with the target alone",
    "/format": "json|off|schema FILE_OR_JSON|grammar FILE|regex PATTERN: hold replies to a format (alone: the current one)",
    "/stats": "the last reply's statistics and the session's totals",
    "/undo": "drop the last exchange",
    "/retry": "[SEED]: generate the last reply again (or the one a last message lacks), with the next seed or SEED",
    "/reset": "start a new conversation",
    "/save": "[--force] FILE: write the conversation as JSON (--force: replace a file it did not write)",
    "/load": "FILE: continue a conversation saved with /save",
    "/exit": "leave (or /quit, or Ctrl-D)",
}
TAKE_NO_ARGUMENT = frozenset({"/help", "/stats", "/undo", "/reset", "/exit", "/quit"})
COMMAND_ESCAPE = "//"  # a message starting with a slash: "//etc/hosts?" sends "/etc/hosts?"
MULTILINE = '"""'
_TOO_LONG = f"stdin: a message of more than {MAX_PIPED_BYTES >> 20} MiB, more than any context can hold"
# The signal that ended the chat (SIGTERM, SIGHUP: a closed terminal), if one did (`ended_by_signals`).
_terminated_by: list[int] = []


class Block(str):
    """A message typed between two MULTILINE lines: sent as it is, never taken for a command, whatever its first
    line starts with (a pasted path, `/etc/hosts looks like this:`)."""


@click.command()
@PROFILE_OPTION
@setting_options()
@SPECULATIVE_OPTION
@OUTPUT_FORMAT_OPTIONS
@click.option("--quiet", is_flag=True, help="No statistics line after each reply.")
@click.option("--stats", is_flag=True, hidden=True, help="Kept for older scripts: the statistics line is shown unless --quiet.")
@click.option("--highlight/--no-highlight", default=None, help="Colour text the draft proposed and the target kept [on in a terminal].")
@click.option("--continue", "continue_latest", is_flag=True, help="Resume the latest conversation.")
@click.option("--resume", "resume_id", type=WholeNumbers(), metavar="ID",
              help="Resume conversation ID (see `localspec history list`).")
@TEMPLATE_VARIABLES_OPTION
@VERBOSE_OPTION
def chat(
    profile: str | None, no_speculative: bool, quiet: bool, stats: bool, highlight: bool | None, continue_latest: bool,
    resume_id: int | None, template_kwargs: str | None, verbose: bool, **options: Any,
) -> None:
    """Chat with the profile's model in the terminal.

    Type /help for the commands. Paste several lines at once, or type \"\"\" on its
    own line to start and end a multi-line message.

    \b
    Examples:
      localspec chat
      localspec chat -p qwen2.5-7b --system "Answer briefly."
      localspec chat --continue
    """
    # Ctrl-C stops a reply, whatever SIGINT disposition this process inherited
    # (a shell's background job starts with it ignored, and Python then installs no handler).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ended_by_signals(_terminated_by)  # (a reply is kept as far as it got, as on Ctrl-C, then the chat ends)
    if sys.stdin is None:  # `<&-`: Python starts with sys.stdin None
        raise click.UsageError("no input: chat reads its messages on stdin, which is closed")
    if stdout_is_closed():  # `>&-`: said before the models load and a conversation is stored without its replies
        raise stdout_error()
    if continue_latest and resume_id is not None:
        raise click.UsageError("--continue resumes the latest conversation and --resume ID another: give one of them")
    output_format = output_format_from_options(options, stdin_taken="chat reads its messages from: give a file")
    compiled = compile_output_format(output_format)
    variables = template_variables_from_option(template_kwargs)
    flags = setting_flags(options)
    plan = resolve_plan(profile, flags, verbose=verbose, speculative=not no_speculative)
    if lacks_chat_template(plan):  # (every message would fail, each stored as an empty conversation)
        raise InputError(f"{plan.target.path.name} has no chat template, which chat needs: give it one (a"
                         " profile's [chat] template), or use plain completion (`run --raw`)")
    store = _open_store(resuming=continue_latest or resume_id is not None)
    conversation, conversation_id = _starting_conversation(plan.generation.with_seed(), plan.chat.system_prompt,
                                                           store, continue_latest, resume_id)
    # Resumed: the settings this command line gives win over those the conversation kept.
    given = {key: value for key, value in flags.items() if value is not None} if conversation_id is not None else {}
    kept_settings, kept_variables = conversation.settings, conversation.template_variables
    conversation.settings = conversation.settings.with_values(
        {key: value for key, value in given.items() if key in GenerationSettings.keys()})
    if template_kwargs is not None:  # (given: they win over those the conversation kept, as settings do)
        conversation.template_variables = variables
    colour = terminal_takes_colour(sys.stdout)
    load_draft = not no_speculative and plan.generation.speculative.uses_draft_model  # (/speculative on: lookups only)
    with load_session(plan, load_draft=load_draft, verbose=verbose, prompt_cache=True) as session:
        loop = ChatLoop(session, conversation, store, conversation_id, read_line=_line_reader(),
                        speculative=not no_speculative, stats=not quiet,
                        highlight=colour if highlight is None else highlight, colour=colour)
        loop.chat.whole_save_due = (conversation.settings != kept_settings  # stored with the next message
                                    or conversation.template_variables != kept_variables)
        loop.chat.set_format(output_format, compiled)
        if "chat.system_prompt" in given and given["chat.system_prompt"] != conversation.system:
            loop.chat.set_system(given["chat.system_prompt"], stored_with_next_message=True)
        loop.run()
    if store is not None:
        store.close()
    if _terminated_by:  # (as a process ended by the signal says: 128 + its number)
        raise SystemExit(128 + _terminated_by[0])
    if loop.failures and not sys.stdin.isatty():  # (a script's input: it learns that something failed)
        raise SystemExit(1)


class ChatLoop:
    """The terminal side of a chat: reads a line, runs a command or asks for a reply and prints it, until /exit."""

    def __init__(
        self, session: Session, conversation: Conversation, store: HistoryStore | None, conversation_id: int | None,
        *, read_line: Callable[[], str | object | None], speculative: bool, stats: bool, highlight: bool, colour: bool,
    ) -> None:
        self.chat = ChatSession(session, conversation, store, conversation_id, speculative=speculative, warn=self.say)
        self.read_line = read_line
        self.show_stats = stats
        self.highlight = highlight
        self.colour = colour
        # What /save wrote in this chat, as it left it: saved again without --force while no one else changed it.
        self.saved_files: dict[Path, tuple[int, int, int]] = {}
        self.failures = 0  # messages and commands that failed (a script piping into chat exits 1 if any did)
        self.thought_open = False  # a thinking model's thought was shown, its answer not yet

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        if sys.stdin.isatty():
            chat = self.chat
            mode = f"speculative, {chat.conversation.settings.speculative.strategy}" if chat.speculative else "target only"
            resumed = f", conversation {chat.conversation_id} resumed" if chat.conversation.messages else ""
            click.echo(f"localspec chat ({mode}{resumed}); /help for commands, /exit or Ctrl-D to leave", err=True)
        while not _terminated_by:
            try:
                line = self.read_line()
            except KeyboardInterrupt:
                if _terminated_by:
                    return
                raise
            if line is None:
                return
            if line is UNCLOSED:
                self.fail(f"error: the multi-line message was not sent: no closing {MULTILINE}")
                return
            text = line.strip()
            if not text:
                continue
            message = line.strip("\n")
            if isinstance(line, Block):
                pass
            elif text.startswith(COMMAND_ESCAPE):
                message = message.replace(COMMAND_ESCAPE, "/", 1)
            elif text.startswith("/") and "\n" not in text:  # (a pasted text of several lines is a message)
                if not self.command(text):
                    return
                continue
            self.show(self.chat.ask(message, self._stream, self.say))

    def command(self, text: str) -> bool:
        """Run a slash command; False means leave the chat."""
        name, argument = first_word(text)  # (a tab after the name separates it too)
        argument = argument.strip()
        if name in TAKE_NO_ARGUMENT and argument:  # ("/reset the story" was likely meant as a message)
            self.fail(f"error: {name} takes nothing after it (a message that starts with / is sent as"
                      f" {COMMAND_ESCAPE}...)")
            return True
        if name in ("/exit", "/quit"):
            return False
        handler = getattr(self, f"cmd_{name[1:]}", None)
        if name not in COMMANDS or handler is None:
            near = difflib.get_close_matches(name.lower(), list(COMMANDS), n=1)  # (/HELP: /help)
            self.fail(f"unknown command {name}" + (f": did you mean {near[0]}?" if near else "")
                      + f" (/help lists them; a message that starts with / is sent as {COMMAND_ESCAPE}...)")
            return True
        try:
            handler(argument)
        except KeyboardInterrupt:  # (a long /load, say): the command is cancelled, not the chat
            if _terminated_by:
                return False
            self.say(f"({name} interrupted)")
        except InputError as exc:
            self.fail(f"error: {exc}")
        except OSError as exc:  # a path no check foresaw (a name too long, a folder it may not search): the chat goes on
            self.fail(f"error: {os_error_text(exc)}")
        return True

    # -- replies -------------------------------------------------------------------------

    def _stream(self, chunk: Chunk) -> None:
        sorting = self.chat.sorting
        if sorting is None:
            self._write(self._render(chunk))
            return
        text = sorting.feed(chunk.text)
        if text.content == chunk.text:  # (all answer: drafted text coloured as ever)
            self._show_sorted(Sorted(), self._render(chunk))
        else:
            self._show_sorted(text)

    def _show_sorted(self, text: Sorted, rendered: str | None = None) -> None:
        """A thinking model's thought dimmed, without its tags, and its answer on a line of its own after it
        (`rendered`: the answer as `_render` shows it)."""
        if text.reasoning:
            self._write(self._dim(shown_plainly(text.reasoning)))
            self.thought_open = True
        answer = rendered if rendered is not None else shown_plainly(text.content)
        if answer and self.thought_open:
            self._write("\n\n")
            self.thought_open = False
        if answer:
            self._write(answer)

    def _write(self, text: str) -> None:
        """Write reply text; stdout closed or failing (a full disk) ends the chat with one line, not every turn."""
        try:
            write_stdout(text)
        except LocalspecError as exc:
            self.say(f"error: {exc}")
            raise SystemExit(1) from None

    def show(self, reply: Reply) -> None:
        """End a streamed reply: its newline, then on stderr an error, an interruption or the statistics line."""
        sorting, self.chat.sorting = self.chat.sorting, None
        if reply.interrupted and reply.error is not None:  # (Ctrl-C before the reply began: asked for, no failure)
            self.say(f"({reply.error})")
            return
        if reply.error is not None:
            self.thought_open = False
            self.fail(f"error: {reply.error}")
            return
        if sorting is not None:  # (what was held back: the start of a tag, whitespace)
            self._show_sorted(sorting.finish())
        self.thought_open = False
        self._write("\n")
        if reply.interrupted:
            self.say("(reply interrupted; kept as far as it got)")
        elif self.chat.output_format is not None and reply.generation is not None:
            cut_short = cut_short_message(reply.generation.stop_reason, reply.generation.matches_format)
            if cut_short:
                self.fail(f"(reply {cut_short})")  # (a failure, as `run` exits non-zero for it)
        if reply.generation is not None and self.show_stats:
            self.say(self._dim(f"[{reply.generation.stop_reason}] {reply.generation.stats.summary()}, {_seed_text(reply.generation)}"))

    def _render(self, chunk: Chunk) -> str:
        """A chunk of reply as shown: the drafted part in cyan, control characters as escapes (a model's escape
        sequence would retitle or recolour the terminal; the history keeps the text as generated)."""
        if not self.highlight or not chunk.drafted_text:
            return shown_plainly(chunk.text)
        drafted = click.style(shown_plainly(chunk.drafted_text), fg="cyan")
        return drafted + shown_plainly(chunk.text[len(chunk.drafted_text):])

    # -- commands ------------------------------------------------------------------------

    def cmd_help(self, argument: str) -> None:
        for name, what in COMMANDS.items():
            self.say(f"  {name:<13} {what}")
        self.say(f"  a message that starts with a slash: type it as {COMMAND_ESCAPE}... (one slash is sent)")

    def cmd_set(self, argument: str) -> None:
        if not argument:
            settings = self.chat.conversation.settings
            values = settings.to_values()
            width = max(len(key.rpartition(".")[2]) for key in chat_keys())
            for key in chat_keys():
                shown = typed_form(values.get(key))
                if key == "sampling.max_tokens" and settings.max_tokens is None:  # the default, which the format sets
                    structured = self.chat.grammar is not None
                    thinks = template_thinks(self.chat.session.chat_template())
                    what = "a thinking model's reply" if thinks else "a format" if structured else "free text"
                    shown = f"{settings.budget(structured, thinks)} (the default for {what})"
                self.say(f"  {key.rpartition('.')[2]:<{width}} {shown}")
            self.say(f"  {'stats':<{width}} {'on' if self.show_stats else 'off'}")
            self.say(f"  {'format':<{width}} {_format_text(self.chat.output_format)} (/format)")
            return
        key, value = first_word(argument)
        if key == "stats":
            if value.strip() not in ("on", "off"):
                raise InputError("/set stats on|off")
            self.show_stats = value.strip() == "on"
            return
        if not value.strip():
            raise InputError(f"/set {resolve_key(key).rpartition('.')[2]} VALUE")  # (an unknown name said so first)
        dotted = self.chat.set(key, value)
        self.say(f"{dotted} = {typed_form(self.chat.conversation.settings.to_values()[dotted])}")
        self._say_if_target_only()

    def _say_if_target_only(self) -> None:
        if self.chat.speculative and not self.chat.can_speculate():
            self.say("(no draft model is loaded: replies are target-only until /set strategy ngram)")

    def cmd_system(self, argument: str) -> None:
        self.chat.set_system(argument or None)
        self.say("(system prompt " + ("set)" if argument else "cleared)"))

    def cmd_speculative(self, argument: str) -> None:
        if argument not in ("on", "off"):
            raise InputError("/speculative on|off")
        self.chat.set_speculative(argument == "on")
        self.say(f"(speculative decoding {argument})")

    def cmd_format(self, argument: str) -> None:
        if not argument:
            self.say(f"(format: {_format_text(self.chat.output_format)}; change it with {FORMAT_COMMAND_USAGE})")
            return
        fmt = format_from_command(argument)
        self.chat.set_format(fmt, compile_output_format(fmt, self.say))
        self.say(f"(format: {_format_text(fmt)})")

    def cmd_stats(self, argument: str) -> None:
        if self.chat.last is None:
            self.say("no reply yet (or since the last /undo)")
            return
        stats = self.chat.last.stats
        self.say(f"last reply: {stats.summary()}, {_seed_text(self.chat.last)}")
        self.say(f"  prompt tokens evaluated this turn: {stats.prompt_tokens_evaluated} of {stats.prompt_tokens} in the history")
        if stats.acceptance_rate is not None:
            per_position = " ".join(f"{rate:.0%}" for rate in stats.per_position_acceptance)
            self.say(f"  mean accepted length {stats.mean_accepted_length:.2f}; acceptance by draft position: {per_position}")
        self.say(f"session: {self.chat.totals.summary()}")
        for role, where in self.chat.session.placement().items():
            self.say(f"{role}: {where['summary']}")

    def cmd_undo(self, argument: str) -> None:
        self.say("(last exchange dropped)" if self.chat.undo() else "(nothing to undo)")

    def cmd_retry(self, argument: str) -> None:
        # The next seed: at temperature > 0 another sample, at 0 the same reply. A reply's own seed, after
        # `/speculative off`, shows the target alone writing the same text.
        seed = _retry_seed(argument)
        reply = self.chat.retry(self._stream, self.say, seed)
        if reply is None:
            self.say("(no reply to retry)")
            return
        self.show(reply)

    def cmd_reset(self, argument: str) -> None:
        self.chat.reset()
        self.say("(new conversation)")

    def cmd_save(self, argument: str) -> None:
        force, name = _force_flag(argument)
        if not name:
            raise InputError("/save [--force] FILE")
        if name.rstrip("'\"").endswith(("/", os.sep)):
            raise InputError(f"{name}: names a folder; /save writes a file")
        path = typed_path(name)
        check_folder_of(path, str(path))
        if path.is_file() and not force:
            written = self.saved_files.get(path.resolve())
            if written is None:
                raise InputError(f"{path} exists: /save --force {name} replaces it")
            if written != _file_identity(path):
                raise InputError(f"{path} changed since this chat saved it: /save --force {name} replaces it")
        try:
            write_text_atomic(path, json.dumps(self.chat.conversation.to_json(), indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise InputError(f"{path}: cannot write ({exc.strerror})") from None
        self.saved_files[path.resolve()] = _file_identity(path)
        self.say(f"(saved to {path})")

    def cmd_load(self, argument: str) -> None:
        if not argument:
            raise InputError("/load FILE")
        path = typed_path(argument)
        conversation, replaced = Conversation.read(path, self.chat.conversation.settings)
        # (as its settings lie over the chat's, a file that kept no template variables goes on with the chat's)
        conversation.template_variables = conversation.template_variables or self.chat.conversation.template_variables
        if replaced:
            warn_replaced(str(path))
        for key in conversation.ignored_settings:
            self.say(f"note: {path}: setting {key!r} is not known here: ignored"
                     + did_you_mean(key, list(GenerationSettings.keys())))
        self.chat.load(conversation)
        count = len(conversation.messages)
        systems = conversation.system_messages_read
        system = ("" if not systems else ", and its system prompt" if systems == 1
                  else f", and its {systems} system messages joined into one system prompt")
        self.say(f"(loaded {count} message{'' if count == 1 else 's'} from {path}{system})")
        self._say_if_target_only()  # (its strategy may want the draft model this chat has not loaded)

    # -- output --------------------------------------------------------------------------

    def say(self, text: str) -> None:
        click.echo(text, err=True)

    def fail(self, line: str) -> None:
        """Say on stderr what failed (what it quotes of the typed line with control characters escaped), and
        count it."""
        self.failures += 1
        self.say(shown_plainly(line))

    def _dim(self, text: str) -> str:
        return click.style(text, dim=True) if self.colour else text


def _file_identity(path: Path) -> tuple[int, int, int]:
    """What tells a file from its later replacement or edit: its inode, modification time and size."""
    status = path.stat()
    return status.st_ino, status.st_mtime_ns, status.st_size


def _force_flag(argument: str) -> tuple[bool, str]:
    """(--force given, the rest) of a command's argument."""
    first, rest = first_word(argument)
    return (True, rest.strip()) if first == "--force" else (False, argument)


def _open_store(resuming: bool) -> HistoryStore | None:
    """The chat history; one that cannot be opened is a warning (the chat runs unsaved), or, for a chat that
    resumes from it, the one error (exit 1, as `history` commands say it)."""
    try:
        return HistoryStore(history_file())
    except HistoryUnavailable as exc:
        if resuming:
            raise LocalspecError(f"{exc}: there is nothing to resume") from None
        say(f"warning: {exc}; this chat is not saved")
        return None


def _starting_conversation(
    settings: GenerationSettings, system: str | None, store: HistoryStore | None, continue_latest: bool, resume_id: int | None
) -> tuple[Conversation, int | None]:
    if not (continue_latest or resume_id is not None):
        return Conversation(settings, system), None
    assert store is not None  # (resuming: `_open_store` raised instead)
    try:
        conversation_id = resume_id if resume_id is not None else store.latest()
        data = store.get(conversation_id) if conversation_id is not None else None
    except HistoryUnavailable as exc:  # (as `history show` says it: exit 1)
        raise LocalspecError(str(exc)) from None
    if data is None:
        raise InputError("no conversation to continue yet" if resume_id is None else f"no conversation {resume_id}")
    try:
        return Conversation.from_json(data, settings), conversation_id
    except InputError as exc:  # a stored conversation edited by hand, or damaged (stored data: exit 1)
        raise LocalspecError(f"chat history {store.path}: conversation {conversation_id} is damaged ({exc})") from None


DROPPED = object()  # Ctrl-C within a multi-line message: the message is dropped
UNCLOSED = object()  # the end of input within a multi-line message: the message is not sent


def _wide_line(stream: io.TextIOWrapper) -> str | None:
    """The next line of stdin read as UTF-16 or UTF-32 (`stream`, which replaces what is not); None at its end."""
    line = stream.readline(MAX_PIPED_BYTES + 1)
    if len(line) > MAX_PIPED_BYTES:
        raise InputError(_TOO_LONG)
    if "\ufffd" in line:  # (as a line of UTF-8 with a stray byte is said to be)
        click.echo(replaced_warning("a line of input", stream.encoding.upper()), err=True)
    return clean_input(line, "a line of input").rstrip("\r\n") if line else None


def _line_reader() -> Callable[[], str | object | None]:
    """One message at a time: prompt_toolkit on a terminal (editing, history), plain lines otherwise.

    A line holding only \"\"\" starts a multi-line message that ends at the next such line; Ctrl-C within it
    drops it, and the end of input within it gives UNCLOSED (the message is not sent). On a terminal the whole
    block goes into the input history as one entry, quotes included, which Up brings back and Enter sends as the
    same block.
    """
    remember: Callable[[str], None] | None = None  # adds a closed block to the input history (a terminal's)
    if sys.stdin.isatty():
        from prompt_toolkit import PromptSession

        history = _input_history()
        prompt = PromptSession(history=history)
        block_prompt = PromptSession()  # (its lines are not kept one by one: the block is, once it is closed)
        remember = history.append_string

        def read_one(in_block: bool = False) -> Any:
            while True:
                if _end_of_input_typed_ahead():  # Ctrl-D typed while a reply was written, as a shell takes it
                    return None
                try:
                    line = (block_prompt if in_block else prompt).prompt("... " if in_block else "> ")
                    if history.problem:  # said once, after the line, when prompt_toolkit no longer draws
                        click.echo(history.problem, err=True)
                        history.problem = None
                    return clean_input(line, "the typed line")
                except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line, within a block drops the block
                    if _terminated_by:
                        return None
                    if in_block:
                        return DROPPED
                    continue
                except EOFError:
                    return None
    else:
        wide_text: io.TextIOWrapper | None = None  # stdin read as UTF-16 or UTF-32, after a byte order mark
        first_line = True

        def read_one(in_block: bool = False) -> Any:
            nonlocal first_line, wide_text
            if first_line:  # (UTF-16 read as bytes: its zero bytes passed for text, every other one replaced)
                first_line = False
                encoding = stream_encoding(sys.stdin.buffer)
                if encoding != "utf-8":
                    wide_text = io.TextIOWrapper(sys.stdin.buffer, encoding=encoding, errors="replace", newline="\n")
            if wide_text is not None:
                return _wide_line(wide_text)
            line = sys.stdin.buffer.readline(MAX_PIPED_BYTES + 1)  # bytes: invalid UTF-8 is replaced, not a crash
            if len(line) > MAX_PIPED_BYTES:  # (`chat < /dev/zero` filled the memory)
                raise InputError(_TOO_LONG)
            return decode_input(line, "a line of input").rstrip("\r\n") if line else None

    def read_message() -> str | None:
        while True:
            line = read_one()
            if line is not None and _is_whole_block(line):  # (brought back from the history, or pasted whole)
                return Block(line.strip()[len(MULTILINE):-len(MULTILINE)].strip("\n"))
            if line is None or line.strip() != MULTILINE:
                return line
            lines: list[str] = []
            size = 0
            while (line := read_one(in_block=True)) is not None and line is not DROPPED and line.strip() != MULTILINE:
                lines.append(line)
                size += len(line)
                if size > MAX_PIPED_BYTES:  # (`yes` after an opening quote: lines for ever)
                    raise InputError(_TOO_LONG)
            if line is None:
                return UNCLOSED
            if line is DROPPED:
                click.echo("(multi-line message dropped)", err=True)
                continue
            if remember is not None:
                remember("\n".join([MULTILINE, *lines, MULTILINE]))
            return Block("\n".join(lines))

    return read_message


def _is_whole_block(text: str) -> bool:
    """Whether `text` is a whole multi-line message, opening and closing quotes included."""
    stripped = text.strip()
    return stripped.startswith(MULTILINE + "\n") and stripped.endswith("\n" + MULTILINE)


def _end_of_input_typed_ahead() -> bool:
    """Whether Ctrl-D was typed on an empty line while the terminal was not read (a reply being written); it is
    then consumed. The terminal holds it as a line of no bytes: stdin is readable with nothing to read. (A line
    typed ahead is left where it is: the prompt reads it.)"""
    import fcntl
    import select
    import termios

    descriptor = sys.stdin.fileno()
    try:
        if not select.select([descriptor], [], [], 0)[0]:
            return False
        pending = array.array("i", [0])
        fcntl.ioctl(descriptor, termios.FIONREAD, pending)
        return pending[0] == 0 and os.read(descriptor, 1) == b""
    except OSError:
        return False


def _input_history() -> "FileHistory":
    """The lines typed in earlier chats (Up arrow), kept in a file; in memory alone once the file cannot be written."""
    from prompt_toolkit.history import FileHistory

    class InputHistory(FileHistory):
        """A FileHistory that, when its file cannot be written (its folder removed mid-chat), keeps lines in
        memory and leaves one warning in `problem` for the caller to show (printing inside prompt_toolkit garbles
        the line being edited)."""

        problem: str | None = None
        in_memory = False

        def append_string(self, string: str) -> None:
            if string.strip() == MULTILINE:  # a block's opening line: the block is kept whole once it is closed
                return
            super().append_string(string)

        def store_string(self, string: str) -> None:
            if self.in_memory:
                return
            try:
                super().store_string(clean_text(string)[0])
            except OSError as exc:
                self.in_memory = True
                self.problem = f"warning: {_input_history_problem(exc)}; lines typed from now on are remembered for this chat only"

    path = input_history_file()
    history = InputHistory(str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        keep_private(path)  # the lines typed
    except OSError as exc:
        history.in_memory = True
        click.echo(f"warning: the input history folder {path.parent} cannot be created ({exc.strerror or exc}); "
                   "typed lines are remembered for this chat only", err=True)
    return history


def _input_history_problem(exc: OSError) -> str:
    path = input_history_file()
    if not path.parent.is_dir():
        return f"the input history cannot be written: its folder {path.parent} is gone"
    return f"the input history {path} cannot be written ({exc.strerror or exc})"


def _format_text(fmt: OutputFormat | None) -> str:
    """The current format for /format and /set: 'off', 'JSON', 'JSON schema person.json', ..."""
    return "off" if fmt is None else fmt.describe()


def _retry_seed(argument: str) -> int | None:
    """The seed `/retry SEED` asks for (None: none given); InputError for anything but a seed."""
    if not argument:
        return None
    if not (argument.isascii() and argument.isdigit() and len(argument) <= 19 and int(argument) <= SEED_MAX):
        raise InputError(f"/retry [SEED]: {argument!r} is not a seed (a whole number from 0 to {SEED_MAX})")
    return int(argument)


def _seed_text(generation: Generation) -> str:
    """The reply's own seed and verification mode: `/retry N` regenerates it, and `run --seed N` reproduces
    it with the same settings on the same rendered conversation (`chat --seed N` for a chat's first reply)."""
    return f"seed {generation.settings.seed} ({generation.settings.speculative.verify})"
