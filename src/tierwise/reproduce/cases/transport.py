"""Every number §12.3.1, §12.3.2, §12.4.1 and exercises 12-4(a), 12-4(b) (bytes) and
12-5(a) print that follows from their inputs, recomputed.

One row per printed number: section, what it is, how it is computed (the CLI
``tierwise calc ... --json`` or the Python model), the printed value and a
tolerance matching the printed rounding. The packet-by-packet times of §12.3.2
(14.36 s, 14.52 s, 14.56 s, the 1.6 s and 43 ms differences) and note 18's exact
simulator byte counts belong to the simulator's reference table, not here.
"""

from __future__ import annotations

import tierwise.calc.transport  # noqa: F401  (registers the entries until calc/__init__ does)
from tierwise.model import transport, wireless
from tierwise.reproduce._case import Row
from tierwise.reproduce._case import calc_json as cli

MS = 1e-3
US = 1e-6
MBIT_PER_S = 1e6 / 8  # bytes/s
MB = 1e6


# §12.3.1: the 30-round screenshot agent, 200 ms RTT, a 2-RTT handshake, 105 s of work.
def _setup(mode: str) -> float:
    return transport.connection_setup_s("tcp+tls1.3", 200 * MS, 30, mode)


# §12.3.2: the §12.1.1 image path, 20 Mbit/s and 100 ms, a 64 kB window.
PATH = 20 * MBIT_PER_S
WINDOW = 64_000

# §12.3.2 overhead example: 1,168-byte payloads, 60-byte headers, 92-byte ACKs.
OVERHEAD = ("--payload", "1168 B", "--header", "60 B", "--ack", "92 B")


def _wire(ack_every: int) -> float:
    return cli("overhead", *OVERHEAD, "--ack-every", str(ack_every))["wire_bytes"]


def _data_ppdu(ip_bytes: int) -> float:
    return wireless.ppdu_s(ip_bytes + wireless.DATA_MPDU_OVERHEAD_BYTES, 54e6)


# §12.4.1: OFDM 54 Mbit/s data, 6 Mbit/s MAC ACK, a 1,228-byte data packet
# (1,168 + 60), a 92-byte end-to-end ACK packet.
def _exchange(ip_bytes: int) -> float:
    return wireless.exchange_s(ip_bytes, 54e6, 6e6)


