"""Chat templates come from untrusted files: rendered in Jinja's sandbox, failures are one line."""

from __future__ import annotations

import sys
import time

import pytest

from localspec.errors import LocalspecError
from localspec.runtime.chat_template import render_chat, template_problem

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_a_chatml_template_renders_with_the_generation_prompt() -> None:
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    text = render_chat(template, MESSAGES)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_bos_token_and_tojson_are_available() -> None:
    assert render_chat("{{ bos_token }}{{ messages | tojson }}", MESSAGES[1:], bos_token="<s>") == '<s>[{"role": "user", "content": "Hi"}]'


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__init__.__globals__ }}",
        "{% set x = messages.append({'role': 'user', 'content': 'injected'}) %}{{ messages }}",
    ],
)
def test_escapes_from_the_sandbox_are_refused(template: str) -> None:
    with pytest.raises(LocalspecError, match="chat template failed to render"):
        render_chat(template, [dict(m) for m in MESSAGES])


@pytest.mark.parametrize("template", [
    "{% set x = messages[0].update({'role': 'user'}) %}{{ messages }}",
    "{% set x = messages[0].pop('content') %}{{ messages }}",
    "{% set x = tools.append({'type': 'function'}) %}{{ tools }}",
    "{% set x = tools[0]['function'].clear() %}{{ tools }}",
])
def test_what_a_template_is_given_it_cannot_change(template: str) -> None:
    messages, tools = [dict(m) for m in MESSAGES], [{"type": "function", "function": {"name": "f"}}]
    with pytest.raises(LocalspecError, match="is unsafe"):
        render_chat(template, messages, tools=tools)
    assert messages == MESSAGES and tools == [{"type": "function", "function": {"name": "f"}}]


@pytest.mark.parametrize("template, rendered", [
    # Kimi K2's: a list of its own, appended to
    ("{% set ns = namespace(ids=[]) %}{% for m in messages %}{% set _ = ns.ids.append(m.role) %}{% endfor %}"
     "{{ ns.ids | join(',') }}", "system,user"),
    ("{% set seen = {} %}{% for m in messages %}{% set _ = seen.update({m.role: 1}) %}{% endfor %}{{ seen | tojson }}",
     '{"system": 1, "user": 1}'),
    # Command R7B's and Kimi K3's loop controls
    ("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}", "Be brief."),
    ("{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ m.content }}{% endfor %}", "Hi"),
    # LFM2.5's training block, Hugging Face's `{% generation %}`: its content
    ("{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}", "[Be brief.][Hi]"),
    # (llama.cpp's DeepSeek R1 template writes a `map` as JSON)
    ("{{ messages | map(attribute='role') | tojson }}", '["system", "user"]'),
])
def test_templates_render_what_hugging_face_and_llama_cpp_render(template: str, rendered: str) -> None:
    assert render_chat(template, MESSAGES) == rendered


def test_an_error_names_a_given_value_by_its_type() -> None:
    with pytest.raises(LocalspecError, match="'dict object' has no attribute 'missing'"):
        render_chat("{{ messages[0].missing.x }}", MESSAGES)


@pytest.mark.parametrize("template", [
    "{% set l = [1] %}{% for i in range(40) %}{% set _ = l.extend(l) %}{% endfor %}{{ l | length }}",
    "{% set l = [] %}{% for i in range(20) %}{% set _ = l.extend(range(99999)) %}{% endfor %}x",
])
def test_a_list_the_template_makes_is_kept_small(template: str) -> None:
    with pytest.raises(LocalspecError, match="grows a list or map past"):
        render_chat(template, MESSAGES)


@pytest.mark.parametrize("template, error", [
    ("{% set _ = dict.update(messages[0], {'content': 'x'}) %}{{ messages }}", "changes a value it was given"),
    ("{% set _ = dict.clear(tools[0]) %}{{ tools }}", "changes a value it was given"),
    ("{% set ns = namespace(l=[1]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}{% endfor %}x",
     "makes a list of more than"),
    ("{% set d = {} %}{% set _ = dict.update(d, {'a': 1}) %}{{ 'x' if d.a == 1 }}", None),  # (one of its own)
    ("{% set big = ['x' * 2**20] * 2**20 %}x", "makes a text of more than"),  # (a megabyte, a million times)
    ("{% set big = ['x' * 2**20] * 32 %}{{ ([big] | select | tojson) | length }}", "makes a text of more than"),
    ("{% set big = ['x' * 2**20] * 8 %}{% set ns = namespace(l=[]) %}{% for i in range(4) %}"
     "{% set ns.l = ns.l + big %}{% endfor %}{{ ns.l }}", "makes a text of more than"),
])
def test_changing_or_growing_past_the_bounds_is_refused_by_any_way_in(template: str, error: str | None) -> None:
    messages, tools = [dict(m) for m in MESSAGES], [{"type": "function", "function": {"name": "f"}}]
    if error is None:
        assert render_chat(template, messages, tools=tools) == "x"
        return
    with pytest.raises(LocalspecError, match=error):
        render_chat(template, messages, tools=tools)
    assert messages == MESSAGES and tools == [{"type": "function", "function": {"name": "f"}}]


