"""GGUF headers, vocabulary compatibility and atomic derivation, on real files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tiny_models import random_weights, write_model, write_unloadable_model

from localspec.config.files import file_version, read_user_text
from localspec.config.paths import cache_dir
from localspec.errors import InputError, LocalspecError
from localspec.models import compat
from localspec.models.compat import VocabInfo, check_compatible
from localspec.models.gguf import read_gguf_header
from localspec.models.quantize import quantize


@pytest.mark.slow
def test_header_of_the_demo_model(smollm_q4_1: Path) -> None:
    header = read_gguf_header(smollm_q4_1)
    assert header.architecture == "llama"
    assert header.context_length == 8192
    assert len(header.get("tokenizer.ggml.tokens")) == 49152
    assert 130e6 < header.n_parameters < 140e6


@pytest.mark.slow
@pytest.mark.parametrize("keep_bytes", [3, 100, 1_000_000, 50_000_000])
def test_every_truncation_is_reported(tmp_path: Path, smollm_q4_1: Path, keep_bytes: int) -> None:
    truncated = tmp_path / "cut.gguf"
    with smollm_q4_1.open("rb") as source:
        truncated.write_bytes(source.read(keep_bytes))
    with pytest.raises(InputError, match="truncated|not a GGUF"):
        read_gguf_header(truncated)


def test_a_tensor_type_newer_than_the_gguf_package_is_not_called_corruption(tmp_path: Path) -> None:
    """llama.cpp may know a type the installed `gguf` package does not yet (MXFP4 once): only where its data
    starts can be checked then."""
    import gguf
    import numpy as np

    path = tmp_path / "new-type.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("tq", np.zeros(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    data = bytearray(path.read_bytes())
    entry = data.index(b"tq" + (1).to_bytes(4, "little") + (32).to_bytes(8, "little"))  # name, dimensions, shape
    data[entry + 14 : entry + 18] = (250).to_bytes(4, "little")  # then the type: one no `gguf` release has
    path.write_bytes(bytes(data))
    header = read_gguf_header(path)
    assert header.tensors[0].ggml_type == 250 and header.tensors[0].n_bytes is None


def test_a_vocabulary_file_without_padding_after_its_header_is_not_taken_for_a_truncated_one(tmp_path: Path) -> None:
    """llama.cpp's vocabulary files (models/ggml-vocab-*.gguf) hold no tensors and end with their header."""
    import gguf

    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "cd"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    path.write_bytes(path.read_bytes().rstrip(b"\0"))  # (its last string ends with "cd": only padding goes)
    header = read_gguf_header(path)
    assert header.tensors == [] and header.get("tokenizer.ggml.tokens") == ["a", "b", "cd"]
    path.write_bytes(path.read_bytes()[:-1])  # a header cut short still is
    with pytest.raises(InputError, match="truncated"):
        read_gguf_header(path)


@pytest.mark.slow
def test_same_model_at_two_precisions_is_compatible(smollm_q4_1: Path, smollm_f32: Path) -> None:
    report = check_compatible(VocabInfo.from_header(read_gguf_header(smollm_f32)), VocabInfo.from_header(read_gguf_header(smollm_q4_1)))
    assert report.compatible and len(report.checks) == 5


@pytest.mark.slow
def test_different_tokenizer_fails_the_tokenizer_check(smollm_q4_1: Path, tiny_pair: tuple[Path, Path]) -> None:
    report = check_compatible(VocabInfo.from_header(read_gguf_header(smollm_q4_1)), VocabInfo.from_header(read_gguf_header(tiny_pair[0])))
    assert report.first_failure is not None and report.first_failure.name == "tokenizer model"


