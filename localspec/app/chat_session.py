"""A chat on loaded models, without the terminal: replies, trimming, cache recovery and the stored copy.

`ChatSession` does what a chat does between the lines a person types: it
trims the conversation to the context, generates the reply (kept as far as it
got when Ctrl-C or a llama.cpp abort stops it, with the caches put right after
a cut-short decode), and stores every change in the history as it happens.
`cli/chat.py` reads the lines, runs the slash commands and prints.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from ..engine.generation import Chunk, Generation
from ..engine.grammar import CompiledGrammar, OutputFormat, compile_format
from ..engine.stats import SpecStats
from ..errors import InputError, LocalspecError, PromptTooLongError
from ..runtime.fatal import on_fatal
from ..runtime.model import common_prefix_length
from ..settings import SEED_MAX
from .conversation import Conversation
from .history import ConversationChanged, HistoryBusy, HistoryStore, HistoryUnavailable
from .memory import conversation_tag, forget_conversation
from .session import Session
from .reasoning import Splitter
from .thinking_first import BUDGET_UNHELD, budget_held, reply_form, template_thinks


LONG_READ_TOKENS = 1000  # a turn with this many tokens not in the cache says it is reading them


@dataclass
class Reply:
    """How a turn ended: the generation (None when none ran), whether Ctrl-C cut it, or the error that undid the turn
    (with `interrupted`: Ctrl-C before the reply began)."""

    generation: Generation | None
    interrupted: bool = False
    error: str | None = None


class ChatSession:
    """One conversation on a loaded session, stored in `store` (None: not saved) as it changes."""

    def __init__(
        self, session: Session, conversation: Conversation, store: HistoryStore | None, conversation_id: int | None,
        *, speculative: bool, warn: Callable[[str], None],
    ) -> None:
        self.session = session
        self.conversation = conversation
        self.store = store
        self.conversation_id = conversation_id
        self.warn = warn
        self.speculative = speculative and self.can_speculate()
        self.whole_save_due = False  # to store the whole conversation next: settings given on resuming, a write refused
        self.last: Generation | None = None
        self.totals = SpecStats()
        self.output_format: OutputFormat | None = None  # what replies are held to (None: free text)
        self.grammar: CompiledGrammar | None = None
        self.sorting: Splitter | None = None  # what sorts the latest reply into thought and answer (None: all answer)
        self.replies_on_seed = _replies_in(conversation)  # replies since the chat's seed was set: the next one's offset
        self.window = 0  # the first message the model sees: older exchanges no longer fit its context
        self.budget_warned = False  # (said once a chat: a reasoning budget this model's tags cannot hold)

    def can_speculate(self) -> bool:
        """Whether the settings' strategy has what it drafts with (a loaded draft model, or lookup alone)."""
        return self.session.draft is not None or not self.conversation.settings.speculative.uses_draft_model

    # -- turns ---------------------------------------------------------------------------

    def ask(self, text: str, on_chunk: Callable[[Chunk], None], on_note: Callable[[str], None]) -> Reply:
        """Add the user's message (stored at once) and generate the reply; when no reply can be made
        (the message does not fit, generation fails) the message goes again and the reply says why."""
        self.conversation.add("user", text)
        self.save_last()
        reply = self._reply(on_chunk, on_note)
        if reply.error is not None:
            self.conversation.messages.pop()
            self.save_all()
        return reply

    def retry(self, on_chunk: Callable[[Chunk], None], on_note: Callable[[str], None],
              seed: int | None = None) -> Reply | None:
        """/retry: generate the last reply again, with the next seed or `seed` (after which the seeds go on from
        it), or the reply a user message at the end still lacks (a chat ended mid-reply by a signal, a saved file
        that ends with one); None where the conversation ends with neither. When no new reply can be made, the
        old one stays."""
        messages = self.conversation.messages
        if messages and messages[-1].role == "user":
            old = None
        else:
            old = self.conversation.drop_last_reply()
            if old is None:
                return None
            self.save_all()
        reply = self._reply(on_chunk, on_note, seed)
        if reply.error is not None and reply.generation is None and not reply.interrupted and old is None:
            reply.error += " (/undo drops that message)"  # (loaded, or left by an ended chat: not to be edited here)
        if reply.error is not None and old is not None:
            self.conversation.messages.append(old)
            self.save_all()
        if seed is not None and reply.error is None:
            self.replies_on_seed = (seed + 1 - (self.conversation.settings.seed or 0)) % (SEED_MAX + 1)
        return reply

    def _reply(self, on_chunk: Callable[[Chunk], None], on_note: Callable[[str], None], seed: int | None = None) -> Reply:
        """Generate the assistant's reply to the conversation so far, streaming each chunk to `on_chunk`, with
        `seed` or else the next one (`next_seed`).

        When even the last message does not fit the context, or the prompt cannot be rendered, or
        generation fails, nothing is added and the reply says why. Ctrl-C ends the reply, not the chat.
        """
        try:
            dropped = self._fit_context()
        except LocalspecError as exc:  # too long, or the chat template refuses these messages
            return Reply(None, error=str(exc))
        except KeyboardInterrupt:  # (fitting a long conversation takes a while): no reply, as if none was asked for
            return Reply(None, interrupted=True, error="stopped before the reply began")
        if dropped:
            on_note(f"(the model no longer sees the {'oldest exchange' if dropped == 1 else f'{dropped} oldest exchanges'}:"
                    " the context is full; the history keeps them)")
        if seed is None:
            seed = self.next_seed()
            self.replies_on_seed += 1
        settings = dataclasses.replace(self.conversation.settings, seed=seed)
        generation: Generation | None = None
        interrupted = False

        def keep_partial_reply() -> str:
            """If llama.cpp aborts mid-reply (an RPC worker gone), keep the reply so far as interrupted."""
            self.conversation.add("assistant", generation.text if generation is not None else "", True)
            self.save_last()
            return "the conversation is kept: `localspec chat --continue` resumes it"

        forget_hook = on_fatal(keep_partial_reply)
        try:
            tokens = self.session.chat_prompt_tokens(self.conversation.prompt_messages(self.window),
                                                     variables=self.conversation.template_variables)
            unread = len(tokens) - common_prefix_length(self.session.target.tokens, tokens)
            if unread >= LONG_READ_TOKENS:  # (seconds of silence on a CPU otherwise: a pasted document)
                on_note(f"(reading {unread} tokens…)")
            budget = settings.thought_budget
            form = reply_form(self.session.chat_template(), self.session.target, tokens, self.output_format,
                              self.grammar.grammar if self.grammar is not None else None, budget)
            if form.thinks and budget is not None and not self.budget_warned:
                if not budget_held(self.session.chat_template(), self.session.target):
                    self.warn(f"warning: the reasoning budget is not held: {BUDGET_UNHELD}")
                    self.budget_warned = True
            self.sorting = form.splitter() if form.splitter is not None else None
            generation = self.session.generation(tokens, settings.with_budget(form.grammar is not None, form.thinks),
                                                 speculative=self.speculative, grammar=form.grammar)
            for chunk in generation:
                on_chunk(chunk)
        except KeyboardInterrupt:
            self.session.recover_caches()  # a decode may have been cut short before its bookkeeping
            if generation is None or not generation.tokens:  # (reading the prompt): as if nothing was asked
                return Reply(None, interrupted=True, error="stopped before the reply began")
            interrupted = True
        except LocalspecError as exc:
            return Reply(None, error=str(exc))
        finally:
            forget_hook()
        self.conversation.add("assistant", generation.text if generation is not None else "", interrupted)
        self.save_last()
        if generation is not None and not interrupted and self.conversation_id is not None and self.store is not None:
            # (a chat not saved, or no longer: its history gone, or the conversation removed, is not kept there either)
            self.session.remember(generation, "chat", conversation_tag(self.conversation_id))
        if generation is not None:
            self.last = generation
            self.totals.add(generation.stats)
        return Reply(generation, interrupted)

    def _fit_context(self) -> int:
        """Move the window of messages the model sees past the oldest exchanges until the prompt leaves room
        for a reply; return how many exchanges it left behind. The conversation (and its stored copy) keeps
        them all. InputError when even the last message does not fit."""
        session, conversation = self.session, self.conversation
        if conversation.messages:  # (one that cannot fit whatever its tokens is refused before llama.cpp tokenizes it)
            session.refuse_text_too_long([conversation.messages[-1].content], "the message")
        old = min(self.window, len(conversation.messages))

        def prompt_length(messages: list[dict[str, str]]) -> int:
            return len(session.chat_prompt_tokens(messages, variables=conversation.template_variables))

        self.window = conversation.window_start(prompt_length, self._prompt_room(), old,
                                                self.session.larger_context_hint())
        return sum(message.role == "assistant" for message in conversation.messages[old:self.window])

    def _prompt_room(self) -> int:
        """The tokens a prompt may take: the context less the room kept for a reply (its budget, at most a
        quarter of the context)."""
        session = self.session
        budget = self.conversation.settings.budget(self.grammar is not None, template_thinks(session.chat_template()))
        return session.target.n_ctx - min(budget, session.target.n_ctx // 4)

    def next_seed(self) -> int:
        """The seed of the next reply: the chat's seed for its first reply, one more for each reply after it (a
        resumed conversation goes on counting from its replies); after `/set seed N`, N for the next reply."""
        return ((self.conversation.settings.seed or 0) + self.replies_on_seed) % (SEED_MAX + 1)

    # -- edits -----------------------------------------------------------------------------

    def set(self, key: str, value: str) -> str:
        """`/set KEY VALUE`; returns the dotted key set."""
        dotted = self.conversation.set(key, value)
        if dotted == "sampling.seed":
            self.replies_on_seed = 0
        self.save_all()
        return dotted

    def set_system(self, text: str | None, stored_with_next_message: bool = False) -> None:
        """`/system`: the system prompt for the replies that follow (None: none). One that cannot fit the context
        beside a reply is InputError, and the current one stays (every message after it would fail).
        `stored_with_next_message`: stored with the next message, not now (`--system` on resuming a chat, which a
        chat left without a message must not change)."""
        if text:
            session = self.session
            try:
                session.refuse_text_too_long([text], "the system prompt")
            except PromptTooLongError as exc:  # (said as the command's error: the chat goes on)
                raise InputError(str(exc)) from None
            room = self._prompt_room()
            n_tokens = len(session.target.tokenize(text, add_special=False))
            if n_tokens > room:
                raise InputError(f"the system prompt does not fit the context ({n_tokens} tokens, room for {room}"
                                 f" beside a reply): shorten it{session.larger_context_hint()}")
        self.conversation.system = text
        if stored_with_next_message:
            self.whole_save_due = True
        else:
            self.save_all()

    def set_format(self, fmt: OutputFormat | None, compiled: CompiledGrammar | None = None) -> CompiledGrammar | None:
        """`/format`: hold the next replies to `fmt` (None: free text), compiled here unless `compiled` is given.

        An invalid format raises InputError and leaves the current one in place.
        """
        if fmt is not None and compiled is None:
            compiled = compile_format(fmt)
        self.output_format, self.grammar = fmt, compiled if fmt is not None else None
        return self.grammar

    def set_speculative(self, on: bool) -> None:
        if on and not self.can_speculate():
            raise InputError("no draft model is loaded: restart the chat with one, or /set strategy ngram")
        self.speculative = on

    def undo(self) -> int:
        """Drop the last exchange; return how many messages went. A stored conversation left without a message
        is removed from the history (and its tokens from the memory), to be stored again once it has one."""
        dropped = self.conversation.undo()
        if dropped:
            self.last = None  # (/stats: the reply it dropped is not the last reply any more)
        if self.conversation.messages or self.conversation_id is None or self.store is None:
            self.save_all()
        else:
            self._discard_stored()
        return dropped

    def _discard_stored(self) -> None:
        """Remove the stored conversation, now empty, and its tokens from the memory; it is stored again as a new
        conversation once it has a message. One another chat has written to since is left to that chat."""
        conversation_id, self.conversation_id = self.conversation_id, None
        discarded: list[bool] = []

        def discard(store: HistoryStore) -> None:
            try:
                store.discard(conversation_id)
            except ConversationChanged as exc:
                self.warn(f"note: {exc} meanwhile; it is kept, and this chat goes on as a new one")
                return
            discarded.append(True)

        self._store(discard)  # (a history gone: said there, and the chat is no longer saved)
        if not discarded:
            return
        try:
            forget_conversation(conversation_id)
        except OSError as exc:
            self.warn(f"warning: conversation {conversation_id}'s tokens stay in the memory ({exc.strerror or exc}):"
                      f" `localspec history remove {conversation_id}` removes them")

    def reset(self) -> None:
        """A new conversation with the same settings, system prompt and template variables, stored once it has a
        message."""
        old = self.conversation
        self.conversation = Conversation(old.settings, old.system, template_variables=old.template_variables)
        self.conversation_id = None
        self.window = 0
        self.session.reset_caches()

    def load(self, conversation: Conversation) -> None:
        """Continue `conversation` (from /load) as a new stored one."""
        self.conversation = conversation
        self.conversation_id = None
        self.window = 0
        self.replies_on_seed = _replies_in(conversation)
        self.save_all()

    # -- storage -------------------------------------------------------------------------

    def save_last(self) -> None:
        """Store the newest message (one transaction), starting the stored conversation if needed."""
        if self.whole_save_due:
            self.save_all()
            return
        self._store(lambda store: store.add(self.conversation_id, self.conversation.messages[-1])
                    if self.conversation_id is not None else self._start(store))

    def save_all(self) -> None:
        """Store the whole conversation again (after an edit); one not stored yet is stored once it has a message."""
        if self.conversation_id is None and not self.conversation.messages:
            return
        self.whole_save_due = False
        self._store(lambda store: store.update(self.conversation_id, self.conversation)
                    if self.conversation_id is not None else self._start(store))

    def _start(self, store: HistoryStore) -> None:
        self.conversation_id = store.start(self.conversation)

    def _store(self, action: Callable[[HistoryStore], None]) -> None:
        if self.store is None:
            return
        try:
            try:
                action(self.store)
            except ConversationChanged as exc:  # another chat resumed it too: keep both, this one as a new conversation
                self._start(self.store)
                self.warn(f"note: {exc} meanwhile; this chat goes on as conversation {self.conversation_id} (both are kept)")
        except HistoryBusy as exc:  # (another process's long transaction: the whole conversation is stored next time)
            self.warn(f"warning: {exc}; it is stored again with the next message")
            self.whole_save_due = True
        except HistoryUnavailable as exc:
            self.warn(f"warning: {exc}; this chat is no longer saved")
            self.store = None


def _replies_in(conversation: Conversation) -> int:
    return sum(message.role == "assistant" for message in conversation.messages)
