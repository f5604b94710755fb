r"""Keys under `patternProperties`, bounded: a pattern's unbounded repeats given an upper bound.

llguidance writes an object's keys under `patternProperties` as its pattern allows, and a pattern such as
`^[A-Za-z_][A-Za-z0-9_-]*$` (a workflow's job names) allows a key of any length: a small model wrote
`"CImapvD_3_0-v4-21-…-v4-v4-v4…` until max_tokens on a held-out schema at T=0.8. llguidance does not
implement `propertyNames`, and a key is no string value that a maxLength bounds, so the pattern itself is
rewritten: each `*`, `+` and `{n,}` repeats at most KEY_REPEAT_LIMIT times (at least n). That takes only keys
the pattern takes, so where the object takes no other key (`additionalProperties: false`, checked by the caller)
it narrows what the grammar allows, as every bound in grammar.py does.

Only a pattern anchored at both ends (`^…$`, no `|` outside a group) is rewritten: an unanchored one
takes any text around its match, which no repeat bound reaches. A repeat of repeats (`^(\w+\s*)+$`, words;
`^[A-Z][A-Za-z]*(-[A-Za-z]+)*$`, a trailer's name: the demo target wrote `"GitHub-Lint-Github-Github-…` until
max_tokens at T=0.8 on a held-out schema) repeats at most NESTED_KEY_REPEAT_LIMIT times, its inner repeats 64
each; one nested deeper, and a pattern this reading cannot follow, is left as written.
"""

from __future__ import annotations

import re

KEY_REPEAT_LIMIT = 64
# Keys a schema takes freely (a map's `additionalProperties`, `--format json`'s objects, names by a minLength
# alone): the demo target wrote a character sheet's ability `"thrax: 10, stealth: 13, …, Deception: 15,
# Deception: 15, …` as one key until max_tokens, at T=0, on a held-out schema. Such a key is at most this many
# characters: a name, a label, a path fit.
KEY_LENGTH_LIMIT = 128
# A repeat of repeats (`^[A-Z][a-z]*(-[A-Za-z]+)*$`, a header's parts): the outer repeat at most this many times.
# Bounded to 64 × 64, llguidance's lexer gave up partway through a key of words (`^(\w+\s*)+$`: "too many
# expressions"); with 8 it writes a key of eight 64-letter words (a mask at most 17 ms over SmolLM2's vocabulary).
NESTED_KEY_REPEAT_LIMIT = 8

_QUANTIFIER = re.compile(r"\{(\d+),\}")  # `{n,}` (an open upper bound)
_DIGITS = {"[0-9]", "\\d"}  # a digit, as patterns spell it
_BRACED_ESCAPES = set("pPxu")  # escapes that may take a `{…}` of their own (`\p{L}`, `\x{2603}`)


def bounded_key_pattern(pattern: str, limit: int = KEY_REPEAT_LIMIT) -> str | None:
    """`pattern` with its unbounded repeats bounded (see the module's docstring), or None where it is not
    anchored at both ends, has no unbounded repeat, or cannot be read here."""
    bounded = bounded_repeats(pattern, limit)
    return None if bounded is None else bounded[0]


