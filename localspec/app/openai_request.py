"""An OpenAI completion request body, checked and turned into what a generation needs.

Every field that changes what a client gets is understood, or refused with a
400 that names it: a client asking for something localspec does not do (several
choices, log-probabilities, another server's `grammar` or `n_predict`) must not
get plain text as if it had been honoured. Fields that change nothing for it
(`user`, `metadata`, `store`, ...) are ignored, unless spelled nearly like a
known field (`temprature`): that is a 400 naming the one meant.
`response_format` (JSON, a JSON schema) becomes an llguidance grammar here;
`tools` are checked here and turned into a grammar per model by `serving`
(see `tool_calls`). Settings fields (`temperature`, `max_tokens`, `draft_max`, ...) are
the ones whose declaration names them (`setting(..., request=...)`) and go
through the same checks as flags and profiles. Text is cleaned the one way text
from outside is, in every string of the body (keys too) before anything reads it:
lone surrogates (a JavaScript client cutting a string inside an emoji, or a
`"\ud800"` escape) become U+FFFD.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable

from fastapi.responses import JSONResponse

from ..config.files import TOO_LONG_A_NUMBER, RepeatedKey, object_without_repeated_keys
from ..engine.grammar import CompiledGrammar, OutputFormat, compile_format
from ..errors import InputError
from ..runtime.chat_template import variables_problem
from ..settings import SETTINGS, GenerationSettings
from ..textin import clean_data, clean_text
from .tool_calls import ToolError, ToolRequest, history_message, tool_request

# API field -> setting key, from the declarations.
REQUEST_FIELDS: dict[str, str] = {name: key for key, item in SETTINGS.items() for name in item.request}
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
MAX_MESSAGE_CHARS = 300  # error messages quote at most this much of what the client sent


def _absent_or(*harmless: Any) -> Callable[[Any], bool]:
    """A check that accepts the field's absence and `harmless` values (same type and value)."""
    return lambda value: value is None or any(type(value) is type(h) and value == h for h in harmless)


# Each is looked for in every token's text: OpenAI takes 4.
MAX_STOP_STRINGS = 16


def _absent() -> Callable[[Any], bool]:
    """A check that accepts only the field's absence (or null)."""
    return lambda value: value is None


# Fields that change what the client gets, and the values localspec can honour (by ignoring them).
def _one_or_absent(value: Any) -> bool:
    return value is None or value == 1  # (1.0 too: checked as a whole number of at least 1 first)


def _no_bias(value: Any) -> bool:
    return value is None or isinstance(value, dict) and all(
        isinstance(bias, (int, float)) and not isinstance(bias, bool) and bias == 0 for bias in value.values())


UNSUPPORTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (_one_or_absent, "one choice per request"),
    "best_of": (_one_or_absent, "one choice per request"),
    "logprobs": (_absent_or(False), "no log-probabilities"),
    "top_logprobs": (_absent_or(0), "no log-probabilities"),
    "echo": (_absent_or(False), "the prompt is not echoed"),
    "suffix": (_absent_or(""), "no insertion after a suffix"),
    "functions": (_absent_or([]), "no function calls"),
    "function_call": (_absent_or("none"), "no function calls"),
    "logit_bias": (_no_bias, "no logit bias"),  # (a bias of 0 changes nothing: taken)
    "min_tokens": (_absent_or(0), "no minimum length"),
    "ignore_eos": (_absent_or(False), "a generation ends at the model's end token"),
    "n_predict": (_absent(), "give max_tokens"),
    "grammar": (_absent(), 'give response_format {"type": "json_schema", ...}, or run `localspec run --grammar`'),
    "json_schema": (_absent(), 'give response_format {"type": "json_schema", "json_schema": {"name", "schema"}}'),
    "modalities": (_absent_or(["text"]), "text output only"),
    "audio": (_absent(), "text output only"),
    "prediction": (_absent(), "no predicted outputs"),
    # Other servers' samplers and options (llama-server's, vLLM's): their clients send most of them at the values
    # that switch them off, which are taken.
    "dry_multiplier": (_absent_or(0, 0.0), "no DRY sampler (repeat_penalty and presence_penalty are there)"),
    "xtc_probability": (_absent_or(0, 0.0), "no XTC sampler"),
    "typical_p": (_absent_or(1, 1.0), "no typical sampling"),
    "mirostat": (_absent_or(0, 0.0), "no Mirostat sampling"),
    "top_n_sigma": (_absent_or(-1, -1.0), "no top-n-sigma sampling"),
    "dynatemp_range": (_absent_or(0, 0.0), "no dynamic temperature"),
    "n_probs": (_absent_or(0, 0.0), "no probabilities"),
    "return_tokens": (_absent_or(False), "no token ids in the reply"),
    "skip_special_tokens": (_absent_or(True), "special tokens are left out of the text"),
    "t_max_predict_ms": (_absent_or(0, -1, 0.0, -1.0), "no time limit (give max_tokens)"),
    "stop_token_ids": (_absent_or([]), "give stop strings (stop)"),
    "include_stop_str_in_output": (_absent_or(False), "a stop string is left out of the output"),
    **{name: (_absent(), 'give response_format {"type": "json_schema", ...}')
       for name in ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")},
}

