"""gpt-oss's replies in OpenAI's harmony format: its thinking in an `analysis` channel, its answer in `final`.

After the prompt's `<|start|>assistant`, gpt-oss writes messages such as

    <|channel|>analysis<|message|>The user asks…<|end|><|start|>assistant<|channel|>final<|message|>Four.

ending at `<|return|>` (or, for a call, ` to=functions.NAME<|channel|>commentary json<|message|>{…}` ending at
`<|call|>`: see tool_call_frames). llama.cpp writes these markers as text (it renders `<|channel|>`,
`<|message|>`, `<|start|>` and `<|end|>` for gpt-oss's vocabulary). `HarmonySplitter` sorts such an output,
as it streams, into the analysis (the thinking) and the rest: a final message's text without its header, any
other message as written (a call, read back by its frame). `thinking_rules` lets a grammar for tools start with
the analysis, so that gpt-oss thinks before it answers or calls, as it was trained to.
"""

from __future__ import annotations

import json
from typing import Callable

from .reasoning import Sorted, before_partial, sorted_whole
from .tool_call_xml import regex_text

CHANNEL, MESSAGE, END, START = "<|channel|>", "<|message|>", "<|end|>", "<|start|>"
ANALYSIS = f"{CHANNEL}analysis{MESSAGE}"
FINAL = f"{CHANNEL}final{MESSAGE}"
NEXT = f"{END}{START}assistant"  # between one message of the reply and the next


def is_harmony(template: str | None) -> bool:
    """Whether `template` writes replies in the harmony format (gpt-oss's)."""
    return template is not None and CHANNEL in template and MESSAGE in template and "analysis" in template


class HarmonySplitter:
    """Sorts a harmony output into its analysis and the rest as it streams (see the module's docstring), holding
    back only what may yet turn out to be a marker; `finish` gives what was held back."""

    def __init__(self) -> None:
        self.state = "header"  # a message's start: analysis, final, or anything else (then written as it is)
        self.held = ""

    def feed(self, text: str) -> Sorted:
        self.held += text
        out = Sorted()
        while self.held:
            if self.state == "header":
                for header, state in ((ANALYSIS, "analysis"), (FINAL, "content")):
                    if self.held.startswith(header):
                        self.state, self.held = state, self.held[len(header):]
                        break
                else:
                    if ANALYSIS.startswith(self.held) or FINAL.startswith(self.held):
                        return out  # (a header begun: wait)
                    self.state = "rest"
                continue
            if self.state == "analysis":
                end = self.held.find(NEXT)
                if end < 0:
                    sent = before_partial(self.held, NEXT)
                    self.held = self.held[len(sent):]
                    return out + Sorted(reasoning=sent)
                out += Sorted(reasoning=self.held[:end])
                self.state, self.held = "header", self.held[end + len(NEXT):]
                continue
            text, self.held = self.held, ""
            return out + Sorted(content=text)
        return out

    def finish(self) -> Sorted:
        """What was held back: an unfinished header or marker is text; analysis never closed, analysis."""
        text, self.held = self.held, ""
        return Sorted(reasoning=text) if self.state == "analysis" else Sorted(content=text)


def split_harmony(text: str) -> Sorted:
    """A whole harmony output sorted into its analysis and the rest (see `HarmonySplitter`)."""
    return sorted_whole(HarmonySplitter, text)


def thinking_rules(marker_token: Callable[[str], int | None], free_answer: bool = True,
                   budget: int | None = None) -> list[str]:
    """Lark rules for an analysis message that may open a harmony reply held to a grammar (rule `analysis`), and
    for a final message (rule `final`) of free text, or (not `free_answer`) of what rule `answer` holds it to:
    each marker named as the special token it is (else spelled out, and the analysis then read up to the first
    spelled end). `budget`: the most tokens the analysis may hold before its end is written for it (held where
    that end is a special token)."""
    channel, message, end, start = (_named(text, marker_token) for text in (CHANNEL, MESSAGE, END, START))
    if marker_token(END) is not None:  # (a text lexeme cannot hold a special token: it ends where the token comes)
        analysis = f'analysis: {channel} "analysis" {message} thought {end} {start} "assistant"'
        # (nor spell the markers that end it or begin the final message: what reads the output looks for those)
        bound = "" if budget is None else f"[max_tokens={budget}]"
        thought = (f"thought{bound}: THOUGHT\n"
                   f"THOUGHT: /(?s:.*)/ & ~/(?s:.*({regex_text(NEXT)}|{regex_text(FINAL)}).*)/")
        if budget == 0:  # (the analysis's end at once)
            analysis = analysis.replace(" thought ", " ")
    else:
        analysis = f'analysis: {channel} "analysis" {message} thought {start} "assistant"'
        thought = r"thought[lazy]: /(?s:.*)<\|end\|>/"
    final = f'final: {channel} "final" {message} answer'
    return [analysis, thought, final, "answer: /(?s:.*)/"] if free_answer else [analysis, thought, final]


def _named(text: str, marker_token: Callable[[str], int | None]) -> str:
    token = marker_token(text)
    return json.dumps(text) if token is None else f"<[{token}]>"
