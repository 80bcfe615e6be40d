"""Packet-level discrete-event simulation of transfers over links (§12.3, §12.4).

The exports load on first use (PEP 562), so ``tierwise sim`` imports only the pieces
its workload needs (not the FEC, streaming or wireless models and their numpy).
"""

from __future__ import annotations

from tierwise.lazy import lazy_exports

# name → module that defines it
_LAZY = {
    "Simulator": "tierwise.sim.engine",
    "run_fec_request": "tierwise.sim.fec",
    "Bernoulli": "tierwise.sim.link",
    "GilbertElliott": "tierwise.sim.link",
    "Link": "tierwise.sim.link",
    "StreamWrite": "tierwise.sim.streaming",
    "run_rounds": "tierwise.sim.streaming",
    "run_stream": "tierwise.sim.streaming",
    "run_streams": "tierwise.sim.streaming",
    "WirelessMedium": "tierwise.sim.wireless",
    "run_wireless_transfer": "tierwise.sim.wireless",
    "PathSpec": "tierwise.sim.workloads",
    "TcpSpec": "tierwise.sim.workloads",
    "run_request": "tierwise.sim.workloads",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
