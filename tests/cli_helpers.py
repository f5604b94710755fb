"""Driving the CLI in-process in tests, and what a clean error looks like."""

from __future__ import annotations

from click.testing import CliRunner, Result

from localspec.cli import main


def cli(*args: str, env: dict | None = None) -> Result:
    """Run `localspec ARGS` in this process (stdout and stderr kept apart)."""
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def one_error_line(result: Result, code: int, *fragments: str) -> str:
    """Assert exit `code` and exactly one line on stderr, holding every fragment; return that line."""
    assert result.exit_code == code, (result.output, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
