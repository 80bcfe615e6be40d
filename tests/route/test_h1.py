"""The gateway's HTTP/1.1 transport (httptools over the netio backend), against real
loopback servers that answer in each of the ways HTTP/1.1 allows — and some it does not."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable

import httpx
import pytest

from tierwise.route.h1 import H1Transport, Origin
from tierwise.route.netio import AsyncioBackend
from tierwise.route.upload import watch_backend

Answer = Callable[[bytes, bytes], list[bytes]]  # (request head, body) -> what to write


def ok(body: bytes = b"hello", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class Loopback:
    """A loopback server's ending and address (the servers below share them)."""

    server: asyncio.AbstractServer | None

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


class Server(Loopback):
    """A loopback HTTP/1.1 server: each request's answer comes from ``answer``; it counts
    connections and requests, and closes a connection when the answer ends with None."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                body = b""
                if m := re.search(rb"(?i)content-length: *(\d+)", head):
                    body = await r.readexactly(int(m.group(1)))
                elif re.search(rb"(?i)transfer-encoding: *chunked", head):
                    while (size := int((await r.readuntil(b"\r\n")).strip(), 16)) > 0:
                        body += (await r.readexactly(size + 2))[:-2]
                    await r.readuntil(b"\r\n")
                self.requests.append((head, body))
                for piece in self.answer(head, body):
                    if piece is None:
                        w.close()
                        return
                    w.write(piece)
                    await w.drain()
                    await asyncio.sleep(0.01)  # pieces arrive apart
        except (asyncio.IncompleteReadError, ConnectionError):
            w.close()


def transport(**kw) -> H1Transport:
    return H1Transport(watch_backend(AsyncioBackend()), **kw)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_keep_alive_reuses_one_connection_and_sends_head_and_body() -> None:
    async def main():
        async with Server(lambda h, b: [ok(b"echo:" + b)]) as srv:
            async with httpx.AsyncClient(transport=transport(), base_url=srv.url) as c:
                answers = [await c.post("/v1/x", content=b"abc%d" % i) for i in range(5)]
            return srv, answers

    srv, answers = run(main())
    assert [a.text for a in answers] == [f"echo:abc{i}" for i in range(5)]
    assert srv.connections == 1
    head, body = srv.requests[0]
    assert head.startswith(b"POST /v1/x HTTP/1.1\r\n") and b"content-length: 4" in head.lower()
    assert body == b"abc0"


def test_send_speaks_raw_bytes_over_the_pool_httpx_shares() -> None:
    """The gateway's direct path (:meth:`H1Transport.send`): header pairs out as given,
    after ``Host`` and before ``Content-Length``; the answer's pairs back as sent (case,
    repeats); its body whole or as it arrives — on the keep-alive connection the httpx
    side then uses too."""

    def answer(head: bytes, body: bytes) -> list[bytes]:
        echo = b"echo:" + body
        return [b"HTTP/1.1 201 Created\r\nX-One: a\r\nset-cookie: 1\r\nset-cookie: 2\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(echo), echo)]  # fmt: skip

    async def main():
        async with Server(answer) as srv:
            t = transport()
            origin, timeout = Origin.of(httpx.URL(srv.url)), httpx.Timeout(5).as_dict()
            a = await t.send(origin, b"POST", b"/v1/x?q=1", [(b"x-key", b"v")], b"abc", timeout)
            whole = await a.aread()
            b = await t.send(origin, b"POST", b"/v1/y", [], b"", timeout)
            pieces = [p async for p in b.aiter_raw()]
            async with httpx.AsyncClient(transport=t, base_url=srv.url) as c:
                last = await c.post("/z", content=b"z")
            return srv, a, whole, pieces, last, srv.url.rsplit(":", 1)[1].encode()

    srv, a, whole, pieces, last, port = run(main())
    head, body = srv.requests[0]
    assert head == (b"POST /v1/x?q=1 HTTP/1.1\r\nhost: 127.0.0.1:%s\r\nx-key: v\r\n"
                    b"content-length: 3\r\n\r\n" % port) and body == b"abc"  # fmt: skip
    assert a.status_code == 201 and whole == b"echo:abc"
    assert a.headers[:3] == [(b"X-One", b"a"), (b"set-cookie", b"1"), (b"set-cookie", b"2")]
    assert a.header(b"x-one") == b"a" and a.header(b"x-two") is None
    assert b"content-length: 0\r\n" in srv.requests[1][0] and b"".join(pieces) == b"echo:"
    assert last.text == "echo:z" and srv.connections == 1


def test_chunked_and_close_delimited_bodies_and_a_streamed_answer() -> None:
    events = [b"data: %d\n\n" % i for i in range(4)]

    def answer(head: bytes, body: bytes) -> list:
        if b"/chunked" in head:
            head_ = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            return [head_, *(b"%x\r\n%s\r\n" % (len(e), e) for e in events), b"0\r\n\r\n"]
        return [b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n", *events, None]

    async def main():
        async with Server(answer) as srv:
            async with httpx.AsyncClient(transport=transport(), base_url=srv.url) as c:
                got = []
                async with c.stream("POST", "/chunked", content=b"x") as r:
                    got.append([chunk async for chunk in r.aiter_raw()])
                closed = await c.get("/close")
                again = await c.get("/close")
            return srv, got, closed, again

    srv, got, closed, again = run(main())
    assert b"".join(got[0]) == b"".join(events) and len(got[0]) > 1  # as it arrived
    assert closed.content == b"".join(events) and again.content == closed.content
    assert srv.connections == 2  # the close-delimited answer's connection is not reused


def test_a_request_body_streamed_in_chunks() -> None:
    async def parts():
        for p in (b"ab", b"cd", b"ef"):
            yield p

    async def main():
        async with Server(lambda h, b: [ok(b)]) as srv:
            async with httpx.AsyncClient(transport=transport(), base_url=srv.url) as c:
                r = await c.post("/up", content=parts())
            return srv, r

    srv, r = run(main())
    assert r.content == b"abcdef"
    assert b"transfer-encoding: chunked" in srv.requests[0][0].lower()


def test_an_answer_not_read_to_its_end_closes_its_connection() -> None:
    async def main():
        async with Server(lambda h, b: [ok(b"y" * 200_000)]) as srv:
            async with httpx.AsyncClient(transport=transport(), base_url=srv.url) as c:
                async with c.stream("GET", "/big") as r:
                    first = await r.aiter_raw().__anext__()
                whole = await c.get("/big")
            return srv, first, whole

    srv, first, whole = run(main())
    assert 0 < len(first) < 200_000 and len(whole.content) == 200_000
    assert srv.connections == 2  # the half-read connection was closed, not pooled


def test_interim_answer_head_and_no_content() -> None:
    def answer(head: bytes, body: bytes) -> list:
        if head.startswith(b"HEAD"):
            return [b"HTTP/1.1 200 OK\r\ncontent-length: 999\r\n\r\n"]
        if b"/204" in head:
            return [b"HTTP/1.1 204 No Content\r\n\r\n"]
        return [b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"final")]

    async def main():
        async with Server(answer) as srv:
            async with httpx.AsyncClient(transport=transport(), base_url=srv.url) as c:
                rs = [await c.post("/a", content=b"1"), await c.head("/h"), await c.get("/204")]
                rs.append(await c.get("/after"))
            return srv, rs

    srv, rs = run(main())
    assert [r.status_code for r in rs] == [200, 200, 204, 200]
    assert rs[0].content == b"final" and rs[1].content == b"" and rs[3].content == b"final"
    assert srv.connections == 1


def test_errors_are_httpx_errors() -> None:
    """Malformed answer, a close before any answer, a silent server, a refused port."""

    def answer(head: bytes, body: bytes) -> list:
        if b"/junk" in head:
            return [b"NOT HTTP AT ALL\r\n\r\n"]
        if b"/drop" in head:
            return [None]
        return []  # silent

    async def main():
        async with Server(answer) as srv:
            async with httpx.AsyncClient(transport=transport(), base_url=srv.url) as c:
                with pytest.raises(httpx.RemoteProtocolError):
                    await c.get("/junk")
                with pytest.raises(httpx.RemoteProtocolError):
                    await c.get("/drop")
                with pytest.raises(httpx.ReadTimeout):
                    await c.get("/silent", timeout=0.2)
                ok_after = srv.connections
        free = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = free.sockets[0].getsockname()[1]
        free.close()
        await free.wait_closed()
        async with httpx.AsyncClient(transport=transport()) as c:
            with pytest.raises(httpx.ConnectError):
                await c.get(f"http://127.0.0.1:{port}/")
            with pytest.raises(httpx.UnsupportedProtocol):
                await c.get("ftp://127.0.0.1:1/")
        return ok_after

    assert run(main()) == 3  # every failed connection was dropped, none reused


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    def answer(head: bytes, body: bytes) -> list:
        return [ok(b"once"), None] if b"/once" in head else [ok(b"fine")]

    async def main():
        async with Server(answer) as srv:
            async with httpx.AsyncClient(transport=transport(), base_url=srv.url) as c:
                # The answer says keep-alive, then the server closes the connection.
                first = await c.get("/once")
                await asyncio.sleep(0.05)
                second = await c.get("/next")
            return srv, first, second

    srv, first, second = run(main())
    assert (first.text, second.text) == ("once", "fine")
    assert srv.connections == 2


def test_the_pool_bound_waits_then_times_out() -> None:
    def answer(head: bytes, body: bytes) -> list:
        return [ok(b"slow")] if b"/slow" in head else [ok(b"quick")]

    async def main():
        async with Server(answer) as srv:
            t = transport(max_connections=1)
            async with httpx.AsyncClient(transport=t, base_url=srv.url) as c:
                async with c.stream("GET", "/slow") as held:
                    with pytest.raises(httpx.PoolTimeout):
                        await c.get("/quick", timeout=httpx.Timeout(5, pool=0.2))
                    waiting = asyncio.create_task(c.get("/quick"))
                    await asyncio.sleep(0.1)
                    assert not waiting.done()
                    await held.aread()
                quick = await waiting
                active = t.active
            return srv, quick, active

    srv, quick, active = run(main())
    assert quick.text == "quick" and srv.connections == 1 and active == 1


class Closer(Loopback):
    """A loopback server that answers a connection's first request and meets its second
    the way a server whose keep-alive timer fired with that request unread does: a reset
    (closed with unread data), a bare close, or — not that race — part of an answer."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.connections = 0
        self.requests = 0
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Closer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for n in range(2):
                head = await r.readuntil(b"\r\n\r\n")
                self.requests += 1
                if n == 0:
                    length = re.search(rb"(?i)content-length: *(\d+)", head)
                    await r.readexactly(int(length.group(1)) if length else 0)
                    w.write(ok(b"first"))
                    await w.drain()
                elif self.how == "reset":  # the body is left unread: the kernel resets
                    w.get_extra_info("socket").setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                elif self.how == "partial":
                    w.write(b"HTTP/1.1 200 OK\r\ncontent-le")
                    await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        w.close()