@pytest.mark.parametrize("model, pre, said, adds", [
    ("gpt2", "llama-bpe", None, True),  # an older Llama 3 conversion: llama.cpp adds BOS though the file does not say
    ("gpt2", "qwen2", None, False), ("llama", "default", None, True), ("gpt2", "llama-bpe", False, False),
])
def test_a_file_that_does_not_say_whether_bos_is_added_gets_llama_cpps_default(
    tmp_path: Path, model: str, pre: str, said: bool | None, adds: bool
) -> None:
    import gguf

    def vocabulary(name: str, add_bos: bool | None) -> VocabInfo:
        writer = gguf.GGUFWriter(str(tmp_path / name), "llama")
        writer.add_tokenizer_model(model)
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(["a", "b"])
        if add_bos is not None:
            writer.add_add_bos_token(add_bos)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return VocabInfo.from_header(read_gguf_header(tmp_path / name))

    silent, explicit = vocabulary("silent.gguf", said), vocabulary("explicit.gguf", adds)
    assert silent.add_bos is adds and check_compatible(silent, explicit).compatible


def test_a_model_without_tokens_is_named_rather_than_its_vocabulary_size(tmp_path: Path,
                                                                         tiny_pair: tuple[Path, Path]) -> None:
    """(was: "vocabulary size check failed (target 0, draft 300 ...)")"""
    from dataclasses import replace

    draft = VocabInfo.from_header(read_gguf_header(tiny_pair[1]))
    failure = check_compatible(replace(draft, tokens=()), draft).first_failure
    assert failure is not None and failure.name == "vocabulary size"
    assert failure.detail == "the target holds no tokens (tokenizer.ggml.tokens is missing or empty)"


