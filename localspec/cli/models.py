"""`localspec models scan|drafts`: GGUF files on disk, and which can draft for which."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..config.paths import models_dir, user_path
from ..models.discovery import ModelInfo, find_drafts, group_by_vocabulary, model_folders, scan
from ..models.hub import hub_cache_folder
from ..shown import shown_name
from ..textin import clean_text
from .common import human_size, print_table, stdout_console


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
        table.add_row(*(Text(shown_name(cell)) for cell in row))  # text, not markup: a path may hold "[red]"
    return table


def _json_row(model: ModelInfo) -> dict:
    """A model's row for `--json`: a path's bytes that are not UTF-8 as U+FFFD, as JSON's text must be Unicode."""
    return {**model.to_dict(), "path": clean_text(str(model.path))[0]}


@click.group("models")
def models_group() -> None:
    """Find GGUF models on disk and the drafts that fit them."""


@models_group.command("scan")
@click.argument("folders", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON groups.")
def scan_command(folders: tuple[str, ...], as_json: bool) -> None:
    """List the GGUF files under FOLDERS (default: localspec's models folder and the hub cache `pull` downloads
    into), grouped by compatible vocabulary."""
    searched = folders or model_folders()
    if not searched:  # (a fresh install: nothing pulled yet, not an error)
        click.echo(f"note: no models yet (no models folder {models_dir()}, no hub cache {hub_cache_folder()}): "
                   "name FOLDERS to scan, or `localspec pull` a model", err=True)
    models, problems = scan(searched) if searched else ([], [])
    groups = group_by_vocabulary(models)
    if as_json:
        click.echo(json.dumps({"groups": [[_json_row(m) for m in g] for g in groups],
                               "unreadable": [clean_text(problem)[0] for problem in problems]}, indent=2))
        return
    if not models:
        stdout_console.print(Text(shown_name(f"no GGUF files found in {', '.join(str(f) for f in searched)}")
                                  if searched else "no GGUF files found"))
    for number, group in enumerate(groups, start=1):
        stdout_console.print(f"[bold]vocabulary group {number}[/bold] ({len(group)} file{'s' if len(group) > 1 else ''}: any can draft for a larger one)")
        print_table(_model_table(sorted(group, key=lambda m: m.size_bytes)))
    _say_skipped(problems)


@models_group.command("drafts")
@click.argument("target")
@click.argument("folders", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list (each file's row and its size_ratio).")
def drafts_command(target: str, folders: tuple[str, ...], as_json: bool) -> None:
    """List the smaller files that can draft for TARGET, smallest first (default folders: TARGET's, the models
    folder and the hub cache)."""
    problems: list[str] = []
    found = find_drafts(user_path(target, "TARGET"), [user_path(folder, "FOLDER") for folder in folders], problems)
    if as_json:
        click.echo(json.dumps([{**_json_row(m), "size_ratio": r} for m, r in found], indent=2))
    elif not found:
        quoted = shlex.quote(target)  # (a name the terminal cannot show as typed: said as TARGET, not as another file)
        click.echo("no compatible smaller model found; make one with: localspec draft make"
                   f" {quoted if shown_name(quoted) == quoted else 'TARGET'}")
    else:
        print_table(_model_table([m for m, _ in found], {m.path: f"{r:.1%}" for m, r in found}))
    _say_skipped(problems)


def _say_skipped(problems: list[str]) -> None:
    """One `skipped:` line on stderr per file or folder a scan could not read."""
    for problem in problems:
        click.echo(f"skipped: {shown_name(problem)}", err=True)
