"""Evaluate a site's transfers with the packet-level simulator instead of the closed form.

A site with ``evaluate = "sim"`` has each request (or each round of a loop) run
through :func:`tierwise.sim.run_request` — upload, the site's processing, download —
over its uplink, downlink, RTT and loss, with its MSS, initial window and
congestion controller, for ``runs`` seeds. Each round starts from the initial
window (idle restart, the Linux default); a site with ``connection`` also pays its
handshake as packets, on the first round (``reused``) or every round. The closed
form still finds thresholds
(they need hundreds of evaluations); the option notes that.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from tierwise.errors import ScenarioError
from tierwise.plan.resolve import SiteCosts
from tierwise.scenario.schema import Scenario, Site

__all__ = ["simulate_task"]


def _specs(site: Site) -> tuple[Any, Any]:
    from tierwise.model.transport import HANDSHAKE_RTTS, SYN_WINDOW_BYTES
    from tierwise.plan.network import syn_capped
    from tierwise.sim import PathSpec, TcpSpec

    up = site.uplink if not isinstance(site.uplink, list) else None
    if up is None or site.downlink is None:
        raise ScenarioError(
            'evaluate = "sim" needs a constant uplink and a downlink',
            path=f"site.{site.name}.evaluate",
        )
    path = PathSpec(float(up), float(site.downlink), site.rtt, site.loss, site.loss_on_download)
    tcp = TcpSpec(
        cc=site.congestion,
        mss=int(site.mss),
        header=52,
        ack_bytes=52,
        initial_window=site.initial_window or 10,
        handshake_rtts=HANDSHAKE_RTTS[site.handshake] if site.connection is not None else 0,
        syn_window=SYN_WINDOW_BYTES if syn_capped(site) else None,
    )
    return path, tcp


def _check_budget(site: Site, upload: float, download: float, rounds: int, source: str) -> None:
    """Refuse, before simulating, more data packets than ``tierwise sim``'s default budget."""
    from tierwise.sim.run import MAX_PACKETS

    mss = float(site.mss)
    per_round = math.ceil(upload / mss) + math.ceil(download / mss) + 1
    total = per_round * rounds * site.runs
    if total > MAX_PACKETS:
        raise ScenarioError(
            f"simulating this site would move about {total:,} packets ({per_round:,} a round "
            f"× {rounds:,} rounds × {site.runs:,} runs), over the budget of {MAX_PACKETS:,}; "
            "lower runs or the rounds, or leave evaluate out for the closed form",
            source=source,
            path=f"site.{site.name}.evaluate",
        )


def simulate_task(
    scn: Scenario,
    costs: SiteCosts,
    source: str,
    upload: float,
    rounds: int,
    per_round_fixed_s: float,
) -> dict[str, Any]:
    """Whole-task times over ``site.runs`` seeds: rounds × (client + simulated request).

    ``per_round_fixed_s`` is the non-network work of a round outside the request
    (client work, codec); the model time is the server's processing inside it.
    """
    from tierwise.sim import run_request

    site = costs.site
    if scn.task.kind not in ("request", "loop"):
        raise ScenarioError(
            'evaluate = "sim" applies to request and loop tasks',
            source=source,
            path=f"site.{site.name}.evaluate",
        )
    try:
        path, tcp = _specs(site)
    except ScenarioError as exc:
        raise ScenarioError(exc.detail, source=source, path=exc.path) from None
    _check_budget(site, upload, float(scn.task.download), rounds, source)
    totals = np.zeros(site.runs)
    network = np.zeros(site.runs)
    later = replace(tcp, handshake_rtts=0) if site.connection == "reused" else tcp
    for run in range(site.runs):
        for r in range(rounds):
            res = run_request(
                path,
                tcp if r == 0 else later,
                math.ceil(upload),
                int(scn.task.download),
                costs.model_s,
                seed=run * 100_003 + r,
            )
            totals[run] += res.time_s + per_round_fixed_s
            network[run] += res.time_s - costs.model_s
    totals += costs.prepare_s
    return {
        "time_s": float(totals.mean()),
        "network_s": float(network.mean()),
        "time_p99_s": float(np.quantile(totals, 0.99)),
        "runs": site.runs,
    }
