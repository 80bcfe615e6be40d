"""Inverse questions people answer by hand: solve a model for the input at a limit.

- the highest random loss a fixed number of repair symbols still covers at a success
  target (§12.3.3, exercise 12-10(d): a ratio fixed at 63 / 245 = 25.7 % only covers
  14.2 %; at 3.6 % it wastes most of its redundancy);
- the exit rate below which a shared exit, not the two access paths, bounds a split
  transfer (§12.4.3, exercise 12-6(b): 20 + 10 Mbit/s → the exit binds below 30 Mbit/s).
"""

from __future__ import annotations

import numpy as np

from tierwise.errors import ModelError
from tierwise.model import loss as _loss
from tierwise.model import multipath
from tierwise.model._check import ArrayLike, nonneg, positive, probability

__all__ = ["LOSS_TOLERANCE", "exit_bottleneck_rate_bytes_per_s", "fec_max_loss"]

LOSS_TOLERANCE = 1e-7  # absolute: far below any loss rate a path measurement resolves


def fec_max_loss(k_data: int, r_repair: int, target: float) -> float:
    """Largest ``p`` with ``P(Binomial(k + r, p) ≤ r) ≥ target`` (§12.3.3, ex. 12-10).

    Block success falls as ``p`` rises, so bisection on ``p ∈ [0, 1)`` finds the
    edge to :data:`LOSS_TOLERANCE`; the result still meets the target. 245 data and
    63 repair symbols at 0.999 cover up to 14.2 %; 20 repair symbols 3.70 %.
    """
    probability("success target", target, open_upper=True)
    if r_repair < 0 or k_data < 0:
        raise ModelError(f"symbol counts must be ≥ 0, got k = {k_data}, r = {r_repair}")
    if k_data == 0:
        return 1.0
    low, high = 0.0, 1.0 - 1e-12
    if _loss.fec_success(k_data, r_repair, high) >= target:
        return high
    while high - low > LOSS_TOLERANCE:
        mid = 0.5 * (low + high)
        if _loss.fec_success(k_data, r_repair, mid) >= target:
            low = mid
        else:
            high = mid
    return low


def exit_bottleneck_rate_bytes_per_s(
    size_bytes: ArrayLike,
    b1_bytes_per_s: ArrayLike,
    b2_bytes_per_s: ArrayLike,
    fraction: ArrayLike | None = None,
) -> ArrayLike:
    """Exit rate below which the shared exit bounds the split: ``B* = S / T_split``.

    With the optimal split ``T_split = S / (B1 + B2)`` this is ``B1 + B2`` (ex. 12-6(b):
    30 Mbit/s, so a 24 Mbit/s exit binds); an uneven ``fraction`` lowers it.
    """
    positive("size", size_bytes)
    nonneg("rate of path 1", b1_bytes_per_s)
    nonneg("rate of path 2", b2_bytes_per_s)
    split_s = multipath.split_time_s(size_bytes, b1_bytes_per_s, b2_bytes_per_s, fraction)
    return np.divide(size_bytes, split_s)
