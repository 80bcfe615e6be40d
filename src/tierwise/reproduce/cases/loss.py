"""Every number §12.3.3, figure 12-18, footnotes 4–6 and exercise 12-10 print that
follows from their inputs, recomputed.

One row per printed number: section, what it is, how it is computed (the Python
model or ``tierwise calc ... --json``), the printed value and a tolerance that
matches the printed rounding. Rows marked "derived" are answers an exercise asks
for that the text does not print; their tolerance is that of the inputs' rounding.

Inputs (§12.3.3, footnote 6): MSS 1,448 B, RTT 0.2 s, loss 14 % (another period
3.6 %), capacity knee 333 Mbit/s, model 30 ms, the fixed file of 354,640 bytes,
FEC symbols of one MSS and a 99.9 % block success target.
"""

from __future__ import annotations

import math

import tierwise.calc.network  # noqa: F401  (registers the entries)
from tierwise.model import loss, request
from tierwise.reproduce._case import Row
from tierwise.reproduce._case import calc_json as cli

MBIT = 1e6 / 8  # bytes per second in one Mbit/s
MS = 1e-3
MSS = 1448.0
RTT = 0.2
FILE = 354_640.0
KNEE = 333 * MBIT
MODEL = 30 * MS
N = 245
TARGET = 0.999


def mathis_mbit(p: float, c: float = loss.C_SIMPLE) -> float:
    return loss.mathis_rate_bytes_per_s(MSS, RTT, p, c) / MBIT


def send_s(size: float) -> float:
    return request.transfer_s(size, KNEE)


def serial_s(size: float = FILE) -> float:
    return RTT + MODEL + send_s(size)


def mean_s(p: float) -> float:
    return loss.retransmit_time_s(serial_s(), RTT, loss.expected_rounds(N, p))


def p99_s(p: float) -> float:
    return loss.retransmit_time_s(serial_s(), RTT, loss.rounds_quantile(N, p, 0.99))


def repair(p: float) -> int:
    return loss.fec_repair_symbols(N, p, TARGET)


def fec_time_s(p: float) -> float:
    return serial_s((N + repair(p)) * MSS)


