"""Congestion controllers: an ABC with keyword-only hooks and a registry by name.

Windows are in bytes. A controller sees every acknowledgement (``on_ack``), the
start of each loss episode (``on_congestion``, at most once per recovery) and
retransmission timeouts (``on_rto``); it exposes ``cwnd`` and, for paced
controllers, ``pacing_rate`` (bytes/s, ``None`` = send as the window allows).

Model-based controllers also get ``on_rate_sample`` first, with the ACK's
:class:`RateSample` (delivery rate, round-trip bookkeeping, losses).

Registered: ``slowstart`` (the reference's §12.3.2 model: +1 segment per
acknowledged segment, no ssthresh), ``newreno`` (RFC 5681/6582), ``cubic``
(RFC 9438), ``cubic-hystart`` (with HyStart, as Linux and ns-3 run it), ``bbr``
(BBR-style, §12.3.3), ``bbr-linux`` (Linux's BBRv1 gains) and ``bbr-v1`` (draft-00:
those gains, no pacing margin). ``make_controller`` raises
:class:`LocalProtocolError` for an unknown name, listing the known ones.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from enum import Enum
from typing import ClassVar, NamedTuple

from mypy_extensions import mypyc_attr

from tierwise.errors import LocalProtocolError

__all__ = [
    "CONTROLLERS",
    "Bbr",
    "BbrLinux",
    "BbrState",
    "BbrV1",
    "CongestionController",
    "Cubic",
    "CubicHyStart",
    "HyStart",
    "NewReno",
    "RateSample",
    "SlowStartOnly",
    "make_controller",
    "register",
]

CONTROLLERS: dict[str, type[CongestionController]] = {}


class RateSample(NamedTuple):
    """What one ACK taught the sender (Linux ``struct rate_sample``); a named tuple,
    built per ACK for the controllers that read it.

    The delivery rate follows draft-cheng-iccrg-delivery-rate-estimation:
    ``delivered / interval`` over the flight of the most recently sent segment
    this ACK delivered, ``interval = max(send_elapsed, ack_elapsed)``; it is
    ``None`` when the interval is shorter than the minimum RTT (not trusted).
    Bytes are payload bytes.
    """

    delivery_rate: float | None  # bytes/s
    delivered: int  # bytes delivered over the interval
    interval_s: float
    prior_delivered: int  # the connection's delivered count when that segment was sent
    total_delivered: int  # the connection's delivered count now
    app_limited: bool  # the segment left while the application had nothing to send
    acked: int  # bytes newly acknowledged (cumulatively or SACKed) by this ACK
    lost: int  # bytes newly marked lost by this ACK
    prior_in_flight: int  # bytes in flight before this ACK
    rtt: float | None  # seconds, from the echoed send time


def register(cls: type[CongestionController]) -> type[CongestionController]:
    CONTROLLERS[cls.name] = cls
    return cls


def make_controller(name: str, *, mss: int, initial_window: int) -> CongestionController:
    """A new controller by registry name."""
    try:
        cls = CONTROLLERS[name]
    except KeyError:
        raise LocalProtocolError(
            f"unknown congestion controller {name!r}; known: {', '.join(sorted(CONTROLLERS))}"
        ) from None
    return cls(mss=mss, initial_window=initial_window)


@mypyc_attr(allow_interpreted_subclasses=True)
class CongestionController(ABC):
    """Base: slow start from ``initial_window`` segments, RTO collapses to one segment."""

    name: ClassVar[str]
    pacing_rate: float | None = None
    # Loss-based windows hold still until the episode ends (RFC 6582); a model-based
    # controller (BBR) keeps learning from every acknowledgement.
    grows_in_recovery: ClassVar[bool] = False

    def __init__(self, *, mss: int, initial_window: int) -> None:
        if initial_window < 1:
            raise LocalProtocolError(f"initial window must be ≥ 1 segment, got {initial_window}")
        self.mss = mss
        self.cwnd = float(initial_window * mss)
        self.ssthresh = math.inf

    @abstractmethod
    def on_ack(
        self,
        *,
        acked: int,
        rtt: float | None,
        now: float,
        in_flight: int,
        delivery_rate: float | None,
    ) -> None:
        """``acked`` newly acknowledged bytes (cumulative or SACKed).

        ``delivery_rate`` is the ACK's rate sample, computed only for a controller that
        overrides :meth:`on_rate_sample` (None otherwise, and when untrusted).
        """

    def on_congestion(self, *, now: float, in_flight: int) -> None:
        """A new loss episode: multiplicative decrease (RFC 5681 §3.1, β = 1/2)."""
        self.ssthresh = max(in_flight / 2.0, 2.0 * self.mss)
        self.cwnd = self.ssthresh

    def on_rto(self, *, now: float, in_flight: int) -> None:
        """Retransmission timeout: one segment, slow start to half the flight."""
        self.ssthresh = max(in_flight / 2.0, 2.0 * self.mss)
        self.cwnd = float(self.mss)

    def on_recovered(self, *, now: float) -> None:  # noqa: B027 - optional hook
        """The loss episode ended (everything up to the recovery point acknowledged)."""

    def on_rate_sample(  # noqa: B027 - optional hook
        self, *, sample: RateSample, now: float, in_flight: int
    ) -> None:
        """An ACK delivered data: its rate sample, before ``on_ack`` (model-based control)."""


class SlowStartOnly(CongestionController):
    """§12.3.2's model: the window grows one segment per acknowledged segment, forever."""

    name = "slowstart"
    grows_in_recovery = True

    def on_ack(
        self,
        *,
        acked: int,
        rtt: float | None,
        now: float,
        in_flight: int,
        delivery_rate: float | None,
    ) -> None:
        self.cwnd += acked

    def on_congestion(self, *, now: float, in_flight: int) -> None:
        """No reaction: this model has no ssthresh and assumes no loss."""


