"""Hub-referenced model files, fetched with `huggingface_hub`.

Files live in the shared Hugging Face cache, so a model another tool fetched is
not fetched twice, and `huggingface_hub` brings resumable downloads, tokens
(`HF_TOKEN`), mirrors (`HF_ENDPOINT`), offline mode (`HF_HUB_OFFLINE`) and the
hub's storage changes. Files pulled into localspec's own models folder by
earlier versions (`<models>/<org>/<repo>/<file>`) are still found there.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlsplit

import huggingface_hub  # its functions load on first use (the package's own lazy imports), so this is cheap

from ..config.paths import hub_reference_problem, models_dir
from ..errors import InputError, LocalspecError
from .gguf import read_gguf_header

if TYPE_CHECKING:
    import tqdm

ProgressCallback = Callable[[int, int | None], None]


def _check_reference(repo: str, filename: str) -> None:
    """InputError unless `repo` is a repository id the hub takes ('org/name') and `filename` a path inside it."""
    _check_endpoint()
    problem = hub_reference_problem(repo, filename)
    if problem is not None:
        raise InputError(f"invalid hub reference {repo}/{filename}: {problem} (expected hf_repo = 'org/name' and a file inside it)")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        raise InputError(f"invalid hub repository {repo!r}: {' '.join(str(exc).split())}") from None


def _endpoint() -> str | None:
    """HF_ENDPOINT as it is now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT") or None


def _check_endpoint(to_download: bool = False) -> None:
    """InputError when HF_ENDPOINT is set to what huggingface_hub cannot even import with (a URL whose port does
    not parse); `to_download`: also unless it is an http(s) URL with a host."""
    endpoint = _endpoint()
    if endpoint is None:
        return
    problem = None
    try:
        url = urlsplit(endpoint)
        url.port  # noqa: B018 (parses the port: ValueError when it is not a number in range)
        if to_download and (url.scheme not in ("http", "https") or not url.hostname):
            problem = "expected http(s)://host[:port]"
    except ValueError as exc:
        problem = str(exc)
    if problem is not None:
        raise InputError(f"HF_ENDPOINT {endpoint!r} is not a hub URL ({problem})")


def _cache_dir() -> str | None:
    """HF_HUB_CACHE as it is now; None: huggingface_hub's default (~/.cache/huggingface/hub)."""
    return os.environ.get("HF_HUB_CACHE") or None


def _legacy_path(repo: str, filename: str) -> Path:
    return models_dir() / repo / filename


def hub_local_path(repo: str, filename: str) -> Path | None:
    """The downloaded file for `repo`/`filename`, or None when it is not downloaded yet."""
    _check_reference(repo, filename)
    legacy = _legacy_path(repo, filename)
    if legacy.is_file():
        return legacy
    cached = huggingface_hub.try_to_load_from_cache(repo, filename, cache_dir=_cache_dir())
    return Path(cached) if isinstance(cached, str) else None