# OpenAI's fields that change nothing here, refused as OpenAI refuses them where their type is wrong.
IGNORED_FIELD_TYPES: dict[str, tuple[type, str]] = {
    "user": (str, "a string"), "metadata": (dict, "an object"), "store": (bool, "true or false"),
    "safety_identifier": (str, "a string"), "prompt_cache_key": (str, "a string"), "service_tier": (str, "a string"),
}

# Other servers' fields that change nothing here, whatever their value (those of samplers refused above when on,
# llama-server's caching and timing options), taken rather than suspected of being misspellings of known ones.
OTHER_SERVERS_FIELDS = ("dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers",
                        "xtc_threshold", "mirostat_tau", "mirostat_eta", "dynatemp_exponent", "min_keep", "samplers",
                        "cache_prompt", "timings_per_token", "post_sampling_probs", "id_slot", "n_keep", "n_indent",
                        "penalize_nl", "spaces_between_special_tokens")


# Fields read apart from the settings (REQUEST_FIELDS) and the refused ones (UNSUPPORTED).
READ_FIELDS = ("model", "messages", "prompt", "stream", "stream_options", "response_format", "tools", "tool_choice",
               "parallel_tool_calls", "speculative", "reasoning_format", "chat_template_kwargs", "reasoning_effort")
# llama-server's `reasoning_format` values: "none" leaves a reply's thinking in its content; the others sort it
# into `reasoning_content` (see `reasoning`), but "deepseek-legacy" leaves a stream's in its content between the
# model's own tags.
REASONING_FORMATS = ("auto", "deepseek", "deepseek-legacy", "none")
# OpenAI's values of `reasoning_effort`; gpt-oss's template knows low, medium and high, and takes less as low.
REASONING_EFFORTS = {"none": "low", "minimal": "low", "low": "low", "medium": "medium", "high": "high"}
_KNOWN_FIELDS = (*REQUEST_FIELDS, *UNSUPPORTED, *READ_FIELDS, *OTHER_SERVERS_FIELDS)  # (`users`: no misspelling)
_MISSPELLED = 0.85  # an unknown field this close to a known one (difflib's ratio) is taken for a misspelling of it
MAX_FIELDS = 256  # a request's top-level fields (OpenAI's API has a few dozen): each unknown one is spell-checked


