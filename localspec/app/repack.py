"""Whether a model loads with llama.cpp's extra CPU buffer types (repacked weights): `repack` = auto|on|off.

"auto" asks `runtime.repack.probe` once per llama.cpp build, CPU and kind of
weights (the set of tensor types in the file, e.g. "F32+Q4_0+Q6_K") and
remembers the verdict in the cache folder (the latest build's, and a few others': two
environments with their own builds do not probe again each time the other ran). Where batched decodes fail, a model
that may decode one token at a time (a draft model) asks a second probe, and
uses the repacked weights one token per decode where that works. It is a cache,
not a user's file: an entry that is unreadable, malformed or from another build
or CPU is dropped and probed again, silently (said with --verbose).
"""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Callable

from ..config.atomic import write_text_atomic
from ..config.files import file_version, locked, read_cache_json
from ..config.paths import cache_dir
from ..errors import LocalspecError
from ..models.gguf import read_gguf_header
from ..runtime.devices import gpu_devices
from ..runtime.repack import ProbeResult, build_fingerprint, probe
from ..settings import ALL_LAYERS, ModelSettings

CACHE_FILE_NAME = "cpu-repack.json"
WEIGHTS_FILE_NAME = "weight-types.json"  # file version -> its kinds of weights
MAX_REMEMBERED_FILES = 64
MAX_OTHER_BUILDS = 3  # llama.cpp builds (or CPUs) whose verdicts are kept beside the latest one's
PROBE_TIMEOUT_S = 60.0  # plus PROBE_SECONDS_PER_GIB of weights: a probe loads the model once
PROBE_SECONDS_PER_GIB = 30.0
LOCK_TIMEOUT_S = 5.0  # a cache write takes milliseconds; a cache is not worth a longer wait

# Verdicts the cache file could not keep (no cache folder), by (cache file, build, weights): kept for this process,
# so that a target and a draft of the same kinds of weights are not probed twice.
_unsaved_verdicts: dict[tuple[str, str, str], dict] = {}


def cache_file() -> Path:
    return cache_dir() / CACHE_FILE_NAME


class Repacking(enum.Enum):
    """How a model uses llama.cpp's extra CPU buffer types."""

    OFF = "off"
    ON = "on"
    ONE_TOKEN = "one token per decode"  # repacked, but never a batch: where only batched decodes fail


def repacking_for(path: Path, settings: ModelSettings, *, one_token_ok: bool = False, verbose: bool = False) -> Repacking:
    """How to load `path` under `settings.repack` (auto, on or off); `one_token_ok`: the model may decode one
    token at a time (a draft model does so anyway), so repacked weights that fail on batches only can serve it."""
    if settings.repack != "auto":
        return Repacking.ON if settings.repack == "on" else Repacking.OFF
    if settings.n_gpu_layers in (None, ALL_LAYERS) and (gpu_devices() or settings.rpc):
        # Every layer on a GPU or on RPC workers: the CPU keeps only the token embeddings, which are never
        # repacked (and a probe would load the whole model here, which may not fit: why there are workers).
        return Repacking.OFF
    weights = weight_types(path)
    build = build_fingerprint()
    verdict = _unsaved_verdicts.get((str(cache_file()), build, weights))
    if verdict is None:
        verdict = load_verdicts(build, verbose=verbose).get(weights)
    if verdict is None:
        result = _probe(path, weights, verbose=verbose)
        if result.works is None:
            return Repacking.OFF  # no verdict (the model would not load, or no answer in time): nothing remembered, the plain layout this time
        verdict = save_verdict(build, weights, result, verbose=verbose)
    if verdict["works"]:
        return Repacking.ON
    if not one_token_ok:
        return Repacking.OFF
    if "one_token" not in verdict:
        result = _probe(path, weights, one_token=True, verbose=verbose)
        if result.works is None:
            return Repacking.OFF
        verdict = save_verdict(build, weights, ProbeResult(False, verdict["detail"]), one_token=result, verbose=verbose)
    return Repacking.ONE_TOKEN if verdict["one_token"] else Repacking.OFF


def _probe(path: Path, weights: str, *, one_token: bool = False, verbose: bool = False) -> ProbeResult:
    note = verbose_notes(verbose)
    how = "one token at a time" if one_token else "batched"
    note(f"probing llama.cpp's repacked CPU weights for {weights}, {how}, in a child process (once per build and CPU)")
    size_gib = path.stat().st_size / 2**30
    result = probe(path, PROBE_TIMEOUT_S + PROBE_SECONDS_PER_GIB * size_gib, one_token=one_token)
    note(f"repacked CPU weights for {weights}, {how}: {_verdict_text(result)}")
    return result


def weight_types(path: Path) -> str:
    """The kinds of weights a GGUF file holds, e.g. "F32+Q4_0+Q6_K": what a probe's verdict is about.

    Remembered per file version in the cache folder: reading a header with a large
    vocabulary takes a few tenths of a second, which a one-shot run should not pay.
    """
    remembered_file = cache_dir() / WEIGHTS_FILE_NAME
    key = file_version(path)
    remembered = _remembered_weight_types(remembered_file)
    if isinstance(remembered.get(key), str):
        return remembered[key]
    kinds = _read_weight_types(path)
    try:
        with locked(remembered_file, timeout_s=LOCK_TIMEOUT_S):  # read again: another process may have added files
            kept = list(_remembered_weight_types(remembered_file).items())[-(MAX_REMEMBERED_FILES - 1):]
            write_text_atomic(remembered_file, json.dumps({**dict(kept), key: kinds}))
    except (OSError, LocalspecError):
        pass  # a cache that cannot be written only costs time
    return kinds