class NewReno(CongestionController):
    """RFC 5681 slow start and congestion avoidance; RFC 6582 recovery via the sender."""

    name = "newreno"

    def on_ack(
        self,
        *,
        acked: int,
        rtt: float | None,
        now: float,
        in_flight: int,
        delivery_rate: float | None,
    ) -> None:
        if self.cwnd < self.ssthresh:
            self.cwnd += acked
        else:
            self.cwnd += self.mss * acked / self.cwnd


# HyStart (Ha & Rhee, "Taming the elephants", 2011) as ns-3 3.37's TcpCubic runs it by
# default (tcp-cubic.cc:53-88, 166-404): its port of Linux's tcp_cubic.c, thresholds as
# ns-3 has them.
HYSTART_LOW_WINDOW_SEGMENTS = 16  # ns-3 HyStartLowWindow, Linux hystart_low_window
HYSTART_ACK_DELTA_S = 0.002  # ns-3 HyStartAckDelta, Linux hystart_ack_delta(_us): 2 ms
HYSTART_MIN_SAMPLES = 8  # ns-3 HyStartMinSamples, Linux HYSTART_MIN_SAMPLES
HYSTART_DELAY_MIN_S = 0.004  # ns-3 HyStartDelayMin, Linux HYSTART_DELAY_MIN: 4 ms
HYSTART_DELAY_MAX_S = 1.0  # ns-3 HyStartDelayMax (Linux clamps at 16 ms)
# Congestion avoidance before any loss has set W_max grows at least one segment per this
# many acknowledged: Linux tcp_cubic.c (with HyStart, 2.6.29) and ns-3 CntClamp.
CUBIC_RAMP_ACKS_PER_SEGMENT = 20


