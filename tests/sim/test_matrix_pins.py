"""Pinned outcomes of the issue-14 benchmark matrix (benchmarks/sim_vs_ns3.py).

30 MB over 20 Mbit/s, 100 ms, segment 1,168, IW 10, seed 1, for NewReno, CUBIC and
BBR with a 100,000-packet queue, a one-BDP queue (205 packets) and 1 % random loss.
Recorded before the issue-14 speed work; whichever hot path runs (pure Python or
the optional mypyc build), completion time and event count must match exactly.
"""

from __future__ import annotations

import pytest

from tierwise.sim import PathSpec, TcpSpec, run_request

MBIT = 125_000.0
REGIMES = {"huge": (100_000, 0.0), "bdp": (205, 0.0), "loss": (100_000, 0.01)}
PINS: dict[tuple[str, str], tuple[str, int]] = {
    ("newreno", "huge"): ("12.95581999999581", 51384),
    ("newreno", "bdp"): ("12.957534399995797", 51415),
    ("newreno", "loss"): ("224.73329600000864", 52209),
    ("cubic", "huge"): ("12.95581999999581", 51384),
    ("cubic", "bdp"): ("12.95581999999581", 51410),
    ("cubic", "loss"): ("229.45692000000977", 52215),
    # cubic-hystart (added after the speed work, opt-in): HyStart leaves slow start at
    # 0.73 s; its 5 %-per-RTT floor then meets the one-BDP queue (+0.708 % on cubic there)
    ("cubic-hystart", "huge"): ("12.95581999999581", 51395),
    ("cubic-hystart", "bdp"): ("13.047563999995822", 51410),
    ("cubic-hystart", "loss"): ("229.45692000000977", 52215),
    # BBR re-recorded once its window and phase targets gained draft-00's three send
    # quanta (BBRInflight); before: 13.12970266825611 / 13.130235904619743 / 13.393205714090014
    ("bbr", "huge"): ("13.091641232139168", 76065),
    ("bbr", "bdp"): ("13.092194217997728", 76106),
    ("bbr", "loss"): ("13.357917931995146", 76398),
}


def matrix_outcome(cc: str, regime: str, size_bytes: int = 30_000_000) -> tuple[str, int]:
    """(repr of the completion time, events) of one cell of the matrix."""
    queue, loss = REGIMES[regime]
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1, up_loss=loss, queue_packets=queue)
    tcp = TcpSpec(cc=cc, mss=1168, header=54, ack_bytes=54, initial_window=10)
    r = run_request(path, tcp, size_bytes, 0, 0.0, seed=1)
    return repr(r.time_s), r.events


@pytest.mark.parametrize(("cc", "regime"), list(PINS))
def test_matrix_cell_matches_the_pin(cc: str, regime: str) -> None:
    """Same completion time and event count as before the speed work."""
    assert matrix_outcome(cc, regime) == PINS[(cc, regime)]
