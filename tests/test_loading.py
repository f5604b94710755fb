"""Two models loading at once, in two threads (a session loads its draft beside its target): each takes its own log."""

from __future__ import annotations

import _thread
import dataclasses
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from tiny_models import write_unloadable_model

from localspec.errors import LocalspecError
from localspec.runtime import library
from localspec.runtime import model as model_module
from localspec.runtime.model import Model
from localspec.settings import ModelSettings


@contextmanager
def loads_overlapping(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make the next two model loads, in two threads, each capture its log while the other's capture is
    open too, from before either load starts until both are done, however the threads are scheduled."""
    both_capturing, both_loaded = threading.Barrier(2, timeout=60), threading.Barrier(2, timeout=60)
    real = library.captured_log

    @contextmanager
    def overlapping_capture() -> Iterator[list[str]]:
        with real() as pieces:
            both_capturing.wait()
            yield pieces
            both_loaded.wait()

    monkeypatch.setattr(model_module, "captured_log", overlapping_capture)
    yield


@pytest.mark.slow
def test_two_models_loading_at_once_each_read_their_own_placement_from_the_log(
    tiny_pair: tuple[Path, Path], smollm_q4_1: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pair = (smollm_q4_1, tiny_pair[0])  # sizes far apart: mixed logs would show
    alone = {}
    for path in pair:
        with Model(path) as model:
            alone[path] = model.placement.to_dict()
    assert alone[pair[0]]["weights_bytes"] != alone[pair[1]]["weights_bytes"]
    with loads_overlapping(monkeypatch), ThreadPoolExecutor(1) as other_thread:
        pending = other_thread.submit(Model, pair[1])
        with Model(pair[0]) as first, pending.result() as second:
            assert first.placement.to_dict() == alone[pair[0]]
            assert second.placement.to_dict() == alone[pair[1]]


def _log_from(start_thread, text: bytes) -> None:
    """Write `text` to llama.cpp's log route from a new thread started by `start_thread(function)`."""
    done = threading.Event()

    def write() -> None:
        library._on_log(2, text, None)
        done.set()

    start_thread(write)
    assert done.wait(10)


def test_a_log_line_reaches_the_captures_of_its_own_thread_or_of_every_thread_from_one_of_llama_cpps() -> None:
    """A thread that captures nothing, Python's, keeps its lines out of another thread's capture (it decodes for
    another request, say); a thread Python did not start (llama.cpp's own, simulated by a bare `_thread`) works
    for whichever call is running: its lines go to every capture."""
    with library.captured_log() as mine:
        _log_from(lambda function: threading.Thread(target=function).start(), b"from a python thread\n")
        _log_from(lambda function: _thread.start_new_thread(function, ()), b"from a thread of the library's\n")
        library._on_log(2, b"from this thread\n", None)
    assert mine == ["from a thread of the library's\n", "from this thread\n"]


def test_a_load_that_fails_beside_another_says_why_it_failed(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    unloadable = write_unloadable_model(tmp_path / "odd.gguf")
    with ThreadPoolExecutor(1) as other_thread:
        pending = other_thread.submit(Model, unloadable)
        with Model(tiny_pair[0]) as target:
            with pytest.raises(LocalspecError, match="odd.gguf: llama.cpp could not load the model .*unknown model architecture"):
                pending.result()
            assert target.placement.to_dict()["weights_bytes"]


@pytest.mark.parametrize("failing", ["target", "draft"])
@pytest.mark.slow
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


def test_ctrl_c_during_a_load_that_logs_stops_the_load_not_swallowed_by_the_log_callback(
    tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt raised in the log callback (where Ctrl-C lands while llama.cpp logs) would be printed
    and dropped by ctypes; it is raised once the load returns."""
    def interrupted(level: int, text: bytes) -> None:
        raise KeyboardInterrupt

    llama_module = library.llama()  # (set up before the callback is replaced)
    monkeypatch.setattr(library, "_record", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Model(tiny_pair[0], ModelSettings(n_threads=1))
    monkeypatch.undo()
    assert llama_module is library.llama() and not library._interrupted
    with Model(tiny_pair[0], ModelSettings(n_threads=1)) as model:  # the next load goes on as usual
        assert model.n_vocab > 0



INTERRUPTED_WHILE_LOADING = """
import os, signal, sys, threading, time
from localspec.runtime.model import Model
from localspec.settings import ModelSettings
path = sys.argv[1]
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # load after load: the signal lands in llama.cpp (and its log) or between
        Model(path, ModelSettings(n_threads=1)).close()
except KeyboardInterrupt:
    sys.exit(130)
sys.exit(0)
"""


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_a_real_ctrl_c_while_models_load_is_never_lost_nor_printed_as_ignored(tiny_pair: tuple[Path, Path]) -> None:
    """Python may raise a pending KeyboardInterrupt as llama.cpp's log callback is entered, where ctypes prints it
    as ignored and drops it: the signal is held during the call and delivered after it."""
    for _ in range(3):
        child = subprocess.run([sys.executable, "-c", INTERRUPTED_WHILE_LOADING, str(tiny_pair[0])],
                               capture_output=True, text=True, timeout=60)
        assert child.returncode == 130 and "Exception ignored" not in child.stderr, child.stderr[-2000:]
