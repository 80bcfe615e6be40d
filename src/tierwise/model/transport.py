"""Connection set-up, windows, feedback and per-packet overhead (§12.3.1, §12.3.2).

Scalars or numpy arrays in SI units (seconds, bytes, bytes/s) where the formula
broadcasts; the slow-start send time and the idle restart walk round by round and
take scalars. Every model here assumes a lossless path: loss and recovery live in
:mod:`tierwise.model.loss`.
"""

from __future__ import annotations

import math

import numpy as np

from tierwise.errors import ModelError
from tierwise.model._check import ArrayLike, nonneg, positive

__all__ = [
    "CONNECTION_MODES",
    "ETHERNET_MSS_BYTES",
    "HANDSHAKE_RTTS",
    "IDLE_RESTART_RULES",
    "INITIAL_WINDOW_SEGMENTS",
    "LINUX_RTO_MIN_S",
    "RFC6298_RTO_MIN_S",
    "SYN_WINDOW_BYTES",
    "TIMESTAMP_MSS_BYTES",
    "ack_bytes",
    "ack_count",
    "bdp_bytes",
    "connection_setup_s",
    "handshake_round_trips",
    "handshake_s",
    "packets",
    "slow_start_bytes",
    "slow_start_rounds",
    "slow_start_send_s",
    "stop_and_wait_cycle_s",
    "stop_and_wait_rate_bytes_per_s",
    "useful_rate_bytes_per_s",
    "window_after_idle",
    "window_limited_transfer_s",
    "window_wait_s",
    "wire_bytes",
]

# Round trips before the first request byte can leave the client.
HANDSHAKE_RTTS: dict[str, int] = {
    "tcp+tls1.3": 2,  # TCP SYN/SYN-ACK, then one TLS 1.3 flight (RFC 9293, RFC 8446 §2)
    "tcp+tls1.2": 3,  # TCP, then two TLS 1.2 flights (RFC 5246 §7.3)
    "quic": 1,  # transport and TLS 1.3 handshakes combined (RFC 9000 §7, RFC 9001 §4)
    "quic-0rtt": 0,  # resumption: early data rides the first flight (RFC 9001 §4.6, RFC 8446 §2.3)
}

# How often a multi-round task pays the handshake.
CONNECTION_MODES: dict[str, str] = {
    "reused": "once, in the first round; later rounds share its state",
    "new-per-round": "in every round",
}

INITIAL_WINDOW_SEGMENTS = 10  # RFC 6928; Linux since 2.6.39
ETHERNET_MSS_BYTES = 1460  # 1500-byte MTU − 20 IPv4 − 20 TCP (RFC 9293 §3.7.1)
TIMESTAMP_MSS_BYTES = 1448  # 1460 − 12 bytes of TCP timestamps (RFC 7323), Linux's usual MSS
RFC6298_RTO_MIN_S = 1.0  # RFC 6298 §2.4
LINUX_RTO_MIN_S = 0.2  # Linux TCP_RTO_MIN
SYN_WINDOW_BYTES = 65_535  # a SYN/SYN-ACK's window field is never scaled (RFC 7323 §2.2)


# --- connection set-up (§12.3.1) -------------------------------------------------


def handshake_round_trips(protocol: str) -> int:
    """Round trips a fresh connection of ``protocol`` costs (:data:`HANDSHAKE_RTTS`)."""
    try:
        return HANDSHAKE_RTTS[protocol]
    except (KeyError, TypeError):
        known = ", ".join(HANDSHAKE_RTTS)
        raise ModelError(f"unknown handshake {protocol!r}; known: {known}") from None


def handshake_s(protocol: str, rtt_s: ArrayLike) -> ArrayLike:
    """Set-up time ``h·R`` with ``h`` the protocol's handshake round trips (§12.3.1).

    TCP + TLS 1.3 takes 2 RTT: 0.4 s at 200 ms.
    """
    nonneg("rtt", rtt_s)
    return np.multiply(handshake_round_trips(protocol), rtt_s)


def connection_setup_s(protocol: str, rtt_s: ArrayLike, rounds: int, mode: str) -> ArrayLike:
    """Total set-up over ``N`` rounds: ``h·R`` once if ``reused``, ``N·h·R`` if ``new-per-round``.

    §12.3.1: 30 rounds at 200 ms with a 2-RTT handshake cost 0.4 s reused and
    12 s new each round (105 s of work → 105.4 s or 117 s).
    """
    _count("rounds", rounds, minimum=0)
    if mode not in CONNECTION_MODES:
        known = ", ".join(CONNECTION_MODES)
        raise ModelError(f"unknown connection mode {mode!r}; known: {known}")
    times = min(rounds, 1) if mode == "reused" else rounds
    return times * handshake_s(protocol, rtt_s)


