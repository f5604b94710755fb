"""`localspec models scan|drafts`, `localspec draft make` and `localspec pull`."""

from __future__ import annotations

import json
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
from ..config.paths import models_dir
from ..config.profiles import load_profile
from ..errors import InputError
from ..models.discovery import ModelInfo, find_drafts, group_by_vocabulary, scan
from ..models.hub import download, hub_local_path
from ..models.quantize import OUTPUT_TYPES
from .common import human_size, status_line, stderr_console, stdout_console


def _params(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _model_table(models: list[ModelInfo], extra: dict[Path, str] | None = None) -> Table:
    table = Table("file", "arch", "params", "quant", "size", "ctx", "vocab", box=None)
    if extra is not None:
        table.add_column("size vs target")
    for model in models:
        row = [
            str(model.path),
            model.architecture,
            _params(model.n_parameters),
            model.quantization,
            human_size(model.size_bytes),
            str(model.context_length or "?"),
            f"{model.vocab.tokenizer_model}/{model.vocab.size} {model.vocab_fingerprint}",
        ]
        if extra is not None:
            row.append(extra[model.path])
        table.add_row(*row)
    return table


@click.group("models")
def models_group() -> None:
    """Find GGUF models on disk and the drafts that fit them."""


@models_group.command("scan")
@click.argument("folders", nargs=-1, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON groups.")
def scan_command(folders: tuple[Path, ...], as_json: bool) -> None:
    """List the GGUF files under FOLDERS (default: localspec's models folder), grouped by compatible vocabulary."""
    models, problems = scan(folders or (models_dir(),))
    groups = group_by_vocabulary(models)
    if as_json:
        click.echo(json.dumps({"groups": [[m.to_dict() for m in g] for g in groups], "unreadable": problems}, indent=2))
        return
    if not models:
        stdout_console.print("no GGUF files found")
    for number, group in enumerate(groups, start=1):
        stdout_console.print(f"[bold]vocabulary group {number}[/bold] ({len(group)} file{'s' if len(group) > 1 else ''}: any can draft for a larger one)")
        stdout_console.print(_model_table(sorted(group, key=lambda m: m.size_bytes)))
    for problem in problems:
        click.echo(f"skipped: {problem}", err=True)


@models_group.command("drafts")
@click.argument("target", type=click.Path(path_type=Path))
@click.argument("folders", nargs=-1, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def drafts_command(target: Path, folders: tuple[Path, ...], as_json: bool) -> None:
    """List the files that can draft for TARGET, smallest first (default folders: TARGET's and the models folder)."""
    found = find_drafts(target, folders)
    if as_json:
        click.echo(json.dumps([{**m.to_dict(), "size_ratio": r} for m, r in found], indent=2))
        return
    if not found:
        stdout_console.print(f"no compatible smaller model found; make one with: localspec draft make {target}")
        return
    stdout_console.print(_model_table([m for m, _ in found], {m.path: f"{r:.1%}" for m, r in found}))


@click.group("draft")
def draft_group() -> None:
    """Make draft models."""


@draft_group.command("make")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--type", "type_name", type=click.Choice([AUTO, *sorted(OUTPUT_TYPES)]), default=AUTO, show_default=True,
              help=f"Precision of the draft; {AUTO}: make {', '.join(CANDIDATE_TYPES)}, measure each against TARGET, keep the fastest.")
@click.option("--out", type=click.Path(path_type=Path), help="Output file [next to TARGET: NAME.draft-TYPE.gguf].")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
def make_command(target: Path, type_name: str, out: Path | None, force: bool) -> None:
    """Write a lower-precision copy of TARGET to draft for it (vocabulary-compatible by construction).

    For targets at F16, BF16 or Q8_0 with no small model of the same family.
    """
    if type_name != AUTO:
        out = out or default_draft_path(target, type_name)
        if out.exists() and not force:
            raise InputError(f"{out} exists; pass --force to overwrite")
    elif out is not None and out.exists() and not force:
        raise InputError(f"{out} exists; pass --force to overwrite")
    make_draft_file(target, type_name, out, force=force)


def make_draft_file(target: Path, type_name: str = AUTO, out: Path | None = None, force: bool = False) -> Path:
    """Make a draft of `target` (measuring candidates for `auto`) with progress on stderr; report what was made."""
    if type_name == AUTO:
        with status_line(stderr_console.is_terminal) as status:
            made, reports = make_fastest_draft(target, out, overwrite=force, on_status=status.show)
        _print_candidates(reports)
    else:
        with status_line(stderr_console.is_terminal) as status:
            status.start_progress(f"writing {type_name} draft of {target.name}")
            made = make_draft(target, type_name, out, on_progress=status.advance)
    click.echo(f"wrote {made.path} ({human_size(made.size_bytes)}, {made.size_ratio:.0%} of the target)", err=True)
    if not made.much_smaller:
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
    if best.expected_speedup < 1.0:
        click.echo(f"warning: even the best precision ({best.type_name}) is expected to be slower than the target alone", err=True)


@click.command("pull")
@click.argument("profile_name", metavar="PROFILE")
def pull(profile_name: str) -> None:
    """Download the hub-referenced models of PROFILE (resumable: run again after an interruption)."""
    profile = load_profile(profile_name)
    wanted = [
        (profile.values[f"{role}.hf_repo"], profile.values[f"{role}.hf_file"])
        for role in ("target", "draft")
        if f"{role}.hf_repo" in profile.values
    ]
    if not wanted:
        click.echo(f"profile {profile_name} references no hub files; nothing to pull", err=True)
        return
    for repo, filename in wanted:
        if hub_local_path(repo, filename) is not None:
            click.echo(f"have {repo}/{filename}", err=True)
            continue
        with status_line(stderr_console.is_terminal) as status:
            status.start_progress(f"downloading {repo}/{filename}")
            path = download(repo, filename, on_progress=status.advance)
        click.echo(f"saved {path}", err=True)
