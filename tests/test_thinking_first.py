"""A thinking model held to a format thinks first: the format holds its answer, after the thought."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest
from cli_helpers import cli
from gguf import TokenType
from starlette.testclient import TestClient
from tiny_models import N_SPECIAL_AND_BYTE_TOKENS, random_weights, write_model

from localspec.app import serving
from localspec.app.generation_queue import GenerationQueue
from localspec.app.serving import ServedModel
from localspec.app.session import Session
from localspec.app.reasoning import Sorted, sorted_whole, split_thought
from localspec.app.thinking_first import prompt_end, thinking_format
from localspec.app.tool_calls import marker_tokens
from localspec.engine.constraint import TokenGrammar
from localspec.engine.grammar import OutputFormat, compile_format
from localspec.runtime.model import Model
from localspec.settings import (
    FREE_TEXT_MAX_TOKENS,
    THINKING_MAX_TOKENS,
    ChatSettings,
    GenerationSettings,
    ModelSettings,
)

DATA = Path(__file__).parent / "data"
QWEN3, R1, GPT_OSS = ((DATA / name).read_text() for name in ("qwen3.jinja", "deepseek-r1.jinja", "gpt-oss.jinja"))
TAGS = ["a", "b", "c"]
UNIQUE = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                                    "uniqueItems": True}}, "required": ["tags"]}
SCHEMA = {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": TAGS}, "uniqueItems": True,
                                                    "maxItems": 3}},
          "required": ["tags"], "additionalProperties": False}
# A template that thinks in <think> tags, for a profile (its prompt leaves the reply to open the thought).
THINKING = "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if false %}<think></think>{% endif %}"


@pytest.fixture(scope="module")
def thinking_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    """A tiny model whose `<think>` and `</think>` are one special token each, as in Qwen3's and R1's vocabularies
    (weights on which it closes its thought within a few dozen tokens)."""
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    pieces = [(tag, TokenType.USER_DEFINED) for tag in ("<think>", "</think>")]
    path = write_model(tmp_path_factory.mktemp("thinking") / "thinking.gguf", random_weights(n_vocab, seed=2),
                       n_vocab=n_vocab, space_token=True, context_length=4096, special_pieces=pieces)
    model = Model(path, ModelSettings(n_threads=1))
    yield model
    model.close()


def spelled(model: Model, text: str, tags: bool = True) -> list[int]:
    """`text` in `model`'s tokens: its tags and markers as the special tokens they are (`<think>`, `<|end|>`; not
    without `tags`), the rest a token a byte (the vocabulary has one for each byte)."""
    byte_tokens = {model.token_bytes(token): token for token in range(model.n_vocab)}
    tokens = []
    for part in re.split(r"(</?think>|<\|[a-z]+\|>)", text) if tags else [text]:
        tag = marker_tokens(model)(part)
        tokens += [tag] if tag is not None else [byte_tokens[bytes([byte])] for byte in part.encode()]
    return tokens


def held(model: Model, template: str, schema: dict[str, Any] | OutputFormat = UNIQUE) -> TokenGrammar:
    """A matcher for `schema` (or another format) after the thought, for the reply to a prompt of `template`."""
    session = Session(model, chat=ChatSettings(template=template))
    prompt = session.chat_prompt_tokens([{"role": "user", "content": "hi"}])
    fmt = schema if isinstance(schema, OutputFormat) else OutputFormat("json_schema", json.dumps(schema))
    grammar = compile_format(fmt).grammar
    found = thinking_format(grammar, template, marker_tokens(model), prompt_end(model, prompt))
    assert found is not None
    return TokenGrammar.start(model, found.grammar)


def takes_whole(model: Model, template: str, text: str, fmt: OutputFormat | None = None) -> bool:
    """Whether the grammar (of UNIQUE, or `fmt`) takes every token of `text` and is then complete."""
    grammar, tokens = held(model, template, fmt or UNIQUE), spelled(model, text)
    if grammar.validate(tokens) != len(tokens):
        return False
    grammar.consume(tokens)
    return grammar.accepting


def test_the_format_holds_what_follows_the_thought(thinking_model: Model) -> None:
    answer = '{"tags": ["a", "c"]}'
    # Qwen3's prompt leaves the reply to open a thought, or answer at once.
    assert takes_whole(thinking_model, QWEN3, f"<think>Which tags? a, c.</think>\n\n{answer}")
    assert takes_whole(thinking_model, QWEN3, answer)
    assert not takes_whole(thinking_model, QWEN3, "<think>Hmm.</think>\n\nThe tags are a and c.")
    assert not takes_whole(thinking_model, QWEN3, "<think>Hmm.</think>\n\n\n\n\n\n" + answer)  # (bounded whitespace)
    # R1's prompt opens the thought: the answer comes once the reply closes it.
    assert takes_whole(thinking_model, R1, f"Which tags? a, c.</think>\n\n{answer}")
    assert not takes_whole(thinking_model, R1, answer)  # (still the thought)
    # Any JSON object, and a regex, alike.
    for fmt, answer in ((OutputFormat("json"), '{"a": [1]}'), (OutputFormat("regex", r"\d{3}"), "123")):
        assert takes_whole(thinking_model, QWEN3, f"<think>Hmm.</think>\n{answer}", fmt)
        assert takes_whole(thinking_model, R1, f"Hmm.</think>\n{answer}", fmt)
        assert not takes_whole(thinking_model, R1, answer, fmt)


def test_a_thought_may_not_spell_its_closing_tag(thinking_model: Model) -> None:
    """Spelled in bytes, `</think>` would be taken for the thought's end by what reads the output (the reply's
    sorting, the rule for unique items), though the grammar is still in the thought: refused at its last byte."""
    for template, opening in ((QWEN3, "<think>"), (R1, "")):
        grammar = held(thinking_model, template)
        tokens = spelled(thinking_model, f"{opening}I write ") + spelled(thinking_model, "</think", tags=False)
        grammar.consume(tokens)
        assert grammar.validate(spelled(thinking_model, ">", tags=False)) == 0
        assert grammar.validate(spelled(thinking_model, " >", tags=False)) == 2  # (what is not the tag passes)


@pytest.fixture(scope="module")
def spelling_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    """A tiny model with no special token for `<think>` or `</think>`: its tags are spelled a byte a token."""
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    path = write_model(tmp_path_factory.mktemp("spelling") / "spelling.gguf", random_weights(n_vocab, seed=2),
                       n_vocab=n_vocab, space_token=True, context_length=4096)
    model = Model(path, ModelSettings(n_threads=1))
    yield model
    model.close()


def test_spelled_tags_let_a_json_answer_follow_a_thought_that_ends_at_its_first_closing_tag(
        spelling_model: Model) -> None:
    """Where the vocabulary has no special token for the tags, the thought is one lexeme that ends where its
    closing tag is first spelled; a JSON answer cannot begin as the opening tag does, so either may come first."""
    answer = '{"tags": ["a", "c"]}'

    def takes(template: str, text: str, fmt: OutputFormat = OutputFormat("json_schema", json.dumps(UNIQUE))) -> bool:
        session = Session(spelling_model, chat=ChatSettings(template=template))
        end = prompt_end(spelling_model, session.chat_prompt_tokens([{"role": "user", "content": "hi"}]))
        found = thinking_format(compile_format(fmt).grammar, template, marker_tokens(spelling_model), end,
                                fmt.kind == "regex")
        assert found is not None
        grammar, tokens = TokenGrammar.start(spelling_model, found.grammar), spelled(spelling_model, text, tags=False)
        if grammar.validate(tokens) != len(tokens):
            return False
        grammar.consume(tokens)
        return grammar.accepting

    assert marker_tokens(spelling_model)("<think>") is None
    assert takes(QWEN3, f"<think>Which tags? a, c.</think>\n\n{answer}")
    assert takes(QWEN3, answer)
    assert takes(QWEN3, f"<think>Is </thin a tag? <think> is not.</think>{answer}")
    assert not takes(QWEN3, f"<think>Hmm.</think> more thought</think>{answer}")  # (the first closing tag ends it)
    assert not takes(QWEN3, "<think>Hmm.</think>\n\nThe tags are a and c.")
    assert not takes(QWEN3, f"<think>Hmm.{answer}")  # (never closed: no answer)
    assert takes(R1, f"Which tags? a, c.</think>\n\n{answer}")  # (R1's prompt spells the opening tag)
    assert not takes(R1, answer)
    assert takes(R1, "Hmm.</think>\n123", OutputFormat("regex", r"\d{3}"))
    # A regex's answer may begin as the tag does: where the prompt did not open the thought, no thought.
    regex = compile_format(OutputFormat("regex", r"<.*")).grammar
    assert thinking_format(regex, QWEN3, marker_tokens(spelling_model), "", True) is None
    found = thinking_format(compile_format(OutputFormat("json")).grammar, QWEN3, marker_tokens(spelling_model), "",
                            False)
    assert found is not None
    assert sorted_whole(found.splitter, f"<think>Hmm.</think>\n{answer}") == Sorted("Hmm.", answer)


@pytest.mark.slow
def test_a_prompt_that_closed_the_thought_leaves_the_format_from_the_first_token(thinking_model: Model,
                                                                                 thinking_client: TestClient) -> None:
    """Qwen3's `enable_thinking` off (`chat_template_kwargs`): its prompt ends with an empty thought, so the reply is
    the answer, held from its first token."""
    grammar = compile_format(OutputFormat("json")).grammar
    assert thinking_format(grammar, QWEN3, marker_tokens(thinking_model), "<think>\n\n</think>\n\n") is None
    for seed in range(3):
        off, _ = reply(thinking_client, seed, chat_template_kwargs={"enable_thinking": False})
        assert "reasoning_content" not in off["message"] and off["finish_reason"] == "stop"  # (all answer)
        jsonschema.validate(json.loads(off["message"]["content"]), SCHEMA)


def test_tools_hold_no_thought_where_the_prompt_closed_it(thinking_model: Model) -> None:
    """Qwen3 with `enable_thinking` off: its prompt closes an empty thought, so a call (or text) comes at once."""
    from localspec.app.thinking_first import tools_think_otherwise
    from localspec.app.tool_calls import prepare_tools, tool_request

    add = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    asked = prepare_tools(tool_request([add], "auto"), QWEN3, marker_tokens(thinking_model))
    assert asked.thinking is not None and tools_think_otherwise(asked.thinking, "<think>\n\n</think>\n\n")
    closed = prepare_tools(tool_request([add], "auto"), QWEN3, marker_tokens(thinking_model), "<think>\n\n</think>\n\n")
    assert closed.thinking is None and closed.splitter is None
    grammar = TokenGrammar.start(thinking_model, closed.grammar)
    assert marker_tokens(thinking_model)("<think>") not in grammar.allowed().tolist()


def test_items_are_held_unique_in_the_answer_not_in_the_thought(thinking_model: Model) -> None:
    """localspec's own rule for uniqueItems (llguidance does not hold it on strings) reads the answer alone."""
    quote = [token for token in range(thinking_model.n_vocab) if thinking_model.token_bytes(token) == b'"']
    for template, thought in ((QWEN3, '<think>"a", "a"</think>\n'), (R1, '"a", "a"</think>\n')):
        grammar = held(thinking_model, template)
        grammar.consume(spelled(thinking_model, thought + '{"tags": ["a", "a'))
        assert not set(quote) & set(grammar.allowed().tolist())  # ("a" again would repeat an item)
        grammar = held(thinking_model, template)
        grammar.consume(spelled(thinking_model, thought + '{"tags": ["a", "b'))
        assert set(quote) <= set(grammar.allowed().tolist())