# --- windows and feedback (§12.3.2) -----------------------------------------------


def bdp_bytes(rate_bytes_per_s: ArrayLike, rtt_s: ArrayLike) -> ArrayLike:
    """Bandwidth-delay product ``B·R``: the bytes in flight that keep the path busy (§12.3.2).

    20 Mbit/s × 100 ms = 250 kB.
    """
    nonneg("rate", rate_bytes_per_s)
    nonneg("rtt", rtt_s)
    return np.multiply(rate_bytes_per_s, rtt_s)


def useful_rate_bytes_per_s(
    path_rate_bytes_per_s: ArrayLike, window_bytes: ArrayLike, rtt_s: ArrayLike
) -> ArrayLike:
    """Useful throughput ``B_useful = min(B_path, W/R)`` (§12.3.2).

    At most one window ``W`` is delivered per round trip ``R``: a 64 kB window over
    100 ms caps the rate at 640,000 B/s (≈ 5.1 Mbit/s) whatever the path offers.
    A zero RTT leaves the path rate as the only limit.
    """
    positive("path rate", path_rate_bytes_per_s)
    positive("window", window_bytes)
    nonneg("rtt", rtt_s)
    with np.errstate(divide="ignore", over="ignore"):
        return np.minimum(path_rate_bytes_per_s, np.divide(window_bytes, rtt_s))


def window_limited_transfer_s(
    size_bytes: ArrayLike,
    path_rate_bytes_per_s: ArrayLike,
    window_bytes: ArrayLike,
    rtt_s: ArrayLike,
) -> ArrayLike:
    """Lower bound on the send time ``S / min(B_path, W/R)`` (§12.3.2: 30 MB ≥ 46.9 s)."""
    nonneg("size", size_bytes)
    return np.divide(
        size_bytes, useful_rate_bytes_per_s(path_rate_bytes_per_s, window_bytes, rtt_s)
    )


def stop_and_wait_cycle_s(
    window_bytes: ArrayLike, rate_bytes_per_s: ArrayLike, feedback_s: ArrayLike
) -> ArrayLike:
    """One batch cycle ``W/B + F``: send the window, then wait ``F`` for its ACK (§12.3.2).

    Figure 12-17: 64 kB at 20 Mbit/s is 25.6 ms of sending plus 100 ms of feedback.
    """
    positive("window", window_bytes)
    positive("rate", rate_bytes_per_s)
    nonneg("feedback time", feedback_s)
    return np.divide(window_bytes, rate_bytes_per_s) + feedback_s


def stop_and_wait_rate_bytes_per_s(
    window_bytes: ArrayLike, rate_bytes_per_s: ArrayLike, feedback_s: ArrayLike
) -> ArrayLike:
    """Throughput of the stop-and-wait cycle, ``W / (W/B + F)`` (§12.3.2)."""
    return np.divide(
        window_bytes, stop_and_wait_cycle_s(window_bytes, rate_bytes_per_s, feedback_s)
    )


# --- slow start (§12.3.2) ---------------------------------------------------------


def slow_start_bytes(
    rounds: ArrayLike, initial_window_segments: int, mss_bytes: float
) -> ArrayLike:
    """Bytes sendable in the first ``k`` rounds: ``IW·MSS·(2^k − 1)`` (§12.3.2).

    10 × 1460-byte segments: 219,000 B after 4 rounds, 452,600 B after 5.
    """
    nonneg("rounds", rounds)
    first = _initial_window_bytes(initial_window_segments, mss_bytes)
    return first * (np.exp2(rounds) - 1)


def slow_start_rounds(size_bytes: float, initial_window_segments: int, mss_bytes: float) -> int:
    """Smallest ``k`` with ``IW·MSS·(2^k − 1) ≥ S``: rounds a new connection needs (§12.3.2).

    About 355 kB from 10 × 1460 bytes needs 5 rounds.
    """
    size = _scalar("size", size_bytes)
    nonneg("size", size)
    first = _initial_window_bytes(initial_window_segments, mss_bytes)
    rounds, cumulative = 0, 0.0
    while cumulative < size:
        cumulative += first * 2**rounds
        rounds += 1
    return rounds


