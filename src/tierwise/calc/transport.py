"""calc entries: connection set-up, windows, overhead (§12.3.1, §12.3.2), airtime (§12.4.1)."""

from __future__ import annotations

from tierwise.calc._registry import Param, calc
from tierwise.model import request
from tierwise.model import transport as m
from tierwise.model import wireless as air

BITS_PER_BYTE = 8


@calc(
    "handshake",
    "Connection set-up: handshake once (reused) or in every round",
    "§12.3.1, exercise 12-4(a)",
    Param("protocol", "str", f"handshake: {', '.join(m.HANDSHAKE_RTTS)}", "tcp+tls1.3"),
    Param("rtt", "time", "round-trip time R", "200 ms"),
    Param("rounds", "int", "rounds N", 30),
    Param("work", "time", "task time on an open connection", "105 s"),
)
def handshake(protocol, rtt, rounds, work):
    """reused: T = work + h·R; new per round: T = work + N·h·R (h handshake round trips)."""
    reused = m.connection_setup_s(protocol, rtt, rounds, "reused")
    fresh = m.connection_setup_s(protocol, rtt, rounds, "new-per-round")
    return {
        "round_trips": m.handshake_round_trips(protocol),
        "handshake_s": m.handshake_s(protocol, rtt),
        "reused_s": reused,
        "new_per_round_s": fresh,
        "saving_s": fresh - reused,
        "time_reused_s": work + reused,
        "time_new_per_round_s": work + fresh,
    }


@calc(
    "window-rate",
    "Useful throughput min(B_path, W/R) and the send time it allows",
    "§12.3.2",
    Param("path", "rate", "path payload rate B_path", "20 Mbit/s"),
    Param("window", "size", "allowed bytes in flight W", "64 kB"),
    Param("rtt", "time", "round-trip time R", "100 ms"),
    Param("size", "size", "bytes to send S", "30 MB"),
)
def window_rate(path, window, rtt, size):
    """B_useful = min(B_path, W/R); send time ≥ S/B_useful; BDP = B_path·R fills the path."""
    useful = m.useful_rate_bytes_per_s(path, window, rtt)
    return {
        "bdp_bytes": m.bdp_bytes(path, rtt),
        "window_rate_bytes_per_s": window / rtt if rtt > 0 else float("inf"),
        "useful_rate_bytes_per_s": useful,
        "window_limited": bool(useful < path),
        "time_s": m.window_limited_transfer_s(size, path, window, rtt),
        "path_time_s": request.transfer_s(size, path),
    }


@calc(
    "stop-and-wait",
    "A fixed window sent, then a fixed wait for its batch ACK",
    "§12.3.2, figure 12-17",
    Param("window", "size", "window sent per batch W", "64 kB"),
    Param("rate", "rate", "link rate B", "20 Mbit/s"),
    Param("feedback", "time", "from the batch's last byte to its ACK F", "100 ms"),
)
def stop_and_wait(window, rate, feedback):
    """cycle = W/B + F; rate = W/(W/B + F); the link is busy (W/B)/cycle of the time."""
    cycle = m.stop_and_wait_cycle_s(window, rate, feedback)
    send = request.transfer_s(window, rate)
    return {
        "send_s": send,
        "cycle_s": cycle,
        "rate_bytes_per_s": m.stop_and_wait_rate_bytes_per_s(window, rate, feedback),
        "busy_share": send / cycle,
    }


@calc(
    "slow-start",
    "Window doubling from IW segments: bytes per round, rounds needed, send time and stall",
    "§12.3.2, §12.3.5",
    Param("size", "size", "bytes to send S", "354640 B"),
    Param("rate", "rate", "link rate B", "333 Mbit/s"),
    Param("rtt", "time", "round-trip time R", "200 ms"),
    Param("initial_window", "int", "initial window IW in segments (RFC 6928)", 10),
    Param("mss", "size", "segment payload MSS", "1448 B"),
    Param("start_window", "size", "window left open by an earlier transfer (0 B: new)", "0 B"),
    Param(
        "first_flight",
        "size",
        "cap on the first round: the SYN-ACK's unscaled window, ≤ 65,535 B (0 B: no cap)",
        "0 B",
    ),
)
def slow_start(size, rate, rtt, initial_window, mss, start_window, first_flight):
    """T = k·R + (S − Σ_{j<k} w_j)/B with w_j = w_0·2^j, k rounds below the BDP and short of S.

    With a first-flight cap F, round 0 sends min(w_0, F) and the window grows by that.
    """
    start = start_window or None
    cap = first_flight or None
    send, final = m.slow_start_send_s(size, rate, rtt, initial_window, mss, start, cap)
    rounds = m.slow_start_rounds(size, initial_window, mss)
    return {
        "rounds": rounds,
        "cumulative_bytes": [
            m.slow_start_bytes(k, initial_window, mss) for k in range(1, rounds + 1)
        ],
        "bdp_bytes": m.bdp_bytes(rate, rtt),
        "send_s": send,
        "serialisation_s": request.transfer_s(size, rate),
        "window_wait_s": m.window_wait_s(size, rate, rtt, initial_window, mss, start, cap),
        "final_window_bytes": final,
    }


