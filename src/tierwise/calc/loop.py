"""calc entries for multi-round agent loops (§12.1.3) and the §12.5.2 deployment arithmetic."""

from __future__ import annotations

import math

from tierwise.calc._registry import Param, calc
from tierwise.model import loop as m
from tierwise.model import request


@calc(
    "loop",
    "Agent loop: per-round time and the total over N rounds",
    "§12.1.3, §12.5.2",
    Param("rounds", "int", "rounds N", 30),
    Param("upload", "size", "upload per round", "0.8 MB"),
    Param("uplink", "rate", "uplink", "6.4 Mbit/s"),
    Param("client", "time", "client work per round (observe, act, UI update)", "0.3 s"),
    Param("model", "time", "model time per round", "2.0 s"),
    Param("rtt", "time", "round-trip propagation per round", "200 ms"),
    Param("prepare", "time", "one-off preparation M (prefill when a site takes over)", "0 s"),
)
def loop_calc(rounds, upload, uplink, client, model, rtt, prepare):
    """T = M + N (T_client + T_model + S_u/B_u + R)."""
    up = request.transfer_s(upload, uplink)
    per_round = m.round_time_s(client, model, up, rtt)
    return {
        "round_s": per_round,
        "time_s": m.loop_time_s(rounds, per_round, prepare),
        "round_breakdown_s": {"upload": up, "client": client, "model": model, "rtt": rtt},
    }


@calc(
    "loop-compression",
    "Compressed screenshots: round time, saving, and the most rounds it can afford",
    "§12.1.3",
    Param("rounds", "int", "rounds without compression", 30),
    Param("compressed_rounds", "int", "rounds needed with compression", 30),
    Param("upload", "size", "upload per round", "0.8 MB"),
    Param("compressed", "size", "compressed upload per round", "0.2 MB"),
    Param("codec", "time", "encode time per round", "30 ms"),
    Param("uplink", "rate", "uplink", "6.4 Mbit/s"),
    Param("other", "time", "everything else per round (client + model + RTT)", "2.5 s"),
)
def loop_compression(rounds, compressed_rounds, upload, compressed, codec, uplink, other):
    """t' = S'_u/B_u + T_e + rest; compression wins while N'·t' < N·t, so N'_max = ⌈N·t/t'⌉ − 1."""
    t = request.transfer_s(upload, uplink) + other
    t_c = request.transfer_s(compressed, uplink) + codec + other
    base, comp = rounds * t, compressed_rounds * t_c
    return {
        "round_s": t,
        "compressed_round_s": t_c,
        "time_s": base,
        "compressed_time_s": comp,
        "saving_s": base - comp,
        "max_rounds": m.compressed_max_rounds(base, t_c),
    }


@calc(
    "uplink-schedule",
    "Upload time over per-round rates: harmonic, not arithmetic, mean",
    "§12.5.2",
    Param("upload", "size", "upload per round", "0.8 MB"),
    Param(
        "uplinks",
        "list:rate",
        "rate of each round",
        ",".join(["6 Mbit/s"] * 10 + ["10 Mbit/s"] * 10),
    ),
    Param(
        "rest", "time", "everything else (preparation and non-upload work of all rounds)", "11.6 s"
    ),
)
def uplink_schedule(upload, uplinks, rest):
    """T = rest + Σ_i S/b_i; the equivalent constant rate is the harmonic mean n / Σ 1/b_i."""
    upload_s = m.schedule_upload_s(upload, uplinks)
    mean = sum(uplinks) / len(uplinks)
    return {
        "upload_s": upload_s,
        "time_s": rest + upload_s,
        "harmonic_mean_rate_bytes_per_s": m.harmonic_mean_rate(uplinks),
        "arithmetic_mean_rate_bytes_per_s": mean,
        "time_at_arithmetic_mean_s": rest + len(uplinks) * upload / mean,
    }


@calc(
    "uplink-threshold",
    "T(b) = floor + U/b: the uplink that meets a deadline or beats a rival",
    "§12.5.2",
    Param("floor", "time", "time with an infinitely fast uplink", "11.6 s"),
    Param("total_upload", "size", "bytes uploaded over the whole task U", "16 MB"),
    Param("deadline", "time", "deadline", "45 s"),
    Param("rival", "time", "the time to beat (another site's)", "11.0 s"),
    Param("uplink", "rate", "current uplink", "6.4 Mbit/s"),
)
def uplink_threshold(floor, total_upload, deadline, rival, uplink):
    """b_deadline = U/(D − floor); b_rival = U/(T_rival − floor); never when the floor is above."""

    def need(target):
        return total_upload / (target - floor) if target > floor else math.inf

    return {
        "time_s": floor + request.transfer_s(total_upload, uplink),
        "deadline_uplink_bytes_per_s": need(deadline),
        "rival_uplink_bytes_per_s": need(rival),
        "meets_deadline_ever": deadline > floor,
        "beats_rival_ever": rival > floor,
    }


@calc(
    "disconnect",
    "One disconnect: reconnect and redo the unacknowledged round, or every round",
    "§12.5.2",
    Param("round", "time", "time of one round", "1.5734 s"),
    Param(
        "after_round", "int", "rounds executed when the link drops (the last unacknowledged)", 10
    ),
    Param("reconnect", "time", "reconnect time", "1 s"),
    Param("total", "time", "task time without the disconnect", "31.6 s"),
)
def disconnect(round, after_round, reconnect, total):
    """kept: +t_reconnect + t_round; lost: +t_reconnect + k·t_round."""
    kept = m.equal_rounds_disconnect_extra_s(round, after_round, reconnect, "kept")
    lost = m.equal_rounds_disconnect_extra_s(round, after_round, reconnect, "lost")
    return {
        "kept_extra_s": kept,
        "lost_extra_s": lost,
        "kept_time_s": total + kept,
        "lost_time_s": total + lost,
    }