HARMONY_MARKERS = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>")
ANALYSIS, FINAL = "<|channel|>analysis<|message|>", "<|channel|>final<|message|>"


def test_gpt_oss_answers_in_a_final_message_after_its_analysis(tmp_path: Path) -> None:
    """Held to a format, gpt-oss may write its analysis first, and the format holds its final message (its
    markers control tokens, which the rule for unique items reads as their text)."""
    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    path = write_model(tmp_path / "harmony.gguf", random_weights(n_vocab, seed=4), n_vocab=n_vocab, space_token=True,
                       context_length=4096, special_pieces=[(m, TokenType.CONTROL) for m in HARMONY_MARKERS])
    model = Model(path, ModelSettings(n_threads=1))
    try:
        answer, thought = '{"tags": ["a", "b"]}', f'{ANALYSIS}"a", "a"<|end|><|start|>assistant'
        assert takes_whole(model, GPT_OSS, f"{thought}{FINAL}{answer}") and takes_whole(model, GPT_OSS, FINAL + answer)
        assert not takes_whole(model, GPT_OSS, answer) and not takes_whole(model, GPT_OSS, f"{FINAL}It is a and b.")
        grammar = held(model, GPT_OSS)
        grammar.consume(spelled(model, f'{thought}{FINAL}{{"tags": ["a", "a'))
        quote = [token for token in range(model.n_vocab) if model.token_bytes(token) == b'"']
        assert not set(quote) & set(grammar.allowed().tolist())
    finally:
        model.close()


