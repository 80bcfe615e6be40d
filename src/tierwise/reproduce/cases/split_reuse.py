"""Every number §12.2.2–§12.2.4, §12.5.2 (reuse, retry), §12.5.3 and exercise 12-3 print.

One row per printed number: where it is printed, what it is, how it is computed,
the number as printed, and the tolerance its printed rounding implies (printed
7.7 → ±0.05). Rows marked "=" are exact; ">" rows check a printed bound
("more than twice"). A few rows go through ``tierwise calc ... --json``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tierwise.catalog import load_catalog
from tierwise.model import device, request, reuse, split
from tierwise.reproduce._case import calc_json as cli

CAT = load_catalog()
VISION = CAT.model["qwen3-vl-4b-vision"]
QWEN = CAT.model["qwen3-8b"]
RTX4090, H100, PRO6000 = (CAT.hardware[k] for k in ("rtx-4090", "h100-sxm", "rtx-pro-6000"))

MB, MIB, KIB = 1e6, 2.0**20, 1024.0
MBIT = 1e6 / 8  # bytes per second in one Mbit/s
IMAGE = 0.8 * MB
UPLINK = 6.4 * MBIT
PORT = 50e9  # 400 Gbit/s ConnectX-7, one direction
FEATURES = split.feature_bytes(VISION.visual_tokens, VISION.feature_width, VISION.feature_groups)
MIGRATION = reuse.migration_prepare_s(64 * MIB, 80 * MBIT, 1.0)
MIGRATION_SLOW_RESTORE = reuse.migration_prepare_s(64 * MIB, 80 * MBIT, 2.0)
# Footnote 30: a text Agent session replayed with and without kept state.
RECOMPUTE_FLOPS, KEPT_FLOPS = 296_505_803_538_432.0, 60_380_764_176_384.0
STATE_BYTES, RESEND_BYTES, KEPT_BYTES = 465_371_136.0, 66_207.0, 10_193.0


def placement(uplink: float = UPLINK) -> split.EncoderPlacement:
    """RTX 4090 on the device against H100 SXM remotely, for one 0.8 MB image."""
    return split.encoder_placement(
        VISION.encode_flops, RTX4090.dense_bf16, H100.dense_bf16, IMAGE, FEATURES, uplink
    )


def decode_step_s() -> float:
    """RTX PRO 6000 read bound of one BF16 8K decode step (§12.1.5)."""
    kv = QWEN.kv_bytes_per_token * 8192
    return device.decode_step_s(QWEN.decode_weight_bytes, kv, PRO6000.memory_bandwidth)


def keep_state() -> tuple[float, float]:
    saved = reuse.recompute_saving_s(RECOMPUTE_FLOPS, KEPT_FLOPS, H100.dense_bf16)
    return saved, reuse.holding_share(STATE_BYTES, H100.memory)


@dataclass(frozen=True)
class Row:
    section: str
    what: str
    how: str
    printed: str  # as printed, in the unit given by ``scale``
    compute: Callable[[], float]
    scale: float = 1.0  # SI value of one printed unit
    op: str = "≈"  # "≈" rounded as printed, "=" exact, ">" printed lower bound

    @property
    def tolerance(self) -> float:
        decimals = len(self.printed.partition(".")[2])
        return 0.5 * 10.0**-decimals * self.scale


S2, S3, S4, S52, S53 = "§12.2.2", "§12.2.3", "§12.2.4", "§12.5.2", "§12.5.3"

ROWS = [
    # §12.2.2 — encoder on the device or remote
    Row(
        S2,
        "fig 12-10 image send time",
        "0.8 MB / 6.4 Mbit/s",
        "1",
        lambda: request.transfer_s(IMAGE, UPLINK),
        op="=",
    ),
    Row(S2, "fig 12-11 feature size", "400 × 2560 × 4 × 2 B", "8.192", lambda: FEATURES, scale=MB),
    Row(
        S2,
        "fig 12-11 feature send time",
        "S_E / 6.4 Mbit/s",
        "10.24",
        lambda: request.transfer_s(FEATURES, UPLINK),
    ),
    Row(
        S2,
        "BF16 values per visual token",
        "4 × 2560",
        "10240",
        lambda: cli("feature-size")["values_per_token"],
        op="=",
    ),
    Row(S2, "S_E in bytes", "400 × 10240 × 2", "8192000", lambda: FEATURES, op="="),
    Row(S2, "S_E in MiB", "8,192,000 / 2^20", "7.8", lambda: FEATURES, scale=MIB),
    Row(S2, "full features ≈ 8.2 MB", "S_E", "8.2", lambda: FEATURES, scale=MB),
    Row(S2, "features ≈ ten times the image", "S_E / 0.8 MB", "10", lambda: FEATURES / IMAGE),
    Row(
        S2,
        "send time grows to ≈10.2 s",
        "S_E / 6.4 Mbit/s",
        "10.2",
        lambda: request.transfer_s(FEATURES, UPLINK),
    ),
    Row(
        S2,
        "RTX 4090 encode bound",
        "1.31 TFLOP / 165.2 TFLOP/s",
        "7.9",
        lambda: placement().local_encode_s,
        scale=1e-3,
    ),
    Row(
        S2,
        "H100 SXM encode bound",
        "1.31 TFLOP / 989.4 TFLOP/s",
        "1.3",
        lambda: placement().remote_encode_s,
        scale=1e-3,
    ),
    Row(
        S2,
        "local-encode plan",
        "T_E,l + S_E / B_u (CLI)",
        "10.25",
        lambda: cli("encoder-placement")["local_s"],
    ),
    Row(
        S2,
        "remote-encode plan",
        "S_I / B_u + T_E,r (CLI)",
        "1.00",
        lambda: cli("encoder-placement")["remote_s"],
    ),
    Row(
        S2,
        "local computes more by",
        "T_E,l − T_E,r",
        "6.6",
        lambda: placement().compute_diff_s,
        scale=1e-3,
    ),
    Row(
        S2,
        "features take longer to send by",
        "(S_E − S_I) / B_u",
        "9.2",
        lambda: placement().transfer_diff_s,
    ),
    Row(
        S2,
        "ConnectX-7 send difference",
        "(S_E − S_I) / 50 GB/s (CLI)",
        "0.15",
        lambda: cli("encoder-placement", "--uplink", "400 Gbit/s")["transfer_diff_s"],
        scale=1e-3,
    ),
    Row(
        S2,
        "slow uplink: remote saving must exceed 9 s",
        "(S_E − S_I) / B_u",
        "9",
        lambda: placement().transfer_diff_s,
        op=">",
    ),
    Row(
        S2,
        "KV of 400 visual tokens",
        "400 × 144 KiB",
        "56.3",
        lambda: split.prefix_kv_bytes(VISION.visual_tokens, VISION.kv_bytes_per_token),
        scale=MIB,
    ),
    # §12.2.3 — migration break-even
    Row(
        S3,
        "migration preparation M",
        "64 MiB / 80 Mbit/s + 1 s (CLI)",
        "7.7",
        lambda: cli("migration")["prepare_s"],
    ),
    Row(
        S3,
        "net saving after 10 rounds",
        "10 × 0.4 − M (CLI)",
        "-3.7",
        lambda: cli("migration")["net_saving_s"]["10"],
    ),
    Row(
        S3,
        "net saving after 20 rounds",
        "20 × 0.4 − M (CLI)",
        "0.3",
        lambda: cli("migration")["net_saving_s"]["20"],
    ),
    Row(
        S3,
        "net saving after 40 rounds",
        "40 × 0.4 − M (CLI)",
        "8.3",
        lambda: cli("migration")["net_saving_s"]["40"],
    ),
    Row(
        S3,
        "fewest rounds to pay back",
        "⌊M / 0.4⌋ + 1 (CLI)",
        "20",
        lambda: cli("migration")["breakeven_rounds"],
        op="=",
    ),
    Row(
        S3,
        "restore 2 s: net saving after 20 rounds",
        "20 × 0.4 − (M + 1)",
        "-0.7",
        lambda: reuse.net_saving_s(20, 0.4, MIGRATION_SLOW_RESTORE),
    ),
    Row(
        S3,
        "restore 2 s: fewest rounds to pay back",
        "⌊(M + 1) / 0.4⌋ + 1",
        "22",
        lambda: reuse.breakeven_rounds(0.4, MIGRATION_SLOW_RESTORE),
        op="=",
    ),
    Row(
        S3,
        "restore 2 s: net saving after 40 rounds",
        "40 × 0.4 − (M + 1)",
        "7.3",
        lambda: reuse.net_saving_s(40, 0.4, MIGRATION_SLOW_RESTORE),
    ),
    Row(
        S3,
        "fig 12-14 first gain, restore 1 s",
        "⌊M / 0.4⌋ + 1",
        "20",
        lambda: reuse.breakeven_rounds(0.4, MIGRATION),
        op="=",
    ),
    Row(
        S3,
        "fig 12-14 first gain, restore 2 s",
        "⌊(M + 1) / 0.4⌋ + 1",
        "22",
        lambda: reuse.breakeven_rounds(0.4, MIGRATION_SLOW_RESTORE),
        op="=",
    ),
    # §12.2.4 — tensor-parallel start-ups
    Row(
        S4,
        "start-ups per token",
        "36 × 2 × 2 (CLI)",
        "144",
        lambda: cli("tp-startup")["startups"],
        op="=",
    ),
    Row(
        S4,
        "note 14: reductions per token",
        "36 × 2",
        "72",
        lambda: split.tp_reductions(QWEN.layers),
        op="=",
    ),
    Row(
        S4,
        "start-up at α = 2 µs",
        "144 × 2 µs (CLI)",
        "0.29",
        lambda: cli("tp-startup")["time_s"],
        scale=1e-3,
    ),
    Row(
        S4,
        "start-up at α = 134 µs",
        "144 × 134 µs",
        "19.3",
        lambda: split.tp_startup_s(QWEN.layers, 134e-6),
        scale=1e-3,
    ),
    Row(
        S4,
        "RTX PRO 6000 decode read bound",
        "(15.14 GB + 1.21 GB) / 1792 GB/s",
        "9.12",
        decode_step_s,
        scale=1e-3,
    ),
    Row(
        S4,
        "Wi-Fi start-up is more than twice a decode step",
        "144 × 134 µs / 9.12 ms",
        "2",
        lambda: split.tp_startup_s(QWEN.layers, 134e-6) / decode_step_s(),
        op=">",
    ),
    # §12.5.2 — text Agent session: keep state or recompute; retries
    Row(
        S52,
        "bytes not resent ≈ 56 KB",
        "66,207 − 10,193 B (CLI)",
        "56",
        lambda: cli("keep-state")["wire_saved_bytes"],
        scale=1e3,
    ),
    Row(
        S52,
        "wire time saved at 333 Mbit/s",
        "56,014 B / 333 Mbit/s (CLI)",
        "1.3",
        lambda: cli("keep-state")["wire_saved_s"],
        scale=1e-3,
    ),
    Row(
        S52,
        "GPU-seconds saved by keeping state",
        "(2.965e14 − 6.04e13) / 989.4 TFLOP/s",
        "0.239",
        lambda: keep_state()[0],
    ),
    Row(
        S52,
        "GPU-seconds per second held",
        "465,371,136 B / 80 GB",
        "0.0058",
        lambda: keep_state()[1],
    ),
    Row(
        S52,
        "hold break-even ≈ 41 s",
        "saved / share (CLI)",
        "41",
        lambda: cli("keep-state")["breakeven_hold_s"],
    ),
    Row(
        S52,
        "note 30: hold break-even 41.0 s",
        "saved / share",
        "41.0",
        lambda: reuse.hold_breakeven_s(*keep_state()),
    ),
    Row(
        S52,
        "retry cost at p = 0.99",
        "C / 0.99, C = 1",
        "1.01",
        lambda: reuse.expected_retry_cost(1.0, 0.99),
    ),
    Row(
        S52,
        "retry cost at p = 0.8",
        "C / 0.8, C = 1 (CLI)",
        "1.25",
        lambda: cli("retry", "--success", "0.8")["expected_cost"],
    ),
    # §12.5.3 — the migration numbers repeated in the deployment summary
    Row(S53, "64 MiB session prepares in ≈7.7 s", "M", "7.7", lambda: MIGRATION),
    Row(
        S53,
        "20 rounds save only ≈0.3 s",
        "20 × 0.4 − M",
        "0.3",
        lambda: reuse.net_saving_s(20, 0.4, MIGRATION),
    ),
    Row(
        S53,
        "10 rounds lose ≈3.7 s",
        "10 × 0.4 − M",
        "-3.7",
        lambda: reuse.net_saving_s(10, 0.4, MIGRATION),
    ),
    # Exercise 12-3 (a)-(c): answers that must agree with the body
    Row(
        "12-3(a)",
        "local encode + send features",
        "T_E,l + S_E / B_u",
        "10.25",
        lambda: placement().local_s,
    ),
    Row(
        "12-3(a)",
        "send image + remote encode",
        "S_I / B_u + T_E,r",
        "1.00",
        lambda: placement().remote_s,
    ),
    Row(
        "12-3(b)",
        "extra send time on ConnectX-7",
        "(S_E − S_I) / 50 GB/s",
        "0.15",
        lambda: placement(PORT).transfer_diff_s,
        scale=1e-3,
    ),
    Row(
        "12-3(b)",
        "encode difference it is compared with",
        "T_E,l − T_E,r",
        "6.6",
        lambda: placement(PORT).compute_diff_s,
        scale=1e-3,
    ),
    Row(
        "12-3(c)",
        "net saving, 10 rounds",
        "10 × 0.4 − M",
        "-3.7",
        lambda: reuse.net_saving_s(10, 0.4, MIGRATION),
    ),
    Row(
        "12-3(c)",
        "net saving, 20 rounds",
        "20 × 0.4 − M",
        "0.3",
        lambda: reuse.net_saving_s(20, 0.4, MIGRATION),
    ),
    Row(
        "12-3(c)",
        "net saving, 40 rounds",
        "40 × 0.4 − M",
        "8.3",
        lambda: reuse.net_saving_s(40, 0.4, MIGRATION),
    ),
    Row(
        "12-3(c)",
        "rounds to pay back with 2 s restore",
        "CLI migration --restore 2 s",
        "22",
        lambda: cli("migration", "--restore", "2 s")["breakeven_rounds"],
        op="=",
    ),
]
