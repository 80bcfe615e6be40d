"""Congestion controllers: the registry, NewReno and CUBIC reactions, and the BBR-style model.

BBR is checked twice: sans-IO with synthetic rate samples (every estimate, state and
gain of draft-cardwell-iccrg-bbr-congestion-control-02 as the reference's §12.3.3
quotes it), and on the simulated 20 Mbit/s, 100 ms path of §12.3.2.
"""

from __future__ import annotations

import math

import pytest

from tierwise.errors import LocalProtocolError
from tierwise.lab.bench.capture import Arrival, rounds
from tierwise.proto import CONTROLLERS, Receiver, Sender, make_controller
from tierwise.proto.congestion import (
    BBR_PROBE_BW_GAINS,
    Bbr,
    BbrLinux,
    BbrState,
    Cubic,
    NewReno,
    RateSample,
)
from tierwise.sim import PathSpec, TcpSpec, run_request
from tierwise.sim.engine import Simulator
from tierwise.sim.link import Link
from tierwise.sim.transport import TransferEnd

from .pair import MSS, Pair

# --- registry ---


def test_registry_has_every_controller():
    """slowstart, newreno, cubic and bbr are registered by name."""
    assert {"slowstart", "newreno", "cubic", "bbr"} <= set(CONTROLLERS)
    assert isinstance(make_controller("bbr", mss=MSS, initial_window=10), Bbr)


def test_unknown_name_lists_the_known_ones():
    """make_controller names every registered controller in the error."""
    with pytest.raises(LocalProtocolError) as err:
        make_controller("vegas", mss=MSS, initial_window=10)
    assert "'vegas'" in str(err.value)
    assert ", ".join(sorted(CONTROLLERS)) in str(err.value)


# --- NewReno and CUBIC reactions ---


def test_newreno_halves_the_flight_and_collapses_on_rto():
    """RFC 5681: ssthresh = max(flight/2, 2 MSS); RTO: cwnd = 1 MSS."""
    cc = NewReno(mss=MSS, initial_window=10)
    cc.on_congestion(now=0.0, in_flight=30 * MSS)
    assert (cc.cwnd, cc.ssthresh) == (15 * MSS, 15 * MSS)
    cc.on_congestion(now=0.0, in_flight=MSS)
    assert cc.ssthresh == 2 * MSS
    cc.on_rto(now=0.0, in_flight=8 * MSS)
    assert (cc.cwnd, cc.ssthresh) == (MSS, 4 * MSS)


def test_cubic_backs_off_by_beta_and_returns_to_w_max_at_k():
    """RFC 9438: cwnd × 0.7 on loss; the window regains W_max at K = ∛(W_max·(1−β)/C) s."""
    cc = Cubic(mss=MSS, initial_window=100)
    cc.on_congestion(now=0.0, in_flight=100 * MSS)
    assert cc.cwnd == pytest.approx(70 * MSS)
    k = (100 * (1 - Cubic.BETA) / Cubic.C) ** (1 / 3)
    now = 0.0
    while now < k:
        now += 0.001
        cc.on_ack(acked=MSS, rtt=0.0, now=now, in_flight=0, delivery_rate=None)
    assert cc.k == pytest.approx(k)
    assert cc.cwnd / MSS == pytest.approx(100, rel=0.01)


# --- BBR, sans-IO ---


class Rounds:
    """Feeds a Bbr one ACK at a time; each ACK starts a new round unless told otherwise."""

    def __init__(self, bbr: Bbr) -> None:
        self.bbr = bbr
        self.delivered = 0
        self.round_mark = 0

    def ack(
        self,
        now: float,
        rate: float | None,
        *,
        rtt: float | None = 0.1,
        in_flight: int = 0,
        prior_in_flight: int | None = None,
        app_limited: bool = False,
        lost: int = 0,
        new_round: bool = True,
        acked: int = MSS,
    ) -> RateSample:
        prior = self.delivered if new_round else self.round_mark - 1
        if new_round:
            self.round_mark = self.delivered + acked
        self.delivered += acked
        sample = RateSample(
            delivery_rate=rate,
            delivered=self.delivered - prior,
            interval_s=0.1,
            prior_delivered=prior,
            total_delivered=self.delivered,
            app_limited=app_limited,
            acked=acked,
            lost=lost,
            prior_in_flight=in_flight if prior_in_flight is None else prior_in_flight,
            rtt=rtt,
        )
        self.bbr.on_rate_sample(sample=sample, now=now, in_flight=in_flight)
        self.bbr.on_ack(acked=acked, rtt=rtt, now=now, in_flight=in_flight, delivery_rate=rate)
        return sample


