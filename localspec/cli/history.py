"""`localspec history list|show|remove`: the conversations `chat` stored."""

from __future__ import annotations

import json
from datetime import datetime

import click
from rich.table import Table
from rich.text import Text

from ..app.conversation import Conversation
from ..app.history import HistoryStore, HistoryUnavailable
from ..app.memory import forget_conversation
from ..app.prompt_cache import forget_prompts
from ..config.paths import history_file
from ..settings import GenerationSettings
from ..errors import InputError, LocalspecError
from ..shown import shown_plainly
from .common import os_error_text, print_table, stdout_console
from .options import WholeNumbers


def _store() -> HistoryStore:
    try:
        return HistoryStore(history_file())
    except HistoryUnavailable as exc:
        raise LocalspecError(str(exc)) from None


def _no_history_yet() -> bool:
    """Whether no chat has stored anything yet (reading then creates no database)."""
    path = history_file()
    return not path.exists() and not path.is_symlink()


@click.group("history")
def history_group() -> None:
    """Conversations kept by `localspec chat` (resume one with `chat --resume ID`)."""


@history_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_command(as_json: bool) -> None:
    """List stored conversations, newest first."""
    try:
        rows = [] if _no_history_yet() else _store().list()
    except HistoryUnavailable as exc:
        raise LocalspecError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    if not rows:
        click.echo("no conversations stored yet (`localspec chat` stores them)", err=True)
        return
    table = Table("id", "updated", "messages", "first message", box=None)
    for row in rows:
        when = datetime.fromtimestamp(row["updated"]).strftime("%Y-%m-%d %H:%M") if row["updated"] is not None else "?"
        first = next((line.strip() for line in row["first_message"].splitlines() if line.strip()), "")[:60]
        table.add_row(str(row["id"]), when, str(row["messages"]), Text(shown_plainly(first)))  # Text: the user's words, not markup
    print_table(table)


@history_group.command("show")
@click.argument("conversation_id", type=WholeNumbers(), metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the conversation as JSON (the form /save writes).")
def show_command(conversation_id: int, as_json: bool) -> None:
    """Print conversation ID."""
    try:
        data = None if _no_history_yet() else _store().get(conversation_id)
    except HistoryUnavailable as exc:
        raise LocalspecError(str(exc)) from None
    if data is None:
        raise InputError(f"no conversation {conversation_id}")
    try:  # (shown all the same: what can be read of it is the user's)
        Conversation.from_json(data, GenerationSettings())
    except InputError as exc:
        click.echo(f"warning: conversation {conversation_id} is damaged ({exc}): chat --resume cannot continue it",
                   err=True)
    if as_json:
        try:
            click.echo(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False))
        except ValueError:  # (Python would write Infinity, which JSON has not: a strict reader fails on it)
            raise LocalspecError(f"conversation {conversation_id} is damaged: its settings hold a number JSON cannot"
                                 f" write (`history show {conversation_id}` shows its messages)") from None
        return
    for message in data["messages"]:
        mark = " (interrupted)" if message.get("interrupted") else ""
        # Text, not markup: the words exactly as written (a trailing backslash too); control characters as escapes.
        line = Text.assemble((shown_plainly(message["role"]), "bold"), f"{mark}: ", shown_plainly(message["content"]))
        stdout_console.print(line, highlight=False)


@history_group.command("remove")
@click.argument("conversation_id", type=WholeNumbers(), metavar="ID")
def remove_command(conversation_id: int) -> None:
    """Delete conversation ID (and its tokens from the memory and the saved prompts)."""
    # The memory first: should that fail, the conversation is still there to remove again.
    try:
        forgotten = forget_conversation(conversation_id)
    except OSError as exc:
        raise LocalspecError(f"could not remove conversation {conversation_id} from the memory: {os_error_text(exc)}"
                             ) from None
    try:
        removed = not _no_history_yet() and _store().remove(conversation_id)
    except HistoryUnavailable as exc:
        raise LocalspecError(str(exc)) from None
    if not removed and not forgotten:
        raise InputError(f"no conversation {conversation_id}")
    try:
        forget_prompts()  # (the models' saved reading of the last prompt may be this conversation's)
    except OSError as exc:
        raise LocalspecError(f"removed conversation {conversation_id}, but not the saved prompts: {os_error_text(exc)}"
                             ) from None
    if not removed:  # (a chat emptied by /undo, whose tokens could not be removed then)
        click.echo(f"removed conversation {conversation_id}'s {forgotten} tokens from the memory", err=True)
        return
    also = f" and its {forgotten} tokens from the memory" if forgotten else ""
    click.echo(f"removed conversation {conversation_id}{also}", err=True)

