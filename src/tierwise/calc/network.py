"""calc entries for loss and recovery (§12.3.3), streams (§12.3.4), deadlines and
cancel (§12.4.2), and two paths (§12.4.3)."""

from __future__ import annotations

from tierwise.calc._registry import Param, calc
from tierwise.errors import ScenarioError
from tierwise.model import loss as m
from tierwise.model import multipath, request, stream
from tierwise.model import multiplex as sm

_MSS = Param("mss", "size", "maximum segment size (one FEC symbol)", "1448 B")
_RTT = Param("rtt", "time", "round-trip time R", "200 ms")
_LOSS = Param("loss", "float", "random loss rate p (independent per packet)", 0.14)
_SIZE = Param("size", "size", "payload (the fixed voice request)", "354640 B")
_MODEL = Param("model", "time", "model time at the far end", "30 ms")
_RATE = Param("rate", "rate", "sending rate (the path's capacity knee)", "333 Mbit/s")
_QUANTILE = Param("quantile", "float", "quantile of the completion time", 0.99)


@calc(
    "mathis",
    "Mathis bound (MSS/R)·C/√p of a loss-driven TCP, and the time to send at it",
    "§12.3.3, exercise 12-10(a)",
    _MSS,
    _RTT,
    _LOSS,
    Param("c", "float", "Mathis constant C (1: eq. 4; 1.22 ≈ √(3/2): periodic; 1.31)", m.C_SIMPLE),
    _SIZE,
)
def mathis(mss, rtt, loss, c, size):
    """B ≤ (MSS/R)·C/√p; sending S at that rate takes S/B.

    The bound assumes every loss signals congestion; on a path with random loss
    it underestimates the usable rate by orders of magnitude.
    """
    rate = m.mathis_rate_bytes_per_s(mss, rtt, loss, c)
    return {
        "rate_bytes_per_s": rate,
        "send_s": request.transfer_s(size, rate),
        "simple_rate_bytes_per_s": m.mathis_rate_bytes_per_s(mss, rtt, loss, m.C_SIMPLE),
        "periodic_rate_bytes_per_s": m.mathis_rate_bytes_per_s(mss, rtt, loss, m.C_PERIODIC),
        "random_rate_bytes_per_s": m.mathis_rate_bytes_per_s(mss, rtt, loss, m.C_RANDOM),
    }


@calc(
    "bbr",
    "BBR's BDP, cwnd and ideal goodput (1 − p)·B, against the Mathis bound",
    "§12.3.3",
    Param("max_bw", "rate", "BBR.max_bw, the measured bottleneck rate", "333 Mbit/s"),
    Param("min_rtt", "time", "BBR.min_rtt, the measured round-trip propagation", "200 ms"),
    _LOSS,
    _MSS,
)
def bbr(max_bw, min_rtt, loss, mss):
    """BDP = max_bw × min_rtt; cwnd = 2·BDP; goodput = (1 − p)·max_bw.

    Gains from draft-cardwell-iccrg-bbr-congestion-control-02: Startup paces at
    4 ln 2 ≈ 2.77, ProbeBW_UP at 1.25. ``goodput_over_mathis`` compares with the
    C = 1 Mathis bound at the same loss and RTT.
    """
    goodput = m.ideal_goodput_bytes_per_s(max_bw, loss)
    bound = m.mathis_rate_bytes_per_s(mss, min_rtt, loss)
    return {
        "bdp_bytes": m.bbr_bdp_bytes(max_bw, min_rtt),
        "cwnd_bytes": m.bbr_cwnd_bytes(max_bw, min_rtt),
        "goodput_bytes_per_s": goodput,
        "mathis_rate_bytes_per_s": bound,
        "goodput_over_mathis": goodput / bound,
        "cwnd_gain": m.BBR_CWND_GAIN,
        "startup_pacing_gain": m.STARTUP_PACING_GAIN,
        "probe_bw_up_gain": m.PROBE_BW_UP_GAIN,
    }


def _serial_s(rtt, model, size, rate):
    return request.serial_time_s(size, rate, rtt, model)


