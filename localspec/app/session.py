"""Loaded models ready to generate: shared by `run`, `chat` and `bench`.

`open_session(plan)` loads the plan's target (and draft) into llama.cpp; a
`Session` turns messages or raw text into prompt tokens and starts generations.
"""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config.resolve import DEFAULT_SOURCE
from ..engine.draft_length import LearnedLengths
from ..engine.drafters import build_drafter, drafts_from_memory
from ..engine.generation import Generation
from ..errors import InputError, PromptTooLongError
from ..runtime.chat_template import SpecialTexts, render_chat_chunks
from ..runtime.devices import gpu_devices
from ..runtime.library import forget_thread_errors, lone_token_computed_like_a_batch
from ..runtime.model import Model, runs_on_cpu_alone
from ..settings import ChatSettings, GenerationSettings, ModelSettings
from .learned_lengths import LengthCache
from .memory import SessionMemory, open_store
from .plan import Plan
from .prompt_cache import PromptCache
from .repack import Repacking, repacking_for, verbose_notes

CHEAP_BYTES_PER_TOKEN = 4  # below this many bytes a token of context, `refuse_text_too_long` does not scan the vocabulary
MAX_SPECIAL_VERDICTS = 256  # contents remembered by `Session._holds_special_text`



def no_chat_template(model_name: str) -> str:
    """What is said where a prompt would go through a chat template the model does not have."""
    return (f"{model_name} has no chat template: use plain completion (`run --raw`, `bench --raw`),"
            " or give it one (a profile's [chat] template)")