@pytest.mark.parametrize("how", ["reset", "closed"])
def test_a_pooled_connection_closed_as_it_is_reused_is_sent_again_on_a_new_one(how) -> None:
    """The keep-alive race: the request reached a connection its server was closing.
    Not one byte of answer came back, so it is sent once more, on a new connection."""

    noted: list[bool] = []

    async def main():
        async with Closer(how) as srv:
            t = transport(on_resend=lambda: noted.append(True))
            async with httpx.AsyncClient(transport=t, base_url=srv.url) as c:
                first = await c.post("/v1/completions", content=b'{"n": 1}')
                second = await c.post("/v1/completions", content=b'{"n": 2}')
            return srv, t, first, second

    srv, t, first, second = run(main())
    assert (first.text, second.text) == ("first", "first")
    assert (srv.connections, srv.requests, t.resent, len(noted)) == (2, 3, 1, 1)


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (b"\x05\x02", "wants authentication"),  # only username/password offered
        (b"\x05\x00\x05\x05\x00\x01\x7f\x00\x00\x01\x00\x00", "CONNECTION_REFUSED"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not a SOCKS5 answer"),
        (b"", "not a SOCKS5 answer"),  # closed at once
    ],
)
def test_a_socks5_proxy_that_refuses_is_a_proxy_error(answer: bytes, says: str) -> None:
    """What the relay's SOCKS port might say instead of a tunnel: a ProxyError naming it."""

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read(3)  # the methods offered
        if answer.startswith(b"\x05\x00"):
            w.write(answer[:2])
            await r.read(64)  # the CONNECT
            answer_ = answer[2:]
        else:
            answer_ = answer
        w.write(answer_)
        await w.drain()
        w.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        proxy = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        t = transport(proxy=proxy)
        try:
            async with httpx.AsyncClient(transport=t) as c:
                with pytest.raises(httpx.ProxyError, match=says):
                    await c.get("http://127.0.0.1:9/")
        finally:
            server.close()
        return t.active

    assert run(main()) == 0  # the failed connection was not counted as open


