"""The propagation floor of a network path (§12.1.4).

No protocol, queue or bandwidth can make a reply arrive sooner than light takes
to go there and back.
"""

from __future__ import annotations

import numpy as np

from tierwise.model._check import ArrayLike, nonneg, positive

__all__ = [
    "FIBRE_SPEED_M_PER_S",
    "max_distance_m",
    "propagation_one_way_s",
    "propagation_rtt_s",
]

FIBRE_SPEED_M_PER_S = 2e8  # light in optical fibre, about 2/3 of c (§12.1.4)


def propagation_one_way_s(
    distance_m: ArrayLike, speed_m_per_s: ArrayLike = FIBRE_SPEED_M_PER_S
) -> ArrayLike:
    """One-way propagation ``d / v`` over a path of length ``d`` (§12.1.4)."""
    nonneg("distance", distance_m)
    positive("signal speed", speed_m_per_s)
    return np.divide(distance_m, speed_m_per_s)


def propagation_rtt_s(
    distance_m: ArrayLike, speed_m_per_s: ArrayLike = FIBRE_SPEED_M_PER_S
) -> ArrayLike:
    """Round-trip propagation ``2d / v`` over a one-way distance ``d`` (§12.1.4).

    10,000 km of fibre → at least 100 ms.
    """
    return 2 * propagation_one_way_s(distance_m, speed_m_per_s)


def max_distance_m(rtt_s: ArrayLike, speed_m_per_s: ArrayLike = FIBRE_SPEED_M_PER_S) -> ArrayLike:
    """Farthest one-way distance whose round-trip propagation fits ``R``: ``v·R/2`` (§12.1.4).

    ``R`` is ``rtt_s``: a 50 ms reply budget rules out servers beyond 5,000 km of fibre.
    """
    nonneg("round-trip time", rtt_s)
    positive("signal speed", speed_m_per_s)
    return np.multiply(speed_m_per_s, rtt_s) / 2
