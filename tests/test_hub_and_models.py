"""`pull` against a local HTTP server standing in for the hub, model discovery and `draft make`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from localspec.cli import main
from localspec.hub import hub_local_path
from localspec.paths import user_profiles_dir


def cli(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


class FakeHub:
    """Serves files at /<repo>/resolve/main/<file> with Range support; can cut a response short."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.cut_after: int | None = None  # bytes to send before dropping the connection
        self.redirect_to: str | None = None  # answer every GET with a redirect to this base URL
        self.range_headers: list[str | None] = []
        self.auth_headers: list[str | None] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                hub.range_headers.append(self.headers.get("Range"))
                hub.auth_headers.append(self.headers.get("Authorization"))
                if hub.redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", hub.redirect_to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = hub.files.get(self.path)
                if data is None:
                    self.send_error(404, "Entry not found")
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if hub.cut_after is not None:
                    self.wfile.write(body[: hub.cut_after])
                    hub.cut_after = None
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
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
    result = cli("pull", "tinyhub")
    assert result.exit_code == 0, result.stderr
    local = hub_local_path("org/tiny-GGUF", "tiny-target.gguf")
    assert local.read_bytes() == tiny_pair[0].read_bytes()
    assert cli("profile", "check", "tinyhub").exit_code == 0
    report = json.loads(cli("run", "-p", "tinyhub", "--raw", "--json", "--max-tokens", "4", "the cat").output)
    assert len(report["tokens"]) == 4 and report["model"]["target"] == str(local)
    again = cli("pull", "tinyhub")
    assert again.exit_code == 0 and "have org/tiny-GGUF/tiny-target.gguf" in again.stderr


def test_interrupted_pull_resumes_with_a_range_request(hub: FakeHub, tiny_pair: tuple[Path, Path]) -> None:
    write_hub_profile()
    hub.cut_after = 50_000
    first = cli("pull", "tinyhub")
    assert first.exit_code == 1 and ("run again to resume" in first.stderr or "to resume" in first.stderr)
    local = hub_local_path("org/tiny-GGUF", "tiny-target.gguf")
    partial = local.with_name(local.name + ".partial")
    assert not local.exists() and partial.stat().st_size == 50_000
    second = cli("pull", "tinyhub")
    assert second.exit_code == 0, second.stderr
    assert "bytes=50000-" in hub.range_headers
    assert local.read_bytes() == tiny_pair[0].read_bytes() and not partial.exists()


def test_the_token_goes_to_the_hub_but_not_to_a_redirect_host(hub: FakeHub, tiny_pair, monkeypatch) -> None:
    cdn = FakeHub(dict(hub.files))
    try:
        hub.redirect_to = cdn.endpoint.replace("127.0.0.1", "localhost")  # another host name
        monkeypatch.setenv("HF_TOKEN", "secret")
        write_hub_profile()
        result = cli("pull", "tinyhub")
        assert result.exit_code == 0, result.stderr
        assert hub.auth_headers and all(h == "Bearer secret" for h in hub.auth_headers)
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


def test_auto_draft_can_make_one_when_nothing_fits(tmp_path: Path, tiny_pair: tuple[Path, Path]) -> None:
    target = tmp_path / "target.gguf"
    target.write_bytes(tiny_pair[0].read_bytes())
    added = cli("profile", "add", "made", "--target", str(target), "--draft", "auto", "--make-draft")
    assert added.exit_code == 0, added.stderr
    draft = tmp_path / "target.draft-q4_0.gguf"
    assert draft.is_file() and "wrote" in added.stderr
    assert json.loads(cli("profile", "show", "made", "--json").output)["draft.path"]["value"] == str(draft.resolve())
    assert cli("profile", "check", "made").exit_code == 0


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
    drafts = json.loads(cli("models", "drafts", str(folder / "smol-f32.gguf"), str(folder), "--json").output)
    assert [Path(d["path"]).name for d in drafts] == ["smol-q4_1.gguf"]
    assert 0.1 < drafts[0]["size_ratio"] < 0.3