def bbr_in_probe_bw(btlbw: float = 1e6, min_rtt: float = 0.1) -> tuple[Bbr, Rounds]:
    """A Bbr past Startup and Drain with the given estimates, at ``now`` = 1 s."""
    bbr = Bbr(mss=MSS, initial_window=10)
    feed = Rounds(bbr)
    for i in range(4):
        feed.ack(0.1 * (i + 1), btlbw, rtt=min_rtt, in_flight=10**9)
    assert bbr.state is BbrState.DRAIN
    feed.ack(0.5, btlbw, rtt=min_rtt, in_flight=0)
    assert bbr.state is BbrState.PROBE_BW
    return bbr, feed


def test_bbr_starts_with_the_reference_gains():
    """Startup: pacing gain 4 ln 2 ≈ 2.77 and cwnd gain 2 (draft-02, as §12.3.3 quotes it)."""
    bbr = Bbr(mss=MSS, initial_window=10)
    assert bbr.state is BbrState.STARTUP
    assert bbr.pacing_gain == pytest.approx(4 * math.log(2)) == pytest.approx(2.77, abs=0.005)
    assert bbr.cwnd_gain == 2
    assert bbr.cwnd == 10 * MSS
    assert bbr.pacing_rate == pytest.approx(bbr.pacing_gain * 10 * MSS / 0.001)


def test_bbr_first_rtt_sets_the_pacing_rate_from_the_initial_window():
    """On the first RTT sample: pacing = 2.77 × IW / RTT (Linux's rate from the first RTT)."""
    bbr = Bbr(mss=MSS, initial_window=10)
    Rounds(bbr).ack(0.1, 1000.0, rtt=0.1)
    assert bbr.pacing_rate == pytest.approx(4 * math.log(2) * 10 * MSS / 0.1)


def test_bbr_linux_runs_the_kernels_startup_and_drain_gains():
    """bbr-linux: Startup 2/ln 2 for pacing and cwnd (what TCP_CC_INFO reports), Drain ln 2/2."""
    linux = make_controller("bbr-linux", mss=MSS, initial_window=10)
    assert isinstance(linux, BbrLinux)
    assert (linux.pacing_gain, linux.cwnd_gain) == pytest.approx((2 / math.log(2),) * 2)
    Rounds(linux).ack(0.1, 1000.0, rtt=0.1)
    assert linux.pacing_rate == pytest.approx(2 / math.log(2) * 10 * MSS / 0.1)
    draft = Bbr(mss=MSS, initial_window=10)
    assert (draft.pacing_gain, draft.cwnd_gain) == pytest.approx((4 * math.log(2), 2.0))
    linux._enter(BbrState.DRAIN, 0.0)
    assert linux.pacing_gain == pytest.approx(math.log(2) / 2)


def test_bbr_linux_cold_request_has_the_kernels_round_shape():
    """Cold 354,640 B at 100 Mbit/s, 200 ms: IW 10 at once, 20 paced over > RTT/4, then the rest.

    The lab's kernel BBR shows the same (1.426 s measured; docs/validation.md).
    """
    path = PathSpec(12.5e6, 12.5e6, 0.2, queue_bytes=1.5e6)
    tcp = TcpSpec(cc="bbr-linux", initial_window=10, handshake_rtts=1, syn_window=65_535)
    r = run_request(path, tcp, 354_640, 1000, 0.03, trace=True)
    sends = [Arrival(row[0], row[4]) for row in r.trace.rows if row[1:3] == ("client", "send")]
    grouped = rounds(sends, gap_s=0.05)  # the lab's grouping of captured arrivals
    assert [g.segments for g in grouped[:2]] == [10, 20]
    assert grouped[0].spread_s < 0.005 and grouped[1].spread_s > 0.05
    assert len(grouped) == 3
    assert r.time_s == pytest.approx(1.43, abs=0.02)


def test_bbr_btlbw_is_the_max_of_the_last_ten_rounds():
    """A high sample holds for 10 rounds, then the lower ones take over."""
    bbr = Bbr(mss=MSS, initial_window=10)
    feed = Rounds(bbr)
    feed.ack(0.1, 100_000.0)
    for r in range(2, 11):
        feed.ack(0.1 * r, 50_000.0)
        assert bbr.btlbw == 100_000.0, r
    feed.ack(1.1, 50_000.0)
    assert bbr.round_count == 11
    assert bbr.btlbw == 50_000.0