def test_one_changed_token_text_is_found(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    n_vocab = len(read_gguf_header(tiny_pair[0]).get("tokenizer.ggml.tokens"))
    changed = write_model(tmp_path / "changed.gguf", random_weights(n_vocab, seed=3), n_vocab=n_vocab, changed_token_id=270)
    report = check_compatible(VocabInfo.from_header(read_gguf_header(tiny_pair[0])), VocabInfo.from_header(read_gguf_header(changed)))
    failure = report.first_failure
    assert failure is not None and failure.name == "token texts" and "token 270 differs" in failure.detail


@pytest.mark.slow
def test_quantize_writes_a_complete_file_and_reports_progress(tmp_path: Path, smollm_q4_1: Path) -> None:
    seen: list[tuple[int, int]] = []
    out = quantize(smollm_q4_1, tmp_path / "q8.gguf", "q8_0", on_progress=lambda done, total: seen.append((done, total)))
    assert read_gguf_header(out).get("general.file_type") == 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    assert seen and seen[-1][0] == seen[-1][1]
    assert [p.name for p in tmp_path.iterdir()] == ["q8.gguf"]


@pytest.mark.slow
def test_draft_make_stopped_by_sigterm_leaves_no_partial_file(tmp_path: Path, smollm_f32: Path) -> None:
    """`kill` (SIGTERM) mid-quantization exits 143 and removes the model-sized temporary file, as Ctrl-C does."""
    out = tmp_path / "draft.gguf"
    command = [sys.executable, "-m", "localspec", "draft", "make", str(smollm_f32), "--type", "q4_0", "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not any(p.stat().st_size for p in tmp_path.glob(".draft.gguf.*.partial")):
        assert process.poll() is None and time.monotonic() < deadline, "the quantization never started writing"
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert b"Traceback" not in stderr and list(tmp_path.iterdir()) == []


def test_quantize_sweeps_what_a_killed_quantization_left_but_not_one_in_progress(tmp_path: Path, tiny_pair) -> None:
    killed, writing = tmp_path / ".out.gguf.a1b2c3.partial", tmp_path / ".out.gguf.d4e5f6.partial"
    for path in (killed, writing):
        path.write_bytes(b"half a model")
    os.utime(killed, (time.time() - 7200, time.time() - 7200))  # untouched for two hours
    quantize(tiny_pair[0], tmp_path / "out.gguf", "f16", n_threads=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [writing.name, "out.gguf"]



@pytest.mark.parametrize("value_type, value", [(4, struct.pack("<I", 0)), (8, struct.pack("<Q", 2) + b"64")])
def test_a_header_with_a_nonsense_alignment_is_corrupt_not_a_crash(tmp_path: Path, value_type: int, value: bytes) -> None:
    key = b"general.alignment"  # a uint32 0 (a division by zero) or a string
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<I", value_type)
    path = tmp_path / "odd.gguf"
    path.write_bytes(header + value)
    with pytest.raises(InputError, match="corrupt GGUF header .*general.alignment"):
        read_gguf_header(path)


def test_an_array_of_arrays_is_said_in_words(tmp_path: Path) -> None:
    """(was: "corrupt GGUF header (<GGUFValueType.ARRAY: 9>)")"""
    key = b"general.nested"
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<II", 9, 9)
    path = tmp_path / "nested.gguf"
    path.write_bytes(header + struct.pack("<Q", 1) + bytes(64))
    with pytest.raises(InputError, match=r"corrupt GGUF header \(an array of arrays, which no GGUF model holds\)"):
        read_gguf_header(path)


@pytest.mark.parametrize("header, message", [
    ({"block_count": 0}, "llama.block_count is 0: llama.cpp takes 1 to 512 layers"),
    ({"block_count": 600}, "llama.block_count is 600: llama.cpp takes 1 to 512 layers"),
    ({"rms_epsilon": float("nan")}, "llama.attention.layer_norm_rms_epsilon is nan: not a finite number of 0 or more"),
    # (were: an abort on loading, or on the first text holding a "Q", as an uncaught C++ exception)
    ({"tokenizer_model": "none"}, 'tokenizer.ggml.model is "none": llama.cpp has no tokenizer for its text'),
    ({"replaced_tokens": {262: "<0x41>"}}, "tokens 68 and 262 are both '<0x41>' (llama.cpp takes one text per token)"),
    ({"replaced_tokens": {3 + ord("Q"): "Qz"}}, "its SentencePiece vocabulary has no token <0x51> for that byte"),
])
def test_a_header_llama_cpp_would_abort_on_is_corrupt_not_a_crash(tmp_path: Path, header: dict, message: str) -> None:
    """llama.cpp asserts on these while loading: the process aborted (SIGABRT, a debugger's backtrace)."""
    from cli_helpers import cli
    from tiny_models import N_SPECIAL_AND_BYTE_TOKENS, random_weights, write_model

    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 8
    path = write_model(tmp_path / "odd.gguf", random_weights(n_vocab, seed=1), n_vocab=n_vocab, **header)
    result = cli("run", "--target", str(path), "--raw", "--max-tokens", "2", "the cat")
    assert result.exit_code == 2 and result.stderr.strip().startswith(f"error: {path}: corrupt GGUF header ({message}")


@pytest.mark.slow  # (a process of its own: what it tests ends the process)
def test_an_abort_inside_llama_cpp_while_loading_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """A WordPiece tokenizer over this vocabulary: llama.cpp's GGML_ABORT on loading (was: ggml's backtrace)."""
    from tiny_models import N_SPECIAL_AND_BYTE_TOKENS, random_weights, write_model

    n_vocab = N_SPECIAL_AND_BYTE_TOKENS + 8
    path = write_model(tmp_path / "odd.gguf", random_weights(n_vocab, seed=1), n_vocab=n_vocab, tokenizer_model="bert")
    command = [sys.executable, "-m", "localspec", "run", "--target", str(path), "--raw", "--max-tokens", "2", "the cat"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done
    assert lines[0].startswith("error: llama.cpp aborted:") and lines[0].endswith(f"; while loading {path}")


def test_failed_quantize_leaves_nothing_behind(tmp_path: Path) -> None:
    """A complete GGUF file that llama.cpp's quantizer itself refuses (an unknown architecture)."""
    source = write_unloadable_model(tmp_path / "odd.gguf")
    read_gguf_header(source)  # the header is fine: the failure must come from the quantizer
    existing = tmp_path / "out.gguf"
    existing.write_bytes(b"user data")
    with pytest.raises(LocalspecError, match="quantizing .* failed .*unknown model architecture"):
        quantize(source, existing, "f16")
    assert existing.read_bytes() == b"user data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.gguf", "out.gguf"]


def test_atomic_writes_follow_links_and_refuse_devices_and_folders(tmp_path: Path, monkeypatch) -> None:
    from localspec.config.atomic import write_text_atomic

    real = tmp_path / "real.toml"
    real.write_text("old")
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    with pytest.raises(InputError, match="not a regular file"):
        write_text_atomic(Path("/dev/null"), "x")
    assert Path("/dev/null").is_char_device()
    folder = tmp_path / "saved"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"^saved: is a directory, so it is not replaced$"):  # named as the user named it
        write_text_atomic(Path("saved"), "x")
    assert folder.is_dir() and not list(folder.iterdir())


def test_an_atomic_write_keeps_the_permissions_of_the_file_it_replaces(tmp_path: Path) -> None:
    import os

    from localspec.config.atomic import write_text_atomic

    shared = tmp_path / "shared.toml"
    shared.write_text("old")
    shared.chmod(0o644)
    write_text_atomic(shared, "new")
    assert shared.stat().st_mode & 0o777 == 0o644
    umask = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "new.toml", "x")
        write_text_atomic(shared, "private", private=True)
    finally:
        os.umask(umask)
    assert (tmp_path / "new.toml").stat().st_mode & 0o777 == 0o640  # a new file: what the umask leaves
    assert shared.stat().st_mode & 0o777 == 0o600


def test_an_atomic_write_flushes_the_file_then_the_folder_it_was_renamed_in(tmp_path: Path, monkeypatch) -> None:
    import os
    import stat

    from localspec.config.atomic import atomic_path, write_text_atomic

    synced: list[tuple[bool, int]] = []  # (a folder?, inode) of each descriptor fsync'd, in order
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        status = os.fstat(descriptor)
        synced.append((stat.S_ISDIR(status.st_mode), status.st_ino))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    destination = tmp_path / "settings.toml"
    write_text_atomic(destination, "x = 1")
    # The new contents reach the disk before the rename, and the rename itself after it.
    assert synced == [(False, destination.stat().st_ino), (True, tmp_path.stat().st_ino)]
    synced.clear()
    quantized = tmp_path / "model.gguf"
    with atomic_path(quantized) as temp_path:
        temp_path.write_bytes(b"GGUF")  # a writer that flushes nothing itself (llama.cpp's quantizer)
    assert synced == [(False, quantized.stat().st_ino), (True, tmp_path.stat().st_ino)]


def test_remembered_verdicts_are_bounded_oldest_first(tiny_pair: tuple[Path, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "MAX_REMEMBERED", 3)
    copies = [Path(shutil.copy(tiny_pair[0], tmp_path / f"copy{i}.gguf")) for i in range(5)]
    for copy in copies:
        compat.check_file(copy)
    remembered = json.loads((cache_dir() / compat.CACHE_FILE_NAME).read_text())
    assert list(remembered) == [f"file:{file_version(copy)}" for copy in copies[-3:]]


def test_a_pipe_a_flag_names_is_read_where_pipes_are_welcome(tmp_path: Path) -> None:
    """`--tools <(jq ...)`, `--json-schema <(...)`: the shell hands over a pipe named for this very read."""
    fifo = tmp_path / "schema.json"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as stream:
            stream.write('{"type": "string"}')

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert read_user_text(fifo, pipes_ok=True) == '{"type": "string"}'
    writer.join(timeout=10)
    with pytest.raises(InputError, match="not a regular file"):  # elsewhere (a profile, a saved chat) it would block
        read_user_text(fifo)


def test_an_atomic_write_does_not_go_through_a_dangling_link(tmp_path: Path) -> None:
    """It would make the folders the link names and a file there, outside the folder written to."""
    from localspec.config.atomic import write_text_atomic

    link = tmp_path / "profile.toml"
    link.symlink_to(tmp_path / "elsewhere" / "deep" / "x.toml")
    with pytest.raises(InputError, match="which does not exist, so it is not written through"):
        write_text_atomic(link, "x")
    assert not (tmp_path / "elsewhere").exists()


def test_an_atomic_write_to_a_loop_of_links_is_one_line_and_the_cli_says_so(tmp_path: Path, tiny_pair) -> None:
    """Path.resolve raised RuntimeError: a traceback from profile add, draft make --out, chat's /save."""
    from cli_helpers import cli

    from localspec.config.atomic import write_text_atomic

    (tmp_path / "a.toml").symlink_to(tmp_path / "b.toml")
    (tmp_path / "b.toml").symlink_to(tmp_path / "a.toml")
    with pytest.raises(InputError, match=r"a\.toml: cannot write it \(a loop of symbolic links\)"):
        write_text_atomic(tmp_path / "a.toml", "x")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "loop.toml").symlink_to(tmp_path / "profiles" / "loop.toml")
    result = cli("profile", "add", "loop", "--target", str(tiny_pair[0]), "--force", env={"LOCALSPEC_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"error: {tmp_path}/profiles/loop.toml: cannot write it (a loop of symbolic links)"


def test_an_atomic_write_it_cannot_make_names_the_file_not_its_temporary(tmp_path: Path) -> None:
    """A folder it may not write in, or a file where a folder should be: the message names the file asked for."""
    from localspec.config.atomic import write_text_atomic

    (tmp_path / "taken").write_text("a file, not a folder")
    with pytest.raises(InputError, match=r"taken/mine\.toml: cannot write it \(") as raised:
        write_text_atomic(tmp_path / "taken" / "mine.toml", "x")
    assert ".partial" not in str(raised.value)


def test_a_folder_this_user_may_not_enter_is_one_line_not_a_traceback(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache folder it may not enter raised PermissionError from `locked` (a `run` that had printed its text then
    exited 1, where an unwritable cache is meant to be skipped); LOCALSPEC_HOME so was a bare "Permission denied"."""
    from cli_helpers import cli, one_error_line

    from localspec.config.files import locked

    shut = tmp_path / "shut"
    exists = Path.exists

    def no_entry(path: Path) -> bool:
        if shut in (path, *path.parents):
            raise PermissionError(13, "Permission denied", str(path))
        return exists(path)

    monkeypatch.setattr(Path, "exists", no_entry)
    with pytest.raises(InputError, match="cannot lock"):  # (a LocalspecError: what a cache's save skips)
        with locked(shut / "localspec" / "draft-lengths.json"):
            pass
    one_error_line(cli("history", "list", env={"LOCALSPEC_HOME": str(shut)}), 2,
                   f"LOCALSPEC_HOME={shut}: cannot reach it (Permission denied)")


def test_a_model_path_that_is_a_loop_or_a_dangling_link_says_which(tmp_path: Path) -> None:
    """Both were 'no such file', though the path is there to see."""
    (tmp_path / "a.gguf").symlink_to(tmp_path / "b.gguf")
    (tmp_path / "b.gguf").symlink_to(tmp_path / "a.gguf")
    (tmp_path / "gone.gguf").symlink_to(tmp_path / "elsewhere.gguf")
    for name, reason in (("a.gguf", "a loop of symbolic links, not a file"),
                         ("gone.gguf", f"a link to {tmp_path / 'elsewhere.gguf'}, which does not exist"),
                         ("none.gguf", "no such file")):
        with pytest.raises(InputError) as raised:
            read_gguf_header(tmp_path / name)
        assert str(raised.value) == f"{tmp_path / name}: {reason}"


def test_a_write_that_fails_midway_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk's error names no file: `profile set` said only 'No space left on device'."""
    import errno

    from localspec.config.atomic import write_text_atomic

    destination = tmp_path / "mine.toml"
    destination.write_text("kept")

    def full_disk(self: Path, *args, **kwargs) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(InputError, match=r"mine\.toml: cannot write it \(No space left on device\)"):
        write_text_atomic(destination, "new")
    monkeypatch.undo()
    assert destination.read_text() == "kept" and [p.name for p in tmp_path.iterdir()] == ["mine.toml"]
