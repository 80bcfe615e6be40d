"""The relay's sending rate: delivery rate and min RTT, braked by queueing delay (§12.3.3).

Random loss is not taken as congestion: the rate comes from what the path
delivers, as in BBR (Cardwell et al. 2016), and the brake is RTT inflation::

    btl_bw   = max delivery rate over the last ``BW_WINDOW_ROUNDS`` round trips
    min_rtt  = min RTT over the last ``MIN_RTT_WINDOW_S``
    pacing   = gain · btl_bw        gain: 2 in start-up and for bursts that fit the window,
                                    else cycles 1.25, 0.75, 1 × 6 (bulk)
    cwnd     = CWND_GAIN · btl_bw · min_rtt   (at least ``MIN_CWND_PACKETS`` packets)
    brake    : the round's smallest RTT > min_rtt · (1 + QUEUE_SLACK) + QUEUE_SLACK_S
               → gain 0.75 until the queue drains
    policed  : (:mod:`.police`) pacing = HOLD_GAIN · ceiling, one round in
               HOLD_PROBE_ROUNDS at PROBE_GAIN · ceiling, until a probe passes clean;
               in a session's first EARLY_ROUNDS rounds of bulk judged per ACK, mid-round
               (a first train passed on a full bucket reads the link, not the policer)
    standing : the brake on for ``STANDING_ROUNDS`` rounds in a row, with data waiting
               and no bulk coming the other way (its queue would delay the ACKs): the
               estimate is above the path (ACK trains read fast on a busy host); it becomes
               the last round's delivery rate (the bottleneck's, while a queue stands)
    interactive: a small stream starts beside bulk (:meth:`RateController.on_interactive`)
               → one round at DRAIN_GAIN, then for ``INTERACTIVE_ROUNDS`` rounds after its
               last sign no probing gain, cwnd = one BDP + INTERACTIVE_CWND_PACKETS and the
               brake at INTERACTIVE_SLACK: the small stream sees the propagation delay, not
               the bulk's queue (BBR's DRAIN and PROBE_RTT keep the queue out the same way)

A burst that fits the window (a request) goes out at twice the estimate: its
ACKs come back at the bottleneck rate, so each burst either confirms the
estimate or raises it, and the queue it leaves is at most half the burst. The
estimate belongs to the session, not to a stream, so a stream opened on
a warm session starts at the measured rate. Each side measures the direction
it sends in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tierwise.proto.relay.police import EARLY_ROUNDS, RELEASE_GROWTH, PolicingDetector

__all__ = ["RateController", "RateSample"]

STARTUP_GAIN = 2.0
BRAKE_GAIN = 0.75
CYCLE_GAINS = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
CWND_GAIN = 2.0
BW_WINDOW_ROUNDS = 10
MIN_RTT_WINDOW_S = 10.0
MIN_CWND_PACKETS = 16
INITIAL_CWND_PACKETS = 32
INITIAL_RTT_S = 0.1  # before the first sample
QUEUE_SLACK = 0.25
QUEUE_SLACK_S = 0.002
FULL_BW_GROWTH = 1.25
FULL_BW_ROUNDS = 3
# A policed path: hold just below its ceiling (the bucket stays full, so a reply's burst
# and the ceiling's measurement error cost no loss) and look above it now and then.
HOLD_GAIN = 0.97
PROBE_GAIN = 1.15
HOLD_PROBE_ROUNDS = 32
# A brake that has not emptied the queue in this many rounds in a row (each at BRAKE_GAIN
# of the estimate) shows the estimate is above the path: in the lab, ACK trains timed on a
# busy host read 10–40 % above a 100 Mbit/s path, and the brake's 0.75 × of that still
# overfilled the emulator's 120 ms queue (6,480 tail drops in four requests' time).
STANDING_ROUNDS = 2
# While a queue stands, the round's delivery rate is the bottleneck's: a sample whose RTT
# shows a queue reads no more than this much above the last such round (ACK trains timed
# on a busy host read 10–40 % above it); a path that got faster shows it on a probe that
# meets no queue.
QUEUED_SAMPLE_SLACK = 1.0
# An interactive stream beside bulk: drain the bulk's queue (about a round at half the
# estimate), then hold none (cwnd one BDP plus a few packets, no probing above the rate).
DRAIN_GAIN = 0.5
INTERACTIVE_ROUNDS = 4
INTERACTIVE_CWND_PACKETS = 4
INTERACTIVE_SLACK = 0.05


# Built per acknowledged packet: a dataclass with its own (compiled) __init__, not a frozen
# one, whose generated __init__ a compiled build runs as Python (≈ 30 × slower).
@dataclass(slots=True, init=False, unsafe_hash=True)
class RateSample:
    """One acknowledged packet: delivery rate over its flight, its RTT and the delay its
    ACK reported (the peer's hold between the ACK's largest packet arriving and the ACK
    leaving: a late reader's, not the path's)."""

    delivery_rate_bytes_per_s: float
    rtt_s: float
    app_limited: bool
    queued: bool  # an ACK train that the bottleneck spread out: the rate is the path's
    # timed from an ACK train (or a first flight's arrivals): what the path carried at
    # least, even where the application fed the flight in pieces
    train: bool
    ack_delay_s: float

    def __init__(
        self,
        delivery_rate_bytes_per_s: float,
        rtt_s: float,
        app_limited: bool,
        queued: bool = False,
        train: bool = False,
        ack_delay_s: float = 0.0,
    ) -> None:
        self.delivery_rate_bytes_per_s, self.rtt_s = delivery_rate_bytes_per_s, rtt_s
        self.app_limited, self.queued, self.train = app_limited, queued, train
        self.ack_delay_s = ack_delay_s


class RateController:
    """Pacing rate and window of one sending direction."""

    def __init__(
        self,
        mss: int,
        initial_rate_bytes_per_s: float | None = None,
        initial_rtt_s: float = INITIAL_RTT_S,
        blind_bytes: float | None = None,
    ) -> None:
        self.mss = mss
        self.initial_rtt_s = initial_rtt_s  # the window's RTT before the first sample
        # what may fly before the first ACK (None: the window); a remembered start rate's
        # bound on the loss it causes if the path has become slower (prior.py)
        self.blind_bytes = blind_bytes
        self.min_rtt_s: float | None = None
        self._min_rtt_at = 0.0
        self._bw: deque[tuple[int, float]] = deque()  # (round, rate), decreasing rates
        self.round = 0
        self._round_rtt_min = float("inf")
        self._startup = True
        self._full_bw, self._full_bw_rounds = 0.0, 0
        self._cycle, self._braking = 0, False
        self._initial_rate = initial_rate_bytes_per_s
        self._app_limited = False
        self._round_app_limited = False
        self._measured = False  # a sample not app-limited (or a timed train) has come
        self._trained = False  # an ACK train (or a first flight's arrivals) has been timed
        # cwnd_bytes until one of its inputs changes (an ACK, a round, the two flags below):
        # the sender and its timer read it several times per datagram.
        self._cwnd: float | None = None
        # Why start-up ended ("queued train", "full pipe", "brake"; empty while it runs): a
        # diagnostic for traces (relay/trace.py), not an input to the rate.
        self.startup_exit = ""
        self.police = PolicingDetector()
        self._hold_round = 0
        self._braked_rounds = 0  # rounds in a row the brake was on
        self._queue_rate: float | None = None  # what the last round a queue stood delivered
        self._round_start = (0, 0.0)  # (bytes delivered, time) when this round began
        self._interactive_round: int | None = None  # the round of the last interactive sign
        self._drain_rounds = 0
        self._bulk_rounds = 0  # rounds not app-limited so far (the early judgement's span)

    @property
    def startup(self) -> bool:
        """Probing for the bottleneck rate (gain 2) until a round finds the pipe full."""
        return self._startup

    @startup.setter
    def startup(self, value: bool) -> None:
        self._startup, self._cwnd = value, None

    @property
    def app_limited(self) -> bool:
        """The connection sets it: what is queued fits the window."""
        return self._app_limited

    @app_limited.setter
    def app_limited(self, value: bool) -> None:
        if value != self._app_limited:
            self._app_limited, self._cwnd = value, None

    @property
    def btl_bw_bytes_per_s(self) -> float:
        """The largest recent delivery rate; in start-up never below the initial window's rate
        (the first samples, taken from idle, measure one packet per RTT, not the path)."""
        ceiling = self.police.ceiling_bytes_per_s
        if ceiling is not None:
            return ceiling
        initial = self._initial_rate or INITIAL_CWND_PACKETS * self.mss / (
            self.min_rtt_s or self.initial_rtt_s
        )
        bw = self._bw
        if not bw:
            return initial
        if self._startup:
            return max(bw[0][1], initial)
        return bw[0][1]

    @property
    def measured_bw_bytes_per_s(self) -> float:
        """The largest recent delivery rate measured (0: none yet), no start rate in it."""
        return self._bw[0][1] if self._bw else 0.0

    @property
    def probing_policer(self) -> bool:
        """Policed, and this round looks above the ceiling."""
        police = self.police
        every = max(HOLD_PROBE_ROUNDS, 4 * police.probe_rounds)
        return police.policed and self._hold_round % every < police.probe_rounds

    @property
    def gain(self) -> float:
        if self.police.policed:
            return PROBE_GAIN if self.probing_policer else HOLD_GAIN
        if self._drain_rounds:
            return DRAIN_GAIN
        if self._braking:
            return BRAKE_GAIN
        if self._startup or self._app_limited:
            return STARTUP_GAIN
        if self.interactive:
            return min(CYCLE_GAINS[self._cycle], 1.0)
        return CYCLE_GAINS[self._cycle]

    @property
    def pacing_rate_bytes_per_s(self) -> float:
        """``gain · btl_bw``; an app-limited sender (a reply, a tail of repairs) is paced at
        least at the initial window per min RTT: its own small flights under-measure the path."""
        if self._unmeasured and not self._initial_rate:
            # the first flight is a packet train: its ACKs time the path. Until a flight
            # that was not app-limited has been timed, samples of small exchanges (a
            # forward's check, a status byte) measure the application, and pacing at
            # twice them made a new session's first request crawl (0.8 s against 0.46 s
            # at 200 ms, 100 Mbit/s in the lab)
            return float("inf")
        rate = self.gain * self.btl_bw_bytes_per_s
        if self._app_limited:
            rate = max(
                rate, INITIAL_CWND_PACKETS * self.mss / (self.min_rtt_s or self.initial_rtt_s)
            )
        return rate

    @property
    def unmeasured(self) -> bool:
        """Nothing but app-limited samples yet, and no start rate given: the next flight
        would start as a new session's."""
        return self._initial_rate is None and self._unmeasured

    @property
    def first_flight(self) -> bool:
        """In start-up, and no ACK train timed yet: what is acknowledged is a new session's
        first flight, which its arrivals may time (a later flight's few ACKs are noise: in
        the lab 70 datagrams sent in one call and passed on by the emulator in 0.8 ms
        read 52.8 MB/s on a 25 MB/s path, and start-up paced at twice that)."""
        return self._startup and not self._trained

    @property
    def _unmeasured(self) -> bool:
        """No sample yet, or in start-up only samples of app-limited flights: the pace is
        the next flight's own train (the window still grows with those samples)."""
        return not self._bw or (self._startup and not self._measured)

    @property
    def cwnd_bytes(self) -> float:
        cwnd = self._cwnd
        if cwnd is None:
            cwnd = self._cwnd = self._window_bytes()
        return cwnd

    def _window_bytes(self) -> float:
        rtt = self.min_rtt_s or self.initial_rtt_s
        gain = max(CWND_GAIN, self.gain)
        if not self._bw and not self._initial_rate:
            return INITIAL_CWND_PACKETS * self.mss
        window = max(gain * self.btl_bw_bytes_per_s * rtt, MIN_CWND_PACKETS * self.mss)
        if not self._bw and self.blind_bytes is not None:
            return min(window, max(self.blind_bytes, INITIAL_CWND_PACKETS * self.mss))
        if self.interactive and not self.startup:
            bdp = self.btl_bw_bytes_per_s * rtt + INTERACTIVE_CWND_PACKETS * self.mss
            window = min(window, max(bdp, MIN_CWND_PACKETS * self.mss))
        return window

    @property
    def has_initial_rate(self) -> bool:
        """A start rate was given (configured or remembered) and is still in force."""
        return self._initial_rate is not None

    def forget_initial_rate(self) -> None:
        """The start rate proved wrong for this path (a remembered one that changed): go on
        from what was measured, as a new session would — or, with nothing measured yet, as
        one (32 datagrams, then the ACKs time the path). Measured, start-up ends: its gain
        would push the queue that just showed the path is slower."""
        self._initial_rate = self.blind_bytes = None
        self.initial_rtt_s = INITIAL_RTT_S
        if self._bw:
            self.startup = False
            self.startup_exit = "prior dropped"
            self._cycle = 1  # drain what the remembered rate queued
        self._cwnd = None

    @property
    def interactive(self) -> bool:
        """A small stream beside bulk was active within ``INTERACTIVE_ROUNDS`` rounds."""
        last = self._interactive_round
        return last is not None and self.round - last <= INTERACTIVE_ROUNDS

    @property
    def draining(self) -> bool:
        """Paced at ``DRAIN_GAIN``: an interactive stream has just started beside bulk."""
        return self._drain_rounds > 0

    def on_interactive(self) -> None:
        """A small stream is active while this end sends bulk (the connection judges): drain
        the bulk's queue at the bottleneck if none was being kept out already, and keep it
        out for ``INTERACTIVE_ROUNDS`` more rounds. Start-up and a policed hold keep their
        own gains (their window or the ceiling bound the queue)."""
        if not self.interactive and not self.startup and not self.police.policed:
            self._drain_rounds = 1
        self._interactive_round = self.round
        self._cwnd = None

    def on_sample(self, sample: RateSample, now: float) -> None:
        """Fold in one acknowledged packet. The minimum RTT takes the sample as measured;
        what the brake and the policing detector read as a queue is the RTT less the ACK's
        reported delay where that leaves at least the minimum (RFC 9002 §5.3 adjusts the
        smoothed RTT so, not the minimum): a peer that read a flight late is no queue."""
        rtt = sample.rtt_s
        min_rtt = self.min_rtt_s
        if min_rtt is None or rtt <= min_rtt or now - self._min_rtt_at > (MIN_RTT_WINDOW_S):
            min_rtt = self.min_rtt_s = rtt
            self._min_rtt_at = now
        if rtt - sample.ack_delay_s >= min_rtt:
            rtt -= sample.ack_delay_s
        if rtt < self._round_rtt_min:
            self._round_rtt_min = rtt
        floor_s = self._queue_floor_s()  # once a sample: the detector's and the clip's
        police = self.police
        if police.early:
            police.queued_now = rtt > floor_s
            police.now_s = now
        if sample.app_limited:
            self._round_app_limited = True
        rate = sample.delivery_rate_bytes_per_s
        if self._queue_rate is not None and rate > 0 and rtt > floor_s:
            # a sample through a standing queue, held near what such a round delivered
            # (_queue_rate is set only where _check_standing runs)
            rate = min(rate, QUEUED_SAMPLE_SLACK * self._queue_rate)
        if rate > 0 and (sample.queued or sample.train):
            self._measured = self._trained = True
        elif rate > 0 and not sample.app_limited:
            self._measured = True
        if rate > 0 and (not sample.app_limited or not self._bw or rate >= self._bw[0][1]):
            while self._bw and self._bw[-1][1] <= rate:
                self._bw.pop()
            self._bw.append((self.round, rate))
        if self.startup and sample.queued and not sample.app_limited:
            self.startup = False  # a queued packet train measured the bottleneck: no more probing
            self.startup_exit = "queued train"
            self._cycle = CYCLE_GAINS.index(1.0)
        self._cwnd = None

    def on_resolved(
        self,
        pn: int,
        size: int,
        sent_s: float,
        lost: bool,
        app_limited: bool,
        startup_bulk: bool = False,
    ) -> None:
        """Packet ``pn`` was acknowledged in order (``lost`` False), or lost or filled in late
        (rebuilt by FEC, retransmitted): the policing detector's input. ``startup_bulk``:
        sent in start-up with a bulk stream's bytes (judged early even if app-limited)."""
        police = self.police
        early = police.early
        police.on_resolved(pn, size, sent_s, lost, app_limited, startup_bulk)
        if early and police.policed:  # found mid-round in the first rounds: hold from here on
            self._hold_round = police.probe_rounds  # a whole hold before the first probe
            if self.startup:
                self.startup, self.startup_exit = False, "policer"
            self._cwnd = None

    def on_round_end(
        self,
        next_pn: int | None = None,
        delivered: int | None = None,
        now: float | None = None,
        *,
        backlogged: bool = False,
        reverse_bulk: bool = False,
    ) -> None:
        """A round trip has passed (the caller tracks delivered packets); ``next_pn`` is the
        number the next packet sent will carry (the policing detector's round boundary);
        ``delivered`` the bytes acknowledged so far and ``now``, for the round's rate;
        ``backlogged``: bytes written wait unsent (the pacer holds them, not the
        application); ``reverse_bulk``: the other direction carries bulk now, so a longer
        RTT may be its queue, which the ACKs wait in, not this direction's."""
        self.round += 1
        slack = INTERACTIVE_SLACK if self.interactive else QUEUE_SLACK
        self._braking = self._round_rtt_min > self._queue_floor_s(slack)
        if next_pn is not None:
            queued = self._queue_floor_s() < self._round_rtt_min < float("inf")
            self._police_round(next_pn, queued=queued)
        self._round_rtt_min = float("inf")
        round_rate = self._round_delivery(delivered, now)
        # The newest estimate never expires: the rounds of an idle or app-limited session
        # measure nothing new, and an empty filter would take the first sample after idle
        # (one packet over the idle gap, 372 B/s in the lab) and pace the next request at it.
        while len(self._bw) > 1 and self._bw[0][0] < self.round - BW_WINDOW_ROUNDS:
            self._bw.popleft()
        app_limited, self._round_app_limited = self._round_app_limited, False
        if not app_limited:
            self._bulk_rounds += 1
            if self._bulk_rounds > EARLY_ROUNDS:
                self.police.early = False
        if self._drain_rounds:
            self._drain_rounds -= 1
        if reverse_bulk or (app_limited and not backlogged):
            self._braked_rounds = 0  # the queue may not be this direction's, or not its doing
        else:
            self._check_standing(round_rate)
        if self.police.policed:
            pass  # the hold's gains (see gain)
        elif self.police.needs_spread and not self.startup and CYCLE_GAINS[self._cycle] == 1.0:
            self._cycle = 0  # probe and drain now: the detector judges by their difference
        elif self.startup:
            if not app_limited or self._braking:
                self._check_full_pipe()
        else:
            self._cycle = (self._cycle + 1) % len(CYCLE_GAINS)
        self._cwnd = None

    def _round_delivery(self, delivered: int | None, now: float | None) -> float:
        """The round just ended's delivery rate (0 if unknown), and the next round's start."""
        if delivered is None or now is None:
            return 0.0
        start_delivered, start_s = self._round_start
        self._round_start = (delivered, now)
        if now <= start_s or delivered <= start_delivered:
            return 0.0
        return (delivered - start_delivered) / (now - start_s)

    def _check_standing(self, round_rate: float) -> None:
        """A brake that did not empty the queue: the estimate becomes the round's rate. A
        policed hold that a queue stands behind is no policer's (it drops, never queues)."""
        if not self._braking or self.startup:
            self._braked_rounds = 0
            return
        if self.police.policed:
            self.police.release()
            self._cycle = CYCLE_GAINS.index(BRAKE_GAIN)
        if round_rate > 0:
            self._queue_rate = round_rate
        self._braked_rounds += 1
        if self._braked_rounds >= STANDING_ROUNDS and 0 < round_rate < self.btl_bw_bytes_per_s:
            # a queue stood all round: the bottleneck was busy, and what it delivered is its rate
            self._bw.clear()
            self._bw.append((self.round, round_rate))
            self._braked_rounds = 0

    def _queue_floor_s(self, slack: float = QUEUE_SLACK) -> float:
        """A round's smallest RTT above this shows a queue (the brake's rule; bulk's slack
        unless told otherwise)."""
        return (self.min_rtt_s or 0.0) * (1 + slack) + QUEUE_SLACK_S

    def _police_round(self, next_pn: int, queued: bool = False) -> None:
        was, ceiling = self.police.policed, self.police.ceiling_bytes_per_s
        self._hold_round = self._hold_round + 1 if was else 1
        self.police.on_round_start(next_pn, probe=was and self.probing_policer, queued=queued)
        if self.police.policed and not was:
            self._hold_round = self.police.probe_rounds  # the first probe after a whole hold
            if self.startup:
                self.startup, self.startup_exit = False, "policer"
        elif was and not self.police.policed and ceiling is not None:
            self._bw.clear()  # start again from what the probes delivered, probing first
            self._bw.append((self.round, RELEASE_GROWTH * ceiling))
            self._cycle = 0

    def _check_full_pipe(self) -> None:
        bw = self.btl_bw_bytes_per_s
        if bw >= self._full_bw * FULL_BW_GROWTH:
            self._full_bw, self._full_bw_rounds = bw, 0
            return
        self._full_bw_rounds += 1
        if self._full_bw_rounds >= FULL_BW_ROUNDS or self._braking:
            self.startup_exit = "brake" if self._braking else "full pipe"
            self.startup = False
            self._cycle = 1  # drain what start-up queued