class ApiError(Exception):
    """A request the server refuses, with its HTTP status and OpenAI-style error fields."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.param, self.code, self.headers = status, kind, param, code, headers or {}

    def body(self) -> dict[str, Any]:
        message = clean_text(_shorten(str(self)))[0]
        param = None if self.param is None else clean_text(_shorten(self.param))[0]
        return {"error": {"message": message, "type": self.kind, "param": param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


@dataclass(frozen=True)
class CompletionRequest:
    """What one request asks for: the prompt (chat messages or raw text) and how to generate."""

    messages: list[dict[str, Any]] | None  # chat completions
    prompt: str | None  # completions
    settings: GenerationSettings
    speculative: bool
    stream: bool
    include_usage: bool
    response_format: CompiledGrammar | None = None  # `response_format` as a grammar (None: free text)
    tools: ToolRequest | None = None  # tools the model must or may call (None: none offered)
    reasoning: bool = True  # a thinking model's thinking goes to `reasoning_content` (`reasoning_format` not "none")
    # ... but a stream's stays in its content between the model's tags (`reasoning_format` "deepseek-legacy")
    thought_inline_in_stream: bool = False
    template_variables: dict[str, Any] = dataclasses.field(default_factory=dict)  # more of the chat template's inputs
    memory_asked: bool = False  # `"memory": true` given (a server started without --memory keeps none)

    @property
    def grammar(self) -> str | None:
        """The llguidance grammar `response_format` holds the output to (tools have theirs made per model)."""
        return self.response_format.grammar if self.response_format is not None else None

    @property
    def chat(self) -> bool:
        return self.messages is not None

    def fitted(self, prompt_tokens: int, n_ctx: int, thinking: bool = False) -> GenerationSettings:
        """The settings with `max_tokens` given (see `GenerationSettings.budget`; `thinking`: the reply may think
        first), and lowered to the room the context leaves after the prompt."""
        settings = self.settings.with_budget(self.response_format is not None or self.tools is not None, thinking)
        room = n_ctx - prompt_tokens
        return settings if settings.max_tokens <= room else dataclasses.replace(settings, max_tokens=room)


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object a request body holds, or a 400."""
    try:
        # (UTF-8, as the API's JSON is: not UTF-16 or -32 guessed at)
        body = json.loads(raw.decode("utf-8-sig"), object_pairs_hook=object_without_repeated_keys)
    except RepeatedKey as exc:  # (which of the two did the client mean?)
        raise ApiError(400, f"the request body: {exc}") from None
    except UnicodeDecodeError as exc:  # (a ValueError too: said apart, as the CLI says it of files)
        raise ApiError(400, f"the request body is not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset"
                       f" {exc.start})") from None
    except json.JSONDecodeError:
        raise ApiError(400, "the request body is not valid JSON") from None
    except ValueError:  # Python's limit on the digits of an integer read from text
        raise ApiError(400, f"the request body holds {TOO_LONG_A_NUMBER}") from None
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def parse_request(body: dict[str, Any], *, chat: bool, defaults: GenerationSettings, has_draft: bool) -> CompletionRequest:
    """Check every field of `body` that matters; raise ApiError(400) naming the first wrong one."""
    try:
        body = clean_data(body)[0]  # "\ud800" escapes decode to lone surrogates, which no tokenizer takes
    except RepeatedKey as exc:
        raise ApiError(400, f"the request body: {exc}") from None
    _refuse_misspelled(body)
    _refuse_unsupported(body)
    tools = _tools(body, chat)
    response_format = _response_format(body.get("response_format"))
    if tools is not None and response_format is not None:
        raise ApiError(400, "response_format other than text cannot be combined with tools (the reply is held to"
                       " the tools' call syntax)", param="response_format")
    stream, include_usage = _boolean(body, "stream", default=False), _include_usage(body.get("stream_options"))
    if body.get("stream_options") is not None and not stream:
        raise ApiError(400, "stream_options is only allowed with stream: true", param="stream_options")
    reasoning_format = _reasoning_format(body.get("reasoning_format"))
    return CompletionRequest(
        messages=_messages(body.get("messages")) if chat else None,
        prompt=None if chat else _prompt(body.get("prompt")),
        settings=_settings(body, defaults, has_draft),
        speculative=_boolean(body, "speculative", default=True),
        stream=stream,
        include_usage=include_usage,
        response_format=response_format,
        tools=tools,
        reasoning=reasoning_format != "none",
        thought_inline_in_stream=stream and reasoning_format == "deepseek-legacy",
        template_variables=_template_variables(body, chat),
        memory_asked=body.get("memory") is True,
    )