def bounded_repeats(pattern: str, limit: int = KEY_REPEAT_LIMIT, digits_only: bool = False) -> tuple[str, int] | None:
    """`bounded_key_pattern`'s pattern, and how many unbounded repeats it bounded; with `digits_only`, only the
    repeats of a single digit (`[0-9]+`, `\\d*`, each at most `limit` times; not one that asks for more)."""
    if not (pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")):
        return None
    pieces: list[str] = []
    depth, i, repeats = 0, 0, 0
    repeats_inside = [0]  # per open group: how deep unbounded repeats nest in it (0: none; 2: a repeat of repeats)
    group_repeats = 0  # the same of the group just closed
    after_repeat = False  # whether the last thing read was a repeat
    while i < len(pattern):
        char = pattern[i]
        if char in "\\[":  # an escape or a class: copied whole (a `*` or `{` in them is no repeat)
            end = (_escape_end if char == "\\" else _class_end)(pattern, i)
            if end is None:
                return None
            pieces.append(pattern[i:end])
            i = end
            group_repeats, after_repeat = 0, False
            continue
        quantifier = _QUANTIFIER.match(pattern, i) if char == "{" else None
        if char in "*+" or quantifier:
            asks_more = quantifier is not None and int(quantifier.group(1)) >= limit
            if digits_only and (not pieces or pieces[-1] not in _DIGITS or asks_more):  # (no run of digits: as written)
                end = quantifier.end() if quantifier else i + 1
                pieces.append(pattern[i:end])
                i, group_repeats, after_repeat = end, 0, False
                continue
            if group_repeats > 1 or after_repeat:
                return None  # (`((a+)+)+`, `a+*`: not read here)
            least = 0 if char == "*" else 1 if char == "+" else int(quantifier.group(1))
            most = NESTED_KEY_REPEAT_LIMIT if group_repeats else limit  # (`(a+)+`: a repeat of repeats)
            pieces.append(f"{{{least},{max(least, most)}}}")
            repeats_inside[-1] = max(repeats_inside[-1], group_repeats + 1)
            repeats, after_repeat = repeats + 1, True
            i = quantifier.end() if quantifier else i + 1
            continue
        group_repeats, after_repeat = 0, False
        if char == "(":
            depth += 1
            repeats_inside.append(0)
        elif char == ")":
            depth -= 1
            if depth < 0:
                return None
            group_repeats = repeats_inside.pop()
            repeats_inside[-1] = max(repeats_inside[-1], group_repeats)
        elif char == "|" and depth == 0:
            return None  # (`^a|b$`: each side anchored at one end only)
        pieces.append(char)
        i += 1
    return ("".join(pieces), repeats) if repeats and depth == 0 else None


def _escape_end(pattern: str, start: int) -> int | None:
    """Where the escape at `start` (a backslash) ends: after the escaped character, or after the `{…}` it takes."""
    if start + 1 >= len(pattern):
        return None
    if pattern[start + 1] in _BRACED_ESCAPES and pattern.startswith("{", start + 2):
        close = pattern.find("}", start + 3)
        return None if close < 0 else close + 1
    return start + 2


def _class_end(pattern: str, start: int) -> int | None:
    """Where the character class opening at `start` ends (after its `]`), nested classes and escapes read through."""
    depth, i = 0, start
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            end = _escape_end(pattern, i)
            if end is None:
                return None
            i = end
            continue
        if char == "[":
            depth += 1
            i += 1
            if pattern.startswith("^", i):
                i += 1
            if pattern.startswith("]", i):  # (a `]` first in a class is itself)
                i += 1
            continue
        if char == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def as_full_match(pattern: str) -> str | None:
    """A regular expression that takes a whole text where `pattern` matches somewhere in it, as JSON Schema reads
    a pattern (llguidance's regular expressions take a text whole, and read `^` and `$` as nothing): `pattern`
    less its anchors, with any text allowed at an end it does not anchor. None where an anchor or a `|` stands
    elsewhere than at the ends (`^a|b$`, `(^a)`), or the pattern cannot be read here."""
    starts, ends = pattern.startswith("^"), pattern.endswith("$") and not pattern.endswith("\\$")
    inner = pattern[1 if starts else 0:len(pattern) - 1 if ends else len(pattern)]
    i, depth = 0, 0
    while i < len(inner):
        char = inner[i]
        if char in "\\[":
            end = (_escape_end if char == "\\" else _class_end)(inner, i)
            if end is None:
                return None
            i = end
            continue
        if char in "^$" or (char == "|" and depth == 0):
            return None
        depth += {"(": 1, ")": -1}.get(char, 0)
        i += 1
    anything = r"[\s\S]*"
    return f"{'' if starts else anything}(?:{inner}){'' if ends else anything}"
