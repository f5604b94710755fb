"""`localspec run` on the tiny models: text from outside, files that are not files, Ctrl-C and a closed pipe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import click
import pytest
from cli_helpers import cli, one_error_line
from click.testing import CliRunner

from localspec.cli import main


@pytest.fixture
def tiny_args(tiny_pair: tuple[Path, Path]) -> list[str]:
    return ["run", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--raw", "--temperature", "0", "--threads", "1"]


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


@pytest.mark.slow  # two bench runs
def test_bench_sends_the_system_prompt_as_run_does(tiny_pair: tuple[Path, Path]) -> None:
    from localspec.config.paths import user_profiles_dir

    refusing = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('a system prompt') }}"
                "{% endif %}{{ m['content'] }} {% endfor %}")
    path = user_profiles_dir() / "nosystem.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[target]\npath = "{tiny_pair[0]}"\n[draft]\npath = "{tiny_pair[1]}"\n'
                    f'[chat]\ntemplate = "{refusing}"\n')
    bench = ["bench", "-p", "nosystem", "--prompts", "1", "--max-tokens", "2", "--temperatures", "0", "--threads", "1"]
    assert cli(*bench).exit_code == 0
    with_system = cli(*bench, "--system", "Be brief.")  # (was: measured without it)
    assert with_system.exit_code == 1 and "failed to render: a system prompt" in with_system.stderr.splitlines()[-1]


def test_invalid_utf8_in_the_prompt_argument_stop_and_system_is_replaced(tiny_profile: str) -> None:
    # Python hands an invalid byte on the command line over as a lone surrogate ('\xe9' -> '\udce9').
    result = cli("run", "-p", tiny_profile, "--temperature", "0", "--threads", "1", "--max-tokens", "4",
                 "--stop", "x\udce9", "--system", "\ud800", "caf\udce9 the cat")
    assert result.exit_code == 0, result.stderr
    assert sorted(line.split(" is not")[0] for line in warnings(result.stderr)) == \
        ["warning: --stop", "warning: --system", "warning: the prompt"]
    assert result.stdout_bytes.decode("utf-8")


def test_no_speculative_needs_no_draft_and_raw_refuses_a_system_prompt(tiny_args: list[str], tiny_pair) -> None:
    for draft in (str(tiny_pair[1]), "/nonexistent.gguf"):  # the draft is neither loaded nor looked for
        alone = cli("run", "--target", str(tiny_pair[0]), "--draft", draft, "--raw", "--n-batch", "1",
                    "--no-speculative", "--max-tokens", "3", "the cat")
        assert alone.exit_code == 0 and "note:" not in alone.stderr, alone.stderr
    one_error_line(cli(*tiny_args, "--system", "Be brief.", "the cat"), 2, "--system goes into the chat template")
    bench = ["bench", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--raw", "--max-tokens", "2",
             "--prompts", "1"]
    one_error_line(cli(*bench, "--system", "Be brief."), 2, "--system goes into the chat template")  # (was: ignored)
    one_error_line(cli(*bench, "--n-batch", "1"), 2, "leaves no room to verify draft tokens: raise it to 2 or more")
    one_error_line(cli(*tiny_args, "--threads", "100000", "the cat"), 2, "--threads", "1<=x<=512")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run", "--seed", "1.5", "hi"], "--seed': '1.5' is not a whole number"),  # (was: "not a valid integer range")
        (["run", "--temperature", "warm", "hi"], "--temperature': 'warm' is not a number"),
        (["run", "--draft-max", "2.5", "hi"], "'2.5' is neither a whole number nor 'adaptive'"),
        (["history", "show", "1e3"], "'1e3' is not a whole number"),
        (["serve", "--port", "80.5"], "'80.5' is not a whole number"),
        (["history", "remove", "1_0"], "'1_0' is not a whole number"),  # (was: conversation 10 removed)
        (["history", "show", "\u0663"], "is not a whole number"), (["run", "--seed", "\uff13", "hi"], "is not a whole"),
        (["run", "--temperature", "0_5", "hi"], "'0_5' is not a number"),
        (["bench", "--temperatures", "0,0_5"], "'0_5' is not a number"),  # (was: a temperature of 5)
    ],
)
def test_a_number_option_says_what_number_it_wants(args: list[str], fragment: str) -> None:
    one_error_line(cli(*args), 2, fragment)


def test_a_whole_number_option_without_a_range_shows_none_in_its_help() -> None:
    assert "x<=None" not in cli("chat", "--help").output and "ID" in cli("history", "show", "--help").output


def test_a_draft_that_is_the_target_itself_gets_a_note(tiny_args: list[str], tiny_pair: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    link = tmp_path / "same.gguf"
    link.symlink_to(tiny_pair[0])
    args = ["run", "--target", str(tiny_pair[0]), "--draft", str(link), "--raw", "--threads", "1", "--max-tokens", "2"]
    result = cli(*args, "the cat")
    assert result.exit_code == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("note:")] == [
        "note: the draft is the target's own file: each draft token costs what a target token does, so drafting"
        " with it is slower than the target alone; give a smaller draft, or use --strategy ngram"]
    assert "draft is the target" not in cli(*args, "--strategy", "ngram", "the cat").stderr
    assert "draft is the target" not in cli(*tiny_args, "--max-tokens", "2", "the cat").stderr


def test_a_prompt_no_context_could_hold_is_refused_before_tokenizing(tiny_args: list[str]) -> None:
    import time

    started = time.perf_counter()
    result = CliRunner().invoke(main, [*tiny_args, "--n-ctx", "256", "--max-tokens", "4"], input=b"a" * 2_000_000,
                                catch_exceptions=False)
    assert time.perf_counter() - started < 10  # tokenizing it would take minutes
    one_error_line(result, 1, "the prompt is 2000000 bytes, more than a context of 256 tokens can hold")


def test_the_prompt_check_counts_the_context_llama_cpp_creates(tiny_args: list[str]) -> None:
    """n_ctx 16 becomes 256 (a note says so): a prompt of 300 bytes that 256 tokens can hold is not refused."""
    result = CliRunner().invoke(main, [*tiny_args, "--n-ctx", "16", "--max-tokens", "2"], input=b"ab " * 100,
                                catch_exceptions=False)
    assert result.exit_code == 0 and "becomes 256" in result.stderr, result.stderr


def test_a_mistyped_option_is_offered_only_its_nearest_options() -> None:
    """click lists any three options alike enough, alphabetically (`--temprature` offered `--strategy` first):
    only those nearly as alike as the nearest are offered, nearest first; a negative number says how to give it."""
    line = one_error_line(cli("bench", "--temprature", "0"), 2, "No such option '--temprature'")
    assert line.endswith("Did you mean '--temperatures'?"), line
    line = one_error_line(cli("chat", "--draft-mx", "3"), 2)
    assert line.endswith("Did you mean '--draft-max' or '--draft-min'?"), line
    one_error_line(cli("history", "show", "-1"), 2, "No such option '-1'", "put -- before it")
    assert "Did you mean" not in one_error_line(cli("run", "--xyzzy", "hi"), 2, "No such option '--xyzzy'.")

def test_more_bad_input_is_one_line(tiny_args: list[str], tmp_path: Path) -> None:
    one_error_line(cli(*tiny_args, "--json-schema", "[1, 2]", "hi"), 2, "a JSON schema must be a JSON object", "not an array")
    one_error_line(cli(*tiny_args, "--json-schema", "42", "hi"), 2, "not a number")
    one_error_line(cli(*tiny_args, "--stop", "", "hi"), 2, "stop", "empty text")
    one_error_line(cli("rnu", "hi"), 2, "No such command 'rnu'", "Did you mean 'run'?")
    odd = str(tmp_path / "two\nlines.gguf")
    one_error_line(cli("run", "--target", odd, "hi"), 2, "two\\nlines.gguf: no such file")
    coloured = cli("run", "--target", str(tmp_path / "sc\x1b[31mhema.gguf"), "hi")  # (was: the raw escape sequence)
    assert "\x1b" not in one_error_line(coloured, 2, "sc\\x1b[31mhema.gguf: no such file")


@pytest.mark.slow  # (two runs)
def test_a_draft_given_beside_strategy_ngram_is_said_to_be_unused(tiny_args: list[str], tiny_profile: str) -> None:
    result = cli(*tiny_args, "--strategy", "ngram", "--max-tokens", "2", "the cat")
    assert result.exit_code == 0 and "drafts from the text alone: --draft is not used" in result.stderr, result.stderr
    profiled = cli("run", "-p", tiny_profile, "--strategy", "ngram", "--max-tokens", "2", "the cat")  # (not typed)
    assert profiled.exit_code == 0 and "not used" not in profiled.stderr, profiled.stderr

@pytest.mark.slow  # (eight runs)
def test_a_prompt_and_a_dash_send_the_prompt_and_stdin_s_text_a_blank_line_apart(tiny_args: list[str]) -> None:
    def prompt_tokens(*prompt: str, stdin: str | None = None) -> int:
        result = CliRunner().invoke(main, [*tiny_args, "--max-tokens", "1", "--json", *prompt], input=stdin,
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)["stats"]["prompt_tokens"]

    assert prompt_tokens("Summarise:", "-", stdin="the red cat") == prompt_tokens("Summarise:\n\nthe red cat")
    assert prompt_tokens("-", "Summarise:", stdin="the red cat") == prompt_tokens("the red cat\n\nSummarise:")
    assert prompt_tokens("Summarise:", stdin="the red cat") == prompt_tokens("Summarise:")  # (no -: stdin unread)
    empty = CliRunner().invoke(main, [*tiny_args, "Summarise:", "-"], input="\n")
    one_error_line(empty, 2, "- adds stdin's text to the prompt, and stdin holds none")
    for extra in (["a", "b"], ["-", "-"], ["a", "-", "b"]):  # (a mistyped option's value stays an error)
        one_error_line(cli(*tiny_args, *extra), 2, f"{len(extra)} prompts given: give one PROMPT")


@pytest.mark.slow  # (a process, to pipe its stdin)
def test_text_piped_beside_a_prompt_alone_is_said_to_be_left_unread(tiny_args: list[str]) -> None:
    command = [sys.executable, "-m", "localspec", *tiny_args, "--max-tokens", "1", "Summarise:"]
    piped = subprocess.run(command, input=b"the red cat\n", capture_output=True, timeout=60)
    assert piped.returncode == 0 and "the text piped on stdin is not read" in piped.stderr.decode(), piped.stderr
    both = subprocess.run([*command, "-"], input=b"the red cat\n", capture_output=True, timeout=60)
    assert both.returncode == 0 and "not read" not in both.stderr.decode(), both.stderr
    quiet = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert quiet.returncode == 0 and "warning" not in quiet.stderr.decode(), quiet.stderr

def test_free_text_cut_short_says_where(tiny_args: list[str]) -> None:
    at_budget = cli(*tiny_args, "--max-tokens", "3", "the cat")
    assert at_budget.exit_code == 0 and at_budget.stderr.strip().endswith("localspec: stopped at --max-tokens 3")
    at_context = cli(*tiny_args, "--n-ctx", "256", "--max-tokens", "600", "the cat " * 10)
    assert at_context.exit_code == 0 and "stopped where the context ends (256 tokens)" in at_context.stderr
    as_json = cli(*tiny_args, "--max-tokens", "3", "--json", "the cat")
    assert as_json.exit_code == 0 and "stopped" not in as_json.stderr  # the JSON says it: stop_reason


def test_a_context_larger_than_the_model_was_trained_for_is_lowered_with_a_note(tiny_args: list[str],
                                                                               tiny_pair: tuple[Path, Path]) -> None:
    result = cli(*tiny_args, "--n-ctx", "300", "--max-tokens", "3", "the cat")
    assert result.exit_code == 0, result.stderr
    assert "rounds the context up" not in result.stderr  # (300 would become 512, were it not lowered to 256)
    for model in tiny_pair:
        assert f"note: n_ctx 300 is more than {model.name} was trained for: its context holds 256 tokens" in result.stderr
    assert "note:" not in cli(*tiny_args, "--n-ctx", "256", "--max-tokens", "3", "the cat").stderr


def test_invalid_utf8_on_stdin_is_replaced_with_one_warning(tiny_args: list[str]) -> None:
    result = CliRunner().invoke(main, [*tiny_args, "--max-tokens", "4", "--json"], input=b"caf\xe9 the cat", catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert warnings(result.stderr) == [line for line in result.stderr.splitlines() if line] and len(warnings(result.stderr)) == 1
    assert "stdin is not valid UTF-8" in result.stderr


def test_json_names_a_model_whose_path_is_not_utf8_with_replacement_characters(tiny_pair: tuple[Path, Path],
                                                                                tmp_path: Path) -> None:
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/t\xe9.gguf"))  # (Python's name for that byte: '\udce9')
    odd.symlink_to(tiny_pair[0])
    result = cli("run", "--target", str(odd), "--draft", str(tiny_pair[1]), "--raw", "--temperature", "0", "--threads", "1",
                 "--max-tokens", "2", "--json", "the cat")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout_bytes.decode("utf-8"))["model"]["target"].endswith("/t\ufffd.gguf")


def test_a_fifo_as_a_model_is_refused_instead_of_waited_on(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)

    def unblock() -> None:  # were the FIFO opened for reading, this ends the wait (and the test fails on the message)
        descriptor = os.open(fifo, os.O_WRONLY)
        try:
            os.write(descriptor, b"nope")
        except BrokenPipeError:
            pass  # the reader below opened and left at once
        os.close(descriptor)

    threading.Thread(target=unblock, daemon=True).start()
    for flag in ("--target", "--draft"):
        paths = {"--target": str(tiny_pair[0]), "--draft": str(tiny_pair[1]), flag: str(fifo)}
        result = cli("run", "--target", paths["--target"], "--draft", paths["--draft"], "--threads", "1", "hi")
        one_error_line(result, 2, str(fifo), "not a regular file")
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the helper thread finish


@pytest.mark.parametrize("damage", ["not an object", "a folder", "entries of the wrong shape"])
def test_a_damaged_verdict_cache_only_costs_time(tiny_pair: tuple[Path, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    import json

    from localspec.config.paths import cache_dir
    from localspec.models.compat import CACHE_FILE_NAME, check_file, check_pair_cached

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = cache_dir() / CACHE_FILE_NAME
    cache.parent.mkdir(parents=True, exist_ok=True)
    if damage == "not an object":
        cache.write_text("[5]")
    elif damage == "a folder":
        cache.mkdir()
    else:
        check_pair_cached(*tiny_pair)  # remembers the pair's verdict and both files
        cache.write_text(json.dumps({key: 5 for key in json.loads(cache.read_text())}))
    for _ in range(2):  # the second time reads what the first one stored
        assert check_pair_cached(*tiny_pair).compatible
        check_file(tiny_pair[0])


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="needs Linux's /proc")
def test_a_model_file_that_cannot_be_read_is_one_line() -> None:
    one_error_line(cli("run", "--target", "/proc/self/mem", "hi"), 2, "/proc/self/mem: cannot read")



def test_paths_no_check_foresaw_are_one_line(tiny_args: list[str], tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    inline = '[{"type": "function", "function": {"name": "f"}}]' * 8  # JSON where a FILE goes: a name too long
    templated = [arg for arg in tiny_args if arg != "--raw"]  # (--tools with --raw is refused first)
    one_error_line(cli(*templated, "--tools", inline, "hi"), 2, "cannot read it", "too long")
    one_error_line(cli(*tiny_args, "--json-schema", str(tmp_path / ("x" * 300) / "s.json"), "hi"), 2, "too long")
    one_error_line(cli("run", "--target", "~no-such-user-here/m.gguf", "hi"), 2, "cannot expand ~ (no such user)")
    one_error_line(cli("run", "--target", str(tmp_path / ("x" * 300)), "hi"), 2, "cannot reach it", "too long")
    one_error_line(cli("bench", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--temperatures", "0,nan"),
                   2, "--temperatures", "not a finite number")


def test_a_model_path_that_is_not_utf8_loads(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    odd = tmp_path / os.fsdecode(b"caf\xe9.gguf")  # an invalid byte in a file name: a lone surrogate in Python
    odd.write_bytes(tiny_pair[0].read_bytes())
    result = cli("run", "--target", str(odd), "--draft", str(tiny_pair[1]), "--raw", "--temperature", "0",
                 "--threads", "1", "--max-tokens", "3", "the cat")
    assert result.exit_code == 0, result.stderr


def test_draft_make_refuses_to_write_over_its_target(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    target = tmp_path / "target.gguf"
    target.write_bytes(tiny_pair[0].read_bytes())
    (tmp_path / "link.gguf").symlink_to(target)
    for out in (target, tmp_path / "link.gguf", tmp_path / "." / "target.gguf"):
        one_error_line(cli("draft", "make", str(target), "--type", "q8_0", "--out", str(out), "--force"), 2,
                       "is TARGET itself")
    # A draft's default name linked to the target (was: auto's --force measured, then wrote the draft over it),
    # to another file (written through with --force), to nothing (found after measuring).
    (tmp_path / "target.draft-q4_0.gguf").symlink_to(target)
    for flags in ((), ("--type", "q4_0")):
        one_error_line(cli("draft", "make", str(target), "--force", *flags), 2,
                       f"error: {tmp_path / 'target.draft-q4_0.gguf'} is TARGET itself (a link to it)")
    assert target.read_bytes() == tiny_pair[0].read_bytes()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    (tmp_path / "target.draft-q4_0.gguf").unlink()
    (tmp_path / "target.draft-q4_0.gguf").symlink_to(notes)
    (tmp_path / "target.draft-q8_0.gguf").symlink_to(tmp_path / "nowhere.gguf")
    for flags, link in ((("--type", "q4_0"), "target.draft-q4_0.gguf"), ((), "target.draft-q8_0.gguf")):
        one_error_line(cli("draft", "make", str(target), "--force", *flags), 2,
                       f"error: {tmp_path / link} is a link (to {tmp_path}/")
    assert notes.read_text() == "mine\n"
    to_nothing = tmp_path / "target.draft-q8_0.gguf"
    one_error_line(cli("draft", "make", str(target), "--type", "q4_0", "--out", str(to_nothing)), 2,
                   "is a link to nothing")



def test_ctrl_c_during_generation_exits_130_without_a_traceback(tiny_args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import localspec.cli.run as run_module

    real_write = run_module.write_stdout

    def write_then_interrupt(text: str) -> None:  # a real SIGINT, once the reply streams
        real_write(text)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(run_module, "write_stdout", write_then_interrupt)
    result = cli(*tiny_args, "--max-tokens", "64", "the cat")
    assert result.exit_code == 130
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) <= 1


def test_ctrl_c_under_a_format_says_the_output_was_cut_short(tiny_args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import localspec.cli.run as run_module

    real_write = run_module.write_stdout

    def write_then_interrupt(text: str) -> None:
        real_write(text)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(run_module, "write_stdout", write_then_interrupt)
    result = cli(*tiny_args, "--max-tokens", "64", "--regex", "(the|cat| )+", "the cat")
    assert result.exit_code == 130
    assert "Traceback" not in result.stderr
    assert "localspec: output cut short by an interruption" in result.stderr


@pytest.mark.parametrize("command", [["run"], ["run", "-"], ["chat"]])
def test_a_closed_stdin_without_a_prompt_is_a_usage_error(command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", None)  # `localspec run <&-`: Python starts with sys.stdin None
    with pytest.raises(click.UsageError, match="stdin") as raised:
        main.main(command, standalone_mode=False)
    assert raised.value.exit_code == 2


@pytest.mark.slow
def test_a_closed_stdout_pipe_ends_quietly_with_the_status_of_a_cut_pipe(tiny_args: list[str]) -> None:
    """As a Unix tool killed by SIGPIPE: 141, so that `set -o pipefail` sees the output did not all arrive."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `localspec run ... | head -c 1` once head has gone
    try:
        result = subprocess.run([sys.executable, "-m", "localspec", *tiny_args, "--max-tokens", "16", "the cat"],
                                stdout=write_end, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=60)
    finally:
        os.close(write_end)
    assert result.returncode == 141 and result.stderr == b"", result.stderr.decode()


