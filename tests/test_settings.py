"""The settings table: what is derived from it, and that no combination of valid settings ends in a traceback."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localspec.cli import main
from localspec.cli.options import SETTING_OPTIONS
from localspec.config.paths import user_profiles_dir
from localspec.config.resolve import resolve_settings
from localspec.settings import (
    DEFAULTS,
    SETTINGS,
    GenerationSettings,
    ModelSettings,
    SamplingParams,
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


def test_the_dataclass_defaults_are_the_declared_defaults() -> None:
    built = {**GenerationSettings().to_dict()["sampling"], **GenerationSettings().to_dict()["speculative"]}
    for key, value in DEFAULTS.items():
        section, _, name = key.rpartition(".")
        if section in ("sampling", "speculative") and name in built:
            assert built[name] == value, key
    assert ModelSettings().n_ctx == DEFAULTS["target.n_ctx"] == DEFAULTS["draft.n_ctx"]
    assert SamplingParams().min_p == SETTINGS["sampling.min_p"].default


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
