"""A thinking model's reply: sorted into its thought and its answer, and, held to a format, let think first.

A format that holds a reply from its first token leaves a thinking model no room to think: Qwen3 or gpt-oss
must write JSON at once, and a prompt that opened the thought (DeepSeek R1's `<think>\\n`) has the answer written
inside it. `thinking_format` puts the format after the thought instead: `<think>…</think>` and its kin
(`reasoning.Thinking`), as special tokens of the model's vocabulary or spelled in ordinary ones (the thought then
ends at the first spelling of its closing tag), or gpt-oss's analysis and its final message's header
(`harmony`). The reply's answer, what `run` prints and `serve` sends as `content`, is then what the format
holds; its thought is `reasoning_content`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

from ..engine.grammar import OutputFormat
from ..engine.prelude import Prelude, after_prelude
from ..runtime.model import Model
from .harmony import CHANNEL, END, FINAL, HarmonySplitter, is_harmony, thinking_rules as harmony_rules
from .reasoning import (
    Splitter,
    Thinking,
    ThoughtSplitter,
    closed_by,
    opened_by,
    template_thinking,
    thinking_rules,
    thought_tags,
)
from .tool_calls import marker_tokens

PROMPT_END_TOKENS = 8  # (enough for the longest opening, `<|START_THINKING|>` and the whitespace after it)
# Free text as a format's grammar: a free reply's answer, after a thought that a budget bounds.
FREE_TEXT = json.dumps({"grammars": [{"name": "localspec_free_text",
                                      "lark_grammar": "%llguidance {}\nstart: FREE_TEXT?\nFREE_TEXT: /(?s:.+)/\n"}]})


def prompt_end(model: Model, tokens: Sequence[int]) -> str:
    """The text of a prompt's last tokens, special tokens spelled: what tells whether it opened a thought."""
    return "".join(model.detokenize_special(token) for token in tokens[-PROMPT_END_TOKENS:])


def reply_splitter(template: str | None, end: str) -> Callable[[], Splitter] | None:
    """What sorts a free reply of a prompt ending in `end` into thought and answer, made anew for each reply:
    gpt-oss's harmony channels, or thinking tags (`reasoning.thought_tags`), opened by the prompt or not; None
    where the template's model does not think."""
    if is_harmony(template):
        return HarmonySplitter
    tags = thought_tags(template)
    if tags is None:
        return None
    opened = opened_by(end, tags[0])
    return lambda: ThoughtSplitter(opened, tags)


def template_thinks(template: str | None) -> bool:
    """Whether the template's model may think before it answers (harmony, or tags: `reasoning.thought_tags`)."""
    return is_harmony(template) or thought_tags(template) is not None


def may_think(template: str | None, end: str) -> bool:
    """Whether a reply to a prompt ending in `end` may think first: the template's model thinks (harmony, or tags:
    `reasoning.thought_tags`), and the prompt did not close the thought itself (Qwen3's `enable_thinking` off)."""
    if is_harmony(template):
        return True
    tags = thought_tags(template)
    return tags is not None and not closed_by(end, tags[1])


def tools_think_otherwise(thinking: Thinking, end: str) -> bool:
    """Whether a prompt ending in `end` opens or closes the thought otherwise than the template's own prompt does,
    which tools' grammar (`Thinking`) was made for: a template variable's doing (DeepSeek V3.1's `thinking`,
    Qwen3's `enable_thinking`); the tools are then prepared again for it (`prepare_tools`)."""
    return thinking.after_prompt(end) != thinking


def said_after_thinking(fmt: OutputFormat) -> bool:
    """Whether `fmt` holds a thinking model's answer after its thought: not a grammar the user wrote, which says
    the whole output (and may spell a thought of its own)."""
    return fmt.kind != "grammar"


class ReplyForm(NamedTuple):
    """How a chat reply is held and read: the grammar it is held to (None: free text), what sorts it into thought
    and answer (None: all answer), and whether it may think first."""

    grammar: str | None
    splitter: Callable[[], Splitter] | None
    thinks: bool