@pytest.mark.slow  # a process per case: kept out of the fast suite's budget
@pytest.mark.parametrize("stdout", ["/dev/full", "closed"])
def test_a_stdout_that_cannot_be_written_is_one_line(tiny_args: list[str], stdout: str) -> None:
    command = [sys.executable, "-m", "localspec", *tiny_args, "--max-tokens", "4", "the cat"]
    if stdout == "closed":  # `>&-`: Python starts with sys.stdout None
        result = subprocess.run(command, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=60,
                                preexec_fn=lambda: os.close(1))
    else:
        with open(stdout, "wb") as full:
            result = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=60)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and "stdout" in lines[0], result.stderr.decode()


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_ctrl_c_while_the_commands_import_ends_quietly() -> None:
    import signal
    import time

    for delay in (0.05, 0.1, 0.15, 0.2):  # importing localspec.cli takes a few tenths of a second
        process = subprocess.Popen([sys.executable, "-m", "localspec", "info"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        stderr = process.communicate(timeout=60)[1]
        # (Python's own start-up, before localspec runs, may still print its traceback: not ours to quiet.)
        assert f"localspec{os.sep}cli" not in stderr, stderr


def test_an_error_shows_a_byte_that_was_not_utf8_as_the_byte() -> None:
    """Python carries such a byte as a lone surrogate; errors showed '\\udcff' (its repr) for the byte 0xff."""
    profile = cli("run", "-p", "caf\udcff", "the cat")
    assert profile.exit_code == 2 and "invalid profile name 'caf\\xff'" in profile.stderr
    path = cli("run", "--target", "/tmp/t\udce9.gguf", "the cat")
    assert path.stderr.strip() == "error: /tmp/t\\xe9.gguf: no such file"
    number = cli("run", "--temperature", "\udcff", "the cat")
    assert "'\\xff' is not a number" in number.stderr and "udc" not in number.stderr


@pytest.mark.parametrize("ending", ["SIGINT", "SIGTERM"])
def test_run_json_interrupted_writes_the_result_so_far(tiny_profile: str, monkeypatch: pytest.MonkeyPatch,
                                                       ending: str) -> None:
    """Ctrl-C, SIGTERM or SIGHUP (`timeout`, a closed terminal) ended `run --json` with nothing on stdout: all it
    had generated was lost. Now the object is written, `stop_reason` "interrupted", and the status is the
    signal's (128 + its number)."""
    from localspec.engine.generation import Generation

    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    record = Generation._record
    passes = []

    def signalled_after_the_second_pass(self, *args, **kwargs):
        record(self, *args, **kwargs)
        passes.append(1)
        if len(passes) == 2:
            os.kill(os.getpid(), getattr(signal, ending))

    monkeypatch.setattr(Generation, "_record", signalled_after_the_second_pass)
    try:
        result = cli("run", "-p", "tiny", "--temperature", "0", "--max-tokens", "40", "--threads", "1", "--json",
                     "the cat")
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    assert result.exit_code == 128 + getattr(signal, ending), result.stderr
    report = json.loads(result.stdout)
    assert report["stop_reason"] == "interrupted" and 0 < len(report["tokens"]) < 40 and report["text"]