def slow_start_send_s(
    size_bytes: float,
    rate_bytes_per_s: float,
    rtt_s: float,
    initial_window_segments: int,
    mss_bytes: float,
    start_window_bytes: float | None = None,
    first_flight_bytes: float | None = None,
) -> tuple[float, float]:
    """Time from the first byte sent until the last leaves, and the window afterwards.

    The window starts at ``IW·MSS`` (or ``start_window_bytes`` when an earlier
    transfer left it open) and doubles each round trip. A round that does not
    finish the transfer while its window ``w`` is below the BDP ``B·R`` costs one
    ``R`` (send ``w``, wait for its ACKs); once ``w`` covers the BDP or the
    remaining bytes, the rest goes at the link rate::

        T = k·R + (S − Σ_{j<k} w_j)/B,   w_j = w_0·2^j,
        k = #{j : w_j < B·R and Σ_{i≤j} w_i < S}

    ``first_flight_bytes`` caps what the first round may send: on a new connection
    the peer's receive window arrives in the SYN-ACK, whose window field is never
    scaled (RFC 7323 §2.2), so the first flight is at most :data:`SYN_WINDOW_BYTES`
    whatever the initial window. The window grows by what was acknowledged, so the cap
    slows only the first round; from the second the cap is gone. (Linux grows a window
    that the cap held below half its size not at all that round — ``tcp_is_cwnd_limited``
    — so it sends up to one cap less in round two; kept out for a model monotone in IW.)

    The window afterwards grows by the bytes acknowledged, ``w_0 + S``, capped at
    the BDP (a bigger window sends no faster here).

    Assumptions: no loss, ideal ACK clocking (a round's ACKs return one ``R`` after
    it started), no delayed ACK, receive window never the limit after the first
    round. §12.3.2/§12.3.5: 354,640 B at 333 Mbit/s, 200 ms, 10 × 1448 B → 4
    stalled rounds (0.8 s) plus 137,440 B at line rate.
    """
    size = nonneg("size", _scalar("size", size_bytes))
    rate = positive("rate", _scalar("rate", rate_bytes_per_s))
    rtt = nonneg("rtt", _scalar("rtt", rtt_s))
    window = _start_window_bytes(initial_window_segments, mss_bytes, start_window_bytes)
    cap = math.inf
    if first_flight_bytes is not None:
        cap = positive("first flight", _scalar("first flight", first_flight_bytes))
    bdp = rate * rtt if rtt > 0 else 0.0
    sent, elapsed, w = 0.0, 0.0, window
    flight = min(w, cap)
    while flight < bdp and size - sent > flight:
        sent, elapsed = sent + flight, elapsed + rtt
        w += flight  # slow start: the window grows by what was acknowledged
        flight = w  # the cap binds the first round only
    elapsed += (size - sent) / rate
    return elapsed, max(window, min(window + size, bdp))


def window_wait_s(
    size_bytes: float,
    rate_bytes_per_s: float,
    rtt_s: float,
    initial_window_segments: int,
    mss_bytes: float,
    start_window_bytes: float | None = None,
    first_flight_bytes: float | None = None,
) -> float:
    """Stall the window adds beyond serialisation: ``T_send − S/B`` ≥ 0 (§12.3.2).

    Zero when the starting window already covers the transfer or the BDP; ≈ 0.795 s
    for the 354,640-byte §12.3.5 request on a new connection. See
    :func:`slow_start_send_s` for the model, its first-flight cap and its assumptions.
    """
    send, _ = slow_start_send_s(
        size_bytes,
        rate_bytes_per_s,
        rtt_s,
        initial_window_segments,
        mss_bytes,
        start_window_bytes,
        first_flight_bytes,
    )
    return max(0.0, send - float(size_bytes) / float(rate_bytes_per_s))


def _restart_rfc5681(window: float, idle_s: float, rto_s: float, restart_window: float) -> float:
    return restart_window


def _restart_linux(window: float, idle_s: float, rto_s: float, restart_window: float) -> float:
    halvings = min(math.ceil(idle_s / rto_s) - 1, 1100)  # beyond ~1100 halvings any window is 0
    return max(window * 2.0**-halvings, restart_window)


# rule -> restart function (window, idle, rto, restart window RW = min(IW, cwnd))
IDLE_RESTART_RULES = {
    "rfc5681": _restart_rfc5681,  # RFC 5681 §4.1: cwnd = RW after an idle period > RTO
    "linux": _restart_linux,  # tcp_cwnd_restart: halve per RTO idle, floor RW (RFC 2861)
}