def _template_variables(body: dict[str, Any], chat: bool) -> dict[str, Any]:
    """`chat_template_kwargs` (more of the chat template's inputs by name, as llama-server and vLLM take them:
    Qwen3's `enable_thinking`) with `reasoning_effort` (OpenAI's field, which llama-server gives the template as
    such: gpt-oss's reads it) among them, unless the kwargs name it themselves."""
    kwargs, effort = body.get("chat_template_kwargs"), body.get("reasoning_effort")
    if kwargs in (None, {}) and effort is None:  # (what clients send where they give none)
        return {}
    where = "chat_template_kwargs" if kwargs not in (None, {}) else "reasoning_effort"
    if not chat:
        raise ApiError(400, f"{where} is for chat completions: a completion's prompt is not rendered by a template",
                       param=where)
    if effort is not None and (not isinstance(effort, str) or effort not in REASONING_EFFORTS):
        raise ApiError(400, f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, got {quote_json(effort)}",
                       param="reasoning_effort")
    variables = {"reasoning_effort": REASONING_EFFORTS[effort]} if effort is not None else {}
    if kwargs is not None:
        variables.update(template_variables(kwargs, "chat_template_kwargs"))
    return variables


def template_variables(value: Any, where: str) -> dict[str, Any]:
    """`value` checked as a chat template's variables (`chat_template.variables_problem`); `where` names it."""
    problem = variables_problem(value)
    if problem is not None:
        raise ApiError(400, f"{where}: {problem}" + ("" if isinstance(value, dict) else f", got {quote_json(value)}"),
                       param=where)
    return dict(value)


def _reasoning_format(value: Any) -> str:
    if value is None:
        return "auto"
    if value not in REASONING_FORMATS:
        raise ApiError(400, f"reasoning_format must be one of {', '.join(REASONING_FORMATS)}, got {quote_json(value)}",
                       param="reasoning_format")
    return value


def _tools(body: dict[str, Any], chat: bool) -> ToolRequest | None:
    """`tools`, `tool_choice` and `parallel_tool_calls` checked (tools only in chat completions)."""
    try:
        tools = tool_request(body.get("tools"), body.get("tool_choice"), body.get("parallel_tool_calls"))
    except ToolError as exc:
        raise ApiError(400, str(exc), param=exc.param) from None
    if tools is not None and not chat:
        raise ApiError(400, "tools are offered in chat completions only (/v1/chat/completions)", param="tools")
    return tools


def _response_format(value: Any) -> CompiledGrammar | None:
    """OpenAI's `response_format` compiled: text (None), `json_object` (a JSON object) or `json_schema`."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object" and isinstance(value, dict) and value.get("schema") is not None:
        # llama-server's form: a schema beside json_object holds the object to it (ignored, any object would pass)
        where = "response_format.schema"
        fmt = OutputFormat("json_schema", _schema_text(value["schema"], where), where)
    elif kind == "json_object":
        fmt = OutputFormat("json", origin="response_format")  # a JSON object, as `--format json`
    elif kind == "json_schema":
        fmt = OutputFormat("json_schema", _json_schema(value.get("json_schema")), "response_format.json_schema.schema")
    else:
        raise ApiError(400, 'response_format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",'
                       f' "json_schema": {{"name", "schema"}}}}, got {quote_json(value)}', param="response_format")
    try:
        return compile_format(fmt)
    except InputError as exc:
        raise ApiError(400, str(exc), param=fmt.origin) from None


def _json_schema(spec: Any) -> str:
    """The schema text of `response_format.json_schema` ({"name", "schema", "strict", "description"}), checked."""
    where = "response_format.json_schema"
    if not isinstance(spec, dict):
        raise ApiError(400, f'{where} must be an object {{"name", "schema", "strict"}}, got {quote_json(spec)}', param=where)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ApiError(400, f"{where}.name must be a non-empty string, got {quote_json(name)}", param=f"{where}.name")
    if spec.get("strict") is not None and not isinstance(spec["strict"], bool):
        raise ApiError(400, f"{where}.strict must be true or false, got {quote_json(spec['strict'])}", param=f"{where}.strict")
    return _schema_text(spec.get("schema", {}), f"{where}.schema")


def _schema_text(schema: Any, where: str) -> str:
    """A request's JSON schema as JSON text, checked: an object, finite numbers, nested as deep as JSON goes."""
    if not isinstance(schema, dict):
        raise ApiError(400, f"{where} must be a JSON schema object, got {quote_json(schema)}", param=where)
    try:
        return json.dumps(schema, allow_nan=False)
    except ValueError:
        raise ApiError(400, f"{where} holds a number that is not finite", param=where) from None
    except RecursionError:
        raise ApiError(400, f"{where} is nested too deeply", param=where) from None