@calc(
    "retransmit",
    "Idealised selective retransmission, one round per RTT: mean and quantile completion",
    "§12.3.3, exercise 12-10(b)",
    _SIZE,
    _MSS,
    _LOSS,
    _RTT,
    _MODEL,
    _RATE,
    _QUANTILE,
)
def retransmit(size, mss, loss, rtt, model, rate, quantile):
    """P(K ≤ k) = (1 − p^k)^n; T = R + T_model + S/B + (K − 1)·R.

    ``n = ⌈S/MSS⌉`` packets, each lost independently with probability ``p`` in
    every round; lost packets go again one RTT later. No window shrinkage and no
    timeouts: a lower bound that favours TCP. ``time_s`` uses the mean ``E[K]``,
    ``quantile_time_s`` the smallest ``k`` with ``P(K ≤ k) ≥ quantile``.
    """
    n = m.packet_count(size, mss)
    serial = _serial_s(rtt, model, size, rate)
    mean_rounds = m.expected_rounds(n, loss)
    k = m.rounds_quantile(n, loss, quantile)
    time = m.retransmit_time_s(serial, rtt, mean_rounds)
    return {
        "packets": n,
        "expected_lost_packets": m.expected_lost_packets(n, loss),
        "serial_s": serial,
        "send_s": request.transfer_s(size, rate),
        "expected_rounds": mean_rounds,
        "time_s": time,
        "time_over_serial": time / serial if serial else float("inf"),
        "quantile_rounds": k,
        "quantile_time_s": m.retransmit_time_s(serial, rtt, k),
    }


@calc(
    "fec",
    "FEC: fewest repair symbols for a block success target (exact binomial), and the time",
    "§12.3.3, exercise 12-10(c)",
    _SIZE,
    _MSS,
    _LOSS,
    Param("target", "float", "block success target", 0.999),
    _RTT,
    _MODEL,
    _RATE,
    _QUANTILE,
)
def fec(size, mss, loss, target, rtt, model, rate, quantile):
    """r = min{r : P(Binomial(k + r, p) ≤ r) ≥ target}; T = R + T_model + (k + r)·MSS/B.

    ``k = ⌈S/MSS⌉`` data symbols of one MSS each; any MDS code recovers the block
    from any ``k`` of ``k + r``. ``time_s`` is the completion when the block
    decodes; a block that fails asks for its deficit again one RTT later
    (``expected_time_s``, ``quantile_time_s``). ``retransmit_quantile_time_s`` is
    plain selective retransmission at the same quantile, for comparison.
    """
    k = m.packet_count(size, mss)
    plan = m.fec_plan(k, loss, target, mss)
    time = _serial_s(rtt, model, plan.send_bytes, rate)
    plain = _serial_s(rtt, model, size, rate)
    return {
        "data_symbols": k,
        "repair_symbols": plan.repair_symbols,
        "symbols": k + plan.repair_symbols,
        "overhead": plan.overhead,
        "block_success": plan.success,
        "send_bytes": plan.send_bytes,
        "send_s": request.transfer_s(plan.send_bytes, rate),
        "time_s": time,
        "expected_time_s": m.retransmit_time_s(
            time, rtt, m.fec_expected_rounds(k, plan.repair_symbols, loss)
        ),
        "quantile_time_s": m.retransmit_time_s(
            time, rtt, m.fec_rounds_quantile(k, plan.repair_symbols, loss, quantile)
        ),
        "retransmit_quantile_time_s": m.retransmit_time_s(
            plain, rtt, m.rounds_quantile(k, loss, quantile)
        ),
    }


def _same_length(**lists):
    lengths = {name: len(v) for name, v in lists.items()}
    if len(set(lengths.values())) != 1:
        shown = ", ".join(f"--{n} {c}" for n, c in lengths.items())
        raise ScenarioError(f"give one value per flow or segment: {shown}", source="calc")


