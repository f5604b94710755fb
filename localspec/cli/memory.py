"""`localspec memory add|remove|list|stats|clear`: the memory of earlier text that drafts come from."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator

import click
import numpy as np
from rich.table import Table
from rich.text import Text

from ..app.memory import LOCAL_OWNER, memory_root, open_store, stores_of
from ..app.memory_store import MemoryStore
from ..app.prompt_cache import forget_prompts
from ..app.plan import vocabulary_file
from ..config.paths import user_path
from ..config.resolve import resolve_settings
from ..errors import InputError, LocalspecError
from ..models.compat import check_file
from ..runtime.model import Vocabulary
from ..shown import shown_name
from ..textin import decode_bytes, replaced_warning
from .common import print_table, say
from .options import PROFILE_OPTION

LARGEST_FILE_BYTES = 4 << 20  # a larger file is most likely data, not text worth drafting from
SNIFFED_BYTES = 8192  # a NUL among a file's first bytes marks it binary
PIECE_CHARS = 1 << 14  # text is tokenized this much at a time (see _tokens_of)


@click.group("memory")
def memory_group() -> None:
    """The memory of earlier text that drafts come from: what `run` and `chat` wrote, and files you add.

    It stays on this machine, in the data folder, one per vocabulary. `serve`
    keeps its own, per API key, only when started with --memory. Turn drafting
    from it off with --no-memory or `speculative.memory = false`.
    """


@memory_group.command("add")
@PROFILE_OPTION
@click.option("--target", metavar="PATH", help="For this target GGUF's vocabulary instead of the profile's target.")
@click.argument("names", nargs=-1, required=True, metavar="PATH...")
def add_command(profile: str | None, target: str | None, names: tuple[str, ...]) -> None:
    """Add text files (or every text file under a folder) for the vocabulary of the profile's target
    (or of --target).

    Adding a file again replaces what it added before.
    """
    paths = _paths(names)
    candidates = {_file_tag(file): file for path in paths for file in _files_under(path)}  # each file once
    texts = {tag: text for tag, file in candidates.items() if (text := _read_text(file)) is not None and text.strip()}
    skipped = len(candidates) - len(texts)
    why = f"{_files(skipped)} skipped: empty, binary, unreadable or over {LARGEST_FILE_BYTES >> 20} MB"
    if not texts:  # checked before anything is loaded, opened or created
        raise InputError("no text files to add" + (f" ({why})" if skipped else ""))
    if skipped:
        click.echo(why, err=True)
    model = vocabulary_file(resolve_settings(profile, {"target.path": target} if target is not None else {}))
    check_file(model)
    with Vocabulary(model) as vocabulary:  # the tokenizer alone: no weights loaded
        tokenized = {tag: _tokens_of(vocabulary, text) for tag, text in texts.items()}
    store = open_store(model)
    with _reporting_problems([store]):
        now = time.time()
        written: set[str] = set()
        try:
            for tag, tokens in tokenized.items():
                if store.add(tokens, source="file", tag=tag, compact=False, added=now) is not None:
                    written.add(tag)
        except KeyboardInterrupt:  # (what is in stays in: said, so that the user knows to add the rest)
            click.echo(f"\ninterrupted: {_files(len(written))} of {len(tokenized)} added ({store.root}); `memory add`"
                       " them again to add the rest (adding a file again replaces it)", err=True)
            raise
        # Then what these files added before, and the merge: at most one rebuild for all of them. (New copies
        # first: a process killed between the two keeps both copies, never neither; a merge keeps the newest.)
        try:
            store.remove_tags(written | _earlier_tags(candidates), added_before=now)
            store.compact()
        except KeyboardInterrupt:
            click.echo(f"\ninterrupted: {_files(len(written))} added ({store.root}); what they added before goes"
                       " at the next merge", err=True)
            raise
        kept = {document["tag"]: document["tokens"] for document in store.documents()
                if document["tag"] in written and document["added"] >= now}
    say(f"added {_files(len(kept))}, {sum(kept.values())} tokens ({store.root})")
    if store.evicted_tokens:
        lost = len(written) - len(kept)
        click.echo(f"the memory keeps the newest {store.max_tokens:,} tokens: {store.evicted_tokens:,} were evicted,"
                   f" the oldest first{f' ({_files(lost)} just added among them)' if lost else ''}", err=True)


@memory_group.command("remove")
@click.argument("names", nargs=-1, required=True, metavar="PATH...")
def remove_command(names: tuple[str, ...]) -> None:
    """Remove files added with `memory add` (a folder: every file under it)."""
    tags = [_file_tag(path) for path in _paths(names)]
    prefixes = tags + sorted(_earlier_tags(tags))
    removed = 0
    stores = stores_of(LOCAL_OWNER)
    with _reporting_problems(stores):
        for store in stores:
            tags = {doc["tag"] for doc in store.documents() if _under_any(doc["tag"], prefixes)}
            removed += store.remove_tags(tags)  # at most one rebuild per memory
    if not removed:
        raise InputError("none of these files is in the memory")
    click.echo(f"removed {removed} tokens", err=True)


@memory_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_command(as_json: bool) -> None:
    """List what the memories hold, one document per line."""
    stores = stores_of(owner=None)
    with _reporting_problems(stores):
        rows = [{"memory": _name(store), **doc} for store in stores for doc in store.documents()]
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    table = Table("memory", "source", "tokens", "added", "tag", box=None)
    for row in rows:
        when = datetime.fromtimestamp(row["added"]).strftime("%Y-%m-%d %H:%M") if row.get("added") else ""
        # (a tag names a file: its control characters shown as escapes, not obeyed; its backslashes are doubled)
        table.add_row(Text(row["memory"]), Text(str(row["source"])), str(row["tokens"]), when,
                      Text(shown_name(str(row["tag"] or ""))))
    print_table(table)


@memory_group.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def stats_command(as_json: bool) -> None:
    """Tokens stored and how often drafting from them paid off, per memory."""
    stores = stores_of(owner=None)
    with _reporting_problems(stores):
        stats = {_name(store): store.stats() for store in stores}
    if as_json:
        click.echo(json.dumps(stats, indent=2, ensure_ascii=False))
        return
    if not stats:
        click.echo(f"the memory is empty ({memory_root()})")
        return
    table = Table("memory", "tokens", "documents", "on disk", "lookups", "hit rate", "drafts kept", box=None)
    for name, entry in stats.items():
        lookups, hits, proposed, accepted = (entry[key] for key in ("lookups", "hits", "proposed", "accepted"))
        table.add_row(Text(name), str(entry["tokens"]), str(entry["documents"]), f"{entry['bytes'] / 1e6:.1f} MB",
                      str(lookups), f"{hits / lookups:.1%}" if lookups else "-",
                      f"{accepted / proposed:.1%}" if proposed else "-")
    print_table(table)


@memory_group.command("clear")
@click.option("--yes", is_flag=True, help="Do not ask.")
def clear_command(yes: bool) -> None:
    """Empty every memory (run, chat, added files and serve's), and the models' saved reading of the last prompt."""
    stores = stores_of(owner=None)
    if not stores:
        _forget_prompts()
        click.echo("the memory is already empty", err=True)
        return
    if not yes:
        if not _at_a_terminal():
            raise InputError("memory clear asks before emptying the memory: give --yes where no one can answer")
        if not _agreed(f"empty {len(stores)} memor{'ies' if len(stores) != 1 else 'y'} in {memory_root()}?"):
            raise LocalspecError("nothing cleared")
    for store in stores:
        store.clear()
    _forget_prompts()
    click.echo("the memory is empty", err=True)


def _forget_prompts() -> None:
    try:
        forget_prompts()
    except OSError as exc:
        raise LocalspecError(f"could not delete the saved prompts: {exc}") from None


def _tokens_of(vocabulary: Vocabulary, text: str) -> np.ndarray:
    """`text`'s tokens, tokenized PIECE_CHARS characters at a time, each piece ending at a line's end where one is
    in its second half: Ctrl-C stops a long file's tokenizing between two pieces, and a tokenizer whose time
    grows with the square of a run's length (digits, a minified file, with some vocabularies: a minute for a
    megabyte) meets no run longer than a piece. A piece after a line's end is tokenized with that line break
    before it, whose own tokens are then left out: the tokens are those of the whole text (a tokenizer that puts
    a space before each text it is given, SentencePiece's, put one at each cut)."""
    line_break = vocabulary.tokenize("\n", add_special=False)
    pieces = []
    start = 0
    while start < len(text):
        end = min(start + PIECE_CHARS, len(text))
        if end < len(text):
            cut = text.rfind("\n", start + PIECE_CHARS // 2, end)
            end = cut + 1 if cut >= 0 else end
        piece = text[start:end]
        after_break = vocabulary.tokenize("\n" + piece, add_special=False) if start and text[start - 1] == "\n" else []
        if after_break and after_break[:len(line_break)] == line_break:  # (else the break merged with what follows)
            pieces.append(after_break[len(line_break):])
        else:
            pieces.append(vocabulary.tokenize(piece, add_special=False))
        start = end
    return np.asarray([token for piece in pieces for token in piece], dtype=np.int32)


def _files(count: int) -> str:
    return f"{count} file{'s' * (count != 1)}"


def _paths(names: tuple[str, ...]) -> list[Path]:
    """The paths named (an empty name, as an unset shell variable gives, is refused: it would mean this folder)."""
    if any(not name for name in names):
        raise InputError("an empty path: name a file or folder (`.` for this folder)")
    return [user_path(name) for name in names]


@contextmanager
def _reporting_problems(stores: list[MemoryStore]) -> Iterator[None]:
    """Say on stderr, once each, what damage the stores found (and repaired) while the block read them."""
    try:
        yield
    finally:
        for store in stores:
            for problem in store.problems:
                click.echo(f"localspec: {problem}", err=True)


def _file_tag(path: Path) -> str:
    """The tag of what `memory add` added from `path`: its resolved path (one tag however the file is named;
    bytes that are not UTF-8 shown as \\xNN escapes and a backslash as two, so that no two names share a tag)."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a link loop: the path as given
        resolved = path.absolute()
    return "file:" + os.fsencode(resolved).replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")


def _earlier_tags(tags: Iterable[str]) -> set[str]:
    """The tags earlier versions gave the files of `tags` where they differ (a backslash in the path, which they
    wrote as one): what adding them again replaces, and removing them removes, too."""
    return {earlier for tag in tags if (earlier := tag.replace("\\\\", "\\")) != tag}


def _under_any(tag: str | None, prefixes: list[str]) -> bool:
    """Whether `tag` is one of the file tags `prefixes`, or the tag of a file under one of those folders."""
    return tag is not None and any(tag == prefix or tag.startswith(prefix.rstrip("/") + "/") for prefix in prefixes)


def _at_a_terminal() -> bool:
    """Whether someone can answer a question: stdin is a terminal."""
    return sys.stdin is not None and sys.stdin.isatty()


def _agreed(question: str) -> bool:
    """A yes from the user to `question`; no answer (end of input, Ctrl-C) is a no."""
    try:
        return click.confirm(question)
    except click.Abort:
        return False


def _name(store: MemoryStore) -> str:
    """'<vocabulary>/<owner>' as the folders name them."""
    return f"{store.root.parent.name}/{store.root.name}"


def _files_under(path: Path) -> Iterator[Path]:
    """`path` itself, or the files under a folder (hidden ones skipped)."""
    try:
        path.stat()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or folder") from None
    except (OSError, ValueError) as exc:  # a link loop, a name too long, a folder it may not search
        raise InputError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    if not path.is_dir():
        yield path
        return
    for file in sorted(path.rglob("*")):
        if not any(part.startswith(".") for part in file.relative_to(path).parts) and _may_be_a_file(file):
            yield file


def _may_be_a_file(path: Path) -> bool:
    """Whether `path` is a file, or cannot be told (a link into a folder this user may not enter: left to
    `_read_text`, which skips what it cannot read, rather than failing the whole add)."""
    try:
        return path.is_file()
    except OSError:
        return True


def _read_text(file: Path) -> str | None:
    """A text file's text (as `decode_bytes` reads it: UTF-16 after its byte order mark; invalid UTF-8 becomes
    U+FFFD, with one warning); None for a binary, unreadable or very large file."""
    try:
        size = file.stat().st_size if file.is_file() else 0
        if not 0 < size <= LARGEST_FILE_BYTES:  # (0: empty, or a /proc file, which may never end: /proc/kmsg)
            return None
        data = file.read_bytes()
    except OSError:
        return None
    text, replaced = decode_bytes(data)
    if "\0" in text[:SNIFFED_BYTES]:  # (UTF-16 text, whose ASCII letters come with zero bytes, decodes without them)
        return None
    if replaced:
        click.echo(replaced_warning(str(file)), err=True)
    return text