@pytest.fixture(scope="module")
def thinking_client(thinking_model: Model) -> Iterator[TestClient]:
    session = Session(thinking_model, chat=ChatSettings(template=QWEN3))
    served = ServedModel(GenerationQueue(session, queue_size=1), GenerationSettings(), "tiny")
    with TestClient(serving.create_app(served)) as client:
        yield client
    served.queue.close()


def reply(client: TestClient, seed: int, **extra: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A reply held to SCHEMA, whole and streamed (its deltas)."""
    body = {"messages": [{"role": "user", "content": "Tags?"}], "seed": seed, "max_tokens": 300,
            "response_format": {"type": "json_schema", "json_schema": {"name": "tags", "schema": SCHEMA}}, **extra}
    whole = client.post("/v1/chat/completions", json=body)
    assert whole.status_code == 200, whole.text
    streamed = client.post("/v1/chat/completions", json={**body, "stream": True})
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in streamed.text.splitlines()
              if line.startswith("data: {") and json.loads(line[6:])["choices"]]
    return whole.json()["choices"][0], deltas


@pytest.mark.slow  # (0.6 s: twelve replies)
def test_a_response_format_reply_may_think_first_and_its_content_is_the_format(thinking_client: TestClient) -> None:
    thought_first = 0
    for seed in range(6):
        choice, deltas = reply(thinking_client, seed)
        message = choice["message"]
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(message["content"]), SCHEMA)
        assert "".join(d.get("content", "") for d in deltas) == message["content"]
        assert "".join(d.get("reasoning_content", "") for d in deltas) == (message["reasoning_content"] or "")
        thought_first += bool(message["reasoning_content"])
    assert thought_first  # (held from its first token, no reply could think)


@pytest.mark.slow
def test_an_unsorted_reply_is_held_to_the_format_from_its_first_token(thinking_client: TestClient) -> None:
    """With `reasoning_format` "none" the thought would stay in the content, which would then not be the format."""
    for seed in range(3):
        choice, _ = reply(thinking_client, seed, reasoning_format="none")
        assert "reasoning_content" not in choice["message"]
        jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMA)


@pytest.mark.slow  # (0.5 s: twelve runs)
def test_run_prints_the_answer_alone_and_the_thought_apart(thinking_model: Model, tmp_path: Path) -> None:
    from localspec.config.paths import user_profiles_dir

    path = user_profiles_dir() / "thinking.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[target]\npath = "{thinking_model.path}"\n[chat]\ntemplate = "{THINKING}"\n')
    plain = THINKING.replace("<think></think>", "")
    path.with_name("plain.toml").write_text(f'[target]\npath = "{thinking_model.path}"\n[chat]\ntemplate = "{plain}"\n')
    thought_first = 0
    for seed in range(4):
        args = ["run", "-p", "thinking", "--no-speculative", "--seed", str(seed), "--max-tokens", "300", "Tags?"]
        printed = cli(*args, "--json-schema", json.dumps(SCHEMA))
        assert printed.exit_code == 0, printed.stderr
        jsonschema.validate(json.loads(printed.stdout), SCHEMA)  # (stdout: the answer alone, as a pipe reads it)
        report = json.loads(cli(*args, "--json-schema", json.dumps(SCHEMA), "--json").stdout)
        assert json.loads(report["text"]) == json.loads(printed.stdout) and report["complete"]
        if report["reasoning"]:
            thought_first += 1
            assert report["reasoning"] in printed.stderr and "<think>" not in printed.stdout
        assert "reasoning" in json.loads(cli(*args, "--json").stdout)  # (free text: sorted too)
    assert thought_first
    # A grammar of the user's says the whole output: held from the first token, no thought before it.
    grammar = tmp_path / "answer.lark"
    grammar.write_text('start: "yes" | "no"\n')
    assert cli(*args[:-1], "--grammar", str(grammar), "Yes?").stdout.strip() in ("yes", "no")
    # A reply that may think first gets room for its thought where no --max-tokens is given.
    budget = [json.loads(cli("run", "-p", profile, "--json", "--stop", " ", "hi").stdout)["settings"]["max_tokens"]
              for profile in ("thinking", "plain")]
    assert budget == [THINKING_MAX_TOKENS, FREE_TEXT_MAX_TOKENS]


@pytest.mark.slow  # (1 s: four chats)
def test_chat_shows_the_thought_dimmed_without_its_tags(thinking_model: Model) -> None:
    """The history keeps the reply as written; the terminal shows the thought without its tags, then the answer
    (here held to a format after the thought, where the tiny model thinks first more often than in free text)."""
    from click.testing import CliRunner

    from localspec.app.history import HistoryStore
    from localspec.cli import main
    from localspec.config.paths import history_file, user_profiles_dir

    path = user_profiles_dir() / "thinking.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[target]\npath = "{thinking_model.path}"\n[chat]\ntemplate = "{THINKING}"\n')
    thought_shown = 0
    for seed in range(4):
        shown = CliRunner().invoke(main, ["chat", "-p", "thinking", "--seed", str(seed), "--max-tokens", "300",
                                          "--no-speculative", "--json-schema", json.dumps(SCHEMA)],
                                   input=b"Tags?\n", catch_exceptions=False)
        assert shown.exit_code == 0, shown.stderr
        store = HistoryStore(history_file())
        try:
            written = store.get(store.latest())["messages"][-1]["content"]
        finally:
            store.close()
        sorted_ = split_thought(written)
        if sorted_.reasoning:
            thought_shown += 1
            assert "<think>" not in shown.stdout and sorted_.reasoning in shown.stdout
        assert sorted_.content.strip() in shown.stdout
    assert thought_shown



# -- a reasoning budget ---------------------------------------------------------------------------------------


def thought_then_forced(grammar: TokenGrammar, tokens: list[int]) -> int | None:
    """The token the grammar forces once it has taken `tokens` (None: it leaves a choice)."""
    assert grammar.validate(tokens) == len(tokens)
    grammar.consume(tokens)
    return grammar.forced()


def test_a_reasoning_budget_writes_the_closing_tag_once_the_thought_has_spent_it(thinking_model: Model) -> None:
    """After `budget` tokens of thought the closing tag is the one token allowed (a special token: the grammar
    writes it, as target-only decoding and speculation alike do); before, the model may close it itself."""
    close = marker_tokens(thinking_model)("</think>")
    free = compile_format(OutputFormat("json")).grammar
    for template, opening, end in ((QWEN3, "<think>", ""), (R1, "", "<think>\n")):
        for budget in (0, 1, 3):
            found = thinking_format(free, template, marker_tokens(thinking_model), end, budget=budget)
            assert found is not None
            thought = spelled(thinking_model, opening + "abcdef"[:budget])
            assert thought_then_forced(TokenGrammar.start(thinking_model, found.grammar), thought) == close
            if budget:
                early = TokenGrammar.start(thinking_model, found.grammar)
                assert thought_then_forced(early, thought[:-1]) is None and close in early.allowed().tolist()
        unbounded = thinking_format(free, template, marker_tokens(thinking_model), end)
        assert thought_then_forced(TokenGrammar.start(thinking_model, unbounded.grammar),
                                   spelled(thinking_model, opening + "a" * 40)) is None


def test_a_reasoning_budget_bounds_gpt_oss_analysis_and_a_thought_before_calls(tmp_path: Path,
                                                                             thinking_model: Model) -> None:
    from localspec.app.tool_calls import prepare_tools, tool_request

    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 24
    path = write_model(tmp_path / "harmony.gguf", random_weights(n_vocab, seed=4), n_vocab=n_vocab, space_token=True,
                       context_length=4096, special_pieces=[(m, TokenType.CONTROL) for m in HARMONY_MARKERS])
    with Model(path, ModelSettings(n_threads=1)) as model:
        end = marker_tokens(model)("<|end|>")
        grammar = compile_format(OutputFormat("json")).grammar
        for budget in (0, 2):
            found = thinking_format(grammar, GPT_OSS, marker_tokens(model), "", budget=budget)
            analysis = spelled(model, ANALYSIS + "ab"[:budget])
            assert thought_then_forced(TokenGrammar.start(model, found.grammar), analysis) == end
    add = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    tools = prepare_tools(tool_request([add], "auto"), QWEN3, marker_tokens(thinking_model), budget=2)
    thought = spelled(thinking_model, "<think>ab")
    assert thought_then_forced(TokenGrammar.start(thinking_model, tools.grammar), thought) == \
        marker_tokens(thinking_model)("</think>")


OPENED = "{% for m in messages %}{{ m['content'] }} {% endfor %}<think>\n{% if false %}</think>{% endif %}"


@pytest.mark.slow  # (0.6 s: eighteen runs)
def test_run_holds_the_thought_to_the_reasoning_budget_with_or_without_speculation(thinking_model: Model,
                                                                                   spelling_model: Model) -> None:
    """A prompt that opens the thought (DeepSeek R1's way), free text and a format: the thought is cut at the budget
    and closed for the model; speculation writes the same text as target-only decoding."""
    from localspec.config.paths import user_profiles_dir

    folder = user_profiles_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for name, model in (("opened", thinking_model), ("spelled", spelling_model)):
        template = json.dumps(OPENED)  # (a TOML basic string reads JSON's escapes alike)
        (folder / f"{name}.toml").write_text(f'[target]\npath = "{model.path}"\n[draft]\npath = "{model.path}"\n'
                                             f'[chat]\ntemplate = {template}\n')
    close = marker_tokens(thinking_model)("</think>")

    def thought_length(result: dict[str, Any]) -> int:
        return result["tokens"].index(close) if close in result["tokens"] else len(result["tokens"])

    cut = 0
    for seed in range(3):
        for extra in ([], ["--json-schema", json.dumps(SCHEMA)]):
            args = ["run", "-p", "opened", "--seed", str(seed), "--max-tokens", "200", "--json", *extra, "Tags?"]
            whole = json.loads(cli(*args).stdout)
            results = [json.loads(cli(*args, "--reasoning-budget", "3", *flag).stdout)
                       for flag in ([], ["--no-speculative"])]
            assert results[0]["text"] == results[1]["text"] and results[0]["reasoning"] == results[1]["reasoning"]
            budgeted = results[0]
            assert thought_length(budgeted) <= 3 and budgeted["tokens"][thought_length(budgeted)] == close
            cut += thought_length(whole) > 3
            if extra:
                jsonschema.validate(json.loads(budgeted["text"]), SCHEMA)
            assert json.loads(cli(*args, "--reasoning-budget", "0").stdout)["reasoning"] is None
    assert cut  # (some thought ran past the budget where none was set)
    unheld = cli("run", "-p", "spelled", "--max-tokens", "5", "--reasoning-budget", "3", "Tags?")
    assert unheld.exit_code == 0 and "warning: the reasoning budget is not held" in unheld.stderr


@pytest.mark.slow
def test_serve_takes_a_thinking_budget_per_request_and_says_where_it_is_not_held(thinking_model: Model,
                                                                                  spelling_model: Model) -> None:
    session = Session(thinking_model, chat=ChatSettings(template=OPENED))
    served = ServedModel(GenerationQueue(session, queue_size=1), GenerationSettings(), "tiny")
    try:
        with TestClient(serving.create_app(served)) as client:
            for budget in (0, 2):
                body = {"messages": [{"role": "user", "content": "Tags?"}], "seed": 1, "max_tokens": 40,
                        "thinking_budget_tokens": budget}
                message = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
                thought = message.get("reasoning_content") or ""
                assert len(thought.split()) <= budget  # (the tiny vocabulary's words are a token each)
                assert client.post("/v1/chat/completions", json={**body, "thinking_budget_tokens": "two"}
                                   ).status_code == 400
                assert "warnings" not in client.post("/v1/chat/completions", json=body).json()
    finally:
        served.queue.close()
    session = Session(spelling_model, chat=ChatSettings(template=OPENED))
    served = ServedModel(GenerationQueue(session, queue_size=1), GenerationSettings(), "spelled")
    try:
        with TestClient(serving.create_app(served)) as client:
            body = {"messages": [{"role": "user", "content": "Tags?"}], "max_tokens": 5, "thinking_budget_tokens": 1}
            assert client.post("/v1/chat/completions", json=body).json()["warnings"] == [
                "the reasoning budget is not held: this model's tag that closes a thought is no special token of its"
                " vocabulary"]  # (was: the budget silently not held)
            body["thinking_budget_tokens"] = -1
            assert "warnings" not in client.post("/v1/chat/completions", json=body).json()
    finally:
        served.queue.close()
