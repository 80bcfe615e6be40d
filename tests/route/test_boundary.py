"""The gateway's door under hostile input: each a 4xx within a second, the gateway still up.

One real ``tierwise route`` process (the protocol limits live in how the command starts
uvicorn) in front of one stand-in, both on loopback; requests are written on raw sockets
so that malformed HTTP reaches the server as sent.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.modelserver import model_server
from tests.route.routeproc import free_port, route_process, route_toml

pytestmark = pytest.mark.slow

MAX_BODY = 4 * 2**20
HEADER_TIMEOUT_S = 2.0
HI = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, int]]:
    tmp = tmp_path_factory.mktemp("door")
    with model_server("--decode-step", "1 ms", "--prefill-per-token", "0 s") as site:
        port = free_port()
        limits = f'max_body = "4 MiB"\nheader_timeout = "{HEADER_TIMEOUT_S} s"'
        with route_process(route_toml(tmp, site, port, limits)) as (url, proc):
            yield url, port, proc.pid


def exchange(port: int, data: bytes, more: Iterator[bytes] | None = None) -> tuple[int, bytes]:
    """Write ``data`` (then ``more``, while the server lets us), read the answer; its
    status and body. The answer must start within a second."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        if more is not None:
            s.settimeout(0.2)
            try:
                for piece in more:
                    s.sendall(piece)
            except (BrokenPipeError, ConnectionResetError, TimeoutError, OSError):
                pass
        s.settimeout(1.0)
        got = b""
        t0 = time.perf_counter()
        while b"\r\n\r\n" not in got or len(got) < _length(got):
            piece = s.recv(65536)
            if not piece:
                break
            got += piece
        assert time.perf_counter() - t0 < 1.0
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _length(got: bytes) -> int:
    head, _, _ = got.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(head) + 4 + int(line.split(b":")[1])
    return 1 << 40


def post(body: bytes, headers: str = "", path: str = "/v1/chat/completions") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


def still_serving(url: str) -> None:
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/chat/completions", json=HI, timeout=10)
    assert r.status_code == 200 and r.headers["x-tierwise-site"] == "edge"
    assert time.perf_counter() - t0 < 2.0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


