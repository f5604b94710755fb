"""Driving the CLI in-process in tests, what a clean error looks like, and the scripts as modules."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def run_script(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run scripts/NAME.py ARGS with this Python, stdout and stderr captured as text."""
    return subprocess.run([sys.executable, str(SCRIPTS / f"{name}.py"), *args], capture_output=True, text=True,
                          timeout=timeout)


def script_module(name: str) -> ModuleType:
    """scripts/NAME.py loaded as a module (the scripts are not part of the package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module
