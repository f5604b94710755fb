"""A reasoning model's thinking kept apart from its answer: `<think>…</think>` (Qwen3, DeepSeek R1, QwQ, GLM,
Kimi K2 Thinking, MiniMax-M2, …), `<seed:think>…</seed:think>` (Seed-OSS), `<|START_THINKING|>…<|END_THINKING|>`
(Command R7B, Command A).

A template that writes such a pair of tags belongs to a model that may think before it answers: in a
block that opens its reply, or in one the prompt has already opened (DeepSeek R1's and Qwen3 Thinking's end
with `<think>\\n`). `ThoughtSplitter` sorts the output, as it streams, into the thinking (without its tags
and the whitespace around it) and the answer after it; `serve` sends the thinking as `reasoning_content`, as
llama-server does with its default `reasoning_format`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from typing import Callable, Protocol

from ..engine.textstream import held_back_length
from ..errors import LocalspecError
from ..runtime.chat_template import render_chat
from .tool_call_xml import regex_text

OPEN, CLOSE = "<think>", "</think>"
TAGS = ((OPEN, CLOSE), ("<seed:think>", "</seed:think>"), ("<|START_THINKING|>", "<|END_THINKING|>"))


def thought_tags(template: str | None) -> tuple[str, str] | None:
    """The tags the model of `template` thinks in before its answer (the first pair of `TAGS` it writes), or None."""
    if template is None:
        return None
    return next(((opening, closing) for opening, closing in TAGS if opening in template and closing in template), None)


def opened_by(prompt_end: str, opening: str = OPEN) -> bool:
    """Whether a prompt ending in `prompt_end` leaves a thought open (the reply goes on inside it)."""
    return prompt_end.rstrip().endswith(opening)


def closed_by(prompt_end: str, closing: str = CLOSE) -> bool:
    """Whether a prompt ending in `prompt_end` closed a thought itself (an empty one, to answer at once: Qwen3's
    with `enable_thinking` off)."""
    return prompt_end.rstrip().endswith(closing)


@dataclass(frozen=True)
class Thinking:
    """A thinking model's tags, as the special tokens of its vocabulary (None: a tag spelled in ordinary tokens),
    and whether its prompt opens the thought: what a grammar needs to let a reply think before what it holds
    (`thinking_rules`)."""

    open_token: int | None
    close_token: int | None
    opened: bool
    tags: tuple[str, str] = (OPEN, CLOSE)

    def after_prompt(self, prompt_end: str) -> Thinking | None:
        """The thinking a reply to a prompt ending in `prompt_end` may do: none where the prompt closed the thought
        itself (Qwen3's `enable_thinking` off), else opened as the prompt left it (a template variable may open
        or close it otherwise than the template's own prompt does)."""
        if closed_by(prompt_end, self.tags[1]):
            return None
        return replace(self, opened=opened_by(prompt_end, self.tags[0]))


def template_thinking(template: str | None, marker_token: Callable[[str], int | None],
                      spelled: bool = False) -> Thinking | None:
    """`Thinking` for a template that thinks in tags (`thought_tags`) which are one special token each in the
    model's vocabulary (as Qwen3's, DeepSeek R1's and MiniMax-M2's `<think>` are), or, with `spelled`, tags the
    vocabulary spells in ordinary tokens (for a reply whose answer cannot begin as the opening tag does: what
    follows could not be told from a thought); else None."""
    tags = thought_tags(template)
    if template is None or tags is None:
        return None
    open_token, close_token = (marker_token(tag) for tag in tags)
    if (open_token is None or close_token is None) and not spelled:
        return None
    return Thinking(open_token, close_token, _prompt_opens(template, tags[0]), tags)


@functools.lru_cache(maxsize=16)
def _prompt_opens(template: str, opening: str) -> bool:
    """Whether `template`'s generation prompt leaves a thought open (DeepSeek R1's `<think>\\n`)."""
    try:
        return opened_by(render_chat(template, [{"role": "user", "content": "probe"}]), opening)
    except LocalspecError:
        return False


def thinking_rules(thinking: Thinking, alternatives: str, answer: str,
                   plain_start: str | None = None, budget: int | None = None) -> tuple[str, list[str]]:
    """The start rule's body and the Lark rules that let a reply think before `answer` (Lark: what may follow
    the thinking, after whitespace); `alternatives`: the reply's start without thinking (where the prompt does
    not open a thought); `plain_start`: where the answer may be plain text (`ANSWER_TEXT`), what it may not start
    with (a call's opening, as TEXT may not); `budget`: the most tokens the thought may hold before its closing
    tag is written for it (held where that tag is a special token: `budget_held`)."""
    opening, closing = thinking.tags
    opening_rule = json.dumps(opening) if thinking.open_token is None else f"<[{thinking.open_token}]>"
    start = "thought after_thinking" if thinking.opened else f"{alternatives} | {opening_rule} thought after_thinking"
    # The thought's text may not spell its closing tag (what reads the output would take the answer to begin
    # there), and the whitespace after it is bounded (a model may loop on it, as on the spaces of flexible JSON).
    # A closing tag of ordinary tokens ends the one lexeme that is the thought: at its first spelling, where no
    # byte can extend it.
    if thinking.close_token is None:
        thought = ["thought: THINKING_TEXT",
                   f"THINKING_TEXT: /(?s:.*){regex_text(closing)}/ & ~/(?s:.*{regex_text(closing)}.+)/"]
    elif budget == 0:
        thought = [f"thought: <[{thinking.close_token}]>"]
    else:
        bound = "" if budget is None else f"[max_tokens={budget}]"
        thought = [f"thought: thought_text <[{thinking.close_token}]>", f"thought_text{bound}: THINKING_TEXT",
                   f"THINKING_TEXT: /(?s:.*)/ & ~/(?s:.*{regex_text(closing)}.*)/"]
    rules = [f"after_thinking: THINKING_SPACE? {answer}", *thought, r"THINKING_SPACE: /[ \t\r\n]{1,4}/"]
    if plain_start is not None:
        rules.append(f"ANSWER_TEXT: /(?s:[^ \\t\\r\\n].*)/ & ~/{plain_start}(?s:.*)/")
    return start, rules


@dataclass
class Sorted:
    """Text sorted out of an output: its thinking and its answer."""

    reasoning: str = ""
    content: str = ""

    def __add__(self, other: Sorted) -> Sorted:
        return Sorted(self.reasoning + other.reasoning, self.content + other.content)


class Splitter(Protocol):
    """Sorts an output into thinking and answer as it streams (`ThoughtSplitter`, `harmony.HarmonySplitter`)."""

    def feed(self, text: str) -> Sorted: ...

    def finish(self) -> Sorted: ...


class ThoughtSplitter:
    """Sorts an output into thinking and answer as it streams (`feed`), holding back only what may yet turn out
    to be a tag or the whitespace around the thinking; `finish` gives what was held back once the output is over.

    The thinking is the text of a `<think>` block the output opens with (after whitespace), or, where the prompt
    opened it (`opened`), the text up to the first `</think>`; a block never closed is thinking to the end."""

    def __init__(self, opened: bool = False, tags: tuple[str, str] = (OPEN, CLOSE)) -> None:
        self.state = "thinking" if opened else "start"
        self.opening, self.closing = tags
        self.held = ""
        self.reasoning_begun = False  # (the whitespace that opens the thinking is dropped)

    def feed(self, text: str) -> Sorted:
        self.held += text
        out = Sorted()
        while True:
            if self.state == "start":
                stripped = self.held.lstrip()
                if stripped.startswith(self.opening):
                    self.state, self.held = "thinking", stripped[len(self.opening):]
                    continue
                if self.opening.startswith(stripped):  # (whitespace, or part of the tag: wait)
                    return out
                self.state = "answer"
            if self.state == "thinking":
                end = self.held.find(self.closing)
                if end < 0:  # (send what cannot be the tag or the whitespace before it)
                    sent = before_partial(self.held, self.closing).rstrip()
                    self.held = self.held[len(sent):]
                    return out + self._thought(sent)
                out += self._thought(self.held[:end].rstrip())
                self.state, self.held = "after", self.held[end + len(self.closing):]
                continue
            if self.state == "after":  # the whitespace between the thinking and the answer is neither
                self.held = self.held.lstrip()
                if not self.held:
                    return out
                self.state = "answer"
            text, self.held = self.held, ""
            return out + Sorted(content=text)

    def finish(self) -> Sorted:
        """What was held back: a tag begun but never finished is answer text; thinking never closed, thinking."""
        text, self.held = self.held, ""
        if self.state == "thinking":
            return self._thought(text.rstrip())
        return Sorted(content="" if self.state == "after" else text)

    def _thought(self, text: str) -> Sorted:
        """`text`, the thinking's next part, without the whitespace that opens the thinking."""
        sent = text if self.reasoning_begun else text.lstrip()
        self.reasoning_begun = self.reasoning_begun or bool(sent)
        return Sorted(reasoning=sent)


class InlineThought:
    """A stream's thinking put back into its answer between the model's own tags, as llama-server's
    `reasoning_format` "deepseek-legacy" streams it: the opening tag before the thought's first text, the closing
    one before the answer's (a thought never closed stays open)."""

    def __init__(self, tags: tuple[str, str] = (OPEN, CLOSE)) -> None:
        self.opening, self.closing = tags
        self.state = "before"  # then "thinking", then "answer"

    def inlined(self, piece: Sorted) -> Sorted:
        """`piece` of the sorted stream as answer text alone."""
        text = ""
        if piece.reasoning:
            if self.state == "before":
                text, self.state = self.opening, "thinking"
            text += piece.reasoning
        if piece.content:
            if self.state == "thinking":
                text += self.closing
            self.state = "answer"
            text += piece.content
        return Sorted(content=text)


def before_partial(text: str, tag: str) -> str:
    """`text` without the end that may be the start of `tag`."""
    return text[:len(text) - held_back_length(text, [tag])]


def sorted_whole(splitter: Callable[[], Splitter] | None, text: str) -> Sorted:
    """A whole output sorted into thinking and answer by a new splitter of `splitter`'s making (all answer where
    it is None)."""
    if splitter is None:
        return Sorted(content=text)
    sorting = splitter()
    return sorting.feed(text) + sorting.finish()


def split_thought(text: str, opened: bool = False, tags: tuple[str, str] = (OPEN, CLOSE)) -> Sorted:
    """A whole output sorted into thinking and answer (see `ThoughtSplitter`)."""
    return sorted_whole(lambda: ThoughtSplitter(opened, tags), text)
