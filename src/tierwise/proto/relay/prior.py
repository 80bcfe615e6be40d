"""What an earlier session measured of a path: a new session's start (path memory).

A new session knows nothing of its path: it sends 32 datagrams in its first round
trip and measures, so a request costs about two round trips more than its floor.
An earlier session on the same path (the same gateway, or for a gateway the same
client) measured it; the I/O layer keeps that (:mod:`tierwise.relay.pathmemory`,
the file and its ageing) and hands the numbers to a new connection as a
:class:`PathPrior`, in the spirit of Linux's TCP metrics cache (``tcp_metrics``,
RFC 9040 §4's "temporal sharing"). The connection then starts:

* paced at ``PRIOR_RATE_SHARE`` of the remembered delivery rate (start-up's gain of 2
  makes that 1.25 × the remembered rate: a request goes out whole, at the path's rate,
  and a record below the path grows),
  its window sized from the remembered minimum RTT, and at most a request's worth
  (``PRIOR_BLIND_BYTES``, or ``PRIOR_BLIND_S`` of the rate if more) sent before the
  first ACK;
* with FEC sized for the remembered loss until the peer has judged this direction.

A remembered path may have changed. The prior is dropped (:meth:`PriorCheck`), and the
session goes on from what it measured as a new one would, when

* the first round trip's minimum RTT (the ACK's delay taken out) is longer than the
  remembered one by ``PRIOR_RTT_SLACK`` (plus ``PRIOR_RTT_SLACK_S``): a new route. Not
  the handshake's: a gateway just started answers its first HELLO late (in the lab
  under load that dropped every memory);
* the first round trips queue (the rate controller's brake: RTT inflation), the usual
  sign of a slower bottleneck;
* more packets are lost than the remembered loss explains (``PRIOR_LOSS_SLACK`` above
  it, at least ``PRIOR_LOSS_MIN_PACKETS``): a slower path with a shallow queue, or a
  lossier one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tierwise.errors import LocalProtocolError

__all__ = [
    "PRIOR_BLIND_BYTES",
    "PRIOR_BLIND_S",
    "PRIOR_LOSS_MIN_PACKETS",
    "PRIOR_LOSS_SLACK",
    "PRIOR_RATE_SHARE",
    "PRIOR_RTT_SLACK",
    "PRIOR_RTT_SLACK_S",
    "PathPrior",
]

# start-up paces at gain 2 × this share: 1.25 × the remembered rate (BBR's probing gain): a
# path that kept its rate is filled from the first datagram and a record below the path
# (a warm-up on a busy host measured 19.5 of 100 Mbit/s) grows a quarter per session, as
# flights paced at the record itself measure no more than it; a path that slowed sees a
# queue, which the brake and the ACK train read
PRIOR_RATE_SHARE = 0.625
# what a remembered start sends before the first ACK: a request's worth (354,640 B with
# 14 % loss's repairs is ≈ 540 kB, headers and a second request fit in 1 MB), or 20 ms
# of the remembered rate on a faster path; a path that has become slower loses at most
# this less what its queue holds, then the ACKs' own timing rules. (20 ms alone starved
# a request on a path remembered at 19.5 Mbit/s: 48 kB blind, the rest a round trip late)
PRIOR_BLIND_S = 0.02
PRIOR_BLIND_BYTES = 1_000_000
PRIOR_RTT_SLACK = 0.5  # twice the brake's QUEUE_SLACK: more than a queue, another route
PRIOR_RTT_SLACK_S = 0.01  # scheduling jitter of the first samples on a loaded host
PRIOR_LOSS_SLACK = 0.05  # lost share above the remembered loss that proves the path changed
PRIOR_LOSS_MIN_PACKETS = 8  # ... counted over at least this many lost packets


@dataclass(frozen=True)
class PathPrior:
    """One direction's remembered path: minimum RTT, highest delivery rate, loss.

    ``rate_bytes_per_s`` and ``loss`` are of the direction this end sends in;
    ``datagram_bytes`` the path MTU's datagram it had found (None: not searched).
    """

    min_rtt_s: float
    rate_bytes_per_s: float
    loss: float = 0.0
    datagram_bytes: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_rtt_s) and 0.0 < self.min_rtt_s <= 60.0):
            raise LocalProtocolError(f"prior min_rtt_s must be in (0, 60], got {self.min_rtt_s}")
        if not (math.isfinite(self.rate_bytes_per_s) and 1e3 <= self.rate_bytes_per_s <= 1e11):
            raise LocalProtocolError(
                f"prior rate_bytes_per_s must be in [1e3, 1e11], got {self.rate_bytes_per_s}"
            )
        if not 0.0 <= self.loss <= 0.5:
            raise LocalProtocolError(f"prior loss must be in [0, 0.5], got {self.loss}")

    @property
    def start_rate_bytes_per_s(self) -> float:
        """The estimate a new session starts from (paced at twice it in start-up)."""
        return PRIOR_RATE_SHARE * self.rate_bytes_per_s

    @property
    def blind_bytes(self) -> float:
        """What may fly before the first ACK: ``PRIOR_BLIND_BYTES``, or ``PRIOR_BLIND_S`` at
        the remembered rate if more (paced at that rate, no more than a round trip's worth
        leaves before the first ACK anyway)."""
        return max(PRIOR_BLIND_BYTES, PRIOR_BLIND_S * self.rate_bytes_per_s)

    def rtt_changed(self, rtt_s: float) -> bool:
        """A round trip this much longer than the remembered minimum is another path."""
        return rtt_s > self.min_rtt_s * (1 + PRIOR_RTT_SLACK) + PRIOR_RTT_SLACK_S

    def loss_changed(self, lost: int, sent: int) -> bool:
        """``lost`` of ``sent`` packets is more than the remembered loss explains."""
        if lost < PRIOR_LOSS_MIN_PACKETS or sent <= 0:
            return False
        share = lost / sent
        margin = 3 * math.sqrt(max(self.loss * (1 - self.loss), 1e-4) / sent)  # 3 σ
        return share > self.loss + PRIOR_LOSS_SLACK + margin