def _remembered_weight_types(remembered_file: Path) -> dict:
    """File version -> kinds of weights, as remembered in `remembered_file` ({} when unreadable)."""
    remembered, _ = read_cache_json(remembered_file)
    return remembered if isinstance(remembered, dict) else {}


def _read_weight_types(path: Path) -> str:
    from gguf.constants import GGMLQuantizationType  # on use: the gguf package takes ~0.2 s to import

    names = set()
    for tensor in read_gguf_header(path).tensors:
        try:
            names.add(GGMLQuantizationType(tensor.ggml_type).name)
        except ValueError:
            names.add(f"type{tensor.ggml_type}")
    return "+".join(sorted(names))


def load_verdicts(build: str, *, verbose: bool = False) -> dict[str, dict]:
    """The remembered verdicts for this build and CPU (weight types -> {"works", "detail"}); {} when none."""
    note = verbose_notes(verbose)
    builds = _stored_builds(note)
    if builds and build not in builds:
        note("the repack cache holds verdicts for another llama.cpp build or CPU only: this one is probed")
    return _well_formed_verdicts(builds, build, note)


def _well_formed_verdicts(builds: dict[str, dict], build: str, note: Callable[[str], None]) -> dict[str, dict]:
    """`build`'s verdicts in `builds` (see `_stored_builds`), those of the wrong shape dropped (and noted)."""
    verdicts = {}
    for weights, entry in builds.get(build, {}).items():
        if _well_formed(entry):
            verdicts[weights] = entry
        else:
            note(f"dropping the malformed repack cache entry for {weights}")
    return verdicts


def _stored_builds(note: Callable[[str], None]) -> dict[str, dict]:
    """Build and CPU -> its verdicts as stored, the latest saved first ({} when the cache is unreadable or
    malformed). The file holds the latest build's verdicts, and those of up to MAX_OTHER_BUILDS others
    (two environments with their own llama.cpp builds, a home folder shared by machines) in "other_builds"."""
    stored, problem = read_cache_json(cache_file())
    if problem is not None:
        note(f"dropping the unreadable repack cache {cache_file()} ({problem})")
    if stored is None:
        return {}
    if not (isinstance(stored, dict) and isinstance(stored.get("build"), str) and isinstance(stored.get("verdicts"), dict)):
        note(f"dropping the malformed repack cache {cache_file()}")
        return {}
    builds = {stored["build"]: stored["verdicts"]}
    others = stored.get("other_builds")
    for build, verdicts in (others.items() if isinstance(others, dict) else ()):
        if isinstance(verdicts, dict):
            builds.setdefault(build, verdicts)
    return builds


def _well_formed(entry: object) -> bool:
    """{"works": bool, "detail": str}, and where batches failed maybe {"one_token": bool, "one_token_detail": str}."""
    if not (isinstance(entry, dict) and isinstance(entry.get("works"), bool) and isinstance(entry.get("detail"), str)):
        return False
    return "one_token" not in entry or (isinstance(entry["one_token"], bool) and isinstance(entry.get("one_token_detail"), str))


def save_verdict(build: str, weights: str, result: ProbeResult, *, one_token: ProbeResult | None = None,
                 verbose: bool = False) -> dict:
    """Remember one verdict (`one_token`: the one-token probe's, where batches failed) beside the others for
    this build, and return it (a cache that cannot be written only costs time)."""
    verdict: dict = {"works": result.works, "detail": result.detail}
    if one_token is not None:
        verdict.update(one_token=one_token.works, one_token_detail=one_token.detail)
    try:
        with locked(cache_file(), timeout_s=LOCK_TIMEOUT_S):  # a verdict another process saved meanwhile is kept
            builds = _stored_builds(lambda message: None)
            verdicts = _well_formed_verdicts(builds, build, lambda message: None)
            earlier = verdicts.get(weights, {})
            if one_token is None and "one_token" in earlier and earlier["works"] == result.works:
                verdict.update(one_token=earlier["one_token"], one_token_detail=earlier["one_token_detail"])
            verdicts[weights] = verdict
            others = [(other, kept) for other, kept in builds.items() if other != build]
            stored = {"build": build, "verdicts": verdicts, "other_builds": dict(others[:MAX_OTHER_BUILDS])}
            write_text_atomic(cache_file(), json.dumps(stored, indent=1))
    except (OSError, LocalspecError) as exc:
        verbose_notes(verbose)(f"could not remember the repack verdict in {cache_file()} ({exc})")
        _unsaved_verdicts[(str(cache_file()), build, weights)] = verdict
    return verdict


def _verdict_text(result: ProbeResult) -> str:
    verdict = {True: "on", False: "off", None: "off this time"}[result.works]
    return f"{verdict} ({result.detail})"


def verbose_notes(verbose: bool) -> Callable[[str], None]:
    """Where --verbose notes go: one "localspec: ..." line each on stderr, or nowhere."""
    if verbose:
        return lambda message: print(f"localspec: {message}", file=sys.stderr)
    return lambda message: None