def test_bbr_app_limited_samples_only_raise_btlbw():
    """An app-limited sample below the estimate says nothing; one above it counts."""
    bbr = Bbr(mss=MSS, initial_window=10)
    feed = Rounds(bbr)
    feed.ack(0.1, 100_000.0)
    for r in range(2, 14):
        feed.ack(0.1 * r, 10_000.0, app_limited=True)
    assert bbr.btlbw == 100_000.0
    feed.ack(1.5, 150_000.0, app_limited=True)
    assert bbr.btlbw == 150_000.0


def test_bbr_round_counts_by_delivered_bytes():
    """ACKs for data sent before the round began do not end it."""
    bbr = Bbr(mss=MSS, initial_window=10)
    feed = Rounds(bbr)
    feed.ack(0.1, 1e5)
    for _ in range(5):
        feed.ack(0.1, 1e5, new_round=False)
    assert bbr.round_count == 1
    feed.ack(0.2, 1e5)
    assert bbr.round_count == 2


def test_bbr_rounds_with_a_real_sender():
    """Pair: the first ACK opens round 1; the second round ends with data sent after it."""
    p = Pair("bbr")
    first, now = [], 0.0
    while len(first) < 10:  # paced at 2.77 × IW per ms before any RTT: 31 µs apart
        first += p.send(now)
        now = p.sender.get_timer()
    assert first[-1].sent_at == pytest.approx(9 * MSS / (4 * math.log(2) * 10 * MSS / 0.001))
    acks = p.arrive(first, 0.05)
    for i, a in enumerate(acks):
        p.ack([a], 0.1 + i * 0.0001)
    assert p.sender.cc.round_count == 1
    second = p.send(0.101)
    assert second
    p.round_trip(second, 0.101, 0.1)
    assert p.sender.cc.round_count == 2


def test_bbr_min_rtt_is_a_ten_second_window():
    """A larger RTT does not replace RTprop until it is 10 s old."""
    bbr = Bbr(mss=MSS, initial_window=10)
    feed = Rounds(bbr)
    feed.ack(0.1, 1e5, rtt=0.1)
    feed.ack(5.0, 1e5, rtt=0.15)
    assert bbr.min_rtt == 0.1
    feed.ack(10.2, 1e5, rtt=0.15)
    assert bbr.min_rtt == 0.15


def test_bbr_startup_ends_after_three_rounds_under_25_percent_growth():
    """Growth ≥ 25 % resets the count; three rounds below it end Startup, then Drain at 1/2."""
    bbr = Bbr(mss=MSS, initial_window=10)
    feed = Rounds(bbr)
    for i, rate in enumerate([100e3, 124e3, 150e3, 160e3, 180e3]):
        feed.ack(0.1 * (i + 1), rate, in_flight=10**9)
        assert bbr.state is BbrState.STARTUP
    assert bbr.full_bw == 150e3
    feed.ack(0.6, 185e3, in_flight=10**9)
    assert bbr.state is BbrState.DRAIN
    assert (bbr.pacing_gain, bbr.cwnd_gain) == (0.5, 2.0)
    assert bbr.pacing_rate == pytest.approx(0.5 * 185e3 * 0.99)
    feed.ack(0.7, 185e3, in_flight=int(185e3 * 0.1))
    assert bbr.state is BbrState.PROBE_BW
    assert bbr.pacing_gain == 1.0


def test_bbr_probe_bw_cycles_one_phase_per_min_rtt():
    """Gains 1.25, 0.75, 1 ×6; each phase lasts RTprop (from the first cruise phase)."""
    bbr, feed = bbr_in_probe_bw()
    bdp = 1e6 * 0.1
    gains = []
    for i in range(8):
        feed.ack(0.6 + 0.11 * i, 1e6, in_flight=int(bdp), prior_in_flight=int(1.3 * bdp))
        gains.append(bbr.pacing_gain)
    assert gains == [1.0] * 6 + [1.25, 0.75]
    assert list(BBR_PROBE_BW_GAINS) == [1.25, 0.75, 1, 1, 1, 1, 1, 1]


def test_bbr_probe_up_waits_for_the_flight_and_probe_down_ends_early():
    """1.25 holds until the flight reaches 1.25 BDP + 3 quanta; 0.75 ends at one BDP + 3."""
    bbr, feed = bbr_in_probe_bw()
    bdp = 1e6 * 0.1
    now = 0.5
    while bbr.pacing_gain != 1.25:
        now += 0.11
        feed.ack(now, 1e6, in_flight=int(bdp))
    feed.ack(now + 0.2, 1e6, prior_in_flight=int(1.25 * bdp))  # short of the 3 quanta
    assert bbr.pacing_gain == 1.25
    feed.ack(now + 0.21, 1e6, prior_in_flight=int(1.25 * bdp) + 3 * MSS)
    assert bbr.pacing_gain == 0.75
    feed.ack(now + 0.22, 1e6, prior_in_flight=int(bdp) + 3 * MSS)
    assert bbr.pacing_gain == 1.0


