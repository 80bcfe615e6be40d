"""One request: upload, compute, download (§12.1.1).

All functions take SI floats or numpy arrays (broadcast together) and return the
quantity their name says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tierwise.errors import ModelError
from tierwise.model._check import ArrayLike, nonneg, positive

__all__ = [
    "ChunkedRequest",
    "amdahl_limit_s",
    "amdahl_time_s",
    "chunked_request",
    "compression_breakeven_uplink_bytes_per_s",
    "compression_saving_s",
    "serial_time_s",
    "transfer_s",
]


def transfer_s(size_bytes: ArrayLike, rate_bytes_per_s: ArrayLike) -> ArrayLike:
    """Send time ``S / B`` of a payload at a constant rate; zero bytes take zero time."""
    nonneg("size", size_bytes)
    positive("rate", rate_bytes_per_s)
    if isinstance(size_bytes, float | int) and isinstance(rate_bytes_per_s, float | int):
        return size_bytes / rate_bytes_per_s  # scalars: no array machinery per request
    return np.divide(size_bytes, rate_bytes_per_s)


def serial_time_s(
    upload_bytes: ArrayLike,
    uplink_bytes_per_s: ArrayLike,
    rtt_s: ArrayLike,
    compute_s: ArrayLike,
    download_bytes: ArrayLike = 0.0,
    downlink_bytes_per_s: ArrayLike = np.inf,
) -> ArrayLike:
    """Serial completion ``T = S_u/B_u + R + T_c + S_d/B_d`` (§12.1.1).

    The two one-way propagations add up to the RTT ``R``; the connection is open.
    """
    nonneg("rtt", rtt_s)
    nonneg("compute time", compute_s)
    up = transfer_s(upload_bytes, uplink_bytes_per_s)
    down = transfer_s(download_bytes, downlink_bytes_per_s)
    return up + rtt_s + compute_s + down


def compression_saving_s(
    upload_bytes: ArrayLike,
    compressed_bytes: ArrayLike,
    uplink_bytes_per_s: ArrayLike,
    codec_s: ArrayLike,
) -> ArrayLike:
    """Time saved by compressing the input first: ``ΔT = (S_u − S'_u)/B_u − T_e`` (§12.1.1)."""
    nonneg("codec time", codec_s)
    saved = transfer_s(upload_bytes, uplink_bytes_per_s) - transfer_s(
        compressed_bytes, uplink_bytes_per_s
    )
    return saved - codec_s


def compression_breakeven_uplink_bytes_per_s(
    upload_bytes: ArrayLike, compressed_bytes: ArrayLike, codec_s: ArrayLike
) -> ArrayLike:
    """Uplink at which compression stops saving time: ``B* = (S_u − S'_u)/T_e`` (§12.1.1).

    Below it compression wins; above it the codec costs more than the bytes it saves.
    """
    nonneg("upload size", upload_bytes)
    nonneg("compressed size", compressed_bytes)
    positive("codec time", codec_s)
    return np.divide(np.subtract(upload_bytes, compressed_bytes), codec_s)


def amdahl_time_s(total_s: ArrayLike, part_s: ArrayLike, speedup: ArrayLike) -> ArrayLike:
    """Completion when ``part_s`` of ``total_s`` runs ``speedup`` times faster (Amdahl, §12.1.1)."""
    nonneg("total time", total_s)
    nonneg("accelerated part", part_s)
    positive("speed-up", speedup)
    if np.any(np.asarray(part_s) > np.asarray(total_s)):
        raise ModelError("the accelerated part cannot exceed the total time")
    return np.subtract(total_s, part_s) + np.divide(part_s, speedup)


def amdahl_limit_s(total_s: ArrayLike, part_s: ArrayLike) -> ArrayLike:
    """The floor as the speed-up grows without bound: the part that is not accelerated."""
    return amdahl_time_s(total_s, part_s, np.inf)


@dataclass(frozen=True)
class ChunkedRequest:
    """Per-chunk event times (seconds from the start) of a chunked request."""

    upload_done_s: np.ndarray
    arrive_s: np.ndarray
    compute_done_s: np.ndarray
    download_done_s: np.ndarray
    complete_s: np.ndarray

    @property
    def time_s(self) -> float:
        """When the last chunk's output reaches the user."""
        return float(self.complete_s.max())


def chunked_request(
    upload_s: Sequence[float],
    compute_s: Sequence[float],
    download_s: Sequence[float],
    propagation_s: float,
    *,
    barrier: bool = False,
) -> ChunkedRequest:
    """Independent chunks processed as they arrive (§12.1.1, figure 12-4).

    The uplink, the processor and the downlink each serve chunks in order:
    ``up_i = up_{i-1} + U_i``, ``a_i = up_i + d``, ``c_i = max(a_i, c_{i-1}) + C_i``,
    ``dn_i = max(c_i, dn_{i-1}) + D_i``, ``done_i = dn_i + d`` with one-way
    propagation ``d``. With ``barrier`` the processing needs the whole input and
    the output leaves only when all of it is computed (12.8 s in the example).
    """
    up = np.asarray(upload_s, dtype=float)
    comp = np.asarray(compute_s, dtype=float)
    down = np.asarray(download_s, dtype=float)
    if not (up.ndim == comp.ndim == down.ndim == 1) or not (len(up) == len(comp) == len(down)):
        raise ModelError(
            f"chunk lists must have one entry per chunk: upload {up.size}, "
            f"compute {comp.size}, download {down.size}"
        )
    if up.size == 0:
        raise ModelError("a chunked request needs at least one chunk")
    for name, arr in (("upload", up), ("compute", comp), ("download", down)):
        nonneg(f"chunk {name} time", arr)
    nonneg("propagation", propagation_s)
    upload_done = np.cumsum(up)
    arrive = upload_done + propagation_s
    if barrier:
        arrive = np.full_like(arrive, arrive[-1])
    compute_done = _serve_in_order(arrive, comp)
    ready = np.full_like(compute_done, compute_done[-1]) if barrier else compute_done
    download_done = _serve_in_order(ready, down)
    return ChunkedRequest(
        upload_done, arrive, compute_done, download_done, download_done + propagation_s
    )


def _serve_in_order(ready_s: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """One server, FIFO: ``f_i = max(ready_i, f_{i-1}) + service_i``."""
    finish = np.empty_like(ready_s)
    last = -np.inf
    for i, (ready, service) in enumerate(zip(ready_s, service_s, strict=True)):
        last = max(ready, last) + service
        finish[i] = last
    return finish
