"""The models' reading of the last prompt, saved by one session and restored by the next (`app.prompt_cache`)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import cli

from localspec.app import prompt_cache as prompt_cache_module
from localspec.app.prompt_cache import MAGIC, PromptCache, prompts_folder
from localspec.app.session import Session
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, ModelSettings, SamplingParams, SpeculativeParams

FIRST = [1, 260, 265, 270, 262, 260, 265, 271]
SECOND = [*FIRST[:5], 275, 277, 279, 262]  # starts like FIRST for 5 tokens
SAMPLED_MODEL = GenerationSettings(SamplingParams(temperature=0.8), SpeculativeParams(strategy="model", draft_max=4),
                                   max_tokens=16, seed=3)
RUNTIME = ModelSettings(n_threads=1)


def _session(paths: tuple[Path, Path], folder: Path | None, notes: list[str] | None = None) -> Session:
    cache = PromptCache(folder, notes=(notes if notes is not None else []).append) if folder is not None else None
    return Session(Model(paths[0], RUNTIME), Model(paths[1], RUNTIME, proposes_only=True), prompt_cache=cache)  # (as loaded)


def _generate(session: Session, prompt: list[int]) -> list[int]:
    generation = session.generation(prompt, SAMPLED_MODEL)
    for _ in generation:
        pass
    return list(generation.tokens)


def test_a_later_session_reads_only_what_its_prompt_does_not_share(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    with _session(tiny_pair, tmp_path) as first:
        _generate(first, FIRST)
    assert len(list(tmp_path.glob("*.state"))) == 2  # the target's and the draft's
    cache = PromptCache(tmp_path)
    with Model(tiny_pair[0], RUNTIME) as restored, Model(tiny_pair[0], RUNTIME) as fresh:
        assert cache.restore(restored, SECOND) == 5 and restored.tokens == tuple(SECOND[:5])
        # What it holds is what reading computes, bit for bit: the next logits are the same.
        np.testing.assert_array_equal(restored.next_logits(SECOND), fresh.next_logits(SECOND))
        assert cache.restore(restored, [1, 275, 276, 277, 278]) == 0  # (it holds tokens already: untouched)
        assert restored.tokens == tuple(SECOND)
    with Model(tiny_pair[0], RUNTIME) as other_start:
        assert cache.restore(other_start, [1, 275, 276, 277, 278]) == 0 and other_start.tokens == ()


def test_only_the_files_used_last_are_kept(tiny_pair: tuple[Path, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each build, model file and placement has its own file: those no later run will match go, oldest first."""
    monkeypatch.setattr(prompt_cache_module, "MAX_FILES", 3)
    others = [tmp_path / f"other-build-{number}.state" for number in range(3)]
    for age, path in enumerate(others):
        path.write_bytes(MAGIC + b'{"tokens": [1, 2, 3, 4]}\n')
        os.utime(path, (1000 + age, 1000 + age))
    with _session(tiny_pair, tmp_path) as session:
        _generate(session, FIRST)  # saves the target's and the draft's readings: the two oldest others go
    assert sorted(path.name for path in tmp_path.glob("*.state") if path in others) == [others[2].name]
    assert len(list(tmp_path.glob("*.state"))) == 3


