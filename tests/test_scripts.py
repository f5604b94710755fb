"""The benchmark and profiling scripts run end to end on the tiny models (their figures are for the notes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_per_pass_profile_splits_each_pass_into_its_parts(tiny_pair: tuple[Path, Path]) -> None:
    target, draft = tiny_pair
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "profile_passes.py"), "--target", str(target), "--draft", str(draft), "--raw",
         "--prompts", "2", "--tokens", "24", "--strategy", "model", "--draft-max", "4", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(row["temperature"], row["mode"]) for row in rows] == [
        (0.0, "speculative"), (0.0, "target-only"), (0.8, "speculative"), (0.8, "target-only")]
    for row in rows:
        parts = row["ms_per_pass_by_part"]
        assert row["target_passes"] > 0 and parts["llama_decode (target)"] > 0
        # The parts add up to the pass (the rest is what no timer covers, never negative).
        assert sum(parts.values()) >= row["ms_per_pass"] * 0.99 and min(parts.values()) >= 0
        assert (parts["llama_decode (draft)"] > 0) == (row["mode"] == "speculative")
        assert 0 <= row["python_share"] < 1
