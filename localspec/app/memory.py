"""The memory of earlier text a session drafts from: which store, what goes in, what a generation reads.

Memories live in the data folder, one per vocabulary (models that tokenize
alike share one) and owner: "local" for `run`, `chat` and the documents a user
adds with `localspec memory add`; for `serve` (only with `serve --memory`) one
per API key, so that a client never drafts from, and so never probes by timing,
another key's text or the local user's. Nothing leaves the machine.

What goes in: each generation's prompt and output, as tokens, minus the prefix
the same session stored last (a chat's earlier turns, an agent's repeated
instructions), so a conversation is kept once and its turns are tagged with
its history id (`history remove ID` removes them).
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config.paths import data_dir
from ..engine.drafters import MemoryUse, TokenMemory
from ..engine.suffix_index import MultiIndex
from ..errors import LocalspecError
from ..models.compat import vocab_identity
from ..runtime.model import common_prefix_length
from .memory_store import MemoryStore

LOCAL_OWNER = "local"


def memory_root() -> Path:
    """The folder holding every memory: <data folder>/memory/<vocabulary>/<owner>."""
    return data_dir() / "memory"


def serve_owner(api_key: str | None) -> str:
    """The owner of the memory `serve` keeps for clients of this API key (None: a server without a key)."""
    if not api_key:
        return "serve-open"
    return "serve-" + hashlib.sha256(api_key.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def open_store(model_path: Path, owner: str = LOCAL_OWNER) -> MemoryStore:
    """The memory of `owner` for the vocabulary of the model at `model_path`."""
    return MemoryStore(memory_root() / vocab_identity(model_path) / owner)


def stores_of(owner: str | None = LOCAL_OWNER) -> list[MemoryStore]:
    """`owner`'s memory for every vocabulary that has one (None: every owner's)."""
    root = memory_root()
    if not root.is_dir():
        return []
    return [MemoryStore(folder) for vocabulary in sorted(root.iterdir()) if vocabulary.is_dir()
            for folder in sorted(vocabulary.iterdir()) if folder.is_dir() and owner in (None, folder.name)]


def conversation_tag(conversation_id: int) -> str:
    return f"conversation:{conversation_id}"


def forget_conversation(conversation_id: int) -> int:
    """Remove a chat conversation's tokens from every local memory; tokens removed (OSError where one cannot
    be written)."""
    return sum(store.remove(conversation_tag(conversation_id)) for store in stores_of(LOCAL_OWNER))


class SessionMemory:
    """One session's view of a memory: what its generations draft from, and what they add to it.

    A memory is a help, never a reason to fail: a store that cannot be read or
    written (a full disk, a read-only folder, a data folder that is a file) turns
    the memory off for the session with one note, and damage the store found and
    repaired is noted once (`notes`).
    """

    def __init__(self, open_memory: Callable[[], MemoryStore], notes: Callable[[str], None] = lambda message: None) -> None:
        """`open_memory` opens the store on first use (it reads the target's vocabulary: not before it is needed)."""
        self._open_memory = open_memory
        self._store: MemoryStore | None = None
        self._index: MultiIndex | None = None
        self._version: Any = None  # the store's `version()` when `_index` was read
        self.notes = notes
        self.use = MemoryUse()
        self.failed = False  # the store failed once: no memory for the rest of the session
        self._compaction: threading.Thread | None = None
        self._noted: set[str] = set()
        self._last_stored: dict[str | None, list[int]] = {}  # tag -> the tokens the last document continued

    def index(self) -> TokenMemory | None:
        """What the memory holds now (read again whenever a process, this one or another, has added to it or
        removed from it: `history remove` and `memory clear` take effect in a chat left open); None when it
        failed."""
        version = self._using_store(lambda store: store.version())
        if self._index is None or version != self._version:
            self._version = version
            self._index = self._using_store(lambda store: store.index())
        return self._index

    def remember(self, prompt_tokens: Sequence[int], output_tokens: Sequence[int], source: str,
                 tag: str | None = None) -> None:
        """Add a generation: its prompt and output, less the prefix this session's last document of `tag` had."""
        tokens = [*prompt_tokens, *output_tokens]
        known = common_prefix_length(self._last_stored.get(tag, []), tokens)
        self._last_stored[tag] = tokens
        if len(tokens) > known:
            self._using_store(lambda store: store.add(tokens[known:], source=source, tag=tag, compact=False))
            self._index = None
            if self._using_store(lambda store: store.needs_compaction()):
                self._compact_in_background()

    def _compact_in_background(self) -> None:
        """Merge the new documents into the base in a thread of its own (seconds at millions of tokens),
        so that no reply waits for it; the store's lock keeps it apart from every other writer."""
        if self._compaction is not None and self._compaction.is_alive():
            return
        store = self._store
        twin = MemoryStore(store.root, store.max_tokens, store.compact_tokens, store.compact_segments)  # its own caches

        def compact() -> None:
            try:
                twin.compact(block=False, when_needed=True)
            except (OSError, LocalspecError) as exc:  # tried again at the next addition, or at close
                self.notes(f"could not merge the memory's new documents: {exc}")
            finally:
                self._note(twin.problems)  # damage the merge found (and repaired), said as any other

        self._compaction = threading.Thread(target=compact, name="memory-compaction", daemon=True)
        self._compaction.start()

    def close(self) -> None:
        """Add up this session's use of the memory (for `memory stats`) and tidy the store if it needs it."""
        if self._compaction is not None:
            self._compaction.join()
        if self._store is None:
            return
        use = self.use
        if use.lookups:
            self._using_store(lambda store: store.record_use(use.lookups, use.hits, use.proposed, use.accepted))
        self._using_store(lambda store: store.compact(block=False, when_needed=True))
        self._store = self._index = None

    def _using_store(self, action: Callable[[MemoryStore], Any]) -> Any:
        """`action(store)`, or None (the memory off from now on, with one note) when the store fails."""
        if self.failed:
            return None
        try:
            if self._store is None:
                self._store = self._open_memory()
            return action(self._store)
        except (OSError, LocalspecError) as exc:
            self.failed = True
            self._index = None
            reason: Any = exc
            if isinstance(exc, OSError):  # (the file and why, not "[Errno 28] No space left on device")
                reason = f"{exc.filename}: {exc.strerror or exc}" if exc.filename else exc.strerror or exc
            self.notes(f"the memory is off for this session: {reason}")
            return None
        finally:
            self._note_problems()

    def _note_problems(self) -> None:
        """Each problem the store (or its index) found and repaired, once."""
        self._note([*(self._store.problems if self._store is not None else ()),
                    *(self._index.problems if self._index is not None else ())])

    def _note(self, problems: Sequence[str]) -> None:
        for problem in problems:
            if problem not in self._noted:
                self._noted.add(problem)
                self.notes(problem)
