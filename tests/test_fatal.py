"""llama.cpp's aborts (GGML_ABORT) end the process with one line and exit 1, never in abort()."""

from __future__ import annotations

import subprocess
import sys

import pytest

ABORTING_CHILD = """
import os, sys
from localspec.runtime import fatal
from localspec.runtime.devices import ggml
def explain(message):
    if sys.argv[1:] == ["explanation-fails"]:
        raise KeyboardInterrupt  # (Ctrl-C while a worker is asked what went wrong)
    return None

fatal.install(explain)
if sys.argv[1:] == ["stderr-closed"]:
    os.close(2)
    sys.stderr = None
ggml().ggml_abort(b"somewhere.c", 7, b"%s", b"the worker went away")
"""


@pytest.mark.parametrize("case", ["plain", "stderr-closed", "explanation-fails"])
@pytest.mark.slow
def test_an_abort_in_llama_cpp_is_one_line_and_exit_1_whatever_fails_on_the_way(case: str) -> None:
    child = subprocess.run([sys.executable, "-c", ABORTING_CHILD, case], capture_output=True, text=True, timeout=60)
    assert child.returncode == 1  # (not -6: a SIGABRT, with a core dump)
    expected = "" if case == "stderr-closed" else "error: llama.cpp aborted: the worker went away\n"
    assert child.stderr == expected and child.stdout == ""
