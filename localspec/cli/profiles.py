"""`localspec profile …`: list, show, add, set, remove, default, check, path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table

from ..app.plan import locate_model
from ..config.atomic import write_text_atomic
from ..config.paths import user_profiles_dir
from ..config.profiles import check_name, list_profiles, load_profile, parse_assignment, profile_file, save_profile
from ..config.resolve import DEMO_PROFILE, resolve_settings
from ..config.user_config import default_profile_name, set_default_profile
from ..errors import InputError, LocalspecError
from ..models.compat import check_pair, check_pair_cached
from ..models.discovery import describe, find_drafts
from .common import stdout_console
from .models import make_draft_file


@click.group("profile")
def profile_group() -> None:
    """Manage profiles: a target, its draft and the settings that suit them.

    \b
    Examples:
      localspec profile list
      localspec profile add mine --target ~/models/big.gguf --draft auto --set sampling.temperature=0.7
      localspec profile check mine
      localspec profile default mine
    """


@profile_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_command(as_json: bool) -> None:
    """List user and shipped profiles (a user profile hides a shipped one of the same name)."""
    default = default_profile_name() or DEMO_PROFILE
    rows = [
        {
            "name": p.name,
            "source": p.source,
            "target": p.model_ref("target"),
            "draft": p.model_ref("draft"),
            "default": p.name == default,
        }
        for p in list_profiles()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("", "name", "source", "target", "draft", box=None)
    for row in rows:
        table.add_row("*" if row["default"] else "", row["name"], row["source"], row["target"] or "-", row["draft"] or "(none: target only)")
    stdout_console.print(table)


@profile_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object {key: {value, source}}.")
def show_command(name: str, as_json: bool) -> None:
    """Show every resolved setting of NAME and where it came from."""
    resolved = resolve_settings(name, {})
    keys = sorted(resolved.values)
    if as_json:
        click.echo(json.dumps({k: {"value": resolved.values[k], "source": resolved.sources[k]} for k in keys}, indent=2))
        return
    profile = resolved.profile
    stdout_console.print(f"[bold]{profile.name}[/bold] ({profile.source}: {profile.path})")
    if profile.get("description"):
        stdout_console.print(profile.get("description"))
    if not resolved.has_model("draft"):
        stdout_console.print("no draft: this profile runs the target alone")
    table = Table("setting", "value", "from", box=None)
    for key in keys:
        value = resolved.values[key]
        table.add_row(key, repr(value) if isinstance(value, str) else str(value), resolved.sources[key])
    stdout_console.print(table)


@profile_group.command("add")
@click.argument("name")
@click.option("--target", required=True, help="Target GGUF path.")
@click.option("--draft", help="Draft GGUF path, or 'auto' to pick the best compatible smaller model.")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE", help="Any profile setting, e.g. sampling.temperature=0.7.")
@click.option("--make-draft", is_flag=True, help="With --draft auto: when nothing fits, make a Q4_0 draft of the target without asking.")
@click.option("--description", help="One line describing the profile.")
@click.option("--force", is_flag=True, help="Overwrite an existing user profile.")
def add_command(
    name: str, target: str, draft: str | None, assignments: tuple[str, ...], make_draft: bool, description: str | None, force: bool
) -> None:
    """Create user profile NAME for TARGET (and a draft)."""
    check_name(name)
    existing = user_profiles_dir() / f"{name}.toml"
    if existing.exists() and not force:
        raise InputError(f"profile {name!r} exists ({existing}); pass --force to overwrite")
    target_path = Path(target).expanduser().resolve()
    values: dict = {"name": name, "target.path": str(target_path)}
    if description:
        values["description"] = description
    if draft == "auto":
        values["draft.path"] = str(_auto_draft(target_path, make_draft))
    elif draft:
        values["draft.path"] = str(Path(draft).expanduser().resolve())
    for assignment in assignments:
        key, value = parse_assignment(assignment)
        values[key] = value
    if "draft.path" in values:
        check_pair(Path(values["target.path"]), Path(values["draft.path"]))
    elif not target_path.is_file():
        raise InputError(f"{target_path}: no such file")
    path = save_profile(name, values)
    click.echo(f"saved {path}" + ("" if "draft.path" in values else " (no draft: target only)"), err=True)


def _auto_draft(target: Path, make_without_asking: bool) -> Path:
    """The smallest compatible model near the target (its folder and localspec's models folder).

    When there is none, a Q4_0 copy of the target is proposed (made at once with
    `make_without_asking`, else asked for on a terminal, else suggested).
    """
    found = find_drafts(target)
    if found:
        choice, ratio = found[0]
        click.echo(f"draft: {choice.path} ({choice.quantization}, {ratio:.0%} of the target's size)", err=True)
        return choice.path
    question = f"no compatible smaller model found next to {target.name}; make a Q4_0 draft of it now?"
    if make_without_asking or (sys.stdin.isatty() and click.confirm(question, err=True)):
        return make_draft_file(target, "q4_0")
    raise InputError(
        f"no compatible smaller model found next to {target.name}: "
        f"make one with `localspec draft make {target}` (a Q4_0 copy of the target), or pass --draft PATH"
    )


@profile_group.command("set")
@click.argument("name")
@click.argument("assignments", nargs=-1, required=True, metavar="KEY=VALUE...")
def set_command(name: str, assignments: tuple[str, ...]) -> None:
    """Change settings of NAME (a shipped profile is copied to your profiles first).

    \b
    Examples:
      localspec profile set demo sampling.temperature=0 speculative.draft_max=6
      localspec profile set mine 'sampling.stop=["###", "</s>"]'
    """
    profile = load_profile(name)
    values = dict(profile.values)
    for assignment in assignments:
        key, value = parse_assignment(assignment)
        values[key] = value
    if profile.source == "shipped" and profile.path is not None:
        # Start the user copy from the shipped file's text so its comments come along.
        destination = user_profiles_dir() / f"{name}.toml"
        destination.parent.mkdir(parents=True, exist_ok=True)
        if not destination.exists():
            write_text_atomic(destination, profile.path.read_text(encoding="utf-8"))
    path = save_profile(name, values)
    click.echo(f"saved {path}", err=True)


@profile_group.command("remove")
@click.argument("name")
def remove_command(name: str) -> None:
    """Delete user profile NAME (shipped profiles cannot be removed)."""
    path = user_profiles_dir() / f"{check_name(name)}.toml"
    if not path.is_file():
        if profile_file(name) is not None:
            raise InputError(f"{name!r} is a shipped profile and cannot be removed")
        raise InputError(f"no user profile named {name!r}")
    path.unlink()
    shipped_left = profile_file(name)
    click.echo(f"removed {path}" + (" (the shipped profile of that name applies again)" if shipped_left else ""), err=True)


@profile_group.command("default")
@click.argument("name")
def default_command(name: str) -> None:
    """Make NAME the profile that runs when none is named."""
    load_profile(name)
    set_default_profile(name)
    click.echo(f"default profile: {name}", err=True)


@profile_group.command("path")
@click.argument("name")
def path_command(name: str) -> None:
    """Print the file NAME is read from."""
    path = profile_file(name)
    if path is None:
        raise InputError(f"no profile named {name!r}")
    click.echo(str(path))


@profile_group.command("check")
@click.argument("name")
def check_command(name: str) -> None:
    """Check that NAME's files exist and that its draft can draft for its target."""
    resolved = resolve_settings(name, {})
    target = locate_model(resolved, "target")
    if not resolved.has_model("draft"):
        describe(target)
        stdout_console.print(f"[green]ok[/green] target {target} (no draft: target only)")
        return
    draft = locate_model(resolved, "draft")
    report = check_pair_cached(target, draft)
    stdout_console.print(f"target {target}\ndraft  {draft}")
    for check in report.checks:
        mark = "[green]pass[/green]" if check.passed else "[red]FAIL[/red]"
        stdout_console.print(f"  {mark}  {check.name}: {check.detail}")
    if not report.compatible:
        failure = report.first_failure
        raise LocalspecError(f"{name}: draft is incompatible ({failure.name}: {failure.detail})")
    stdout_console.print("[green]compatible[/green]")
    sys.stdout.flush()

