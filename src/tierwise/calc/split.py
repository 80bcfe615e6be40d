"""calc entries for splitting a model across devices (§12.2.2, §12.2.4)."""

from __future__ import annotations

from tierwise.calc._registry import Param, calc
from tierwise.model import split as m


@calc(
    "feature-size",
    "Encoder output sent instead of the input, and the KV kept for the same tokens",
    "§12.2.2",
    Param("tokens", "int", "visual tokens after patch merging", 400),
    Param("width", "int", "values per token in one feature group", 2560),
    Param("groups", "int", "feature groups sent (final projection + DeepStack)", 4),
    Param("value_size", "size", "bytes per value (BF16)", "2 B"),
    Param("kv_per_token", "size", "language-model KV per input token", "144 KiB"),
)
def feature_size(tokens, width, groups, value_size, kv_per_token):
    """S_E = tokens × width × groups × bytes per value; KV = tokens × KV per token."""
    return {
        "values_per_token": width * groups,
        "feature_bytes": m.feature_bytes(tokens, width, groups, value_size),
        "kv_bytes": m.prefix_kv_bytes(tokens, kv_per_token),
    }


@calc(
    "encoder-placement",
    "Encode on the device and send features, or send the input and encode remotely",
    "§12.2.2",
    Param("encode_flops", "flops", "matrix work of one encode", "1.31 TFLOP"),
    Param("local_peak", "flop_rate", "dense peak of the local device", "165.2 TFLOP/s"),
    Param("remote_peak", "flop_rate", "dense peak of the remote device", "989.4 TFLOP/s"),
    Param("input_size", "size", "input sent by the remote plan S_I", "0.8 MB"),
    Param("feature_size", "size", "features sent by the local plan S_E", "8192000 B"),
    Param("uplink", "rate", "uplink B_u", "6.4 Mbit/s"),
    Param("convert", "time", "local serialisation and conversion T_x", "0 s"),
)
def encoder_placement(
    encode_flops, local_peak, remote_peak, input_size, feature_size, uplink, convert
):
    """ΔT = T_E,l − T_E,r + T_x + (S_E − S_I)/B_u, with T_E = FLOP / dense peak."""
    p = m.encoder_placement(
        encode_flops, local_peak, remote_peak, input_size, feature_size, uplink, convert
    )
    return {
        "local_s": p.local_s,
        "remote_s": p.remote_s,
        "delta_s": p.delta_s,
        "local_wins": bool(p.delta_s < 0),
        "breakdown_s": {
            "local_encode": p.local_encode_s,
            "remote_encode": p.remote_encode_s,
            "convert": p.convert_s,
            "feature_send": p.feature_send_s,
            "input_send": p.input_send_s,
        },
        "compute_diff_s": p.compute_diff_s,
        "transfer_diff_s": p.transfer_diff_s,
        "dominant": "transfer" if p.transfer_dominates else "compute",
    }


@calc(
    "tp-startup",
    "Per-token start-up latency of tensor-parallel reductions, against a decode step",
    "§12.2.4",
    Param("layers", "int", "model layers", 36),
    Param("alpha", "time", "start-up latency α of one reduction phase", "2 µs"),
    Param("reductions", "int", "reductions per layer (attention and FFN outputs)", 2),
    Param("phases", "int", "start-ups per reduction (ring: ReduceScatter + AllGather)", 2),
    Param("decode_step", "time", "decode step to compare with", "9.12 ms"),
)
def tp_startup(layers, alpha, reductions, phases, decode_step):
    """T_start = layers × reductions × phases × α (36 × 2 × 2 α = 144 α)."""
    time = m.tp_startup_s(layers, alpha, reductions, phases)
    out = {
        "time_s": time,
        "reductions": m.tp_reductions(layers, reductions),
        "startups": m.tp_reductions(layers, reductions) * phases,
    }
    if decode_step > 0:
        out["decode_step_ratio"] = time / decode_step
    return out
