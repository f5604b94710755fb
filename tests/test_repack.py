"""llama.cpp's extra CPU buffer types (repacked weights): the `repack` setting, the probe and its remembered verdicts,
and speculative identity within a mode on real weights (slow)."""

from __future__ import annotations

import functools
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import cli, one_error_line
from tiny_models import write_unloadable_model

from localspec.app import repack
from localspec.app.session import Session
from localspec.engine.drafters import ModelDrafter
from localspec.engine.generation import generate_text
from localspec.errors import InputError
from localspec.models.quantize import quantize
from localspec.runtime import repack as runtime_repack
from localspec.runtime.library import llama
from localspec.runtime.model import Model
from localspec.runtime.repack import ProbeResult, build_fingerprint
from localspec.settings import SETTINGS, GenerationSettings, ModelSettings, SamplingParams, SpeculativeParams

# CPU_REPACK's Q4_0 layouts need AVX2 on x86 (or ARM's dot-product extensions); elsewhere nothing is repacked.
REPACKS_Q4_0 = "AVX2 = 1" in llama().llama_print_system_info().decode()
ON, OFF, ONE_TOKEN = repack.Repacking.ON, repack.Repacking.OFF, repack.Repacking.ONE_TOKEN
needs_repacking = pytest.mark.skipif(not REPACKS_Q4_0, reason="llama.cpp repacks no Q4_0 weights on this CPU")


@functools.cache
def _probed(path: Path, one_token: bool = False) -> ProbeResult:
    return runtime_repack.probe(path, timeout_s=300, one_token=one_token)


def require_working_repack(*paths: Path, one_token: bool = False) -> None:
    """Skip unless decodes of every one of `paths` with repacked weights survive here (batched ones, or `one_token`
    at a time), as the probe finds in a child process: llama-cpp-python 0.3.36 crashes on batches on some CPUs with
    AMX, and a crash would end the suite."""
    for path in paths:
        result = _probed(path, one_token)
        if not result.works:
            pytest.skip(f"repacked weights of {path.name} do not work on this CPU: {result.detail}")


