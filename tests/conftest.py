"""Shared fixtures: tiny generated models, the real SmolLM2 pair, an isolated user folder.

Tests that load real weights must be marked `slow`, so that `-m "not slow"` is
a fast suite; collection fails for a test that asks for a real-weight fixture
without the mark.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# Hypothesis times each example by the wall clock (200 ms by default): on a shared, loaded CI machine an example
# of a pure function that was descheduled fails as DeadlineExceeded or "Unreliable test timings". Time is not
# what these tests check: no deadline, no health check on slow data generation, for every property test.
hypothesis_settings.register_profile("localspec", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("localspec")

# Bytecode caches (gitignored) are written even where PYTHONDONTWRITEBYTECODE is set: compiling the
# package and the tests afresh in every run, and in every `localspec` process a test starts, costs seconds.
sys.dont_write_bytecode = False
sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import write_pair  # noqa: E402

from localspec.models.demo import demo_draft_path  # noqa: E402
from localspec.models.quantize import quantize  # noqa: E402

REAL_WEIGHT_FIXTURES = {"smollm_q4_1", "smollm_f32", "gemma"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        real = REAL_WEIGHT_FIXTURES & set(getattr(item, "fixturenames", ()))
        if real and item.get_closest_marker("slow") is None:
            raise pytest.UsageError(f"{item.nodeid} uses real weights ({', '.join(sorted(real))}): mark it slow")


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the real user's files: a fresh LOCALSPEC_HOME and hub cache per test, a session-wide cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "user-cache"))
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path_factory.mktemp("localspec-home")))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf-hub-cache")))
    monkeypatch.delenv("LOCALSPEC_PROFILE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, draft): tiny random llama models with one vocabulary and different weights."""
    return write_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def smollm_q4_1() -> Path:
    return demo_draft_path()


@pytest.fixture(scope="session")
def smollm_f32(tmp_path_factory: pytest.TempPathFactory, smollm_q4_1: Path) -> Path:
    """SmolLM2-135M-Instruct widened to F32 by llama.cpp's quantizer (batched == single-token logits)."""
    return quantize(smollm_q4_1, tmp_path_factory.mktemp("smollm") / "SmolLM2-135M-Instruct.F32.gguf", "f32")


TINY_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"


@pytest.fixture
def tiny_profile(tiny_pair: tuple[Path, Path]) -> str:
    """A user profile "tiny" on the tiny pair, with a chat template (the tiny models have none)."""
    from localspec.config.paths import user_profiles_dir

    path = user_profiles_dir() / "tiny.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[target]\npath = "{tiny_pair[0]}"\n[draft]\npath = "{tiny_pair[1]}"\n'
                    f'[chat]\ntemplate = "{TINY_TEMPLATE}"\n')
    return "tiny"


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask most systems run with (022), which lets others read whatever is not made private."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)
