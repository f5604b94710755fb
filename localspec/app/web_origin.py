"""Which web pages may call `serve`, and under which host names it answers.

A browser lets any page send a "simple" request (`Content-Type: text/plain`, no preflight) to any address,
`http://127.0.0.1:8080` among them: without these checks a page could make a keyless local server generate
(cross-site request forgery), and a page whose name is made to resolve to 127.0.0.1 (DNS rebinding) could read
the replies too. As Ollama does: a request that carries an `Origin` (browsers send it; programs do not) is
answered where that origin is this machine's (localhost, a loopback address) or one the operator allows
(`serve --allow-origin`); and a server listening on a loopback address answers only under a loopback host name,
an IP address or this machine's own name.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

import idna
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

ANY_ORIGIN = "*"


DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_SHOWN = 100  # characters of a refused origin or host name quoted in the refusal


def is_loopback_name(host: str) -> bool:
    """Whether `host` (a name or an address, without a port or brackets) names this machine's loopback."""
    host = host.lower().rstrip(".")
    return host == "localhost" or host.endswith(".localhost") or is_loopback_address(host)


def is_loopback_address(address: str) -> bool:
    """Whether `address` is an IP address of this machine's loopback (127.0.0.0/8, ::1, and 127.0.0.0/8 written
    as IPv6, as a server listening on `::` sees an IPv4 client); a name is not."""
    ip = _ip_address(address)
    if ip is None:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _ip_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _names_this_machine(host: str) -> bool:
    """Whether a page's host (no port or brackets) is on this machine: a loopback name or address, or the
    address that stands for all of this machine's (0.0.0.0, ::), which dev servers print."""
    ip = _ip_address(host)
    return is_loopback_name(host) or (ip is not None and ip.is_unspecified)


_HOST_NAME = re.compile(r"[a-z0-9_.-]+")  # (the characters of an ASCII host name, as URLs write them)


def canonical_origin(origin: str) -> str | None:
    """`origin` as a browser writes an `Origin`: SCHEME://HOST[:PORT] in lower case, the scheme's default port
    left out, a name in other scripts as its ASCII (punycode) form; None where it is no origin (no scheme or
    host, a path, query, fragment or user, a port out of range, or no URL at all)."""
    text = origin.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    if (not parts.scheme or not parts.hostname or "@" in parts.netloc or parts.path not in ("", "/")
            or "?" in text or "#" in text):
        return None
    written = parts.netloc.lower()
    written_host = written[:written.index("]") + 1] if written.startswith("[") and "]" in written else \
        written.rpartition(":")[0] if port is not None or written.endswith(":") else written
    if written[len(written_host):] not in ("", ":", f":{port}") or written_host.strip("[]") != parts.hostname:
        return None  # (`http://[::1]x`: not the host it would be read as)
    try:  # (as browsers write a name in other scripts: UTS 46, `faß.de` as xn--fa-hia.de, not IDNA 2003's fass.de)
        host = idna.encode(parts.hostname, uts46=True).decode("ascii") if not parts.hostname.isascii() else \
            parts.hostname
    except UnicodeError:
        return None
    ip = _ip_address(host)
    if ip is not None:
        host = f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    elif not _HOST_NAME.fullmatch(host):
        return None  # (a space, a wildcard `*.example.com`: no browser sends it)
    if port is not None and DEFAULT_PORTS.get(parts.scheme) != port:
        host = f"{host}:{port}"
    return f"{parts.scheme}://{host}"


def allowed_origin(origin: str) -> str:
    """A value of `serve --allow-origin` as it is compared (`*` stays `*`); ValueError where it is no origin."""
    if origin.strip() == ANY_ORIGIN:
        return ANY_ORIGIN
    if origin.strip().lower() == "null":
        raise ValueError("a page without an origin (`null`: a sandboxed frame or a local file, of any site) cannot"
                         " be allowed on its own; `*` allows every page")
    canonical = canonical_origin(origin)
    if canonical is None and "*" in origin:
        raise ValueError("a wildcard within an origin is not taken: give each origin (the option may be repeated),"
                         " or * for any page")
    if canonical is None:
        raise ValueError("give a web page's origin, SCHEME://HOST[:PORT] (no path), such as https://ui.example,"
                         " http://localhost:3000 or tauri://localhost, or * for any page")
    return canonical


