"""Finding GGUF models on disk and which of them can draft for which.

`scan` describes every .gguf file under some folders from its header alone;
`group_by_vocabulary` puts files whose vocabularies pass the compatibility
rule together; `drafts_for` / `find_drafts` list the files that can draft for a
target, smallest first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from gguf import LlamaFileType

from ..config.paths import models_dir, user_path
from ..errors import InputError
from .compat import VocabInfo, check_compatible
from .gguf import read_gguf_header, why_missing


@dataclass(frozen=True)
class ModelInfo:
    """What a GGUF header says about a model, plus its size on disk."""

    path: Path
    architecture: str
    n_parameters: int
    quantization: str
    size_bytes: int
    context_length: int | None
    vocab: VocabInfo

    @property
    def vocab_fingerprint(self) -> str:
        return self.vocab.digest()[:12]

    def to_dict(self) -> dict:
        return {
            "path": str(self.path),
            "architecture": self.architecture,
            "parameters": self.n_parameters,
            "quantization": self.quantization,
            "size_bytes": self.size_bytes,
            "context_length": self.context_length,
            "vocab_size": self.vocab.size,
            "tokenizer": self.vocab.tokenizer_model,
            "vocab_fingerprint": self.vocab_fingerprint,
        }


def describe(path: Path) -> ModelInfo:
    """Read one model's header (raises InputError for files that are not usable GGUF)."""
    header = read_gguf_header(path)
    file_type = header.get("general.file_type")
    try:
        quantization = LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_") if file_type is not None else "?"
    except ValueError:
        quantization = f"type {file_type}"
    return ModelInfo(
        path=path,
        architecture=header.architecture,
        n_parameters=header.n_parameters,
        quantization=quantization,
        size_bytes=header.file_size,
        context_length=header.context_length,
        vocab=VocabInfo.from_header(header),
    )


def scan(folders: Iterable[str | Path]) -> tuple[list[ModelInfo], list[str]]:
    """Every readable .gguf file under `folders` (recursively: `_gguf_files`), and one line per unreadable file
    or folder."""
    models: list[ModelInfo] = []
    problems: list[str] = []
    seen: set[Path] = set()
    for folder in folders:
        folder = user_path(folder, "FOLDER")
        if not folder.exists():
            raise InputError(f"{folder}: no such folder")
        if not folder.is_dir():
            raise InputError(f"{folder}: not a folder")
        for path in _gguf_files(folder, problems):
            try:
                resolved = path.resolve(strict=True)
            except (OSError, RuntimeError):  # a dangling link, a link loop, a file gone meanwhile
                problems.append(f"{path}: cannot be opened ({why_missing(path)})")
                continue
            if resolved in seen:
                continue
            if not path.is_file():
                problems.append(f"{path}: not a regular file (a pipe or a device)")
                continue
            seen.add(resolved)
            try:
                info = describe(path)
            except InputError as exc:
                problems.append(str(exc))
                continue
            if info.vocab.size == 0:  # (no vocabulary is no group's: it was grouped as a draft for the others)
                problems.append(f"{path}: holds no vocabulary, so it neither drafts nor is drafted for")
                continue
            models.append(info)
    return models, problems


def _gguf_files(folder: Path, problems: list[str]) -> list[Path]:
    """The files under `folder` named *.gguf (the extension in any case: `.GGUF` too), then those under the
    folders links in it lead to, each folder walked once (a file is found by its own folder's name before a
    link's, and a loop of links ends); a folder that cannot be read, or that went away during the walk, is one
    line in `problems`."""
    found: list[Path] = []
    walked: set[Path] = set()
    pending = [folder]

    def unreadable(exc: OSError) -> None:
        problems.append(f"{exc.filename}: cannot be read ({exc.strerror or exc})")

    while pending:
        start = pending.pop(0)
        for root, subfolders, files in os.walk(start, onerror=unreadable):  # (links to folders are listed, not entered)
            try:
                real = Path(root).resolve(strict=True)
            except (OSError, RuntimeError):  # (gone meanwhile)
                subfolders.clear()
                continue
            if real in walked:  # (a folder reached again through a link)
                subfolders.clear()
                continue
            walked.add(real)
            subfolders.sort()
            pending.extend(Path(root) / name for name in subfolders if os.path.islink(os.path.join(root, name)))
            found.extend(Path(root) / name for name in sorted(files) if name.lower().endswith(".gguf"))
    return found


def group_by_vocabulary(models: list[ModelInfo]) -> list[list[ModelInfo]]:
    """Groups of mutually usable models (each checked against its group's first member)."""
    groups: list[list[ModelInfo]] = []
    for model in models:
        for group in groups:
            if check_compatible(group[0].vocab, model.vocab).compatible:
                group.append(model)
                break
        else:
            groups.append([model])
    return groups


def drafts_for(target: ModelInfo, candidates: list[ModelInfo]) -> list[tuple[ModelInfo, float]]:
    """Compatible models smaller on disk than `target`, smallest first, with their size ratio (a file with
    a vocabulary but no weights, llama.cpp's ggml-vocab-*.gguf, is not a model)."""
    found = [
        (model, model.size_bytes / target.size_bytes)
        for model in candidates
        if model.path.resolve() != target.path.resolve()
        and model.n_parameters > 0
        and model.size_bytes < target.size_bytes
        and check_compatible(target.vocab, model.vocab).compatible
    ]
    return sorted(found, key=lambda pair: pair[0].size_bytes)


def model_folders() -> list[Path]:
    """Where models are kept when no folder is named, those of them that exist: localspec's models folder, and
    the hub cache that `pull` downloads into."""
    from .hub import hub_cache_folder  # (huggingface_hub: imported where the cache is looked in)

    return [folder for folder in (models_dir(), hub_cache_folder()) if folder.is_dir()]


def find_drafts(target: Path, folders: Iterable[Path] = (), problems: list[str] | None = None,
                ) -> list[tuple[ModelInfo, float]]:
    """Drafts for the model file `target` among `folders` (default: its own folder and `model_folders`); the
    files and folders that could not be read are added to `problems` where it is given."""
    target_info = describe(target)
    search = list(folders) or [target.parent, *model_folders()]
    candidates, unreadable = scan(search)
    if problems is not None:
        problems.extend(unreadable)
    return drafts_for(target_info, candidates)
