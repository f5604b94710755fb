"""A grammar whose output may open with a prelude before what a format holds it to: a thinking model's thought
(`<think>…</think>`), or gpt-oss's analysis and its final message's header.

`after_prelude` puts a compiled format (an llguidance grammar string: a JSON schema's, a regex's…) after Lark
rules for the prelude, as a grammar of its own that the prelude's rules reach (`@name`); the prelude's texts are
written in a comment at the top, so that what follows the format's text (`unique_items.UniqueItems`) can find
where the answer begins (`prelude_of`, `PreludeCursor`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

PRELUDE_GRAMMAR = "localspec_prelude"  # (the names of llguidance's own grammars are "json_schema", "regex"…)
ANSWER_GRAMMAR = "localspec_answer"
_COMMENT = "// prelude: "
_WHITESPACE = b" \t\r\n"
# What `UniqueItems` asks of a cursor but `feed` and `settled`: the answer's cursor's to say.
_DELEGATED = frozenset(("in_held_key", "in_held_array", "in_string", "in_record", "bytes_to_a_records_last_value",
                        "language_rests", "encloses_key_language", "room_before_a_forced_repeat", "refuses"))


@dataclass(frozen=True)
class Prelude:
    """The texts around a prelude: `opening` begins one where the output opens with it (None: every output has
    one, which the prompt or a header opened), `closing` ends it; the answer follows, after whitespace."""

    opening: bytes | None
    closing: bytes


def after_prelude(grammar: str, start: str, rules: list[str], prelude: Prelude) -> str:
    """An llguidance grammar string whose output is the prelude of Lark rule `start` (with `rules`), in which
    the rule `answer` stands for what `grammar` (an llguidance grammar string, as `compile_format` gives it)
    holds the output to."""
    top = json.loads(grammar)
    formats = [dict(each) for each in top["grammars"]]
    name = formats[0].get("name") or ANSWER_GRAMMAR
    formats[0]["name"] = name
    described = json.dumps({"opening": _text(prelude.opening), "closing": _text(prelude.closing)})
    lark = "\n".join([_COMMENT + described, "%llguidance {}", f"start: {start}", f"answer: @{name}", *rules]) + "\n"
    return json.dumps({**top, "grammars": [{"name": PRELUDE_GRAMMAR, "lark_grammar": lark}, *formats]})


def grammar_list(grammar: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """An llguidance grammar string read as its JSON list of grammars (a JSON schema's, a regex's, `after_prelude`'s:
    the top level, and its grammars, the first an object); None for any other (Lark text)."""
    try:
        top = json.loads(grammar)
    except ValueError:
        return None
    grammars = top.get("grammars") if isinstance(top, dict) else None
    if not isinstance(grammars, list) or not grammars or not isinstance(grammars[0], dict):
        return None
    return top, grammars


def prelude_of(grammar: str) -> tuple[str, Prelude] | None:
    """The format's grammar and the prelude before it, in a grammar `after_prelude` made; else None."""
    found = grammar_list(grammar)
    if found is None or len(found[1]) < 2:
        return None
    top, grammars = found
    lark = grammars[0].get("lark_grammar")
    if grammars[0].get("name") != PRELUDE_GRAMMAR or not isinstance(lark, str) or not lark.startswith(_COMMENT):
        return None
    texts = json.loads(lark[len(_COMMENT):lark.index("\n")])
    prelude = Prelude(_bytes(texts["opening"]), _bytes(texts["closing"]))
    return json.dumps({**top, "grammars": grammars[1:]}), prelude


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8")


@dataclass(frozen=True)
class PreludeCursor:
    """A cursor over an output that may open with a prelude: the prelude's bytes pass unread, and from the
    answer's first byte (whitespace after the prelude skipped) each is the `inner` cursor's. Until then it is
    `settled` (no byte there can repeat an item). Immutable, like the cursors it wraps."""

    inner: Any  # a JsonCursor or CallsCursor, before the answer's first byte until the answer begins
    prelude: Prelude
    state: str = "start"  # "start" (the prelude may open), "prelude", "after" (whitespace may follow), "answer"
    seen: bytes = b""  # at the start: the bytes so far; in the prelude: its last bytes, where the closing may be

    @classmethod
    def start(cls, inner: Any, prelude: Prelude) -> "PreludeCursor":
        """A cursor before the output's first byte."""
        return cls(inner, prelude, "start" if prelude.opening is not None else "prelude")

    def feed(self, piece: bytes) -> "PreludeCursor | None":
        """The cursor after `piece`, or None where the answer's cursor refuses it (see `JsonCursor.feed`)."""
        if self.state == "answer":
            inner = self.inner.feed(piece)
            return None if inner is None else replace(self, inner=inner)
        seen = self.seen + piece
        if self.state == "start":
            opening = self.prelude.opening
            stripped = seen.lstrip(_WHITESPACE)
            if stripped.startswith(opening):
                return replace(self, state="prelude", seen=b"").feed(stripped[len(opening):])
            if opening.startswith(stripped):
                return replace(self, seen=seen)
            return replace(self, state="answer", seen=b"").feed(seen)
        if self.state == "prelude":
            closing = self.prelude.closing
            end = seen.find(closing)
            if end < 0:
                return replace(self, seen=seen[-(len(closing) - 1):] if len(closing) > 1 else b"")
            return replace(self, state="after", seen=b"").feed(seen[end + len(closing):])
        answer = seen.lstrip(_WHITESPACE)  # ("after")
        return replace(self, state="answer").feed(answer) if answer else self

    def __getattr__(self, name: str) -> Any:
        """The answer's cursor's say (`in_string`, `refuses`…: `_DELEGATED`) once the answer has begun; only
        `settled` is asked before (`UniqueItems.allowed`)."""
        if name not in _DELEGATED:
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def settled(self) -> bool:
        """Within the prelude, as nothing there is held; in the answer, as its cursor says."""
        return self.state != "answer" or self.inner.settled
