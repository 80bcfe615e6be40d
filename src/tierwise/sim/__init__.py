"""Packet-level discrete-event simulation of transfers over links (§12.3, §12.4)."""

from tierwise.sim.engine import Simulator
from tierwise.sim.link import Bernoulli, GilbertElliott, Link
from tierwise.sim.workloads import PathSpec, TcpSpec, run_request

__all__ = ["Bernoulli", "GilbertElliott", "Link", "PathSpec", "Simulator", "TcpSpec", "run_request"]