def test_bbr_pacing_is_gain_times_btlbw_less_one_percent():
    """ProbeBW cruise: pacing = 1 × BtlBw × 0.99 (draft-02 pacing margin)."""
    bbr, _ = bbr_in_probe_bw(btlbw=2e6)
    assert bbr.pacing_rate == pytest.approx(2e6 * 0.99)


def test_bbr_cwnd_is_two_bdp_and_at_least_four_segments():
    """cwnd moves to 2 × BtlBw × RTprop + 3 quanta (draft-00 BBRInflight), ≥ 4 segments."""
    bbr, feed = bbr_in_probe_bw(btlbw=1e6, min_rtt=0.1)
    for i in range(400):
        feed.ack(0.6 + i * 1e-4, 1e6, new_round=False)
    assert bbr.cwnd == pytest.approx(2 * 1e6 * 0.1 + 3 * MSS)
    small, feed = bbr_in_probe_bw(btlbw=1e3, min_rtt=0.1)
    feed.ack(0.6, 1e3, new_round=False)
    assert small.cwnd == 4 * MSS


def test_bbr_loss_lowers_neither_rate_nor_window():
    """BBRv1: a loss episode is not a congestion signal."""
    bbr, feed = bbr_in_probe_bw()
    cwnd, rate = bbr.cwnd, bbr.pacing_rate
    bbr.on_congestion(now=0.6, in_flight=0)
    assert (bbr.cwnd, bbr.pacing_rate) == (cwnd, rate)
    feed.ack(0.61, 1e6, lost=5 * MSS, new_round=False)
    assert (bbr.cwnd, bbr.pacing_rate) == (cwnd + MSS, rate)


def test_bbr_rto_collapses_the_window_until_recovered():
    """RTO: one segment (then the 4-segment floor on ACKs); the old window back when recovered."""
    bbr, feed = bbr_in_probe_bw()
    cwnd = bbr.cwnd
    bbr.on_rto(now=0.6, in_flight=0)
    assert bbr.cwnd == MSS
    feed.ack(0.7, 1e6, new_round=False)
    assert bbr.cwnd == 4 * MSS
    bbr.on_recovered(now=0.8)
    assert bbr.cwnd == cwnd


def test_bbr_probe_rtt_after_ten_seconds_without_a_new_min():
    """RTprop 10 s old: ProbeRTT caps cwnd at 4 segments for 200 ms and a round, then ProbeBW."""
    bbr, feed = bbr_in_probe_bw()
    for i in range(300):
        feed.ack(0.6 + i * 1e-4, 1e6, new_round=False)
    cwnd = bbr.cwnd
    assert cwnd == 2 * 1e6 * 0.1 + 3 * MSS
    feed.ack(10.5, 1e6, rtt=0.12, in_flight=50 * MSS, new_round=False)
    assert bbr.state is BbrState.PROBE_BW  # RTprop last refreshed at 0.63 s
    feed.ack(10.7, 1e6, rtt=0.12, in_flight=50 * MSS, new_round=False)
    assert bbr.state is BbrState.PROBE_RTT
    assert (bbr.cwnd, bbr.min_rtt, bbr.pacing_gain) == (4 * MSS, 0.12, 1.0)
    feed.ack(10.8, 1e6, rtt=0.12, in_flight=4 * MSS, new_round=False)  # done at 11.0 s
    feed.ack(10.95, 1e6, rtt=0.12, in_flight=4 * MSS)
    assert bbr.state is BbrState.PROBE_RTT
    feed.ack(11.0, 1e6, rtt=0.12, in_flight=4 * MSS, new_round=False)
    assert bbr.state is BbrState.PROBE_BW
    assert bbr.cwnd == cwnd + MSS  # restored, then this ACK's step toward 2 × 1 MB/s × 120 ms


# --- BBR on the simulated §12.3.2 path: 20 Mbit/s up, 100 ms RTT ---