class HyStart:
    """Hybrid slow start: leave slow start (``ssthresh = cwnd``) before the first loss.

    Per round (it ends when a byte sent after it began is acknowledged): the *ACK
    train* fires once ACKs no more than 2 ms apart have been arriving for longer than
    the minimum delay since the round began (the window exceeds the path's BDP); the
    *delay* test fires once the minimum RTT of the round's first 8 samples exceeds
    ``delay_min + clamp(delay_min, 4 ms, 1 s)`` (ns-3's thresholds; Linux ≥ 5.7 fires
    the train at ``delay_min / 2`` — ``delay_min`` when fq paces — and the delay test at
    ``+ clamp(delay_min / 8, 4 ms, 16 ms)``). Runs only while ``cwnd ≥ 16`` segments
    and not above ssthresh; an RTO forgets the minimum delay and arms it again (ns-3
    ``CubicReset``/``HystartReset``). The RTT is each ACK's sample, as in Linux (ns-3
    hands HyStart its smoothed RTT; docs/validation.md, "Competing flows against ns-3").
    Rounds are counted in bytes: the round begun at an ACK ends when more than the bytes
    then delivered and in flight have been delivered (ns-3: ``SND.UNA`` passes the
    ``HighTxMark`` of the round's start; the two agree while nothing is lost).
    """

    __slots__ = (
        "_curr_rtt",
        "_delivered",
        "_end",
        "_last_ack",
        "_round_start",
        "_samples",
        "delay_min",
        "exits",
        "found",
        "low_window",
    )

    def __init__(self, mss: int) -> None:
        self.low_window = HYSTART_LOW_WINDOW_SEGMENTS * mss
        self.delay_min = math.inf  # seconds, the least RTT seen since start or the last RTO
        self.found = False
        self.exits = 0  # slow starts ended by HyStart (for traces and tests)
        self._delivered = 0  # bytes acknowledged (cumulatively or SACKed) so far
        self._end = 0  # the round ends once _delivered exceeds this
        self._round_start = -math.inf
        self._last_ack = -math.inf
        self._curr_rtt = math.inf
        self._samples = 0

    def _reset(self, now: float, in_flight: int) -> None:
        """A new round (ns-3 HystartReset)."""
        self._round_start = self._last_ack = now
        self._end = self._delivered + in_flight
        self._curr_rtt = math.inf
        self._samples = 0

    def on_ack(
        self,
        acked: int,
        rtt: float | None,
        now: float,
        in_flight: int,
        cwnd: float,
        ssthresh: float,
    ) -> bool:
        """One ACK, before the window grows; True when slow start must end now."""
        self._delivered += acked
        exit_now = False
        if rtt is not None:
            # ns-3 TcpCubic::PktsAcked: the minimum delay, then the two tests.
            if rtt < self.delay_min:
                self.delay_min = rtt
            if cwnd <= ssthresh and cwnd >= self.low_window and not self.found:
                exit_now = self._update(now, rtt)
        if not exit_now and cwnd < ssthresh and self._delivered > self._end:
            self._reset(now, in_flight)  # ns-3 IncreaseWindow, after PktsAcked
        return exit_now

    def _update(self, now: float, delay: float) -> bool:
        """ns-3 TcpCubic::HystartUpdate: True when either test fires."""
        if now - self._last_ack <= HYSTART_ACK_DELTA_S:
            self._last_ack = now
            if now - self._round_start > self.delay_min:
                self.found = True
        if self._samples < HYSTART_MIN_SAMPLES:
            if delay < self._curr_rtt:
                self._curr_rtt = delay
            self._samples += 1
        else:
            thresh = min(max(self.delay_min, HYSTART_DELAY_MIN_S), HYSTART_DELAY_MAX_S)
            if self._curr_rtt > self.delay_min + thresh:
                self.found = True
        if self.found:
            self.exits += 1
        return self.found

    def on_rto(self, now: float, in_flight: int) -> None:
        """ns-3 CongestionStateSet(CA_LOSS): forget the minimum delay, arm HyStart again."""
        self.delay_min = math.inf
        self.found = False
        self._reset(now, in_flight)


