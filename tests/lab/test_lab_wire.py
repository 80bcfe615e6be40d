"""The wire view: segments as they arrive, grouped into the sender's rounds.

Parsing and grouping run everywhere; the captures need the lab host (``@lab``).
"""

from __future__ import annotations

import itertools
import struct

import pytest

from tests.lab.conftest import lab, left_behind
from tierwise.lab.bench.capture import Arrival, rounds, tcp_payload_bytes
from tierwise.lab.experiments.request import RequestExperiment, predict
from tierwise.lab.experiments.rounds import cold_rounds
from tierwise.lab.views.rounds import save_rounds


def _ipv4_tcp(payload: int, *, proto: int = 6, ihl: int = 5, doff: int = 8) -> bytes:
    total = ihl * 4 + doff * 4 + payload
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x40 | ihl, 0, total, 0, 0, 64, proto, 0, b"\0" * 4, b"\0" * 4
    )
    ip += b"\0" * (ihl * 4 - 20)
    tcp = b"\0" * 12 + bytes([doff << 4]) + b"\0" * (doff * 4 - 13)
    return ip + tcp + b"x" * payload


def test_payload_length_comes_from_the_ip_and_tcp_headers() -> None:
    """Total length − IP header − TCP header (with options); ACKs and non-TCP count 0."""
    assert tcp_payload_bytes(_ipv4_tcp(1448)) == 1448
    assert tcp_payload_bytes(_ipv4_tcp(1448, ihl=6, doff=5)) == 1448
    assert tcp_payload_bytes(_ipv4_tcp(0)) == 0
    assert tcp_payload_bytes(_ipv4_tcp(100, proto=17)) == 0  # UDP
    assert tcp_payload_bytes(b"\x60" + b"\0" * 60) == 0  # IPv6
    assert tcp_payload_bytes(b"\x45\0") == 0  # truncated


def test_rounds_figure_writes_png_and_svg(tmp_path) -> None:
    """Two synthetic runs (a burst staircase, a paced ramp) draw into valid PNG and SVG."""
    burst = [[300.0 + 200 * k, 1448] for k in range(3) for _ in range(10 * 2**k)]
    paced = [[300.0 + 5 * i, 1448] for i in range(70)]
    results = [
        {"cc": "cubic", "time_s": 1.2, "arrivals_ms": burst},
        {"cc": "bbr", "initcwnd": 300, "time_s": 1.4, "arrivals_ms": paced},
    ]
    paths = save_rounds(results, tmp_path, "rounds", rtt_s=0.2)
    assert [p.suffix for p in paths] == [".png", ".svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = paths[1].read_text()
    assert "cubic: 1.200 s" in svg and "bbr, initcwnd 300: 1.400 s" in svg


def test_rounds_split_on_silences_longer_than_the_gap() -> None:
    """Back-to-back arrivals form one round; a silence above gap_s opens the next."""
    times = [0.0, 0.001, 0.002, 0.2, 0.201, 0.4]
    got = rounds([Arrival(t, 1000) for t in times], gap_s=0.05)
    assert [(r.segments, r.payload_bytes) for r in got] == [(3, 3000), (2, 2000), (1, 1000)]
    assert got[0].spread_s == pytest.approx(0.002)
    assert rounds([], gap_s=0.05) == []


def test_a_stall_inside_a_round_does_not_open_the_next() -> None:
    """A 60 ms silence 10 ms into a round (a descheduled emulator) stays in that round when
    rounds must be at least 100 ms long; the next round trip's burst still splits."""
    times = [0.0, 0.001, 0.002, 0.062, 0.063, 0.2, 0.201]
    arrivals = [Arrival(t, 1000) for t in times]
    assert [r.segments for r in rounds(arrivals, gap_s=0.05)] == [3, 2, 2]
    assert [r.segments for r in rounds(arrivals, gap_s=0.05, min_round_s=0.1)] == [5, 2]


@lab
def test_cold_cubic_doubles_from_ten_segments_per_round() -> None:
    """200 ms, 100 Mbit/s, 354,640 B cold: the wire shows 10, 20, 40, 80 segments, then the rest.

    The rounds of the slow-start closed form (§12.3.2, §12.3.5), one RTT apart. The
    receiver gets initrwnd 300 and 8 MB buffers (``initcwnd=10``), the closed form's
    "receive window never the limit": with kernel defaults round 4 is sometimes 56 + 122
    (docs/validation.md).
    """
    result = cold_rounds(RequestExperiment(), "cubic", initcwnd=10)
    segments = [r["segments"] for r in result["rounds"]]
    assert segments[:4] == [10, 20, 40, 80]
    assert len(segments) == 5 and sum(r["bytes"] for r in result["rounds"]) > 354_640
    starts = [r["first_ms"] for r in result["rounds"]]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # one RTT apart: ACK-clocked, so never sooner; a late round is load, a missed one 400 ms
    assert all(190 <= gap < 300 for gap in gaps), gaps
    # the closed form's 1.241 s (±3 % idle): no faster, and not a round slower
    assert 0.97 * 1.241 <= result["time_s"] < 1.241 + 0.2
    assert left_behind().empty


@lab
def test_cold_bbr_paces_its_startup() -> None:
    """BBR bursts IW 10, then paces: round 2's 20 segments spread over more than RTT/4."""
    result = cold_rounds(RequestExperiment(), "bbr")
    first, second = result["rounds"][:2]
    assert first["segments"] == 10
    assert second["segments"] == 20
    assert second["last_ms"] - second["first_ms"] > 50  # cubic: < 1 ms
    assert result["after"]["bbr_pacing_gain"] == pytest.approx(2.885, abs=0.01)
    # the simulator's bbr-linux (the kernel's gains) has the same shape and time
    sim = predict(RequestExperiment(), "cold", 10 * 1448, "bbr")["sim_s"]
    assert 0.95 * sim <= result["time_s"] < sim + 0.2  # ±5 % idle; load only adds


@lab
def test_initcwnd_300_first_flight_is_the_syn_window() -> None:
    """IW 300 cold: the first round is exactly the SYN-ACK's 65,535 B; the rest one RTT later."""
    result = cold_rounds(RequestExperiment(), "cubic", initcwnd=300)
    assert result["rounds"][0]["bytes"] == 65_535
    assert len(result["rounds"]) == 2
