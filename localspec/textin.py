"""Text from outside (arguments, stdin, files, requests), decoded one way everywhere.

Python hands invalid UTF-8 on the command line to us as lone surrogates
(surrogateescape: byte 0xE9 becomes '\\udce9'), and a JSON client that cut a
string inside an emoji sends one too. Neither can be encoded as UTF-8, so
tokenizing, printing or storing such text fails. The policy: every invalid
byte and every lone surrogate becomes U+FFFD (the replacement character), and
the caller warns once that something was replaced.
"""

from __future__ import annotations

import codecs
import re
import sys
from typing import Any, BinaryIO

from .shown import shown_name

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


class RepeatedKey(ValueError):
    """A key given twice in one JSON object (or two that read alike once cleaned)."""


def clean_text(text: str) -> tuple[str, bool]:
    """`text` with lone surrogates replaced by U+FFFD, and whether anything was replaced.

    A well-formed surrogate pair (a high then a low surrogate, as some decoders
    leave them) is joined into the one character it stands for.
    """
    if not _SURROGATE.search(text):
        return text, False
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return joined, joined.count(REPLACEMENT) > text.count(REPLACEMENT)


def bom_encoding(start: bytes) -> str:
    """The encoding a byte order mark at the start of `start` names: "utf-32", "utf-16", else "utf-8"."""
    if start.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):  # (before UTF-16's: it starts like it)
        return "utf-32"
    return "utf-16" if start.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8"


def stream_encoding(stream: BinaryIO) -> str:
    """`bom_encoding` of what `stream` holds next, read without taking it from the stream (a pipe's first bytes,
    which its writer may not have written yet: this waits for them)."""
    peek = getattr(stream, "peek", None)
    if peek is not None:
        return bom_encoding(peek(4)[:4])
    if stream.seekable():
        start = stream.tell()
        encoding = bom_encoding(stream.read(4))
        stream.seek(start)
        return encoding
    return "utf-8"


def decode_bytes(data: bytes) -> tuple[str, bool]:
    """`data` decoded as UTF-8 with invalid bytes replaced by U+FFFD, and whether any were.

    A UTF-8 byte-order mark at the start is dropped; a UTF-16 one (a file saved by Notepad or PowerShell)
    says the text is UTF-16, and it is read so (a UTF-32 one likewise).
    """
    encoding = bom_encoding(data)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode(encoding), False
    except UnicodeDecodeError:
        return data.decode(encoding, "replace"), True


def clean_data(value: Any) -> tuple[Any, bool]:
    """Parsed JSON with `clean_text` applied to every string in it (keys too), and whether anything was replaced;
    RepeatedKey where two keys of one object become one.

    Walked with a stack, not by recursion: however deeply the value nests, the
    checks that come after it say what is wrong with it, and where.
    """
    replaced = False

    def clean(text: Any) -> Any:
        nonlocal replaced
        if not isinstance(text, str):
            return text
        cleaned, changed = clean_text(text)
        replaced = replaced or changed
        return cleaned

    root: list[Any] = [None]
    pending: list[tuple[Any, Any, Any]] = [(value, root, 0)]  # (what to copy, the container it goes in, where)
    while pending:
        source, parent, place = pending.pop()
        if isinstance(source, list):
            parent[place] = copy = [None] * len(source)
            pending.extend((item, copy, index) for index, item in enumerate(source))
        elif isinstance(source, dict):
            keys = [clean(key) for key in source]
            parent[place] = copy = dict.fromkeys(keys)
            if len(copy) < len(keys):  # ("\ud800" and "\udc00" both become U+FFFD: which value was meant?)
                raise RepeatedKey(f'two keys of one object read alike, "{REPLACEMENT}", once their unpaired surrogates'
                                  " are replaced: keep one")
            pending.extend((item, copy, key) for key, item in zip(keys, source.values()))
        else:
            parent[place] = clean(source)
    return root[0], replaced


def replaced_warning(where: str, encoding: str = "UTF-8") -> str:
    """The one warning line for text from `where` (e.g. "the prompt", "stdin", a file's name) that needed
    replacing; control characters in a name escaped (`shown_name`)."""
    return f"warning: {shown_name(where)} is not valid {encoding} text; invalid parts were replaced with \ufffd"


def warn_replaced(where: str) -> None:
    """Print `replaced_warning(where)` on stderr."""
    if sys.stderr is not None:  # (print's file=None would be stdout, which carries the result)
        print(replaced_warning(where), file=sys.stderr, flush=True)


def clean_input(text: str, where: str) -> str:
    """`clean_text(text)`, warning on stderr (naming `where`) when something was replaced."""
    cleaned, replaced = clean_text(text)
    if replaced:
        warn_replaced(where)
    return cleaned


def decode_input(data: bytes, where: str) -> str:
    """`decode_bytes(data)`, warning on stderr (naming `where`) when something was replaced."""
    text, replaced = decode_bytes(data)
    if replaced:
        warn_replaced(where)
    return text
