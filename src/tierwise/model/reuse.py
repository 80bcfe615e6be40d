"""Prepare once, reuse many times: migration, kept state and retries (§12.2.3, §12.5.2).

One rule covers them all: a one-off cost ``M`` (moving state, warming a
connection, compiling a graph) pays off once the saving per use ``Δt`` has been
collected often enough, ``N Δt > M``. Kept state pays its way while the compute
it saves exceeds the memory it occupies; retries multiply the cost by ``1/p``.

All functions take SI floats or numpy arrays (broadcast together) and return the
quantity their name says.
"""

from __future__ import annotations

import numpy as np

from tierwise.errors import ModelError
from tierwise.model._check import ArrayLike, nonneg, positive, probability
from tierwise.model.device import compute_bound_s
from tierwise.model.request import transfer_s

__all__ = [
    "breakeven_rounds",
    "expected_attempts",
    "expected_retry_cost",
    "hold_breakeven_s",
    "holding_share",
    "migration_prepare_s",
    "net_saving_s",
    "recompute_saving_s",
    "resend_saving_s",
]


def migration_prepare_s(
    state_bytes: ArrayLike, link_bytes_per_s: ArrayLike, restore_s: ArrayLike
) -> ArrayLike:
    """One-off cost of moving a session: ``M = state / link + restore`` (§12.2.3).

    64 MiB over 80 Mbit/s plus 1 s of restore: M ≈ 7.7 s.
    """
    nonneg("restore time", restore_s)
    return transfer_s(state_bytes, link_bytes_per_s) + restore_s


def net_saving_s(
    rounds: ArrayLike, saving_per_round_s: ArrayLike, prepare_s: ArrayLike
) -> ArrayLike:
    """Net time saved after ``N`` rounds: ``G(N) = N Δt − M`` (§12.2.3).

    With M ≈ 7.7 s and Δt = 0.4 s: G(10) ≈ −3.7 s, G(20) ≈ 0.3 s, G(40) ≈ 8.3 s.
    """
    nonneg("rounds", rounds)
    nonneg("preparation time", prepare_s)
    if not np.all(np.isfinite(np.asarray(saving_per_round_s, dtype=float))):
        raise ModelError(f"saving per round must be finite, got {saving_per_round_s!r}")
    return np.multiply(rounds, saving_per_round_s) - prepare_s


def breakeven_rounds(saving_per_round_s: ArrayLike, prepare_s: ArrayLike) -> ArrayLike:
    """Fewest rounds that pay the preparation back: smallest integer ``N`` with ``N Δt > M``.

    ``N = ⌊M / Δt⌋ + 1`` (§12.2.3): 20 rounds for M ≈ 7.71 s, Δt = 0.4 s; 22 when
    restoring takes one second longer. A non-positive ``Δt`` never pays back and
    is refused; an infinite one pays back in the first round.
    """
    positive("saving per round", saving_per_round_s)
    nonneg("preparation time", prepare_s)
    saving, prepare = np.asarray(saving_per_round_s, float), np.asarray(prepare_s, float)
    rounds = np.floor(prepare / saving) + 1
    # The quotient can be off by one ulp; settle ties the way net_saving_s sees them.
    with np.errstate(invalid="ignore"):  # 0 × inf when an infinite saving pays back at once
        rounds = np.where((rounds - 1) * saving > prepare, rounds - 1, rounds)
    rounds = np.where(rounds * saving <= prepare, rounds + 1, rounds).astype(np.int64)
    return int(rounds) if rounds.ndim == 0 else rounds


def recompute_saving_s(
    recompute_flops: ArrayLike, kept_flops: ArrayLike, flop_rate: ArrayLike
) -> ArrayLike:
    """Accelerator time saved by keeping state: ``(FLOP_recompute − FLOP_kept) / peak`` (§12.5.2).

    A text Agent session drops from ≈3.0e14 to ≈6.0e13 FLOP; on an H100 at
    989.4 TFLOP/s that saves ≈0.239 GPU-seconds.
    """
    return compute_bound_s(recompute_flops, flop_rate) - compute_bound_s(kept_flops, flop_rate)


def holding_share(state_bytes: ArrayLike, memory_bytes: ArrayLike) -> ArrayLike:
    """Device share a held state occupies: ``state / memory`` GPU-seconds per second (§12.5.2).

    465,371,136 B of an 80 GB H100 ≈ 0.0058 GPU-s for every second it is kept.
    """
    nonneg("state size", state_bytes)
    positive("device memory", memory_bytes)
    if np.any(np.asarray(state_bytes) > np.asarray(memory_bytes)):
        raise ModelError("the kept state cannot exceed the device memory")
    return np.divide(state_bytes, memory_bytes)


def hold_breakeven_s(saved_gpu_s: ArrayLike, holding_share_: ArrayLike) -> ArrayLike:
    """How long state may be held before its memory costs what it saved: ``saved / share``.

    0.239 GPU-s ÷ 0.0058 GPU-s per second ≈ 41.0 s (§12.5.2). Holding nothing
    (share 0) never costs anything: the result is infinite.
    """
    nonneg("saved accelerator time", saved_gpu_s)
    nonneg("holding share", holding_share_)
    share = np.asarray(holding_share_, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        hold = np.where(share > 0, np.divide(saved_gpu_s, share), np.inf)
    return float(hold) if hold.ndim == 0 else hold


def resend_saving_s(
    resend_bytes: ArrayLike, kept_bytes: ArrayLike, link_bytes_per_s: ArrayLike
) -> ArrayLike:
    """Wire time saved by not resending the prefix: ``(S_resend − S_kept) / B`` (§12.5.2).

    66,207 B against 10,193 B at 333 Mbit/s: ≈1.3 ms, small beside the compute saved.
    """
    return transfer_s(resend_bytes, link_bytes_per_s) - transfer_s(kept_bytes, link_bytes_per_s)


def expected_attempts(success_probability: ArrayLike) -> ArrayLike:
    """Mean attempts until one succeeds, each independently with probability ``p``: ``1/p``."""
    probability("success probability", success_probability)
    positive("success probability", success_probability)
    return np.divide(1.0, success_probability)


def expected_retry_cost(cost: ArrayLike, success_probability: ArrayLike) -> ArrayLike:
    """Expected cost with whole retries: ``E = C + (1 − p) E``, so ``E = C / p`` (§12.5.2).

    99 % success costs ≈1.01 C, 80 % costs 1.25 C. ``C`` may be time, money or energy.
    """
    nonneg("cost per attempt", cost)
    return np.multiply(cost, expected_attempts(success_probability))
