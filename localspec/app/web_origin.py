"""Which web pages may call `serve`, and under which host names it answers.

A browser lets any page send a "simple" request (`Content-Type: text/plain`, no preflight) to any address,
`http://127.0.0.1:8080` among them: without these checks a page could make a keyless local server generate
(cross-site request forgery), and a page whose name is made to resolve to 127.0.0.1 (DNS rebinding) could read
the replies too. As Ollama does: a request that carries an `Origin` (browsers send it; programs do not) is
answered where that origin is this machine's (localhost, a loopback address) or one the operator allows
(`serve --allow-origin`); and a connection to a loopback address is answered only under a loopback host name or
this machine's own name.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

ANY_ORIGIN = "*"


def is_loopback_name(host: str) -> bool:
    """Whether `host` (a name or an address, without a port or brackets) names this machine's loopback."""
    host = host.lower().rstrip(".")
    return host == "localhost" or host.endswith(".localhost") or is_loopback_address(host)


def is_loopback_address(address: str) -> bool:
    """Whether `address` is an IP address of this machine's loopback (127.0.0.0/8, ::1); a name is not."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The name in a `Host` header, without its port (`[::1]:8080` -> `::1`)."""
    host = host_header.strip()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def normalized_origin(origin: str) -> str:
    """An origin as it is compared: lower case, no trailing slash."""
    return origin.strip().lower().rstrip("/")


def origin_refusal(origin: str | None, allowed: tuple[str, ...]) -> str | None:
    """Why a request from a page of `origin` (the `Origin` header; None: not from a browser) is refused, or None."""
    if origin is None or ANY_ORIGIN in allowed or normalized_origin(origin) in allowed:
        return None
    parts = urlsplit(origin.strip())
    if parts.scheme in ("http", "https") and is_loopback_name(parts.hostname or ""):
        return None
    return (f"requests from the web page {origin!r} are refused (a page may not use this server unless"
            " `localspec serve --allow-origin ORIGIN` allows it)")


def host_refusal(host_header: str | None, server_address: str | None) -> str | None:
    """Why a request under `host_header` that reached `server_address` (the address it was sent to) is refused, or
    None: on a loopback address, a host name that is neither a loopback one nor this machine's is a page whose
    name was made to resolve to 127.0.0.1."""
    if host_header is None or server_address is None or not is_loopback_address(server_address):
        return None
    name = host_name(host_header)
    if not name or is_loopback_name(name) or name.lower() == socket.gethostname().lower():
        return None
    return (f"host name {name!r} is refused: this server listens on this machine's loopback only, and answers"
            " to localhost or a loopback address")