def _refuse_misspelled(body: dict[str, Any]) -> None:
    """A 400 for an unknown field that is a misspelling of a known one (`temprature`): ignored, it would leave
    the request on a default the client did not ask for. Other unknown fields (`user`, `metadata`, another
    server's) are ignored. A body of more fields than any API has is refused first: checking tens of thousands
    would cost seconds of the server's time before the queue's limit applies."""
    if len(body) > MAX_FIELDS:
        raise ApiError(400, f"the request holds {len(body)} fields, more than the {MAX_FIELDS} any request needs")
    for name in body:
        if name not in _KNOWN_FIELDS:
            near = difflib.get_close_matches(name, _KNOWN_FIELDS, n=1, cutoff=_MISSPELLED)
            if near:
                raise ApiError(400, f"unknown field {quote_json(name)}: did you mean {near[0]!r}?", param=name)


def _refuse_unsupported(body: dict[str, Any]) -> None:
    """A 400 for a field whose value asks for what localspec does not do, or an ignored field of the wrong type."""
    for name in ("n", "best_of"):
        value = body.get(name)
        whole = (isinstance(value, int) and not isinstance(value, bool)
                 or isinstance(value, float) and value.is_integer())
        if value is not None and not (whole and value >= 1):  # (float() of a 400-digit int would overflow)
            raise ApiError(400, f"{name} must be a whole number of at least 1, got {quote_json(value)}", param=name)
    for name, (kind, what) in IGNORED_FIELD_TYPES.items():
        if body.get(name) is not None and not isinstance(body[name], kind):
            raise ApiError(400, f"{name} must be {what}, got {quote_json(body[name])}", param=name)
    for name, (harmless, instead) in UNSUPPORTED.items():
        if not harmless(body.get(name)):
            raise ApiError(400, f"{name}={quote_json(body[name])} is not supported (yet): {instead}", param=name)


