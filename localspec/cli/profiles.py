"""`localspec profile …`: list, show, set, remove, default, path (`add` and `check`, which read model files, are in `profile_files`).

These commands read and write profiles only; they import nothing that reads model files.
"""

from __future__ import annotations

import json

import click
from rich.markup import escape
from rich.table import Table

from ..config.files import discard_lock, locked
from ..config.paths import MODEL_PATH_KEYS, shipped_profiles_dir, stored_assignment, user_profiles_dir
from ..config.profiles import (
    check_name,
    hiding_shipped_text,
    list_profiles,
    load_profile,
    parse_assignment,
    profile_file,
    typed_form,
    update_profile,
)
from ..config.resolve import (PROFILE_VARIABLE, profile_without_a_flag, resolve_settings, strategy_needs_a_draft,
                              without_a_draft)
from ..config.user_config import default_profile_name, set_default_profile
from ..errors import InputError
from ..shown import one_line, shown_name, shown_plainly
from ..textin import clean_input
from .common import LazyCommands, print_table, say, stdout_console


@click.group(
    "profile",
    cls=LazyCommands,
    lazy_commands={
        "add": "localspec.cli.profile_files:add_command",
        "check": "localspec.cli.profile_files:check_command",
    },
)
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
    """List user and shipped profiles (a user profile hides a shipped one of the same name).

    A file that is not a valid profile is listed as invalid, with the reason. The one commands run without -p
    is marked `*` (`default`): LOCALSPEC_PROFILE's where it is set, else the configured default.
    """
    try:
        default, default_source = profile_without_a_flag()
    except InputError as exc:  # a broken config.toml: the profiles are listed all the same, none marked default
        default, default_source, broken_config = None, None, str(exc)
    else:
        broken_config = None
    rows = [
        {
            "name": p.name,
            "source": p.source,
            "target": p.model_ref("target"),
            "draft": p.model_ref("draft"),
            "default": p.name == default,
            "problem": p.problem,
        }
        for p in list_profiles()
    ]
    if broken_config is not None:
        click.echo(f"note: no default profile is known: {shown_name(broken_config)}", err=True)
    if as_json:
        click.echo(json.dumps(rows, indent=2, allow_nan=False))
        return
    table = Table("", "name", "source", "target", "draft", box=None)
    for row in rows:
        mark = "*" if row["default"] else ""
        name = escape(shown_plainly(row["name"]))
        if row["problem"]:
            table.add_row(mark, name, row["source"], f"[red]invalid[/red]: {escape(shown_plainly(row['problem']))}", "")
            continue
        draft = escape(shown_plainly(row["draft"])) if row["draft"] else "(none: target only)"
        table.add_row(mark, name, row["source"], escape(shown_plainly(row["target"] or "-")), draft)
    print_table(table)
    if broken_config is None and not any(row["default"] for row in rows):
        click.echo(f"note: the default profile '{one_line(shown_plainly(default))}' (from {default_source}) is not among them:"
                   " commands without -p fail", err=True)


