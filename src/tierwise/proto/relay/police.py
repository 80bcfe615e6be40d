"""Telling a policer from random loss by how delivery answers the sending rate (§12.3.3).

A token-bucket policer drops what exceeds its rate without queueing first: the RTT
never rises, so the rate controller's queueing brake never fires, and its loss looks
like the random loss the relay repairs with FEC. What gives it away is the answer to
a change of rate. Per round trip of sending, the delivered share of what was sent is
``1 − loss``, and the rate it delivered ``d = s·(1 − loss)`` for the send rate ``s``:

* random loss ``p``: ``d = s·(1 − p)`` — delivery follows the send rate (elasticity 1);
* a policer at ``C``: ``d = min(s, C)`` — above ``C`` delivery is flat (elasticity 0)
  and the loss is ``1 − C/s``: it rises with the send rate.

The rate controller's gain cycle (1.25, 0.75, 1, …) and its estimate's changes vary
``s`` by itself, so no extra probing is needed. Each round's packets are attributed to
the round they were sent in (by packet number); a packet rebuilt by FEC or
retransmitted counts as lost (the path dropped it). Once a round's packets are settled
(:data:`SETTLE_ROUNDS` later), the last :data:`WINDOW_ROUNDS` rounds that were not
app-limited give a high group (the rounds sent within :data:`GROUP_SPAN` of the fastest
one's rate) and a low group (of the slowest one's), and::

    elasticity = ln(d_high / d_low) / ln(s_high / s_low)

The path is policed when the high group lost at least :data:`MIN_LOSS` and
``elasticity ≤`` :data:`POLICED_ELASTICITY`, or when the low group (sent below the
ceiling, so its delivery still follows the send rate) lost at most :data:`RISING_LOSS`
of the high group's share and ``elasticity ≤`` :data:`RISING_ELASTICITY` — random loss
is the same share at any rate. The high group's loss must also exceed the low group's
by :data:`FLAT_RISE_Z` (flat) or :data:`LOSS_RISE_Z` (rising) standard errors of the
difference (the two-proportion z test): a few dozen packets at one random loss rate
deal a group none and another twice its share often enough to pass the other tests by
chance. The ceiling is then what the rounds that lost delivered (the bucket was empty
in them). Random loss on the same path
makes that an underestimate by its share (a known limit: the hold then sends that much below the
policed rate). While policed the sender holds just below the ceiling
(:mod:`.rate`) and probes above it for :data:`PROBE_ROUNDS` rounds in
:data:`~.rate.HOLD_PROBE_ROUNDS`; the path is released when a probe delivered
:data:`RELEASE_GROWTH` × the ceiling with less than :data:`MIN_LOSS` lost (beyond the
hold's own loss), its last round less than :data:`LAST_PROBE_LOSS`: the policer was
lifted or raised. A bucket deep enough to pass a whole
probe releases it too; the next cycles find it again, and when the ceiling found is the
one released (within :data:`SAME_CEILING`), the probes from then on last twice as long
(up to :data:`MAX_PROBE_ROUNDS`), until one outlasts the bucket. A probe that delivered
no more than a hold that lost (the same elasticity test) lowers the ceiling to what the
hold delivers: the ceiling was measured high. A hold that loses :data:`RELEASE_LOSS` more than it
did at its best is released too: the policer was lowered. Linux's BBR detects policers
from loss and a flat delivery rate over two intervals (``lt_bw``, Cardwell et al.
2017) but pins the rate on random loss of 20 % and more too; the elasticity test
does not, since random loss keeps delivery proportional to the send rate.

**The first rounds.** A new session's first packet train passes a policer's full bucket
at the link's rate, so start-up measures the link and sends at it, and the rounds above
need two settled rounds and a spread of send rates: the policer was declared at round 7,
after five rounds at the link's rate lost about 80 % (20 on a 100 Mbit/s path). While
:attr:`PolicingDetector.early` is armed (the rate controller keeps it so for a session's
first :data:`EARLY_ROUNDS` rounds of bulk), every in-order acknowledgement is also
judged at once, mid-round: over the last :data:`EARLY_ACKED` packets acknowledged, the
packet numbers between them that were not (sent, so dropped or still missing) make up at
least :data:`EARLY_LOSS` of each half of the window, and at most half its RTTs showed a
queue — a drop rate that a few per cent of random loss never reaches (at 40 % random
loss a half that loses 60 % is 4.5 standard deviations out), and a tail-drop queue's
overflow would delay every packet it passed (a host late to acknowledge, as the lab's
client reading a batch, delays some: clearing the window at each such RTT put the
policer off by two rounds there). Sent faster than the bucket refills, what such a
window delivered per second of its sending is the policed rate (the bucket's burst comes
first and is past once both halves lose): the path is policed from that packet on, and
once the packets sent before the hold are all acknowledged or missing, at what they
delivered per second of their arrival at the peer (each ACK's time less the delay it
reports: a longer span than the window's few ms of sending at the link's rate, and the
policer's output as the peer saw it). The hold's loss starts at 0 (the loss before it
was the policer's answer to the overdrive, which FEC need not repair) and becomes what
the hold's own rounds lose once they settle.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from itertools import pairwise

__all__ = ["PolicingDetector"]

WINDOW_ROUNDS = 16  # two gain cycles
SETTLE_ROUNDS = 2  # a round's losses are declared within about two RTT (FEC's wait included)
MIN_ROUNDS = 4
MIN_GROUP_PACKETS = 24
GROUP_SPAN = 1.05  # a group: the rounds within this factor of the fastest (slowest) one
MIN_SPREAD = 1.15  # the high group sent at least this much faster than the low one
MIN_LOSS = 0.05
SPREAD_LOSS = 0.2
RELEASE_LOSS = 0.2  # the hold's loss above its least so far that ends it (policer lowered)
POLICED_ELASTICITY = 0.35
RISING_LOSS = 1 / 3  # the low group lost at most this share of the high group's loss …
RISING_ELASTICITY = 0.7  # … and delivery grew at most this much with the send rate
# the high group's loss above the low group's, in standard errors of the difference under
# one shared loss rate: below this the rise is what random loss deals a few dozen packets
# (6.25 % random loss gave a 26-packet low group none and a 42-packet high group 14 %)
LOSS_RISE_Z = 4.0  # … for a rising loss (the low group's below the high group's)
FLAT_RISE_Z = 2.0  # … for flat delivery, itself the stronger sign (both groups may lose),
FLAT_MIN_PACKETS = 64  # … in groups of this many packets or more (fewer: LOSS_RISE_Z)
RELEASE_GROWTH = 1.07
PROBE_ROUNDS = 3  # a probe above a policed ceiling lasts this many rounds at first …
MAX_PROBE_ROUNDS = 24  # … doubled each time the same ceiling is found again after it
SAME_CEILING = 0.1
# … and its last round lost less than this above the hold's floor: a bucket about as deep
# as a probe's excess (96 kB against 1.15 × 20 Mbit/s for 3 rounds of 100 ms) passes the
# first rounds whole and drops only in the last, a few per cent of the whole probe; such
# a release cost ≈ 100 datagrams and several rounds below the ceiling before the same
# policer was found again
LAST_PROBE_LOSS = 0.025
KEEP_ROUNDS = WINDOW_ROUNDS + SETTLE_ROUNDS + 2
# A round whose RTT showed a queue (the rate controller's brake) is a tail-drop queue's
# loss, not a policer's, which drops without queueing: no detection from the window it is
# in, and a hold it stands through is released. (In the lab a start-up overshoot into the
# emulator's 120 ms queue read as a policer at 150 of 100 Mbit/s, held for the session.)
QUEUED_QUIET_ROUNDS = WINDOW_ROUNDS + SETTLE_ROUNDS
# The first rounds (see the module's text): a window of this many in-order acknowledged
# packets whose halves each lost at least EARLY_LOSS of the numbers they span, with no
# queue, declares the policer at what it delivered per second of sending.
EARLY_ACKED = 48
EARLY_LOSS = 0.6
EARLY_ROUNDS = 8  # the rate controller's: rounds of bulk the early judgement stays armed
REFINE_MIN_S = 0.01  # the arrivals that refine the ceiling span at least this long


class _Round:
    __slots__ = (
        "acked",
        "app_limited",
        "end_s",
        "first_s",
        "judged",
        "last_s",
        "lost",
        "packets",
        "probe",
        "start_pn",
    )

    def __init__(self, start_pn: int, probe: bool) -> None:
        self.start_pn, self.probe, self.judged = start_pn, probe, False
        self.acked = self.lost = 0  # bytes
        self.packets = self.app_limited = 0
        self.first_s, self.last_s = math.inf, -math.inf
        self.end_s = -math.inf

    @property
    def span_s(self) -> float:
        return max(self.last_s, self.end_s) - self.first_s

    @property
    def send_rate(self) -> float:
        span = self.span_s
        return (self.acked + self.lost) / span if span > 0 else 0.0


class PolicingDetector:
    """Whether the path polices this direction, and at what rate (bytes/s)."""

    def __init__(self) -> None:
        self._rounds: deque[_Round] = deque()
        self._starts: list[int] = []  # the rounds' first packet numbers, for bisection
        # rounds begun so far, and the number of the newest that lost a packet: a window
        # without loss is not judged (nothing there can be a policer's), which on a short
        # path, where a round ends at nearly every ACK, was most of a request's cost here
        self._rounds_begun = 0
        self._lossy_round = -1
        self.policed = False
        self.ceiling_bytes_per_s: float | None = None
        self.elasticity: float | None = None  # the last judgement's, for traces and tests
        self.detections = 0
        # the raw loss of the hold's last settled rounds (0 until they settle; None: not
        # policed): what FEC should size for while policed, rather than the loss the
        # overdrive before it caused
        self.hold_loss: float | None = None
        # a bucket deep enough to pass a whole probe released the hold, and the same ceiling
        # was found again: the next probes last longer
        self.probe_rounds = PROBE_ROUNDS
        self._released_ceiling: float | None = None
        self._hold_floor: float | None = None  # the hold's least loss so far
        # the newest settled round lost heavily and the window shows no spread of send
        # rates to judge by: the rate controller moves on to its probe and drain rounds
        self.needs_spread = False
        self._since_queue = QUEUED_QUIET_ROUNDS  # rounds since one whose RTT showed a queue
        # judge each in-order acknowledgement as it comes (a session's first rounds of
        # bulk; the rate controller disarms it), over the last EARLY_ACKED ones
        self.early = True
        self.early_detected = False  # the hold came from the first rounds' judgement
        self._early: deque[tuple[int, int, float]] = deque(maxlen=EARLY_ACKED)
        # the newest RTT sample showed a queue (the rate controller's, while early is armed),
        # and whether each of the window's did
        self.queued_now = False
        self._early_queued: deque[bool] = deque(maxlen=EARLY_ACKED)
        self._suspect = False
        self._check_hold = False  # the hold's first settled rounds check an early ceiling
        # the newest ACK's time here, and its largest packet's arrival at the peer (the
        # ACK's time less the delay it reports): the connection's, while early is armed
        self.now_s = self.recv_s = 0.0
        # after the first rounds' judgement, until the packets sent before the hold are in:
        # the bytes that reached the peer after the judging ACK's, the first and the last
        # arrival there, the last packet number, and when the hold began
        self._refine = False
        self._refine_pn = 0
        self._refine_bytes = 0
        self._refine_from_s = self._refine_last_s = self._refine_until_s = 0.0

    def on_round_start(self, next_pn: int, probe: bool = False, queued: bool = False) -> None:
        """A new round trip begins with packet number ``next_pn`` (``probe``: sent above the
        ceiling of a policed path; ``queued``: the round that ended saw a queue); judge the
        settled rounds."""
        self._since_queue = 0 if queued else self._since_queue + 1
        if self._rounds and self._rounds[-1].start_pn == next_pn:
            self._rounds[-1].probe = probe
            return  # nothing was sent in the round that just ended
        self._rounds.append(_Round(next_pn, probe))
        self._rounds_begun += 1
        if len(self._rounds) > KEEP_ROUNDS:
            self._rounds.popleft()
        self._starts = [r.start_pn for r in self._rounds]
        self._judge()

    def on_resolved(
        self,
        pn: int,
        size: int,
        sent_s: float,
        lost: bool,
        app_limited: bool,
        startup: bool = False,
    ) -> None:
        """Packet ``pn`` was acknowledged on time (``lost`` False) or lost / rebuilt late;
        ``startup``: sent in the rate's start-up with a bulk stream's bytes, which the
        first rounds' judgement takes app-limited or not (a gateway fed by its service's
        socket in 64 kB reads sends start-up in pieces, each marked app-limited: judging
        none of them, the lab's policer was found a round or two later, 2,180 datagrams in
        against 1,208)."""
        i = bisect_right(self._starts, pn) - 1
        if i < 0:
            return
        r = self._rounds[i]
        if lost:
            r.lost += size
            self._lossy_round = max(self._lossy_round, self._rounds_begun - len(self._rounds) + i)
        else:
            r.acked += size
        r.packets += 1
        r.app_limited += app_limited
        if sent_s < r.first_s:
            r.first_s = sent_s
        if sent_s > r.last_s:
            r.last_s = sent_s
        if self.early and not lost and (startup or not app_limited) and not self.policed:
            self._judge_early(pn, size, sent_s)
        elif self._refine and not lost:
            self._refine_ceiling(pn, size, sent_s)

    @property
    def suspect(self) -> bool:
        """In the first rounds, the newest acknowledgements miss at least
        :data:`EARLY_LOSS` of what was sent (a policer's answer to an overdrive, or a
        queue's overflow, not yet told apart): FEC adds no repairs for that loss, which
        would only add to what the path drops (in the lab 1,038 repairs went out at the
        link's rate before the policer was found)."""
        return self.early and self._suspect

    @property
    def timing(self) -> bool:
        """The first rounds' judgement wants each ACK's times (:attr:`now_s`,
        :attr:`recv_s`): armed, or refining the ceiling it found."""
        return self.early or self._refine

    def _judge_early(self, pn: int, size: int, sent_s: float) -> None:
        """One more packet acknowledged in order in the first rounds: is the window of the
        last :data:`EARLY_ACKED` such packets a policer's (see the module's text)?"""
        w = self._early
        if w and pn <= w[-1][0]:
            return  # acknowledged out of order: its number says nothing of the gaps
        w.append((pn, size, sent_s))
        self._early_queued.append(self.queued_now)
        n = len(w)
        if n < EARLY_ACKED:
            return
        half = n // 2
        first_pn = w[0][0]
        mid_pn = w[half][0]
        # the first half's packets are numbered first_pn .. mid_pn − 1 with the gaps, the
        # second's mid_pn .. pn
        lost_first = 1 - half / (mid_pn - first_pn)
        lost_second = 1 - (n - half) / (pn - mid_pn + 1)
        self._suspect = lost_second >= EARLY_LOSS
        if min(lost_first, lost_second) < EARLY_LOSS:
            return  # (asked first: it is what almost every packet answers)
        if 2 * sum(self._early_queued) > n:
            # a tail-drop queue that overflows delays every packet it passes; a host late
            # to acknowledge (the lab's, reading a batch) delays some
            return
        mid_s = w[half][2]
        if sent_s <= mid_s:
            return
        # the rate from the second half alone: the first may still hold the tail of the
        # bucket's burst (up to 15 of its 24 packets, passed whole, at 60 % lost)
        delivered = sum(w[i][1] for i in range(half + 1, n))  # sent after w[half]
        self.early, self.early_detected = False, True
        self._declare(delivered / (sent_s - mid_s))
        # the rest of what was sent before the hold, still on its way, refines the ceiling
        self._refine, self._refine_pn, self._refine_bytes = True, pn, 0
        self._check_hold = True
        self._refine_from_s = self._refine_last_s = self.recv_s
        self._refine_until_s = self.now_s

    def _refine_ceiling(self, pn: int, size: int, sent_s: float) -> None:
        """After the first rounds' judgement: the ceiling over everything sent before the
        hold began, timed by when it reached the peer (:data:`EARLY_ACKED` packets span a
        few ms of sending at the link's rate, and the lab's sender, CPU-bound there, and
        its emulator, reading its device in batches, put their send times 5–10 % off)."""
        if pn <= self._refine_pn:
            return  # out of order, or filled in late (dropped, rebuilt by FEC)
        recv_s = self.recv_s
        if sent_s < self._refine_until_s:
            self._refine_pn = pn
            if recv_s > self._refine_from_s:  # arrived after the window's last one
                self._refine_bytes += size
                self._refine_last_s = recv_s
            return
        self._refine = False  # sent in the hold: the packets before it are all in
        span = self._refine_last_s - self._refine_from_s
        if self.policed and span >= REFINE_MIN_S:
            self.ceiling_bytes_per_s = self._refine_bytes / span

    def _settled(self) -> list[_Round]:
        rounds = list(self._rounds)
        for r, after in pairwise(rounds):
            # a round lasts until the next one's first packet: idle time counts (the
            # bucket refills in it), or a window-limited round would read as faster
            if after.first_s < math.inf:
                r.end_s = max(r.end_s, after.first_s)
        rounds = rounds[: -SETTLE_ROUNDS - 1]
        return [
            r
            for r in rounds[-WINDOW_ROUNDS:]
            if r.packets >= 4 and 2 * r.app_limited < r.packets and r.send_rate > 0
        ]

    def _judge(self) -> None:
        self.needs_spread = False
        if not self.policed and self._lossy_round < self._rounds_begun - len(self._rounds):
            return  # no kept round lost anything: neither a policer nor a spread to ask for
        rounds = self._settled()
        if self.policed:
            self._judge_probes(rounds)
            return
        if not rounds:
            return
        self.needs_spread = rounds[-1].lost >= SPREAD_LOSS * (rounds[-1].acked + rounds[-1].lost)
        if len(rounds) < MIN_ROUNDS or self._since_queue < QUEUED_QUIET_ROUNDS:
            return
        top = max(r.send_rate for r in rounds) / GROUP_SPAN
        bottom = min(r.send_rate for r in rounds) * GROUP_SPAN
        high = [r for r in rounds if r.send_rate >= top]
        low = [r for r in rounds if r.send_rate <= bottom]
        groups = [_group(high), _group(low)]
        if any(g is None for g in groups):
            return
        (s_hi, d_hi, loss_hi), (s_lo, d_lo, _) = groups  # type: ignore[misc]
        if s_hi < MIN_SPREAD * s_lo or d_lo <= 0 or d_hi <= 0:
            return
        self.needs_spread = False
        e = math.log(d_hi / d_lo) / math.log(s_hi / s_lo)
        self.elasticity = e
        _, _, loss_lo = groups[1]  # type: ignore[misc]
        flat = e <= POLICED_ELASTICITY
        # the low group under the ceiling: delivery follows it there, but loss does not
        rising = loss_lo <= loss_hi * RISING_LOSS and e <= RISING_ELASTICITY
        z = _loss_rise_z(high, low)
        few = min(sum(r.packets for r in high), sum(r.packets for r in low)) < FLAT_MIN_PACKETS
        flat = flat and z >= (LOSS_RISE_Z if few else FLAT_RISE_Z)
        rising = rising and z >= LOSS_RISE_Z
        if loss_hi >= MIN_LOSS and (flat or rising):
            self._declare(_ceiling(rounds))

    def _declare(self, ceiling: float) -> None:
        """Policed at ``ceiling`` bytes/s from now on: the hold begins."""
        self.detections += 1
        self.early = False
        # FEC sizes for the hold's own loss: none until its rounds settle (what was lost
        # before was the policer's answer to the overdrive, which the hold ends)
        self.policed, self.hold_loss, self._hold_floor = True, 0.0, None
        self.ceiling_bytes_per_s = ceiling
        last = self._released_ceiling
        if last is not None and abs(ceiling / last - 1) < SAME_CEILING:
            self.probe_rounds = min(2 * self.probe_rounds, MAX_PROBE_ROUNDS)
        for r in self._rounds:  # sent before the hold, settled or not
            r.judged = True

    def _judge_probes(self, rounds: list[_Round]) -> None:
        ceiling = self.ceiling_bytes_per_s or 0.0
        held = [r for r in rounds if not r.judged and not r.probe]
        if held and (g := _group(held)) is not None:
            floor = g[2] if self._hold_floor is None else min(self._hold_floor, g[2])
            self._hold_floor, self.hold_loss = floor, g[2]
            if self._check_hold and g[2] >= MIN_LOSS:
                # the first rounds' ceiling, timed over tens of ms, read high (in the lab
                # 2.81 MB/s at 2.45, held for 3.6 s until a probe compared): the hold sent
                # above the policer by about what it lost. Its share off the ceiling puts
                # the hold at the policed rate; random loss beneath the policer lowers the
                # ceiling by its share (as the rounds' judgement does), once.
                self.ceiling_bytes_per_s = ceiling = ceiling * (1 - g[2])
                self._hold_floor, self.hold_loss = None, 0.0  # the overshoot's, not the hold's
                floor = g[2]
                for r in self._rounds:  # sent above the policer, settled or not
                    r.judged = True
            self._check_hold = False
            if g[2] >= floor + RELEASE_LOSS:
                # the hold lost far more than it did: the policer was lowered; find it again
                self._release()
                return
        for r in held:
            r.judged = True
        probes = [r for r in rounds if not r.judged and r.probe]
        if len(probes) < self.probe_rounds:
            return  # a probe is judged whole: its first round may pass on a full bucket
        for r in probes:
            r.judged = True
        g, floor = _group(probes), self._hold_floor or 0.0
        if g is None:
            return
        last = probes[-1]
        last_loss = last.lost / max(1, last.acked + last.lost)
        if (
            g[2] < floor + MIN_LOSS
            and g[1] >= RELEASE_GROWTH * ceiling * (1 - floor)
            and last_loss < floor + LAST_PROBE_LOSS
        ):
            self._release()
            return
        hold = [r for r in rounds if not r.probe]
        h = _group(hold)
        if h is None or h[2] < MIN_LOSS or g[0] <= h[0]:
            return
        if math.log(g[1] / h[1]) / math.log(g[0] / h[0]) <= POLICED_ELASTICITY:
            # the probe delivered no more than the hold, which lost too: the hold is
            # above the ceiling (measured on a bucket's help); what the hold delivers is it
            self.ceiling_bytes_per_s = min(ceiling, _ceiling(hold))

    def release(self) -> None:
        """Not a policer after all (a queue stood behind the hold): forget the ceiling."""
        self._release()
        self._since_queue = 0

    def _release(self) -> None:
        self._released_ceiling = self.ceiling_bytes_per_s
        self.policed, self.ceiling_bytes_per_s = False, None
        self.hold_loss = self._hold_floor = None


def _ceiling(rounds: list[_Round]) -> float:
    """The policed rate: the median delivery rate of the rounds that lost (their bucket was
    empty; the first round over it still drew on a full bucket, so not their mean)."""
    lossy = [r for r in rounds if r.lost >= MIN_LOSS * (r.acked + r.lost)] or rounds
    rates = sorted(r.acked / r.span_s for r in lossy)
    return rates[len(rates) // 2]


def _loss_rise_z(high: list[_Round], low: list[_Round]) -> float:
    """How far the high group's packet loss exceeds the low group's, in standard errors of
    the difference were both one random loss rate (the two-proportion z statistic)."""
    n_hi, n_lo = sum(r.packets for r in high), sum(r.packets for r in low)
    lost_hi = sum(r.lost for r in high) / max(1, sum(r.acked + r.lost for r in high))
    lost_lo = sum(r.lost for r in low) / max(1, sum(r.acked + r.lost for r in low))
    pooled = (lost_hi * n_hi + lost_lo * n_lo) / (n_hi + n_lo)
    spread = (pooled * (1 - pooled) * (1 / n_hi + 1 / n_lo)) ** 0.5
    if spread <= 0:
        return math.inf if lost_hi > lost_lo else 0.0
    return (lost_hi - lost_lo) / spread


def _group(rounds: list[_Round]) -> tuple[float, float, float] | None:
    """Send rate, delivery rate and loss of ``rounds`` together (None: too few packets)."""
    if sum(r.packets for r in rounds) < MIN_GROUP_PACKETS:
        return None
    acked = sum(r.acked for r in rounds)
    sent = acked + sum(r.lost for r in rounds)
    span = sum(r.span_s for r in rounds)
    if span <= 0 or sent <= 0:
        return None
    return sent / span, acked / span, 1 - acked / sent