@pytest.fixture(scope="module")
def tiny_q4_0(tiny_pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny target at Q4_0 (its 32-wide rows fit Q4_0's blocks), so that llama.cpp has weights to repack."""
    return quantize(tiny_pair[0], tmp_path_factory.mktemp("q4_0") / "tiny-q4_0.gguf", "q4_0", n_threads=1)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(repack, "gpu_devices", lambda: [])  # (a model wholly on a GPU is never probed)
    return repack.cache_file()


@pytest.fixture
def fake_probe(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Replace the child-process probe by one that says "works" and records each path it was asked about."""
    calls: list[Path] = []
    monkeypatch.setattr(repack, "probe", lambda path, timeout_s, one_token=False: calls.append(path) or ProbeResult(True, "fake"))
    return calls


# -- the setting -------------------------------------------------------------------------------


def test_repack_is_auto_on_or_off_per_model_with_a_flag_each() -> None:
    assert SETTINGS["target.repack"].default == SETTINGS["draft.repack"].default == "auto"
    assert (SETTINGS["target.repack"].flag, SETTINGS["draft.repack"].flag) == ("--repack", "--draft-repack")
    assert ModelSettings.from_values({"draft.repack": "off"}, "draft").repack == "off"
    with pytest.raises(InputError, match='draft.repack must be one of auto, on, off, got "yes"'):
        ModelSettings.from_values({"draft.repack": "yes"}, "draft")
    with pytest.raises(InputError, match="target.repack must be a string, got true"):
        ModelSettings.from_values({"target.repack": True}, "target")


def test_a_bad_repack_flag_is_one_error_line(tiny_pair: tuple[Path, Path]) -> None:
    one_error_line(cli("run", "--target", str(tiny_pair[0]), "--draft-repack", "maybe", "hi"), 2, "--draft-repack", "maybe")


# -- what llama.cpp did ------------------------------------------------------------------------


@needs_repacking
def test_extra_buffers_repack_q4_0_weights_and_the_placement_says_so(tiny_q4_0: Path) -> None:
    with Model(tiny_q4_0, extra_buffers=True) as repacked, Model(tiny_q4_0, ModelSettings(repack="auto")) as plain:
        assert repacked.placement.repacked_bytes > 0 and repacked.placement.to_dict()["cpu_extra_buffers"] is True
        assert "MiB repacked" in repacked.placement.summary()
        assert plain.placement.repacked_bytes == 0  # "auto" without the app's probe: the plain layout
        assert plain.placement.to_dict()["cpu_extra_buffers"] is False


# -- the probe and its cache -------------------------------------------------------------------


@pytest.mark.slow
def test_the_probe_verdict_is_remembered_and_reused(tiny_q4_0: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    works = repack.repacking_for(tiny_q4_0, ModelSettings()) is ON  # a real child process: either verdict is this CPU's
    stored = json.loads(fresh_cache.read_text())
    assert stored["build"] == build_fingerprint()
    assert stored["verdicts"] == {"F32+Q4_0+Q8_0": {"works": works, "detail": stored["verdicts"]["F32+Q4_0+Q8_0"]["detail"]}}
    assert ("batched decodes work" if works else "the probe crashed") in stored["verdicts"]["F32+Q4_0+Q8_0"]["detail"]

    def no_probe(path: Path, timeout_s: float, one_token: bool = False) -> ProbeResult:
        raise AssertionError("probed again")

    monkeypatch.setattr(repack, "probe", no_probe)
    assert (repack.repacking_for(tiny_q4_0, ModelSettings()) is ON) is works
    assert repack.repacking_for(tiny_q4_0, ModelSettings(repack="off")) is OFF
    assert repack.repacking_for(tiny_q4_0, ModelSettings(repack="on")) is ON


def test_a_verdict_the_cache_cannot_keep_is_kept_for_the_process(
    tiny_q4_0: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_probe: list[Path]
) -> None:
    """With no cache folder (a file where it would be), a target and a draft of the same kinds of weights were each
    probed in a child process, and --verbose said so twice."""
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setattr(repack, "gpu_devices", lambda: [])
    assert repack.repacking_for(tiny_q4_0, ModelSettings()) is ON
    assert repack.repacking_for(tiny_q4_0, ModelSettings()) is ON
    assert fake_probe == [tiny_q4_0]


def test_a_remembered_crash_keeps_auto_off_at_load(tiny_pair: tuple[Path, Path], tiny_q4_0: Path, fresh_cache: Path) -> None:
    verdict = {"works": False, "detail": "the probe crashed (SIGSEGV)", "one_token": False, "one_token_detail": "crashed too"}
    fresh_cache.parent.mkdir(parents=True)
    fresh_cache.write_text(json.dumps({"build": build_fingerprint(), "verdicts": {"F32+Q4_0+Q8_0": verdict, "F32": verdict}}))
    result = cli("run", "--target", str(tiny_q4_0), "--draft", str(tiny_pair[1]), "--raw", "--threads", "1", "--max-tokens", "2", "--json", "a")
    assert result.exit_code == 0, result.stderr
    placement = json.loads(result.stdout)["placement"]
    assert placement["target"]["cpu_extra_buffers"] is False and placement["target"]["repacked_bytes"] == 0
    assert placement["draft"]["cpu_extra_buffers"] is False


def test_where_only_batches_fail_a_draft_model_asks_once_for_one_token_decodes(
    tiny_q4_0: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[bool] = []
    answers = {False: ProbeResult(False, "the probe crashed (SIGSEGV)"), True: ProbeResult(True, "one-token decodes work")}
    monkeypatch.setattr(repack, "probe", lambda path, timeout_s, one_token=False: calls.append(one_token) or answers[one_token])
    assert repack.repacking_for(tiny_q4_0, ModelSettings()) is OFF  # a target verifies in batches
    assert calls == [False]
    assert repack.repacking_for(tiny_q4_0, ModelSettings(), one_token_ok=True) is ONE_TOKEN
    assert calls == [False, True]
    assert repack.repacking_for(tiny_q4_0, ModelSettings(), one_token_ok=True) is ONE_TOKEN  # remembered
    assert repack.repacking_for(tiny_q4_0, ModelSettings()) is OFF
    assert calls == [False, True]
    assert json.loads(fresh_cache.read_text())["verdicts"]["F32+Q4_0+Q8_0"] == {
        "works": False, "detail": "the probe crashed (SIGSEGV)", "one_token": True, "one_token_detail": "one-token decodes work"}
    answers[True] = ProbeResult(False, "the probe crashed (SIGILL)")
    fresh_cache.unlink()
    assert repack.repacking_for(tiny_q4_0, ModelSettings(), one_token_ok=True) is OFF
    assert json.loads(fresh_cache.read_text())["verdicts"]["F32+Q4_0+Q8_0"]["one_token"] is False


def test_a_batched_verdict_saved_again_keeps_the_one_token_verdict(fresh_cache: Path) -> None:
    crashed = ProbeResult(False, "the probe crashed (SIGSEGV)")
    repack.save_verdict("this build", "F32+Q4_1", crashed, one_token=ProbeResult(True, "one-token decodes work"))
    repack.save_verdict("this build", "F32+Q4_1", crashed)  # another process, which probed batches only meanwhile
    assert repack.load_verdicts("this build")["F32+Q4_1"]["one_token"] is True
    repack.save_verdict("this build", "F32+Q4_1", ProbeResult(True, "batched decodes work"))
    assert "one_token" not in repack.load_verdicts("this build")["F32+Q4_1"]


def test_a_malformed_one_token_verdict_is_dropped(tiny_q4_0: Path, fresh_cache: Path, fake_probe: list[Path]) -> None:
    verdict = {"works": False, "detail": "the probe crashed (SIGSEGV)", "one_token": "yes"}
    fresh_cache.parent.mkdir(parents=True)
    fresh_cache.write_text(json.dumps({"build": build_fingerprint(), "verdicts": {"F32+Q4_0+Q8_0": verdict}}))
    assert repack.load_verdicts(build_fingerprint()) == {}
    assert repack.repacking_for(tiny_q4_0, ModelSettings(), one_token_ok=True) is ON and fake_probe == [tiny_q4_0]


def test_a_model_decoding_one_token_at_a_time_gives_the_rows_a_batch_gives(tiny_pair: tuple[Path, Path]) -> None:
    settings = ModelSettings(n_ctx=64, n_threads=1)
    with Model(tiny_pair[0], settings) as batched, Model(tiny_pair[0], settings, one_token_decodes=True) as one_by_one:
        tokens = [3, 17, 5, 9, 11, 2]
        for logits in ("all", 3, "last"):
            batched.clear()
            one_by_one.clear()
            expected = batched.eval(tokens, logits=logits)
            assert np.allclose(one_by_one.eval(tokens, logits=logits), expected, atol=1e-4), logits
        assert one_by_one.eval([4, 4], logits="none").shape == (0, batched.n_vocab)
        assert list(one_by_one.tokens) == [*tokens, 4, 4]
        lib = llama()
        assert lib.llama_n_ubatch(one_by_one._ctx) == 1 and lib.llama_n_ubatch(batched._ctx) > 1
        assert one_by_one.placement.summary().endswith("one token per decode")


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
@needs_repacking
def test_a_draft_that_decodes_one_token_at_a_time_runs_repacked_where_batches_crash(
    tiny_pair: tuple[Path, Path], tiny_q4_0: Path, fresh_cache: Path
) -> None:
    require_working_repack(tiny_q4_0, one_token=True)
    verdict = {"works": False, "detail": "the probe crashed (SIGSEGV)"}  # as on a machine whose AMX tiles fail
    fresh_cache.parent.mkdir(parents=True)
    fresh_cache.write_text(json.dumps({"build": build_fingerprint(), "verdicts": {"F32+Q4_0+Q8_0": verdict}}))
    args = ("run", "--target", str(tiny_pair[0]), "--draft", str(tiny_q4_0), "--raw", "--threads", "1",
            "--temperature", "0", "--max-tokens", "24", "--json", "a b")
    result = cli(*args)
    assert result.exit_code == 0, result.stderr
    placement = json.loads(result.stdout)["placement"]["draft"]
    assert placement["repacked_bytes"] > 0 and placement["one_token_decodes"] is True
    stored = json.loads(fresh_cache.read_text())["verdicts"]["F32+Q4_0+Q8_0"]
    assert stored["one_token"] is True and stored["one_token_detail"].startswith("one-token decodes work")
    plain = cli(*args[:-2], "--draft-repack", "off", *args[-2:])
    assert json.loads(plain.stdout)["placement"]["draft"]["one_token_decodes"] is False
    assert json.loads(plain.stdout)["text"] == json.loads(result.stdout)["text"]  # greedy: the target's text either way


@pytest.mark.slow
@needs_repacking
def test_repack_on_overrides_a_remembered_crash(tiny_pair: tuple[Path, Path], tiny_q4_0: Path, fresh_cache: Path) -> None:
    require_working_repack(tiny_q4_0)  # "on" is the user's word: where the crash is real, it would end the suite
    verdict = {"works": False, "detail": "the probe crashed (SIGSEGV)"}
    fresh_cache.parent.mkdir(parents=True)
    fresh_cache.write_text(json.dumps({"build": build_fingerprint(), "verdicts": {"F32+Q4_0+Q8_0": verdict}}))
    forced = cli("run", "--target", str(tiny_q4_0), "--draft", str(tiny_pair[1]), "--repack", "on", "--raw", "--threads", "1", "--max-tokens", "2", "--json", "a")
    assert json.loads(forced.stdout)["placement"]["target"]["repacked_bytes"] > 0


@pytest.mark.parametrize("contents, note", [
    ("{not json", "unreadable"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("[1, 2]", "malformed repack cache"),
    (json.dumps({"build": "another build", "verdicts": {"F32+Q4_0+Q8_0": {"works": False, "detail": "old"}}}), "another"),
    (None, "malformed repack cache entry"),  # this build, but an entry of the wrong shape
])
def test_a_corrupt_or_stale_cache_is_dropped_and_probed_again(
    tiny_q4_0: Path, fresh_cache: Path, fake_probe: list[Path], capsys: pytest.CaptureFixture, contents: str | None, note: str
) -> None:
    if contents is None:
        contents = json.dumps({"build": build_fingerprint(), "verdicts": {"F32+Q4_0+Q8_0": {"works": "yes"}}})
    fresh_cache.parent.mkdir(parents=True)
    fresh_cache.write_text(contents)
    assert repack.repacking_for(tiny_q4_0, ModelSettings()) is ON
    assert capsys.readouterr().err == ""  # silent without --verbose
    assert fake_probe == [tiny_q4_0]
    assert json.loads(fresh_cache.read_text())["verdicts"] == {"F32+Q4_0+Q8_0": {"works": True, "detail": "fake"}}
    fresh_cache.write_text(contents)
    repack.repacking_for(tiny_q4_0, ModelSettings(), verbose=True)
    assert note in capsys.readouterr().err


def test_the_verdicts_of_a_few_builds_are_kept_side_by_side(fresh_cache: Path) -> None:
    """Two environments with their own llama.cpp builds, run in turn, each probe once; the oldest of more
    builds than the cache keeps is dropped."""
    builds = [f"build {n}" for n in range(repack.MAX_OTHER_BUILDS + 2)]
    for n, build in enumerate(builds):
        repack.save_verdict(build, "F32+Q4_0", ProbeResult(n % 2 == 0, f"verdict {n}"))
        repack.save_verdict(builds[0], "F32+Q8_0", ProbeResult(True, "the first build again"))
    assert repack.load_verdicts(builds[0]) == {"F32+Q4_0": {"works": True, "detail": "verdict 0"},
                                               "F32+Q8_0": {"works": True, "detail": "the first build again"}}
    assert repack.load_verdicts(builds[-1]) == {"F32+Q4_0": {"works": True, "detail": f"verdict {len(builds) - 1}"}}
    assert repack.load_verdicts(builds[1]) == {}  # the one saved longest ago: dropped
    kept = [build for build in builds if repack.load_verdicts(build)]
    assert len(kept) == 1 + repack.MAX_OTHER_BUILDS


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_verdicts_saved_at_once_by_several_writers_all_survive(fresh_cache: Path) -> None:
    kinds = [f"F32+Q{n}_0" for n in range(8)]
    start = threading.Barrier(len(kinds))

    def save(weights: str) -> None:
        start.wait()
        repack.save_verdict("this build", weights, ProbeResult(True, "fake"))

    with ThreadPoolExecutor(len(kinds)) as pool:
        list(pool.map(save, kinds))
    assert sorted(repack.load_verdicts("this build")) == sorted(kinds)


def test_remembered_weight_types_nested_too_deeply_are_read_again(tiny_q4_0: Path, fresh_cache: Path) -> None:
    remembered = fresh_cache.parent / repack.WEIGHTS_FILE_NAME
    remembered.parent.mkdir(parents=True)
    remembered.write_text("[" * 100_000 + "]" * 100_000)
    assert repack.weight_types(tiny_q4_0) == "F32+Q4_0+Q8_0"
    assert list(json.loads(remembered.read_text()).values()) == ["F32+Q4_0+Q8_0"]


def test_a_model_wholly_on_a_gpu_is_not_probed(
    tiny_q4_0: Path, fresh_cache: Path, fake_probe: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(repack, "gpu_devices", lambda: ["CUDA0"])  # as on a machine with a GPU
    assert repack.repacking_for(tiny_q4_0, ModelSettings()) is OFF and fake_probe == []
    assert repack.repacking_for(tiny_q4_0, ModelSettings(n_gpu_layers=10)) is ON and fake_probe == [tiny_q4_0]


def test_a_model_wholly_on_rpc_workers_is_not_probed(tiny_q4_0: Path, fresh_cache: Path, fake_probe: list[Path]) -> None:
    assert repack.repacking_for(tiny_q4_0, ModelSettings(rpc=("10.0.0.2:50052",))) is OFF and fake_probe == []


@pytest.mark.slow  # over a third of a second: subprocesses or a large input
def test_the_probe_turns_a_crash_into_a_verdict_and_a_hang_into_none(
    tiny_q4_0: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime_repack, "_CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert runtime_repack.probe(tiny_q4_0, timeout_s=30) == ProbeResult(False, "the probe crashed (SIGSEGV)")
    monkeypatch.setattr(runtime_repack, "_CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert runtime_repack.probe(tiny_q4_0, timeout_s=30) == ProbeResult(None, "the probe was stopped from outside (SIGKILL)")
    monkeypatch.setattr(runtime_repack, "_CHILD", "import time; time.sleep(30)")
    assert runtime_repack.probe(tiny_q4_0, timeout_s=0.2) == ProbeResult(None, "the probe did not answer in 0.2 s")
    monkeypatch.setattr(repack, "PROBE_TIMEOUT_S", 0.2)  # a load spike on a shared machine: slow, not broken
    monkeypatch.setattr(repack, "PROBE_SECONDS_PER_GIB", 0.0)
    assert repack.repacking_for(tiny_q4_0, ModelSettings()) is OFF  # the plain layout this time ...
    assert repack.load_verdicts(build_fingerprint()) == {}  # ... and not remembered: the next load asks again


@pytest.mark.slow
def test_a_model_that_does_not_load_is_no_verdict(tmp_path: Path, fresh_cache: Path) -> None:
    broken = write_unloadable_model(tmp_path / "broken.gguf")
    result = runtime_repack.probe(broken, timeout_s=60)
    assert result.works is None and "could not load" in result.detail
    assert repack.repacking_for(broken, ModelSettings()) is OFF
    assert not fresh_cache.exists()  # nothing remembered: the next load asks again


# -- identity within a mode on real weights ----------------------------------------------------

PROMPTS = ["Why is the sky blue?", "Write a Python function that checks whether a number is prime.",
           "List five European capitals and one fact about each."]
GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def smollm_q4_0(smollm_q4_1: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return quantize(smollm_q4_1, tmp_path_factory.mktemp("smollm-q4_0") / "SmolLM2-135M-Instruct.Q4_0.gguf", "q4_0")


def assert_greedy_speculative_equals_target_only(session: Session) -> None:
    rejected = 0
    for prompt in PROMPTS:
        tokens = session.chat_prompt_tokens([{"role": "user", "content": prompt}])
        settings = GenerationSettings(GREEDY, SpeculativeParams(draft_max=8), max_tokens=48, seed=0)
        baseline = generate_text(session.target, tokens, settings)
        speculative = generate_text(session.target, tokens, settings, ModelDrafter(session.draft, GREEDY))
        assert speculative.tokens == baseline.tokens, prompt
        rejected += speculative.stats.draft_tokens_proposed - speculative.stats.draft_tokens_accepted
    assert rejected > 0  # identity through rejections, not only easy agreement


@pytest.mark.slow
@needs_repacking
def test_f32_target_with_a_repacked_q4_0_draft_is_identical_to_target_only(smollm_f32: Path, smollm_q4_0: Path) -> None:
    require_working_repack(smollm_f32, smollm_q4_0)
    with Session(Model(smollm_f32, extra_buffers=True), Model(smollm_q4_0, extra_buffers=True)) as session:
        assert session.draft.placement.repacked_bytes > 0 and session.target.placement.repacked_bytes == 0
        assert_greedy_speculative_equals_target_only(session)


@pytest.mark.slow
def test_f32_target_with_a_q4_1_draft_repacked_one_token_at_a_time_is_identical_to_target_only(
    smollm_f32: Path, smollm_q4_1: Path
) -> None:
    """The demo pair as `auto` loads it on a machine where repacked Q4_1 weights fail on batches only."""
    require_working_repack(smollm_q4_1, one_token=True)
    draft = Model(smollm_q4_1, extra_buffers=True, one_token_decodes=True)
    with Session(Model(smollm_f32), draft) as session:
        assert_greedy_speculative_equals_target_only(session)


@pytest.mark.slow
@needs_repacking
def test_a_repacked_q4_0_target_is_identical_to_itself_target_only(smollm_q4_0: Path, smollm_q4_1: Path) -> None:
    """Measured on two AVX-512 CPUs: a repacked Q4_0 target's logits for a batch equal those of a pass of one
    token bit for bit (a padded pair where llamafile's kernels compute a lone token otherwise, as target-only
    decoding then makes each pass; alone, they differed by up to 1.03 there), so greedy speculation equals
    target-only within the mode. Across modes they do not: repacked and plain Q4_0 logits differ (by up to
    about 1.4 here), so the two are never compared."""
    require_working_repack(smollm_q4_0)
    with Session(Model(smollm_q4_0, extra_buffers=True), Model(smollm_q4_1)) as session:
        target = session.target
        assert target.placement.repacked_bytes > 0
        tokens = target.tokenize("The quick brown fox jumps over the lazy dog while the cat sleeps.", add_special=True)
        batched = target.eval(tokens, logits="all")
        target.clear()
        passes = []
        for token in tokens:
            one_pass = [token, token] if target.lone_reads_differ else [token]
            passes.append(target.eval(one_pass, logits=len(one_pass))[0].copy())
            target.keep(len(target.tokens) - len(one_pass) + 1)
        assert np.array_equal(batched, np.stack(passes))
        assert_greedy_speculative_equals_target_only(session)
