"""What is typed after a chat command: its first word (`first_word`), and a file name (`/save`, `/load`,
`/format schema FILE`) read as a shell reads one (`typed_path`).

A name typed plainly is taken as typed, spaces and apostrophes included (`/save my chat.json`),
with `~` and `$VARIABLES` expanded. A name that begins with a quote or holds a backslash
is read as a shell reads a word: quotes taken off, `\\x` for a character as it is, and
`$VARIABLES` expanded except in single quotes or after a backslash (`/save 'price$5.json'`,
`/save price\\$5.json`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config.paths import expanded_user_path, user_path
from ..errors import InputError

_SPECIAL_IN_DOUBLE_QUOTES = "$`\"\\"  # what a backslash escapes within double quotes (elsewhere it stays)


def first_word(typed: str) -> tuple[str, str]:
    """`typed`'s first word and the rest after it, split at the first run of spaces or tabs ("" where none)."""
    words = typed.split(None, 1)
    return (words[0] if words else ""), (words[1] if len(words) > 1 else "")


def typed_path(typed: str, what: str | None = None) -> Path:
    """The file `typed` names (see the module's docstring); InputError where a quote is not closed, a backslash
    ends it, it is more than one word, or a variable it names is not set."""
    typed = typed.strip()
    if os.name == "nt":  # (a backslash separates folders: only the quotes around a name are taken off)
        quoted = len(typed) >= 2 and typed[0] == typed[-1] and typed[0] in "\"'"
        return expanded_user_path(typed[1:-1] if quoted else typed, what)  # ($HOME and %USERPROFILE% expanded)
    if typed[:1] not in ("'", '"') and "\\" not in typed:
        return expanded_user_path(typed, what)
    word = shell_word(typed)
    if typed.startswith("~"):  # (a shell expands an unquoted `~` alone, as at the start of a plain name)
        return user_path(word, what)
    user_path(word, what)  # (its checks: empty, a NUL)
    return Path(word)


def shell_word(typed: str) -> str:
    """`typed` read as one word of a POSIX shell: quotes taken off, backslash escapes, `$NAME` and `${NAME}`
    expanded outside single quotes."""
    out: list[str] = []
    quote = ""  # the quote open at this point, if any
    at = 0
    while at < len(typed):
        character = typed[at]
        if quote == "'":
            quote = "" if character == "'" else quote
            out.append("" if character == "'" else character)
        elif character == "\\":
            if at + 1 == len(typed):
                raise InputError(f"{typed}: a backslash ends it")
            escaped = typed[at + 1]
            kept = quote == '"' and escaped not in _SPECIAL_IN_DOUBLE_QUOTES
            out.append("\\" + escaped if kept else escaped)
            at += 1
        elif character == "$":
            value, at = _variable_at(typed, at)
            out.append(value)
            continue
        elif character == quote:
            quote = ""
        elif not quote and character in "'\"":
            quote = character
        elif not quote and character.isspace():
            raise InputError(f"{typed}: give one file name (a name with spaces in quotes, or its spaces escaped)")
        else:
            out.append(character)
        at += 1
    if quote:
        raise InputError(f"{typed}: a quote is not closed")
    return "".join(out)


def _variable_at(typed: str, at: int) -> tuple[str, int]:
    """The value of the `$NAME` or `${NAME}` at `typed[at]`, and where the text after it begins; a `$` naming
    no variable stays as it is."""
    braced = typed.startswith("${", at)
    start = at + 2 if braced else at + 1
    end = start
    while end < len(typed) and (typed[end].isalnum() or typed[end] == "_"):
        end += 1
    if end == start or (braced and not typed.startswith("}", end)):
        return "$", at + 1
    name = typed[start:end]
    if name not in os.environ:
        raise InputError(f"{typed}: ${name} is not set in this environment")
    return os.environ[name], end + 1 if braced else end
