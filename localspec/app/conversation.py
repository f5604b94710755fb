"""A chat conversation: its messages, its generation settings, and the edits a chat makes to them.

Messages use OpenAI-style roles ("system", "user", "assistant"). The system
prompt is kept apart so that trimming a long conversation never drops it. The
JSON form (`to_json`) is what `/save` writes and `history show --json` prints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..config.files import TOO_LONG_A_NUMBER, object_without_repeated_keys, read_piped, refuse_utf16
from ..config.profiles import did_you_mean, parse_value
from ..errors import InputError, LocalspecError
from ..settings import SETTINGS, GenerationSettings, shown_value
from ..textin import RepeatedKey, clean_data, decode_bytes

CHAT_LAYERS = ("sampling", "speculative", "generation")
TEMPLATE_VARIABLES_KEY = "chat_template_kwargs"  # (beside the settings: llama.cpp's name, as in serve's requests)


@dataclass
class Message:
    role: str
    content: str
    interrupted: bool = False  # a reply stopped with Ctrl-C: kept as far as it got

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.interrupted:
            data["interrupted"] = True
        return data


@dataclass
class Conversation:
    """The messages of one chat and the settings its replies are generated with."""

    settings: GenerationSettings
    system: str | None = None
    messages: list[Message] = field(default_factory=list)
    # More of the chat template's inputs by name (`--chat-template-kwargs`), kept with the settings.
    template_variables: dict[str, Any] = field(default_factory=dict)
    ignored_settings: list[str] = field(default_factory=list, compare=False, repr=False)  # read but not known here
    system_messages_read: int = field(default=0, compare=False, repr=False)  # (joined into `system` where several)

    def prompt_messages(self, start: int = 0) -> list[dict[str, str]]:
        """What the chat template renders: the system prompt, then the messages from `start` on."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + [{"role": m.role, "content": m.content} for m in self.messages[start:]]

    def add(self, role: str, content: str, interrupted: bool = False) -> Message:
        message = Message(role, content, interrupted)
        self.messages.append(message)
        return message

    def undo(self) -> int:
        """Drop the last exchange (the last user message and what followed it); return how many messages went."""
        last_user = max((i for i, m in enumerate(self.messages) if m.role == "user"), default=None)
        if last_user is None:
            return 0
        dropped = len(self.messages) - last_user
        del self.messages[last_user:]
        return dropped

    def drop_last_reply(self) -> Message | None:
        """For /retry: remove the last message and return it, if it is a reply to a user message (else None,
        and nothing changes)."""
        if len(self.messages) < 2 or self.messages[-1].role != "assistant" or self.messages[-2].role != "user":
            return None
        return self.messages.pop()

    def window_start(self, prompt_length: Callable[[list[dict[str, str]]], int], limit: int, start: int = 0,
                     larger_context_hint: str = " or raise --n-ctx") -> int:
        """The first message a prompt of at most `limit` tokens can show: from `start`, whole exchanges are
        left out, oldest first, until the rendered prompt fits. The conversation itself does not change.

        The system prompt and the last user message always stay; if even they do not fit,
        InputError says so, ending with `larger_context_hint` (`Session.larger_context_hint`).
        """
        start = min(start, len(self.messages))
        while prompt_length(self.prompt_messages(start)) > limit:
            first_reply = next((i for i in range(start, len(self.messages)) if self.messages[i].role == "assistant"), None)
            if first_reply is None or first_reply >= len(self.messages) - 1:
                raise self._does_not_fit(prompt_length, limit, larger_context_hint, len(self.messages) - start)
            start = first_reply + 1
        return start

    def _does_not_fit(self, prompt_length: Callable[[list[dict[str, str]]], int], limit: int, hint: str,
                      unanswered: int = 1) -> InputError:
        """What is too long where even the system prompt and the last messages, the `unanswered` ones since the
        last reply (a conversation loaded or resumed may end in one), do not fit in `limit` tokens."""
        if unanswered > 1:
            return InputError(f"the {unanswered} messages since the last reply do not fit the context together:"
                              f" /undo drops the last of them{hint.replace(' or ', ', or ', 1)}")
        if self.system:
            try:
                alone = prompt_length(self.prompt_messages(len(self.messages)))
            except LocalspecError:  # a template that renders no system prompt without a message after it
                alone = 0
            if alone > limit:
                return InputError(f"the system prompt alone does not fit the context ({alone} tokens, room for"
                                  f" {limit}): shorten it{hint}")
            return InputError(f"this message and the system prompt do not fit the context together: shorten one{hint}")
        return InputError(f"this message alone does not fit the context: shorten it{hint}")

    def set(self, key: str, raw: str) -> str:
        """`/set KEY VALUE` for any sampling, speculative or generation setting; returns the dotted key set."""
        dotted = resolve_key(key)
        self.settings = self.settings.with_values({dotted: parse_value(raw, SETTINGS[dotted].kind)})
        return dotted

    def to_json(self) -> dict[str, Any]:
        messages = self.prompt_messages()[:1] if self.system else []
        settings: dict[str, Any] = self.settings.to_values()
        if self.template_variables:
            settings[TEMPLATE_VARIABLES_KEY] = self.template_variables
        return {"messages": messages + [m.to_dict() for m in self.messages], "settings": settings}

    @classmethod
    def from_json(cls, data: Any, defaults: GenerationSettings) -> "Conversation":
        """A conversation from `to_json`'s form; settings not given keep `defaults`.

        Anything malformed (a wrong type anywhere, an invalid setting value) raises
        InputError with one line; settings this version does not know are ignored.
        """
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise InputError('expected {"messages": [...], "settings": {...}}')
        conversation = cls(_settings_from_json(data.get("settings"), defaults))
        if isinstance(data.get("settings"), dict):
            conversation.template_variables = _template_variables_from_json(data["settings"])
            conversation.ignored_settings = [key for key in data["settings"]
                                             if key not in GenerationSettings.keys() and key != TEMPLATE_VARIABLES_KEY]
        systems = []
        for message in data["messages"]:
            if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
                raise InputError(f"not a chat message: {_quoted(message)}")
            if not isinstance(message.get("content"), str):
                raise InputError(f"a message's content must be text: {_quoted(message)}")
            if not isinstance(message.get("interrupted", False), bool):
                raise InputError(f"a message's \"interrupted\" must be true or false: {_quoted(message)}")
            if message["role"] == "system":
                systems.append(message["content"])  # one system prompt: several are kept, joined
            else:
                conversation.add(message["role"], message["content"], message.get("interrupted", False))
        conversation.system = "\n\n".join(systems) if systems else None
        conversation.system_messages_read = len(systems)
        return conversation

    @classmethod
    def read(cls, path: Path, defaults: GenerationSettings) -> tuple["Conversation", bool]:
        """The conversation `/save` wrote to `path`, and whether text in it needed replacing (see `textin`).

        Every problem (missing, not a regular file, not JSON, malformed) is one InputError naming the file.
        """
        if path.exists() and not path.is_file():
            raise InputError(f"{path}: {'is a directory' if path.is_dir() else 'not a regular file'}, not a saved conversation")
        try:
            with path.open("rb") as stream:
                raw = read_piped(stream, path)  # (bounded: a file of gigabytes is no saved conversation)
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror})") from None
        refuse_utf16(raw, path)
        try:
            text, replaced = decode_bytes(raw)
            data, replaced_in_json = clean_data(json.loads(text, object_pairs_hook=object_without_repeated_keys))
            return cls.from_json(data, defaults), replaced or replaced_in_json
        except RecursionError:
            raise InputError(f"{path}: not a saved conversation (nested too deeply to read)") from None
        except json.JSONDecodeError as exc:
            reason = "the file is empty" if not text.strip() else f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
            raise InputError(f"{path}: not a saved conversation ({reason})") from None
        except RepeatedKey as exc:
            raise InputError(f"{path}: not a saved conversation ({exc})") from None
        except ValueError:  # Python's limit on the digits of an integer read from text
            raise InputError(f"{path}: not a saved conversation (it holds {TOO_LONG_A_NUMBER})") from None
        except InputError as exc:
            raise InputError(f"{path}: not a saved conversation: {exc}") from None


