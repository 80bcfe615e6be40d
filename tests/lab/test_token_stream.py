"""The token-stream workload: a real SSE source and reader on loopback (no root), a delay
put on the wire shows in exactly the tokens it held, and the lab run per transport."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import run_cli
from tests.lab.conftest import lab
from tierwise.errors import LabError
from tierwise.lab.experiments.stream import (
    StreamExperiment,
    TokenSource,
    lateness_summary,
    read_stream,
    run_stream,
)


@contextlib.contextmanager
def _source(tokens: int, per_s: float) -> Iterator[TokenSource]:
    listener = socket.create_server(("127.0.0.1", 0))
    source = TokenSource(listener, tokens, per_s)
    try:
        yield source
    finally:
        source.close()


@contextlib.contextmanager
def _holding_proxy(target: tuple[str, int], hold_event: int, hold_s: float) -> Iterator[int]:
    """A TCP relay to ``target`` that holds the server's bytes from the start of SSE event
    ``hold_event`` (0-based) on for ``hold_s`` (a retransmission's wait, made on purpose)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def pipe(src: socket.socket, dst: socket.socket, hold: bool) -> None:
        events = 0
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                at = data.find(b"data: ")
                while hold and at >= 0:
                    if events == hold_event:
                        dst.sendall(data[:at])
                        time.sleep(hold_s)
                        data, hold = data[at:], False
                        break
                    events += 1
                    at = data.find(b"data: ", at + 1)
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def serve() -> None:
        with contextlib.suppress(OSError):
            client, _ = listener.accept()
            upstream = socket.create_connection(target)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=pipe, args=(client, upstream, False), daemon=True).start()
            pipe(upstream, client, True)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(5)


def test_every_token_arrives_in_order_with_its_emission_time() -> None:
    """20 tokens at 100/s on loopback: all of them, in order, each emitted on its 10 ms slot
    (or after it, on a loaded host), most on time (loopback adds nothing worth a token)."""
    with _source(20, 100.0) as source, socket.socket() as sock:
        tokens = read_stream(sock, source.address, 5.0)
    assert [i for i, _, _ in tokens] == list(range(20))
    emitted = [t for _, t, _ in tokens]
    behind = [t - (emitted[0] + 0.01 * i) for i, t in enumerate(emitted)]  # on its slot, or late
    assert min(behind) > -0.001 and sorted(behind)[10] < 0.005
    assert all(b > a for a, b in itertools.pairwise(emitted))
    lateness = [arrived - t for _, t, arrived in tokens]
    assert min(lateness) >= 0 and sorted(lateness)[10] < 0.02


def test_a_held_token_is_measured_late_by_what_held_it() -> None:
    """A proxy holds the stream after token 9 for 150 ms: tokens 0–9 arrive on time, token
    10 about 150 ms late less the 10 ms it waited to be emitted; lateness is measured."""
    with _source(20, 100.0) as source:
        with _holding_proxy(source.address, 10, 0.15) as port, socket.socket() as sock:
            tokens = read_stream(sock, ("127.0.0.1", port), 5.0)
    late = {i: arrived - t for i, t, arrived in tokens}
    assert max(late[i] for i in range(9)) < 0.03
    assert 0.11 < late[10] < 0.25, late
    summary = lateness_summary(list(late.values()))
    assert summary["tokens"] == 20 and summary["late_over_100ms"] > 0
    assert summary["late_over_500ms"] == 0


def test_a_stream_that_stops_or_fails_is_an_error_naming_it() -> None:
    """A 404, or a stream that stalls, is a LabError saying what (counted as a failure)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    with socket.socket() as sock, pytest.raises(LabError, match="404"):
        read_stream(sock, listener.getsockname(), 2.0)
    listener.close()
    with _source(1000, 1.0) as source, socket.socket() as sock:
        with pytest.raises(LabError, match=r"stalled for 0\.3 s after 1 tokens"):
            read_stream(sock, source.address, 0.3)


def test_lateness_summary_counts_shares_over_each_bound() -> None:
    """Shares over 100 ms and 500 ms, quantiles in seconds."""
    values = [0.01] * 990 + [0.2] * 9 + [0.6]
    row = lateness_summary(values, failed=1)
    assert row["tokens"] == 1000 and row["failed_streams"] == 1
    assert row["late_over_100ms"] == pytest.approx(0.010)
    assert row["late_over_500ms"] == pytest.approx(0.001)
    assert row["median_s"] == pytest.approx(0.01) and row["worst_s"] == pytest.approx(0.6)
    assert lateness_summary([]) == {"tokens": 0, "failed_streams": 0}


@pytest.mark.parametrize(
    ("args", "source", "message"),
    [
        (("--via", "relay,quic"), "--via", "unknown transport"),
        (("--loss", "14%"), "--loss", "0.14"),
        (("--rtt", "fast"), "--rtt", ""),
    ],
)
def test_bad_stream_options_are_one_line(args: tuple[str, ...], source: str, message: str) -> None:
    """A bad option exits 2 with one line naming it, before any path comes up."""
    run = run_cli("lab", "stream", *args)
    assert run.code == 2 and run.stderr.count("\n") == 1, run.stderr
    assert source in run.stderr and message in run.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--sessions", "new"), "--sessions: applies with --via only"),
        (("--via", "relay", "--sessions", "cold"), "unknown sessions 'cold'"),
        (("--via", "relay,kcptun", "--beside-bulk", "1MB"), "kcptun forwards one target"),
        (("--via", "relay", "--sessions", "new", "--beside-bulk", "1MB"), "warm session"),
    ],
)
def test_bad_session_options_are_one_line(args: tuple[str, ...], message: str) -> None:
    """``lab request`` refuses --sessions / --beside-bulk misuse in one line, exit 2."""
    run = run_cli("lab", "request", *args)
    assert run.code == 2 and run.stderr.count("\n") == 1, run.stderr
    assert message in run.stderr


@lab
def test_token_lateness_through_direct_and_relay_under_loss() -> None:
    """In the lab at 14 % loss each way: every token of every stream arrives through both
    transports, lateness measured per token (none early by more than the clock's noise)."""
    exp = StreamExperiment(vias=("direct", "relay"), losses=(0.14,), tokens=40, streams=1,
                           rate_bytes_per_s=100e6 / 8)  # fmt: skip
    result = run_stream(exp)
    rows = {row["via"]: row for row in result["rows"]}
    for via in ("direct", "relay"):
        assert rows[via]["tokens"] == 40 and rows[via]["failed_streams"] == 0, rows[via]
        assert rows[via]["median_s"] > -0.005
    assert result["emulator"]["0.14"]
