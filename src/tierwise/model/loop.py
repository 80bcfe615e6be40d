"""Multi-round agent loops (§12.1.3) and the §12.5.2 deployment arithmetic.

A round cannot start before the previous one's action has updated the screen,
so round times add: ``T = M + Σ_i t_i`` with one-off preparation ``M``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tierwise.errors import ModelError
from tierwise.model._check import ArrayLike, nonneg, positive

__all__ = [
    "compressed_max_rounds",
    "disconnect_extra_s",
    "equal_rounds_disconnect_extra_s",
    "harmonic_mean_rate",
    "loop_time_s",
    "redone_count",
    "round_time_s",
    "schedule_upload_s",
]


def round_time_s(
    client_s: ArrayLike,
    model_s: ArrayLike,
    upload_s: ArrayLike = 0.0,
    rtt_s: ArrayLike = 0.0,
    download_s: ArrayLike = 0.0,
    codec_s: ArrayLike = 0.0,
) -> ArrayLike:
    """One round: ``t = T_client + T_model + S_u/B_u + R + S_d/B_d + T_codec`` (§12.1.3).

    3.5 s for 0.8 MB at 6.4 Mbit/s (1 s) + 0.3 s client + 2.0 s model + 0.2 s RTT.
    """
    for name, value in (
        ("client work", client_s),
        ("model time", model_s),
        ("upload time", upload_s),
        ("RTT", rtt_s),
        ("download time", download_s),
        ("codec time", codec_s),
    ):
        nonneg(name, value)
    return client_s + model_s + upload_s + rtt_s + download_s + codec_s


def loop_time_s(rounds: ArrayLike, round_s: ArrayLike, prepare_s: ArrayLike = 0.0) -> ArrayLike:
    """``T = M + N·t`` for N equal rounds after a one-off preparation M (§12.5.2)."""
    nonneg("rounds", rounds)
    nonneg("round time", round_s)
    nonneg("preparation", prepare_s)
    return prepare_s + np.multiply(rounds, round_s)


def schedule_upload_s(
    upload_bytes: float, uplinks_bytes_per_s: Sequence[float] | np.ndarray
) -> float:
    """Total upload over a per-round rate schedule: ``Σ S/b_i`` (§12.5.2).

    Ten rounds at 6 and ten at 10 Mbit/s take longer than twenty at the 8 Mbit/s
    arithmetic mean: time follows the harmonic mean of the rates.
    """
    rates = np.asarray(uplinks_bytes_per_s, dtype=float)
    positive("uplink", rates)
    nonneg("upload size", upload_bytes)
    return float(np.sum(upload_bytes / rates))


def harmonic_mean_rate(uplinks_bytes_per_s: Sequence[float] | np.ndarray) -> float:
    """The constant rate that moves the same bytes in the same time: ``n / Σ 1/b_i``."""
    rates = np.asarray(uplinks_bytes_per_s, dtype=float)
    positive("uplink", rates)
    return float(rates.size / np.sum(1.0 / rates))


def compressed_max_rounds(baseline_s: float, compressed_round_s: float) -> int:
    """Largest N' with ``N'·t' < T`` — more rounds than that and compression loses (§12.1.3).

    105 s uncompressed and 2.78 s per compressed round: N' < 37.8, so 37.
    """
    nonneg("baseline time", baseline_s)
    positive("compressed round time", compressed_round_s)
    ratio = baseline_s / compressed_round_s
    n = math.ceil(ratio) - 1
    return max(n, 0)


def disconnect_extra_s(
    round_s: Sequence[float] | np.ndarray, after_round: int, reconnect_s: float, progress: str
) -> float:
    """Extra time of one disconnect after ``after_round`` rounds, the last unacknowledged (§12.5.2).

    ``kept``: reconnect + redo that round; ``lost``: reconnect + redo every round so far.
    The cloud case: 1 s + 1.57 s → 34.2 s in all, or 1 s + 10 × 1.57 s → 48.3 s.
    """
    times = np.asarray(round_s, dtype=float)
    if not 1 <= after_round <= times.size:
        raise ModelError(f"after_round must lie in 1..{times.size}, got {after_round}")
    nonneg("reconnect time", reconnect_s)
    redo = _redo_slice(after_round, progress)
    return float(reconnect_s + times[redo].sum())


def equal_rounds_disconnect_extra_s(
    round_s: float, after_round: int, reconnect_s: float, progress: str
) -> float:
    """:func:`disconnect_extra_s` when every round takes ``round_s``: O(1) in the rounds.

    ``kept``: ``t_reconnect + t``; ``lost``: ``t_reconnect + k·t`` (§12.5.2).
    """
    if isinstance(after_round, bool) or not isinstance(after_round, int) or after_round < 1:
        raise ModelError(f"after_round must be an integer ≥ 1, got {after_round!r}")
    nonneg("round time", round_s)
    nonneg("reconnect time", reconnect_s)
    return float(reconnect_s + redone_count(after_round, progress) * round_s)


def _redo_slice(after_round: int, progress: str) -> slice:
    if progress == "kept":
        return slice(after_round - 1, after_round)
    if progress == "lost":
        return slice(0, after_round)
    raise ModelError(f"progress must be 'kept' or 'lost', got {progress!r}")


def redone_count(after_round: int, progress: str) -> int:
    """How many rounds a disconnect makes us execute again (``len`` of any size)."""
    s = _redo_slice(after_round, progress)
    return s.stop - s.start


def redone_rounds(after_round: int, progress: str) -> range:
    """Indices (0-based) of the rounds a disconnect makes us execute again."""
    s = _redo_slice(after_round, progress)
    return range(s.start, s.stop)
