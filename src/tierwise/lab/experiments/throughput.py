"""Sustained TCP goodput under random loss, beside the Mathis bound and BBR's ideal (§12.3.3).

For every loss probability ``p`` one path comes up with Bernoulli loss ``p`` on the
download direction only (server → client, as in §12.3.3: the sender is the
server, so data packets are lost and ACKs are not). On it, for every congestion
control, the server sends as fast as its socket takes bytes to the client for
``duration_s``; the client counts what it reads. Both ends run in one thread with
non-blocking sockets, so the run is bounded in time however slow the transfer is,
and the connection is reset at the end (nothing drains afterwards).

Reported per (p, cc): goodput over the whole run and over its second half (past
slow start), beside

- the Mathis bound ``(MSS/R)·C/√p`` with MSS 1,448 B and C = 1 and 1.31
  (:func:`~tierwise.model.loss.mathis_rate_bytes_per_s`; unbounded at ``p = 0``);
- BBR's ideal goodput ``(1 − p)·B`` (:func:`~tierwise.model.loss.ideal_goodput_bytes_per_s`),
  with ``B`` the emulated rate of IP packets — TCP payload can reach at most
  1448/1500 of it.
"""

from __future__ import annotations

import math
import os
import select
import socket
import struct
import time
from dataclasses import asdict, dataclass

from tierwise.errors import LabError, shown
from tierwise.lab.bench import netns
from tierwise.lab.bench.emulator import DEFAULT_QUEUE_BYTES, Direction
from tierwise.lab.bench.path import MTU_BYTES, EmulatedPath, PathConfig
from tierwise.lab.bench.service import set_buffers, set_congestion
from tierwise.lab.experiments.request import CONGESTION_CONTROLS, TUNED_BUFFER_BYTES
from tierwise.model.loss import (
    C_RANDOM,
    C_SIMPLE,
    ideal_goodput_bytes_per_s,
    mathis_rate_bytes_per_s,
)
from tierwise.model.transport import TIMESTAMP_MSS_BYTES

__all__ = ["ThroughputExperiment", "close_with_reset", "model_columns", "run_throughput"]

CHUNK_BYTES = 256 << 10
TICK_S = 0.05
MAX_DURATION_S = 60.0
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ThroughputExperiment:
    """Loss levels × congestion controls, each a bulk transfer of ``duration_s`` (SI units)."""

    losses: tuple[float, ...] = (0.0, 0.01, 0.036, 0.14)
    ccs: tuple[str, ...] = ("reno", "cubic", "bbr")
    duration_s: float = 5.0
    rtt_s: float = 0.200
    rate_bytes_per_s: float = 100e6 / 8
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [p for p in self.losses if not 0.0 <= p < 1.0]
        if bad or not self.losses:
            raise LabError(f"loss levels must lie in [0, 1), got {list(self.losses) or '(none)'}")
        unknown = [c for c in self.ccs if c not in CONGESTION_CONTROLS]
        if unknown or not self.ccs:
            what = shown(unknown[0]) if unknown else "(none)"
            raise LabError(f"unknown --cc {what}; known: {', '.join(CONGESTION_CONTROLS)}")
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise LabError(f"the duration must lie in (0, {MAX_DURATION_S:g}] s")
        if self.rtt_s < 0 or self.rate_bytes_per_s <= 0:
            raise LabError("the RTT must be ≥ 0 and the rate > 0")

    def path_config(self, loss: float) -> PathConfig:
        up = Direction(delay_s=self.rtt_s / 2, rate_bytes_per_s=self.rate_bytes_per_s)
        down = Direction(delay_s=self.rtt_s / 2, rate_bytes_per_s=self.rate_bytes_per_s, loss=loss)
        return PathConfig(up=up, down=down, seed=self.seed)


