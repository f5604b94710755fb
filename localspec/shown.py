"""Text from outside (a file's name, stored or generated text) made safe to print on a terminal: control
characters escaped, so that it stays on its line and an escape sequence in it cannot recolour the terminal."""

from __future__ import annotations

import re

_UNDECODABLE = re.compile(r"[\udc80-\udcff]|\\udc([89a-f][0-9a-f])")


def undecodable_bytes_shown(text: str) -> str:
    """`text` with each byte that was not UTF-8 (an argument's or a file name's, which Python carries as a lone
    surrogate U+DC80-U+DCFF, or as its repr `\\udcff`) written as the byte it was: `\\xff`."""
    def byte(match: re.Match[str]) -> str:
        return f"\\x{match.group(1)}" if match.group(1) else f"\\x{ord(match.group()) - 0xDC00:02x}"

    return _UNDECODABLE.sub(byte, text)


def one_line(text: str) -> str:
    """`text` on one line: line breaks it quotes (a file name's, say) written as \\n and \\r."""
    return text.strip("\n").replace("\r", "\\r").replace("\n", "\\n")


# Control characters, and the bidirectional embeddings, overrides and isolates that reorder what follows them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown_plainly(text: str) -> str:
    """Stored or generated text made safe to print on a terminal: control characters (an escape sequence that
    would recolour, retitle or move the cursor) shown as \\xNN escapes, bidirectional overrides (which reorder
    what is shown after them) as \\uNNNN; line breaks and tabs kept."""
    return _CONTROL.sub(_escaped, text)


def shown_name(name: str) -> str:
    """A file's name (or other text from outside) shown on one line of a table or a message: control characters,
    line breaks and tabs (which break a table's columns) escaped (`shown_plainly`, `one_line`), bytes that were
    not UTF-8 as `\\xNN`."""
    return one_line(undecodable_bytes_shown(shown_plainly(name))).replace("\t", "\\t")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
