"""The settings table: what is derived from it, and that no combination of valid settings ends in a traceback."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from cli_helpers import cli, one_error_line
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localspec.cli import main
from localspec.cli.options import SETTING_OPTIONS
from localspec.config.paths import user_profiles_dir
from localspec.config.resolve import resolve_settings
from localspec.errors import InputError
from localspec.settings import (
    DEFAULTS,
    FREE_TEXT_MAX_TOKENS,
    SETTINGS,
    STRUCTURED_MAX_TOKENS,
    GenerationSettings,
    ModelSettings,
    SpeculativeParams,
)


def test_every_flag_of_run_comes_from_the_table_with_its_range_and_default() -> None:
    run = main.get_command(click.Context(main), "run")
    options = {opt.name: opt for opt in run.params if isinstance(opt, click.Option)}
    for option in SETTING_OPTIONS:
        item = option.setting
        cli_option = options[option.param]
        assert item.help in cli_option.help
        if item.default not in (None, []):
            assert f"[{item.default}]" in cli_option.help
        if isinstance(cli_option.type, click.types._NumberRangeBase):
            assert (cli_option.type.min, cli_option.type.max) == (item.low, item.high)


def test_the_readme_states_the_declared_defaults() -> None:
    """The option table in the README documents the defaults the declarations hold."""
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")

    def shown(key: str, off: object) -> str:
        return "off" if DEFAULTS[key] == off else str(DEFAULTS[key])

    sampling = [str(DEFAULTS["sampling.temperature"]), shown("sampling.top_k", 0), shown("sampling.top_p", 1.0), str(DEFAULTS["sampling.min_p"])]
    assert f"temperature 0 is greedy (defaults {', '.join(sampling)})" in readme
    assert f"most tokens to generate (default {FREE_TEXT_MAX_TOKENS}; {STRUCTURED_MAX_TOKENS} for output held" in readme
    assert f"(default {DEFAULTS['speculative.ngram_min']} to {DEFAULTS['speculative.ngram_max']})" in readme
    assert (DEFAULTS["speculative.strategy"], DEFAULTS["speculative.draft_max"]) == ("hybrid", "adaptive")  # "hybrid + adaptive"


def test_the_defaults_survive_a_round_trip_through_a_profile_file() -> None:
    """Every default written into a profile, read back and built, gives the settings objects' own defaults."""
    from localspec.config.profiles import load_profile, save_profile

    written = {key: value for key, value in DEFAULTS.items() if value is not None}
    save_profile("defaults", {"target.path": "t.gguf", "draft.path": "d.gguf", **written})
    values = load_profile("defaults").values
    assert {key: values[key] for key in written} == written
    assert GenerationSettings.from_values(values) == GenerationSettings()
    assert ModelSettings.from_values(values, "target") == ModelSettings() == ModelSettings.from_values(values, "draft")


def test_profile_show_sources_follow_flag_over_profile_over_default() -> None:
    path = user_profiles_dir() / "layered.toml"
    path.parent.mkdir(parents=True)
    path.write_text('[target]\npath = "x.gguf"\n[sampling]\ntemperature = 0.3\ntop_k = 5\n')
    resolved = resolve_settings("layered", {"sampling.top_k": 9, "sampling.min_p": None})
    assert resolved.values["sampling.temperature"] == 0.3 and resolved.sources["sampling.temperature"].startswith("profile layered")
    assert (resolved.values["sampling.top_k"], resolved.sources["sampling.top_k"]) == (9, "flag")
    assert (resolved.values["sampling.min_p"], resolved.sources["sampling.min_p"]) == (0.05, "default")


def test_speculative_settings_refuse_draft_min_above_draft_max() -> None:
    from localspec.errors import InputError

    try:
        SpeculativeParams(draft_max=3, draft_min=4)
    except InputError as exc:
        assert "speculative.draft_min (4) must not exceed speculative.draft_max (3)" in str(exc)
    else:
        raise AssertionError("accepted draft_min > draft_max")


def _one_clean_outcome(result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1, 2), result.stderr
    assert "Traceback" not in result.stderr
    if result.exit_code:
        assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1, result.stderr


RUNTIME_VALUES = {
    "--n-ctx": st.integers(16, 300),
    "--n-batch": st.integers(1, 40),
    "--draft-max": st.integers(1, 256),
    "--draft-min": st.integers(0, 256),
    "--p-min": st.sampled_from([0.0, 0.2, 0.5, 1.0]),
    "--temperature": st.sampled_from([0.0, 0.7, 1.5]),
    "--top-k": st.integers(0, 30),
    "--top-p": st.sampled_from([1.0, 0.5, 0.01]),
    "--min-p": st.sampled_from([0.0, 0.05, 1.0]),
    "--max-tokens": st.integers(0, 24),
    "--seed": st.integers(0, 2**63 - 1),
    "--stop": st.sampled_from(["cat", "the", "▁"]),
}


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flags=st.dictionaries(st.sampled_from(sorted(RUNTIME_VALUES)), st.none(), max_size=6).flatmap(
    lambda chosen: st.fixed_dictionaries({flag: RUNTIME_VALUES[flag] for flag in chosen})
), in_profile=st.booleans(), speculative=st.booleans())
def test_no_valid_combination_of_settings_ends_in_a_traceback(tiny_pair: tuple[Path, Path], flags: dict, in_profile: bool, speculative: bool) -> None:
    """Flags (or the same values in a profile, beside flags) on a real tiny pair: output or one error line."""
    target, draft = tiny_pair
    args = ["run", "--raw", "--json", *([] if speculative else ["--no-speculative"])]
    if in_profile:
        profile = user_profiles_dir() / "fuzz.toml"
        profile.parent.mkdir(parents=True, exist_ok=True)
        sections: dict[str, list[str]] = {"target": [f'path = "{target}"'], "draft": [f'path = "{draft}"']}
        for flag, value in flags.items():
            for key in next(o.keys for o in SETTING_OPTIONS if o.flag == flag):
                section, _, name = key.partition(".")
                value = [value] if SETTINGS[key].kind is list else value
                sections.setdefault(section, []).append(f"{name} = {value!r}".replace("'", '"'))
        profile.write_text("".join(f"[{section}]\n" + "\n".join(lines) + "\n" for section, lines in sections.items()))
        args += ["-p", "fuzz", "--draft-max", "4"]
    else:
        args += ["--target", str(target), "--draft", str(draft)]
        for flag, value in flags.items():
            args += [flag, str(value)]
    result = CliRunner().invoke(main, [*args, "the cat sat on the mat"])
    _one_clean_outcome(result)


