"""The strings a string schema with a `pattern` or a `format` takes, asked of llguidance itself, byte by byte.

`uniqueItems` over such strings (emails, uuids, codes by pattern) cannot be held
by refusing the closing quote of a repeat alone, as over free strings: a uuid
written equal to an earlier one up to its last digit can only close. The rule
must refuse, a token earlier, an item that can only end as one held.
`StringLanguage.may_end_unlike` answers that exactly as the grammar writes such a
string: it walks a matcher of the item's own schema over bytes along the paths of
the items held, and looks for a byte the matcher allows that none of them takes.
The walk only follows the items held, so it takes a few microseconds a byte.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import numpy as np

from .byte_tokenizer import byte_matcher
from .schema_keywords import ANNOTATIONS

# The keywords a string item may carry and be held this way: each one is llguidance's to hold, and the matcher of
# the item alone holds it as the document's grammar does.
_LANGUAGE_KEYS = {"type", "pattern", "format", "minLength", "maxLength"} | ANNOTATIONS
_ANSWERS_KEPT = 4096  # may_end_unlike's answers kept per language (a mask asks the same of many tokens)
_MOST_STEPS = 4096  # places a walk visits at most (past them it answers as where nothing is told)
_MOST_COUNTING_STEPS = 1024  # places a count visits at most (an endless language's first path: about 30 ms)
# A control character, as JSON spells it escaped (`\n`, `\u0001`), or DEL (which JSON leaves as it is and llguidance
# takes only escaped): llguidance takes several spellings of these.
_ESCAPED_SEVERAL_WAYS = re.compile(rb'\\[bfnrt]|\\u00[01]|\x7f')
_BYTES = 256  # the byte tokenizer's bytes; its end-of-text token comes after them
_QUOTE = ord('"')


class StringLanguage:
    """The JSON strings (quotes included) a string schema takes, as llguidance writes them."""

    def __init__(self, matcher: Any) -> None:
        self._fresh = matcher  # a matcher of the schema over bytes that nothing has fed (copied for each walk)
        self._answers: dict[tuple[bytes, frozenset[str]], bool] = {}
        self._counts: dict[int, int | None] = {}  # count_up_to's answers (an array asks each time it opens)

    @classmethod
    def of_items(cls, items: Any, guidance: Any) -> "StringLanguage | None":
        """The language of an array's string items where they carry a `pattern` or a `format` (with lengths
        perhaps) and nothing else llguidance would not hold alone; `guidance`: the root's `x-guidance` options,
        which decide how llguidance reads a format. None for any other items, or where llguidance refuses them."""
        if (not isinstance(items, dict) or items.get("type") != "string" or not items.keys() <= _LANGUAGE_KEYS
                or not items.keys() & {"pattern", "format"}):
            return None
        schema = dict(items, **({"x-guidance": guidance} if isinstance(guidance, dict) else {}))
        try:
            return _language(json.dumps(schema, sort_keys=True))
        except (TypeError, ValueError):  # (not JSON after all)
            return None

    def may_end_unlike(self, written: bytes, held: frozenset[str]) -> bool:
        """Whether some string the schema takes begins with `written` (its JSON spelling so far, from the opening
        quote) and is none of `held`. True, too, where that is not told here: `written` is no beginning llguidance
        writes, holds a `\\u` escape, or a held string that begins as it does holds a control character (llguidance
        spells those several ways: `\\n`, `\\u000a`, `\\u000A`), or the walk runs past _MOST_STEPS. Nothing is
        refused on a reading that does not apply; a repeat's closing quote is refused all the same."""
        key = (written, held)
        if key not in self._answers:
            if len(self._answers) >= _ANSWERS_KEPT:
                self._answers.clear()
            self._answers[key] = self._answer(written, held)
        return self._answers[key]

    def _answer(self, written: bytes, held: frozenset[str]) -> bool:
        rivals = [spelled for spelled in map(_spelling, held) if spelled is not None and spelled.startswith(written)]
        if not rivals:
            return True
        if b"\\u" in written or any(_ESCAPED_SEVERAL_WAYS.search(spelled) for spelled in rivals):
            return True
        return self._new_string_from(written, frozenset(rivals))

    def _new_string_from(self, written: bytes, rivals: frozenset[bytes]) -> bool:
        """Whether a string not among `rivals` (the spellings held that begin with `written`) goes on from
        `written`: a walk along the rivals' paths (no recursion: a held item may be longer than Python's
        recursion limit), stepping the matcher forward and back, over a run of forced bytes at once."""
        matcher = self._fresh.deep_copy()
        if not matcher.consume_tokens(list(written)) or matcher.is_error():
            return True
        at, todo = written, [written]  # (what the matcher has consumed; the places left to visit)
        for _ in range(_MOST_STEPS):
            if not todo:
                return False
            here = todo.pop()
            _step(matcher, at, here)
            forced = bytes(matcher.compute_ff_bytes())
            if forced:
                matcher.consume_tokens(list(forced))
                here += forced
                if not any(spelled.startswith(here) for spelled in rivals):
                    return True  # (the forced run leaves every rival: it goes on to a string of its own)
            at = here
            allowed = _allowed_bytes(matcher)
            taken_next = {spelled[len(here)] for spelled in rivals
                          if len(spelled) > len(here) and spelled.startswith(here)}
            if allowed - taken_next:
                return True  # a byte no rival takes here: a new string begins with it (llguidance allows no dead end)
            todo += [here + bytes((byte,)) for byte in sorted(taken_next & allowed)]
        return True

    def count_up_to(self, most: int) -> int | None:
        """How many strings the schema takes, counted up to `most`; None where the count would take too long (an
        endless language without a `maxLength`: its first path may never end). Depth first, each string closed
        as soon as it may be, forced runs taken at once: a uuid's first 64 come within a few hundred steps."""
        if most not in self._counts:
            self._counts[most] = self._count(most)
        return self._counts[most]

    def _count(self, most: int) -> int | None:
        matcher, count = self._fresh.deep_copy(), 0
        path: list[bytes] = []  # the bytes consumed, a step (a byte, or a forced run) each
        todo: list[tuple[int, bytes]] = [(0, b'"')]  # (how many steps of `path` it follows, its own step)
        for _ in range(_MOST_COUNTING_STEPS):
            if not todo or count >= most:
                return min(count, most)
            depth, step = todo.pop()
            if len(path) > depth:
                matcher.rollback(sum(map(len, path[depth:])))
                del path[depth:]
            forced = bytes(matcher.compute_ff_bytes()) if matcher.consume_tokens(list(step)) else b""
            path.append(step + forced)
            if forced:
                matcher.consume_tokens(list(forced))
            if matcher.is_stopped():
                count += 1  # (a whole string: its closing quote, where nothing more may follow)
                continue
            allowed = _allowed_bytes(matcher)
            closing = [_QUOTE] if _QUOTE in allowed else []
            todo += [(len(path), bytes((byte,))) for byte in sorted(allowed - {_QUOTE}, reverse=True) + closing]
        return None


def _allowed_bytes(matcher: Any) -> set[int]:
    """The bytes `matcher` allows next."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    return set(np.flatnonzero(bits[:_BYTES]).tolist())


def _step(matcher: Any, at: bytes, here: bytes) -> None:
    """Move `matcher` from having consumed `at` to having consumed `here`: back to where they part, then on."""
    common = next((place for place, (a, b) in enumerate(zip(at, here)) if a != b), min(len(at), len(here)))
    if len(at) > common:
        matcher.rollback(len(at) - common)
    if len(here) > common:
        matcher.consume_tokens(list(here[common:]))


@functools.lru_cache(maxsize=4096)
def _spelling(item: str) -> bytes | None:
    """How a string is written in JSON, quotes included (escaping only what must be); None for one that is no
    text (a lone surrogate, `"\\ud800"`: no grammar writes it)."""
    try:
        return json.dumps(item, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return None


@functools.lru_cache(maxsize=128)
def _language(schema: str) -> StringLanguage | None:
    from llguidance import grammar_from

    matcher = byte_matcher(grammar_from("json_schema", schema))
    return StringLanguage(matcher) if matcher is not None else None
