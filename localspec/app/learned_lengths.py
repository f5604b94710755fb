"""What adaptive draft lengths learned, kept between processes in the cache folder.

A one-shot `localspec run` is a fresh process; without this its length
controller would start from priors every time. `LengthCache.load` gives a
session the `LearnedLengths` that earlier processes saved for the same models on
the same machine; `save` writes back what this one learned. Costs are keyed by
the machine (the models' files, threads, where the layers went, the llama.cpp
build), acceptance by the pair of files alone (as they are on this machine:
their paths, sizes and modification times), so that a new thread count or
placement keeps the acceptance and a new draft file does not inherit another's.

It is a cache, not a user's file: it is written atomically, read leniently,
and anything stale, corrupt or unreadable is dropped and rebuilt without a
message (the notes callback, shown with `--verbose`, says what was dropped).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable

from ..config.atomic import write_text_atomic
from ..config.files import file_version, locked, read_cache_json
from ..config.paths import cache_dir
from ..engine.draft_length import LearnedLengths
from ..errors import LocalspecError
from ..runtime.library import default_threads
from ..runtime.model import Model
from ..runtime.repack import build_fingerprint

FILE_NAME = "draft-lengths.json"
# 2: greedy drafts are binned by the draft's lead over its runner-up, not its probability;
# 3: so are drafts sampled under coupled verification, by the lead of their noisy scores
FORMAT_VERSION = 3
MAX_ENTRIES = 32  # per kind (machines, pairs): the least recently used are dropped
LOCK_TIMEOUT_S = 5.0  # a save takes milliseconds; a cache is not worth a longer wait


def _fingerprint(model: Model | None) -> str:
    if model is None:
        return "none"
    try:
        return file_version(model.path)
    except OSError:  # the file went away after loading: nothing saved under it will be found again
        return f"{model.path}|gone"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:24]


def pair_key(target: Model, draft: Model | None) -> str:
    """The identity of the model files: what acceptance depends on."""
    return _digest(_fingerprint(target), _fingerprint(draft))


def machine_key(target: Model, draft: Model | None) -> str:
    """The files plus how they run here (threads, devices, llama.cpp build, CPU): what costs depend on."""
    runs = [
        f"{model.settings.n_threads or default_threads()} threads, {model.placement.summary()}"
        for model in (target, draft) if model is not None
    ]
    return _digest(pair_key(target, draft), build_fingerprint(), *runs)


class LengthCache:
    """Loads and saves `LearnedLengths` for one loaded pair (`path` defaults to the cache folder's file)."""

    def __init__(self, target: Model, draft: Model | None, path: Path | None = None,
                 notes: Callable[[str], None] = lambda message: None) -> None:
        self.path = path or cache_dir() / FILE_NAME
        self.notes = notes
        self.machine = machine_key(target, draft)
        self.pair = pair_key(target, draft)

    def load(self) -> LearnedLengths:
        """What earlier processes learned for this pair on this machine (nothing when there is none)."""
        state = self._read()
        costs = state["machines"].get(self.machine, {}).get("costs", {})
        acceptance = state["pairs"].get(self.pair, {}).get("acceptance", {})
        learned = LearnedLengths(costs, acceptance)
        if costs or acceptance:
            self.notes(f"draft lengths: starting from what earlier runs learned ({self.path})")
        return learned

    def save(self, learned: LearnedLengths) -> None:
        """Merge what this process learned into the file (the least recently used entries beyond a bound dropped)."""
        for message in learned.dropped:
            self.notes(f"draft lengths: dropped a saved entry that did not fit ({message})")
        if not any(controller.passes for controller in learned.controllers.values()):
            return
        try:
            with locked(self.path, timeout_s=LOCK_TIMEOUT_S):  # another process's save between read and write is kept
                self._merge_and_write(learned)
        except LocalspecError as exc:  # no lock: a read-only cache folder, or a stuck process
            self.notes(f"draft lengths: could not save to {self.path} ({exc})")

    def _merge_and_write(self, learned: LearnedLengths) -> None:
        state = self._read()
        now = time.time()
        state["machines"][self.machine] = {"costs": learned.costs(), "used": now}
        state["pairs"][self.pair] = {"acceptance": learned.acceptance(), "used": now}
        for kind in ("machines", "pairs"):
            entries = state[kind]
            for stale in sorted(entries, key=lambda key: entries[key].get("used", 0))[:-MAX_ENTRIES]:
                del entries[stale]
        try:
            write_text_atomic(self.path, json.dumps(state, allow_nan=False))
        except (OSError, ValueError) as exc:  # a read-only or full cache folder: nothing is lost but speed
            self.notes(f"draft lengths: could not save to {self.path} ({exc})")

    def _read(self) -> dict[str, Any]:
        """The file's contents, or an empty state when it is missing, unreadable, corrupt or of another version."""
        empty: dict[str, Any] = {"version": FORMAT_VERSION, "machines": {}, "pairs": {}}
        state, problem = read_cache_json(self.path)
        if problem is not None:
            self.notes(f"draft lengths: ignoring {self.path} ({problem})")
        if state is None:
            return empty
        if isinstance(state, dict) and state.get("version") == 2 and _well_formed({**state, "version": FORMAT_VERSION}):
            state = _from_version_2(state)
        if not _well_formed(state):
            self.notes(f"draft lengths: ignoring {self.path} (not this version's format)")
            return empty
        return state


def _from_version_2(state: dict[str, Any]) -> dict[str, Any]:
    """Well-formed version 2 state as version 3's: the same but for what a draft model learned of its sampled
    drafts under coupled verification, whose certainty bins held probabilities, not leads (dropped; costs and the
    rest are kept)."""
    for entry in state["pairs"].values():
        acceptance = entry.get("acceptance", {})
        for key in [key for key in acceptance if key.startswith("model/coupled/") and "/greedy" not in key]:
            del acceptance[key]
    return {**state, "version": FORMAT_VERSION}


def _well_formed(state: Any) -> bool:
    """Whether `state` has this version's shape, down to each entry (what the values hold is checked on restore)."""
    if not isinstance(state, dict) or state.get("version") != FORMAT_VERSION:
        return False
    for kind, learned in (("machines", "costs"), ("pairs", "acceptance")):
        entries = state.get(kind)
        if not isinstance(entries, dict):
            return False
        for entry in entries.values():
            if not (isinstance(entry, dict) and isinstance(entry.get(learned, {}), dict) and _is_number(entry.get("used", 0))):
                return False
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