@profile_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object {key: {value, source}}.")
def show_command(name: str, as_json: bool) -> None:
    """Show every resolved setting of NAME and where it came from."""
    resolved = resolve_settings(name, {})
    keys = sorted(resolved.values)
    if as_json:
        shown = {k: {"value": resolved.values[k], "source": resolved.sources[k]} for k in keys}
        click.echo(json.dumps(shown, indent=2, allow_nan=False))
        return
    profile = resolved.profile
    stdout_console.print(f"[bold]{escape(profile.name)}[/bold] ({profile.source}: {escape(shown_plainly(str(profile.path)))})")
    if profile.get("description"):  # (a shared profile's text: its escape sequences are shown, not obeyed)
        stdout_console.print(escape(shown_plainly(profile.get("description"))))
    if strategy_needs_a_draft(resolved):
        stdout_console.print(escape(without_a_draft(resolved)))
    elif not resolved.has_model("draft"):
        stdout_console.print("no draft: this profile runs the target alone")
    table = Table("setting", "value", "from", box=None)
    for key in keys:
        table.add_row(key, escape(typed_form(resolved.values[key])), escape(resolved.sources[key]))
    print_table(table)


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
    changes = dict(parse_assignment(clean_input(assignment, "a KEY=VALUE argument")) for assignment in assignments)
    # (as `profile add` stores them: a model path absolute, so that the profile works from any folder)
    changes = {key: stored_assignment(key, value) for key, value in changes.items()}
    if any(key in MODEL_PATH_KEYS for key in changes):
        from .profile_files import check_model_files  # (reads model files: imported only here)

        check_model_files(changes)
    copying = _copies_a_shipped_profile(name)
    path = update_profile(name, changes)
    say(f"saved {path}")
    if copying:
        click.echo(hiding_shipped_text(name, "saved as a copy of the shipped profile"), err=True)


@profile_group.command("unset")
@click.argument("name")
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
def unset_command(name: str, keys: tuple[str, ...]) -> None:
    """Remove settings from NAME, so that their defaults apply again (a shipped profile is copied to your
    profiles first).

    \b
    Example:
      localspec profile unset mine sampling.max_tokens speculative.draft_max
    """
    copying = _copies_a_shipped_profile(name)
    path = update_profile(name, {}, unset=tuple(clean_input(key, "a KEY argument").strip() for key in keys))
    say(f"saved {path}")
    if copying:
        click.echo(hiding_shipped_text(name, "saved as a copy of the shipped profile"), err=True)


def _copies_a_shipped_profile(name: str) -> bool:
    """Whether changing profile `name` copies a shipped profile to the user's profiles: the name resolves to the
    shipped one (`profile_file`: none of the user's has it)."""
    found = profile_file(name)
    return found is not None and found.parent == shipped_profiles_dir()




@profile_group.command("remove")
@click.argument("name")
def remove_command(name: str) -> None:
    """Delete user profile NAME (shipped profiles cannot be removed)."""
    path = user_profiles_dir() / f"{check_name(name)}.toml"
    if path.is_dir() and not path.is_symlink():
        raise InputError(f"{path} is a folder, not a profile file: remove it yourself if you mean to")
    if not (path.exists() or path.is_symlink()):  # (said before the lock is taken: no lock file is left behind)
        if profile_file(name) is not None:
            raise InputError(f"{name!r} is a shipped profile and cannot be removed")
        raise InputError(f"no user profile named {name!r}")
    with locked(path):  # not in the middle of someone's `profile set`
        path.unlink(missing_ok=True)  # a file, or a link (dangling too: `profile list` shows it)
    discard_lock(path)
    shipped_left = profile_file(name)
    say(f"removed {path}" + (" (the shipped profile of that name applies again)" if shipped_left else ""))
    if not shipped_left and _is_default(name):
        click.echo(f"note: {name} was the default profile: commands without -p fail until"
                   " `localspec profile default NAME` names another", err=True)


def _is_default(name: str) -> bool:
    try:
        return default_profile_name() == name
    except InputError:  # a broken config.toml: said where it is read
        return False


@profile_group.command("default")
@click.argument("name")
def default_command(name: str) -> None:
    """Make NAME the profile that runs when none is named."""
    load_profile(name)
    set_default_profile(name)
    click.echo(f"default profile: {name}", err=True)
    chosen, source = profile_without_a_flag()
    if source == PROFILE_VARIABLE and chosen != name:
        click.echo(f"note: {PROFILE_VARIABLE}={chosen} is set in this environment, and it wins over the default",
                   err=True)


@profile_group.command("path")
@click.argument("name")
def path_command(name: str) -> None:
    """Print the file NAME is read from."""
    path = profile_file(name)
    if path is None:
        raise InputError(f"no profile named {name!r}")
    click.echo(str(path))
