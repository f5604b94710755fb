"""Resolving a plan and loading its models, with progress shown on stderr: shared by run, chat and bench."""

from __future__ import annotations

from ..app.memory import LOCAL_OWNER
from ..app.plan import Plan, lacks_chat_template, resolve
from ..app.session import Session, no_chat_template, open_session
from ..config.resolve import FLAG_SOURCE
from ..errors import InputError
from .common import say, status_line, stderr_is_terminal


def resolve_plan(profile: str | None, flags: dict, *, verbose: bool = False, speculative: bool = True) -> Plan:
    """`app.plan.resolve` with a progress bar on stderr while a model file is derived, and its notes shown once."""
    with status_line(stderr_is_terminal() and not verbose) as status:
        plan = resolve(profile, flags, on_derive_start=status.start_progress, on_progress=status.advance,
                       speculative=speculative)
    for note in plan.notes:
        say(f"note: {note}")
    return plan


def check_prompt_form(plan: Plan, raw: bool) -> None:
    """Refuse, before anything loads, prompts that cannot be made as asked: `--system` with `--raw` (which leaves
    out the chat template it goes into), or the chat template a model without one would need."""
    if raw and plan.settings.sources.get("chat.system_prompt") == FLAG_SOURCE:
        raise InputError("--system goes into the chat template, which --raw leaves out: give one or the other")
    if not raw and lacks_chat_template(plan):
        raise InputError(no_chat_template(plan.target.path.name))


def load_session(plan: Plan, *, load_draft: bool = True, verbose: bool = False, remember_lengths: bool = True,
                 memory_owner: str | None = LOCAL_OWNER, size_contexts_later: bool = False,
                 prompt_cache: bool = False) -> Session:
    """`app.session.open_session` with a status spinner on stderr while the weights load, and its notes after it."""
    notes: list[str] = []
    with status_line(stderr_is_terminal() and not verbose) as status:
        session = open_session(plan, load_draft=load_draft, on_status=status.show, on_note=notes.append, verbose=verbose,
                               remember_lengths=remember_lengths, memory_owner=memory_owner,
                               size_contexts_later=size_contexts_later, prompt_cache=prompt_cache)
    for note in dict.fromkeys(notes):  # (the same note for both models is said once)
        say(f"note: {note}")
    return session