def window_after_idle(
    window_bytes: float,
    idle_s: float,
    rto_s: float,
    initial_window_bytes: float,
    restart: bool,
    *,
    rule: str = "rfc5681",
) -> float:
    """The window the next transfer starts with after ``idle_s`` without sending (§12.3.2).

    With ``restart`` (Linux ``net.ipv4.tcp_slow_start_after_idle = 1``, the default)
    and an idle period longer than the RTO, the window falls back to the restart
    window ``RW = min(IW, cwnd)`` (RFC 5681 §4.1), or with ``rule="linux"`` halves
    once per RTO beyond the first, never below ``RW`` (``tcp_cwnd_restart``; Linux
    skips it for BBR). Otherwise the window is kept.
    """
    for name, value in (("window", window_bytes), ("initial window", initial_window_bytes)):
        positive(name, _scalar(name, value))
    nonneg("idle time", _scalar("idle time", idle_s))
    positive("rto", _scalar("rto", rto_s))
    if rule not in IDLE_RESTART_RULES:
        raise ModelError(
            f"unknown idle restart rule {rule!r}; known: {', '.join(IDLE_RESTART_RULES)}"
        )
    if not restart or idle_s <= rto_s:
        return float(window_bytes)
    restart_window = min(float(initial_window_bytes), float(window_bytes))
    return IDLE_RESTART_RULES[rule](
        float(window_bytes), float(idle_s), float(rto_s), restart_window
    )


# --- per-packet overhead (§12.3.2, note 17) -----------------------------------------


def packets(size_bytes: ArrayLike, payload_bytes: ArrayLike) -> ArrayLike:
    """Packets needed: ``⌈S / P⌉`` with at most ``P`` payload bytes each (§12.3.2).

    30 MB in 1,168-byte payloads → 25,685 packets; 5 MB → 4,281.
    """
    nonneg("size", size_bytes)
    positive("payload per packet", payload_bytes)
    return _ceil_div(size_bytes, payload_bytes)


def wire_bytes(
    size_bytes: ArrayLike, payload_bytes: ArrayLike, header_bytes: ArrayLike
) -> ArrayLike:
    """Bytes on the wire for the data: ``S + ⌈S/P⌉·H`` (headers, no ACKs) (§12.3.2)."""
    nonneg("header", header_bytes)
    return np.add(size_bytes, np.multiply(packets(size_bytes, payload_bytes), header_bytes))


def ack_count(data_packets: ArrayLike, every: int = 1) -> ArrayLike:
    """ACKs for ``n`` data packets when one ACK covers ``every`` packets: ``⌈n/every⌉``."""
    nonneg("packet count", data_packets)
    _count("packets per ACK", every, minimum=1)
    return _ceil_div(data_packets, every)


def ack_bytes(data_packets: ArrayLike, ack_size_bytes: ArrayLike, every: int = 1) -> ArrayLike:
    """Bytes of ACKs sent back: ``⌈n/every⌉·A`` (§12.3.2: 29,966 × 92 B)."""
    nonneg("ACK size", ack_size_bytes)
    return np.multiply(ack_count(data_packets, every), ack_size_bytes)


# --- helpers ------------------------------------------------------------------------


def _count(name: str, value: int, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ModelError(f"{name} must be an integer ≥ {minimum}, got {value!r}")
    return int(value)


def _scalar(name: str, value: ArrayLike) -> float:
    if np.ndim(value) != 0:
        raise ModelError(f"{name} must be a single number here, got an array")
    return float(value)


def _initial_window_bytes(segments: int, mss_bytes: float) -> float:
    _count("initial window (segments)", segments, minimum=1)
    positive("MSS", _scalar("MSS", mss_bytes))
    if not math.isfinite(mss_bytes):
        raise ModelError(f"MSS must be finite, got {mss_bytes!r}")
    return segments * float(mss_bytes)


def _start_window_bytes(segments: int, mss_bytes: float, start_window_bytes: float | None) -> float:
    initial = _initial_window_bytes(segments, mss_bytes)
    if start_window_bytes is None:
        return initial
    return float(positive("start window", _scalar("start window", start_window_bytes)))


def _ceil_div(numerator: ArrayLike, denominator: ArrayLike) -> ArrayLike:
    """``⌈a/b⌉`` as an int (scalars) or int64 array, immune to ``x.0000001`` float noise."""
    quotient = np.divide(numerator, denominator)
    result = np.ceil(quotient - 1e-9 * np.maximum(1.0, np.abs(quotient)))
    return int(result) if np.ndim(result) == 0 else result.astype(np.int64)
