"""The trace's kernel arrival stamps (``rxb``): how late each end read its datagrams."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from tests.relay.conftest import Stack
from tierwise.relay import trace

KEY = bytes(range(32))


def _rows(path: Path, kind: str) -> list[list[str]]:
    assert trace._file is not None
    trace._file.flush()
    return [r for r in (line.split() for line in path.read_text().splitlines()) if r[1] == kind]


def test_a_gateway_batch_is_traced_with_its_kernel_arrival_stamps(traced: Path) -> None:
    """A batch with arrival times: one ``rxb`` line (count, first and last arrival), written
    after them, even when its datagrams are garbage the gateway drops."""
    from tierwise.relay.gateway import Gateway

    gateway = Gateway(KEY, set())
    t = time.monotonic()
    gateway.datagrams_received(
        [(b"x", ("127.0.0.1", 9)), (b"yy", ("127.0.0.1", 9))], [t - 0.003, t - 0.001]
    )
    assert gateway.counters["dropped_malformed"] == 2
    (row,) = _rows(traced, "rxb")
    assert row[2] == "2"
    first, last, written = float(row[3]), float(row[4]), float(row[0])
    assert first == pytest.approx(t - 0.003, abs=2e-6) and last == pytest.approx(
        t - 0.001, abs=2e-6
    )
    assert written >= last + 0.001 - 2e-6  # the line says how late the batch was read


def test_a_request_through_the_client_gives_its_arrivals_before_their_handling(
    traced: Path, stack: Stack
) -> None:
    """Over real sockets the client's batched endpoint stamps each datagram in the kernel:
    every ``rxb`` line's arrivals are ordered and none lies after the line itself."""
    body = os.urandom(200_000)
    with httpx.Client(proxy=f"socks5://127.0.0.1:{stack.socks_port}", timeout=20) as client:
        answer = client.post(f"http://127.0.0.1:{stack.http_port}/", content=body)
    assert answer.status_code == 200
    rows = _rows(traced, "rxb")
    assert rows, "the client read datagrams with no arrival stamps"
    for row in rows:
        written, first, last = float(row[0]), float(row[3]), float(row[4])
        assert int(row[2]) >= 1
        assert first <= last <= written
