"""Packet-level discrete-event simulation of transfers over links (§12.3, §12.4)."""

from tierwise.sim.engine import Simulator
from tierwise.sim.fec import run_fec_request
from tierwise.sim.link import Bernoulli, GilbertElliott, Link
from tierwise.sim.streaming import StreamWrite, run_rounds, run_stream, run_streams
from tierwise.sim.wireless import WirelessMedium, run_wireless_transfer
from tierwise.sim.workloads import PathSpec, TcpSpec, run_request

__all__ = [
    "Bernoulli",
    "GilbertElliott",
    "Link",
    "PathSpec",
    "Simulator",
    "StreamWrite",
    "TcpSpec",
    "WirelessMedium",
    "run_fec_request",
    "run_request",
    "run_rounds",
    "run_stream",
    "run_streams",
    "run_wireless_transfer",
]