def test_a_killed_saves_half_written_file_goes_once_an_hour_old(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    """(was: kept for good, up to 64 MB each: only `.state` files were swept)"""
    abandoned, at_work = tmp_path / ".abc.state.x1.partial", tmp_path / ".abc.state.x2.partial"
    for path in (abandoned, at_work):
        path.write_bytes(b"half")
    os.utime(abandoned, (time.time() - 2 * 3600, time.time() - 2 * 3600))
    with _session(tiny_pair, tmp_path) as session:
        _generate(session, FIRST)
    assert not abandoned.exists() and at_work.exists()


def test_the_text_is_the_same_with_a_restored_prompt(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    with _session(tiny_pair, None) as plain:
        expected = _generate(plain, SECOND)
    for _ in range(2):  # the first session saves FIRST's reading, the next ones restore its start
        with _session(tiny_pair, tmp_path) as cached:
            _generate(cached, FIRST)
        with _session(tiny_pair, tmp_path) as cached:
            assert _generate(cached, SECOND) == expected


@pytest.mark.parametrize("damage", ["truncated", "garbage", "tokens out of range", "another format", "empty state",
                                    "flipped"])
@pytest.mark.slow
def test_a_damaged_file_is_ignored_and_replaced(tiny_pair: tuple[Path, Path], tmp_path: Path, damage: str) -> None:
    with _session(tiny_pair, tmp_path) as first:
        expected = _generate(first, FIRST)
    for path in tmp_path.glob("*.state"):
        content = path.read_bytes()
        header_end = content.index(b"\n", len(MAGIC)) + 1
        path.write_bytes({
            "truncated": content[: (header_end + len(content)) // 2],
            "garbage": MAGIC + b"{not json\n" + content[header_end:],
            "tokens out of range": MAGIC + json.dumps({"tokens": [1, 2, 3, 10**9, 5, 6, 7, 8]}).encode() + b"\n" + content[header_end:],
            "another format": b"localspec prompt cache 0\n" + content[len(MAGIC):],
            "empty state": content[:header_end],
            # (bytes of the keys and values changed: restored, they gave scores that were no numbers, and the
            # model was blamed for it)
            "flipped": content[:-64] + bytes(byte ^ 0xFF for byte in content[-64:]),
        }[damage])
    notes: list[str] = []
    with _session(tiny_pair, tmp_path, notes) as second:
        assert _generate(second, FIRST) == expected
    assert notes and all(note.startswith("prompt cache: ") for note in notes)
    with Model(tiny_pair[0], RUNTIME) as model:  # saved again, whole
        assert PromptCache(tmp_path).restore(model, FIRST) == len(FIRST)


def test_a_state_of_no_use_to_the_prompt_is_not_read(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    with _session(tiny_pair, tmp_path) as first:
        _generate(first, FIRST)
    for path in tmp_path.glob("*.state"):  # damaged after its header: reading the state would say so
        content = path.read_bytes()
        path.write_bytes(content[: content.index(b"\n", len(MAGIC)) + 1])
    notes: list[str] = []
    with Model(tiny_pair[0], RUNTIME) as model:
        assert PromptCache(tmp_path, notes=notes.append).restore(model, [1, 275, 276, 277, 278]) == 0
        assert not notes and model.tokens == ()
        assert PromptCache(tmp_path, notes=notes.append).restore(model, FIRST) == 0 and notes  # (of use: read, damaged)


@pytest.mark.parametrize("unfit", [
    "reads_alike_in_batches",  # a prompt read in pieces could differ from one read whole
    "keeps_every_position",  # a recurrent state or a sliding window cannot keep a prompt's start
])
def test_nothing_is_kept_for_a_model_the_cache_cannot_serve(
    tiny_pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unfit: str,
) -> None:
    monkeypatch.setattr(Model, unfit, property(lambda self: False))
    with _session(tiny_pair, tmp_path) as session:
        _generate(session, FIRST)
    assert not list(tmp_path.glob("*"))


def test_a_saved_prompt_longer_than_the_context_is_passed_over_quietly(tmp_path: Path) -> None:
    from tiny_models import write_pair

    (tmp_path / "models").mkdir()
    target_path, _ = write_pair(tmp_path / "models", context_length=1024)
    long_prompt = [1, *(260 + i % 20 for i in range(300))]
    with Model(target_path, RUNTIME) as model:
        model.sync(long_prompt)
        PromptCache(tmp_path).save(model, long_prompt)
    notes: list[str] = []
    with Model(target_path, ModelSettings(n_threads=1, n_ctx=256)) as small:
        assert small.n_ctx < len(long_prompt)
        assert PromptCache(tmp_path, notes=notes.append).restore(small, long_prompt[:20]) == 0 and not notes
        assert small.tokens == ()


def test_a_failed_save_costs_only_the_saved_prompt(
    tiny_pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prompt cache is saved last, and its failure is a note: the draft lengths are saved all the same."""
    from localspec.app.learned_lengths import LengthCache

    def fail(self, model, prompt):
        raise MemoryError("no room for the state")

    monkeypatch.setattr(PromptCache, "save", fail)
    notes: list[str] = []
    target, draft = Model(tiny_pair[0], RUNTIME), Model(tiny_pair[1], RUNTIME)
    lengths_file = tmp_path / "lengths.json"
    with Session(target, draft, length_cache=LengthCache(target, draft, lengths_file),
                 prompt_cache=PromptCache(tmp_path / "prompts", notes=notes.append)) as session:
        adaptive = GenerationSettings(SamplingParams(temperature=0.8), SpeculativeParams(strategy="model"), max_tokens=12, seed=1)
        for _ in session.generation(FIRST, adaptive):
            pass
    assert lengths_file.exists()
    assert notes and all("MemoryError" in note for note in notes)


def test_a_long_prompt_is_saved_up_to_the_bytes_allowed(
    tiny_pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    prompt = [1, *range(260, 280), *range(279, 259, -1)]
    with Model(tiny_pair[0], RUNTIME) as model:
        model.sync(prompt)
        whole = len(model.cache_state())
        monkeypatch.setattr(prompt_cache_module, "MAX_STATE_BYTES", whole // 2)
        PromptCache(tmp_path).save(model, prompt)
    with Model(tiny_pair[0], RUNTIME) as model:
        kept = PromptCache(tmp_path).restore(model, prompt)
        assert prompt_cache_module.MIN_TOKENS <= kept < len(prompt) and model.tokens == tuple(prompt[:kept])


def test_run_keeps_the_prompt_unless_told_not_to_and_memory_clear_empties_it(tiny_pair: tuple[Path, Path]) -> None:
    models = ["--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--raw", "--max-tokens", "4", "--threads", "1",
              "--strategy", "model", "--draft-max", "2"]  # (a fixed length: the draft model reads the prompt)
    cli("memory", "clear", "--yes")
    assert cli("run", *models, "--no-prompt-cache", "--no-memory", "one two three four five six").exit_code == 0
    assert not list(prompts_folder().glob("*.state"))
    first = cli("run", *models, "--no-memory", "--temperature", "0", "one two three four five six")
    assert first.exit_code == 0 and len(list(prompts_folder().glob("*.state"))) == 2
    again = cli("run", *models, "--no-memory", "--temperature", "0", "one two three four five six")
    assert again.stdout == first.stdout
    assert cli("memory", "clear", "--yes").exit_code == 0
    assert not prompts_folder().exists()



@pytest.mark.slow  # (no cache folder: the repack probe runs in a child process)
def test_a_prompt_cache_that_cannot_be_written_is_said_once(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    """(was: said with --verbose alone, so a run asked for `--prompt-cache` and ran without it unaware)"""
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    models = ["--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--raw", "--max-tokens", "4", "--threads", "1",
              "--strategy", "model", "--draft-max", "2", "--no-memory", "--prompt-cache"]
    result = cli("run", *models, "one two three four five six", env={"XDG_CACHE_HOME": str(a_file)})
    assert result.exit_code == 0 and result.stderr.count("the prompt cache could not be saved") == 1, result.stderr
    assert "--no-prompt-cache` turns it off" in result.stderr and "Traceback" not in result.stderr

# Where llamafile's kernels compute a token read alone unlike a batch's (llama.cpp's default CPU build),
# a saved state holds only tokens read in batches, and a lone missing token is read as a batch reads it.
# On such a build the logits below differ without these rules; built without llamafile they hold trivially,
# and the bookkeeping is checked on both by declaring lone reads to differ.
LONGER = [*FIRST, 266, 272, 263]


def _lone_reads_differ(model: Model, monkeypatch: pytest.MonkeyPatch) -> Model:
    monkeypatch.setattr(model, "_lone_reads_differ", model.lone_reads_differ or True)
    return model


def test_a_token_read_alone_is_not_saved_where_lone_reads_differ(
    tiny_pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Model(tiny_pair[0], RUNTIME) as model:
        _lone_reads_differ(model, monkeypatch)
        model.sync(FIRST[:-1])
        model.eval(FIRST[-1:])  # its last token alone, as a draft model's step reads one
        assert model.tokens_read_in_batches == len(FIRST) - 1
        PromptCache(tmp_path).save(model, FIRST)
    with Model(tiny_pair[0], RUNTIME) as restored, Model(tiny_pair[0], RUNTIME) as fresh:
        assert PromptCache(tmp_path).restore(restored, LONGER) == len(FIRST) - 1
        np.testing.assert_array_equal(restored.next_logits(LONGER), fresh.next_logits(LONGER))


def test_one_missing_token_is_read_as_a_batch_reads_it(
    tiny_pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a restored state, or where the cache held another text (an earlier request's), one missing
    token is read in a padded pair: the cache then holds what a reading of the whole text holds."""
    with Model(tiny_pair[0], RUNTIME) as model:
        model.sync(FIRST)
        PromptCache(tmp_path).save(model, FIRST)
    with Model(tiny_pair[0], RUNTIME) as reused, Model(tiny_pair[0], RUNTIME) as fresh:
        _lone_reads_differ(reused, monkeypatch)
        decodes: list[int] = []
        decode = reused._decode
        monkeypatch.setattr(reused, "_decode", lambda tokens, rows: decodes.append(len(tokens)) or decode(tokens, rows))
        fresh.sync(LONGER[: len(FIRST) + 1])  # (read whole)
        for held in ("restored", "another text"):
            if held == "restored":
                assert PromptCache(tmp_path).restore(reused, LONGER) == len(FIRST)
            else:
                reused.sync([*FIRST, 280, 281])
            decodes.clear()
            reused.sync(LONGER[: len(FIRST) + 1])  # one token missing
            assert decodes == [2] and reused.tokens == tuple(LONGER[: len(FIRST) + 1])
            assert reused.tokens_read_in_batches == len(FIRST) + 1
            np.testing.assert_array_equal(reused.eval(LONGER[len(FIRST) + 1:]), fresh.eval(LONGER[len(FIRST) + 1:]), held)
            fresh.keep(len(FIRST) + 1)


def test_a_long_read_leaves_no_token_alone_where_lone_reads_differ(
    tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokens = [1, *(260 + i % 20 for i in range(16))]  # 17 tokens: batches of 8 would leave the last alone
    with Model(tiny_pair[0], ModelSettings(n_threads=1, n_batch=8)) as split, Model(tiny_pair[0], RUNTIME) as whole:
        _lone_reads_differ(split, monkeypatch)
        decodes: list[int] = []
        decode = split._decode
        monkeypatch.setattr(split, "_decode", lambda batch, rows: decodes.append(len(batch)) or decode(batch, rows))
        last_two = split.eval(tokens, logits=2)
        assert decodes == [8, 7, 2] and split.tokens_read_in_batches == len(tokens)
        np.testing.assert_array_equal(last_two, whole.eval(tokens, logits=2))


def test_in_batches_of_two_an_odd_reading_pads_its_last_token(
    tiny_pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With n_batch 2 no batch can take the last of an odd number of tokens: it is read in a padded pair, so
    that a fresh reading caches what a restored one completed by `sync` does (and is saved whole)."""
    tokens = [1, *(260 + i % 20 for i in range(6))]  # 7 tokens
    with Model(tiny_pair[0], ModelSettings(n_threads=1, n_batch=2)) as pairs, Model(tiny_pair[0], RUNTIME) as whole:
        _lone_reads_differ(pairs, monkeypatch)
        decodes: list[int] = []
        decode = pairs._decode
        monkeypatch.setattr(pairs, "_decode", lambda batch, rows: decodes.append(len(batch)) or decode(batch, rows))
        pairs.sync(tokens)
        assert decodes == [2, 2, 2, 2] and pairs.tokens == tuple(tokens) and pairs.tokens_read_in_batches == len(tokens)
        whole.sync(tokens)
        np.testing.assert_array_equal(pairs.eval([262]), whole.eval([262]))


def test_no_pass_is_padded_where_the_cache_cannot_drop_a_token(
    tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A recurrent model's state cannot drop the copy a padded pass adds (it would read the whole text again,
    every token): there each token is read alone, and no pass carries a guess."""
    with Model(tiny_pair[0], RUNTIME) as model:
        _lone_reads_differ(model, monkeypatch)
        assert model.pads_lone_tokens(4)
        monkeypatch.setattr(model, "_drops_a_suffix", False)
        assert not model.pads_lone_tokens(4)
        decodes: list[int] = []
        decode = model._decode
        monkeypatch.setattr(model, "_decode", lambda batch, rows: decodes.append(len(batch)) or decode(batch, rows))
        model.sync(FIRST[:-1])
        decodes.clear()
        model.sync(FIRST)
        assert decodes == [1]


def test_a_draft_model_takes_flash_attention_and_its_saved_reading_is_kept_apart(
    tiny_pair: tuple[Path, Path], tmp_path: Path,
) -> None:
    """On the CPU a draft model (its logits only propose) computes attention with llama.cpp's faster flash
    kernel, which stores a reading otherwise: a state saved by one is never restored into the other."""
    from localspec.app.session import load_draft_model

    with load_draft_model(tiny_pair[1], RUNTIME) as loaded:
        assert not loaded.flash_attention_off
    with Model(tiny_pair[1], RUNTIME) as plain, Model(tiny_pair[1], RUNTIME, proposes_only=True) as draft:
        assert plain.flash_attention_off and not draft.flash_attention_off
        for model in (plain, draft):
            model.sync(FIRST)
        np.testing.assert_allclose(draft.eval([262]), plain.eval([262]), atol=1e-3)  # the same model, computed otherwise
        cache = PromptCache(tmp_path)
        cache.save(plain, FIRST)
        draft.clear()
        assert cache.restore(draft, FIRST) == 0 and draft.tokens == ()
        draft.sync(SECOND)
        cache.save(draft, SECOND)
        assert len(list(tmp_path.glob("*.state"))) == 2


@pytest.mark.parametrize("verify", ["coupled", "rejection"])
def test_a_draft_with_flash_attention_is_restored_only_where_its_probabilities_cannot_change_the_text(
    tiny_pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verify: str,
) -> None:
    """A draft computes a reading split otherwise (a restored prompt, then the rest) a little otherwise with the
    flash kernel; under rejection sampling at a temperature its probabilities decide which drafts are kept, so
    there it reads the prompt whole (coupled verification and greedy drafts are only checked against the target)."""
    with _session(tiny_pair, tmp_path) as first:
        _generate(first, FIRST)
    restored: list[str] = []
    restore = PromptCache.restore
    monkeypatch.setattr(PromptCache, "restore",
                        lambda self, model, prompt: restored.append(model.path.name) or restore(self, model, prompt))
    for sampling in (SamplingParams(temperature=0.8), SamplingParams(temperature=0.0)):
        restored.clear()
        settings = GenerationSettings(sampling, SpeculativeParams(strategy="model", draft_max=4, verify=verify), max_tokens=8, seed=3)
        with _session(tiny_pair, tmp_path) as later:
            for _ in later.generation(FIRST, settings):
                pass
        drafts_decide = verify == "rejection" and not sampling.greedy
        assert restored == ([tiny_pair[0].name] if drafts_decide else [tiny_pair[0].name, tiny_pair[1].name])