def _boolean(body: dict[str, Any], name: str, *, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false, got {quote_json(value)}", param=name)
    return value


def _include_usage(options: Any) -> bool:
    if options is None:
        return False
    if not isinstance(options, dict):
        raise ApiError(400, f"stream_options must be an object, got {quote_json(options)}", param="stream_options")
    value = options.get("include_usage")
    if value is not None and not isinstance(value, bool):
        raise ApiError(400, f"stream_options.include_usage must be true or false, got {quote_json(value)}",
                       param="stream_options.include_usage")
    return bool(value)


def _settings(body: dict[str, Any], defaults: GenerationSettings, has_draft: bool) -> GenerationSettings:
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    for name, key in REQUEST_FIELDS.items():
        value = body.get(name)
        if value is None:
            continue
        value = _setting_value(key, value)
        if key == "sampling.stop" and isinstance(value, list) and len(value) > MAX_STOP_STRINGS:
            raise ApiError(400, f"stop holds {len(value)} strings; at most {MAX_STOP_STRINGS} are taken", param=name)
        problem = SETTINGS[key].problem(value)
        if problem is not None:
            raise ApiError(400, _shorten(problem.replace(key, name)), param=name)
        if key in names and values[key] != value:  # max_tokens and max_completion_tokens, at odds
            raise ApiError(400, f"{names[key]} is {values[key]} but {name} is {value}: give one, or both the same",
                           param=name)
        values[key], names[key] = value, name
    try:
        settings = defaults.with_values(values)
    except InputError as exc:  # a rule between settings, e.g. draft_min above draft_max
        message = str(exc)
        # Each setting by the name this request gave it, else by its field's name (not the profile key).
        for key in sorted(SETTINGS, key=len, reverse=True):
            if key in names or SETTINGS[key].request:
                message = message.replace(key, names.get(key) or SETTINGS[key].request[0])
        raise ApiError(400, message, param=next((n for k, n in names.items() if k in str(exc)), None)) from None
    if settings.speculative.uses_draft_model and not has_draft and "speculative.strategy" in values:
        raise ApiError(400, f"strategy {settings.speculative.strategy!r} needs a draft model, and none is loaded",
                       param="strategy")
    return settings


def _setting_value(key: str, value: Any) -> Any:
    """A request value as the declaration checks it: one stop string as a list, numbers finite."""
    if key == "sampling.stop" and isinstance(value, str):
        value = [value]
    if SETTINGS[key].kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            value = float(value)  # an integer too large for a float would fail later, in the sampler
        except OverflowError:
            value = math.inf  # refused by the declaration check as not finite
    return value


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects", param="messages")
    checked = [_message(message, f"messages[{i}]") for i, message in enumerate(messages)]
    _refuse_unanswerable_results(checked)
    return checked


def _refuse_unanswerable_results(messages: list[dict[str, Any]]) -> None:
    """A tool result must answer a call an earlier assistant message made: after none, or naming an id no earlier
    call had (where every earlier call had one), it is a 400, as OpenAI's API says (a template would render it
    as the answer to nothing, or to another call)."""
    ids: set[str] = set()
    calls = anonymous = False
    for i, message in enumerate(messages):
        for call in message.get("tool_calls", ()):
            calls = True
            ids.add(call["id"])
            anonymous = anonymous or not call["id"]
        if message["role"] != "tool":
            continue
        if not calls:
            raise ApiError(400, f"messages[{i}]: a tool result must answer the tool_calls of an earlier assistant"
                           " message, and none made any", param=f"messages[{i}]")
        if message["tool_call_id"] not in ids and not anonymous:
            raise ApiError(400, f"messages[{i}].tool_call_id {quote_json(message['tool_call_id'])} names no earlier"
                           f" call (their ids: {', '.join(map(quote_json, sorted(ids)))})",
                           param=f"messages[{i}].tool_call_id")


def _message(message: Any, where: str) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise ApiError(400, f"{where} must be an object with role and content", param=where)
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}, got {quote_json(role)}", param=f"{where}.role")
    role = ROLES[role]
    if message.get("name") is not None and not isinstance(message["name"], str):
        raise ApiError(400, f"{where}.name must be a string, got {quote_json(message['name'])}", param=f"{where}.name")
    content = message.get("content")
    may_be_empty = role == "assistant" and message.get("tool_calls") is not None
    text = None if content is None and may_be_empty else _content(content, f"{where}.content", role == "assistant")
    try:
        checked = history_message(message, role, text, where)
    except ToolError as exc:
        raise ApiError(400, str(exc), param=exc.param) from None
    if message.get("name"):  # (for the templates that render a participant's or a tool's name)
        checked["name"] = message["name"]
    if role == "assistant" and message.get("reasoning_content") is not None:
        if not isinstance(message["reasoning_content"], str):
            raise ApiError(400, f"{where}.reasoning_content must be a string, got "
                           f"{quote_json(message['reasoning_content'])}", param=f"{where}.reasoning_content")
        # (Qwen3's template reads `reasoning_content`; gpt-oss's reads `thinking`, as llama-server passes it on)
        checked["reasoning_content"] = checked["thinking"] = message["reasoning_content"]
    return checked


def _content(content: Any, where: str, assistant: bool = False) -> str:
    """A message's text: a string, or a list of text parts ({"type": "text", "text": "..."}; in an assistant's
    message also refusals, {"type": "refusal", "refusal": "..."}, as OpenAI's replies may write them)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where} must be a string or a list of text parts, got {quote_json(content)}", param=where)
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        key = "refusal" if assistant and kind == "refusal" else "text"
        if kind != key or not isinstance(part.get(key), str):
            refusal = ' (or, in an assistant\'s message, {"type": "refusal", "refusal": "..."})' if assistant else ""
            raise ApiError(400, f"{where}[{i}] must be a text part, {{\"type\": \"text\", \"text\": \"...\"}}"
                           f"{refusal} (other kinds are not supported), got {quote_json(part)}", param=f"{where}[{i}]")
        texts.append(part[key])
    return "".join(texts)


def _prompt(prompt: Any) -> str:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise ApiError(400, f"prompt must be a non-empty string, got {quote_json(prompt)}", param="prompt")
    return prompt


def quote_json(value: Any) -> str:
    """`value` as JSON for an error message, cut short when long."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (ValueError, RecursionError):
        text = "(a value nested too deeply to show)"
    return _shorten(text)


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"
