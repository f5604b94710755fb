"""Which web pages may use `serve` and under which host names it answers (`app/web_origin.py`), on a bare
Starlette app: the checks need no model."""

from __future__ import annotations

import socket

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from localspec.app.web_origin import (
    PageCors,
    PageGuard,
    allowed_origin,
    canonical_origin,
    host_refusal,
    is_loopback_address,
    origin_allowed,
)


@pytest.mark.parametrize(("origin", "canonical"), [
    ("https://UI.example", "https://ui.example"),
    ("https://ui.example:443", "https://ui.example"),  # (browsers leave a default port out)
    ("http://ui.example:80/", "http://ui.example"),
    ("http://ui.example:8443", "http://ui.example:8443"),
    ("https://bücher.example", "https://xn--bcher-kva.example"),  # (browsers send the punycode form)
    ("http://[::1]:3000", "http://[::1]:3000"),
    ("tauri://localhost", "tauri://localhost"),
    ("chrome-extension://abcdefghij", "chrome-extension://abcdefghij"),
    ("http://[::1", None), ("http://]", None), ("http://a]b", None),  # (urlsplit raises on them)
    ("http://x:99999", None), ("https://ui2.example?", None), ("https://ui.example#", None),
    ("https://user:pw@ui.example", None), ("https://ui.example/app", None), ("ui.example", None), ("null", None),
    ("", None),
    # (UTS 46, as browsers: IDNA 2003 wrote faß.de as fass.de, another domain, and allowed it)
    ("https://faß.de", "https://xn--fa-hia.de"),
    ("https://[2001:DB8:0:0::1]:3000", "https://[2001:db8::1]:3000"),  # (browsers write an IPv6 address short)
    ("http://[::1]x", None), ("http://a b", None), ("http://*.example.com", None),  # (were taken: none ever matches)
])
def test_an_origin_is_compared_as_a_browser_writes_it(origin: str, canonical: str | None) -> None:
    assert canonical_origin(origin) == canonical


def test_allow_origin_takes_origins_and_any_and_refuses_null_and_urls_that_are_no_origin() -> None:
    assert allowed_origin("*") == "*" and allowed_origin("https://UI.example:443/") == "https://ui.example"
    with pytest.raises(ValueError, match="`null`.*`\\*` allows every page"):
        allowed_origin("null")
    for bad in ("https://[::1", "https://ui.example/app", "ui.example"):
        with pytest.raises(ValueError, match="SCHEME://HOST"):
            allowed_origin(bad)
    with pytest.raises(ValueError, match="a wildcard within an origin is not taken"):
        allowed_origin("https://*.example.com")


def test_this_machines_pages_and_those_allowed_may_use_the_server_and_no_other() -> None:
    allowed = frozenset({"https://ui.example", "tauri://localhost"})
    for origin in ("http://localhost:3000", "http://LOCALHOST:3000", "http://localhost.:3000", "http://127.0.0.1",
                   "http://app.localhost:5173", "http://[::1]:8080", "http://0.0.0.0:3000",
                   "https://UI.example:443", "tauri://localhost"):
        assert origin_allowed(origin, allowed), origin
    for origin in ("https://evil.example", "http://localhost.evil.example", "http://127.0.0.1.nip.io", "null",
                   "file://", "ws://localhost", "http://evil.example@localhost", "http://[::1", "tauri://evil"):
        assert not origin_allowed(origin, allowed), origin
    assert origin_allowed("null", frozenset({"*"}))


def test_the_host_name_is_checked_where_the_server_listens_on_loopback_only() -> None:
    for host in ("localhost:8080", "LOCALHOST.", "[::1]:8080", "127.0.0.1", "192.168.1.5:8080", "0.0.0.0",
                 socket.gethostname(), f"{socket.gethostname()}.local"):
        assert host_refusal(host, "127.0.0.1") is None, host
    refused = host_refusal("api.example.com", "127.0.0.1")
    assert refused is not None and "host name 'api.example.com' is refused" in refused
    assert host_refusal("evil.example", "::1") is not None
    assert host_refusal("api.example.com", "0.0.0.0") is None  # (reachable under any name: not checked)
    assert host_refusal("api.example.com", "::") is None and host_refusal("api.example.com", "192.168.1.5") is None
    # On every address, over loopback, as on loopback (was: a rebound page read /v1/models and /metrics there).
    for everywhere, client in (("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("::", "::ffff:127.0.0.1")):
        assert host_refusal("rebind.example:8080", everywhere, client) is not None
        assert host_refusal(f"{socket.gethostname()}:8080", everywhere, client) is None
    assert host_refusal("api.example.com", "0.0.0.0", "192.168.1.7") is None  # (a client elsewhere: any name)
    assert host_refusal("api.example.com", "192.168.1.5", "127.0.0.1") is None
    assert is_loopback_address("::ffff:127.0.0.1") and not is_loopback_address("::ffff:10.0.0.1")


@pytest.fixture
def guarded() -> TestClient:
    """A bare app behind `PageGuard` and `PageCors`, as `serve` puts them, allowing https://ui.example."""
    async def hello(request: object) -> PlainTextResponse:
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/v1/models", hello, methods=["GET", "POST"])])
    pages = frozenset({"https://ui.example"})
    return TestClient(PageGuard(PageCors(app, allowed_origins=pages), allowed_origins=pages,
                                listening_on="127.0.0.1"), base_url="http://localhost")


def test_a_malformed_origin_is_a_403_with_an_error_body_not_a_server_error(guarded: TestClient) -> None:
    for origin in ("http://[::1", "http://]", "http://[evil.com]", "x" * 5000):
        refused = guarded.get("/v1/models", headers={"Origin": origin})
        assert refused.status_code == 403, origin
        assert refused.json()["error"]["code"] == "origin_not_allowed"
        assert len(refused.json()["error"]["message"]) < 300  # (a long origin is shortened)


def test_preflights_of_allowed_pages_pass_and_others_get_the_403(guarded: TestClient) -> None:
    asked = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type, authorization"}
    public = guarded.options("/v1/models", headers={**asked, "Origin": "https://ui.example",
                                                    "Access-Control-Request-Private-Network": "true"})
    assert public.status_code == 200 and public.headers["access-control-allow-origin"] == "https://ui.example"
    assert public.headers["access-control-allow-private-network"] == "true"  # (as Chrome asks of a public page)
    local = guarded.options("/v1/models", headers={**asked, "Origin": "http://LOCALHOST:3000"})
    assert local.status_code == 200 and local.headers["access-control-allow-origin"] == "http://LOCALHOST:3000"
    other = guarded.options("/v1/models", headers={**asked, "Origin": "https://other.example"})
    assert other.status_code == 403 and "'https://other.example' are refused" in other.json()["error"]["message"]
    answered = guarded.post("/v1/models", headers={"Origin": "http://localhost.:3000"})
    assert answered.text == "hello" and answered.headers["access-control-allow-origin"] == "http://localhost.:3000"
