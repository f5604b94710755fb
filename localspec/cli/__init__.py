"""The `localspec` command line: a thin shell over `localspec.app`.

stdout carries only generated text (or a `--json` object), so output pipes
cleanly; progress, statistics and errors go to stderr. A user error is one line
and a non-zero exit code (2: bad input, 1: runtime failure), never a traceback.

Each command lives in its own module, imported only when that command runs
(click's lazy-loading pattern), so `localspec profile list` does not pay for
the engine's imports.
"""

from __future__ import annotations

import click

from .. import __version__
from .common import LazyCommands

COMMANDS = {
    "run": "localspec.cli.run:run",
    "chat": "localspec.cli.chat:chat",
    "bench": "localspec.cli.bench:bench",
    "profile": "localspec.cli.profiles:profile_group",
    "models": "localspec.cli.models:models_group",
    "draft": "localspec.cli.drafts:draft_group",
    "pull": "localspec.cli.pull:pull",
    "history": "localspec.cli.history:history_group",
    "memory": "localspec.cli.memory:memory_group",
    "serve": "localspec.cli.serve:serve",
    "info": "localspec.cli.info:info",
    "worker": "localspec.cli.worker:worker",
}


@click.group(cls=LazyCommands, lazy_commands=COMMANDS)
@click.version_option(__version__, prog_name="localspec")
def main() -> None:
    """Faster local LLM generation with speculative decoding, the same output as the target model alone."""