INVALID = [
    ({"messages": "hi"}, "messages"),
    ({**HI, "max_tokens": -5}, "max_tokens"),
    ({**HI, "max_tokens": "many"}, "max_tokens"),
    ({**HI, "max_tokens": True}, "max_tokens"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content[0].image_url"),
    ({**HI, "temperature": 9}, "temperature"),
    ({**HI, "stream": "yes"}, "stream"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "param"), INVALID)
def test_openai_invalid_bodies_are_400_naming_the_field(gateway, body: dict, param: str) -> None:
    url, port, _ = gateway
    status, raw = exchange(port, post(json.dumps(body).encode()))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == param and param in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    still_serving(url)


MALFORMED = {
    "not JSON": post(b"{nope"),
    "invalid UTF-8": post(b'{"messages": "\xff\xfe"}'),
    "nested 100,000 deep": post(b"[" * 100_000),
    "a JSON array": post(b"[1, 2]"),
    "NaN": post(b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}'),
    "negative Content-Length": b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
    b"content-length: -5\r\n\r\n{}",
    "bad chunk size": b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
    b"transfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "both Transfer-Encoding and Content-Length": b"POST /v1/chat/completions HTTP/1.1\r\n"
    b"host: x\r\ntransfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "two Content-Lengths": b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
    b"content-length: 2\r\ncontent-length: 3\r\n\r\n{}",
    "garbage deadline": post(json.dumps(HI).encode(), "x-tierwise-deadline: soon-ish\r\n"),
    "negative deadline": post(json.dumps(HI).encode(), "x-tierwise-deadline: -3 s\r\n"),
    "garbage residency": post(json.dumps(HI).encode(), "x-tierwise-residency: \x01mars\r\n"),
    "unknown residency": post(json.dumps(HI).encode(), "x-tierwise-residency: mars\r\n"),
    "unknown site": post(json.dumps(HI).encode(), "x-tierwise-site: \xff\r\n"),
    "not HTTP": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64 + b"\r\n\r\n",
}  # fmt: skip


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_requests_are_400(gateway, raw: bytes) -> None:
    url, port, _ = gateway
    status, body = exchange(port, raw)
    assert status == 400, body
    if body.startswith(b"{"):
        assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    still_serving(url)


def test_paths_and_methods(gateway) -> None:
    url, _, _ = gateway
    r = httpx.get(url + "/nowhere")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.get(url + "/v1/chat/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert httpx.get(url + "/v1/models").status_code == 200  # passthrough, under /v1/
    assert httpx.get(url + "/metrics").status_code == 200


def test_a_huge_header_is_431(gateway) -> None:
    url, port, _ = gateway
    big = "x-big: " + "a" * 100_000 + "\r\n"
    status, body = exchange(port, post(json.dumps(HI).encode(), big))
    assert status == 431 and json.loads(body)["error"]["code"] == "request_header_fields_too_large"
    many = "".join(f"x-h{i}: {'b' * 90}\r\n" for i in range(300))  # each small, 30 kB in all
    assert exchange(port, post(json.dumps(HI).encode(), many))[0] == 431
    long_url = post(json.dumps(HI).encode(), path="/v1/chat/completions?" + "q" * 50_000)
    assert exchange(port, long_url)[0] == 431
    still_serving(url)


def test_huge_bodies_are_413_at_once_and_memory_stays_bounded(gateway) -> None:
    """A 64 MiB Content-Length is refused before its body is read; a chunked 64 MiB body
    as soon as it passes the cap; the gateway's memory grows by far less than the body."""
    url, port, pid = gateway
    still_serving(url)
    before = rss_mib(pid)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {64 * 2**20}\r\n\r\n"
    ).encode()
    mib = b"x" * 2**20
    status, body = exchange(port, head, iter([mib] * 64))
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    chunked = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    piece = b"100000\r\n" + mib + b"\r\n"
    status, body = exchange(port, chunked, iter([piece] * 64))
    assert status == 413
    status, _ = exchange(port, post(b"x" * (MAX_BODY + 1)))
    assert status == 413
    still_serving(url)
    assert rss_mib(pid) - before < 3 * MAX_BODY / 2**20 + 8


def test_slow_headers_do_not_slow_a_request_and_are_closed(gateway) -> None:
    """50 clients sending a head a few bytes a second (slowloris): a normal request is
    served meanwhile as fast as ever, and each slow one is answered 408 and closed after
    the header timeout."""
    url, port, _ = gateway
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    stop = threading.Event()

    def drip() -> None:
        for s in socks:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
        i = 0
        while not stop.is_set():
            for s in socks:
                try:
                    s.sendall(f"x-{i}: y\r\n".encode())
                except OSError:
                    pass
            i += 1
            stop.wait(0.3)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        time.sleep(0.5)
        for _ in range(5):
            still_serving(url)
        time.sleep(HEADER_TIMEOUT_S + 0.5)
        closed = 0
        for s in socks:
            s.settimeout(2.0)
            try:
                got = b""
                while piece := s.recv(65536):
                    got += piece
                closed += got.startswith(b"HTTP/1.1 408") or got == b""
            except OSError:
                closed += 1
        assert closed == 50
    finally:
        stop.set()
        dripper.join(5)
        for s in socks:
            s.close()
    still_serving(url)


def test_an_idle_connection_is_closed_after_the_header_timeout(gateway) -> None:
    _, port, _ = gateway
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(HEADER_TIMEOUT_S + 3)
        t0 = time.perf_counter()
        assert s.recv(100) == b""
        assert time.perf_counter() - t0 < HEADER_TIMEOUT_S + 2


def test_a_body_that_stops_coming_is_408(gateway) -> None:
    """A head that promises 1,000 bytes, then 10 of them and silence: 408 after the
    timeout (the app was waiting for the rest), and the gateway serves on."""
    url, port, _ = gateway
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(head + b'{"messages"')
        s.settimeout(HEADER_TIMEOUT_S + 3)
        t0 = time.perf_counter()
        got = s.recv(65536)
        assert got.startswith(b"HTTP/1.1 408") and b"request_timeout" in got
        assert HEADER_TIMEOUT_S - 0.5 < time.perf_counter() - t0 < HEADER_TIMEOUT_S + 2
    still_serving(url)


def test_pipelined_and_kept_alive_requests_are_served(gateway) -> None:
    """Two requests in one write are both answered, in order; the connection then
    idles and is closed after the header timeout (not before)."""
    _, port, _ = gateway
    one = post(json.dumps(HI).encode())
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(one + one)
        s.settimeout(5)
        got = b""
        while got.count(b"HTTP/1.1 200") < 2:
            piece = s.recv(65536)
            assert piece, got
            got += piece
        t0 = time.perf_counter()
        s.settimeout(HEADER_TIMEOUT_S + 3)
        while s.recv(65536):
            pass
        assert HEADER_TIMEOUT_S - 0.5 < time.perf_counter() - t0 < HEADER_TIMEOUT_S + 2