class Cubic(CongestionController):
    """RFC 9438 CUBIC: ``W(t) = C(t − K)³ + W_max`` in segments, C = 0.4, β = 0.7.

    With the Reno-friendly estimate ``W_est`` (§4.3) and fast convergence (§4.7);
    slow start is standard, to the first loss. :class:`CubicHyStart`
    (``cubic-hystart``) adds :class:`HyStart` as Linux and ns-3 run it.
    """

    name = "cubic"
    C: ClassVar[float] = 0.4  # RFC 9438 §5
    BETA: ClassVar[float] = 0.7  # RFC 9438 §4.6
    with_hystart: ClassVar[bool] = False

    def __init__(self, *, mss: int, initial_window: int) -> None:
        super().__init__(mss=mss, initial_window=initial_window)
        self.w_max = 0.0
        self.epoch: float | None = None
        self.k = 0.0
        self.w_est = 0.0
        self._alpha = 3 * (1 - self.BETA) / (1 + self.BETA)  # RFC 9438 §4.3 α_cubic
        self._ramp = False
        self.hystart: HyStart | None = HyStart(mss) if self.with_hystart else None

    def on_ack(
        self,
        *,
        acked: int,
        rtt: float | None,
        now: float,
        in_flight: int,
        delivery_rate: float | None,
    ) -> None:
        hystart = self.hystart
        if hystart is not None and hystart.on_ack(
            acked, rtt, now, in_flight, self.cwnd, self.ssthresh
        ):
            self.ssthresh = self.cwnd
        if self.cwnd < self.ssthresh:
            self.cwnd += acked
            return
        seg = self.mss
        if self.epoch is None:
            self.epoch = now
            w = self.cwnd / seg
            # No loss has set W_max (HyStart ended slow start, or an RTO forgot it).
            self._ramp = self.w_max == 0.0 and self.hystart is not None
            self.w_max = max(self.w_max, w)
            self.k = ((self.w_max - w) / self.C) ** (1 / 3) if self.w_max > w else 0.0
            self.w_est = w
        t = now - self.epoch + (rtt or 0.0)
        target = self.C * (t - self.k) ** 3 + self.w_max
        self.w_est += self._alpha * (acked / seg) / (self.cwnd / seg)
        w = self.cwnd / seg
        if self.w_est > target:
            target = self.w_est
        step = 0.0
        if target > w:
            gap, half = target - w, 0.5 * w
            step = seg * (half if half < gap else gap) / w * (acked / seg)  # min(gap, half)
        if self._ramp:
            # Linux bictcp_update / ns-3 TcpCubic::Update: while W_max is unknown, at
            # least one segment per 20 acknowledged ("cnt" clamped at 20, +5 % per RTT).
            step = max(step, acked / CUBIC_RAMP_ACKS_PER_SEGMENT)
        self.cwnd += step

    def on_congestion(self, *, now: float, in_flight: int) -> None:
        w = self.cwnd / self.mss
        self.w_max = w * (1 + self.BETA) / 2 if w < self.w_max else w  # fast convergence
        self.cwnd = max(self.cwnd * self.BETA, 2.0 * self.mss)
        self.ssthresh = self.cwnd
        self.epoch = None

    def on_rto(self, *, now: float, in_flight: int) -> None:
        super().on_rto(now=now, in_flight=in_flight)
        self.w_max = 0.0
        self.epoch = None
        if self.hystart is not None:
            self.hystart.on_rto(now, in_flight)


class CubicHyStart(Cubic):
    """:class:`Cubic` as Linux's ``tcp_cubic`` and ns-3 3.37's ``TcpCubic`` run it by
    default: :class:`HyStart` ends slow start (ns-3's thresholds), and congestion
    avoidance grows at least 5 % per RTT (one segment per 20 acknowledged) until a loss
    sets ``W_max`` — from HyStart's exit, the cubic curve at ``K = 0`` would otherwise
    barely move.

    Opt-in: on the ns-3 comparison matrix (docs/benchmarks.md, "Simulator vs ns-3 3.37")
    it moves the one-BDP-queue completion time by 0.7 % (the floor refills the queue to
    a loss that plain ``cubic`` never reaches), beyond the 0.1 % the pinned cells allow;
    RFC 9438 §4.10 leaves HyStart optional.
    """

    name = "cubic-hystart"
    with_hystart: ClassVar[bool] = True