def _settings_from_json(settings: Any, defaults: GenerationSettings) -> GenerationSettings:
    """`defaults` with the saved setting values laid over them, each checked against its declaration."""
    if settings is None:
        return defaults
    if not isinstance(settings, dict):
        raise InputError(f'"settings" must be an object of setting values, got {_quoted(settings)}')
    known = GenerationSettings.keys()  # a setting this version does not know is skipped
    values = {key: value for key, value in settings.items() if key in known and value is not None}  # null: not set
    if values.get("sampling.max_tokens") == 0:  # (saved when 0 was allowed, meaning nothing: the default now)
        del values["sampling.max_tokens"]
    return defaults.with_values(values)


def _template_variables_from_json(settings: dict[str, Any]) -> dict[str, Any]:
    """The chat template's variables kept with the settings (none where none were), checked as
    `--chat-template-kwargs` is."""
    if settings.get(TEMPLATE_VARIABLES_KEY) is None:
        return {}
    from ..runtime.chat_template import variables_problem  # (Jinja: imported where a conversation holds them)

    problem = variables_problem(settings[TEMPLATE_VARIABLES_KEY])
    if problem is not None:
        raise InputError(f'"{TEMPLATE_VARIABLES_KEY}" {problem}')
    return settings[TEMPLATE_VARIABLES_KEY]


def chat_keys() -> list[str]:
    """The settings `/set` accepts (dotted keys)."""
    return [key for key, item in SETTINGS.items() if item.layer in CHAT_LAYERS]


def resolve_key(key: str) -> str:
    """'temperature' or 'sampling.temperature' -> 'sampling.temperature' (the nearest valid name when unknown)."""
    keys = chat_keys()
    matches = [k for k in keys if k == key or k.rpartition(".")[2] == key]
    if len(matches) == 1:
        return matches[0]
    raise InputError(f"unknown setting {key!r}{did_you_mean(key, keys)}; /set lists them")


def _quoted(value: Any, limit: int = 120) -> str:
    """Part of a saved conversation in an error message: as its JSON reads, cut short when long."""
    text = shown_value(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
