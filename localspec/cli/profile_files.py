"""`localspec profile add` and `profile check`: the profile commands that read model files."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape

from ..app.plan import locate_model
from ..config.paths import (MODEL_PATH_KEYS, model_path_here, shipped_profiles_dir, stored_assignment, stored_model_path,
                            user_profiles_dir)
from ..config.profiles import (LOCATION_KEYS, check_name, hiding_shipped_text, parse_assignment, profile_exists,
                               save_profile)
from ..config.resolve import resolve_settings, strategy_needs_a_draft, without_a_draft
from ..errors import InputError, LocalspecError
from ..models.compat import check_file, check_pair, check_pair_cached
from ..models.discovery import describe, find_drafts
from ..textin import clean_input
from .common import say, stdout_console
from .drafts import make_draft_file


@click.command("add")
@click.argument("name")
@click.option("--target", required=True, metavar="PATH", help="Target GGUF path.")
@click.option("--draft", metavar="PATH|auto", help="Draft GGUF path, or 'auto' to pick the smallest compatible model"
              " beside the target, in the models folder or in the hub cache.")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE", help="Any profile setting, e.g. sampling.temperature=0.7.")
@click.option("--make-draft", is_flag=True, help="Implies --draft auto: when nothing fits, make a draft of the"
              " target (the fastest precision, measured) without asking.")
@click.option("--description", help="One line describing the profile.")
@click.option("--force", is_flag=True, help="Overwrite an existing user profile.")
def add_command(
    name: str, target: str, draft: str | None, assignments: tuple[str, ...], make_draft: bool, description: str | None, force: bool
) -> None:
    """Create user profile NAME for the model --target PATH (and a draft)."""
    check_name(name)
    if name.lower().endswith(".toml") and len(name) > 5:  # (it would be saved as NAME.toml.toml)
        raise InputError(f"invalid profile name {name!r}: a name, not a file name: use {name[:-5]!r} (saved as"
                         f" {name[:-5]}.toml)")
    existing = user_profiles_dir() / f"{name}.toml"
    if (existing.exists() or existing.is_symlink()) and not force:  # (before a draft is looked for; checked again as it is written)
        raise profile_exists(name, existing)
    if make_draft and draft not in (None, "auto"):
        raise InputError("--make-draft goes with --draft auto (a draft is made when none fits), not with a draft path")
    flagged = {"target": "--target", "draft": _draft_flag(draft, make_draft)}
    assigned = {}
    for assignment in assignments:  # (before a draft is looked for, or made: minutes)
        key, value = parse_assignment(clean_input(assignment, "--set"))
        role, _, field = key.partition(".")
        if field in (*LOCATION_KEYS, "hf_file") and flagged.get(role):
            raise InputError(f"--set {key}: the {role} is given by {flagged[role]} already")
        assigned[key] = stored_assignment(key, value)
    values: dict = {"name": name, "target.path": stored_model_path(target, "--target")}
    if description:
        values["description"] = clean_input(description, "--description")
    if draft == "auto" or make_draft:
        values["draft.path"] = str(_auto_draft(model_path_here(values["target.path"], "target.path"), make_draft))
    elif draft is not None:  # (an empty path is refused there, not taken for no draft)
        values["draft.path"] = stored_model_path(draft, "--draft")
    values.update(assigned)
    if "draft.path" in values:
        check_pair(*(model_path_here(values[key], key) for key in ("target.path", "draft.path")))
    elif "target.path" in values:  # (--set may have given the target another location)
        check_file(model_path_here(values["target.path"], "target.path"))
    path = save_profile(name, values, replace=force)
    say(f"saved {path}" + ("" if "draft.path" in values else " (no draft: target only)"))
    saved = resolve_settings(name, {})
    if strategy_needs_a_draft(saved):
        click.echo(f"note: {without_a_draft(saved)}", err=True)
    if (shipped_profiles_dir() / f"{name}.toml").exists():
        click.echo(hiding_shipped_text(name, "it has the name of the shipped profile"), err=True)


def _draft_flag(draft: str | None, make_draft: bool) -> str | None:
    """How the command line gave the draft (None: it did not), as an error names it."""
    if draft is not None:
        return "--draft"
    return "--make-draft (which implies --draft auto)" if make_draft else None


def check_model_files(changes: dict[str, object]) -> None:
    """Refuse, as `profile add` does, a model path in `changes` that is not a complete GGUF file here."""
    for key in MODEL_PATH_KEYS:
        if isinstance(changes.get(key), str):  # (another type is refused as the profile is validated)
            check_file(model_path_here(changes[key], key))


def _auto_draft(target: Path, make_without_asking: bool) -> Path:
    """The smallest compatible model near the target (its folder and localspec's models folder).

    When there is none, a lower-precision copy of the target is proposed, its precision
    chosen by measurement as `draft make` does (made at once with
    `make_without_asking`, else asked for on a terminal, else suggested).
    """
    found = find_drafts(target)
    if found:
        choice, ratio = found[0]
        say(f"draft: {choice.path} ({choice.quantization}, {ratio:.0%} of the target's size)")
        return choice.path
    question = f"no compatible smaller model found next to {target.name}; make a draft of it now (a few minutes: several precisions are measured)?"
    if make_without_asking or (sys.stdin is not None and sys.stdin.isatty() and click.confirm(question, err=True)):
        return make_draft_file(target)
    raise InputError(
        f"no compatible smaller model found next to {target.name}: "
        f"make one with `localspec draft make {target}` (a lower-precision copy of the target), or pass --draft PATH"
    )


@click.command("check")
@click.argument("name")
def check_command(name: str) -> None:
    """Check that NAME's files exist and that its draft can draft for its target."""
    resolved = resolve_settings(name, {})
    target = locate_model(resolved, "target")
    if not resolved.has_model("draft"):
        describe(target)
        if strategy_needs_a_draft(resolved):
            raise LocalspecError(without_a_draft(resolved))
        stdout_console.print(f"[green]ok[/green] target {escape(str(target))} (no draft: target only)")
        return
    draft = locate_model(resolved, "draft")
    report = check_pair_cached(target, draft)
    stdout_console.print(escape(f"target {target}\ndraft  {draft}"))
    for check in report.checks:
        mark = "[green]pass[/green]" if check.passed else "[red]FAIL[/red]"
        stdout_console.print(f"  {mark}  {escape(f'{check.name}: {check.detail}')}")
    if not report.compatible:
        failure = report.first_failure
        raise LocalspecError(f"{name}: draft is incompatible ({failure.name}: {failure.detail})")
    stdout_console.print("[green]compatible[/green]")
    sys.stdout.flush()