def origin_allowed(origin: str, allowed: frozenset[str]) -> bool:
    """Whether a page of `origin` (an `Origin` header) may use the server: any page where `allowed` holds `*`,
    those it names (`allowed_origin`'s forms), and this machine's own http(s) pages."""
    if ANY_ORIGIN in allowed:
        return True
    canonical = canonical_origin(origin)
    if canonical is None:
        return False
    if canonical in allowed:
        return True
    parts = urlsplit(canonical)
    return parts.scheme in DEFAULT_PORTS and _names_this_machine(parts.hostname or "")


def origin_refusal(origin: str | None, allowed: frozenset[str]) -> str | None:
    """Why a request from a page of `origin` (the `Origin` header; None: not from a browser) is refused, or None."""
    if origin is None or origin_allowed(origin, allowed):
        return None
    return (f"requests from the web page {_shown(origin)} are refused (a page may not use this server unless"
            " `localspec serve --allow-origin ORIGIN` allows it)")


def host_name(host_header: str) -> str:
    """The name in a `Host` header, without its port (`[::1]:8080` -> `::1`)."""
    host = host_header.strip()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def host_refusal(host_header: str | None, listening_on: str | None, client: str | None = None) -> str | None:
    """Why a request under `host_header` to a server listening on the address `listening_on`, from the address
    `client`, is refused, or None.

    A server on a loopback address can be reached only from this machine, by a program or by a page that names
    it: a page that names it otherwise than by a loopback name, an IP address or this machine's own name is
    a page whose name was made to resolve to 127.0.0.1 (DNS rebinding, which needs a name). So is a request over
    loopback to a server listening on every address (`0.0.0.0`, `::`). A server listening on other addresses,
    or on every address to a client elsewhere, is reachable under any name, and not checked."""
    if host_header is None or listening_on is None:
        return None
    everywhere = _ip_address(listening_on) is not None and _ip_address(listening_on).is_unspecified
    if not (is_loopback_address(listening_on) or everywhere and client is not None and is_loopback_address(client)):
        return None
    name = host_name(host_header).lower().rstrip(".")
    this_machine = socket.gethostname().lower()
    if not name or is_loopback_name(name) or _ip_address(name) is not None or name in (this_machine,
                                                                                         f"{this_machine}.local"):
        return None
    return (f"host name {_shown(name)} is refused: over this machine's loopback this server answers to localhost,"
            " an IP address or this machine's name (a proxy must pass one of them as Host)")


def _shown(text: str) -> str:
    """Text from a request quoted in a refusal, at most MAX_SHOWN characters of it."""
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…")


class PageGuard:
    """ASGI middleware, the outermost: a request from a page that may not use the server (`origin_refusal`) or
    under a host name it does not answer to (`host_refusal`) is a 403, preflights included."""

    def __init__(self, app: ASGIApp, allowed_origins: frozenset[str], listening_on: str | None = None) -> None:
        """`listening_on`: the address the server listens on (None: the address each connection reached)."""
        self.app, self.allowed_origins, self.listening_on = app, allowed_origins, listening_on

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.refusal(scope) if scope["type"] == "http" else None
        if refused is None:
            await self.app(scope, receive, send)
            return
        message, code = refused
        body = {"error": {"message": message, "type": "permission_error", "param": None, "code": code}}
        await JSONResponse(body, status_code=403)(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[str, str] | None:
        """Why the request is refused and the error's code, or None."""
        headers = Headers(scope=scope)
        refused = origin_refusal(headers.get("origin"), self.allowed_origins)
        if refused is not None:
            return refused, "origin_not_allowed"
        server, client = scope.get("server"), scope.get("client")
        refused = host_refusal(headers.get("host"), self.listening_on or (server[0] if server else None),
                               client[0] if client else None)
        return (refused, "host_not_allowed") if refused is not None else None


class PageCors(CORSMiddleware):
    """starlette's CORS headers and preflights, for the pages `origin_allowed` lets in (a public page's preflight
    to this machine asks for private network access too, as browsers do, and gets it)."""

    def __init__(self, app: ASGIApp, allowed_origins: frozenset[str]) -> None:
        super().__init__(app, allow_methods=["GET", "HEAD", "POST"], allow_headers=["*"], allow_private_network=True)
        self.allowed_origins = allowed_origins

    def is_allowed_origin(self, origin: str) -> bool:
        return origin_allowed(origin, self.allowed_origins)
