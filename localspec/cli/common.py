"""Pieces every command shares: the stderr console, error handling and progress display."""

from __future__ import annotations

import difflib
import importlib
import os
import signal
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import click

from ..app.web_origin import is_loopback_address
from ..config.files import read_piped, user_text
from ..errors import InputError, LocalspecError
from ..shown import shown_name
from ..textin import clean_input, decode_input
from .stdio import (
    EXIT_READER_GONE,
    finish_stdout,
    guard_standard_streams,
    reader_went_away,
    silence_stdout,
    stdout_error,
    stdout_is_closed,
)


def __getattr__(name: str) -> Any:
    """`stderr_console` and `stdout_console`, rich consoles made when a command first imports them: a one-shot
    `run` with its stderr piped needs none, and rich takes a noticeable share of its start-up to import."""
    if name not in ("stderr_console", "stdout_console"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _console(name)


_PIPED_WIDTH = 100_000  # (a table takes the width its cells need, no more)


def _console(name: str) -> Any:
    """The rich console `name` ("stderr_console" or "stdout_console"), made once (kept as a module global)."""
    if name not in globals():
        from rich.console import Console as RichConsole

        class Console(RichConsole):
            def on_broken_pipe(self) -> None:
                """The reader went away: end the command as `run` ends then (status 141), not with rich's 1."""
                self.quiet = True
                raise BrokenPipeError

        stream = sys.stderr if name == "stderr_console" else sys.stdout
        colours = "auto" if stream is not None and terminal_takes_colour(stream) else None
        if name == "stderr_console":
            globals()[name] = Console(stderr=True, highlight=False, color_system=colours)
        else:  # Piped, tables keep whole paths (rich would wrap at 80 columns) and lines are never broken.
            piped = sys.stdout is None or not sys.stdout.isatty()
            globals()[name] = Console(highlight=False, color_system=colours, width=_PIPED_WIDTH if piped else None,
                                      soft_wrap=piped)
    return globals()[name]


def print_table(table: Any) -> None:
    """A rich table on stdout; piped, without the spaces that pad each line out to the table's width (a reader
    splitting lines or fields gets no trailing blanks)."""
    console = _console("stdout_console")
    if sys.stdout is not None and sys.stdout.isatty():
        console.print(table)
        return
    with console.capture() as captured:
        console.print(table)
    console.out("\n".join(line.rstrip() for line in captured.get().splitlines()), highlight=False)


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (where spinners and progress bars show)."""
    return sys.stderr is not None and sys.stderr.isatty()


class LocalspecGroup(click.Group):
    """Every failure as one line on stderr and an exit code: 2 for bad input, 1 for runtime failures
    (141 where stdout's reader went away; see `stdio` for what closed or failing streams do)."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        guard_standard_streams()
        try:
            exit_code = self._exit_code(*args, **kwargs)
        except BrokenPipeError:  # (writing --help or --version)
            exit_code = EXIT_READER_GONE
        except LocalspecError as exc:  # (a closed or full stdout for --help or --version)
            _error(str(exc))
            exit_code = exc.exit_code
        sys.exit(finish_stdout(exit_code, _error))

    def _exit_code(self, *args: Any, **kwargs: Any) -> int:
        """Run the command; its exit status."""
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()  # `localspec` alone: the help text
            return exc.exit_code
        except click.NoSuchOption as exc:
            _error(_no_such_option_text(exc))
            return exc.exit_code
        except click.ClickException as exc:  # bad options or arguments: one line instead of usage + error
            _error(exc.format_message())
            return exc.exit_code
        except click.Abort:
            click.echo("", err=True)
            return 130
        except SystemExit as exc:  # (`invoke`'s exits, after their message; click's own after a gone reader)
            if reader_went_away():
                return EXIT_READER_GONE
            if isinstance(exc.code, str):
                _error(exc.code)
            return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        return result if isinstance(result, int) else 0

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except LocalspecError as exc:
            _error(str(exc))
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("", err=True)
            sys.exit(130)
        except BrokenPipeError:
            # The reader went away (e.g. `| head`): stop quietly, with the status a Unix tool killed by
            # SIGPIPE gives, so that `set -o pipefail` sees the output was cut short.
            silence_stdout()
            sys.exit(EXIT_READER_GONE)
        except OSError as exc:  # a file error no check foresaw (a name too long, a folder it may not search)
            _error(os_error_text(exc))
            sys.exit(1)


_NEAR_ENOUGH = 0.1  # how much less alike than the nearest a suggested option may be


def _no_such_option_text(exc: click.NoSuchOption) -> str:
    """click's line for an unknown option, suggesting only the options nearest to it (click lists any three
    alike enough, alphabetically: `--temprature` offered `--strategy` first), and saying how to give a value
    that starts with "-" (`history show -1`)."""
    name = exc.option_name
    if not exc.possibilities:
        if name[1:].replace(".", "", 1).isdigit():
            return f"{exc.message} (To give {name} as a value, put -- before it.)"
        return exc.message
    likeness = {option: difflib.SequenceMatcher(None, name, option).ratio() for option in exc.possibilities}
    nearest = [option for option in exc.possibilities if likeness[option] >= max(likeness.values()) - _NEAR_ENOUGH]
    nearest.sort(key=lambda option: -likeness[option])
    if len(nearest) == 1:
        return f"{exc.message} Did you mean {nearest[0]!r}?"
    return f"{exc.message} Did you mean {' or '.join(repr(option) for option in nearest)}?"


EXIT_TERMINATED = 128 + signal.SIGTERM


def ended_by_signals(ended_by: list[int]) -> None:
    """From now on SIGTERM and SIGHUP (a closed terminal, `kill`, `timeout`) raise KeyboardInterrupt as Ctrl-C
    does, so that what was generated is kept or written, after their number goes into `ended_by` (emptied
    first): the caller ends with 128 + it, as a process the signal ended would."""
    ended_by.clear()

    def on_signal(signum: int, frame: Any) -> None:
        ended_by.append(signum)
        raise KeyboardInterrupt

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):  # (no SIGHUP on Windows)
            signal.signal(getattr(signal, name), on_signal)


@contextmanager
def cleaned_up_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM (`kill`, a service manager) exits 143 by unwinding the stack, so the block's
    `finally` clauses run (a half-written temporary file is removed) instead of the process ending at once.
    Only for blocks that return to Python often: a handler waits while C code runs."""
    def exit_unwinding(signum: int, frame: Any) -> None:
        raise SystemExit(EXIT_TERMINATED)

    previous = signal.signal(signal.SIGTERM, exit_unwinding)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def say(message: str) -> None:
    """One line of news on stderr (what was saved, written, removed), what it quotes escaped as in `_error`."""
    click.echo(shown_name(message), err=True)


def _error(message: str) -> None:
    """The one error line: what it quotes (a file's name, a value) with control characters and line breaks
    escaped, so that it stays one line and an escape sequence in a name cannot recolour the terminal."""
    click.echo(f"error: {shown_name(message)}", err=True)


def os_error_text(exc: OSError) -> str:
    """An error from the operating system as one line: the file it concerns, then why."""
    return f"{exc.filename}: {exc.strerror or exc}" if exc.filename else str(exc.strerror or exc)


class LazyCommands(LocalspecGroup):
    """A group whose subcommands are imported on first use (click's lazy-loading pattern).

    `lazy_commands` maps a command name to "module:attribute"; `localspec
    profile list` then imports only what `profile list` needs.
    """

    def __init__(self, *args: Any, lazy_commands: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy_commands:
            module, attribute = self.lazy_commands[name].split(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, with the near command suggested for a mistyped one (click suggests only among its own)."""
        if args and not args[0].startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, args[0]) is None:
            near = difflib.get_close_matches(args[0], self.list_commands(ctx), n=1)
            if near:
                ctx.fail(f"No such command {args[0]!r}. Did you mean {near[0]!r}?")
        return super().resolve_command(ctx, args)


def write_stdout(text: str) -> None:
    """Write generated text to stdout as UTF-8 whatever the locale, and flush it.

    A reader that went away raises BrokenPipeError (the command then ends quietly, status 141);
    stdout closed (`>&-`) or failing (a full disk) is one LocalspecError.
    """
    if stdout_is_closed():
        raise stdout_error()
    try:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        silence_stdout()  # (what stayed buffered would fail again, with a traceback, when Python flushes at exit)
        raise stdout_error(exc) from None


def read_prompt(parts: tuple[str, ...]) -> str:
    """The prompt: the PROMPT argument; stdin's text where PROMPT is "-", or is absent and stdin is no terminal;
    or a PROMPT and stdin's text, a blank line between them, where "-" stands before or after it
    (`git diff | localspec run "Write a commit message for this:" -`)."""
    check_prompt_parts(parts)
    if prompt_reads_stdin(parts) and sys.stdin is None:  # `<&-`: Python starts with sys.stdin None
        raise click.UsageError("no prompt: give one as an argument or on stdin")
    if not parts and not prompt_reads_stdin(parts):
        raise click.UsageError("give a PROMPT, or pipe one on stdin")
    if parts in ((), (STDIN,)):
        prompt = _read_stdin()
    else:
        _warn_of_unread_stdin(parts)
        prompt = "\n\n".join(_stdin_part() if part == STDIN else clean_input(part, "the prompt") for part in parts)
    if not prompt.strip():
        raise click.UsageError("the prompt is empty")
    return prompt


def check_prompt_parts(parts: tuple[str, ...]) -> None:
    """A usage error unless `parts` is no PROMPT, one, or one and "-" (stdin's text beside it)."""
    if len(parts) > 2 or (len(parts) == 2 and parts.count(STDIN) != 1):
        raise click.UsageError(f"{len(parts)} prompts given: give one PROMPT (quote it), and - beside it to add "
                               "stdin's text")


def _stdin_part() -> str:
    """Stdin's text for the "-" beside a PROMPT: text it must hold."""
    text = _read_stdin()
    if not text.strip():
        raise click.UsageError("- adds stdin's text to the prompt, and stdin holds none")
    return text


def _warn_of_unread_stdin(parts: tuple[str, ...]) -> None:
    """A warning where a PROMPT is given alone and text waits in a pipe on stdin, which is then not read: left
    there, as a loop's `while read` needs it (`echo x | localspec run "y"` had dropped x without a word)."""
    if STDIN in parts or sys.stdin is None or not _piped_bytes_waiting():
        return
    click.echo('warning: the text piped on stdin is not read, as a PROMPT is given: put - beside the PROMPT to add it'
               ' (`... | localspec run "PROMPT" -`)', err=True)


def _piped_bytes_waiting() -> bool:
    """Whether stdin is a pipe holding bytes not yet read (asked without reading them; False where it cannot be
    asked)."""
    try:
        import fcntl
        import stat
        import struct
        import termios

        fd = sys.stdin.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        waiting = fcntl.ioctl(fd, termios.FIONREAD, struct.pack("i", 0))
        return struct.unpack("i", waiting)[0] > 0
    except (ImportError, OSError, ValueError, AttributeError):  # (Windows; a stdin without a descriptor)
        return False


STDIN = "-"  # a file option's name for stdin


def file_from_stdin(flag: str, taken_by: str | None) -> str:
    """The text of a file option given as `-`: stdin's, under a file's rules (UTF-8 without a byte order mark);
    a usage error where stdin is `taken_by` something else (None: it is free) or is a terminal."""
    if taken_by is not None:
        raise click.UsageError(f"{flag} - reads stdin, which {taken_by}")
    if sys.stdin is not None and sys.stdin.isatty():
        raise click.UsageError(f"{flag} - reads stdin, which is a terminal here: pipe the file in, or name it")
    try:
        data = stdin_bytes()
    except InputError as exc:
        raise InputError(f"{flag} -: {exc}") from None
    return user_text(data, f"{flag} - (stdin)")


def prompt_reads_stdin(parts: tuple[str, ...]) -> bool:
    """Whether `read_prompt` reads stdin: "-" among the prompt's parts, or no PROMPT and stdin is no terminal."""
    return STDIN in parts or (not parts and sys.stdin is not None and not sys.stdin.isatty())


def _read_stdin() -> str:
    """The prompt piped on stdin (`stdin_bytes`), decoded as `decode_bytes` does (UTF-16 read as such after its
    byte order mark, bytes that are not UTF-8 replaced with a warning)."""
    return decode_input(stdin_bytes(), "stdin")


def stdin_bytes() -> bytes:
    """What stdin holds (`read_piped`: bounded); InputError where there is none to read (`<&-`) or it cannot be
    read (opened for writing only)."""
    if sys.stdin is None:  # (`<&-`: Python starts with sys.stdin None)
        raise InputError("stdin is closed: nothing to read")
    try:
        return read_piped(sys.stdin.buffer, "stdin")
    except OSError as exc:
        raise InputError(f"cannot read stdin ({exc.strerror or exc})") from None


@contextmanager
def status_line(enabled: bool) -> Iterator["StatusLine"]:
    """A status line on stderr for the duration of a block."""
    line = StatusLine(enabled)
    try:
        yield line
    finally:
        line.stop()


def _shown_plain(message: str) -> str:
    """`message` (which holds file names) for rich to show as it is: control characters escaped (`shown_name`),
    brackets not read as markup."""
    from rich.markup import escape

    return escape(shown_name(message))


class StatusLine:
    """A rich status spinner and progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._status = None
        self._progress: Any = None  # a rich Progress while a bar shows
        self._task = None

    def show(self, message: str) -> None:
        """Show `message` beside a spinner (nothing when stderr is not a terminal); as plain text, the names in it
        escaped (`_shown_plain`)."""
        if not self.enabled:
            return
        message = _shown_plain(message)
        if self._status is None:
            self._status = _console("stderr_console").status(message)
            self._status.start()
        else:
            self._status.update(message)

    def start_progress(self, message: str) -> None:
        """A byte-count progress bar (a plain line when stderr is not a terminal), `message` as `show` shows it."""
        if not self.enabled:
            click.echo(f"localspec: {shown_name(message)}...", err=True)
            return
        message = _shown_plain(message)
        from rich.progress import (  # only for a bar
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.stop()
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
            console=_console("stderr_console"),
        )
        self._progress.start()
        self._task = self._progress.add_task(message, total=None)

    def advance(self, done: int, total: int | None) -> None:
        """Move the progress bar to `done` of `total` bytes."""
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._status is not None:
            self._status.stop()
            self._status = None


def terminal_takes_colour(stream: Any) -> bool:
    """Whether to colour what goes to `stream`: a terminal, unless NO_COLOR is set and not empty (no-color.org, as
    rich reads it), TERM=dumb (a terminal that shows escape sequences as they are) or the terminal's own
    description says it has no colours (TERM=vt100)."""
    if not stream.isatty() or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return _terminfo_colours(stream) != 0


def _terminfo_colours(stream: Any) -> int | None:
    """How many colours the terminal's terminfo entry gives (0: none), or None where that cannot be told (no
    curses, as on Windows; an unknown TERM): then colour is assumed, as terminals have it today."""
    try:
        import curses

        curses.setupterm(os.environ.get("TERM"), stream.fileno())
        colours = curses.tigetnum("colors")
    except Exception:  # (curses.error, an ImportError, a stream without a descriptor)
        return None
    return max(colours, 0) if colours != -2 else None  # (-1: no such capability, so no colour; -2: not a number)


def human_size(n_bytes: float) -> str:
    """1536 -> '1.5 KB'."""
    for unit in ("B", "KB", "MB", "GB"):
        if n_bytes < 1024 or unit == "GB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024
    return f"{n_bytes:.1f} TB"


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (127.0.0.0/8, ::1, localhost): what `serve` and `worker` warn about."""
    return host == "localhost" or is_loopback_address(host)
