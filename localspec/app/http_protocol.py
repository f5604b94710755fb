"""uvicorn's HTTP/1.1 protocol (h11) with a deadline on each request's line and headers.

uvicorn waits for a request's headers for ever: a connection that sends nothing, or a byte of its headers now
and then (a "slow loris"), holds a socket and a file descriptor until the client lets go, and enough of them
leave the server none. Its keep-alive timeout covers only the wait between requests, and ends at their first
byte. Here a request line and headers that take more than `HEADER_SECONDS` to arrive in whole are answered 408
and the connection closed (as JSON, as h11's refusals of what it cannot read are). (The body has deadlines of
its own: `serving._read_body`.) A response sent before the request's body was read (a 404, a 401, a 413) leaves
uvicorn reading the rest for ever, however slowly it comes: the rest gets HEADER_SECONDS more, then the
connection is closed. A request h11 cannot read is answered with h11's reason. (A client that ends its side
of the connection is taken to have left, as Go's server takes it: a half-close cannot be told from a close,
and a client gone must stop its generation.)
"""

from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .openai_request import ApiError

HEADER_SECONDS = 30.0
LATE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n%s")


def error_body(status: int, message: str, code: str) -> bytes:
    """`ApiError`'s JSON as bytes: the protocol's own answers are OpenAI error objects too."""
    return json.dumps(ApiError(status, message, code=code).body()).encode()


class H11WithHeaderDeadline(H11Protocol):
    """H11Protocol that closes a connection whose request line and headers, counted from the connection or from
    the first byte after the last response, take longer than HEADER_SECONDS to arrive."""

    header_deadline: asyncio.TimerHandle | None = None
    unread_body_deadline: asyncio.TimerHandle | None = None
    unreadable_because: str | None = None  # what h11 found wrong in the last request it could not read

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch_headers()
        next_event = self.conn.next_event

        def next_event_noting_why() -> object:  # (uvicorn answers "Invalid HTTP request received." alone)
            try:
                return next_event()
            except h11.RemoteProtocolError as exc:
                self.unreadable_because = str(exc)[:200]
                raise

        self.conn.next_event = next_event_noting_why  # type: ignore[method-assign]

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_headers()
        if self.unread_body_deadline is not None and self.conn.their_state is not h11.SEND_BODY:
            self.unread_body_deadline.cancel()  # (the rest came: the next request is the header deadline's)
            self.unread_body_deadline = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        body_unread = self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing()
        if body_unread and self.unread_body_deadline is None:
            self.unread_body_deadline = self.loop.call_later(HEADER_SECONDS, self._body_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_watching()
        if self.unread_body_deadline is not None:
            self.unread_body_deadline.cancel()
        super().connection_lost(exc)

    def _watch_headers(self) -> None:
        """Start the deadline while a request's headers are awaited (h11 says the client is IDLE until they are
        in whole); stop it once they are. Between requests uvicorn's keep-alive timeout rules, until a byte comes."""
        awaited = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if awaited and self.header_deadline is None and (self.cycle is None or self.cycle.response_complete):
            self.header_deadline = self.loop.call_later(HEADER_SECONDS, self._headers_late)
        elif not awaited:
            self._stop_watching()

    def _stop_watching(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def _headers_late(self) -> None:
        self.header_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        body = error_body(408, f"the request's headers did not arrive in {HEADER_SECONDS:.0f} s", "request_timeout")
        self.transport.write(LATE % (len(body), body))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 cannot read (a malformed request line or header, headers too large,
        a broken chunk of a body), as JSON rather than plain text, saying what h11 found wrong. A request being
        answered already (its body's next chunk broken) is told its client is gone: its own answer, or the rest
        of it, has nowhere to go (it raised h11's LocalProtocolError, a traceback on stderr)."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()  # (a request reading its body learns of it)
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # (else a response is begun: closing ends it)
            why = msg.rstrip(".") + (f": {self.unreadable_because}" if self.unreadable_because else "")
            body = error_body(400, why, "invalid_http_request")
            headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                       (b"content-length", b"%d" % len(body))]  # (not chunked, as h11 would frame it otherwise)
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                          h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
        self.transport.close()

    def _body_late(self) -> None:
        self.unread_body_deadline = None
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self.transport.close()  # (the response is sent: nothing more to say)
