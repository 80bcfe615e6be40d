"""calc entries for prepare-once-reuse-many: migration, kept state, retries (§12.2.3, §12.5.2)."""

from __future__ import annotations

from tierwise.calc._registry import Param, calc
from tierwise.model import reuse as m
from tierwise.model.request import transfer_s


@calc(
    "migration",
    "Net saving N·Δt − M of moving a session, and the rounds it takes to pay back",
    "§12.2.3",
    Param("state", "size", "session state to move", "64 MiB"),
    Param("link", "rate", "link the state crosses", "80 Mbit/s"),
    Param("restore", "time", "time to restore on the new device", "1 s"),
    Param("saving", "time", "time saved per round on the new device Δt", "0.4 s"),
    Param("rounds", "list:int", "rounds remaining N (one or more)", "10, 20, 40"),
)
def migration(state, link, restore, saving, rounds):
    """G(N) = N·Δt − M with M = state / link + restore; pays back from N = ⌊M/Δt⌋ + 1."""
    prepare = m.migration_prepare_s(state, link, restore)
    return {
        "prepare_s": prepare,
        "transfer_s": transfer_s(state, link),
        "net_saving_s": {str(n): m.net_saving_s(n, saving, prepare) for n in rounds},
        "breakeven_rounds": m.breakeven_rounds(saving, prepare) if saving > 0 else None,
    }


@calc(
    "keep-state",
    "Keep a session's state or recompute its prefix: compute saved against memory held",
    "§12.5.2",
    Param("recompute_flops", "flops", "matrix work recomputing the prefix", "296505803538432 FLOP"),
    Param("kept_flops", "flops", "matrix work with the state kept", "60380764176384 FLOP"),
    Param("peak", "flop_rate", "dense peak of the device", "989.4 TFLOP/s"),
    Param("state", "size", "state kept in device memory", "465371136 B"),
    Param("memory", "size", "device memory", "80 GB"),
    Param("resend", "size", "bytes sent when the prefix is resent", "66207 B"),
    Param("kept_bytes", "size", "bytes sent when the state is kept", "10193 B"),
    Param("link", "rate", "link to the device", "333 Mbit/s"),
)
def keep_state(recompute_flops, kept_flops, peak, state, memory, resend, kept_bytes, link):
    """Break-even hold time = ((FLOP_recompute − FLOP_kept) / peak) / (state / memory)."""
    saved = m.recompute_saving_s(recompute_flops, kept_flops, peak)
    share = m.holding_share(state, memory)
    return {
        "saved_flop": recompute_flops - kept_flops,
        "saved_gpu_s": saved,
        "holding_share": share,
        "breakeven_hold_s": m.hold_breakeven_s(saved, share) if saved >= 0 else 0.0,
        "wire_saved_bytes": resend - kept_bytes,
        "wire_saved_s": m.resend_saving_s(resend, kept_bytes, link),
    }


@calc(
    "retry",
    "Expected cost when a failed attempt is retried whole: E = C/p",
    "§12.5.2",
    Param("success", "float", "probability p that one attempt succeeds", 0.99),
    Param("cost", "float", "cost C of one attempt (any unit)", 1.0),
)
def retry(success, cost):
    """E = C / p; expected attempts 1 / p."""
    attempts = m.expected_attempts(success)
    return {
        "expected_cost": m.expected_retry_cost(cost, success),
        "expected_attempts": attempts,
        "overhead": attempts - 1.0,
    }
