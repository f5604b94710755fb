"""`localspec draft make`: a draft model made from its own target, its precision chosen by measurement."""

from __future__ import annotations

import os
from pathlib import Path

import click
from rich.table import Table

from ..app.drafts import (
    AUTO,
    CANDIDATE_TYPES,
    CandidateReport,
    default_draft_path,
    make_draft,
    make_fastest_draft,
)
from ..config.paths import check_folder_of, same_file, user_path
from ..errors import InputError
from ..models.discovery import describe
from ..models.quantize import OUTPUT_TYPES
from .common import cleaned_up_on_sigterm, human_size, say, status_line, stderr_console


@click.group("draft")
def draft_group() -> None:
    """Make draft models."""


@draft_group.command("make")
@click.argument("target")
@click.option("--type", "type_name", type=click.Choice([AUTO, *sorted(OUTPUT_TYPES)], case_sensitive=False),
              default=AUTO, show_default=True,
              help=f"Precision of the draft; {AUTO}: make {', '.join(CANDIDATE_TYPES)}, measure each against TARGET, keep the fastest.")
@click.option("--out", metavar="PATH", help="Output file [next to TARGET: NAME.draft-TYPE.gguf].")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
def make_command(target: str, type_name: str, out: str | None, force: bool) -> None:
    """Write a lower-precision copy of TARGET to draft for it (vocabulary-compatible by construction).

    For targets at F32, F16, BF16 or Q8_0 with no small model of the same family.
    """
    target_path = user_path(target, "TARGET")
    out_path = user_path(out, "--out") if out is not None else None
    with cleaned_up_on_sigterm():  # (a killed make leaves no model-sized temporary file behind)
        make_draft_file(target_path, type_name, out_path, force=force)


def make_draft_file(target: Path, type_name: str = AUTO, out: Path | None = None, force: bool = False) -> Path:
    """Make a draft of `target` (measuring candidates for `auto`) with progress on stderr; report what was made.
    The target and every file the draft could be written to are checked first (minutes of measuring are not
    spent on a draft that cannot be written)."""
    describe(target)  # (a target that cannot be read is named as such, not by the draft's path)
    types = CANDIDATE_TYPES if type_name == AUTO else (type_name,)
    destinations = [out] if out is not None else [default_draft_path(target, name) for name in types]
    for destination in destinations:
        named = f"--out {destination}" if out is not None else str(destination)
        if same_file(destination, target):
            raise InputError(f"{named} is TARGET itself{'' if out is not None else ' (a link to it)'}: the draft would"
                             " replace the model it drafts for")
        if out is None and destination.is_symlink():  # (a name the user did not choose: never written through)
            raise InputError(f"{named} is a link (to {os.readlink(destination)}): remove it, or write the draft"
                             " elsewhere with --out")
        _check_writable(destination, named)
    if type_name != AUTO:  # (auto refuses an existing file in its own words)
        out = destinations[0]
        if out.exists() and not force:
            raise InputError(f"{out} exists; pass --force to overwrite")
    return _make(target, type_name, out, force)


def _check_writable(out: Path, named: str) -> None:
    """InputError, before any work, where `out` (`named` so in messages) cannot take a draft: its folder is
    missing (a mistyped folder is not made) or cannot be written in, or something other than a file stands
    there (which --force does not replace)."""
    try:
        check_folder_of(out, named)
        if out.is_symlink() and not out.exists():
            raise InputError(f"{named} is a link to nothing (or a loop of links): a draft is not written through it")
        if out.exists() and not out.is_file():
            what = "a folder" if out.is_dir() else "not a regular file"
            raise InputError(f"{named} is {what}: a draft is written as a file (--force replaces only a file)")
        writable = os.access(out.parent, os.W_OK)
    except OSError as exc:  # (a name too long)
        raise InputError(f"{named}: cannot reach it ({exc.strerror or exc})") from None
    if not writable:
        raise InputError(f"{named}: cannot write in {out.parent} (permission denied)")


def _make(target: Path, type_name: str, out: Path | None, force: bool) -> Path:
    if type_name == AUTO:
        with status_line(stderr_console.is_terminal) as status:
            made, reports = make_fastest_draft(target, out, overwrite=force, on_status=status.show)
        _print_candidates(reports)
    else:
        with status_line(stderr_console.is_terminal) as status:
            made = make_draft(target, type_name, out, on_progress=status.advance,
                              on_start=lambda: status.start_progress(f"writing {type_name} draft of {target.name}"))
    say(f"wrote {made.path} ({human_size(made.size_bytes)}, {made.size_ratio:.0%} of the target)")
    if made.size_ratio >= 1.0:
        click.echo("warning: the draft is no smaller than the target, so it cannot speed it up (a draft is made of an"
                   " F32, F16, BF16 or Q8_0 target, at a lower precision)", err=True)
    elif not made.much_smaller:
        click.echo("note: the draft is not much smaller than the target; expect little speed-up", err=True)
    return made.path


def _print_candidates(reports: list[CandidateReport]) -> None:
    table = Table("type", "size", "draft cost", "acceptance", "best draft_max", "expected speed-up", box=None)
    best = max(reports, key=lambda report: report.expected_speedup)
    for report in reports:
        mark = " *" if report is best else ""
        table.add_row(report.type_name, human_size(report.size_bytes), f"{report.cost_ratio:.2f}", f"{report.acceptance:.1%}",
                      str(report.best_draft_length), f"{report.expected_speedup:.2f}x{mark}")
    stderr_console.print(table)
    if best.expected_speedup <= 1.0:
        click.echo(f"warning: even the best precision ({best.type_name}) is expected to be no faster than the target"
                   " alone", err=True)


