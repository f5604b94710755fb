"""`localspec pull`: download the hub files a profile references."""

from __future__ import annotations

import click

from ..config.profiles import load_profile
from ..errors import InputError
from ..models.hub import download, hub_local_path, in_hub_cache, unusable_download
from .common import say, status_line, stderr_console


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
    hub_answered = False  # (whether the hub answers is asked before the first download only)
    for repo, filename in wanted:
        have = hub_local_path(repo, filename)
        if have is not None:
            problem = unusable_download(have)
            if problem is None:
                say(f"have {repo}/{filename}")
                continue
            if not in_hub_cache(have):  # (the models folder's, or a link there: the user's file, never removed)
                raise InputError(f"{problem}: not a usable GGUF model, and it is taken for {repo}/{filename}:"
                                 " remove or replace it, then pull again")
            click.echo(f"note: the copy of {repo}/{filename} in the hub cache is not a usable GGUF model ({problem}):"
                       " removed, downloading it again", err=True)
        with status_line(stderr_console.is_terminal) as status:
            status.start_progress(f"downloading {repo}/{filename}")
            path = download(repo, filename, on_progress=status.advance, hub_answered=hub_answered)
        hub_answered = True
        say(f"saved {path}")