# -- non-finite and oversized numbers, and the one check of generation settings ------------------------


@pytest.mark.parametrize(
    "flag, value, fragment",
    [
        ("--temperature", "nan", "sampling.temperature must be a finite number, got nan"),
        ("--temperature", "inf", "sampling.temperature must be a finite number, got inf"),
        ("--top-p", "nan", "sampling.top_p must be a finite number"),
        ("--min-p", "nan", "sampling.min_p must be a finite number"),
        ("--p-min", "nan", "speculative.p_min must be a finite number"),
        ("--max-tokens", str(10**30), "sampling.max_tokens must be at most 2147483647"),
        ("--n-ctx", str(2**32 + 16), "target.n_ctx must be at most 2147483647"),  # ctypes would wrap it to 16
    ],
)
def test_non_finite_and_oversized_flags_are_refused_in_one_line(tiny_pair: tuple[Path, Path], flag: str, value: str, fragment: str) -> None:
    result = cli("run", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), flag, value, "hi")
    one_error_line(result, 2, fragment)


def test_with_values_checks_each_value_and_the_rules_between_them() -> None:
    base = GenerationSettings()
    changed = base.with_values({"sampling.temperature": 0.2, "speculative.ngram_max": 6}, "/set")
    assert (changed.sampling.temperature, changed.speculative.ngram_max, changed.max_tokens) == (0.2, 6, base.max_tokens)
    for values, fragment in [
        ({"sampling.top_p": float("nan")}, "/set: sampling.top_p must be a finite number"),
        ({"sampling.temperature": float("-inf")}, "sampling.temperature must be a finite number"),
        ({"target.n_ctx": 64}, "'target.n_ctx' is not a generation setting"),
        ({"speculative.ngram_min": 5}, ("speculative.ngram_min (5) must not exceed speculative.ngram_max (4)"
                                        " (speculative.ngram_max is 4 when not given: set it too)")),
        ({"speculative.draft_max": 3, "speculative.draft_min": 4}, "must not exceed speculative.draft_max (3)"),
        ({"speculative.draft_max": "adaptive", "speculative.draft_min": 40},  # (the bound adaptive keeps was unsaid)
         "speculative.draft_min (40) must not exceed speculative.draft_max (adaptive, which drafts up to 32)"),
    ]:
        with pytest.raises(InputError) as caught:
            base.with_values(values, "/set")
        assert fragment in str(caught.value) and str(caught.value).startswith("/set: ")
        assert ("set it too" in str(caught.value)) == ("speculative.ngram_min" in values)


def test_a_context_llama_cpp_rounds_up_is_noted(tiny_pair: tuple[Path, Path]) -> None:
    result = cli("run", "--target", str(tiny_pair[0]), "--no-speculative", "--n-ctx", "16", "--max-tokens", "1", "--raw", "hi")
    assert result.exit_code == 0, result.stderr
    assert "note: n_ctx 16 becomes 256: llama.cpp rounds the context up to a multiple of 256" in result.stderr
    quiet = cli("run", "--target", str(tiny_pair[0]), "--no-speculative", "--n-ctx", "256", "--max-tokens", "1", "--raw", "hi")
    assert "n_ctx" not in quiet.stderr
    from localspec.runtime.model import Model

    with Model(tiny_pair[0], ModelSettings(n_ctx=16)) as model:  # what the note says is what llama.cpp does
        assert model.n_ctx == 256


def test_chat_set_and_load_go_through_the_same_check() -> None:
    from localspec.app.conversation import Conversation

    conversation = Conversation(GenerationSettings())
    with pytest.raises(InputError, match="sampling.temperature must be a finite number, got nan"):
        conversation.set("temperature", "nan")
    with pytest.raises(InputError, match="speculative.ngram_max is 4 when not given: set it too"):
        conversation.set("ngram_min", "5")
    assert conversation.set("ngram_max", "6") == "speculative.ngram_max" and conversation.settings.speculative.ngram_max == 6
    with pytest.raises(InputError, match="sampling.top_p must be a finite number"):
        Conversation.from_json({"messages": [], "settings": {"sampling.top_p": float("nan")}}, GenerationSettings())