# BBR, after draft-cardwell-iccrg-bbr-congestion-control-02 (the reference's note 5, §12.3.3)
# with BBRv1's ProbeBW gain cycle and filter lengths (draft-...-00, Linux tcp_bbr.c).
BBR_STARTUP_PACING_GAIN = 4 * math.log(2)  # ≈ 2.77, draft-02 §2.6 BBRStartupPacingGain
BBR_STARTUP_CWND_GAIN = 2.0  # draft-02 §2.6 BBRStartupCwndGain
BBR_CWND_GAIN = 2.0  # cwnd = 2·BDP: headroom for ACK aggregation and retransmission (§12.3.3)
BBR_DRAIN_PACING_GAIN = 1 / BBR_STARTUP_CWND_GAIN  # draft-02 §4.3.2: 1/BBRStartupCwndGain
BBR_PROBE_BW_GAINS = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # BBRv1 gain cycle
BBR_PROBE_BW_START_PHASE = 2  # first cruise phase (Linux draws one; no RNG in sans-IO)
BBR_FULL_BW_THRESH = 1.25  # draft-02 BBRCheckStartupFullBandwidth: Startup while BtlBw grows 25 %
BBR_FULL_BW_ROUNDS = 3  # ... within 3 rounds
BBR_BTLBW_FILTER_ROUNDS = 10  # BBRv1 BtlBwFilterLen (draft-02 keeps 2 ProbeBW cycles)
BBR_MIN_RTT_FILTER_S = 10.0  # draft-02 MinRTTFilterLen (BBRv1 RTpropFilterLen)
BBR_PROBE_RTT_DURATION_S = 0.2  # draft-02 ProbeRTTDuration
BBR_MIN_PIPE_CWND_SEGMENTS = 4  # draft-02 BBRMinPipeCwnd
BBR_PACING_MARGIN = 0.01  # pace 1 % under BtlBw: Linux bbr_pacing_margin_percent
BBR_DEFAULT_RTT_S = 0.001  # draft-02 BBRInitPacingRate: 1 ms before any RTT sample
BBR_HIGH_GAIN = 2 / math.log(2)  # ≈ 2.885: Linux tcp_bbr.c bbr_high_gain (Startup pacing and cwnd)
# draft-cardwell-iccrg-bbr-congestion-control-00 §4.2.3.2 BBRInflight: gain · BDP + 3 send
# quanta. The pacer here releases one segment at a time, so its send quantum is one segment.
BBR_QUANTA = 3


class BbrState(Enum):
    STARTUP = "startup"
    DRAIN = "drain"
    PROBE_BW = "probe_bw"
    PROBE_RTT = "probe_rtt"


# (pacing_gain, cwnd_gain) on entering each state; ProbeBW's pacing gain then cycles.
_BBR_GAINS = {
    BbrState.STARTUP: (BBR_STARTUP_PACING_GAIN, BBR_STARTUP_CWND_GAIN),
    BbrState.DRAIN: (BBR_DRAIN_PACING_GAIN, BBR_CWND_GAIN),
    BbrState.PROBE_BW: (BBR_PROBE_BW_GAINS[BBR_PROBE_BW_START_PHASE], BBR_CWND_GAIN),
    BbrState.PROBE_RTT: (1.0, 1.0),
}
# Linux tcp_bbr.c (BBRv1): Startup paces and sizes cwnd at bbr_high_gain, Drain paces at
# its inverse (bbr_drain_gain) and keeps the high cwnd gain.
_BBR_LINUX_GAINS = {
    **_BBR_GAINS,
    BbrState.STARTUP: (BBR_HIGH_GAIN, BBR_HIGH_GAIN),
    BbrState.DRAIN: (1 / BBR_HIGH_GAIN, BBR_HIGH_GAIN),
}


class _WindowedMax:
    """Maximum of the samples of the last ``length`` rounds (a monotone deque)."""

    __slots__ = ("_q", "length")

    def __init__(self, length: int) -> None:
        self.length = length
        self._q: deque[tuple[int, float]] = deque()

    def update(self, round_count: int, value: float) -> None:
        """Add a sample; samples older than ``length`` rounds leave (only when one arrives)."""
        q = self._q
        while q and q[-1][1] <= value:
            q.pop()
        q.append((round_count, value))
        while q[0][0] <= round_count - self.length:
            q.popleft()

    @property
    def value(self) -> float:
        return self._q[0][1] if self._q else 0.0