def test_a_list_that_holds_itself_is_written_at_once() -> None:
    started = time.monotonic()
    assert render_chat("{% set l = [1] %}{% set _ = l.append(l) %}{{ l }}", MESSAGES) == "[1, [...]]"
    assert time.monotonic() - started < 1  # (its size was counted round the loop: 5 s)


def test_what_a_template_is_given_may_be_nested_deeper_than_pythons_stack() -> None:
    deep: dict = {}
    inner = deep
    for _ in range(3000):
        inner["x"] = {}
        inner = inner["x"]
    messages = [{"role": "user", "content": "hi", "deep": deep}]
    assert render_chat("{{ messages[0].content }}", messages) == "hi"


def test_raise_exception_in_a_template_is_a_clean_error() -> None:
    with pytest.raises(LocalspecError, match="only user and assistant roles"):
        render_chat("{{ raise_exception('only user and assistant roles') }}", MESSAGES)


def test_a_broken_template_is_a_clean_error() -> None:
    with pytest.raises(LocalspecError, match="chat template failed to render"):
        render_chat("{% for m in messages %}", MESSAGES)


@pytest.mark.parametrize("template", ["{% if false %}x{% endif %}", "{% for m in messages %}\n{% endfor %}"])
def test_a_template_that_renders_no_text_is_refused(template: str) -> None:
    with pytest.raises(LocalspecError, match="rendered no text for these messages"):  # (was: a reply to nothing)
        render_chat(template, MESSAGES)


@pytest.mark.parametrize("template, error", [
    ("{{ 1 / 0 }}", "ZeroDivisionError"),
    ("{{ messages[0].content + 1 }}", "TypeError"),
    ("{{ '%d' % 'x' }}", "TypeError"),
    ("{{ range(10**7, 10**7 + 10**6) | list | length }}", "OverflowError"),  # the sandbox refuses huge ranges
])
def test_a_template_that_fails_in_python_is_a_clean_error(template: str, error: str) -> None:
    with pytest.raises(LocalspecError, match=f"chat template failed to render: {error}: "):
        render_chat(template, MESSAGES)