# fmt: off
ROWS = [
    # --- §12.3.1 connection set-up (Python API) ---
    Row("§12.3.1", "two extra round trips at 200 ms, only in the first round: 0.4 s",
        lambda: _setup("reused"), 0.4, 0.05),
    Row("§12.3.1", "rebuilt every round: 12 s",
        lambda: _setup("new-per-round"), 12, 0.5),
    Row("§12.3.1", "reuse saves 11.6 s",
        lambda: _setup("new-per-round") - _setup("reused"), 11.6, 0.05),
    Row("§12.3.1", "105 s plus the first handshake: 105.4 s",
        lambda: 105 + _setup("reused"), 105.4, 0.05),
    Row("§12.3.1", "105 s with a handshake every round: 117 s",
        lambda: 105 + _setup("new-per-round"), 117, 0.5),
    # --- §12.3.1 (CLI: tierwise calc handshake) ---
    Row("§12.3.1", "reused: 105.4 s (CLI)",
        lambda: cli("handshake")["time_reused_s"], 105.4, 0.05),
    Row("§12.3.1", "new per round: 117 s (CLI)",
        lambda: cli("handshake")["time_new_per_round_s"], 117, 0.5),
    Row("ex. 12-4(a)", "new per round minus reused: 11.6 s (CLI)",
        lambda: cli("handshake")["saving_s"], 11.6, 0.05),
    # --- §12.3.2 window-limited rate ---
    Row("§12.3.2", "20 Mbit/s × 100 ms: about 250 kB in flight fills the path",
        lambda: transport.bdp_bytes(PATH, 100 * MS), 250_000, 500),
    Row("§12.3.2", "a 64 kB window caps the rate at 64000/0.1 = 640,000 B/s",
        lambda: transport.useful_rate_bytes_per_s(PATH, WINDOW, 100 * MS), 640_000, 0.5),
    Row("§12.3.2", "640,000 B/s ≈ 5.1 Mbit/s",
        lambda: transport.useful_rate_bytes_per_s(PATH, WINDOW, 100 * MS) / MBIT_PER_S,
        5.1, 0.05),
    Row("§12.3.2", "sending the 30 MB alone takes at least ≈ 47 s",
        lambda: transport.window_limited_transfer_s(30 * MB, PATH, WINDOW, 100 * MS), 47, 0.5),
    Row("§12.3.2", "250 kB BDP (CLI)",
        lambda: cli("window-rate")["bdp_bytes"], 250_000, 500),
    Row("§12.3.2", "30 MB ≥ ≈ 47 s (CLI)",
        lambda: cli("window-rate")["time_s"], 47, 0.5),
    # --- §12.3.2 / figure 12-17 stop-and-wait ---
    Row("§12.3.2", "one 64 kB batch takes 25.6 ms to send at 20 Mbit/s",
        lambda: cli("stop-and-wait")["send_s"], 25.6 * MS, 0.05 * MS),
    Row("§12.3.2", "25.6 ms sending + 100 ms feedback = 125.6 ms per cycle",
        lambda: transport.stop_and_wait_cycle_s(WINDOW, PATH, 100 * MS), 125.6 * MS, 0.05 * MS),
    Row("fig. 12-17", "each batch cycle is 125.6 ms (CLI)",
        lambda: cli("stop-and-wait")["cycle_s"], 125.6 * MS, 0.05 * MS),
    # --- §12.3.2 slow start from 10 × 1460-byte segments ---
    Row("§12.3.2", "initial window 10 × 1460 = 14,600 B",
        lambda: transport.slow_start_bytes(1, 10, 1460), 14_600, 0.5),
    Row("§12.3.2", "first four rounds: 14600(1+2+4+8) = 219,000 B",
        lambda: transport.slow_start_bytes(4, 10, 1460), 219_000, 0.5),
    Row("§12.3.2", "after the fifth round: 452,600 B",
        lambda: transport.slow_start_bytes(5, 10, 1460), 452_600, 0.5),
    Row("§12.3.2", "a ≈ 355 kB voice request finishes only in round 5",
        lambda: transport.slow_start_rounds(355_000, 10, 1460), 5, 0),
    Row("§12.3.2", "the 354,640-byte request also needs 5 rounds (CLI)",
        lambda: cli("slow-start", "--mss", "1460 B")["rounds"], 5, 0),
    Row("§12.3.2", "219,000 B after four rounds (CLI)",
        lambda: cli("slow-start", "--mss", "1460 B")["cumulative_bytes"][3], 219_000, 0.5),
    Row("§12.3.2", "452,600 B after five rounds (CLI)",
        lambda: cli("slow-start", "--mss", "1460 B")["cumulative_bytes"][4], 452_600, 0.5),
    # --- §12.3.2 headers and ACKs (CLI: tierwise calc overhead), note 17 ---
    Row("§12.3.2", "about thirty thousand data packets",
        lambda: cli("overhead", *OVERHEAD)["data_packets"], 30_000, 500),
    Row("§12.3.2", "headers and ACKs add ≈ 4.6 MB",
        lambda: cli("overhead", *OVERHEAD)["overhead_bytes"], 4.6 * MB, 0.05 * MB),
    Row("§12.3.2", "35 MB of images grows to ≈ 39.6 MB on the wire",
        lambda: cli("overhead", *OVERHEAD)["wire_bytes"], 39.6 * MB, 0.05 * MB),
    Row("§12.3.2", "the payload itself is 35 MB",
        lambda: cli("overhead", *OVERHEAD)["payload_bytes"], 35 * MB, 0.5),
    Row("note 17", "upload: 25,685 packets",
        lambda: transport.packets(30 * MB, 1168), 25_685, 0),
    Row("note 17", "download: 4,281 packets",
        lambda: transport.packets(5 * MB, 1168), 4_281, 0),
    Row("note 17", "29,966 data packets",
        lambda: cli("overhead", *OVERHEAD)["data_packets"], 29_966, 0),
    Row("note 17", "as many ACKs",
        lambda: cli("overhead", *OVERHEAD)["acks"], 29_966, 0),
    Row("note 17", "39,554,832 bytes on the wire",
        lambda: cli("overhead", *OVERHEAD)["wire_bytes"], 39_554_832, 0.5),
    # --- exercise 12-4(b): bytes with immediate and with aggregated (every-2) ACKs ---
    Row("ex. 12-4(b)", "immediate ACK: ≈ 39.6 MB of image, headers and ACKs",
        lambda: _wire(1), 39.6 * MB, 0.05 * MB),
    Row("ex. 12-4(b)", "one ACK per two packets: ≈ 38.2 MB",
        lambda: _wire(2), 38.2 * MB, 0.05 * MB),
    Row("ex. 12-4(b)", "aggregating ACKs saves ≈ 1.38 MB (note 18)",
        lambda: _wire(1) - _wire(2), 1.38 * MB, 0.005 * MB),
    # --- §12.4.1 shared air interface (Python API) ---
    Row("§12.4.1", "access wait: DIFS = SIFS 16 µs + 2 × 9 µs slots = 34 µs",
        lambda: wireless.DIFS_S, 34 * US, 0.5 * US),
    Row("§12.4.1", "a 1,228-byte packet's data PPDU at 54 Mbit/s: 208 µs",
        lambda: _data_ppdu(1228), 208 * US, 0.5 * US),
    Row("§12.4.1", "SIFS 16 µs",
        lambda: wireless.SIFS_S, 16 * US, 0.5 * US),
    Row("§12.4.1", "MAC ACK at 6 Mbit/s: 44 µs",
        lambda: wireless.ppdu_s(wireless.MAC_ACK_BYTES, 6e6), 44 * US, 0.5 * US),
    Row("§12.4.1", "data packet exchange: 302 µs",
        lambda: _exchange(1228), 302 * US, 0.5 * US),
    Row("§12.4.1", "a 92-byte end-to-end ACK's data PPDU: 40 µs",
        lambda: _data_ppdu(92), 40 * US, 0.5 * US),
    Row("§12.4.1", "end-to-end ACK exchange: 134 µs",
        lambda: _exchange(92), 134 * US, 0.5 * US),
    Row("fig. 12-24", "fixed part 34 + 16 + 44 = 94 µs",
        lambda: wireless.exchange_overhead_s(6e6), 94 * US, 0.5 * US),
    Row("fig. 12-24", "the data PPDU shrinks by about 80 %",
        lambda: cli("airtime")["ppdu_shrink"], 0.8, 0.05),
    Row("fig. 12-24", "the whole exchange only by about 56 %",
        lambda: cli("airtime")["exchange_shrink"], 0.56, 0.005),
    Row("§12.4.1", "30,800 × (302 + 134) µs ≈ 13.4 s of air time",
        lambda: wireless.airtime_s(30_800, 30_800, _exchange(1228), _exchange(92)), 13.4, 0.05),
    Row("§12.4.1", "halving the ACKs removes 15,400 exchanges",
        lambda: 30_800 - transport.ack_count(30_800, every=2), 15_400, 0),
    Row("§12.4.1", "halving the ACKs frees ≈ 15,400 × 134 µs ≈ 2.1 s",
        lambda: wireless.ack_thinning_saving_s(30_800, 2, _exchange(92)), 2.1, 0.05),
    Row("§12.4.1", "302 µs per data exchange (CLI)",
        lambda: cli("airtime")["data_exchange_s"], 302 * US, 0.5 * US),
    Row("§12.4.1", "134 µs per ACK exchange (CLI)",
        lambda: cli("airtime")["ack_exchange_s"], 134 * US, 0.5 * US),
    Row("§12.4.1", "≈ 13.4 s of air time (CLI)",
        lambda: cli("airtime")["time_s"], 13.4, 0.05),
    Row("§12.4.1", "208 µs PPDU (CLI: tierwise calc ppdu)",
        lambda: cli("ppdu")["time_s"], 208 * US, 0.5 * US),
    Row("§12.4.1", "44 µs MAC ACK (CLI)",
        lambda: cli("ppdu", "--mpdu", "14 B", "--rate", "6 Mbit/s")["time_s"], 44 * US, 0.5 * US),
    # --- exercise 12-5(a), given 302 and 134 µs ---
    Row("ex. 12-5(a)", "halving 30,800 ACKs frees ≈ 2.1 s",
        lambda: wireless.ack_thinning_saving_s(30_800, 2, 134 * US), 2.1, 0.05),
    Row("ex. 12-5(a)", "halving 30,800 ACKs frees ≈ 2.1 s (CLI)",
        lambda: cli("airtime")["saved_s"], 2.1, 0.05),
    # --- §12.2.4 quotes the §12.4.1 short exchange ---
    Row("§12.2.4", "144 communication launches × 134 µs ≈ 19.3 ms",
        lambda: 144 * _exchange(92), 19.3 * MS, 0.05 * MS),
]
# fmt: on