@calc(
    "link-schedule",
    "One link shared by flows: FIFO vs (preemptive) priority completion times",
    "§12.3.4, exercise 12-4(c)",
    Param("names", "list:str", "flow names", "image, audio"),
    Param("arrive", "list:time", "when each flow is ready to send", "0 s, 2 s"),
    Param("send", "list:time", "sending time each flow needs on the link", "5 s, 1 s"),
    Param("priority", "list:int", "priority of each flow, smaller first", "1, 0"),
)
def link_schedule(names, arrive, send, priority):
    """FIFO: f_i = max(a_i, f_{i−1}) + s_i; priority: the most urgent waiting flow sends.

    Priority is preemptive and fluid; ties go by arrival. ``priority_change_s``
    is how much later (+) or earlier (−) each flow finishes than under FIFO.
    """
    _same_length(names=names, arrive=arrive, send=send, priority=priority)
    flows = list(zip(names, arrive, send, priority, strict=True))
    fifo = sm.link_schedule(flows, "fifo")
    prio = sm.link_schedule(flows, "priority")
    return {
        "fifo_completion_s": fifo,
        "priority_completion_s": prio,
        "priority_change_s": {n: prio[n] - fifo[n] for n in fifo},
    }


@calc(
    "delivery",
    "Connection-ordered vs per-stream delivery of the same arrivals (head-of-line blocking)",
    "§12.3.4, exercise 12-4(c)",
    Param(
        "streams",
        "list:str",
        "stream of each segment, in connection byte order",
        "image, image, audio, image, image, image",
    ),
    Param(
        "arrive",
        "list:time",
        "arrival of each segment (a recovered loss arrives late)",
        "1 s, 7 s, 3 s, 4 s, 5 s, 6 s",
    ),
)
def delivery(streams, arrive):
    """connection: d_i = max_{j≤i} a_j; per stream: d_i = max over earlier j of the same stream.

    A stream is delivered with its last segment. The defaults are the §12.3.4
    case: the second image segment is lost and recovered at 7 s, the audio
    segment behind it arrives at 3 s.
    """
    _same_length(streams=streams, arrive=arrive)
    segments = list(zip(streams, arrive, strict=True))
    ordered = sm.delivery_times(segments, "connection")
    per_stream = sm.delivery_times(segments, "stream")
    return {
        "complete_s": ordered.complete_s,
        "connection_delivery_s": ordered.stream_s,
        "stream_delivery_s": per_stream.stream_s,
        "connection_wait_s": ordered.wait_s,
        "saved_s": {s: ordered.stream_s[s] - per_stream.stream_s[s] for s in ordered.stream_s},
    }


@calc(
    "on-time",
    "Audio playable on time behind a large image: FIFO vs media first",
    "§12.4.2",
    Param("chunks", "int", "audio chunks", 8),
    Param("period", "time", "audio per chunk τ (chunk i is captured by (i+1)·τ)", "20 ms"),
    Param("compute", "time", "model time per chunk before it can be sent", "12 ms"),
    Param("first_play", "time", "scheduled start of playback (fixed clock)", "0.4 s"),
    Param("chunk", "size", "bytes per chunk (20 ms of 16 kHz mono 16-bit)", "640 B"),
    Param("image", "size", "bulk transfer ready at 0 s on the same link", "30 MB"),
    Param("link", "rate", "the shared link", "20 Mbit/s"),
    Param("propagation", "time", "one-way propagation", "50 ms"),
)
def on_time(chunks, period, compute, first_play, chunk, image, link, propagation):
    """on-time audio = Σ_i τ·[a_i ≤ first_play + i·τ], a_i from the shared link's schedule.

    Chunk ``i`` is ready at ``c_i = max((i+1)·τ, c_{i−1}) + T_model``, then shares
    the link with the image (FIFO: behind it; media first: preempting it) and
    arrives one propagation later. A fixed-clock player drops late chunks.
    """
    ready = stream.pipeline(stream.capture_ready_s(chunks, period), compute, 0.0, 0.0)
    play = sm.scheduled_play_s(chunks, first_play, period)
    chunk_s, image_s = request.transfer_s(chunk, link), request.transfer_s(image, link)
    out = {"scheduled_s": chunks * period, "play_s": play.tolist()}
    for policy, label in (("fifo", "fifo"), ("priority", "media_first")):
        arrive = sm.media_arrivals_s(ready.compute_done_s, chunk_s, image_s, policy, propagation)
        out[f"{label}_on_time_s"] = sm.on_time_content_s(arrive, play, period)
        out[f"{label}_arrive_s"] = arrive.tolist()
    return out


