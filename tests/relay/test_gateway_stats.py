"""The gateway's stats endpoint on loopback: /stats, /metrics, bad requests, the CLI."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.relay.conftest import KEY, Stack
from tests.relay.test_cli import CLI, free_port, start, wait_port
from tierwise.listen import listen_socket
from tierwise.proto.relay import wire
from tierwise.relay import gateway as gateway_module
from tierwise.relay import metrics
from tierwise.relay.client import Client
from tierwise.relay.udp import encode_addr

P = "tierwise_relay_gateway_"


def http(port: int, request: bytes, *, close_write: bool = False) -> tuple[int, bytes]:
    """Send ``request`` raw; the answer's status and body, read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        if close_write:
            s.shutdown(socket.SHUT_WR)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert f"Content-Length: {len(body)}".encode() in head  # answered whole, then closed
    return int(head.split(b" ")[1]), body


def get(port: int, path: str) -> bytes:
    status, body = http(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status == 200, body
    return body


def stats(port: int) -> dict:
    """/stats parsed as strict JSON (no Infinity or NaN, which jq and most parsers refuse)."""
    return json.loads(get(port, "/stats"), parse_constant=not_json)


def not_json(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def metric_samples(port: int) -> dict[tuple[str, tuple], float]:
    """/metrics parsed with prometheus_client's parser: ``{(name, labels): value}``;
    every family has HELP text and is a counter or a gauge."""
    out = {}
    for family in text_string_to_metric_families(get(port, "/metrics").decode()):
        assert family.type in ("counter", "gauge") and family.documentation, family.name
        for sample in family.samples:
            out[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return out


def fetch_through_relay(stack: Stack, nbytes: int) -> bytes:
    """GET /nbytes from the HTTP server over the stack's SOCKS port."""
    return fetch_over_socks(stack.socks_port, stack.http_port, nbytes)


def fetch_over_socks(socks_port: int, http_port: int, nbytes: int) -> bytes:
    """GET /nbytes from the HTTP server on ``http_port`` over SOCKS5 (a raw client)."""
    with socket.create_connection(("127.0.0.1", socks_port), timeout=20) as s:
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
        s.sendall(b"\x05\x01\x00" + encode_addr("127.0.0.1", http_port))
        assert s.recv(10)[1] == 0
        s.sendall(f"GET /{nbytes} HTTP/1.0\r\n\r\n".encode())
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    return raw.partition(b"\r\n\r\n")[2]


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    """A hang guard: ``check`` must come true well within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture
def stats_port(stack: Stack) -> Iterator[int]:
    """The stack's gateway serving --stats on a free loopback port."""

    async def up() -> asyncio.Server:
        return await metrics.serve_stats(stack.gateway, listen_socket("127.0.0.1", 0))

    server = stack.call(up())
    yield server.sockets[0].getsockname()[1]

    async def down() -> None:
        server.close()

    stack.call(down())


def test_a_sessions_figures_appear_after_a_request(stack: Stack, stats_port: int) -> None:
    """After 200 kB through the relay the session is listed with its client, RTT, rate and
    bytes, in /stats and /metrics alike, and nothing of the key material appears."""

    async def pacing() -> float:
        (session,) = stack.gateway.sessions.values()
        return session.conn.snapshot()["pacing_rate_bytes_per_s"]

    fresh, raw = stats(stats_port), stack.call(pacing())  # no RTT sample yet: +Inf, maybe
    shown = fresh["sessions"][0]["pacing_rate_bytes_per_s"]
    assert shown is None if math.isinf(raw) else shown > 0  # JSON has no Infinity: null
    assert len(fetch_through_relay(stack, 200_000)) == 200_000
    got = stats(stats_port)
    assert got["role"] == "gateway" and got["sessions_open"] == 1 == got["sessions_listed"]
    (entry,) = got["sessions"]
    session = stack.client.session
    assert session is not None
    client_addr = session.transport.get_extra_info("sockname")
    assert entry["peer"] == f"127.0.0.1:{client_addr[1]}"
    assert entry["id"] == session.conn.connection_id.hex()
    assert entry["bytes_sent"] > 200_000 and entry["streams_opened"] >= 1
    assert entry["srtt_s"] > 0 and entry["min_rtt_s"] > 0 and entry["age_s"] > 0
    assert entry["bandwidth_bytes_per_s"] > 0 and entry["state"] == "established"
    totals = got["totals"]
    assert totals["connected"] >= 1 and totals["sessions_opened"] == 1
    assert totals["bytes_sent"] >= entry["bytes_sent"]
    samples = metric_samples(stats_port)
    labels = (("peer", entry["peer"]), ("session", entry["id"]))
    assert samples[P + "session_sent_bytes", labels] > 200_000
    assert samples[P + "session_srtt_seconds", labels] > 0
    assert samples[P + "sessions", ()] == 1
    assert samples[P + "connections_total", ()] == totals["connected"]
    conn = stack.gateway.sessions[session.conn.connection_id].conn
    secrets = [KEY, conn._send_keys._key, conn._recv_keys._key]  # type: ignore[union-attr]
    body = get(stats_port, "/stats") + get(stats_port, "/metrics")
    for secret in secrets:
        for shown in (secret.hex(), base64.b64encode(secret).decode(), str(list(secret))):
            assert shown.encode() not in body


def test_garbage_datagrams_move_the_drop_counters(stack: Stack, stats_port: int) -> None:
    """A forged datagram in the live session, a forged HELLO, one naming no session and one
    too short to parse: each moves its own counter, in /stats and /metrics."""
    session = stack.client.session
    assert session is not None
    cid = session.conn.connection_id
    before = stats(stats_port)["totals"]
    forged = {
        # a DATA without its packet number's token: refused before the AEAD
        "dropped_token": [wire.HEADER.pack(wire.DATA, cid, 1 << 40) + os.urandom(60)],
        "dropped_auth": [
            wire.HEADER.pack(wire.HELLO, os.urandom(8), 0) + os.urandom(wire.HELLO_BYTES - 17),
        ],
        "dropped_unknown_session": [wire.HEADER.pack(wire.DATA, os.urandom(8), 7) + bytes(40)],
        "dropped_malformed": [b"\x07" * 10],
    }
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for datagrams in forged.values():
            for data in datagrams:
                s.sendto(data, ("127.0.0.1", stack.gateway_port))
        s.settimeout(0.3)
        with pytest.raises(TimeoutError):  # dropped silently: never answered
            s.recvfrom(2048)
    want = {key: before[key] + len(datagrams) for key, datagrams in forged.items()}
    wait_for(
        lambda: all(stats(stats_port)["totals"][k] >= v for k, v in want.items()),
        "the drop counters did not move",
    )
    after = stats(stats_port)["totals"]
    assert {k: after[k] for k in want} == want
    assert after["dropped_replay"] == before["dropped_replay"]
    samples = metric_samples(stats_port)
    for key, value in want.items():
        reason = key.removeprefix("dropped_")
        assert samples[P + "datagrams_dropped_total", (("reason", reason),)] == value
    assert stats(stats_port)["sessions"][0]["dropped_token"] == 1  # the one inside the session
    assert len(fetch_through_relay(stack, 1000)) == 1000  # the session carries on


def test_the_session_list_is_bounded_and_totals_outlive_sessions(
    stack: Stack, stats_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 4 sessions and a bound of 2, the 2 busiest are listed (totals count all 4);
    a session that ends leaves its bytes in the totals, so counters never go down."""
    monkeypatch.setattr(gateway_module, "STATS_SESSIONS", 2)
    fetch_through_relay(stack, 100_000)

    async def more() -> list[Client]:
        clients = [Client(KEY, ("127.0.0.1", stack.gateway_port)) for _ in range(3)]
        for client in clients:
            await client.start()
            await asyncio.wait_for(client.ready.wait(), 10)
            await client.check("127.0.0.1", stack.http_port)  # a stream: a few bytes carried
        return clients

    others = stack.call(more())
    wait_for(lambda: stats(stats_port)["sessions_open"] == 4, "4 sessions at the gateway")
    got = stats(stats_port)
    assert got["sessions_listed"] == 2 == len(got["sessions"])
    assert got["totals"]["sessions_opened"] == 4
    busiest = stack.client.session.conn.connection_id.hex()  # type: ignore[union-attr]
    assert got["sessions"][0]["id"] == busiest
    carried = [e["bytes_sent"] + e["bytes_received"] for e in got["sessions"]]
    assert carried == sorted(carried, reverse=True)
    gone = others[0].session.conn.connection_id  # type: ignore[union-attr]

    async def close_one() -> dict[str, int]:
        counted = dict(vars(stack.gateway.sessions[gone].conn.stats))
        others[0].close()
        return counted

    gone_counted = stack.call(close_one())
    assert gone_counted["bytes_received"] > 0 and gone_counted["streams_opened"] == 1
    wait_for(lambda: stats(stats_port)["sessions_open"] == 3, "the closed session ended")

    async def totals_and_live() -> tuple[dict, Counter]:  # in the loop: one consistent reading
        live: Counter[str] = Counter()
        for session in stack.gateway.sessions.values():
            live.update(vars(session.conn.stats))
        return stack.gateway.snapshot()["totals"], live

    after, live = stack.call(totals_and_live())
    assert after["sessions_ended"] == 1
    for name, value in gone_counted.items():
        assert after[name] >= live[name] + value, name
    assert metric_samples(stats_port)[P + "sessions_ended_total", ()] == 1

    async def close_rest() -> None:
        for client in others[1:]:
            client.close()

    stack.call(close_rest())


BAD_REQUESTS = {
    "POST": (b"POST /stats HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
    "unknown path": (b"GET /sessions HTTP/1.1\r\n\r\n", 404),
    "not HTTP": (b"hello there\r\n\r\n", 400),
    "oversized head": (b"GET /stats HTTP/1.1\r\nX: " + b"a" * 8000 + b"\r\n\r\n", 400),
}


@pytest.mark.parametrize("name", BAD_REQUESTS)
def test_a_bad_request_gets_an_error_and_the_gateway_keeps_serving(
    stack: Stack, stats_port: int, name: str
) -> None:
    """Each bad request is answered with its status and closed; the next GET /stats is
    answered and the session is untouched."""
    request, status = BAD_REQUESTS[name]
    assert http(stats_port, request)[0] == status
    got = stats(stats_port)
    assert got["sessions_open"] == 1 and got["sessions"][0]["state"] == "established"
    assert len(fetch_through_relay(stack, 1000)) == 1000


def test_a_slow_or_cut_request_is_closed(
    stack: Stack, stats_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A head that stops arriving gets 408 after the read timeout; one cut short gets 400."""
    monkeypatch.setattr(metrics, "READ_TIMEOUT_S", 0.3)
    t0 = time.monotonic()
    assert http(stats_port, b"GET /stats HTTP/1.1\r\n")[0] == 408
    assert time.monotonic() - t0 < 5.0  # a hang guard: the timeout is 0.3 s
    assert http(stats_port, b"GET /stats HTTP/1.1\r\n", close_write=True)[0] == 400
    assert stats(stats_port)["role"] == "gateway"


def test_connections_beyond_the_limit_are_closed_unanswered(
    stack: Stack, stats_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 2 idle connections held (the limit), a third is closed at once; then served."""
    monkeypatch.setattr(metrics, "MAX_CONNECTIONS", 2)
    held = [socket.create_connection(("127.0.0.1", stats_port), timeout=10) for _ in range(2)]
    try:
        time.sleep(0.2)  # both accepted and waiting for a head
        with socket.create_connection(("127.0.0.1", stats_port), timeout=10) as third:
            third.sendall(b"GET /stats HTTP/1.1\r\n\r\n")
            try:
                assert third.recv(100) == b""
            except ConnectionResetError:
                pass
    finally:
        for s in held:
            s.close()
    wait_for(lambda: http_ok(stats_port), "served again once the held connections closed")


def http_ok(port: int) -> bool:
    try:
        return stats(port)["role"] == "gateway"
    except (ConnectionError, AssertionError, ValueError):
        return False


# ---------------------------------------------------------------- the processes and the CLI


def relay_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "relay", *args], capture_output=True, text=True, check=False, timeout=30
    )


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "relay.key"
    path.write_text(KEY.hex() + "\n")
    path.chmod(0o600)
    return path


def start_log(gw: subprocess.Popen, timeout_s: float = 20.0) -> str:
    """The gateway's stderr up to its "gateway listening" line (the last of its start)."""
    assert gw.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while not lines or "gateway listening" not in lines[-1]:
        assert time.monotonic() < deadline and gw.poll() is None, lines
        lines.append(gw.stderr.readline())
    return "".join(lines)


def test_gateway_process_serves_stats_to_relay_stats(key: Path, http_server: int) -> None:
    """`relay gateway --stats PORT` and a client process: `relay stats --gateway` lists the
    client's session (JSON and table); SIGTERM ends the gateway cleanly."""
    gport, sport, stport = free_port(socket.SOCK_DGRAM), free_port(), free_port()
    gw = start("gateway", "--listen", f"127.0.0.1:{gport}", "--allow", f"127.0.0.1:{http_server}",
               "--key-file", str(key), "--stats", str(stport))  # fmt: skip
    cl = start("client", "--gateway", f"127.0.0.1:{gport}", "--socks", f"127.0.0.1:{sport}",
               "--key-file", str(key))  # fmt: skip
    try:
        log = start_log(gw)
        assert f"stats on http://127.0.0.1:{stport}/stats" in log  # a bare port: loopback
        wait_port(sport)
        assert len(fetch_over_socks(sport, http_server, 50_000)) == 50_000
        out = relay_cli("stats", "--gateway", f"127.0.0.1:{stport}", "--json")
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        # a slow start may leave an unanswered first HELLO's session too, until it idles out
        busiest = got["sessions"][0]
        assert got["sessions_open"] >= 1 and busiest["peer"].startswith("127.0.0.1:")
        assert busiest["bytes_sent"] > 50_000 and got["totals"]["connected"] == 1
        table = relay_cli("stats", "--gateway", str(stport))
        assert table.returncode == 0 and f"busiest of {got['sessions_open']}" in table.stdout
        assert busiest["id"] in table.stdout
        gw.send_signal(signal.SIGTERM)
        assert gw.wait(15) == 0
    finally:
        for p in (gw, cl):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_non_loopback_stats_address_is_served_with_a_warning(key: Path) -> None:
    """--stats 0.0.0.0:PORT is taken as written (no authentication: the log says so)."""
    port, gport = free_port(), free_port(socket.SOCK_DGRAM)
    gw = start("gateway", "--listen", f"127.0.0.1:{gport}", "--allow", "127.0.0.1:9",
               "--key-file", str(key), "--stats", f"0.0.0.0:{port}")  # fmt: skip
    try:
        assert f"stats endpoint on 0.0.0.0:{port} has no authentication" in start_log(gw)
        assert stats(port)["sessions_open"] == 0
    finally:
        gw.kill()
        gw.wait()


def test_relay_stats_errors_are_one_line(stack: Stack, stats_port: int) -> None:
    """Neither or both flags, nothing listening, or the wrong kind of endpoint: exit 2,
    one line naming the flag."""
    closed = free_port()
    cases = {
        ("stats",): "exactly one of --client",
        ("stats", "--client", f"127.0.0.1:{stack.socks_port}", "--gateway", str(stats_port)):
            "exactly one of --client",
        ("stats", "--gateway", f"127.0.0.1:{closed}"): "no relay gateway stats endpoint at",
        ("stats", "--gateway", f"127.0.0.1:{stack.socks_port}"):
            "is not a relay gateway stats endpoint",
        ("stats", "--client", f"127.0.0.1:{stats_port}"): "is not a relay client",
        ("stats", "--gateway", "70000"): "expected a port from 1 to 65535",
    }  # fmt: skip
    for args, message in cases.items():
        out = relay_cli(*args)
        assert out.returncode == 2 and out.stdout == "", (args, out.stderr)
        assert message in out.stderr and out.stderr.count("\n") == 1, (args, out.stderr)
        assert out.stderr.startswith("error: --"), out.stderr
    out = relay_cli("stats", "--client", f"127.0.0.1:{stack.socks_port}", "--json")
    assert out.returncode == 0 and "role" not in json.loads(out.stdout)  # still a client's


def test_stats_flag_and_toml_key(key: Path, tmp_path: Path) -> None:
    """--stats and the file's `stats` key reach --check (a bare port is loopback, the flag
    wins); a bad value or an address in use is one line and exit 2."""
    base = ("gateway", "--allow", "127.0.0.1:9", "--key-file", str(key))
    off = json.loads(relay_cli(*base, "--check").stdout)
    assert off["stats"] is None  # off by default
    bare = json.loads(relay_cli(*base, "--stats", "9100", "--check").stdout)
    assert bare["stats"] == ["127.0.0.1", 9100]
    toml = tmp_path / "gw.toml"
    toml.write_text('stats = "[::1]:9200"\nallow = ["127.0.0.1:9"]\nkey_file = "relay.key"\n')
    assert json.loads(relay_cli("gateway", "--config", str(toml), "--check").stdout)["stats"] == [
        "::1",
        9200,
    ]
    flag = relay_cli("gateway", "--config", str(toml), "--stats", "127.0.0.1:9300", "--check")
    assert json.loads(flag.stdout)["stats"] == ["127.0.0.1", 9300]
    toml.write_text("stats = 9100\n")
    for args, message in {
        (*base, "--stats", "0.0.0.0"): "expected HOST:PORT",
        ("gateway", "--config", str(toml), "--check"): "expected a string",
    }.items():
        out = relay_cli(*args)
        assert out.returncode == 2 and message in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        gport = free_port(socket.SOCK_DGRAM)
        out = relay_cli(*base, "--listen", f"127.0.0.1:{gport}", "--stats", str(port))
    assert out.returncode == 2 and "--stats" in out.stderr and "cannot listen" in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr


def test_client_stats_are_strict_json_before_the_first_measurement(stack: Stack) -> None:
    """The client's ``GET /stats`` too: figures not measured yet are null, not Infinity
    (which Python writes by default and most JSON parsers reject)."""

    def refuse(token: str) -> None:
        raise AssertionError(f"non-JSON constant {token} in the client's stats")

    with socket.create_connection(("127.0.0.1", stack.socks_port), timeout=10) as s:
        s.sendall(b"GET /stats HTTP/1.0\r\n\r\n")
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    data = json.loads(raw.partition(b"\r\n\r\n")[2], parse_constant=refuse)
    assert data["pacing_rate_bytes_per_s"] is None  # nothing sent yet: no rate measured
    assert data["state"] == "established"