class Bbr(CongestionController):
    """BBR-style: pace at ``pacing_gain · BtlBw``, keep ``cwnd = cwnd_gain · BtlBw · RTprop``.

    BtlBw is the windowed maximum of delivery-rate samples over 10 rounds, RTprop the
    minimum RTT over 10 s; a round ends when a segment sent after the round began is
    acknowledged. States: Startup (pacing gain 4 ln 2 ≈ 2.77 and cwnd gain 2, as the
    reference's §12.3.3 quotes draft-02; BBRv1 used 2/ln 2 ≈ 2.885 for both) until
    BtlBw grows less than 25 % in 3 rounds; Drain (pacing 1/2) until the flight is at
    most one BDP; ProbeBW cycling [1.25, 0.75, 1 ×6], one phase per RTprop (1.25 lasts
    until the flight reaches 1.25 BDP or a loss; 0.75 ends early once the flight is
    down to one BDP); ProbeRTT (cwnd 4 segments for 200 ms and a round) when RTprop
    is 10 s old. Loss does not lower the rate or the window (BBRv1); a retransmission
    timeout collapses the window to one segment and restores it when recovered.
    Window and phase targets are draft-00's BBRInflight: ``gain · BDP`` plus three send
    quanta (one segment each: the pacer here sends single segments). Not modelled:
    restart from idle, long-term bandwidth sampling, Linux's ACK-aggregation headroom.
    """

    name = "bbr"
    grows_in_recovery = True
    gains: ClassVar[dict[BbrState, tuple[float, float]]] = _BBR_GAINS  # (pacing, cwnd)
    pacing_margin: ClassVar[float] = BBR_PACING_MARGIN  # pace this fraction under BtlBw

    def __init__(self, *, mss: int, initial_window: int) -> None:
        super().__init__(mss=mss, initial_window=initial_window)
        self.initial_cwnd = self.cwnd
        self._btlbw = _WindowedMax(BBR_BTLBW_FILTER_ROUNDS)
        self.min_rtt = math.inf  # RTprop, seconds
        self._min_rtt_at = 0.0
        self._min_rtt_expired = False
        self.round_count = 0
        self.round_start = False
        self._next_round_delivered = 0
        self.full_bw = 0.0
        self._full_bw_count = 0
        self.full_bw_reached = False
        self.cycle_index = BBR_PROBE_BW_START_PHASE
        self._cycle_at = 0.0
        self.prior_cwnd = 0.0
        self._probe_rtt_done_at: float | None = None
        self._probe_rtt_round_done = False
        self._rto_recovery = False
        self._has_rtt = False
        self._delivered = 0
        self.state = BbrState.STARTUP
        self.pacing_gain, self.cwnd_gain = self.gains[self.state]
        self.pacing_rate = self.pacing_gain * self.cwnd / BBR_DEFAULT_RTT_S

    # ---------------------------------------------------------------- estimates

    @property
    def btlbw(self) -> float:
        """BBR.max_bw: the bottleneck bandwidth estimate, payload bytes/s (0 before a sample)."""
        return self._btlbw.value

    def bdp(self, gain: float = 1.0) -> float:
        """``gain · BtlBw · RTprop`` bytes; the initial window before there is an estimate."""
        if not self.btlbw or math.isinf(self.min_rtt):
            return gain * self.initial_cwnd
        return gain * self.btlbw * self.min_rtt

    def inflight(self, gain: float = 1.0) -> float:
        """draft-00 BBRInflight: ``gain · BDP`` plus 3 send quanta (one segment each here),
        the headroom a pacer's bursts need; the initial window before there is an estimate."""
        if not self.btlbw or math.isinf(self.min_rtt):
            return gain * self.initial_cwnd
        return gain * self.btlbw * self.min_rtt + BBR_QUANTA * self.mss

    def _save_cwnd(self) -> None:
        """Remember the window to restore after an RTO episode or ProbeRTT (Linux bbr_save_cwnd)."""
        if self._rto_recovery or self.state is BbrState.PROBE_RTT:
            self.prior_cwnd = max(self.prior_cwnd, self.cwnd)
        else:
            self.prior_cwnd = self.cwnd

    def _enter(self, state: BbrState, now: float) -> None:
        self.state = state
        self.pacing_gain, self.cwnd_gain = self.gains[state]
        if state is BbrState.PROBE_BW:
            self.cycle_index, self._cycle_at = BBR_PROBE_BW_START_PHASE, now

    # ------------------------------------------------------------------- hooks

    def on_rate_sample(self, *, sample: RateSample, now: float, in_flight: int) -> None:
        """Update the path model, then the state machine (draft-02 BBRUpdateOnACK order)."""
        self._delivered = sample.total_delivered
        self._update_round(sample)
        self._update_btlbw(sample)
        self._update_cycle_phase(sample, now, in_flight)
        self._check_full_pipe(sample)
        self._check_drain(now, in_flight)
        self._update_min_rtt(sample.rtt, now)
        self._check_probe_rtt(now, in_flight, sample)
        self._set_pacing_rate()

    def on_ack(
        self,
        *,
        acked: int,
        rtt: float | None,
        now: float,
        in_flight: int,
        delivery_rate: float | None,
    ) -> None:
        """Move cwnd toward ``cwnd_gain · BDP`` (BBRv1 BBRSetCwnd, Linux bbr_set_cwnd)."""
        target = max(self.inflight(self.cwnd_gain), BBR_MIN_PIPE_CWND_SEGMENTS * self.mss)
        if self.full_bw_reached:
            self.cwnd = min(self.cwnd + acked, target)
        elif self.cwnd < target or self._delivered < self.initial_cwnd:
            self.cwnd += acked
        self.cwnd = max(self.cwnd, float(BBR_MIN_PIPE_CWND_SEGMENTS * self.mss))
        if self.state is BbrState.PROBE_RTT:
            self.cwnd = min(self.cwnd, float(BBR_MIN_PIPE_CWND_SEGMENTS * self.mss))

    def on_congestion(self, *, now: float, in_flight: int) -> None:
        """No reaction: loss is not a congestion signal to BBRv1."""

    def on_rto(self, *, now: float, in_flight: int) -> None:
        """One segment until the episode is recovered, then the window from before."""
        self._save_cwnd()
        self._rto_recovery = True
        self.cwnd = float(self.mss)

    def on_recovered(self, *, now: float) -> None:
        if self._rto_recovery:
            self._rto_recovery = False
            self.cwnd = max(self.cwnd, self.prior_cwnd)

    # ------------------------------------------------------------------- model

    def _update_round(self, sample: RateSample) -> None:
        self.round_start = sample.prior_delivered >= self._next_round_delivered
        if self.round_start:
            self._next_round_delivered = sample.total_delivered
            self.round_count += 1

    def _update_btlbw(self, sample: RateSample) -> None:
        rate = sample.delivery_rate
        if rate is not None and (rate >= self.btlbw or not sample.app_limited):
            self._btlbw.update(self.round_count, rate)

    def _update_min_rtt(self, rtt: float | None, now: float) -> None:
        self._min_rtt_expired = now > self._min_rtt_at + BBR_MIN_RTT_FILTER_S
        if rtt is not None and (rtt <= self.min_rtt or self._min_rtt_expired):
            self.min_rtt, self._min_rtt_at = rtt, now
        if rtt is not None and not self._has_rtt:
            # draft-02 BBRInitPacingRate again, now with a real RTT (Linux
            # bbr_init_pacing_rate_from_rtt on the first sample).
            self._has_rtt = True
            self.pacing_rate = self.pacing_gain * self.initial_cwnd / rtt

    def _set_pacing_rate(self) -> None:
        rate = self.pacing_gain * self.btlbw * (1 - self.pacing_margin)
        current = self.pacing_rate
        if rate and (self.full_bw_reached or current is None or rate > current):
            self.pacing_rate = rate

    # ------------------------------------------------------------------- states

    def _check_full_pipe(self, sample: RateSample) -> None:
        """Startup ends when BtlBw grew less than 25 % in three rounds (draft-02)."""
        if self.full_bw_reached or not self.round_start or sample.app_limited:
            return
        if self.btlbw >= self.full_bw * BBR_FULL_BW_THRESH:
            self.full_bw, self._full_bw_count = self.btlbw, 0
            return
        self._full_bw_count += 1
        self.full_bw_reached = self._full_bw_count >= BBR_FULL_BW_ROUNDS

    def _check_drain(self, now: float, in_flight: int) -> None:
        if self.state is BbrState.STARTUP and self.full_bw_reached:
            self._enter(BbrState.DRAIN, now)
        if self.state is BbrState.DRAIN and in_flight <= self.inflight():
            self._enter(BbrState.PROBE_BW, now)

    def _update_cycle_phase(self, sample: RateSample, now: float, in_flight: int) -> None:
        """One ProbeBW phase per RTprop, with BBRv1's early/late exits (BBRIsNextCyclePhase)."""
        if self.state is not BbrState.PROBE_BW:
            return
        full_length = now - self._cycle_at > self.min_rtt
        gain = self.pacing_gain
        if gain > 1:
            reached = sample.prior_in_flight >= self.inflight(gain)
            advance = full_length and (sample.lost > 0 or reached)
        elif gain < 1:
            advance = full_length or sample.prior_in_flight <= self.inflight()
        else:
            advance = full_length
        if advance:
            self.cycle_index = (self.cycle_index + 1) % len(BBR_PROBE_BW_GAINS)
            self._cycle_at = now
            self.pacing_gain = BBR_PROBE_BW_GAINS[self.cycle_index]

    def _check_probe_rtt(self, now: float, in_flight: int, sample: RateSample) -> None:
        """Every 10 s without a new RTprop: 4 segments in flight for 200 ms and a round."""
        if self.state is not BbrState.PROBE_RTT and self._min_rtt_expired:
            self._save_cwnd()
            self._enter(BbrState.PROBE_RTT, now)
            self._probe_rtt_done_at = None
        if self.state is not BbrState.PROBE_RTT:
            return
        if self._probe_rtt_done_at is None:
            if in_flight <= BBR_MIN_PIPE_CWND_SEGMENTS * self.mss:
                self._probe_rtt_done_at = now + BBR_PROBE_RTT_DURATION_S
                self._probe_rtt_round_done = False
                self._next_round_delivered = sample.total_delivered
            return
        self._probe_rtt_round_done |= self.round_start
        if self._probe_rtt_round_done and now >= self._probe_rtt_done_at:
            self._min_rtt_at = now
            self.cwnd = max(self.cwnd, self.prior_cwnd)
            self._enter(BbrState.PROBE_BW if self.full_bw_reached else BbrState.STARTUP, now)


