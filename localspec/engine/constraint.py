"""A grammar held over one generation: which tokens may come next, token by token.

`TokenGrammar` wraps an llguidance matcher over the target's vocabulary. The
generation loop asks it for the allowed tokens at each position (the mask that
`next_token_probs` applies before anything else), for the tokens the grammar
forces, and feeds it only tokens that are finally emitted. Drafters work on a
`copy()`: a draft model samples from its distribution masked the same way, a
lookup draft is cut at the first token the grammar rejects.

A matcher that is fed a token it does not allow enters an error state for good,
so every token is validated (by the mask it was drawn under, or `validate`)
before it is consumed.

Rules llguidance does not hold are held here beside it: `uniqueItems` over
strings and numbers, and unique keys in objects that take keys they do not list
(`unique_items.UniqueItems`), which takes out of every mask the tokens that would
repeat an item or a key, and cuts drafts there.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from ..errors import InputError, LocalspecError, OutputFormatError
from ..runtime.model import Model
from .deep_stack import on_a_deep_stack
from .grammar import TOO_MUCH_FORCED
from .unique_items import UniqueItems

_REPEATS_AN_ITEM = "every way on repeats an earlier item of an array whose items must be unique (uniqueItems)"


class EveryWayRepeats(OutputFormatError):
    """Every token the grammar allows next would repeat an item of an array with `uniqueItems`. Unlike after
    llguidance's own errors, the matcher is not in an error state and can step back: a draft that led here
    is cut before the token that did."""


class UnusableFormat(InputError):
    """llguidance refused the grammar over the model's own vocabulary (a special token it lacks, a token id past
    its end): found only once the model is loaded."""


# Forced tokens past any context: llguidance computed them up to its limit (see `grammar.TOO_MUCH_FORCED`).
_FORCED_TOKENS_FOLLOWED = 10_000


class TokenGrammar:
    """An llguidance matcher over a vocabulary of `n_vocab` tokens."""

    def __init__(self, matcher: Any, n_vocab: int, unique: UniqueItems | None = None, steps_back: bool = True) -> None:
        self._matcher = matcher
        self.n_vocab = n_vocab
        self._unique = unique  # uniqueItems and unique keys, where llguidance does not hold them (unique_items.py)
        self._steps_back = steps_back  # llguidance rolls it back (not over a lexeme with `stop=` or `max_tokens=`)

    @classmethod
    def start(cls, model: Model, grammar: str) -> "TokenGrammar":
        """A fresh matcher for `grammar` (an llguidance grammar string) over `model`'s vocabulary."""
        from llguidance import LLMatcher

        tokenizer = model.grammar_tokenizer()
        matcher = on_a_deep_stack(lambda: LLMatcher(tokenizer, grammar, log_level=0))  # (it compiles: see there)
        if matcher.is_error():
            raise UnusableFormat(f"the output format cannot be used: {_first_line(matcher.get_error())}")
        unique = UniqueItems.for_grammar(grammar, model)
        return cls(matcher, model.n_vocab, unique, steps_back=_LEXEME_LIMITS.search(grammar) is None)

    def copy(self) -> "TokenGrammar":
        """An independent copy (a drafter advances it along its draft)."""
        unique = self._unique.copy() if self._unique is not None else None
        return TokenGrammar(self._matcher.deep_copy(), self.n_vocab, unique, self._steps_back)

    @property
    def stopped(self) -> bool:
        """The grammar is complete: it takes no more tokens (an end-of-generation token at most)."""
        self._raise_on_error()
        return bool(self._matcher.is_stopped())

    @property
    def accepting(self) -> bool:
        """What was consumed is a whole match of the grammar (more may still be allowed: `\\d+` after a digit)."""
        self._raise_on_error()
        return bool(self._matcher.is_accepting())

    def forced(self) -> int | None:
        """The token the grammar forces next, or None where it leaves a choice.

        Where the grammar allows only one continuation (the `{"name": "` of a
        schema), llguidance tokenizes it; its first token is what comes next,
        whoever decodes: target-only and speculative decoding emit the same tokens.
        """
        tokens = self._matcher.compute_ff_tokens()
        self._raise_on_error()
        if len(tokens) >= _FORCED_TOKENS_FOLLOWED:  # llguidance stopped at its limit: its matcher cannot step back now
            raise OutputFormatError(f"the output format cannot be completed from here: {TOO_MUCH_FORCED}")
        if not tokens or self._matcher.validate_tokens(tokens[:1]) != 1:
            return None  # a vocabulary that spells the forced text unlike its own tokens leaves the choice open
        if self._unique is not None and self._unique.taken(tokens[:1]) != 1:
            raise EveryWayRepeats(f"the output format cannot be completed from here: {_REPEATS_AN_ITEM}")
        return int(tokens[0])

    def allowed(self) -> np.ndarray:
        """The sorted ids of the tokens allowed next: the forced token alone where there is one."""
        return self.next_tokens()[0]

    def allowed_along(self, tokens: Sequence[int]) -> tuple[list[np.ndarray], list[bool]]:
        """The allowed tokens before each draft token kept and after the last, and which were forced.

        A draft is kept up to the grammar's end, and where the grammar forces a
        token, only if it is that token (a lookup may spell forced text otherwise):
        the draft keeps len(masks) - 1 tokens, up to the first the grammar does
        not allow (the matcher never sees a token it has not allowed: its errors
        are permanent), or the first after which every way on repeats an item of
        an array with `uniqueItems`. The state is unchanged (the draft is walked
        and stepped back, or walked on a copy where llguidance cannot step back).
        """
        walker = self if self._steps_back else self.copy()
        mask, forced = walker.next_tokens()
        masks, forced_at = [mask], [forced]
        for token in tokens:
            at = int(np.searchsorted(mask, token))
            if walker.stopped or at == len(mask) or mask[at] != token:
                break
            walker.consume([token])
            try:
                mask, forced = walker.next_tokens()
            except EveryWayRepeats:  # the draft ends before the token after which every way on repeats an item
                if walker is self:
                    self._rollback(1)
                break
            masks.append(mask)
            forced_at.append(forced)
        if walker is self:
            self._rollback(len(masks) - 1)
        return masks, forced_at

    def next_tokens(self) -> tuple[np.ndarray, bool]:
        """The sorted ids allowed next, and whether that is one token the grammar forces.

        A grammar that cannot be completed from here (a regex that matches nothing,
        a rule that never ends, a limit of llguidance's reached) is an OutputFormatError,
        never an end passed off as complete.
        """
        forced = self.forced()
        if forced is not None:
            return np.array([forced]), True
        bits = np.unpackbits(np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed = np.flatnonzero(bits[: self.n_vocab])
        self._raise_on_error()
        if len(allowed) == 0 and not self._matcher.is_stopped():
            raise OutputFormatError("the output format cannot be completed from here: it allows no token")
        if self._unique is not None:
            allowed = self._unique.allowed(allowed)
            if len(allowed) == 0:
                raise EveryWayRepeats(f"the output format cannot be completed from here: {_REPEATS_AN_ITEM}")
        return allowed, False

    def _raise_on_error(self) -> None:
        """A matcher in its error state (the format cannot be completed, or a limit was reached) is a one-line error."""
        if self._matcher.is_error():
            raise OutputFormatError(f"the output format cannot be completed from here: {_first_line(self._matcher.get_error())}")

    def forced_run(self, first: int, limit: int) -> list[int]:
        """Consume the forced token `first` and those forced after it, at most `limit` in all; return them."""
        run = [first]
        self.consume(run)
        while len(run) < limit and not self.stopped:
            forced = self.forced()
            if forced is None:
                break
            self.consume([forced])
            run.append(forced)
        return run

    def validate(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the first, the grammar accepts in a row."""
        if not tokens:
            return 0
        valid = int(self._matcher.validate_tokens(list(tokens)))
        return self._unique.taken(tokens[:valid]) if self._unique is not None else valid

    def consume(self, tokens: Sequence[int]) -> None:
        """Advance over `tokens`, which the grammar has allowed."""
        if self._unique is not None and not self._unique.consume(tokens):  # (first: it steps over all or none)
            raise OutputFormatError(f"the output format stopped with an error: {_REPEATS_AN_ITEM}")
        if tokens and not self._matcher.consume_tokens(list(tokens)):
            raise OutputFormatError(f"the output format stopped with an error: {_first_line(self._matcher.get_error())}")

    def _rollback(self, n: int) -> None:
        if n and not self._matcher.rollback(n):
            raise LocalspecError(f"the grammar could not step back: {_first_line(self._matcher.get_error())}")
        if self._unique is not None:
            self._unique.rollback(n)


# A lexeme with a stop string or a token limit (`x[stop="\\n", max_tokens=10]: /.*/`, in a Lark grammar): llguidance
# cannot roll a matcher back over one ("rollback not supported with max_tokens=... or stop=... lexemes").
_LEXEME_LIMITS = re.compile(r"\b(?:stop|max_tokens)\s*=")


# llguidance's words where a token its tokenizer gave for forced text spells other bytes.
_MISSPELT_FORCED_TEXT = re.compile(r"forced bytes: got (?P<forced>'[^\n]*?'); applying (?P<written>'[^\n]*?')\s*$",
                                   re.MULTILINE)


def _first_line(text: str) -> str:
    """llguidance's message, its first line; in plain words where it reached its limit on forced text."""
    if "Too many items" in text and "ff_tokens" in text:
        return TOO_MUCH_FORCED
    if text.startswith("NoExtensionBias"):  # (llguidance's name for a state no token can leave)
        return "no text it allows can follow what was written"
    spelled = _MISSPELT_FORCED_TEXT.search(text)
    if spelled:  # (a vocabulary without a piece for a forced byte, such as SentencePiece's lone "▁" for a space)
        return (f"the model's tokenizer spells the text the format forces here ({spelled['forced']}) with tokens that"
                f" write {spelled['written']}: its vocabulary cannot write that text")
    return text.strip().splitlines()[0] if text.strip() else "no reason given"