@pytest.mark.parametrize("template, error", [
    ("{{ ('a' * 10**9) | length }}", "repeats a value to more than"),
    ("{{ [0] * 10**8 }}", "repeats a value to more than"),
    ("{% set n = 10**6 %}{{ 2 ** n }}", "too large a power"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{{ 'x' * 100 }}{% endfor %}{% endfor %}",
     "writes more than"),
    # (were: 4 GB, or minutes of arithmetic or of Python loops the step budget does not see)
    ("{{ 'a' | center(4000000000) | length }}", "a number beyond"),
    ("{{ 'a'.ljust(4000000000) | length }}", "a number beyond"),
    ("{{ ('{:>%d}' % 10**9).format(1) | length }}", "wider than"),
    ("{{ '%1000000000d' % 1 }}", "wider than"),
    ("{{ '%1000000000d' | format(1) }}", "wider than"),
    ("{% set s = 'a' * 100000 %}{{ s.replace('a', 'b' * 1000) | length }}", "a text of more than"),
    ("{% set s = 'a' * 100000 %}{{ s | replace('a', 'b' * 1000) | length }}", "a text of more than"),
    ("{% set s = '\t' * 100000 %}{{ s.expandtabs(1000) | length }}", "a text of more than"),
    ("{% set ns = namespace(x=1) %}{% set ns.x = 10 ** 1000 %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
     "{% endfor %}",
     "an integer of more than"),
    ("{{ (10 ** 1000) ** 100 }}", "an integer of more than"),
    ("{{ [1, 2] | slice(10**9) | list }}", "a number beyond"),
    ("{{ lipsum(n=10**6) }}", "undefined"),
    # (were let through by the first bounds: 40 GB, 10 GB, 1.6 TB at once)
    ("{{ [[1]] | tojson(indent=10**6) }}", "indents JSON by more than"),
    ("{{ '%*s' % (10**10, 'a') }}", "whose width another field gives"),
    ("{{ '%(a)10000000000s' % {'a': 'x'} }}", "wider than"),
    ("{{ '{:{}}'.format('a', '>10000000000') }}", "whose width another field gives"),
    ("{{ range(100000) | join('a' | center(16000000)) }}", "a text of more than"),
    ("{{ ('a\n' * 100000) | indent(16000000, true, true) }}", "a text of more than"),
    # (200 MB from a 1 MB text in one step, terabytes from 16 MiB ones)
    ("{% set s = 'a' * 1000000 %}{{ ([s] * 200) | join | length }}", "a text of more than"),
    ("{% set s = 'a' * 1000000 %}{{ ''.join([s] * 200) | length }}", "a text of more than"),
    ("{% set s = 'a' * 1000000 %}{{ ('%(a)s' * 200) | format(a=s) | length }}", "a text of more than"),
    ("{% set s = 'a' * 1000000 %}{{ ('{0}' * 200).format(s) | length }}", "a text of more than"),
    ("{% set s = 'a' * 1000000 %}{{ (('%s' * 200) % ((s,) * 200)) | length }}", "a text of more than"),
    ("{% set s = 'a' * 1000000 %}{{ ([s] * 200) | tojson | length }}", "a text of more than"),
    ("{% set s = 'a' * 1000000 %}{{ ([s] * 200) | string | length }}", "a text of more than"),
])
def test_a_template_that_would_fill_the_memory_is_stopped(template: str, error: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Templates come from downloaded files: one must not take the machine's memory (or `serve`'s)."""
    from localspec.runtime import chat_template

    monkeypatch.setattr(chat_template, "MAX_RENDERED_CHARS", 100_000)  # (16 MiB takes a second to write)
    with pytest.raises(LocalspecError, match=error):
        render_chat(template, MESSAGES)
    assert render_chat("{{ '-' * 3 }}{{ [1] * 2 }}{{ 2 ** 3 }}", MESSAGES) == "---[1, 1]8"  # ordinary use stays
    ordinary = ("{{ 'a'|center(5) }}|{{ 'x'.rjust(3, '0') }}|{{ '%3d' % 7 }}|{{ '{:>4}'.format('b') }}|"
                "{{ 'aa'|replace('a', 'bc') }}")
    assert render_chat(ordinary, MESSAGES) == "  a  |00x|  7|   b|bcbc"


@pytest.mark.parametrize("template, limit, error", [
    # a value doubled at every step, a filter's own loop growing a list: no one step is huge
    ("{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "RENDER_BYTES", "takes more than 64 MiB"),
    ("{{ range(100000) | map('center', 16000000) | join | length }}", "RENDER_BYTES", "takes more than 64 MiB"),
    pytest.param("{{ (' ' * 1048576) | wordwrap(1) | length }}", "RENDER_SECONDS", "renders for more than 0.5 s",
                 marks=pytest.mark.slow),  # (quadratic; waits out the watchdog's half second)
])
@pytest.mark.slow
def test_a_template_that_grows_or_runs_on_inside_few_steps_is_stopped_by_the_watchdog(
        template: str, limit: str, error: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """(were: gigabytes before the OOM killer, or hours of a filter's Python loop the step budget never sees)"""
    from localspec.runtime import template_sandbox

    monkeypatch.setattr(template_sandbox, limit, 64 << 20 if limit == "RENDER_BYTES" else 0.5)
    with pytest.raises(LocalspecError, match=error):
        render_chat(template, MESSAGES)
    assert render_chat("{{ messages | length }}", MESSAGES) == "2"  # (and nothing is left pending)


def test_large_numbers_are_still_written_and_formatted() -> None:
    """(were refused by the first bounds: a Unix time in a tool call's arguments failed Qwen3-Coder's template)"""
    template = ("{{ 1714000000 | string }} {{ -20000000 | abs }} {{ '%d' | format(20000000) }}"
                " {{ '{}'.format(20000000) }}")
    assert render_chat(template, MESSAGES) == "1714000000 20000000 20000000 20000000"


def test_checking_a_format_takes_linear_time() -> None:
    """(was: the width check's regex backtracked quadratically, about 2 h at the longest text `*` allows)"""
    started = time.perf_counter()
    for text in ("'{' ~ (':' * 1000000)", "'{' ~ ('1' * 1000000)"):
        assert len(render_chat(f"{{% set s = {text} %}}{{{{ s % () }}}}", MESSAGES)) == 1000001
    with pytest.raises(LocalspecError, match="incomplete format"):  # (a `%` that formats nothing: said so)
        render_chat("{% set s = '%' ~ (' ' * 1000000) %}{{ s % () }}", MESSAGES)
    assert time.perf_counter() - started < 5  # (about 0.1 s; 8,000 characters took 0.4 s before)


@pytest.mark.parametrize("template", [
    "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}x",
    "{% set s = 'ab' * 500000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "{% macro f(n) %}{% for i in range(99999) %}{% endfor %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
])
def test_a_template_that_loops_for_hours_is_stopped(template: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loops that write nothing ran on at full CPU (`run`, `chat` and `serve` hung on a downloaded model's template)."""
    from localspec.runtime import chat_template

    monkeypatch.setattr(chat_template, "MAX_TEMPLATE_STEPS", 20_000)  # (2,000,000 takes about half a second)
    tracing = sys.gettrace()
    with pytest.raises(LocalspecError, match="the template runs more than 20000 steps"):
        render_chat(template, MESSAGES)
    assert sys.gettrace() is tracing  # (a debugger's or coverage's trace function is given back)
    assert render_chat("{% for m in messages %}{{ m.role }};{% endfor %}", MESSAGES * 200).count(";") == 400


def test_a_lone_surrogate_a_template_writes_becomes_a_replacement_character() -> None:
    assert render_chat('{{ "\\ud800" }}ok', MESSAGES) == "\ufffdok"


def test_a_template_nested_too_deeply_is_a_problem_not_a_crash() -> None:
    assert template_problem("{{ " + "(" * 300 + "1" + ")" * 300 + " }}") == "the chat template is nested too deeply to compile"