class BbrLinux(Bbr):
    """:class:`Bbr` with the gains Linux's ``tcp_bbr.c`` (BBRv1) runs: Startup paces and
    sizes its window at 2/ln 2 ≈ 2.885 (``bbr_high_gain``, not draft-02's 2.77 and 2),
    Drain paces at ln 2/2. The kernel reports these gains through ``TCP_CC_INFO``; the
    lab compares its ``bbr`` sockets with this controller.
    """

    name = "bbr-linux"
    gains: ClassVar[dict[BbrState, tuple[float, float]]] = _BBR_LINUX_GAINS


class BbrV1(BbrLinux):
    """BBRv1 as draft-cardwell-iccrg-bbr-congestion-control-00 specifies it: BBRv1's gains
    (:class:`BbrLinux`) and pacing at ``pacing_gain · BtlBw`` with no margin
    (BBRSetPacingRateWithGain; Linux added its 1 % margin later, draft-02 kept it). ns-3
    3.37's ``TcpBbr`` implements this draft; the ns-3 cross-checks compare with it.
    """

    name = "bbr-v1"
    pacing_margin: ClassVar[float] = 0.0


# Registered by calls, not decorators: the optional mypyc build compiles only
# undecorated classes to native ones.
for _cls in (SlowStartOnly, NewReno, Cubic, CubicHyStart, Bbr, BbrLinux, BbrV1):
    register(_cls)