def download(repo: str, filename: str, on_progress: ProgressCallback | None = None,
             hub_answered: bool = False) -> Path:
    """Fetch `filename` from hub repo `repo` (resuming a partial download); return its local path.

    Raises LocalspecError with one line for every failure: HTTP status, network,
    offline mode, or a file that turns out not to be GGUF. First checks that the hub
    answers at all (`_hub_problem`), unless the caller just did (`hub_answered`).
    """
    _check_reference(repo, filename)
    _check_endpoint(to_download=True)
    where = f"{repo}/{filename}"
    problem = None if hub_answered else _hub_problem()
    if problem is not None:
        raise LocalspecError(f"download of {where} failed: {problem}")
    # Its retries and resumptions are its own business: what failed in the end is said in one line below.
    huggingface_hub.utils.logging.set_verbosity_error()
    try:
        path = Path(
            huggingface_hub.hf_hub_download(
                repo,
                filename,
                endpoint=_endpoint(),
                cache_dir=_cache_dir(),
                local_files_only=_offline(),  # HF_HUB_OFFLINE as it is now (huggingface_hub reads it at import)
                tqdm_class=_reporting_progress(on_progress),
            )
        )
    except huggingface_hub.errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        reason = _HTTP_REASONS.get(status, _first_line(exc))
        raise LocalspecError(f"download of {where} failed: HTTP {status or '?'} ({reason})") from None
    except (huggingface_hub.errors.OfflineModeIsEnabled, huggingface_hub.errors.EntryNotFoundError) as exc:
        # (LocalEntryNotFoundError, one of these, is the lookup that failed: the error behind it says why)
        reason = "HF_HUB_OFFLINE is set and the file is not in the cache" if _offline() else _lookup_problem(exc)
        raise LocalspecError(f"download of {where} failed: {reason}") from None
    except Exception as exc:  # transport errors of the HTTP client (connection refused, reset, timeouts)
        raise LocalspecError(
            f"download of {where} failed ({type(exc).__name__}: {_first_line(exc)}); run the same command to resume"
        ) from None
    problem = unusable_download(path)
    if problem is not None:
        raise LocalspecError(f"downloaded {where} is not a usable GGUF model ({problem}): removed from the hub cache"
                             " (a later pull downloads it again)")
    return path


def unusable_download(path: Path) -> str | None:
    """Why a downloaded file is no GGUF model (one in the hub cache is then removed, with the cached blob its
    snapshot links to, so that it is not taken for downloaded again); None where it is one. Nothing outside
    the hub cache is removed: a file in the models folder, or one a link there leads to, is the user's."""
    try:
        read_gguf_header(path)
    except InputError as exc:
        if in_hub_cache(path):
            with contextlib.suppress(OSError):
                blob = path.resolve()
                path.unlink()
                if blob != path and blob.is_relative_to(_real_cache_root()):
                    blob.unlink()
        return str(exc)
    return None


def in_hub_cache(path: Path) -> bool:
    """Whether `path` (not what a link there leads to) lies in the hub cache, where localspec downloads (either
    reached through links: `~/.cache` often is one)."""
    return _real_folder_of(path).is_relative_to(_real_cache_root())


def _real_folder_of(path: Path) -> Path:
    """`path` with the links in its folder resolved, not a link it is itself."""
    return Path(os.path.realpath(os.path.dirname(os.path.abspath(path)))) / path.name


def hub_cache_folder() -> Path:
    """The hub cache's folder, where `pull` downloads (HF_HUB_CACHE, else huggingface_hub's default)."""
    return Path(os.path.expanduser(_cache_root()))


def _real_cache_root() -> Path:
    return Path(os.path.realpath(hub_cache_folder()))


def _cache_root() -> str:
    """The hub cache's folder (HF_HUB_CACHE as it is now, else huggingface_hub's default)."""
    from huggingface_hub import constants

    return _cache_dir() or constants.HF_HUB_CACHE


def _hub_problem() -> str | None:
    """Why the hub (or HF_ENDPOINT's mirror) is not worth a download now: it cannot be reached, or it takes
    connections and never answers (`_unreachable`, `_silent`); None where it answers, or offline (the cache
    is all there is then: the download says so)."""
    if _offline():
        return None
    endpoint = _endpoint() or DEFAULT_ENDPOINT
    return _unreachable(endpoint) or _silent(endpoint)


def _lookup_problem(exc: Exception) -> str:
    """Why huggingface_hub could not look a file up, from the error behind its "check your connection" message:
    the endpoint's HTTP status (a mirror's 404), or its failure to answer."""
    endpoint = _endpoint() or DEFAULT_ENDPOINT
    cause = exc.__cause__
    from huggingface_hub.errors import HfHubHTTPError  # (loaded by a download; not by every caller)

    if isinstance(cause, HfHubHTTPError):
        status = cause.response.status_code if cause.response is not None else None
        return f"HTTP {status or '?'} from {endpoint} ({_HTTP_REASONS.get(status, _first_line(cause))})"
    if cause is not None:
        through = " through the proxy (HTTPS_PROXY, HTTP_PROXY or ALL_PROXY: check it)" if _through_a_proxy() else ""
        return f"the lookup at {endpoint}{through} failed ({type(cause).__name__}: {_first_line(cause)})"
    return _first_line(exc)