def model_columns(
    loss: float, rtt_s: float, rate_bytes_per_s: float, mss_bytes: int = TIMESTAMP_MSS_BYTES
) -> dict[str, float | None]:
    """Mathis (C = 1, 1.31) and ideal ``(1 − p)·B`` in bytes/s; Mathis is None at ``p = 0``."""

    def mathis(c: float) -> float | None:
        value = float(mathis_rate_bytes_per_s(mss_bytes, rtt_s, loss, c))
        return None if math.isinf(value) else value

    return {
        "mathis_c1_bytes_per_s": mathis(C_SIMPLE),
        "mathis_c131_bytes_per_s": mathis(C_RANDOM),
        "ideal_bytes_per_s": float(ideal_goodput_bytes_per_s(rate_bytes_per_s, loss)),
        "payload_ceiling_bytes_per_s": rate_bytes_per_s * mss_bytes / MTU_BYTES,
    }


def run_throughput(exp: ThroughputExperiment, progress=None) -> dict:
    """Every (loss, cc) combination on its own run; the JSON-ready record."""
    netns.require_lab()
    rows = []
    emulator = {}
    for loss in exp.losses:
        path = EmulatedPath(exp.path_config(loss))
        with path:
            for cc in exp.ccs:
                measured = _bulk(path, cc, exp.duration_s)
                row = {
                    "loss": loss,
                    "cc": cc,
                    **measured,
                    **model_columns(loss, exp.rtt_s, exp.rate_bytes_per_s),
                }
                rows.append(row)
                if progress is not None:
                    progress(row)
        emulator[str(loss)] = {k: asdict(v) for k, v in (path.stats or {}).items()}
    return {
        "experiment": "throughput",
        "parameters": {
            "losses": list(exp.losses),
            "ccs": list(exp.ccs),
            "duration_s": exp.duration_s,
            "rtt_s": exp.rtt_s,
            "rate_bytes_per_s": exp.rate_bytes_per_s,
            "loss_direction": "down (server → client; the server sends)",
            "queue_bytes": DEFAULT_QUEUE_BYTES,
            "mss_bytes": TIMESTAMP_MSS_BYTES,
            "socket_buffers_bytes": TUNED_BUFFER_BYTES,
        },
        "kernel": os.uname().release,
        "seeds": {"path": exp.seed},
        "emulator": emulator,
        "rows": rows,
    }


def _bulk(path: EmulatedPath, cc: str, duration_s: float) -> dict:
    """Server → client for ``duration_s``: bytes the client read, in total and per half."""
    listener = path.socket("server")
    client = path.socket("client")
    conn = None
    try:
        for sock in (listener, client):
            set_buffers(sock, TUNED_BUFFER_BYTES)  # the window must not be what limits
            set_congestion(sock, cc)
        listener.bind((path.server_addr, 0))
        listener.listen(1)
        client.settimeout(CONNECT_TIMEOUT_S)
        client.connect(listener.getsockname())
        listener.settimeout(CONNECT_TIMEOUT_S)
        conn, _ = listener.accept()
        seen = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
        conn.setblocking(False)
        client.setblocking(False)
        chunk = memoryview(bytes(CHUNK_BYTES))
        buf = bytearray(CHUNK_BYTES)
        received = half_mark = 0
        start = time.perf_counter()
        half, stop = start + duration_s / 2, start + duration_s
        now = start
        while now < stop:
            readable, writable, _ = select.select([client], [conn], [], TICK_S)
            if writable:
                try:
                    conn.send(chunk)
                except BlockingIOError:
                    pass
            if readable:
                try:
                    while n := client.recv_into(buf):
                        received += n
                except BlockingIOError:
                    pass
            now = time.perf_counter()
            if now < half:
                half_mark = received
        elapsed = now - start
        return {
            "cc_seen": seen.rstrip(b"\0").decode(),
            "duration_s": elapsed,
            "received_bytes": received,
            "goodput_bytes_per_s": received / elapsed,
            "second_half_bytes_per_s": (received - half_mark) / (elapsed - duration_s / 2),
        }
    finally:
        for sock in (conn, client, listener):
            if sock is not None:
                close_with_reset(sock)


def close_with_reset(sock: socket.socket) -> None:
    """Close with RST (linger 0): nothing left in the buffers keeps sending."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()
