"""`pull` against a local HTTP server standing in for the hub, model discovery and `draft make`."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gguf
import numpy as np
import pytest
from cli_helpers import cli, one_error_line
from tiny_models import N_SPECIAL_AND_BYTE_TOKENS, random_weights, write_model

from localspec.cli import main
from localspec.config.paths import models_dir, user_profiles_dir
from localspec.models.hub import hub_local_path

N_VOCAB = N_SPECIAL_AND_BYTE_TOKENS + 24
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """A Hugging Face hub endpoint on loopback: answers what huggingface_hub asks for.

    HEAD /<repo>/resolve/<rev>/<file> gives the file's metadata (X-Repo-Commit, ETag,
    Content-Length); GET serves it, honouring Range. It can redirect file requests to
    another base URL (as the hub does to its CDN) and cut responses short.
    """

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.cut_after: int | None = None  # bytes of the next GET body to send before dropping the connection
        self.redirect_to: str | None = None  # answer file requests with a redirect to this base URL
        self.range_headers: list[str | None] = []
        self.auth_headers: list[str | None] = []
        self.root_requests = 0  # asked whether the hub answers at all
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                if "/resolve/" in self.path:  # (files; not what huggingface_hub asks the hub of itself, untokened)
                    hub.auth_headers.append(self.headers.get("Authorization"))
                elif self.path == "/":  # (the check that the endpoint answers at all, which sends no token)
                    hub.root_requests += 1
                path = self.path.replace(f"/resolve/{COMMIT}/", "/resolve/main/")
                data = hub.files.get(path)
                if data is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("X-Error-Message", "Entry not found")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                etag = f'"{hashlib.sha256(data).hexdigest()}"'
                if hub.redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", hub.redirect_to + self.path)
                    self.send_header("X-Repo-Commit", COMMIT)
                    self.send_header("X-Linked-Etag", etag)
                    self.send_header("X-Linked-Size", str(len(data)))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = 0
                if body:
                    hub.range_headers.append(self.headers.get("Range"))
                if body and self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if not body:
                    return
                payload = data[start:]
                if hub.cut_after is not None and len(payload) > hub.cut_after:
                    cut, hub.cut_after = hub.cut_after, None
                    self.wfile.write(payload[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub(tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch):
    files = {
        "/org/tiny-GGUF/resolve/main/tiny-target.gguf": tiny_pair[0].read_bytes(),
        "/org/tiny-GGUF/resolve/main/tiny-draft.gguf": tiny_pair[1].read_bytes(),
    }
    server = FakeHub(files)
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    yield server
    server.close()


def write_hub_profile() -> None:
    path = user_profiles_dir() / "tinyhub.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        '[target]\nhf_repo = "org/tiny-GGUF"\nhf_file = "tiny-target.gguf"\n'
        '[draft]\nhf_repo = "org/tiny-GGUF"\nhf_file = "tiny-draft.gguf"\n'
    )


def test_pull_downloads_then_the_profile_runs(hub: FakeHub, tiny_pair: tuple[Path, Path]) -> None:
    write_hub_profile()
    missing = cli("run", "-p", "tinyhub", "--raw", "the cat")
    assert missing.exit_code == 2 and "localspec pull tinyhub" in missing.stderr
    result = cli("pull", "tinyhub")
    assert result.exit_code == 0, result.stderr
    assert hub.root_requests == 1  # whether the hub answers is asked once, not once a file
    local = hub_local_path("org/tiny-GGUF", "tiny-target.gguf")
    assert local is not None and local.read_bytes() == tiny_pair[0].read_bytes()
    assert str(local).startswith(os.environ["HF_HUB_CACHE"])  # the shared Hugging Face cache
    assert cli("profile", "check", "tinyhub").exit_code == 0
    report = json.loads(cli("run", "-p", "tinyhub", "--raw", "--json", "--max-tokens", "4", "the cat").output)
    assert len(report["tokens"]) == 4 and report["model"]["target"] == str(local)
    again = cli("pull", "tinyhub")
    assert again.exit_code == 0 and "have org/tiny-GGUF/tiny-target.gguf" in again.stderr



@pytest.mark.slow
def test_a_download_that_is_no_gguf_is_not_kept_and_the_next_pull_fetches_it_again(hub: FakeHub, tiny_pair) -> None:
    """(was: the bad file stayed in the hub cache, so the next `pull` said "have" and every run failed)"""
    write_hub_profile()
    good = hub.files["/org/tiny-GGUF/resolve/main/tiny-target.gguf"]
    hub.files["/org/tiny-GGUF/resolve/main/tiny-target.gguf"] = b"<html>a login page</html>"
    failed = cli("pull", "tinyhub")
    last = failed.stderr.strip().splitlines()[-1]
    assert failed.exit_code == 1 and "Traceback" not in failed.stderr
    assert "downloaded org/tiny-GGUF/tiny-target.gguf is not a usable GGUF model" in last and "removed from" in last
    assert hub_local_path("org/tiny-GGUF", "tiny-target.gguf") is None
    hub.files["/org/tiny-GGUF/resolve/main/tiny-target.gguf"] = good
    assert cli("pull", "tinyhub").exit_code == 0
    local = hub_local_path("org/tiny-GGUF", "tiny-target.gguf")
    assert local is not None and local.read_bytes() == good
    local.resolve().write_bytes(b"damaged")  # (one an earlier version kept)
    again = cli("pull", "tinyhub")
    assert again.exit_code == 0 and "is not a usable GGUF model" in again.stderr and "downloading it again" in again.stderr
    assert hub_local_path("org/tiny-GGUF", "tiny-target.gguf").read_bytes() == good


def test_a_bad_download_is_removed_from_a_hub_cache_reached_through_a_link(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """(a cache behind a link, as `~/.cache` often is: the guard that keeps pull off the user's files must not
    keep it off its own downloads either)"""
    from localspec.models.hub import unusable_download

    real, link = tmp_path / "real-hf", tmp_path / "hf-link"
    snapshot = real / "models--a--b" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (real / "models--a--b" / "blobs").mkdir()
    blob = real / "models--a--b" / "blobs" / "0123"
    blob.write_bytes(b"<html>a login page</html>")
    link.symlink_to(real)
    monkeypatch.setenv("HF_HUB_CACHE", str(link))
    for reached in (snapshot / "m.gguf", link / "models--a--b" / "snapshots" / "abc" / "m.gguf"):
        (snapshot / "m.gguf").symlink_to("../../blobs/0123")
        blob.write_bytes(b"<html>a login page</html>")
        assert "bad magic bytes" in unusable_download(reached)
        assert not (snapshot / "m.gguf").is_symlink() and not blob.exists()


def test_a_failed_lookup_through_a_proxy_names_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """(was: "https://huggingface.co did not answer (ConnectError: …)", the hub blamed for its proxy's refusal)"""
    from localspec.models.hub import _lookup_problem

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    failed = RuntimeError("cannot find the requested files in the local cache")
    failed.__cause__ = ConnectionRefusedError("[Errno 111] Connection refused")
    assert _lookup_problem(failed) == ("the lookup at https://huggingface.co failed (ConnectionRefusedError: [Errno"
                                       " 111] Connection refused)")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:1")
    assert "the lookup at https://huggingface.co through the proxy (HTTPS_PROXY" in _lookup_problem(failed)


def test_pull_never_removes_a_file_of_the_models_folder_or_what_a_link_there_leads_to(tmp_path: Path) -> None:
    """(was: "the copy … in the hub cache is not a usable GGUF model: removed", the user's notes deleted through a
    link in the models folder, before anything was downloaded)"""
    from localspec.config.paths import models_dir

    write_hub_profile()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    placed = models_dir() / "org" / "tiny-GGUF" / "tiny-target.gguf"
    placed.parent.mkdir(parents=True)
    placed.symlink_to(notes)
    one_error_line(cli("pull", "tinyhub"), 2, f"{placed}: not a GGUF file (bad magic bytes): not a usable GGUF model,"
                   " and it is taken for org/tiny-GGUF/tiny-target.gguf: remove or replace it")
    assert notes.read_text() == "mine\n" and placed.is_symlink()


@pytest.mark.slow  # 24 MB through a local server: a second
def test_a_dropped_connection_is_resumed_with_a_range_request(hub: FakeHub, tiny_pair: tuple[Path, Path]) -> None:
    # A 24 MB file (the tiny model and padding past its tensors), cut after 12 MB: the
    # downloader keeps what it wrote (it writes in 10 MB blocks) and asks for the rest.
    big = tiny_pair[0].read_bytes() + bytes(24_000_000)
    hub.files["/org/tiny-GGUF/resolve/main/tiny-target.gguf"] = big
    write_hub_profile()
    hub.cut_after = 12_000_000
    result = cli("pull", "tinyhub")
    assert result.exit_code == 0, result.stderr
    assert "resume" not in result.stderr  # (huggingface_hub's own retries are not shown: was "Trying to resume …")
    resumed = [h for h in hub.range_headers if h and not h.startswith("bytes=0-")]
    assert resumed and int(resumed[0].removeprefix("bytes=").rstrip("-")) >= 10_000_000
    assert hub_local_path("org/tiny-GGUF", "tiny-target.gguf").read_bytes() == big


def test_files_pulled_by_earlier_versions_are_still_found(tiny_pair: tuple[Path, Path]) -> None:
    legacy = models_dir() / "org" / "tiny-GGUF" / "tiny-target.gguf"
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(tiny_pair[0].read_bytes())
    assert hub_local_path("org/tiny-GGUF", "tiny-target.gguf") == legacy


def test_the_token_goes_to_the_hub_but_not_to_a_redirect_host(hub: FakeHub, tiny_pair, monkeypatch) -> None:
    cdn = FakeHub(dict(hub.files))
    try:
        hub.redirect_to = cdn.endpoint.replace("127.0.0.1", "localhost")  # another host name
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        write_hub_profile()
        result = cli("pull", "tinyhub")
        assert result.exit_code == 0, result.stderr
        assert hub.auth_headers and all(h == "Bearer hf_secret" for h in hub.auth_headers)
        assert cdn.auth_headers and all(h is None for h in cdn.auth_headers)
        assert hub_local_path("org/tiny-GGUF", "tiny-draft.gguf").read_bytes() == tiny_pair[1].read_bytes()
    finally:
        cdn.close()


def test_pull_of_a_missing_file_is_one_line(hub: FakeHub) -> None:
    path = user_profiles_dir() / "ghost.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[target]\nhf_repo = "org/none"\nhf_file = "x.gguf"\n')
    result = cli("pull", "ghost")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1 and "HTTP 404" in errors[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [("pull", "spaced"), ("run", "-p", "spaced", "x"), ("profile", "check", "spaced")])
def test_a_repository_name_the_hub_refuses_is_one_line(command: tuple[str, ...]) -> None:
    path = user_profiles_dir() / "spaced.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[target]\nhf_repo = "TheBloke/Llama 2-7B-GGUF"\nhf_file = "x.gguf"\n')
    result = cli(*command)
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "spaced.toml: [target] hf_repo 'TheBloke/Llama 2-7B-GGUF' is not 'org/name' as the hub" in errors[0]


def failed_pull_from(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The one error line of a `pull` from `endpoint` (not through a proxy), which must fail within 10 s."""
    import time

    for variable in [name for name in os.environ if name.lower().endswith("_proxy")]:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    write_hub_profile()
    started = time.perf_counter()
    result = cli("pull", "tinyhub")
    assert time.perf_counter() - started < 10
    errors = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("localspec:")]
    assert result.exit_code == 1 and len(errors) == 1 and errors[0].startswith("error: download of org/tiny-GGUF/"), errors
    return errors[0]


@pytest.mark.parametrize("endpoint, reason", [
    ("http://127.0.0.1:9", "cannot connect to 127.0.0.1:9 (Connection refused)"),  # the discard port: refused
    ("http://no-such-hub.invalid", "cannot find no-such-hub.invalid"),  # a name that never resolves
])
def test_a_hub_that_cannot_be_reached_is_one_line_at_once(monkeypatch, endpoint: str, reason: str) -> None:
    """Not after huggingface_hub's 20 s of retries, each printing a line."""
    assert reason in failed_pull_from(endpoint, monkeypatch)


@pytest.mark.slow  # (waits out the shortened probe)
def test_a_mirror_that_takes_connections_and_never_answers_is_one_line_soon(monkeypatch) -> None:
    """Not after minutes of huggingface_hub's retries: the probe's wait (20 s, shortened here) is the whole wait."""
    import socket

    from localspec.models import hub

    monkeypatch.setattr(hub, "ANSWER_TIMEOUT_S", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as listener:  # the kernel takes connections; nobody answers
        endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
        error = failed_pull_from(endpoint, monkeypatch)
    assert f"failed: {endpoint} took the connection but sent no answer in 0.5 s: check HF_ENDPOINT" in error


def test_a_mirror_that_answers_404_is_said_to_have_answered_404(monkeypatch) -> None:
    """A plain web server as HF_ENDPOINT (no hub headers) gave huggingface_hub's "check your connection" message."""

    class NotFound(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        error = failed_pull_from(endpoint, monkeypatch)
        assert f"failed: HTTP 404 from {endpoint} (no such repository or file on the hub)" in error
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("endpoint", ["http://hub:abc", "ftp://hub", "http://", "http://hub:99999"])
def test_a_malformed_hf_endpoint_is_one_line(monkeypatch, endpoint: str) -> None:
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    write_hub_profile()
    pulled = cli("pull", "tinyhub")
    errors = [line for line in pulled.stderr.splitlines() if not line.startswith("localspec: downloading")]
    assert pulled.exit_code == 2 and len(errors) == 1 and f"HF_ENDPOINT {endpoint!r} is not a hub URL" in errors[0], errors
    if ":" in endpoint.split("//", 1)[1]:  # a port that does not parse: huggingface_hub would not even import
        one_error_line(cli("run", "-p", "tinyhub", "hi"), 2, f"HF_ENDPOINT {endpoint!r} is not a hub URL")
    else:  # used only to download: a run of files already here does not mind it
        one_error_line(cli("run", "-p", "tinyhub", "hi"), 2, "not downloaded yet")


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_pull_offline_says_so(monkeypatch, variable: str) -> None:
    monkeypatch.setenv(variable, "1")
    user_profiles_dir().mkdir(parents=True, exist_ok=True)
    (user_profiles_dir() / "offline.toml").write_text('[target]\nhf_repo = "org/never-pulled"\nhf_file = "m.gguf"\n')
    result = cli("pull", "offline")
    errors = [line for line in result.stderr.splitlines() if not line.startswith("localspec: downloading")]
    assert result.exit_code == 1 and errors == [
        "error: download of org/never-pulled/m.gguf failed: HF_HUB_OFFLINE is set and the file is not in the cache"]


def test_draft_make_then_auto_picks_it(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    target = tmp_path / "target.gguf"
    target.write_bytes(tiny_pair[0].read_bytes())
    none_yet = cli("profile", "add", "auto1", "--target", str(target), "--draft", "auto")
    assert none_yet.exit_code == 2 and "localspec draft make" in none_yet.stderr
    made = cli("draft", "make", str(target), "--type", "q8_0")
    assert made.exit_code == 0, made.stderr
    draft = tmp_path / "target.draft-q8_0.gguf"
    assert draft.is_file()
    refused = cli("draft", "make", str(target), "--type", "q8_0")
    assert refused.exit_code == 2 and "--force" in refused.stderr
    added = cli("profile", "add", "auto1", "--target", str(target), "--draft", "auto")
    assert added.exit_code == 0, added.stderr
    profile = json.loads(cli("profile", "show", "auto1", "--json").output)
    assert profile["draft.path"]["value"] == str(draft.resolve())
    assert cli("profile", "check", "auto1").exit_code == 0


def test_draft_make_refuses_an_empty_or_misplaced_out_and_makes_no_folder(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    """`--out ""` was taken for the current folder ('. exists'); a mistyped folder was made, and the draft in it."""
    one_error_line(cli("draft", "make", str(tiny_pair[0]), "--type", "q8_0", "--out", ""), 2, "--out: the path is empty")
    misplaced = tmp_path / "no-such-folder" / "d.gguf"
    one_error_line(cli("draft", "make", str(tiny_pair[0]), "--type", "q8_0", "--out", str(misplaced)), 2,
                   f"the folder {misplaced.parent} does not exist")
    assert not misplaced.parent.exists()
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    one_error_line(cli("draft", "make", str(tiny_pair[0]), "--type", "q8_0", "--out", str(a_file / "d.gguf")), 2,
                   f"{a_file} is not a folder")
    assert a_file.read_text() == "mine\n"
    # Something --force does not replace is refused before any work (it was, after the whole model was quantized).
    folder = tmp_path / "drafts"
    folder.mkdir()
    for flags in ((), ("--force",)):
        done = cli("draft", "make", str(tiny_pair[0]), "--type", "Q8_0", "--out", str(folder), *flags)  # (scan: "Q8_0")
        one_error_line(done, 2, f"{folder} is a folder: a draft is written as a file")
        assert "writing" not in done.stderr
    # (were exit 1 naming the draft: "File name too long", "Permission denied" for a target it cannot reach)
    one_error_line(cli("draft", "make", str(tiny_pair[0]), "--out", str(tmp_path / ("x" * 300))), 2, "too long")
    one_error_line(cli("draft", "make", str(tmp_path / ("x" * 300)), "--type", "q8_0"), 2, "x" * 300 + ": cannot reach")
    (folder / "t.draft-q8_0.gguf").mkdir()  # (auto: where a winner could go, before minutes of measuring)
    target = folder / "t.gguf"
    target.symlink_to(tiny_pair[0])
    one_error_line(cli("draft", "make", str(target), "--force"), 2, "t.draft-q8_0.gguf is a folder")



def test_a_draft_no_smaller_than_its_target_is_said_to_be_of_no_use(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    """A draft of an F32 target at F32 (or of a Q4_1 one at Q8_0) was only 'not much smaller'."""
    made = cli("draft", "make", str(tiny_pair[0]), "--type", "f32", "--out", str(tmp_path / "same.gguf"))
    assert made.exit_code == 0, made.stderr
    assert "warning: the draft is no smaller than the target, so it cannot speed it up" in made.stderr


def test_draft_make_of_a_damaged_target_is_one_line_and_writes_nothing(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    """A truncated target's error came after a "writing q8_0 draft of ..." line for a draft never written."""
    target = tmp_path / "cut.gguf"
    target.write_bytes(tiny_pair[0].read_bytes()[:4096])
    one_error_line(cli("draft", "make", str(target), "--type", "q8_0"), 2, "truncated GGUF file")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cut.gguf"]


def test_draft_make_of_a_target_llama_cpp_refuses_writes_nothing(tmp_path: Path) -> None:
    """A whole file whose tensors do not fit its header (no attention heads) was quantized into a draft that no
    run could load; `--type auto` refused it only because it loads the target to measure."""
    target = write_model(tmp_path / "headless.gguf", random_weights(N_VOCAB, seed=1), n_vocab=N_VOCAB, head_count=0)
    one_error_line(cli("draft", "make", str(target), "--type", "q8_0"), 1, "llama.cpp could not load the model")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["headless.gguf"]

def test_auto_draft_with_stdin_closed_asks_nothing(
    tmp_path: Path, tiny_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    target = tmp_path / "target.gguf"
    target.write_bytes(tiny_pair[0].read_bytes())
    monkeypatch.setattr(sys, "stdin", None)  # `<&-`: Python starts with sys.stdin None
    with pytest.raises(SystemExit) as exited:
        main.main(["profile", "add", "auto2", "--target", str(target), "--draft", "auto"], standalone_mode=False)
    assert exited.value.code == 2 and "localspec draft make" in capsys.readouterr().err


def test_make_draft_refuses_a_draft_path(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    added = cli("profile", "add", "made", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--make-draft")
    one_error_line(added, 2, "--make-draft goes with --draft auto")


@pytest.mark.slow
def test_auto_draft_can_make_one_when_nothing_fits(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    target = tmp_path / "target.gguf"
    target.write_bytes(tiny_pair[0].read_bytes())
    added = cli("profile", "add", "made", "--target", str(target), "--make-draft")  # (it implies --draft auto)
    assert added.exit_code == 0, added.stderr
    drafts = list(tmp_path.glob("target.draft-*.gguf"))
    assert len(drafts) == 1 and "wrote" in added.stderr and "expected speed-up" in added.stderr
    assert json.loads(cli("profile", "show", "made", "--json").output)["draft.path"]["value"] == str(drafts[0].resolve())
    assert cli("profile", "check", "made").exit_code == 0


def test_models_scan_lists_odd_files_as_unreadable_and_goes_on(tmp_path: Path, tiny_pair) -> None:
    from tiny_models import random_weights, write_model

    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "tiny.gguf").symlink_to(tiny_pair[0])
    (folder / "loop.gguf").symlink_to(folder / "loop.gguf")  # a link to itself
    (folder / "nowhere.gguf").symlink_to(folder / "missing.gguf")
    write_model(folder / "odd.gguf", random_weights(300, seed=3), n_vocab=300, context_length="abc")  # a context length that is not a number
    for name, key, value in [("uint.gguf", "tokenizer.ggml.tokens", 7), ("ints.gguf", "tokenizer.ggml.tokens", [1, 2]),
                             ("bos.gguf", "tokenizer.ggml.bos_token_id", "x")]:  # values of another kind than llama.cpp's
        writer = gguf.GGUFWriter(str(folder / name), "llama")
        writer.add_key_value(key, value, gguf.GGUFValueType.get_type(value))
        writer.add_tensor("t", np.zeros(4, dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    writer = gguf.GGUFWriter(str(folder / "novocab.gguf"), "notamodel")  # no tokenizer: it was grouped with the models
    writer.add_tensor("t", np.zeros(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    report = json.loads(cli("models", "scan", str(folder), "--json").output)
    described = {Path(m["path"]).name: m for group in report["groups"] for m in group}
    assert set(described) == {"tiny.gguf", "odd.gguf"} and described["odd.gguf"]["context_length"] is None
    unreadable = {Path(line.split(":")[0]).name: line for line in report["unreadable"]}
    assert sorted(unreadable) == ["bos.gguf", "ints.gguf", "loop.gguf", "novocab.gguf", "nowhere.gguf", "uint.gguf"]
    assert "tokenizer.ggml.tokens is not a list of texts" in unreadable["ints.gguf"]
    assert "holds no vocabulary" in unreadable["novocab.gguf"]
    assert "a loop of symbolic links" in unreadable["loop.gguf"]  # (was "a link that leads nowhere", as run says it)
    assert "missing.gguf, which does not exist" in unreadable["nowhere.gguf"]


def test_models_scan_finds_upper_case_names_and_models_behind_linked_folders(tmp_path: Path, tiny_pair) -> None:
    """(was: `X.GGUF` never listed, a linked folder never entered: "no GGUF files found", exit 0; a pipe named
    x.gguf passed over without a word)"""
    store, folder = tmp_path / "store", tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    store.mkdir()
    (store / "big.gguf").symlink_to(tiny_pair[0])
    (folder / "UPPER.GGUF").symlink_to(tiny_pair[1])
    (folder / "linked").symlink_to(store)
    (folder / "sub" / "loop").symlink_to(folder)  # (a loop of folders is walked once)
    (folder / "a-link").symlink_to(folder / "sub")  # (walked before sub: its files are named by sub, not the link)
    (folder / "sub" / "small.gguf").write_bytes(tiny_pair[1].read_bytes())
    os.mkfifo(folder / "pipe.gguf")
    scanned = cli("models", "scan", str(folder), "--json")
    report = json.loads(scanned.stdout)
    assert sorted(m["path"] for group in report["groups"] for m in group) == sorted(
        [str(folder / "UPPER.GGUF"), str(folder / "linked" / "big.gguf"), str(folder / "sub" / "small.gguf")])
    assert report["unreadable"] == [f"{folder / 'pipe.gguf'}: not a regular file (a pipe or a device)"]
    drafts = cli("models", "drafts", str(tiny_pair[0]), str(folder))
    assert f"skipped: {folder / 'pipe.gguf'}: not a regular file" in drafts.stderr  # (was: dropped)


def test_a_vocabulary_without_weights_is_never_a_draft(tiny_pair) -> None:
    import dataclasses

    from localspec.models.discovery import describe, drafts_for

    target, draft = describe(tiny_pair[0]), describe(tiny_pair[1])
    vocabulary_only = dataclasses.replace(draft, path=tiny_pair[1].with_name("ggml-vocab.gguf"), n_parameters=0, size_bytes=1)
    assert [model.path for model, _ in drafts_for(dataclasses.replace(target, size_bytes=10**9), [vocabulary_only, draft])] \
        == [draft.path]


def test_models_scan_says_what_is_wrong_with_a_folder(tmp_path: Path) -> None:
    """A missing folder was "not a folder", an empty argument the current folder, a fresh install's an error."""
    one_error_line(cli("models", "scan", str(tmp_path / "nowhere")), 2, "nowhere: no such folder")
    (tmp_path / "file").write_text("x")
    one_error_line(cli("models", "scan", str(tmp_path / "file")), 2, "file: not a folder")
    one_error_line(cli("models", "scan", ""), 2, "FOLDER: the path is empty")
    one_error_line(cli("models", "drafts", ""), 2, "TARGET: the path is empty")
    hub = Path(os.environ["HF_HUB_CACHE"])
    empty = cli("models", "scan")  # (an empty hub cache: looked in, said so)
    assert empty.exit_code == 0 and empty.stdout.strip() == f"no GGUF files found in {hub}", empty.stdout
    fresh = cli("models", "scan", env={"HF_HUB_CACHE": str(tmp_path / "no-hub")})  # (a fresh install)
    assert fresh.exit_code == 0 and "note: no models yet (no models folder" in fresh.stderr, fresh.stderr


def test_models_scan_and_drafts_find_what_pull_downloaded(tmp_path: Path, tiny_pair) -> None:
    """`pull` downloads into the hub cache, where a bare `models scan` had not looked ("no GGUF files found")."""
    repo = Path(os.environ["HF_HUB_CACHE"]) / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (repo / "blobs" / "0123abcd").write_bytes(tiny_pair[1].read_bytes())
    pulled = repo / "snapshots" / "abc" / "tiny-draft.gguf"
    pulled.symlink_to("../../blobs/0123abcd")
    scanned = cli("models", "scan", "--json")
    assert [row["path"] for row in json.loads(scanned.stdout)["groups"][0]] == [str(pulled)], scanned.stdout
    target = tmp_path / "big.gguf"
    target.write_bytes(tiny_pair[0].read_bytes() + b"\0" * 4096)  # (larger than the draft: tensors padded past)
    drafts = cli("models", "drafts", str(target), "--json")
    assert [row["path"] for row in json.loads(drafts.stdout)] == [str(pulled)], (drafts.stdout, drafts.stderr)


def test_models_scan_and_drafts_print_paths_that_look_like_markup_as_written(tmp_path: Path, tiny_pair) -> None:
    folder = tmp_path / "q[" / "[red]b]"
    folder.mkdir(parents=True)
    (folder / "z.gguf").symlink_to(tiny_pair[0])
    scanned = cli("models", "scan", str(tmp_path / "q["))
    assert scanned.exit_code == 0, scanned.stderr
    assert "[red]b]" in scanned.output.replace("\n", "")
    (tmp_path / "empty").mkdir()
    drafts = cli("models", "drafts", str(folder / "z.gguf"), str(tmp_path / "empty"))
    assert drafts.exit_code == 0 and "[red]b]/z.gguf" in drafts.output



def test_piped_output_keeps_long_paths_whole_on_one_line(tmp_path: Path, tiny_pair) -> None:
    """Piped, a table cut a path past 240 columns short with an ellipsis, and `info` broke its lines there."""
    folder = tmp_path / ("d" * 150) / ("e" * 150)
    folder.mkdir(parents=True)
    (folder / "z.gguf").symlink_to(tiny_pair[0])
    scanned = cli("models", "scan", str(folder))
    assert scanned.exit_code == 0 and f"{folder / 'z.gguf'}  " in scanned.stdout, scanned.stdout
    info = cli("info", env={"LOCALSPEC_HOME": str(folder)})
    assert info.exit_code == 0 and f"{folder}" in info.stdout, info.stdout


def test_models_scan_shows_odd_file_names_on_one_line_and_writes_unicode_json(tmp_path: Path, tiny_pair) -> None:
    (tmp_path / "a\nb.gguf").write_bytes(tiny_pair[0].read_bytes())
    (tmp_path / os.fsdecode(b"c\xffd.gguf")).write_bytes(tiny_pair[0].read_bytes())
    (tmp_path / os.fsdecode(b"e\xff.gguf")).write_bytes(b"junk")
    scanned = cli("models", "scan", str(tmp_path))
    assert scanned.exit_code == 0, scanned.stderr
    table = scanned.output.replace("\n", "")
    assert "a\\nb.gguf" in table and "c\\xffd.gguf" in table
    assert scanned.stderr.count("\n") == 1 and "e\\xff.gguf: not a GGUF file" in scanned.stderr
    report = json.loads(cli("models", "scan", str(tmp_path), "--json").output)
    paths = sorted(Path(row["path"]).name for row in report["groups"][0])
    assert paths == ["a\nb.gguf", "c\ufffdd.gguf"] and "e\ufffd.gguf" in report["unreadable"][0]

@pytest.mark.slow
def test_models_scan_groups_and_drafts_lists_smallest_first(tmp_path: Path, smollm_q4_1: Path, smollm_f32: Path, tiny_pair) -> None:
    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    for source, name in [(smollm_q4_1, "sub/smol-q4_1.gguf"), (smollm_f32, "smol-f32.gguf"), (tiny_pair[0], "tiny.gguf")]:
        (folder / name).symlink_to(source)
    (folder / "junk.gguf").write_text("not a model")
    scanned = cli("models", "scan", str(folder), "--json")
    report = json.loads(scanned.output)
    groups = sorted(sorted(Path(m["path"]).name for m in g) for g in report["groups"])
    assert groups == [["smol-f32.gguf", "smol-q4_1.gguf"], ["tiny.gguf"]]
    assert len(report["unreadable"]) == 1 and "junk.gguf" in report["unreadable"][0]
    smol = next(m for g in report["groups"] for m in g if m["path"].endswith("smol-f32.gguf"))
    assert smol["quantization"] == "F32" and smol["vocab_size"] == 49152 and smol["context_length"] == 8192
    listed = cli("models", "drafts", str(folder / "smol-f32.gguf"), str(folder), "--json")
    drafts = json.loads(listed.stdout)
    assert [Path(d["path"]).name for d in drafts] == ["smol-q4_1.gguf"] and "skipped: " in listed.stderr
    assert 0.1 < drafts[0]["size_ratio"] < 0.3


@pytest.mark.parametrize("repo, filename, reason", [
    ("tiny-GGUF", "tiny.gguf", "hf_repo 'tiny-GGUF' is not 'org/name'"),
    ("org/tiny-GGUF", "sub/../tiny.gguf", "hf_file 'sub/../tiny.gguf' is not a file inside the repository"),
    ("org/tiny-GGUF", " ", "hf_file is empty"),
])
def test_a_bad_hub_reference_from_the_api_says_what_is_wrong(repo: str, filename: str, reason: str) -> None:
    """A reference that never went through a profile's checks (the Python API) is refused with the same reason."""
    from localspec.errors import InputError

    with pytest.raises(InputError, match="invalid hub reference") as raised:
        hub_local_path(repo, filename)
    assert reason in str(raised.value) and "\n" not in str(raised.value)


def test_progress_lines_show_names_as_they_are_written(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """(was: a name's escape sequences reached the terminal from the progress line, and `[bold]` in a name turned
    the rest bold)"""
    import io

    from rich.console import Console

    from localspec.cli import common

    name = "e\x1b]0;PWNED\x07[bold]x.gguf"
    terminal = io.StringIO()
    monkeypatch.setattr(common, "stderr_console", Console(file=terminal, force_terminal=True, width=200), raising=False)
    status = common.StatusLine(enabled=True)
    status.start_progress(f"writing q8_0 draft of {name}")
    status.stop()
    status.show(f"loading target {name}")
    status.stop()
    shown = terminal.getvalue()
    assert shown.count("e\\x1b]0;PWNED\\x07[bold]x.gguf") >= 2 and "\x1b]0" not in shown and "\x1b[1m" not in shown
    common.StatusLine(enabled=False).start_progress(f"downloading {name}")
    assert capsys.readouterr().err == "localspec: downloading e\\x1b]0;PWNED\\x07[bold]x.gguf...\n"


def test_a_tab_in_a_name_is_escaped_in_tables_and_errors(tmp_path: Path, tiny_pair) -> None:
    """(was: written as it is, breaking the table's columns)"""
    (tmp_path / "a\tb.gguf").symlink_to(tiny_pair[0])
    assert f"{tmp_path}/a\\tb.gguf " in cli("models", "scan", str(tmp_path)).stdout
    one_error_line(cli("models", "scan", str(tmp_path / "no\tfolder")), 2, f"{tmp_path}/no\\tfolder: no such folder")


def test_models_drafts_advises_a_command_that_names_the_target(tmp_path: Path, tiny_pair) -> None:
    """(was: `localspec draft make 's/a\\nb.gguf'` for a name with a line break: another file)"""
    plain, odd, empty = tmp_path / "my model.gguf", tmp_path / "a\nb.gguf", tmp_path / "empty"
    empty.mkdir()
    for link in (plain, odd):
        link.symlink_to(tiny_pair[0])
    assert f"localspec draft make '{plain}'\n" in cli("models", "drafts", str(plain), str(empty)).stdout
    assert "localspec draft make TARGET\n" in cli("models", "drafts", str(odd), str(empty)).stdout
