"""Splitting a model across devices: what crosses the link, and how often (§12.2.2, §12.2.4).

Moving the encoder to the device changes the object sent from a compact image to
a feature tensor, which may be ten times larger. Splitting every layer across two
devices (tensor parallelism) turns one transfer into a synchronisation per layer,
so the start-up latency of each reduction adds to every token.

All functions take SI floats or numpy arrays (broadcast together) and return the
quantity their name says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tierwise.model._check import ArrayLike, nonneg, positive
from tierwise.model.device import compute_bound_s
from tierwise.model.request import transfer_s

__all__ = [
    "BF16_BYTES",
    "EncoderPlacement",
    "encoder_placement",
    "feature_bytes",
    "prefix_kv_bytes",
    "tp_reductions",
    "tp_startup_s",
]

BF16_BYTES = 2.0  # bytes per BF16 value


def feature_bytes(
    tokens: ArrayLike, width: ArrayLike, groups: ArrayLike = 1, value_bytes: ArrayLike = BF16_BYTES
) -> ArrayLike:
    """Encoder output sent in place of the input: ``S_E = tokens × width × groups × bytes``.

    §12.2.2, Qwen3-VL-4B at 640×640: 400 visual tokens × 2560 × (final projection + three
    DeepStack groups) × 2 bytes = 8,192,000 B ≈ 7.8 MiB.
    """
    for name, value in (("tokens", tokens), ("feature width", width), ("feature groups", groups)):
        nonneg(name, value)
    positive("bytes per value", value_bytes)
    return np.multiply(np.multiply(tokens, width), np.multiply(groups, value_bytes))


def prefix_kv_bytes(tokens: ArrayLike, kv_bytes_per_token: ArrayLike) -> ArrayLike:
    """Language-model KV kept for a prefix: ``tokens × KV per token`` (§12.2.2).

    400 visual tokens × 144 KiB ≈ 56.3 MiB.
    """
    nonneg("tokens", tokens)
    nonneg("KV bytes per token", kv_bytes_per_token)
    return np.multiply(tokens, kv_bytes_per_token)


@dataclass(frozen=True)
class EncoderPlacement:
    """The parts of two plans that differ; the language-model work they share cancels.

    ``local_s = T_E,l + T_x + S_E/B_u`` (encode on the device, send features);
    ``remote_s = S_I/B_u + T_E,r`` (send the image, encode remotely).
    """

    local_encode_s: ArrayLike
    remote_encode_s: ArrayLike
    convert_s: ArrayLike
    feature_send_s: ArrayLike
    input_send_s: ArrayLike

    @property
    def local_s(self) -> ArrayLike:
        return self.local_encode_s + self.convert_s + self.feature_send_s

    @property
    def remote_s(self) -> ArrayLike:
        return self.input_send_s + self.remote_encode_s

    @property
    def compute_diff_s(self) -> ArrayLike:
        """``T_E,l − T_E,r + T_x``: extra work on the local side."""
        return self.local_encode_s - self.remote_encode_s + self.convert_s

    @property
    def transfer_diff_s(self) -> ArrayLike:
        """``(S_E − S_I)/B_u``: extra time to send the features instead of the input."""
        return self.feature_send_s - self.input_send_s

    @property
    def delta_s(self) -> ArrayLike:
        """``ΔT = local − remote``; below zero, encoding on the device is faster."""
        return self.compute_diff_s + self.transfer_diff_s

    @property
    def transfer_dominates(self) -> ArrayLike:
        """True where the transfer difference outweighs the compute difference."""
        return np.abs(self.transfer_diff_s) > np.abs(self.compute_diff_s)


def encoder_placement(
    encode_flops: ArrayLike,
    local_flop_rate: ArrayLike,
    remote_flop_rate: ArrayLike,
    input_bytes: ArrayLike,
    features_bytes: ArrayLike,
    uplink_bytes_per_s: ArrayLike,
    convert_s: ArrayLike = 0.0,
) -> EncoderPlacement:
    """Encoder on the device or remote: ``ΔT = T_E,l − T_E,r + T_x + (S_E − S_I)/B_u`` (§12.2.2).

    Encode times are the compute bounds ``FLOP / dense peak``: 1.31 TFLOP takes
    ≈7.9 ms on an RTX 4090 and ≈1.3 ms on an H100. At 6.4 Mbit/s the local plan
    takes ≈10.25 s and the remote one ≈1.00 s; on a 50 GB/s port the features
    cost only ≈0.15 ms more to send, and the encode difference decides.
    """
    nonneg("conversion time", convert_s)
    return EncoderPlacement(
        local_encode_s=compute_bound_s(encode_flops, local_flop_rate),
        remote_encode_s=compute_bound_s(encode_flops, remote_flop_rate),
        convert_s=convert_s,
        feature_send_s=transfer_s(features_bytes, uplink_bytes_per_s),
        input_send_s=transfer_s(input_bytes, uplink_bytes_per_s),
    )


def tp_reductions(layers: ArrayLike, reductions_per_layer: ArrayLike = 2) -> ArrayLike:
    """Reductions per token under tensor parallelism: ``layers × reductions per layer`` (§12.2.4).

    Each layer reduces its attention output and its FFN output: 36 × 2 = 72.
    """
    nonneg("layers", layers)
    nonneg("reductions per layer", reductions_per_layer)
    return np.multiply(layers, reductions_per_layer)


def tp_startup_s(
    layers: ArrayLike,
    startup_s: ArrayLike,
    reductions_per_layer: ArrayLike = 2,
    phases_per_reduction: ArrayLike = 2,
) -> ArrayLike:
    """Start-up latency per token: ``T_start = layers × reductions × phases × α`` (§12.2.4).

    A two-phase ring (ReduceScatter then AllGather) starts twice per reduction:
    36 × 2 × 2 α = 144 α, 0.29 ms at α = 2 µs and 19.3 ms at α = 134 µs (one
    short Wi-Fi frame exchange). The steps depend on each other, so they add up.
    """
    nonneg("start-up latency α", startup_s)
    nonneg("phases per reduction", phases_per_reduction)
    startups = np.multiply(tp_reductions(layers, reductions_per_layer), phases_per_reduction)
    return np.multiply(startups, startup_s)