def test_what_is_not_sent_again() -> None:
    """A connection that answered in part, a body streamed (gone once sent), a new
    connection: the error is the request's."""

    async def parts():
        yield b"streamed"

    async def main():
        async with Closer("partial") as partial, Closer("closed") as closed:
            t = transport()
            async with httpx.AsyncClient(transport=t) as c:
                await c.post(partial.url + "/a", content=b"1")
                with pytest.raises(httpx.RemoteProtocolError):
                    await c.post(partial.url + "/b", content=b"2")
                await c.post(closed.url + "/a", content=b"1")
                with pytest.raises(httpx.RemoteProtocolError):
                    await c.post(closed.url + "/b", content=parts())
            return partial, closed, t

    partial, closed, t = run(main())
    assert (partial.requests, closed.requests, t.resent) == (2, 2, 0)


def test_a_stalled_uvicorn_closing_on_its_keep_alive_timer_fails_no_request(tmp_path) -> None:
    """The race as the gateway met it under 200 concurrent streams on a loaded host: the
    site's uvicorn loop is late (here: stopped), its keep-alive timer fires with the
    requests unread in its sockets, and it resets the connections they came on."""
    from tierwise.lab.world.model_server import free_port, wait_ready

    keep_alive_s = 2  # uvicorn's own default is 5 s: the race is the same, later
    port = free_port()
    app = tmp_path / "app.py"
    app.write_text(
        "import uvicorn\n"
        "async def app(scope, receive, send):\n"
        "    if scope['type'] != 'http':\n"
        "        return\n"
        "    await send({'type': 'http.response.start', 'status': 200,\n"
        "                'headers': [(b'content-type', b'text/plain')]})\n"
        "    await send({'type': 'http.response.body', 'body': b'ok'})\n"
        f"uvicorn.run(app, host='127.0.0.1', port={port}, log_level='warning',\n"
        f"            timeout_keep_alive={keep_alive_s})\n"
    )
    proc = subprocess.Popen([sys.executable, str(app)], stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(proc, url)

        async def main():
            t = transport()
            assert t.keepalive_expiry > keep_alive_s  # the pool thinks them good
            async with httpx.AsyncClient(transport=t, base_url=url, timeout=10) as c:
                await asyncio.gather(*(c.post("/v1/completions", content=b"{}") for _ in range(20)))
                await asyncio.sleep(keep_alive_s - 0.5)
                proc.send_signal(signal.SIGSTOP)  # the site's loop is late
                try:
                    sent = [asyncio.ensure_future(c.post("/v1/completions", content=b"{}"))
                            for _ in range(20)]  # fmt: skip
                    await asyncio.sleep(1.0)  # past its keep-alive: its timers are due
                finally:
                    proc.send_signal(signal.SIGCONT)
                answers = await asyncio.gather(*sent, return_exceptions=True)
            return answers

        answers = run(main())
    finally:
        proc.terminate()
        proc.wait(10)
    failed = [repr(a) for a in answers if not isinstance(a, httpx.Response)]
    assert not failed and all(a.text == "ok" for a in answers)


def test_the_gateway_pools_expire_before_a_usual_server_keep_alive() -> None:
    import uvicorn

    from tierwise.route.h1 import KEEPALIVE_EXPIRY_S

    assert transport().keepalive_expiry == KEEPALIVE_EXPIRY_S
    assert KEEPALIVE_EXPIRY_S < uvicorn.Config(None).timeout_keep_alive