class Session:
    """A target and an optional draft model loaded together."""

    def __init__(
        self, target: Model, draft: Model | None = None, chat: ChatSettings = ChatSettings(),
        length_cache: LengthCache | None = None, memory: SessionMemory | None = None,
        prompt_cache: PromptCache | None = None,
    ) -> None:
        """`length_cache`: where adaptive draft lengths are loaded from now and saved to on `close` (none: kept in memory);
        `memory`: the memory of earlier text to draft from and add to (none: no memory);
        `prompt_cache`: where the models' reading of the last prompt is restored from, for the models whose
        settings allow it, when they hold nothing yet, and saved to on `close` (none: not kept)."""
        self.target = target
        self.draft = draft
        self.chat = chat
        self.length_cache = length_cache
        self.memory = memory
        self.prompt_cache = prompt_cache
        # More of the chat template's inputs by name (`--chat-template-kwargs`): every prompt's, unless one says.
        self.template_variables: dict[str, Any] = {}
        self._last_prompt: list[int] | None = None  # the latest generation's prompt (what `close` saves)
        self._special_verdicts: dict[str, bool] = {}  # content -> holds special-token text (`_holds_special_text`)
        self._draft_same_shape: bool | None = None  # (`_draft_copies_the_target`, asked once)
        # Adaptive draft-length controllers, kept across generations (and across runs with a cache).
        self.learned_lengths = length_cache.load() if length_cache is not None else LearnedLengths()

    def generation(
        self, prompt_tokens: Sequence[int], settings: GenerationSettings, *, speculative: bool = True,
        grammar: str | None = None, stop_requested: Callable[[], bool] | None = None,
    ) -> Generation:
        """A generation from `prompt_tokens` with the settings' drafting strategy (target only when
        `speculative` is off, or when the strategy needs a draft model and there is none), held to
        `grammar` (an llguidance grammar string, see `engine.grammar`) when one is given; `stop_requested`:
        see `Generation`."""
        if self.prompt_cache is not None:
            for model in self._prompt_cached_models():
                if not model.tokens and (model.flash_attention_off or not _drafts_decide_the_text(settings)):
                    self.prompt_cache.restore(model, prompt_tokens)
            self._last_prompt = list(prompt_tokens)
        if self.draft is not None and self.draft.restored_positions and _drafts_decide_the_text(settings):
            # Where its probabilities enter the text, the draft model holds only what it read itself: not what an
            # earlier generation copied from the target (`_draft_copies_the_target`) or restored from a saved prompt.
            self.draft.clear()
        drafter = None
        if speculative and (self.draft is not None or not settings.speculative.uses_draft_model):
            memory = self.memory if self.memory is not None and drafts_from_memory(settings.speculative) else None
            drafter = build_drafter(settings.speculative, settings.sampling, self.draft, self.learned_lengths,
                                    constrained=grammar is not None, memory=memory.index() if memory else None,
                                    memory_use=memory.use if memory else None, word_form=self.target.word_form,
                                    copies_from=self.target if self._draft_copies_the_target(settings) else None)
        return Generation(self.target, prompt_tokens, settings, drafter, grammar, stop_requested)

    def _draft_copies_the_target(self, settings: GenerationSettings) -> bool:
        """Whether the draft model takes what the target has read from the target's cache rather than reading
        it: a draft of the target's own shape (`Model.same_shape`: the same weights at another precision, as
        `draft make` writes) computed by the CPU (a GPU reads faster than a copy goes through the host's memory),
        where its probabilities do not enter the text (the target's keys and values give the draft other
        probabilities than its own reading would: closer to the target's)."""
        if self.draft is None or not self.draft.computed_by_cpu_alone or _drafts_decide_the_text(settings):
            return False
        if self._draft_same_shape is None:
            self._draft_same_shape = self.draft.same_shape(self.target)
        return self._draft_same_shape

    def remember(self, generation: Generation, source: str, tag: str | None = None) -> None:
        """Add a finished generation's prompt and output to the memory (when there is one and its settings use it)."""
        if self.memory is not None and generation.settings.speculative.memory:
            self.memory.remember(generation.prompt_tokens, generation.tokens, source, tag)

    def refuse_text_too_long(self, texts: Sequence[str], what: str = "the prompt") -> None:
        """PromptTooLongError when the prompt's texts (a prompt, or the messages' contents) cannot fit the largest
        context the target can have, whatever their tokens: checked before tokenizing, which takes llama.cpp
        minutes over megabytes of text. A prompt of up to a few bytes a token is let through without the check.
        `what`: the texts, as the error names them."""
        n_bytes = sum(len(text.encode("utf-8", "replace")) for text in texts)
        limit = self.target.context_limit
        if n_bytes <= CHEAP_BYTES_PER_TOKEN * limit:
            return
        longest = self.target.longest_token_bytes()
        if n_bytes > longest * limit:
            raise PromptTooLongError(f"{what} is {n_bytes} bytes, more than a context of {limit} tokens can hold"
                                     f" (this vocabulary's tokens are at most {longest} bytes): shorten {what}")

    def larger_context_hint(self) -> str:
        """What to add to "shorten it" where a prompt does not fit: " or raise --n-ctx" where the target takes a
        larger context, else why a larger one would not help (the context is already what it was trained for; a
        draft trained for less gets a context of its own, `Model`'s bound)."""
        trained = getattr(self.target, "n_ctx_train", 0)
        if trained > 0 and self.target.n_ctx >= trained:
            return f" (the target was trained for {trained} tokens: a larger --n-ctx would not help)"
        return " or raise --n-ctx"

    def raw_prompt_tokens(self, text: str) -> list[int]:
        """Plain completion: the text as it is, with BOS where the vocabulary asks for it."""
        return self.target.tokenize(text, add_special=True, parse_special=False)

    def chat_template(self) -> str | None:
        """The chat template in use: the profile's, else the target's own (None: it has none)."""
        return self.chat.template or self.target.chat_template()

    def chat_prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                           variables: dict[str, Any] | None = None) -> list[int]:
        """Render `messages` with the chat template (the profile's, else the target's) and tokenize;
        `tools` (OpenAI function definitions) go to templates that render them, `variables` to the template by
        name (`chat_template.render_chat`; None: `template_variables`).

        Only the template's own text has its special tokens parsed: special-token text
        inside a message (`<|im_end|>` typed by a user) stays plain text (see
        `render_chat_chunks`). `run`, `chat` (with `--system`) and `serve` all come here.
        """
        template = self.chat_template()
        if template is None:
            raise InputError(no_chat_template(self.target.path.name))
        variables = self.template_variables if variables is None else variables
        bos = self.target.detokenize_special(self.target.bos_token)
        eos = self.target.detokenize_special(self.target.eos_token)
        chunks = render_chat_chunks(template, messages, self._special_texts_in(messages, tools, variables),
                                    bos_token=bos, eos_token=eos, tools=tools, variables=variables)
        first_text, first_parsed = chunks[0] if chunks else ("", False)
        add_bos = self.target.adds_bos and not (bos and first_parsed and first_text.startswith(bos))
        tokens = [token for text, parse_special in chunks
                  for token in self.target.tokenize(text, add_special=False, parse_special=parse_special)]
        return [self.target.bos_token, *tokens] if add_bos else tokens

    def _special_texts_in(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                          variables: dict[str, Any] | None = None) -> SpecialTexts:
        """The vocabulary's special-token texts, or none when no text from outside holds any.

        A text holds special-token text exactly when llama.cpp tokenizes it
        differently with specials parsed: a cheap test per message content (and one
        for the rest: tool calls, tool definitions and template variables as JSON text) that spares the
        usual conversation a scan of the whole vocabulary.
        """
        texts = [message["content"] for message in messages if isinstance(message.get("content"), str)]
        rest = [{key: value for key, value in message.items() if key not in ("role", "content")} for message in messages]
        if any(rest) or tools or variables:
            texts.append(json.dumps([rest, tools, variables], ensure_ascii=False, default=str))
        return self.target.special_texts() if any(map(self._holds_special_text, texts)) else SpecialTexts(())

    def _holds_special_text(self, text: str) -> bool:
        """Whether `text` holds special-token text, remembered per text: a chat asks again for
        every message at each turn, and once more for each exchange dropped to fit the context."""
        if text not in self._special_verdicts:
            if len(self._special_verdicts) >= MAX_SPECIAL_VERDICTS:
                del self._special_verdicts[next(iter(self._special_verdicts))]  # the oldest
            self._special_verdicts[text] = (self.target.tokenize(text, add_special=False, parse_special=True)
                                            != self.target.tokenize(text, add_special=False, parse_special=False))
        return self._special_verdicts[text]

    def system_messages(self) -> list[dict[str, str]]:
        """The conversation's opening: the system prompt, when there is one."""
        return [{"role": "system", "content": self.chat.system_prompt}] if self.chat.system_prompt else []

    def placement(self) -> dict[str, dict]:
        """Where llama.cpp put each loaded model (devices and layers, read back from its load log)."""
        loaded = {"target": self.target, "draft": self.draft}
        return {role: {**model.placement.to_dict(), "summary": model.placement.summary()}
                for role, model in loaded.items() if model is not None}

    def reserve_context(self, n_tokens: int) -> None:
        """Size both models' contexts for one generation of `n_tokens` in all (a one-shot run's prompt
        and max_tokens) where they are not created yet (`open_session(size_contexts_later=True)`): quicker to
        set up than the configured size. Each is created where first needed."""
        for model in (self.target, self.draft):
            if model is not None:
                model.reserve(n_tokens)

    def reset_caches(self) -> None:
        """Forget all cached tokens."""
        self.target.clear()
        if self.draft is not None:
            self.draft.clear()

    def recover_caches(self) -> None:
        """After an interrupted generation: drop what a cut-short decode left unrecorded, keep the rest."""
        self.target.drop_unrecorded()
        if self.draft is not None:
            self.draft.drop_unrecorded()

    def _save_prompts(self) -> None:
        """Save the models' reading of the last prompt (last: a cache, whose failure costs only speed)."""
        if self.prompt_cache is None or self._last_prompt is None:
            return
        for model in self._prompt_cached_models():
            try:
                self.prompt_cache.save(model, self._last_prompt)
            except Exception as exc:  # (out of memory for a huge state, a model that failed mid-decode)
                self.prompt_cache.notes(f"prompt cache: not saved ({type(exc).__name__}: {exc})")
        self.prompt_cache = None

    def _prompt_cached_models(self) -> list[Model]:
        return [model for model in (self.target, self.draft) if model is not None and model.settings.prompt_cache]

    def close(self) -> None:
        try:
            if self.memory is not None:
                self.memory.close()
            if self.length_cache is not None:
                self.length_cache.save(self.learned_lengths)
                self.length_cache = None
            self._save_prompts()
        finally:
            self.target.close()
            if self.draft is not None:
                self.draft.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _drafts_decide_the_text(settings: GenerationSettings) -> bool:
    """Whether the draft model's probabilities enter the text (rejection sampling at a temperature).

    A draft model computes attention with the flash kernel (`Model`'s `proposes_only`), which on the
    CPU computes a reading split into other batches (a restored prompt and the rest) a little otherwise
    than one read whole: harmless where drafts are only checked against the target's own draws, but under
    rejection sampling its probabilities decide which drafts are kept, so it then reads the prompt whole,
    and the same seed keeps giving the same text."""
    return settings.speculative.verify == "rejection" and not settings.sampling.greedy


