"""What a relay client measures of the path, read by the router (issue 32, part 6).

A relay client answers ``GET /stats`` on its SOCKS port with its session's
measurements (``tierwise relay stats --client``): smoothed and minimum RTT, the rate
it sends at (``bandwidth_bytes_per_s``) and the rate it receives at
(``delivery_in_bytes_per_s``), and the raw loss of each direction (``loss_out``:
client → gateway; ``loss_in``: gateway → client). The router runs on the client's side,
so *up* is the client's *out*.

These are the path's numbers, not the relay's: the same long path carries a site's
direct TCP connections. So for a site reached both ways (``via = ["direct",
"relay"]``) the loss each way feeds both routes' estimates — the planner then charges
the direct route's TCP its loss recovery and the relay route's FEC its repairs. The
rates are reported for a reader (``tierwise relay stats``) but not fed: a session
carrying only the router's probes measures a few kB/s, not the path (found in the lab:
its first version fed them and predicted the relay route 2.9 s for a 200 B request).
The router reads the numbers over the socket, as any client of the relay would:
``route`` does not import ``relay`` (docs/design.md).
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["RelayPath", "fetch_relay_path", "parse_relay_path"]

FETCH_TIMEOUT_S = 2.0
FETCH_MAX_BYTES = 256 * 1024  # a client's stats are a few kB; more is not a relay client
MIN_RATE_BYTES_PER_S = 1e3  # below this a rate is an idle session's, not the path's


@dataclass(frozen=True)
class RelayPath:
    """The path as the relay client measured it (SI units; None: not measured yet)."""

    rtt_s: float | None
    up_rate_bytes_per_s: float | None
    down_rate_bytes_per_s: float | None
    loss_up: float
    loss_down: float

    def samples(self) -> dict[str, float]:
        """The estimate updates for every route over this path: its loss each way.

        Not the rates: a session that carried only the router's probes measured a few
        kB/s (its flights app-limited), not the path; a route's rates come from its own
        transfers. The RTT comes from the route's own probes."""
        return {"loss_up": self.loss_up, "loss_down": self.loss_down}


def parse_relay_path(data: Any) -> RelayPath | None:
    """The numbers of a client's ``/stats`` answer; None if it is not one with an
    established session (no session yet, a gateway's stats, something else)."""
    if not isinstance(data, dict) or data.get("role") == "gateway":
        return None
    if data.get("state") != "established":
        return None
    rtt = _number(data.get("min_rtt_s")) or _number(data.get("srtt_s"))
    return RelayPath(
        rtt_s=rtt or None,
        up_rate_bytes_per_s=_rate(data.get("bandwidth_bytes_per_s")),
        down_rate_bytes_per_s=_rate(data.get("delivery_in_bytes_per_s")),
        loss_up=_share(data.get("loss_out")),
        loss_down=_share(data.get("loss_in")),
    )


async def fetch_relay_path(host: str, port: int) -> RelayPath | None:
    """Ask the relay client at ``host:port`` (its SOCKS address) for its measurements;
    None when it does not answer in time or answers something else."""
    writer = None
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"GET /stats HTTP/1.0\r\n\r\n")
            raw = await reader.read(FETCH_MAX_BYTES)
            while len(raw) < FETCH_MAX_BYTES and (more := await reader.read(FETCH_MAX_BYTES)):
                raw += more
    except (OSError, TimeoutError, UnicodeError):
        return None
    finally:
        if writer is not None:
            writer.close()
    _, _, body = raw.partition(b"\r\n\r\n")
    try:
        return parse_relay_path(json.loads(body))
    except ValueError:
        return None


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) and value > 0 else 0.0


def _rate(value: Any) -> float | None:
    rate = _number(value)
    return rate if rate >= MIN_RATE_BYTES_PER_S else None


def _share(value: Any) -> float:
    return min(_number(value), 1.0)
