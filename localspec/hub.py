"""Downloading hub-referenced model files: resumable, atomic, with progress.

Files come from `$HF_ENDPOINT/<repo>/resolve/<revision>/<file>` (the Hugging Face
hub unless HF_ENDPOINT points elsewhere, e.g. a mirror) into localspec's models
folder. An interrupted download leaves `<file>.partial`, which the next attempt
continues with an HTTP Range request; the finished file is checked as GGUF and
renamed into place, so a file under its final name is always complete.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from .errors import InputError, LocalspecError
from .gguf_file import read_gguf_header
from .paths import models_dir

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK_SIZE = 1 << 20


class _DropAuthOnHostChange(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never send the hub token to another host (e.g. a CDN with signed URLs)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_opener = urllib.request.build_opener(_DropAuthOnHostChange)


def hub_url(repo: str, filename: str, revision: str = "main") -> str:
    endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    return f"{endpoint}/{repo}/resolve/{quote(revision)}/{quote(filename)}"


def hub_local_path(repo: str, filename: str) -> Path:
    """Where a hub file lives once downloaded: <models>/<org>/<repo>/<file>."""
    if ".." in Path(repo).parts or ".." in Path(filename).parts or repo.startswith("/") or filename.startswith("/"):
        raise InputError(f"invalid hub reference {repo}/{filename}")
    return models_dir() / repo / filename


def download(repo: str, filename: str, on_progress: Callable[[int, int | None], None] | None = None) -> Path:
    """Fetch `filename` from hub repo `repo` unless already complete; return its local path."""
    destination = hub_local_path(repo, filename)
    if destination.is_file():
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    already = partial.stat().st_size if partial.is_file() else 0

    request = urllib.request.Request(hub_url(repo, filename))
    if already:
        request.add_header("Range", f"bytes={already}-")
    token = os.environ.get("HF_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        response = _opener.open(request, timeout=60)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and already:  # nothing left to fetch: the partial file is whole
            return _finish(partial, destination)
        raise LocalspecError(f"download of {repo}/{filename} failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise LocalspecError(f"download of {repo}/{filename} failed: {getattr(exc, 'reason', exc)}") from None

    with response:
        resumed = response.status == 206
        if not resumed:
            already = 0
        length = response.headers.get("Content-Length")
        total = already + int(length) if length is not None else None
        done = already
        with open(partial, "ab" if resumed else "wb") as handle:
            while True:
                try:
                    block = response.read(CHUNK_SIZE)
                except OSError as exc:
                    raise LocalspecError(
                        f"download of {repo}/{filename} interrupted ({exc}); run the same command to resume"
                    ) from None
                if not block:
                    break
                handle.write(block)
                done += len(block)
                if on_progress is not None:
                    on_progress(done, total)
    if total is not None and done < total:
        raise LocalspecError(f"download of {repo}/{filename} ended early ({done} of {total} bytes); run again to resume")
    return _finish(partial, destination)


def _finish(partial: Path, destination: Path) -> Path:
    try:
        read_gguf_header(partial)
    except InputError as exc:
        partial.unlink(missing_ok=True)
        raise LocalspecError(f"downloaded file is not a valid GGUF model ({exc}); it was removed") from None
    os.replace(partial, destination)
    return destination