def load_draft_model(path: Path, settings: ModelSettings, *, verbose: bool = False, size_context_later: bool = False,
                     repacking: Repacking | None = None) -> Model:
    """Load a draft model. It decodes one token at a time while drafting, so weights repacked for kernels
    that fail on batches only still serve it, one token per decode (its prompt is then read a token at a time);
    its logits only propose, so it takes the faster attention kernel (`Model`'s `proposes_only`).
    `repacking`: `draft_repacking`'s answer, where the caller asked it already."""
    repacking = repacking if repacking is not None else draft_repacking(path, settings, verbose=verbose)
    if repacking is Repacking.ONE_TOKEN:
        verbose_notes(verbose)(f"{path.name}: repacked CPU weights, one token per decode (batches of them fail here)")
    return Model(path, settings, verbose=verbose, size_context_later=size_context_later, proposes_only=True,
                 extra_buffers=repacking is not Repacking.OFF, one_token_decodes=repacking is Repacking.ONE_TOKEN)


def draft_repacking(path: Path, settings: ModelSettings, *, verbose: bool = False) -> Repacking:
    """How a draft model's CPU weights are laid out (see `load_draft_model`)."""
    return repacking_for(path, settings, one_token_ok=True, verbose=verbose)


def _load_models(plan: Plan, load_draft: bool, on_status: Callable[[str], None], verbose: bool,
                 size_contexts_later: bool) -> tuple[Model, Model | None]:
    """The plan's target, and its draft when there is one and `load_draft`.

    Where the CPU alone computes both (and there is no GPU), the draft loads in a second thread while the
    target loads: llama.cpp's loading leaves cores idle (the demo pair, 2 cores: 0.15 s against 0.19 s one
    after the other). What both loads would set up or probe is done first, in this thread: the library,
    and the repacking probes (which may run a child process and write the cache folder)."""
    target_repacking = repacking_for(plan.target.path, plan.target.runtime, verbose=verbose)

    def load_target() -> Model:
        return Model(plan.target.path, plan.target.runtime, verbose=verbose, size_context_later=size_contexts_later,
                     extra_buffers=target_repacking is not Repacking.OFF)

    if plan.draft is None or not load_draft:
        on_status(f"loading target {plan.target.path.name}")
        return load_target(), None
    draft_path, draft_runtime = plan.draft.path, plan.draft.runtime
    repacking = draft_repacking(draft_path, draft_runtime, verbose=verbose)

    def load_draft() -> Model:
        return load_draft_model(draft_path, draft_runtime, verbose=verbose, size_context_later=size_contexts_later,
                                repacking=repacking)

    def load_draft_in_this_thread() -> Model:
        try:
            return load_draft()
        finally:
            forget_thread_errors()

    on_cpu = not gpu_devices() and runs_on_cpu_alone(plan.target.runtime) and runs_on_cpu_alone(draft_runtime)
    if not on_cpu:
        on_status(f"loading target {plan.target.path.name}")
        target = load_target()
        on_status(f"loading draft {draft_path.name}")
        try:
            return target, load_draft()
        except BaseException:
            target.close()
            raise
    on_status(f"loading target {plan.target.path.name} and draft {draft_path.name}")
    lone_token_computed_like_a_batch()  # (the library and what every load asks of it, set up in this thread first)
    with ThreadPoolExecutor(1, thread_name_prefix="draft-load") as loading:
        pending = loading.submit(load_draft_in_this_thread)
        try:
            target = load_target()
        except BaseException:
            _close_once_loaded(pending)
            raise
        try:
            return target, pending.result()
        except BaseException:  # the draft failed (its error is the one to tell), or Ctrl-C while it loaded
            target.close()
            _close_once_loaded(pending)
            raise


