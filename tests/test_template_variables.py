"""More of a chat template's inputs by name: `chat_template_kwargs` and `reasoning_effort` in a request,
`--chat-template-kwargs` on the command line (Qwen3's `enable_thinking`, gpt-oss's `reasoning_effort`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from cli_helpers import cli, one_error_line
from starlette.testclient import TestClient

from click.testing import CliRunner

from localspec.app import serving
from localspec.app.generation_queue import GenerationQueue
from localspec.app.serving import ServedModel
from localspec.app.session import Session
from localspec.cli import main
from localspec.runtime.chat_template import render_chat
from localspec.runtime.model import Model
from localspec.settings import ChatSettings, GenerationSettings, ModelSettings

# A template that says the variables it was given (the tiny vocabulary spells every byte).
TEMPLATE = ("{% if enable_thinking is defined and not enable_thinking %}[no thinking]{% endif %}"
            "{% if reasoning_effort is defined %}[effort {{ reasoning_effort }}]{% endif %}"
            "{% if extra is defined %}[{{ extra.word }}]{% endif %}{% for m in messages %}{{ m['content'] }} {% endfor %}")


@pytest.fixture(scope="module")
def session(tiny_pair: tuple[Path, Path]) -> Iterator[Session]:
    model = Model(tiny_pair[0], ModelSettings(n_threads=1))
    yield Session(model, chat=ChatSettings(template=TEMPLATE))
    model.close()


@pytest.fixture(scope="module")
def client(session: Session) -> Iterator[TestClient]:
    served = ServedModel(GenerationQueue(session, queue_size=1), GenerationSettings(), "tiny")
    with TestClient(serving.create_app(served)) as client:
        yield client
    served.queue.close()


def prompt_length(client: TestClient, **extra: Any) -> int:
    reply = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                      "max_tokens": 1, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()["usage"]["prompt_tokens"]


def refusal(client: TestClient, path: str = "/v1/chat/completions", **extra: Any) -> tuple[str, str]:
    body = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"}
    reply = client.post(path, json={**body, **extra})
    assert reply.status_code == 400, reply.text
    return reply.json()["error"]["param"], reply.json()["error"]["message"]


def test_a_requests_variables_reach_the_template(client: TestClient, session: Session) -> None:
    def rendered_length(variables: dict[str, Any]) -> int:
        """The prompt's tokens with `variables`, rendered here: more than without, by what the template says."""
        text = render_chat(TEMPLATE, [{"role": "user", "content": "hi"}], variables=variables)
        assert text.startswith("[") is bool(variables) and text.endswith("hi ")
        return len(session.chat_prompt_tokens([{"role": "user", "content": "hi"}], variables=variables))

    assert prompt_length(client) == rendered_length({})
    assert prompt_length(client, chat_template_kwargs={"enable_thinking": False}) == rendered_length(
        {"enable_thinking": False})
    assert prompt_length(client, reasoning_effort="high") == rendered_length({"reasoning_effort": "high"})
    assert prompt_length(client, chat_template_kwargs={"extra": {"word": "ab"}}) == rendered_length(
        {"extra": {"word": "ab"}})
    # The server's own (`serve --chat-template-kwargs`), which a request's override.
    session.template_variables = {"reasoning_effort": "low"}
    try:
        assert prompt_length(client) == rendered_length({"reasoning_effort": "low"})
        assert prompt_length(client, chat_template_kwargs={"reasoning_effort": "medium"}) == rendered_length(
            {"reasoning_effort": "medium"})
        assert prompt_length(client) == rendered_length({"reasoning_effort": "low"})  # (the request's is its own)
        assert prompt_length(client, reasoning_effort="minimal") == rendered_length({"reasoning_effort": "low"})
    finally:
        session.template_variables = {}
    assert len({rendered_length({}), rendered_length({"reasoning_effort": "low"}),
                rendered_length({"reasoning_effort": "medium"})}) == 3


@pytest.mark.parametrize("extra, param, says", [
    ({"chat_template_kwargs": [1]}, "chat_template_kwargs", "must be a JSON object"),
    ({"chat_template_kwargs": {"1st": True}}, "chat_template_kwargs", "no name a template can read"),
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs", "given to the template by localspec"),
    ({"chat_template_kwargs": {"self": 1}}, "chat_template_kwargs", "no name a template can read"),  # (Jinja's)
    ({"chat_template_kwargs": {"if": 1}}, "chat_template_kwargs", "no name a template can read"),
    ({"chat_template_kwargs": {"range": 1}}, "chat_template_kwargs", "given to the template by localspec"),
    ({"chat_template_kwargs": {"x": json.loads("[" * 900 + "]" * 900)}}, "chat_template_kwargs", "nested more"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort", "must be one of"),
    ({"reasoning_effort": ["high"]}, "reasoning_effort", "must be one of"),
])
def test_bad_variables_are_refused_naming_the_field(client: TestClient, extra: dict[str, Any], param: str,
                                                   says: str) -> None:
    found, message = refusal(client, **extra)
    assert found == param and says in message


def test_a_variable_too_large_for_a_number_is_refused_as_the_command_line_refuses_it(client: TestClient) -> None:
    """JSON's 1e999 is read as infinity (which no JSON number is): refused, as `--chat-template-kwargs` refuses it."""
    for number in ("1e999", "-1e999", "NaN"):
        reply = client.post("/v1/chat/completions", headers={"Content-Type": "application/json"}, content=(
            '{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": {"y": [%s]}}}' % number))
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["param"] == "chat_template_kwargs"
        assert "must be finite numbers" in reply.json()["error"]["message"]


def test_a_completion_has_no_template_to_give_variables_to(client: TestClient) -> None:
    assert refusal(client, "/v1/completions", chat_template_kwargs={"enable_thinking": False})[0] == "chat_template_kwargs"
    empty = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1, "chat_template_kwargs": {}})
    assert empty.status_code == 200, empty.text  # (what clients send where they give none)


