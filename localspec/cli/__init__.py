"""The `localspec` command line: a thin shell over `localspec.app`.

stdout carries only generated text (or a `--json` object), so output pipes
cleanly; progress, statistics and errors go to stderr. A user error is one line
and a non-zero exit code (2: bad input, 1: runtime failure), never a traceback.
"""

from __future__ import annotations

import click

from .. import __version__
from .bench import bench
from .chat import chat
from .common import LocalspecGroup
from .models import draft_group, models_group, pull
from .profiles import profile_group
from .run import run


@click.group(cls=LocalspecGroup)
@click.version_option(__version__, prog_name="localspec")
def main() -> None:
    """Faster local LLM generation with speculative decoding, the same output as the target model alone."""


for command in (run, chat, bench, profile_group, models_group, draft_group, pull):
    main.add_command(command)