MBIT = 125_000.0
PATH = PathSpec(20 * MBIT, 100 * MBIT, 0.1)
SIZE = 30_000_000
WIRE_RATE = 20 * MBIT  # bytes/s on the wire
PAYLOAD_RATE = WIRE_RATE * 1168 / 1228  # bytes/s of payload: BtlBw is in payload bytes
IDEAL_S = SIZE * (1228 / 1168) / WIRE_RATE  # 12.616 s: the link busy from first to last bit


def tcp(cc: str) -> TcpSpec:
    return TcpSpec(cc=cc, mss=1168, header=60, ack_bytes=92)


@pytest.fixture(scope="module")
def bbr_bulk():
    """One BBR transfer driven by hand, sampling the uplink backlog every 10 ms."""
    sim = Simulator(0)
    up, down = Link(sim, PATH.up_rate, 0.05), Link(sim, PATH.down_rate, 0.05)
    sender = Sender(mss=1168, header=60, initial_window=10, cc="bbr")
    marks: dict[str, float] = {}
    backlog: list[tuple[float, float]] = []

    def got(n: int) -> None:
        if n >= SIZE:
            marks.setdefault("done", sim.now)

    def probe() -> None:
        backlog.append((sim.now, up.backlog_bytes()))
        if "done" not in marks:
            sim.schedule(0.01, probe)

    end = TransferEnd(sim, sender, Receiver(ack_wire=92), up, down, "client", None, got)
    sim.at(0.0, end.write, SIZE)
    sim.at(0.0, probe)
    sim.run(until=60.0)
    return marks["done"], sender, backlog


def test_bbr_bulk_transfer_time():
    """30 MB: within 5 % of the busy-link time and 2 % of loss-free NewReno (1 % pacing margin)."""
    bbr = run_request(PATH, tcp("bbr"), SIZE, 0, 0.0).time_s
    newreno = run_request(PATH, tcp("newreno"), SIZE, 0, 0.0).time_s
    assert IDEAL_S + 0.05 < bbr < 1.05 * IDEAL_S
    assert newreno < bbr < 1.02 * newreno


def test_bbr_btlbw_converges_to_the_payload_rate(bbr_bulk):
    """BtlBw → 2.5 MB/s × 1168/1228 of payload (within 1 %); RTprop → 100 ms + one serialisation."""
    _, sender, _ = bbr_bulk
    assert sender.cc.btlbw == pytest.approx(PAYLOAD_RATE, rel=0.01)
    assert sender.cc.min_rtt == pytest.approx(0.1 + 1228 / WIRE_RATE, rel=1e-3)
    assert sender.cc.state is BbrState.PROBE_BW
    assert sender.stats.retransmissions == 0


def test_bbr_keeps_the_queue_bounded(bbr_bulk):
    """Startup's queue peaks near one BDP; in ProbeBW only the 1.25 phase's ≈ ¼ BDP remains."""
    done, _, backlog = bbr_bulk
    bdp = WIRE_RATE * 0.1
    assert max(b for _, b in backlog) < 1.5 * bdp
    assert max(b for t, b in backlog if 3.0 < t < done - 0.2) < 0.3 * bdp


@pytest.mark.slow
@pytest.mark.parametrize(("loss", "speedup"), [(0.01, 10), (0.14, 40)])
def test_bbr_under_random_loss_is_far_faster_than_newreno(loss, speedup):
    """Random loss barely slows BBR (≈ its (1 − p)² cruise) while NewReno crawls (Mathis)."""
    clean = run_request(PATH, tcp("bbr"), SIZE, 0, 0.0).time_s
    lossy = PathSpec(20 * MBIT, 100 * MBIT, 0.1, up_loss=loss)
    bbr = run_request(lossy, tcp("bbr"), SIZE, 0, 0.0)
    newreno = run_request(lossy, tcp("newreno"), SIZE, 0, 0.0)
    assert clean < bbr.time_s < 1.05 * clean / (1 - loss) ** 2
    assert newreno.time_s > speedup * bbr.time_s
    assert bbr.up["retransmissions"] >= bbr.up["link_lost"] > 0


def test_bbr_v1_paces_at_btlbw_with_no_margin():
    """bbr-v1 (draft-00): ProbeBW cruise paces at exactly 1 × BtlBw, with BBRv1's gains."""
    v1 = make_controller("bbr-v1", mss=MSS, initial_window=10)
    assert isinstance(v1, Bbr)
    assert (v1.pacing_margin, v1.gains[BbrState.STARTUP]) == (0.0, (2 / math.log(2),) * 2)
    v1.full_bw_reached, v1.pacing_gain = True, 1.0
    v1._btlbw.update(1, 2e6)
    v1._set_pacing_rate()
    assert v1.pacing_rate == 2e6
