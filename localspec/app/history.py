"""Chat conversations kept in SQLite as they happen (standard library `sqlite3`).

One transaction per message, so a crash or kill loses at most the reply in
progress. A database that is corrupt or locked by another process raises
`HistoryUnavailable` with one line; the chat then runs unsaved.

Each conversation has a revision, raised by every change to it (by triggers, so
whatever program makes it). A store writes to a conversation only at the
revision it last read or wrote there: two chats that resume the same
conversation do not overwrite each other (`ConversationChanged`).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..config.files import is_unix_time, refuse_json_constant
from ..config.paths import keep_private
from ..textin import clean_text
from .conversation import Conversation, Message

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    started REAL NOT NULL,
    updated REAL NOT NULL,
    system TEXT,
    settings TEXT NOT NULL,
    revision INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    interrupted INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""

# A conversation's id is never given again, even after the newest one is removed (SQLite's own rowids would
# give it again): a script or a note that names a removed conversation must not reach another one.
NEXT_CONVERSATION_ID = """
SELECT max(COALESCE((SELECT max(id) FROM conversations), 0),
           COALESCE((SELECT value FROM counters WHERE name = 'last conversation id'), 0)) + 1
"""

# Every change to a conversation raises its revision, whatever program makes it (an older localspec too).
REVISION_TRIGGERS = """
CREATE TRIGGER IF NOT EXISTS message_added AFTER INSERT ON messages
BEGIN UPDATE conversations SET revision = revision + 1 WHERE id = NEW.conversation; END;
CREATE TRIGGER IF NOT EXISTS message_removed AFTER DELETE ON messages
BEGIN UPDATE conversations SET revision = revision + 1 WHERE id = OLD.conversation; END;
CREATE TRIGGER IF NOT EXISTS message_edited AFTER UPDATE ON messages
BEGIN UPDATE conversations SET revision = revision + 1 WHERE id IN (OLD.conversation, NEW.conversation); END;
CREATE TRIGGER IF NOT EXISTS conversation_edited AFTER UPDATE OF system, settings ON conversations
BEGIN UPDATE conversations SET revision = revision + 1 WHERE id = NEW.id; END;
"""


_SQLITE_HEADER_BYTES = 100  # every SQLite database begins with a header this long
_FIRST_REVISION_BITS = 62  # a new conversation's first revision: random, with room to count up from it
_REMOVED = object()


class HistoryUnavailable(Exception):
    """The history database cannot be used (corrupt, locked, unwritable)."""


class HistoryBusy(HistoryUnavailable):
    """Another process held the database locked for longer than the store waits (`BUSY_SECONDS`): worth trying
    again later."""


BUSY_SECONDS = 10.0  # how long a read or write waits for another process's transaction to end


class ConversationChanged(HistoryUnavailable):
    """Another process wrote to the conversation since this store last read or wrote it."""


def _numbers_first(column: str) -> str:
    """An ORDER BY term putting rows whose `column` is a number first (false, 0, sorts before true)."""
    return f"typeof({column}) NOT IN ('integer', 'real')"


class HistoryStore:
    """Conversations and their messages, written one message per transaction."""

    def __init__(self, path: Path, timeout: float = BUSY_SECONDS) -> None:
        self.path = path
        if path.exists() and not path.is_file():  # (a FIFO: opening it waited for a writer for ever)
            raise HistoryUnavailable(f"chat history {path} cannot be used (not a regular file)")
        if path.is_file() and 0 < path.stat().st_size < _SQLITE_HEADER_BYTES:  # (SQLite writes over a 1-byte file)
            raise HistoryUnavailable(f"chat history {path} cannot be used (file is not a database)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            keep_private(path)  # the chats' text (SQLite gives its journal files the database's mode)
            # Used from one thread at a time; the fatal-abort hook may write from llama.cpp's thread.
            self._db = sqlite3.connect(path, timeout=timeout, check_same_thread=False)
            # Text another program wrote may not be UTF-8: read with replacements (`_text`), not an error on every read.
            self._db.text_factory = lambda data: data.decode("utf-8", "replace")
            self._db.execute("PRAGMA foreign_keys = ON")
            with self._db:
                self._db.executescript(SCHEMA)
            self._add_revisions()
        except (sqlite3.Error, OSError) as exc:
            raise HistoryUnavailable(f"chat history {path} cannot be used ({exc})") from None
        self._revisions: dict[int, Any] = {}  # conversation id -> the revision this store last read or wrote

    def _add_revisions(self) -> None:
        """Give a database from before revisions its revision column and triggers (once, whoever gets there first)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")  # two processes opening an old database at once: one adds them
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(conversations)")}
            if "revision" not in columns:
                self._db.execute("ALTER TABLE conversations ADD COLUMN revision INTEGER NOT NULL DEFAULT 0")
            for statement in REVISION_TRIGGERS.split("END;")[:-1]:
                self._db.execute(statement + "END;")

    def _write(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            with self._db:
                return self._db.execute(sql, args)
        except sqlite3.Error as exc:
            raise self._unavailable("written", exc) from None

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise self._unavailable("read", exc) from None

    def _unavailable(self, verb: str, exc: sqlite3.Error) -> HistoryUnavailable:
        """The one-line reason a read or write failed; a file or folder removed while open is named as such
        (SQLite itself says "readonly database")."""
        if not self.path.parent.is_dir():
            return HistoryUnavailable(f"chat history cannot be {verb}: its folder {self.path.parent} is gone")
        if not self.path.exists():
            return HistoryUnavailable(f"chat history cannot be {verb}: {self.path} is gone")
        busy = isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)
        return (HistoryBusy if busy else HistoryUnavailable)(f"chat history {self.path} cannot be {verb} ({exc})")

    def start(self, conversation: Conversation) -> int:
        """Store a new conversation (with any messages it already has); return its id."""
        now = time.time()
        settings = json.dumps(conversation.to_json()["settings"])
        try:
            with self._db:
                # A random first revision: an older version may give a removed conversation's id again, never
                # with its revisions.
                conversation_id = int(self._db.execute(
                    f"INSERT INTO conversations (id, started, updated, system, settings, revision)"
                    f" VALUES (({NEXT_CONVERSATION_ID}), ?, ?, ?, ?, ?)",
                    (now, now, conversation.system, settings, secrets.randbits(_FIRST_REVISION_BITS)),
                ).lastrowid)
                self._db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('last conversation id', ?)",
                                 (conversation_id,))
                self._insert_messages(conversation_id, conversation.messages)
                self._revisions[conversation_id] = self._revision(conversation_id)
        except sqlite3.Error as exc:
            raise self._unavailable("written", exc) from None
        return conversation_id

    def add(self, conversation_id: int, message: Message) -> None:
        """Append one message to a stored conversation."""
        with self._writing(conversation_id):
            self._insert_messages(conversation_id, [message])

    def update(self, conversation_id: int, conversation: Conversation) -> None:
        """Rewrite the system prompt, the settings and the messages (after /undo, /retry, /system, /set)."""
        with self._writing(conversation_id):
            self._db.execute(
                "UPDATE conversations SET system = ?, settings = ? WHERE id = ?",
                (conversation.system, json.dumps(conversation.to_json()["settings"]), conversation_id),
            )
            self._db.execute("DELETE FROM messages WHERE conversation = ?", (conversation_id,))
            self._insert_messages(conversation_id, conversation.messages)

    def discard(self, conversation_id: int) -> None:
        """Remove a conversation as `update` rewrites one: ConversationChanged where another process wrote to it
        since this store last read or wrote it (it is then left as it is)."""
        with self._writing(conversation_id):
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    @contextmanager
    def _writing(self, conversation_id: int) -> Iterator[None]:
        """One transaction that writes to a conversation at the revision this store knows, and raises it.

        Raises HistoryUnavailable when the conversation was removed meanwhile
        (`history remove` in another shell), ConversationChanged when another
        process wrote to it since this store last read or wrote it.
        """
        try:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")  # no other writer between the check and the write
                revision = self._revision(conversation_id)
                if revision is _REMOVED:
                    raise HistoryUnavailable(f"conversation {conversation_id} was removed from the chat history")
                if conversation_id in self._revisions and self._revisions[conversation_id] != revision:
                    raise ConversationChanged(f"conversation {conversation_id} was changed by another chat")
                yield  # the writes raise the revision (REVISION_TRIGGERS)
                self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))
                self._revisions[conversation_id] = self._revision(conversation_id)
        except sqlite3.Error as exc:
            raise self._unavailable("written", exc) from None

    def _revision(self, conversation_id: int) -> Any:
        """The conversation's revision as stored (any value another program left), or _REMOVED."""
        found = self._db.execute("SELECT revision FROM conversations WHERE id = ?", (conversation_id,)).fetchall()
        return found[0][0] if found else _REMOVED

    def _insert_messages(self, conversation_id: int, messages: list[Message]) -> None:
        self._db.executemany(
            "INSERT INTO messages (conversation, role, content, interrupted) VALUES (?, ?, ?, ?)",
            [(conversation_id, m.role, m.content, int(m.interrupted)) for m in messages],
        )

    def latest(self) -> int | None:
        """The conversation `chat --continue` resumes: the latest updated that holds a message (one emptied by
        `/undo` has nothing to go on from)."""
        # (an `updated` that is not a number, written by hand, sorts above every number in SQLite: last, not first)
        rows = self._read("SELECT id FROM conversations c WHERE EXISTS (SELECT 1 FROM messages WHERE conversation = c.id)"
                          f" ORDER BY {_numbers_first('updated')}, updated DESC, id DESC LIMIT 1")
        return rows[0][0] if rows else None

    def list(self) -> list[dict[str, Any]]:
        """Every conversation, newest first: id, times, message count and its first user message."""
        rows = self._read(
            "SELECT c.id, c.started, c.updated, COUNT(m.id),"
            " (SELECT content FROM messages WHERE conversation = c.id AND role = 'user' ORDER BY id LIMIT 1)"
            " FROM conversations c LEFT JOIN messages m ON m.conversation = c.id GROUP BY c.id"
            f" ORDER BY {_numbers_first('c.updated')}, c.updated DESC, c.id DESC"
        )
        return [
            {"id": cid, "started": _time(started), "updated": _time(updated), "messages": count,
             "first_message": _text(first)}
            for cid, started, updated, count, first in rows
        ]

    def get(self, conversation_id: int) -> dict[str, Any] | None:
        """The conversation in `/save`'s JSON form, or None."""
        if not _is_row_id(conversation_id):
            return None
        try:
            with self._db:  # one read transaction: the revision is that of the messages read
                self._db.execute("BEGIN")
                found = self._db.execute("SELECT system, settings, revision FROM conversations WHERE id = ?",
                                         (conversation_id,)).fetchall()
                rows = self._db.execute("SELECT role, content, interrupted FROM messages WHERE conversation = ? ORDER BY id",
                                        (conversation_id,)).fetchall()
        except sqlite3.Error as exc:
            raise self._unavailable("read", exc) from None
        if not found:
            return None
        system, settings, self._revisions[conversation_id] = found[0]
        messages = [{"role": "system", "content": _text(system)}] if system else []
        for role, content, interrupted in rows:
            messages.append({"role": _text(role), "content": _text(content), **({"interrupted": True} if interrupted else {})})
        try:
            kept_settings = json.loads(_text(settings), parse_constant=refuse_json_constant)
        except (ValueError, RecursionError):  # (the text as it is: reading the conversation says it is damaged)
            kept_settings = _text(settings)
        return {"messages": messages, "settings": kept_settings}

    def remove(self, conversation_id: int) -> bool:
        if not _is_row_id(conversation_id):
            return False
        return self._write("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0

    def close(self) -> None:
        self._db.close()


def _text(value: Any) -> str:
    """A stored text as text, whatever another program wrote there (bytes are decoded, invalid UTF-8 replaced)."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return clean_text(value.decode("utf-8", "replace"))[0]
    return clean_text(str(value))[0]


def _time(value: Any) -> float | None:
    """A stored Unix time, or None where another program left something else."""
    return float(value) if is_unix_time(value) else None


def _is_row_id(value: int) -> bool:
    """Whether `value` can be a stored id at all (SQLite refuses an int beyond 64 bits with OverflowError)."""
    return 0 <= value < 2**63