_HTTP_REASONS = {
    401: "not authorised: set HF_TOKEN for a gated or private repository",
    403: "forbidden: accept the model's licence on the hub, and set HF_TOKEN",
    404: "no such repository or file on the hub",
}


DEFAULT_ENDPOINT = "https://huggingface.co"
CONNECT_TIMEOUT_S = 10.0


def _offline() -> bool:
    """Offline mode as huggingface_hub decides it (HF_HUB_OFFLINE, or TRANSFORMERS_OFFLINE), as the environment is now."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def _through_a_proxy() -> bool:
    """Whether downloads go through a proxy (environment, or the system's settings on macOS and Windows)."""
    import urllib.request  # (only when downloading)

    return any(scheme in urllib.request.getproxies() for scheme in ("http", "https", "all"))


def _unreachable(endpoint: str) -> str | None:
    """Why the hub at `endpoint` cannot be reached at all (no name, no route, refused), or None.

    huggingface_hub retries such failures with back-off for about 20 s, printing a
    line each time; a name that does not resolve or a refused connection will not
    mend in that time. Through a proxy the host is the proxy's to reach: not checked.
    """
    if _through_a_proxy():
        return None
    url = urlsplit(endpoint)  # (checked by `_check_endpoint`)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    advice = "check HF_ENDPOINT" if _endpoint() else "no network, or set HF_ENDPOINT to a mirror"
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:  # (socket.gaierror is an OSError)
        return f"cannot find {host} ({exc.args[-1] if exc.args else exc}): {advice}"
    deadline = time.monotonic() + CONNECT_TIMEOUT_S  # for all the addresses together
    last: OSError | None = None
    for family, kind, protocol, _, address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            last = TimeoutError()
            break
        try:
            with socket.socket(family, kind, protocol) as connection:
                connection.settimeout(left)
                connection.connect(address)
            return None
        except OSError as exc:
            last = exc
    reason = "timed out" if isinstance(last, TimeoutError) else (last.strerror or str(last)) if last else "no address"
    return f"cannot connect to {where} ({reason}): {advice}"


ANSWER_TIMEOUT_S = 20.0


def _silent(endpoint: str) -> str | None:
    """Why the hub at `endpoint` is not worth waiting for: it takes connections but sends no HTTP answer at all
    (a stalled mirror; huggingface_hub would retry it for minutes), or None. Any answer, an error status
    included, or any other failure is left to the download, which explains those."""
    import urllib.error
    import urllib.request  # (only when downloading)

    try:
        with urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=ANSWER_TIMEOUT_S):
            return None
    except urllib.error.HTTPError:  # (an answer)
        return None
    except (TimeoutError, urllib.error.URLError) as exc:
        if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
            advice = "check HF_ENDPOINT" if _endpoint() else "try again later, or set HF_ENDPOINT to a mirror"
            return f"{endpoint} took the connection but sent no answer in {ANSWER_TIMEOUT_S:g} s: {advice}"
        return None
    except Exception:  # (a certificate, a protocol error: the download's own error says it better)
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _reporting_progress(on_progress: ProgressCallback | None) -> type[tqdm.tqdm]:
    """A silent tqdm class that forwards (bytes done, total) to `on_progress`."""
    import tqdm  # only a download needs it: `run` and `chat` start without it

    class ReportingProgress(tqdm.tqdm):
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self.done = int(kwargs.get("initial") or 0)  # type: ignore[call-overload]
            self.expected = kwargs.get("total")

        def update(self, n: float | None = 1) -> bool | None:
            self.done += int(n or 0)
            if on_progress is not None:
                on_progress(self.done, self.expected)  # type: ignore[arg-type]
            return None

    return ReportingProgress
