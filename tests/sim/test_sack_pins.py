"""Pinned outcomes: faster SACK bookkeeping must not change a single event.

Completion time, event count and the SHA-256 of the trace CSV of the bundled sim
file and of lossy cases (random and bursty loss, drop-tail queues, delayed ACKs, a
handshake with the SYN window) were recorded with the quadratic scoreboard; any
change to proto/tcp.py, proto/rangeset.py or the engine must reproduce them exactly.
Regenerate (only for an intended change of behaviour) with
``python tests/sim/test_sack_pins.py``.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tierwise.sim import PathSpec, TcpSpec, run_request
from tierwise.sim.run import run_sim_file
from tierwise.sim.scenario import load_sim, sim_example

MBIT = 125_000.0
GE = {"p_gb": 0.01, "p_bg": 0.3, "loss_bad": 0.5}
BDP_PACKETS = 205  # 20 Mbit/s × 100 ms / 1,222 B

CASES: dict[str, tuple[dict[str, Any], dict[str, Any], int]] = {
    "newreno-1%": ({"up_loss": 0.01, "down_loss": 0.01}, {"cc": "newreno"}, 3_000_000),
    "cubic-2%-bdp": (
        {"up_loss": 0.02, "queue_packets": BDP_PACKETS},
        {"cc": "cubic"},
        3_000_000,
    ),
    "bbr-1%": ({"up_loss": 0.01}, {"cc": "bbr"}, 3_000_000),
    "bbr-linux-ge": ({"up_loss": GE}, {"cc": "bbr-linux"}, 3_000_000),
    "newreno-delack-queue50": (
        {"up_loss": 0.01, "queue_packets": 50},
        {"cc": "newreno", "ack_every": 2, "ack_delay": 0.04},
        2_000_000,
    ),
    "cubic-3%-huge-queue": (
        {"up_loss": 0.03, "queue_packets": 100_000},
        {"cc": "cubic", "initial_window": 40},
        5_000_000,
    ),
    "bbr-2%-huge-queue": (
        {"up_loss": 0.02, "down_loss": 0.005, "queue_packets": 100_000},
        {"cc": "bbr"},
        10_000_000,
    ),
    "bbr-linux-iw300-handshake": (
        {"up_loss": 0.01},
        {"cc": "bbr-linux", "initial_window": 300, "handshake_rtts": 1, "syn_window": 65_535},
        2_000_000,
    ),
}

PINS: dict[str, tuple[str, int, str]] = {
    "sim-photo": (
        "14.363390080006333",
        59968,
        "54dd254cddaf574aabb3f11b7f2b22e969e8a8a2cee622bf34bcd61df7085eca",
    ),
    "newreno-1%": (
        "18.961830400000068",
        5355,
        "c99490c7216d05f5ec760daa560e50dcc01d255e407829815096fe1d3d9e51e5",
    ),
    "cubic-2%-bdp": (
        "30.739939200000208",
        5432,
        "66c9f76d687db0e3bb66bca67a3b2c32f880cef674a37dc888800269f9d15f12",
    ),
    "bbr-1%": (  # re-pinned for BBR's draft-00 send quanta (BBRInflight)
        "2.2702301121956476",
        7073,
        "4f8e3e13160c4b2d779e1686daa9ab70c0995b92daf468a415b236a07d68e4e9",
    ),
    "bbr-linux-ge": (
        "2.1902450300406873",
        6666,
        "023cb1a436a58ac74402260cacb83d5942864283b9157ee67e14141298cd0200",
    ),
    "newreno-delack-queue50": (
        "10.67635440000001",
        3662,
        "6ebe77b55321df7d25f54c6ac6138b006c496289b70cc0f4886369b03fe1f613",
    ),
    "cubic-3%-huge-queue": (
        "68.89414559999663",
        9009,
        "d8b2b11ec23fdbd7b72dc3d4641a3d83c51bf31d68a936294dd55cc92cf3a87a",
    ),
    "bbr-2%-huge-queue": (
        "5.285245147056322",
        25237,
        "13584761b9ee1fea298b709781923816b17254a36b4f31769702d492ed1c50a3",
    ),
    "bbr-linux-iw300-handshake": (
        "1.379817199999966",
        4606,
        "f1dff9564647aa3c8fe5883c975e89d9eecdc0fb7c456f1a2fd4215a08a619c2",
    ),
}


def _digest(trace: Any) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        trace.write_csv(str(path))
        return hashlib.sha256(path.read_bytes()).hexdigest()


def outcome(name: str) -> tuple[str, int, str]:
    """(repr of the completion time, events, trace digest) of one pinned case."""
    if name == "sim-photo":
        out = run_sim_file(load_sim(sim_example("sim-photo")), trace=True)
        return repr(out["time_s"]), int(out["first_run"]["events"]), _digest(out["trace"])
    path_kw, tcp_kw, upload = CASES[name]
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1, **path_kw)
    tcp = TcpSpec(mss=1168, header=54, ack_bytes=54, **tcp_kw)
    r = run_request(path, tcp, upload, 100_000, 0.05, seed=7, trace=True)
    return repr(r.time_s), r.events, _digest(r.trace)


@pytest.mark.parametrize("name", ["sim-photo", *CASES])
def test_outcome_matches_the_pin(name: str) -> None:
    """Same completion time, same events, same trace bytes as the pinned run."""
    assert outcome(name) == PINS[name]


if __name__ == "__main__":
    for case in ["sim-photo", *CASES]:
        print(f"    {case!r}: {outcome(case)!r},")