@calc(
    "idle-restart",
    "The window after an idle gap (slow start after idle on/off) and the next transfer's stall",
    "§12.3.2",
    Param("window", "size", "window when the connection went idle", "369120 B"),
    Param("idle", "time", "time without sending", "2 s"),
    Param("rto", "time", "retransmission timeout (RFC 6298 minimum 1 s)", "1 s"),
    Param("initial_window", "int", "initial window IW in segments", 10),
    Param("mss", "size", "segment payload MSS", "1448 B"),
    Param("restart", "bool", "slow start after idle (Linux default: on)", True),
    Param("rule", "str", "rfc5681 (reset to IW) or linux (halve per RTO)", "rfc5681"),
    Param("size", "size", "next transfer S", "354640 B"),
    Param("rate", "rate", "link rate B", "333 Mbit/s"),
    Param("rtt", "time", "round-trip time R", "200 ms"),
)
def idle_restart(window, idle, rto, initial_window, mss, restart, rule, size, rate, rtt):
    """w' = min(IW, w) if restart and idle > RTO, else w; then the next transfer starts from w'."""
    after = m.window_after_idle(window, idle, rto, initial_window * mss, restart, rule=rule)
    return {
        "window_bytes": after,
        "restarted": after < window,
        "next_window_wait_s": m.window_wait_s(size, rate, rtt, initial_window, mss, after),
        "new_connection_window_wait_s": m.window_wait_s(size, rate, rtt, initial_window, mss),
    }


@calc(
    "overhead",
    "Packets, header and ACK bytes that actually cross each direction",
    "§12.3.2 (note 17), exercise 12-4(b)",
    Param("upload", "size", "bytes uploaded", "30 MB"),
    Param("download", "size", "bytes downloaded", "5 MB"),
    Param("payload", "size", "payload per packet", "1168 B"),
    Param("header", "size", "protocol and network headers per packet", "60 B"),
    Param("ack", "size", "bytes per ACK packet", "92 B"),
    Param("ack_every", "int", "data packets per ACK", 1),
)
def overhead(upload, download, payload, header, ack, ack_every):
    """n = ⌈S/P⌉ per direction; wire = S + n·H + ⌈n/k⌉·A (ACKs go the other way)."""
    n_up, n_down = m.packets(upload, payload), m.packets(download, payload)
    acks_up, acks_down = m.ack_count(n_up, ack_every), m.ack_count(n_down, ack_every)
    headers = (n_up + n_down) * header
    acks = m.ack_bytes(n_up, ack, ack_every) + m.ack_bytes(n_down, ack, ack_every)
    return {
        "upload_packets": n_up,
        "download_packets": n_down,
        "data_packets": n_up + n_down,
        "acks": acks_up + acks_down,
        "payload_bytes": upload + download,
        "header_bytes": headers,
        "ack_bytes": acks,
        "overhead_bytes": headers + acks,
        "wire_bytes": upload + download + headers + acks,
        "uplink_wire_bytes": m.wire_bytes(upload, payload, header) + acks_down * ack,
        "downlink_wire_bytes": m.wire_bytes(download, payload, header) + acks_up * ack,
    }


@calc(
    "airtime",
    "802.11a/g exchange airtime for data and end-to-end ACKs, and what ACK thinning frees",
    "§12.4.1, exercise 12-5(a)",
    Param("packet", "size", "IP packet carried by a data exchange", "1228 B"),
    Param("ack_packet", "size", "IP packet carrying an end-to-end ACK", "92 B"),
    Param("data_rate", "rate", "OFDM data rate", "54 Mbit/s"),
    Param("ack_rate", "rate", "MAC ACK rate", "6 Mbit/s"),
    Param("access", "time", "access wait (DIFS, no random backoff)", "34 us"),
    Param("exchanges", "int", "data exchanges, each with its own end-to-end ACK", 30800),
    Param("ack_every", "int", "data packets per end-to-end ACK after thinning", 2),
)
def airtime(packet, ack_packet, data_rate, ack_rate, access, exchanges, ack_every):
    """t = access + TXTIME(L + 36) + SIFS + TXTIME(14); air = n_d·t_d + n_a·t_a."""
    data_bits, ack_bits = data_rate * BITS_PER_BYTE, ack_rate * BITS_PER_BYTE
    t_data = air.exchange_s(packet, data_bits, ack_bits, access)
    t_ack = air.exchange_s(ack_packet, data_bits, ack_bits, access)
    ppdu_data = air.ppdu_s(packet + air.DATA_MPDU_OVERHEAD_BYTES, data_bits)
    ppdu_ack = air.ppdu_s(ack_packet + air.DATA_MPDU_OVERHEAD_BYTES, data_bits)
    total = air.airtime_s(exchanges, exchanges, t_data, t_ack)
    saved = air.ack_thinning_saving_s(exchanges, ack_every, t_ack)
    return {
        "data_exchange_s": t_data,
        "ack_exchange_s": t_ack,
        "fixed_s": air.exchange_overhead_s(ack_bits, access),
        "data_ppdu_s": ppdu_data,
        "ack_ppdu_s": ppdu_ack,
        "ppdu_shrink": 1 - ppdu_ack / ppdu_data,
        "exchange_shrink": 1 - t_ack / t_data,
        "time_s": total,
        "thinned_time_s": total - saved,
        "saved_s": saved,
    }


@calc(
    "ppdu",
    "Duration of one 802.11a/g OFDM PPDU",
    "§12.4.1",
    Param("mpdu", "size", "MPDU bytes (IP packet + 36, or 14 for a MAC ACK)", "1264 B"),
    Param("rate", "rate", "OFDM rate", "54 Mbit/s"),
)
def ppdu(mpdu, rate):
    """TXTIME = 20 µs + 4 µs·⌈(16 + 8·L + 6)/N_DBPS⌉, N_DBPS = rate × 4 µs."""
    bits = rate * BITS_PER_BYTE
    return {
        "time_s": air.ppdu_s(mpdu, bits),
        "symbols": int(air.ppdu_symbols(mpdu, bits)),
        "bits_per_symbol": air.bits_per_symbol(bits),
    }
