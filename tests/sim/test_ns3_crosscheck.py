"""tierwise.sim against ns-3 3.37 on a loss-free bulk transfer (skips without ns-3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "ns3"))

from ns3_runner import available, run_ns3

from tierwise.proto import CONTROLLERS
from tierwise.sim import PathSpec, TcpSpec, run_request

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not available(), reason="ns-3 3.37 (apt-get install libns3-dev) absent"),
]

MBIT = 125_000.0


@pytest.mark.parametrize("cc", ["newreno", "cubic", "bbr"])
def test_loss_free_bulk_transfer_within_two_percent(cc):
    """30 MB at 20 Mbit/s, 100 ms, segment 1,168, IW 10, ACK every packet: within 2 % of ns-3."""
    if cc not in CONTROLLERS:
        pytest.skip(f"{cc} is not implemented in tierwise.proto yet")
    theirs = run_ns3(cc, 0.0)
    assert theirs["completed"]
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1)
    tcp = TcpSpec(cc=cc, mss=1168, header=54, ack_bytes=54, initial_window=10)
    ours = run_request(path, tcp, 30_000_000, 0, 0.0)
    assert ours.time_s == pytest.approx(theirs["completion_from_first_data_s"], rel=0.02)
