r"""The keys an object takes only by name or by a `patternProperties` pattern, as a language the rule asks of.

llguidance writes an object's listed keys at most once each, but a key under a pattern as often as the model
likes: a held-out translations map (`^[a-z]{2}$`, `additionalProperties: false`) came out with `"id"` four
times at T=0, and JSON parsers keep the last value only (so `minProperties` can fail after parsing). Unlike a
free key, such a key cannot always take another character (`"id` can only close), so dropping the closing quote
of a repeat is not enough: the rule must refuse, one token earlier, a key written so far that can only end as
one written before. `KeyLanguage.may_end_unlike` answers that: whether some key the object takes begins with the
text written so far and is none of the keys it holds already.

A pattern is read into a small automaton here (anchored at both ends: literals, escapes, classes, groups,
alternation, repeats); a character class is Python's reading of it, with `\d` and `\w` as ASCII (as JSON
Schema's regular expressions read them) and `\s` as llguidance reads it. Anything else (lookarounds,
back-references, `\b`, `\p{…}`, a set operation in a class, a character beyond U+FFFF) leaves the object's keys
unheld. Listed names count as llguidance writes them: first, in order, never as a key by pattern. The answer
only needs the keys held that begin with the text so far, so it walks their paths alone: the first character a
class takes that none of them takes next is a way to a new key.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

_MOST_STATES = 4096  # an automaton larger than this (repeats spelled out) leaves the keys unheld
_MEMBERS_COUNTED = 256  # a class's members counted up to this; more than the keys held is all the rule asks
_ASCII_ESCAPES = {"d": "0-9", "w": "A-Za-z0-9_"}  # JSON Schema's regular expressions (ECMA-262): ASCII classes
_LITERAL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
# `\s` as llguidance reads it (Unicode White_Space): Python's `\s` takes \x1c-\x1f as well.
_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_SET_OPERATIONS = ("--", "&&", "~~")  # llguidance (Rust regex) reads these in a class as set operations; Python not
_QUANTIFIER = re.compile(r"\{(\d+)(,(\d*))?\}")


class Unreadable(Exception):
    """A pattern this reading does not follow."""


@dataclass(frozen=True)
class _Class:
    """A set of characters: those its regular expression takes (`members` where they were all counted)."""

    text: str  # a regular expression for one character
    members: frozenset[str] | None  # every member, where there are no more than _MEMBERS_COUNTED

    def takes(self, char: str) -> bool:
        if self.members is not None:
            return char in self.members
        return _compiled(self.text).fullmatch(char) is not None


@functools.lru_cache(maxsize=512)
def _compiled(text: str) -> re.Pattern[str]:
    return re.compile(text, re.DOTALL if text == "." else 0)


@functools.lru_cache(maxsize=512)
def _character_class(text: str) -> _Class:
    """The class of characters `text` (a one-character regular expression) takes; Unreadable where it takes none
    (among the Basic Multilingual Plane's) or Python cannot read it."""
    if any(ord(char) > 0xFFFF for char in text):
        raise Unreadable(text)  # (members beyond the Basic Multilingual Plane are not counted below)
    try:
        compiled = _compiled(text)
    except re.error:
        raise Unreadable(text) from None
    members = []
    for found in compiled.finditer(_basic_plane()):
        members.append(found.group())
        if len(members) > _MEMBERS_COUNTED:
            return _Class(text, None)
    if not members or any(len(member) != 1 for member in members):
        raise Unreadable(text)
    return _Class(text, frozenset(members))


@functools.lru_cache(maxsize=1)
def _basic_plane() -> str:
    """Every character of the Basic Multilingual Plane but the surrogates (no character of a key), in order."""
    return "".join(chr(code) for code in range(0x10000) if not 0xD800 <= code < 0xE000)


class _Automaton:
    """A nondeterministic automaton over characters: states 0..n-1, each with moves on a class and empty moves."""

    def __init__(self) -> None:
        self.moves: list[list[tuple[_Class, int]]] = []
        self.empty_moves: list[list[int]] = []

    def state(self) -> int:
        if len(self.moves) >= _MOST_STATES:
            raise Unreadable("too many states")
        self.moves.append([])
        self.empty_moves.append([])
        return len(self.moves) - 1

    def closure(self, states: frozenset[int] | set[int]) -> frozenset[int]:
        """`states` and every state their empty moves reach."""
        reached, todo = set(states), list(states)
        while todo:
            for after in self.empty_moves[todo.pop()]:
                if after not in reached:
                    reached.add(after)
                    todo.append(after)
        return frozenset(reached)

    def step(self, states: frozenset[int], char: str) -> frozenset[int]:
        return self.closure({after for state in states for chars, after in self.moves[state] if chars.takes(char)})


class _PatternReader:
    """A pattern read into an automaton (recursive descent: alternatives of sequences of repeated atoms)."""

    def __init__(self, pattern: str, automaton: _Automaton) -> None:
        self.pattern, self.at, self.automaton = pattern, 0, automaton

    def whole(self, start: int, end: int) -> None:
        """The pattern's body, from state `start` to state `end` (no `|` outside a group: `^a|b$` is `^a` or `b$`)."""
        self.sequence(start, end)
        if self.at != len(self.pattern):
            raise Unreadable(self.pattern)

    def alternatives(self, start: int, end: int) -> None:
        while True:
            self.sequence(start, end)
            if not self.pattern.startswith("|", self.at):
                return
            self.at += 1

    def sequence(self, start: int, end: int) -> None:
        here = start
        while self.at < len(self.pattern) and self.pattern[self.at] not in "|)":
            atom_at = self.at
            if self.pattern[self.at] == "(":
                self.skip_group()  # (its end found without building it: built for every repeat below)
            else:
                self.atom_text()
            least, most = self.quantifier()
            after_atom = self.at
            for count in range(least):
                here = self.repeat_of(atom_at, here, None)
            if most is None:
                loop = self.automaton.state()
                self.automaton.empty_moves[here].append(loop)
                self.repeat_of(atom_at, loop, loop)
                here = loop
            else:
                optional_end = self.automaton.state()
                for count in range(most - least):
                    self.automaton.empty_moves[here].append(optional_end)
                    here = self.repeat_of(atom_at, here, None)
                self.automaton.empty_moves[here].append(optional_end)
                here = optional_end
            self.at = after_atom
        self.automaton.empty_moves[here].append(end)

    def skip_group(self) -> None:
        """Past the group that opens at `self.at` (to its closing parenthesis), building nothing."""
        pattern, depth = self.pattern, 0
        while self.at < len(pattern):
            char = pattern[self.at]
            if char == "\\":
                self.at += 2
                continue
            if char == "[":
                self.at = self.class_end(self.at) + 1
                continue
            depth += {"(": 1, ")": -1}.get(char, 0)
            self.at += 1
            if depth == 0:
                return
        raise Unreadable(pattern)

    def class_end(self, at: int) -> int:
        """Where the class that opens at `at` closes (its `]`)."""
        pattern, end = self.pattern, at + 1
        end += pattern.startswith("^", end)
        end += pattern.startswith("]", end)
        while end < len(pattern) and pattern[end] != "]":
            if pattern[end] == "[":
                raise Unreadable("a nested class")
            end += 2 if pattern[end] == "\\" else 1
        if end >= len(pattern):
            raise Unreadable(pattern)
        return end

    def repeat_of(self, atom_at: int, start: int, end: int | None) -> int:
        """The atom at `atom_at` once more, from `start` (to `end`, or to a new state); the state it ends in."""
        self.at = atom_at
        end = self.automaton.state() if end is None else end
        text = self.atom_text(build=(start, end))
        if text is not None:
            self.automaton.moves[start].append((_character_class(text), end))
        return end

    def atom_text(self, build: tuple[int, int] | None = None) -> str | None:
        """Read one atom; a one-character regular expression, or None for a group (built from `build`'s states)."""
        pattern, char = self.pattern, self.pattern[self.at]
        if char == "(":
            if pattern.startswith("(?:", self.at):
                self.at += 3
            elif pattern.startswith("(?", self.at):
                raise Unreadable("a lookaround or a named group")
            else:
                self.at += 1
            start, end = build if build is not None else (self.automaton.state(), self.automaton.state())
            self.alternatives(start, end)
            if not pattern.startswith(")", self.at):
                raise Unreadable(pattern)
            self.at += 1
            return None
        if char == "[":
            end = self.class_end(self.at)
            if any(operation in pattern[self.at: end + 1] for operation in _SET_OPERATIONS):
                raise Unreadable("a set operation in a class")
            text = _ascii_classes(pattern[self.at: end + 1])
            self.at = end + 1
            return text
        if char == "\\":
            if self.at + 1 >= len(pattern):
                raise Unreadable(pattern)
            escaped = pattern[self.at + 1]
            self.at += 2
            if escaped in _ASCII_ESCAPES:
                return f"[{_ASCII_ESCAPES[escaped]}]"
            if escaped in _LITERAL_ESCAPES:
                return re.escape(_LITERAL_ESCAPES[escaped])
            if escaped in "sS":
                return f"[{_SPACE}]" if escaped == "s" else f"[^{_SPACE}]"
            if escaped in "DW":
                return f"[^{_ASCII_ESCAPES[escaped.lower()]}]"
            if escaped.isalnum():
                raise Unreadable(f"\\{escaped}")  # (`\b`, `\p{…}`, `\u…`, a back-reference: not followed here)
            return re.escape(escaped)
        if char in "*+?{)|^$":
            raise Unreadable(f"{char} where a character was expected")
        self.at += 1
        return "." if char == "." else re.escape(char)

    def quantifier(self) -> tuple[int, int | None]:
        """The repeat after an atom: (least, most), most None for unbounded; (1, 1) where there is none."""
        pattern = self.pattern
        if self.at >= len(pattern):
            return 1, 1
        char = pattern[self.at]
        braces = _QUANTIFIER.match(pattern, self.at) if char == "{" else None
        if char in "*+?":
            self.at += 1
            least, most = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        elif braces is not None:
            self.at = braces.end()
            least = int(braces.group(1))
            most = least if braces.group(2) is None else int(braces.group(3)) if braces.group(3) else None
            if most is not None and most < least:
                raise Unreadable(braces.group(0))
        else:
            return 1, 1
        if pattern.startswith("?", self.at):  # (a lazy repeat takes the same keys)
            self.at += 1
        if pattern.startswith(("*", "+", "?", "{"), self.at):
            raise Unreadable("a repeat of a repeat")
        return least, most


def _ascii_classes(text: str) -> str:
    r"""A class's text with `\d` and `\w` as ASCII ranges and `\s` as llguidance reads it; Unreadable for `\D`, `\W`
    (and `\S` in a negated class) inside it, and for any other letter escape."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            escaped = text[i + 1]
            if escaped in _ASCII_ESCAPES:
                out.append(_ASCII_ESCAPES[escaped])
            elif escaped == "s":
                out.append(_SPACE)
            elif escaped in "DW" or escaped == "S" and text.startswith("[^"):
                raise Unreadable(f"\\{escaped} in a class")
            elif escaped.isalpha() and escaped not in "sSntrfv":
                raise Unreadable(f"\\{escaped}")
            else:
                out.append(text[i: i + 2])
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


class KeyLanguage:
    """The keys an object may take: its listed names and what its patterns take (see the module's docstring)."""

    def __init__(self, names: list[str], patterns: list[str], writable: list[str] | None = None) -> None:
        """`names`: the keys listed (`properties`, then `required` ones not listed), which llguidance writes each at
        most once, in this order, before any key by pattern, and never as a key by pattern; `writable`: those of
        them it writes at all (not a `false` schema's); every one where None."""
        self.names = tuple(names)
        self.writable = self.names if writable is None else tuple(writable)
        self._not_by_pattern = frozenset(self.names)
        automaton = _Automaton()
        start, accept = automaton.state(), automaton.state()
        for pattern in patterns:
            if not (pattern.startswith("^") and pattern.endswith("$")) or pattern.endswith("\\$"):
                raise Unreadable("not anchored at both ends")
            _PatternReader(pattern[1:-1], automaton).whole(start, accept)
        self._automaton, self._accept = automaton, accept
        self._start = automaton.closure({start})

    @classmethod
    def of_object(cls, schema: dict[str, Any]) -> "KeyLanguage | None":
        """The language of an object schema's keys where it takes no other key (`additionalProperties: false`, no
        `propertyNames`) and has patterns this reading follows; else None."""
        patterns, listed = schema.get("patternProperties"), schema.get("properties", {})
        if (schema.get("additionalProperties") is not False or "propertyNames" in schema
                or not isinstance(patterns, dict) or not patterns or not isinstance(listed, dict)):
            return None
        required = schema.get("required")
        required = [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
        names = list(listed) + [name for name in dict.fromkeys(required) if name not in listed]
        writable = [name for name in names if listed.get(name) is not False]
        return _language(tuple(names), tuple(patterns), tuple(writable))

    def names_after(self, key: str, names_left: tuple[str, ...]) -> tuple[str, ...]:
        """The listed names that may still follow `key`: those after it where it is one of `names_left`, none where
        it is a key by pattern (llguidance writes the listed ones first, in order)."""
        return names_left[names_left.index(key) + 1:] if key in names_left else ()

    def may_end_unlike(self, written: str, held: frozenset[str], names_left: tuple[str, ...] = ()) -> bool:
        """Whether some key this language takes begins with `written` and is none of `held`: one of `names_left`
        (the listed names that may still come, `names_after`), or one by pattern that is no listed name (True, too,
        where `written` begins no key of it: nothing is refused on a reading that does not apply)."""
        if any(name.startswith(written) and name not in held for name in names_left):
            return True
        held = held | self._not_by_pattern
        rivals = [key for key in held if key.startswith(written)]
        if not rivals:
            return True
        states = self._start
        for char in written:
            states = self._automaton.step(states, char)
            if not states:  # (no key by pattern begins so: a listed name that does is held, or may not come)
                return not any(name.startswith(written) for name in self.names)
        return self._new_key_from(states, written, rivals)

    def _new_key_from(self, states: frozenset[int], written: str, rivals: list[str]) -> bool:
        """Whether a key not among `rivals` (those held that begin with `written`) goes on from `states` (a walk
        along the rivals' paths, no recursion: a held key may be longer than Python's recursion limit)."""
        todo = [(states, written)]
        while todo:
            states, written = todo.pop()
            here = [key for key in rivals if key.startswith(written)]
            if not here or (self._accept in states and written not in here):
                return True  # (every state of the automaton leads on to a key: each class takes a character)
            taken_next = {key[len(written)] for key in here if len(key) > len(written)}
            for state in states:
                for chars, _ in self._automaton.moves[state]:
                    if chars.members is None or not chars.members <= taken_next:
                        return True  # a character no rival takes here: a new key begins with it
            for char in taken_next:
                after = self._automaton.step(states, char)
                if after:
                    todo.append((after, written + char))
        return False


@functools.lru_cache(maxsize=128)
def _language(names: tuple[str, ...], patterns: tuple[str, ...], writable: tuple[str, ...]) -> KeyLanguage | None:
    try:
        return KeyLanguage(list(names), list(patterns), list(writable))
    except Unreadable:
        return None
