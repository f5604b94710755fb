"""Two models loading at once, in two threads (a session loads its draft beside its target): each takes its own log."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tiny_models import write_unloadable_model

from localspec.errors import LocalspecError
from localspec.runtime.model import Model


@pytest.mark.slow
def test_two_models_loading_at_once_each_read_their_own_placement_from_the_log(tiny_pair: tuple[Path, Path],
                                                                              smollm_q4_1: Path) -> None:
    pair = (smollm_q4_1, tiny_pair[0])  # sizes far apart (mixed logs would show), and a load long enough to overlap
    alone = {}
    for path in pair:
        with Model(path) as model:
            alone[path] = model.placement.to_dict()
    assert alone[pair[0]]["weights_bytes"] != alone[pair[1]]["weights_bytes"]
    for _ in range(3):
        with ThreadPoolExecutor(1) as other_thread:
            pending = other_thread.submit(Model, pair[1])
            with Model(pair[0]) as first, pending.result() as second:
                assert first.placement.to_dict() == alone[pair[0]]
                assert second.placement.to_dict() == alone[pair[1]]


def test_a_load_that_fails_beside_another_says_why_it_failed(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    unloadable = write_unloadable_model(tmp_path / "odd.gguf")
    with ThreadPoolExecutor(1) as other_thread:
        pending = other_thread.submit(Model, unloadable)
        with Model(tiny_pair[0]) as target:
            with pytest.raises(LocalspecError, match="odd.gguf: llama.cpp could not load the model .*unknown model architecture"):
                pending.result()
            assert target.placement.to_dict()["weights_bytes"]


@pytest.mark.parametrize("failing", ["target", "draft"])
def test_a_session_whose_model_fails_to_load_says_which_and_closes_the_other(
    tiny_profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str,
) -> None:
    """The draft loads beside the target (both on the CPU): whichever fails, its error is told and every model
    that did load is closed (the draft once its load is done, when the target failed first)."""
    from localspec.app.plan import resolve
    from localspec.app.session import open_session

    plan = resolve(tiny_profile, {})
    unloadable = write_unloadable_model(tmp_path / "odd.gguf")
    plan = dataclasses.replace(plan, **{failing: dataclasses.replace(getattr(plan, failing), path=unloadable)})
    closed: list[Path] = []
    close = Model.close

    def recording_close(self: Model) -> None:
        if getattr(self, "_model", None):
            closed.append(self.path)
        close(self)

    monkeypatch.setattr(Model, "close", recording_close)
    with pytest.raises(LocalspecError, match="odd.gguf: llama.cpp could not load the model .*unknown model architecture"):
        open_session(plan, remember_lengths=False, memory_owner=None)
    other = "draft" if failing == "target" else "target"
    assert closed == [getattr(plan, other).path]