@calc(
    "cancel",
    "Cancel's two paths: when the user stops hearing, when the remote stops generating",
    "§12.4.2",
    Param("at", "time", "when the user cancels", "0 s"),
    Param("buffered", "int", "chunks waiting in the local play buffer", 3),
    Param("period", "time", "audio per chunk τ", "20 ms"),
    Param("control_delay", "time", "time for the cancel message to reach the server", "100 ms"),
)
def cancel_calc(at, buffered, period, control_delay):
    """silent = t (flush) or t + n·τ (drain); remote stop = t + c; wasted chunks = c/τ."""
    flushed = sm.cancel(at, buffered, period, control_delay, flush=True)
    drained = sm.cancel(at, buffered, period, control_delay, flush=False)
    return {
        "flush_silent_s": flushed.silent_s,
        "drain_silent_s": drained.silent_s,
        "remote_stop_s": flushed.remote_stop_s,
        "wasted_chunks": flushed.wasted_chunks,
        "wasted_audio_s": flushed.wasted_chunks * period,
    }


@calc(
    "multipath-split",
    "Split one payload over two paths in proportion to their rates; a shared exit",
    "§12.4.3, exercise 12-6(a)(b)",
    Param("size", "size", "payload S", "30 MB"),
    Param("fast", "rate", "path 1 rate B1", "20 Mbit/s"),
    Param("slow", "rate", "path 2 rate B2", "10 Mbit/s"),
    Param("exit", "rate", "shared exit both paths pass through", "24 Mbit/s"),
)
def multipath_split(size, fast, slow, exit):
    """x = B1/(B1 + B2); T = max(xS/B1, (1 − x)S/B2); with a shared exit T ≥ max(T, S/B_exit)."""
    x = float(multipath.split_fraction(fast, slow))
    split = multipath.split_time_s(size, fast, slow)
    shared = multipath.shared_exit_time_s(size, fast, slow, exit)
    alone = request.transfer_s(size, max(fast, slow))
    return {
        "fraction": x,
        "fast_bytes": x * size,
        "slow_bytes": (1 - x) * size,
        "time_s": split,
        "fast_alone_s": alone,
        "saved_s": alone - split,
        "exit_s": request.transfer_s(size, exit),
        "shared_exit_time_s": shared,
        "bottleneck": "exit" if request.transfer_s(size, exit) > split else "access paths",
    }


@calc(
    "replication",
    "Replicate over two paths: failure q + (1 − q)·p1·p2 and the duplicate bytes",
    "§12.4.3, exercise 12-6(c)(d)",
    Param("q", "float", "failure probability of the shared endpoint", 0.02),
    Param("p1", "float", "failure probability of access path 1", 0.1),
    Param("p2", "float", "failure probability of access path 2", 0.05),
    Param("chunks", "int", "chunks replicated", 8),
    Param("chunk", "size", "bytes per chunk", "640 B"),
    Param("copies", "int", "copies of each chunk", 2),
)
def replication(q, p1, p2, chunks, chunk, copies):
    """p_fail = q + (1 − q)·p1·p2; bytes sent c·n·b, of which (c − 1)·n·b are duplicates."""
    fail = multipath.replication_failure(q, p1, p2)
    return {
        "fail_probability": fail,
        "access_fail_probability": multipath.replication_failure(0.0, p1, p2),
        "reliable_access_fail_probability": multipath.replication_failure(q, 0.0, 0.0),
        "original_bytes": chunks * chunk,
        "sent_bytes": multipath.replicated_bytes(chunks, chunk, copies),
        "duplicate_bytes": multipath.duplicate_bytes(chunks, chunk, copies),
    }


__all__ = [
    "bbr",
    "cancel_calc",
    "delivery",
    "fec",
    "link_schedule",
    "mathis",
    "multipath_split",
    "on_time",
    "replication",
    "retransmit",
]