def test_special_token_text_in_a_variable_is_text(session: Session) -> None:
    """`</s>` in a variable's value is spelled, not the end-of-sequence token (as in a message's content)."""
    messages = [{"role": "user", "content": "hi"}]
    tokens = session.chat_prompt_tokens(messages, variables={"extra": {"word": "a</s>b"}})
    assert session.target.eos_token not in tokens
    assert len(tokens) > len(session.chat_prompt_tokens(messages, variables={"extra": {"word": "ab"}}))


@pytest.fixture
def templated_profile(tiny_pair: tuple[Path, Path]) -> str:
    from localspec.config.paths import user_profiles_dir

    path = user_profiles_dir() / "templated.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[target]\npath = "{tiny_pair[0]}"\n[chat]\ntemplate = "{TEMPLATE}"\n')
    return "templated"


@pytest.mark.slow  # (two runs)
def test_the_command_lines_variables_reach_the_template(templated_profile: str) -> None:
    def prompt_tokens(*extra: str) -> int:
        result = cli("run", "-p", templated_profile, "--max-tokens", "1", "--json", *extra, "hi")
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)["stats"]["prompt_tokens"]

    assert prompt_tokens("--chat-template-kwargs", '{"extra": {"word": "abc"}}') > prompt_tokens()


@pytest.mark.parametrize("value, says", [
    ("{enable_thinking: false}", "not valid JSON"),
    ('{"x": ' + "[" * 600 + "]" * 600 + "}", "nested more"),
    ("[1]", "must be a JSON object"),
    ('{"tools": []}', "given to the template by localspec"),
])
def test_bad_command_line_variables_are_one_line(templated_profile: str, value: str, says: str) -> None:
    one_error_line(cli("run", "-p", templated_profile, "--chat-template-kwargs", value, "hi"), 2,
                   "--chat-template-kwargs", says)


def test_raw_text_has_no_template_to_give_variables_to(templated_profile: str) -> None:
    one_error_line(cli("run", "-p", templated_profile, "--raw", "--chat-template-kwargs", '{"a": 1}', "hi"), 2,
                   "--chat-template-kwargs", "--raw")


def _chat(profile: str, script: str, *args: str) -> str:
    """`localspec chat` on `profile` with `script` piped in; its stderr (replies, notes, /stats)."""
    command = ["chat", "-p", profile, "--temperature", "0", "--max-tokens", "2", "--threads", "1", *args]
    result = CliRunner().invoke(main, command, input=script, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stderr


def _prompt_tokens(stats: str) -> int:
    line = next(line for line in stats.splitlines() if "prompt tokens evaluated this turn" in line)
    return int(line.split(" of ")[1].split()[0])


@pytest.mark.slow  # (four chats)
def test_a_resumed_chat_keeps_its_variables_unless_the_command_line_gives_others(templated_profile: str) -> None:
    """`chat --continue` rendered the conversation without the variables it was started with."""
    word = '{"extra": {"word": "abcdef"}}'
    _chat(templated_profile, "hi\n", "--chat-template-kwargs", word)
    kept = _prompt_tokens(_chat(templated_profile, "/retry\n/stats\n", "--continue"))
    replaced = _prompt_tokens(_chat(templated_profile, "/retry\n/stats\n", "--continue", "--chat-template-kwargs", "{}"))
    given = _prompt_tokens(_chat(templated_profile, "/retry\n/stats\n", "--continue", "--chat-template-kwargs", word))
    assert kept == given > replaced


def test_a_saved_conversation_carries_its_variables_and_a_file_without_them_goes_on_with_the_chats(
        templated_profile: str, tmp_path: Path) -> None:
    from localspec.app.conversation import Conversation

    with_word, without = tmp_path / "with.json", tmp_path / "without.json"
    _chat(templated_profile, f"/save {with_word}\n", "--chat-template-kwargs", '{"extra": {"word": "ab"}}')
    _chat(templated_profile, f"/save {without}\n")
    assert json.loads(with_word.read_text())["settings"]["chat_template_kwargs"] == {"extra": {"word": "ab"}}
    assert "chat_template_kwargs" not in json.loads(without.read_text())["settings"]
    # Loaded into a chat started with other variables: the file's win where it has them, else the chat's go on.
    script = f"/load {without}\n/save {tmp_path / 'a.json'}\n/load {with_word}\n/save {tmp_path / 'b.json'}\n"
    stderr = _chat(templated_profile, script, "--chat-template-kwargs", '{"extra": {"word": "cd"}}')
    assert "not known here" not in stderr  # (not taken for a setting of a later version)
    assert json.loads((tmp_path / "a.json").read_text())["settings"]["chat_template_kwargs"]["extra"]["word"] == "cd"
    assert json.loads((tmp_path / "b.json").read_text())["settings"]["chat_template_kwargs"]["extra"]["word"] == "ab"
    with pytest.raises(Exception, match="chat_template_kwargs.*given to the template by localspec"):
        Conversation.from_json({"messages": [], "settings": {"chat_template_kwargs": {"messages": 1}}},
                               GenerationSettings())