def _close_once_loaded(pending: "Future[Model]") -> None:
    """Close a model loading in another thread once it is loaded, without waiting here (a failed load has
    nothing to close)."""
    def close(done: "Future[Model]") -> None:
        if done.exception() is None:
            done.result().close()

    pending.add_done_callback(close)


def open_session(
    plan: Plan,
    *,
    load_draft: bool = True,
    on_status: Callable[[str], None] = lambda message: None,
    on_note: Callable[[str], None] = lambda message: None,
    verbose: bool = False,
    remember_lengths: bool = True,
    memory_owner: str | None = None,
    size_contexts_later: bool = False,
    prompt_cache: bool = False,
) -> Session:
    """Load the plan's models (the draft only when there is one and `load_draft`).

    With `remember_lengths` the adaptive draft lengths start from what earlier
    processes learned for this pair on this machine, and what this one learns is
    saved when the session closes (`bench --cold` turns it off). `on_note` is told
    what the user should know of the loaded models (the context an n_ctx they
    asked for became). `memory_owner` names the memory of earlier text the
    session drafts from and adds to (see `app.memory`; None: none). With `size_contexts_later` the models' contexts
    are created on first use, at the size `Session.reserve_context` gave them (a one-shot run's) or else at
    their configured size; otherwise now, at their configured size. With `prompt_cache` a model
    whose settings allow it starts from its reading of the last prompt saved by an
    earlier session (see `app.prompt_cache`), and this session's is saved on close.
    """
    target, draft = _load_models(plan, load_draft, on_status, verbose, size_contexts_later)
    for role, model in (("target", target), ("draft", draft)):
        asked = plan.settings.sources.get(f"{role}.n_ctx", DEFAULT_SOURCE) != DEFAULT_SOURCE
        if model is not None and model.context_note is not None and asked:  # (the default is lowered quietly)
            on_note(model.context_note)
    length_cache = LengthCache(target, draft, notes=verbose_notes(verbose)) if remember_lengths else None
    memory = None
    if memory_owner is not None:
        memory = SessionMemory(lambda: open_store(plan.target.path, memory_owner), notes=verbose_notes(True))  # always said
    prompts = PromptCache(notes=verbose_notes(verbose), warn=verbose_notes(True)) if prompt_cache else None
    return Session(target, draft, plan.chat, length_cache, memory, prompts)