def reply_form(template: str | None, model: Model, prompt_tokens: Sequence[int], fmt: OutputFormat | None,
               grammar: str | None, budget: int | None = None) -> ReplyForm:
    """The form of a reply to `prompt_tokens` under `fmt` (compiled: `grammar`; None: free text; `fmt` None with
    a grammar: a response format's): a free reply sorted where the model thinks, a format after the thought where
    it may write one (`thinking_format`), else held from its first token. `budget`: the most tokens a thought may
    hold (None: no bound), held where `budget_held` says, free text then held to a grammar of its own."""
    end = prompt_end(model, prompt_tokens)
    if grammar is None:
        bounded = (thinking_format(FREE_TEXT, template, marker_tokens(model), end, budget=budget)
                   if budget is not None and may_think(template, end) and budget_held(template, model) else None)
        if bounded is not None:
            return ReplyForm(bounded.grammar, bounded.splitter, True)
        return ReplyForm(None, reply_splitter(template, end), may_think(template, end))
    held = (thinking_format(grammar, template, marker_tokens(model), end, fmt is not None and fmt.kind == "regex",
                            budget)
            if fmt is None or said_after_thinking(fmt) else None)
    return ReplyForm(held.grammar, held.splitter, True) if held is not None else ReplyForm(grammar, None, False)


BUDGET_UNHELD = "this model's tag that closes a thought is no special token of its vocabulary"


def budget_held(template: str | None, model: Model) -> bool:
    """Whether a thinking budget can bound the thought of `template`'s model: where the tag (or harmony's marker)
    that closes a thought is one special token, which the grammar then writes once the budget is spent (a closing
    tag spelled in ordinary tokens ends the text lexeme that is the thought, which no token count can end)."""
    marker_token = marker_tokens(model)
    if is_harmony(template):
        return marker_token(END) is not None and marker_token(CHANNEL) is not None
    thinking = template_thinking(template, marker_token, spelled=True)
    return thinking is not None and thinking.close_token is not None


@dataclass(frozen=True)
class ThinkingFormat:
    """A format's grammar with a thought allowed before it, and what sorts the reply into thought and answer."""

    grammar: str
    splitter: Callable[[], Splitter]


def thinking_format(grammar: str, template: str | None, marker_token: Callable[[str], int | None],
                    end: str, answer_may_start_as_a_tag: bool = True, budget: int | None = None
                    ) -> ThinkingFormat | None:
    """`grammar` (a format's, as `compile_format` gives it: not a grammar of the user's, which says the whole
    output, see `said_after_thinking`) for the reply of a prompt ending in `end`, after the thought the template's
    model may write first (see the module's docstring); None where it writes none, or the prompt closed the thought
    already (Qwen3's `enable_thinking` off): the reply is then held to the format from its first token. So it is
    where the model's tags are no special tokens of its vocabulary and, unless the prompt opened the thought, the
    format's answer may begin as the opening tag does (`answer_may_start_as_a_tag`: a regex's; never JSON): its
    output could not be told from a thought. `marker_token(text)`: the id of the special token that is `text`
    (`tool_calls.marker_tokens`); `budget`: the most tokens the thought may hold (`reasoning.thinking_rules`)."""
    if is_harmony(template):
        if marker_token(CHANNEL) is None:  # (spelled, an analysis could write the final header itself)
            return None
        prelude = Prelude(None, FINAL.encode())
        return ThinkingFormat(after_prelude(grammar, "analysis? final", harmony_rules(marker_token, False, budget),
                                                prelude),
                              HarmonySplitter)
    thinking = template_thinking(template, marker_token, spelled=True)
    thinking = thinking.after_prompt(end) if thinking is not None else None
    if thinking is None or (thinking.open_token is None and not thinking.opened and answer_may_start_as_a_tag):
        return None
    start, rules = thinking_rules(thinking, "answer", "answer", budget=budget)
    opening, closing = (tag.encode() for tag in thinking.tags)
    prelude = Prelude(None if thinking.opened else opening, closing)
    return ThinkingFormat(after_prelude(grammar, start, rules, prelude),
                          lambda: ThoughtSplitter(thinking.opened, thinking.tags))
