"""Every number §12.1.5 and exercise 12-9 print that follows from their inputs.

One row per printed number: where it is printed, what it is, how tierwise
computes it (a model function or a ``tierwise calc ... --json`` run), the printed
value in the printed unit, and a tolerance matching the printed rounding.
A few §12.5 numbers that use the device models (energy, battery) are here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierwise.model import device as m
from tierwise.reproduce._case import calc_json as cli
from tierwise.units import parse_quantity

GB = 1e9
MIB = 2**20

# Printed inputs (§12.1.5 and its note 2).
W_BF16 = 15_136_819_200.0  # BF16 weights read per decode step
RESIDENT_BF16 = 16.38 * GB  # resident BF16 weights, embedding table included
KV_8K = 1_207_959_552.0  # KV of one 8K request
CTX = 8192
KV_TOK = 147_456.0
RESERVE = 4 * GB
Q4_0 = 18 / 32  # bytes per value
Q8_0 = 34 / 32
BF16 = 2.0
PHONE = m.memory_bandwidth_bytes_per_s(4, 16, parse_quantity("10.6 Gbit/s", "rate"))
M3_ULTRA = 819 * GB
RTX_PRO_6000 = 1792 * GB
H100 = 3350 * GB
# Qwen3-8B exact parameter count (config: 36 layers, hidden 4096, FFN 12288, 8 KV heads
# of 128, vocabulary 151,936, untied embeddings); 2 bytes each is the printed 16.38 GB.
QWEN3_8B_PARAMS = 8_190_735_360.0


def step_s(weights_bf16: float, fmt_bytes: float, bandwidth: float, kv: float = KV_8K) -> float:
    return m.decode_step_s(m.weight_bytes(weights_bf16, fmt_bytes), kv, bandwidth)


def free_gb(memory_gb: float, fmt_bytes: float, resident_bf16: float = RESIDENT_BF16) -> float:
    resident = m.weight_bytes(resident_bf16, fmt_bytes)
    return m.free_memory_bytes(memory_gb * GB, RESERVE, resident) / GB


def phone(memory_gb: float, fmt: str) -> dict[str, Any]:
    return cli("memory-capacity", "--memory", f"{memory_gb} GB", "--format", fmt)


@dataclass(frozen=True)
class Row:
    section: str
    what: str
    compute: Callable[[], Any]
    expected: Any
    tol: float = 0.0  # absolute, in the printed unit; 0 means exact equality


ROWS = [
    # --- bandwidth (§12.1.5 ¶2, exercise 12-9(a)) ---
    Row(
        "§12.1.5",
        "5,300 MHz DDR → Gbit/s per pin",
        lambda: m.ddr_pin_rate_bytes_per_s(5300e6) * 8 / 1e9,
        10.6,
        0.05,
    ),
    Row(
        "§12.1.5",
        "one x16 channel at 10.6 Gbit/s, GB/s",
        lambda: cli("lpddr-bandwidth", "--channels", "1")["rate_bytes_per_s"] / GB,
        21.2,
        0.05,
    ),
    Row(
        "§12.1.5",
        "x16 channel rate reported beside the total, GB/s",
        lambda: cli("lpddr-bandwidth")["channel_rate_bytes_per_s"] / GB,
        21.2,
        0.05,
    ),
    Row(
        "12-9(a)",
        "four x16 channels, GB/s",
        lambda: cli("lpddr-bandwidth")["rate_bytes_per_s"] / GB,
        84.8,
        0.05,
    ),
    # --- decode bound, BF16 (§12.1.5 ¶3-4, exercise 12-9(a)) ---
    Row("§12.1.5", "KV per token, bytes", lambda: KV_8K / CTX, 147_456),
    Row("§12.1.5", "8K KV, GB", lambda: m.kv_bytes(KV_TOK, CTX) / GB, 1.21, 0.005),
    Row("§12.1.5", "weights read per step, GB", lambda: W_BF16 / GB, 15.14, 0.005),
    Row(
        "§12.1.5",
        "weights + KV per step, GB",
        lambda: cli("decode-bound")["read_bytes"] / GB,
        16.345,
        0.0005,
    ),
    Row(
        "12-9(a)",
        "weights-only step at 84.8 GB/s, s",
        lambda: m.decode_step_s(W_BF16, 0.0, PHONE),
        0.179,
        0.0005,
    ),
    Row(
        "12-9(a)",
        "weights-only ceiling, tokens/s",
        lambda: cli("decode-bound")["weights_only_tokens_per_second"],
        5.6,
        0.05,
    ),
    Row("12-9(a)", "BF16 step with KV, s", lambda: cli("decode-bound")["step_s"], 0.193, 0.0005),
    Row(
        "12-9(a)",
        "BF16 ceiling with KV, tokens/s",
        lambda: m.decode_tokens_per_s(step_s(W_BF16, BF16, PHONE)),
        5.2,
        0.05,
    ),
    # --- decode bound, q4_0 (§12.1.5 ¶4, exercise 12-9(b)) ---
    Row(
        "12-9(b)",
        "q4_0 weights read per step, GB",
        lambda: m.weight_bytes(W_BF16, Q4_0) / GB,
        4.26,
        0.005,
    ),
    Row(
        "12-9(b)",
        "q4_0 weights + KV, GB",
        lambda: cli("decode-bound", "--format", "q4_0")["read_bytes"] / GB,
        5.47,
        0.005,
    ),
    Row(
        "12-9(b)",
        "q4_0 step, ms",
        lambda: cli("decode-bound", "--format", "q4_0")["step_s"] * 1e3,
        64.4,
        0.05,
    ),
    Row(
        "12-9(b)",
        "q4_0 ceiling, tokens/s",
        lambda: m.decode_tokens_per_s(step_s(W_BF16, Q4_0, PHONE)),
        15.5,
        0.05,
    ),
    # --- three local tiers (§12.1.5 ¶"本地部署的三档设备", figure 12-9) ---
    Row(
        "§12.1.5",
        "M3 Ultra step at 819 GB/s, ms",
        lambda: step_s(W_BF16, BF16, M3_ULTRA) * 1e3,
        19.96,
        0.005,
    ),
    Row(
        "§12.1.5",
        "M3 Ultra ceiling, tokens/s",
        lambda: cli("decode-bound", "--bandwidth", "819 GB/s")["tokens_per_second"],
        50.1,
        0.05,
    ),
    Row(
        "§12.1.5",
        "RTX PRO 6000 step at 1,792 GB/s, ms",
        lambda: cli("decode-bound", "--bandwidth", "1792 GB/s")["step_s"] * 1e3,
        9.12,
        0.005,
    ),
    Row(
        "§12.1.5",
        "RTX PRO 6000 ceiling, tokens/s",
        lambda: m.decode_tokens_per_s(step_s(W_BF16, BF16, RTX_PRO_6000)),
        109.6,
        0.05,
    ),
    # --- capacity, BF16 and q4_0 table (§12.1.5 ¶"容量") ---
    Row(
        "§12.1.5",
        "embedding table: resident − read per step, GB",
        lambda: (RESIDENT_BF16 - W_BF16) / GB,
        1.24,
        0.005,
    ),
    Row(
        "§12.1.5",
        "BF16 fits only the 24 GB phone",
        lambda: [g for g in (6, 12, 16, 24) if free_gb(g, BF16) >= 0],
        [24],
    ),
    Row(
        "§12.1.5",
        "24 GB BF16 phone free, GB",
        lambda: phone(24, "bf16")["free_bytes"] / GB,
        3.62,
        0.005,
    ),
    Row("§12.1.5", "24 GB BF16 phone: 8K requests", lambda: phone(24, "bf16")["requests"], 2),
    Row(
        "§12.1.5",
        "q4_0 resident weights, GB",
        lambda: m.weight_bytes(RESIDENT_BF16, Q4_0) / GB,
        4.61,
        0.005,
    ),
    Row("§12.1.5", "6 GB phone free after q4_0, GB", lambda: free_gb(6, Q4_0), -2.61, 0.005),
    Row(
        "§12.1.5", "6 GB phone cannot hold q4_0 8B", lambda: phone(6, "q4_0")["fits_weights"], False
    ),
    Row(
        "§12.1.5",
        "6 GB phone holds a 1.7 GB 3B q4 model",
        lambda: m.memory_fit(6 * GB, RESERVE, 1.7 * GB, KV_TOK, 0).fits_weights,
        True,
    ),
    Row(
        "12-9(b)",
        "12 GB phone free after q4_0, GB",
        lambda: phone(12, "q4_0")["free_bytes"] / GB,
        3.39,
        0.005,
    ),
    Row("12-9(b)", "12 GB phone: 8K requests", lambda: phone(12, "q4_0")["requests"], 2),
    Row(
        "12-9(b)",
        "12 GB phone: longest context (约 2.3 万), tokens",
        lambda: phone(12, "q4_0")["max_context_tokens"],
        23_000,
        500,
    ),
    Row("§12.1.5", "16 GB phone free after q4_0, GB", lambda: free_gb(16, Q4_0), 7.39, 0.005),
    Row(
        "§12.1.5",
        "16 GB phone: 8K requests",
        lambda: (
            m.memory_fit(
                16 * GB, RESERVE, m.weight_bytes(RESIDENT_BF16, Q4_0), KV_TOK, CTX
            ).requests
        ),
        6,
    ),
    Row(
        "§12.1.5",
        "16 GB phone: longest context (约 5.0 万), tokens",
        lambda: phone(16, "q4_0")["max_context_tokens"],
        50_000,
        500,
    ),
    Row(
        "§12.1.5",
        "24 GB phone free after q4_0, GB",
        lambda: phone(24, "q4_0")["free_bytes"] / GB,
        15.39,
        0.005,
    ),
    Row(
        "§12.1.5",
        "24 GB phone: 8K requests",
        lambda: m.requests_fit(free_gb(24, Q4_0) * GB, KV_TOK, CTX),
        12,
    ),
    Row(
        "§12.1.5",
        "24 GB phone: longest context (约 10.4 万), tokens",
        lambda: m.max_context_tokens(free_gb(24, Q4_0) * GB, KV_TOK),
        104_000,
        500,
    ),
    Row(
        "§12.1.5",
        "q8_0 resident weights, GB",
        lambda: m.weight_bytes(RESIDENT_BF16, Q8_0) / GB,
        8.70,
        0.005,
    ),
    Row(
        "§12.1.5",
        "16 GB phone free after q8_0, GB",
        lambda: phone(16, "q8_0")["free_bytes"] / GB,
        3.30,
        0.005,
    ),
    Row("§12.1.5", "16 GB phone q8_0: 8K requests", lambda: phone(16, "q8_0")["requests"], 2),
    Row(
        "§12.1.5",
        "q8_0 8B fits no phone below 16 GB",
        lambda: [g for g in (6, 12, 16, 24) if free_gb(g, Q8_0) >= 0],
        [16, 24],
    ),
    Row(
        "§12.1.5",
        "12 GB phone cannot hold BF16 8B",
        lambda: phone(12, "bf16")["fits_weights"],
        False,
    ),
    Row(
        "§12.1.5",
        "4-bit 235B MoE fits M3 Ultra 256 GB",
        lambda: (
            m.memory_fit(
                256 * GB, 0.0, m.weight_bytes(235e9 * BF16, Q4_0), KV_TOK, CTX
            ).fits_weights
        ),
        True,
    ),
    Row(
        "§12.1.5",
        "4-bit 235B MoE fits no phone",
        lambda: free_gb(24, Q4_0, resident_bf16=235e9 * BF16) >= 0,
        False,
    ),
    # --- energy, power, battery (§12.1.5 ¶"能耗与续航", exercise 12-9(c), §12.5) ---
    Row(
        "§12.1.5",
        "0.16 mWh per token in J",
        lambda: parse_quantity("0.16 mWh", "energy"),
        0.576,
        0.0005,
    ),
    Row(
        "§12.1.5",
        "0.21 mWh per token in J",
        lambda: parse_quantity("0.21 mWh", "energy"),
        0.756,
        0.0005,
    ),
    Row(
        "§12.1.5", "14.8 tokens/s × 0.576 J, W", lambda: cli("token-power")["power_w"][0], 8.5, 0.05
    ),
    Row(
        "§12.1.5",
        "8.5 W is within the 13.8 W sustained power",
        lambda: cli("token-power")["within_sustained"],
        [True],
    ),
    Row(
        "12-9(c)",
        "power-limited ceiling at 0.756 J, tokens/s",
        lambda: m.power_limited_tokens_per_s(13.8, 0.756),
        18.3,
        0.05,
    ),
    Row(
        "12-9(c)",
        "power-limited ceiling at 0.576 J, tokens/s",
        lambda: cli("power-bound")["power_tokens_per_second"][1],
        24.0,
        0.05,
    ),
    Row(
        "12-9(c)",
        "BF16: bandwidth binds before power",
        lambda: cli("power-bound")["binding"],
        ["bandwidth", "bandwidth"],
    ),
    Row(
        "12-9(c)",
        "q4_0: bandwidth binds before power",
        lambda: cli("power-bound", "--format", "q4_0")["binding"],
        ["bandwidth", "bandwidth"],
    ),
    Row(
        "§12.5.1",
        "20 rounds × 45 tokens at 0.576 J, J",
        lambda: cli("token-energy")["energy_j"][0],
        518,
        0.5,
    ),
    Row(
        "§12.5.1",
        "20 rounds × 45 tokens at 0.756 J, J",
        lambda: m.token_energy_j(20 * 45, 0.756),
        680,
        0.5,
    ),
    Row(
        "§12.5.2",
        "20 prompts of 590 per charge, %",
        lambda: cli("battery-share")["charge_fraction"][0] * 100,
        3.4,
        0.05,
    ),
    Row(
        "§12.5.2",
        "20 prompts of 490 per charge, %",
        lambda: m.battery_fraction(20, 490) * 100,
        4.1,
        0.05,
    ),
    # --- flip conditions (§12.1.5 ¶"翻转条件") ---
    Row(
        "§12.1.5",
        "45 q4_0 tokens on the phone, s",
        lambda: cli("decode-bound", "--format", "q4_0")["time_s"],
        2.90,
        0.005,
    ),
    Row(
        "§12.1.5",
        "tokens in 2.9 s at q4_0 (约 45)",
        lambda: m.affordable_tokens(2.9, step_s(W_BF16, Q4_0, PHONE)),
        45,
        0.5,
    ),
    Row(
        "§12.1.5",
        "tokens in 2.9 s at BF16 (约 15)",
        lambda: m.affordable_tokens(2.9, step_s(W_BF16, BF16, PHONE)),
        15,
        0.5,
    ),
    Row("§12.1.5", "45 s over 20 rounds, s", lambda: m.model_budget_s(45, 20, 0), 2.25, 0.005),
    Row(
        "§12.1.5",
        "model budget per round after 0.3 s client work, s",
        lambda: cli("decode-budget", "--format", "q4_0")["budget_s"],
        1.95,
        0.005,
    ),
    Row(
        "§12.1.5",
        "q4_0 tokens affordable per round (约 30)",
        lambda: cli("decode-budget", "--format", "q4_0")["max_tokens"],
        30,
    ),
    Row(
        "§12.1.5",
        "45 tokens per round exceeds the budget",
        lambda: cli("decode-budget", "--format", "q4_0")["meets_deadline"],
        False,
    ),
    Row(
        "§12.1.5",
        "device option: 20 × (0.3 + 2.90), s",
        lambda: cli("decode-budget", "--format", "q4_0")["time_s"],
        64.0,
        0.05,
    ),
    # --- training state (§12.1.5 ¶"Unsloth") ---
    Row(
        "§12.1.5",
        "mixed Adam bytes per parameter (2 + 2 + 4 + 4 + 4)",
        lambda: m.ADAM_MIXED_BYTES_PER_PARAM,
        16,
    ),
    Row(
        "§12.1.5",
        "24 GB full training, billion params",
        lambda: cli("training-memory")["full_max_parameters"] / 1e9,
        1.5,
        0.05,
    ),
    Row(
        "§12.1.5",
        "24 GB LoRA base (约 12B), billion params",
        lambda: m.params_fit(24 * GB, BF16) / 1e9,
        12,
        0.5,
    ),
    Row(
        "§12.1.5",
        "96 GB full training, billion params",
        lambda: m.params_fit(96 * GB, m.ADAM_MIXED_BYTES_PER_PARAM) / 1e9,
        6,
        0.5,
    ),
    Row(
        "§12.1.5",
        "96 GB LoRA base, billion params",
        lambda: cli("training-memory", "--memory", "96 GB")["lora_max_parameters"] / 1e9,
        48,
        0.5,
    ),
    Row(
        "§12.1.5",
        "Qwen3-8B parameters from 16.38 GB BF16, billion",
        lambda: RESIDENT_BF16 / BF16 / 1e9,
        8.19,
        0.005,
    ),
    Row(
        "§12.1.5",
        "Qwen3-8B full training state, GB",
        lambda: cli("training-memory")["full_state_bytes"] / GB,
        131.1,
        0.05,
    ),
    Row(
        "§12.1.5",
        "rank-16 Q/V adapter from the architecture (cross-check), MiB",
        lambda: (
            2
            * (
                m.lora_adapter_params(16, 4096, 4096, 36)
                + m.lora_adapter_params(16, 4096, 1024, 36)
            )
            / MIB
        ),
        14.6,
        0.05,
    ),
    Row(
        "§12.1.5",
        "14.6 MiB BF16 adapter (约 765 万), params",
        lambda: cli("training-memory")["adapter_parameters"],
        7_650_000,
        5_000,
    ),
    Row(
        "§12.1.5",
        "adapter state at 16 B/param, GB",
        lambda: m.training_state_bytes(14.6 * MIB / BF16) / GB,
        0.12,
        0.005,
    ),
    Row(
        "§12.1.5",
        "LoRA state with 16.38 GB base, GB",
        lambda: m.lora_state_bytes(RESIDENT_BF16 / BF16, 14.6 * MIB / BF16) / GB,
        16.5,
        0.05,
    ),
    Row(
        "§12.1.5",
        "RTX 4090 24 GB: full 131.1 GB does not fit, LoRA does",
        lambda: (cli("training-memory")["full_fits"], cli("training-memory")["lora_fits"]),
        (False, True),
    ),
    # --- §12.5.1 busy energy of the two GPU options (uses the device bounds) ---
    Row(
        "§12.5.1",
        "RTX PRO 6000 model per round: 45 × 5.47 GB / 1,792 GB/s, s",
        lambda: m.decode_time_s(45, step_s(W_BF16, Q4_0, RTX_PRO_6000)),
        0.137,
        0.0005,
    ),
    Row(
        "§12.5.1",
        "H100 model per round: 45 × 5.47 GB / 3,350 GB/s, s",
        lambda: m.decode_time_s(45, step_s(W_BF16, Q4_0, H100)),
        0.073,
        0.0005,
    ),
    Row(
        "§12.5.1",
        "RTX PRO 6000 busy energy 600 W × (0.27 + 20 × 0.137), kJ",
        lambda: cli("busy-energy")["energy_j"] / 1e3,
        1.81,
        0.005,
    ),
    Row(
        "§12.5.1",
        "H100 busy energy from table values 700 W × (0.14 + 20 × 0.073), kJ",
        lambda: (
            cli("busy-energy", "--power", "700 W", "--prepare", "0.14 s", "--model", "0.073 s")[
                "energy_j"
            ]
            / 1e3
        ),
        1.12,
        0.005,
    ),
    Row(
        "§12.5.1",
        "H100 busy energy from unrounded prefill and decode, kJ",
        lambda: (
            m.busy_energy_j(
                700,
                m.compute_bound_s(133.6e12, 989.4e12)
                + 20 * m.decode_time_s(45, step_s(W_BF16, Q4_0, H100)),
            )
            / 1e3
        ),
        1.12,
        0.005,
    ),
]