# fmt: off
ROWS = [
    # --- §12.3.3 Mathis (footnote 4) ---
    Row("fn. 4", "periodic loss, every segment ACKed: C = √(3/2) ≈ 1.22",
        lambda: loss.C_PERIODIC, 1.22, 0.005),
    Row("fn. 4", "random loss: C = 1.31", lambda: loss.C_RANDOM, 1.31, 0),
    Row("§12.3.3", "eq. (4) drops the constant: C = 1", lambda: loss.C_SIMPLE, 1.0, 0),
    Row("§12.3.3", "four times the loss halves the rate",
        lambda: mathis_mbit(0.56) / mathis_mbit(0.14), 0.5, 1e-12),
    Row("§12.3.3", "MSS 1,448 B, R 0.2 s, p 0.14, C = 1: ≈ 0.155 Mbit/s",
        lambda: mathis_mbit(0.14), 0.155, 0.0005),
    Row("§12.3.3", "the same with C = 1.22: 0.189 Mbit/s",
        lambda: mathis_mbit(0.14, 1.22), 0.189, 0.0005),
    Row("§12.3.3", "C = 1 bound lies in the measured 0.13–0.47 Mbit/s",
        lambda: float(0.13 <= mathis_mbit(0.14) <= 0.47), 1.0, 0),
    Row("§12.3.3", "C = 1.22 bound lies in the measured 0.13–0.47 Mbit/s",
        lambda: float(0.13 <= mathis_mbit(0.14, 1.22) <= 0.47), 1.0, 0),
    Row("§12.3.3", "354,640 B at the C = 1 bound takes ≈ 18.3 s just to send",
        lambda: request.transfer_s(FILE, loss.mathis_rate_bytes_per_s(MSS, RTT, 0.14)),
        18.3, 0.05),
    Row("§12.3.3", "the bound is three orders of magnitude below the path (333 Mbit/s)",
        lambda: round(math.log10(333 / mathis_mbit(0.14))), 3, 0),
    Row("§12.3.3", "0.155 Mbit/s (CLI mathis)",
        lambda: cli("mathis")["rate_bytes_per_s"] / MBIT, 0.155, 0.0005),
    Row("§12.3.3", "0.189 Mbit/s with C = 1.22 (CLI mathis --c 1.22)",
        lambda: cli("mathis", "--c", "1.22")["rate_bytes_per_s"] / MBIT, 0.189, 0.0005),
    Row("§12.3.3", "≈ 18.3 s to send (CLI mathis)",
        lambda: cli("mathis")["send_s"], 18.3, 0.05),
    # --- §12.3.3 BBR (footnote 5) ---
    Row("fn. 5", "Startup pacing gain 4 ln 2 ≈ 2.77",
        lambda: loss.STARTUP_PACING_GAIN, 2.77, 0.005),
    Row("fn. 5", "ProbeBW_UP pacing gain 1.25", lambda: loss.PROBE_BW_UP_GAIN, 1.25, 0),
    Row("fn. 5", "cwnd_gain 2", lambda: loss.BBR_CWND_GAIN, 2.0, 0),
    Row("§12.3.3", "BDP = 333 Mbit/s × 0.2 s = 8.325 MB",
        lambda: loss.bbr_bdp_bytes(KNEE, RTT) / 1e6, 8.325, 0.0005),
    Row("§12.3.3", "cwnd = 2 BDP = 16.65 MB",
        lambda: loss.bbr_cwnd_bytes(KNEE, RTT) / 1e6, 16.65, 0.005),
    Row("§12.3.3", "ideal goodput (1 − p) × 333 ≈ 286 Mbit/s",
        lambda: loss.ideal_goodput_bytes_per_s(KNEE, 0.14) / MBIT, 286, 0.5),
    Row("§12.3.3", "goodput ≈ 1,850 × the Mathis bound",
        lambda: loss.ideal_goodput_bytes_per_s(KNEE, 0.14) / loss.mathis_rate_bytes_per_s(
            MSS, RTT, 0.14), 1850, 5),
    Row("§12.3.3", "BDP 8.325 MB (CLI bbr)", lambda: cli("bbr")["bdp_bytes"], 8.325e6, 500),
    Row("§12.3.3", "cwnd 16.65 MB (CLI bbr)", lambda: cli("bbr")["cwnd_bytes"], 16.65e6, 5e3),
    Row("§12.3.3", "goodput ≈ 286 Mbit/s (CLI bbr)",
        lambda: cli("bbr")["goodput_bytes_per_s"] / MBIT, 286, 0.5),
    Row("§12.3.3", "≈ 1,850 × (CLI bbr)", lambda: cli("bbr")["goodput_over_mathis"], 1850, 5),
    Row("§12.3.3", "measuring beats inferring by three orders of magnitude",
        lambda: round(math.log10(cli("bbr")["goodput_over_mathis"])), 3, 0),
    # --- §12.3.3 selective retransmission (footnote 6) ---
    Row("§12.3.3", "354,640 B are 245 packets of 1,448 B",
        lambda: loss.packet_count(FILE, MSS), 245, 0),
    Row("§12.3.3", "245 packets at 14 %: 34.3 expected losses",
        lambda: loss.expected_lost_packets(N, 0.14), 34.3, 0.05),
    Row("§12.3.3", "sending 354,640 B at 333 Mbit/s takes 8.5 ms",
        lambda: send_s(FILE) / MS, 8.5, 0.05),
    Row("§12.3.3", "serial budget RTT + 30 ms + 8.5 ms ≈ 238.5 ms",
        lambda: serial_s() / MS, 238.5, 0.05),
    Row("§12.3.3", "mean completion with retransmission 0.756 s",
        lambda: mean_s(0.14), 0.756, 5e-4),
    Row("§12.3.3", "mean ≈ 3.2 × the serial budget",
        lambda: mean_s(0.14) / serial_s(), 3.2, 0.05),
    Row("§12.3.3", "p99 is 6 rounds", lambda: loss.rounds_quantile(N, 0.14, 0.99), 6, 0),
    Row("§12.3.3", "p99 completion 1.24 s", lambda: p99_s(0.14), 1.24, 0.005),
    Row("§12.3.3", "245 packets (CLI retransmit)", lambda: cli("retransmit")["packets"], 245, 0),
    Row("§12.3.3", "34.3 expected losses (CLI retransmit)",
        lambda: cli("retransmit")["expected_lost_packets"], 34.3, 0.05),
    Row("§12.3.3", "serial budget 238.5 ms (CLI retransmit)",
        lambda: cli("retransmit")["serial_s"] / MS, 238.5, 0.05),
    Row("§12.3.3", "mean 0.756 s (CLI retransmit)",
        lambda: cli("retransmit")["time_s"], 0.756, 5e-4),
    Row("§12.3.3", "≈ 3.2 × the budget (CLI retransmit)",
        lambda: cli("retransmit")["time_over_serial"], 3.2, 0.05),
    Row("§12.3.3", "p99 6 rounds (CLI retransmit)",
        lambda: cli("retransmit")["quantile_rounds"], 6, 0),
    Row("§12.3.3", "p99 1.24 s (CLI retransmit)",
        lambda: cli("retransmit")["quantile_time_s"], 1.24, 0.005),
    # --- §12.3.3 FEC ---
    Row("§12.3.3", "14 %, 99.9 %: 63 repair symbols for 245", lambda: repair(0.14), 63, 0),
    Row("§12.3.3", "redundancy 63 / 245 = 25.7 %",
        lambda: 100 * loss.fec_overhead(N, repair(0.14)), 25.7, 0.05),
    Row("§12.3.3", "308 symbols in all", lambda: N + repair(0.14), 308, 0),
    Row("§12.3.3", "308 MSS-sized symbols take ≈ 10.7 ms at 333 Mbit/s",
        lambda: send_s(308 * MSS) / MS, 10.7, 0.05),
    Row("§12.3.3", "completion with FEC ≈ 241 ms", lambda: fec_time_s(0.14) / MS, 241, 0.5),
    Row("§12.3.3", "FEC stays within 3 ms of the 238.5 ms serial budget",
        lambda: float(fec_time_s(0.14) - serial_s() < 3 * MS), 1.0, 0),
    Row("§12.3.3", "the 63 repair symbols reach the 99.9 % target",
        lambda: float(loss.fec_success(N, 63, 0.14) >= TARGET), 1.0, 0),
    Row("§12.3.3", "62 repair symbols would not (63 is the least)",
        lambda: float(loss.fec_success(N, 62, 0.14) < TARGET), 1.0, 0),
    Row("§12.3.3", "3.6 %: retransmission p99 0.84 s", lambda: p99_s(0.036), 0.84, 0.005),
    Row("§12.3.3", "3.6 %: 20 repair symbols", lambda: repair(0.036), 20, 0),
    Row("§12.3.3", "3.6 %: redundancy 8.2 %",
        lambda: 100 * loss.fec_overhead(N, repair(0.036)), 8.2, 0.05),
    Row("§12.3.3", "63 repair symbols (CLI fec)", lambda: cli("fec")["repair_symbols"], 63, 0),
    Row("§12.3.3", "25.7 % (CLI fec)", lambda: 100 * cli("fec")["overhead"], 25.7, 0.05),
    Row("§12.3.3", "308 symbols (CLI fec)", lambda: cli("fec")["symbols"], 308, 0),
    Row("§12.3.3", "send ≈ 10.7 ms (CLI fec)", lambda: cli("fec")["send_s"] / MS, 10.7, 0.05),
    Row("§12.3.3", "≈ 241 ms (CLI fec)", lambda: cli("fec")["time_s"] / MS, 241, 0.5),
    Row("§12.3.3", "3.6 %: 20 repair symbols (CLI fec --loss 0.036)",
        lambda: cli("fec", "--loss", "0.036")["repair_symbols"], 20, 0),
    Row("§12.3.3", "3.6 %: 8.2 % (CLI fec --loss 0.036)",
        lambda: 100 * cli("fec", "--loss", "0.036")["overhead"], 8.2, 0.05),
    Row("§12.3.3", "3.6 %: p99 0.84 s (CLI retransmit --loss 0.036)",
        lambda: cli("retransmit", "--loss", "0.036")["quantile_time_s"], 0.84, 0.005),
    # --- figure 12-18 ---
    Row("fig. 12-18", "serial budget ≈ 238.5 ms", lambda: serial_s() / MS, 238.5, 0.05),
    Row("fig. 12-18", "send 8.5 ms", lambda: send_s(FILE) / MS, 8.5, 0.05),
    Row("fig. 12-18", "FEC: 63 repair symbols", lambda: repair(0.14), 63, 0),
    Row("fig. 12-18", "FEC: 25.7 %", lambda: 100 * repair(0.14) / N, 25.7, 0.05),
    Row("fig. 12-18", "Mathis: ≈ 18.3 s just to send", lambda: cli("mathis")["send_s"], 18.3, 0.05),
    # --- footnote 6 ---
    Row("fn. 6", "model time ≤ 236.5 − 197 − 8.5 ≈ 31 ms",
        lambda: (236.5 * MS - 197 * MS - send_s(FILE)) / MS, 31, 0.5),
    # --- exercise 12-10 ---
    Row("ex. 12-10(a)", "14 %: Mathis ≈ 0.155 Mbit/s", lambda: mathis_mbit(0.14), 0.155, 5e-4),
    Row("ex. 12-10(a)", "14 %: ≈ 18.3 s to send", lambda: cli("mathis")["send_s"], 18.3, 0.05),
    Row("ex. 12-10(a)", "3.6 %: Mathis ≈ 0.305 Mbit/s (derived)",
        lambda: mathis_mbit(0.036), 0.305, 5e-4),
    Row("ex. 12-10(a)", "3.6 %: ≈ 9.29 s to send (derived)",
        lambda: cli("mathis", "--loss", "0.036")["send_s"], 9.29, 0.005),
    Row("ex. 12-10(b)", "expected losses 34.3", lambda: loss.expected_lost_packets(N, 0.14),
        34.3, 0.05),
    Row("ex. 12-10(b)", "(1 − p^n)^245: P(6 rounds suffice) ≥ 0.99 > P(5 rounds)",
        lambda: float(loss.rounds_cdf(N, 0.14, 6) >= 0.99 > loss.rounds_cdf(N, 0.14, 5)), 1.0, 0),
    Row("ex. 12-10(b)", "mean 0.756 s", lambda: mean_s(0.14), 0.756, 5e-4),
    Row("ex. 12-10(b)", "p99 1.24 s", lambda: p99_s(0.14), 1.24, 0.005),
    Row("ex. 12-10(b)", "3.6 %: mean ≈ 0.495 s (derived)", lambda: mean_s(0.036), 0.495, 5e-4),
    Row("ex. 12-10(c)", "14 %: 63 repair symbols", lambda: repair(0.14), 63, 0),
    Row("ex. 12-10(c)", "14 %: 25.7 %", lambda: 100 * repair(0.14) / N, 25.7, 0.05),
    Row("ex. 12-10(c)", "14 %: ≈ 241 ms with FEC", lambda: fec_time_s(0.14) / MS, 241, 0.5),
    Row("ex. 12-10(c)", "14 %: vs retransmission p99 1.24 s (CLI fec)",
        lambda: cli("fec")["retransmit_quantile_time_s"], 1.24, 0.005),
    Row("ex. 12-10(c)", "3.6 %: 20 repair symbols", lambda: repair(0.036), 20, 0),
    Row("ex. 12-10(c)", "3.6 %: 8.2 %", lambda: 100 * repair(0.036) / N, 8.2, 0.05),
    Row("ex. 12-10(c)", "3.6 %: ≈ 239.2 ms with FEC (derived)",
        lambda: cli("fec", "--loss", "0.036")["time_s"] / MS, 239.2, 0.05),
    Row("ex. 12-10(c)", "3.6 %: vs retransmission p99 0.84 s (CLI fec)",
        lambda: cli("fec", "--loss", "0.036")["retransmit_quantile_time_s"], 0.84, 0.005),
]
# fmt: on
