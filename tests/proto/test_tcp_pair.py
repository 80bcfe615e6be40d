"""Sender and Receiver in pairs, synthetic time: exact segments, ACKs, timers and events."""

from __future__ import annotations

import pytest

from tierwise.errors import LocalProtocolError, ProtocolError
from tierwise.proto import Ack, Receiver, Segment, Sender
from tierwise.proto.congestion import CongestionController
from tierwise.proto.tcp import RTO_INITIAL_S, RTO_MIN_S

from .pair import ACK_WIRE, HEADER, MSS, Pair, Recorder


def seg(i: int, sent_at: float = 0.0, mss: int = MSS) -> Segment:
    """The i-th full segment of a stream, as a sender would build it."""
    return Segment(i * mss, mss, mss + HEADER, sent_at, False, 0, 0.0)


# --- initial window, slow start, congestion avoidance ---


@pytest.mark.parametrize(("mss", "header"), [(MSS, HEADER), (1168, 60)])
def test_initial_window_is_exactly_iw_full_segments(mss, header):
    """IW 10: ten segments of ``mss`` payload, ``mss + header`` on the wire, then nothing."""
    p = Pair(mss=mss, header=header, nbytes=100 * mss)
    segs = p.send(0.0)
    assert [s.seq for s in segs] == [i * mss for i in range(10)]
    assert {s.length for s in segs} == {mss}
    assert {s.wire for s in segs} == {mss + header}
    assert not any(s.retx for s in segs)
    assert p.send(0.0) == []
    assert p.sender.flight == 10 * mss
    assert p.sender.stats.segments_sent == 10
    assert p.sender.stats.bytes_on_wire == 10 * (mss + header)


def test_eleventh_segment_waits_for_an_ack():
    """One ACK in slow start frees its segment and grows cwnd by one: two new segments."""
    p = Pair()
    segs = p.send(0.0)
    assert p.send(0.05) == []
    p.round_trip(segs[:1], 0.0, 0.1)
    assert p.sender.cwnd == 11 * MSS
    assert [s.seq for s in p.send(0.1)] == [10 * MSS, 11 * MSS]


@pytest.mark.parametrize("k", [1, 4, 10])
def test_slow_start_adds_the_acked_bytes(k):
    """After k ACKs of one segment each, cwnd = IW + k segments."""
    p = Pair()
    segs = p.send(0.0)
    p.round_trip(segs[:k], 0.0, 0.1)
    assert p.sender.cwnd == (10 + k) * MSS
    assert p.sender.snd_una == k * MSS


def test_newreno_congestion_avoidance_adds_mss_squared_over_cwnd():
    """At or above ssthresh each ACKed segment adds mss²/cwnd (RFC 5681 §3.1)."""
    p = Pair()
    p.sender.cc.ssthresh = 10 * MSS
    segs = p.send(0.0)
    expected = 10.0 * MSS
    for i in range(3):
        p.round_trip(segs[i : i + 1], 0.0, 0.1)
        expected += MSS * MSS / expected
        assert p.sender.cwnd == pytest.approx(expected, rel=1e-12)


def test_slowstart_controller_grows_one_segment_per_segment_forever():
    """§12.3.2's model has no ssthresh: still +1 segment per ACKed segment after a loss."""
    p = Pair("slowstart")
    segs = p.send(0.0)
    p.round_trip(segs, 0.0, 0.1, drop=[0])
    assert p.sender.stats.congestion_events == 1
    assert p.sender.cwnd == 19 * MSS


# --- application-limited sending ---


def test_send_in_pieces_makes_short_segments():
    """Data handed over in pieces leaves as it comes: short segments, exact wire sizes."""
    p = Pair(nbytes=2500)
    assert [(s.seq, s.length, s.wire) for s in p.send(0.0)] == [
        (0, 1000, 1040),
        (1000, 1000, 1040),
        (2000, 500, 540),
    ]
    p.sender.send(300)
    p.sender.send(400)
    assert [(s.seq, s.length) for s in p.send(0.01)] == [(2500, 700)]
    assert p.send(0.02) == []


def test_done_when_everything_handed_over_is_acknowledged():
    """``done`` follows snd_una, not what was sent."""
    p = Pair(nbytes=1500)
    segs = p.send(0.0)
    assert not p.sender.done
    p.round_trip(segs[:1], 0.0, 0.1)
    assert not p.sender.done
    p.round_trip(segs[1:], 0.0, 0.1)
    assert p.sender.done
    assert p.sender.get_timer() is None


# --- retransmission timer (RFC 6298) ---


def test_initial_rto_runs_one_second_from_the_first_send():
    """No RTT yet: the timer is 1 s after the first send, and later sends do not push it."""
    p = Pair(initial_window=2)
    assert p.sender.get_timer() is None
    p.send(0.5)
    assert p.sender.get_timer() == 0.5 + RTO_INITIAL_S
    p.sender.cc.cwnd = 4 * MSS
    assert len(p.send(0.7)) == 2
    assert p.sender.get_timer() == 0.5 + RTO_INITIAL_S


def test_rtt_samples_follow_rfc6298_and_restart_the_timer():
    """srtt = R, rttvar = R/2, then the 1/8 and 1/4 gains; RTO = srtt + max(4·rttvar, 200 ms)."""
    p = Pair()
    segs = p.send(0.0)
    p.round_trip(segs[:1], 0.0, 0.1)
    s = p.sender
    assert (s.srtt, s.rttvar) == (pytest.approx(0.1), pytest.approx(0.05))
    assert s.rto == pytest.approx(0.1 + 4 * 0.05)
    assert s.get_timer() == pytest.approx(0.1 + 0.3)  # not 0.1 + the initial 1 s
    p.round_trip(segs[1:2], 0.0, 0.12)
    rttvar = 0.75 * 0.05 + 0.25 * abs(0.1 - 0.12)
    srtt = 0.875 * 0.1 + 0.125 * 0.12
    assert (s.srtt, s.rttvar) == (pytest.approx(srtt), pytest.approx(rttvar))
    assert s.rto == pytest.approx(srtt + max(4 * rttvar, RTO_MIN_S))
    assert s.get_timer() == pytest.approx(0.12 + srtt + max(4 * rttvar, RTO_MIN_S))


def test_rto_variance_term_has_a_200_ms_floor():
    """A 10 ms path waits srtt + 200 ms (Linux: srtt + max(4·rttvar, TCP_RTO_MIN))."""
    p = Pair()
    segs = p.send(0.0)
    p.round_trip(segs[:1], 0.0, 0.01)
    assert p.sender.rto == pytest.approx(0.01 + RTO_MIN_S)
    assert p.sender.get_timer() == pytest.approx(0.01 + 0.01 + RTO_MIN_S)


def test_long_steady_rtt_does_not_fire_one_rtt_after_a_retransmission():
    """On a 250 ms path with a steady RTT the timer sits ≥ 200 ms beyond the RTT."""
    p = Pair()
    segs = p.send(0.0)
    for i, seg in enumerate(segs[:5]):
        p.round_trip([seg], 0.0, 0.25 + 1e-6 * i)
    assert p.sender.rto >= p.sender.srtt + RTO_MIN_S - 1e-12


def test_sack_only_ack_does_not_restart_the_timer():
    """Only new cumulative data restarts the timer (RFC 6298 §5.3)."""
    p = Pair(cc=Recorder(), nbytes=10 * MSS)
    segs = p.send(0.0)
    p.round_trip(segs[1:2], 0.0, 0.1)  # segment 0 is missing: ACK 0 with a SACK block
    assert p.sender.snd_una == 0
    assert p.sender.get_timer() == RTO_INITIAL_S


def test_retransmitting_the_head_restarts_the_timer():
    """Resending the segment at snd_una re-arms the timer from now (Linux), with the new RTO."""
    p = Pair(cc=Recorder(), nbytes=10 * MSS)
    segs = p.send(0.0)
    p.round_trip(segs[1:2], 0.0, 0.1)
    [retx] = p.send(0.1)[:1]
    assert (retx.seq, retx.retx) == (0, True)
    assert p.sender.get_timer() == pytest.approx(0.1 + 0.3)


def test_rto_retransmits_from_snd_una_with_one_segment_and_backs_off():
    """Timeout: everything outstanding is lost, cwnd = 1 MSS, one segment from snd_una, RTO × 2."""
    p = Pair()
    p.send(0.0)
    p.sender.handle_timer(0.999)
    assert p.sender.stats.rtos == 0
    p.sender.handle_timer(1.0)
    s = p.sender
    assert s.stats.rtos == 1
    assert (s.cwnd, s.flight, s.cc.ssthresh) == (MSS, 0, 5 * MSS)
    assert s.get_timer() == pytest.approx(1.0 + 2 * RTO_INITIAL_S)
    [again] = p.send(1.0)
    assert (again.seq, again.retx, again.sent_at) == (0, True, 1.0)
    assert p.send(1.0) == []
    assert s.stats.retransmissions == 1


def test_rto_resends_only_what_was_not_sacked_in_sequence_order():
    """After a timeout the SACKed segment stays delivered; the rest go again from snd_una."""
    p = Pair(cc=Recorder(), nbytes=10 * MSS)
    segs = p.send(0.0)
    p.round_trip(segs, 0.0, 0.1, drop=[5, 6, 8, 9])  # 5 and 6 are lost by RACK, 8, 9 unknown
    assert p.sender.snd_una == 5 * MSS
    assert [s.seq for s in p.send(0.1)] == [5 * MSS, 6 * MSS]
    p.sender.handle_timer(p.sender.get_timer())
    p.sender.cc.cwnd = 10 * MSS
    assert [(s.seq, s.retx) for s in p.send(0.5)] == [(k * MSS, True) for k in (5, 6, 8, 9)]


def test_segment_on_the_wire_keeps_its_send_time_when_retransmitted():
    """Retransmitting does not rewrite a copy already sent: a late original echoes its own time."""
    p = Pair(cc=Recorder(), nbytes=MSS)
    [first] = p.send(0.0)
    p.sender.handle_timer(1.0)
    [second] = p.send(1.0)
    assert (first.sent_at, second.sent_at) == (0.0, 1.0)
    [ack] = p.arrive([first], 1.05)
    assert ack.echo == 0.0
    p.ack([ack], 1.1)
    assert p.sender.srtt == pytest.approx(1.1)


# --- RACK loss detection and recovery episodes ---


def test_rack_marks_a_segment_sent_before_a_sacked_one():
    """A hole below a SACKed segment of its own burst is lost at once, resent before new data."""
    p = Pair()
    segs = p.send(0.0)
    p.round_trip(segs, 0.0, 0.1, drop=[2])
    s = p.sender
    assert s.stats.congestion_events == 1
    out = p.send(0.1)
    assert (out[0].seq, out[0].retx) == (2 * MSS, True)
    assert [x.seq for x in out[1:]] == [(10 + i) * MSS for i in range(len(out) - 1)]
    assert not any(x.retx for x in out[1:])
    assert len(out) == int(s.cwnd // MSS)  # flight was 0: the whole window


def test_newreno_halves_once_per_episode():
    """The first loss halves FlightSize (RFC 5681 §3.1); the window holds until recovery ends."""
    p = Pair()
    segs = p.send(0.0)
    p.round_trip(segs, 0.0, 0.1, drop=[2])
    # At the SACK of segment 3: snd_una = 2, snd_nxt = 10 → FlightSize 8 segments.
    assert p.sender.cc.ssthresh == 4 * MSS
    assert p.sender.cwnd == pytest.approx(4 * MSS)
    assert p.sender.stats.congestion_events == 1


def test_one_congestion_event_per_episode_and_a_lost_retransmission_is_found_by_rack():
    """Losses before the recovery point are one episode; a lost resend is resent, no timeout."""
    rec = Recorder()
    p = Pair(cc=rec, nbytes=40 * MSS)
    round1 = p.send(0.0)
    p.round_trip(round1, 0.0, 0.1, drop=[2])
    assert [e["now"] for e in rec.events("congestion")] == [0.1]
    round2 = p.send(0.1)
    assert [s.seq for s in round2] == [2 * MSS] + [k * MSS for k in range(10, 19)]
    p.round_trip(round2, 0.1, 0.1, drop=[0, 3])  # the resend of 2 and new segment 12
    assert len(rec.events("congestion")) == 1  # same episode: recovery point was 10 MSS
    assert rec.events("recovered") == []
    round3 = p.send(0.2)
    assert [(s.seq, s.retx) for s in round3[:2]] == [(2 * MSS, True), (12 * MSS, True)]
    assert p.sender.stats.rtos == 0
    p.round_trip(round3, 0.2, 0.1)
    assert [e["now"] for e in rec.events("recovered")] == [pytest.approx(0.3)]
    round4 = p.send(0.3)
    p.round_trip(round4, 0.3, 0.1, drop=[1])
    assert len(rec.events("congestion")) == 2
    assert p.sender.stats.congestion_events == 2


# --- delivery-rate samples ---


def test_delivery_rate_sample_measures_the_bottleneck_spacing():
    """ACKs 10 ms apart: the second round's sample is 1000 B / 10 ms = 100 kB/s."""
    rec = Recorder()
    p = Pair(cc=rec)
    second_round = []
    for i, s in enumerate(p.send(0.0)):
        p.ack(p.arrive([s], 0.05 + i * 0.01), 0.1 + i * 0.01)
        second_round += p.send(0.1 + i * 0.01)
    assert [x.seq for x in second_round] == [(10 + i) * MSS for i in range(10)]
    first, last = rec.samples[0], rec.samples[9]
    assert first.delivery_rate == pytest.approx(1000 / 0.1)
    assert last.delivery_rate == pytest.approx(10_000 / 0.19)
    p.ack(p.arrive(second_round[:1], 0.15), 0.2)
    sample = rec.samples[10]
    assert (sample.prior_delivered, sample.total_delivered) == (1000, 11_000)
    assert sample.interval_s == pytest.approx(0.1)
    assert sample.delivery_rate == pytest.approx(100_000)
    assert sample.rtt == pytest.approx(0.1)


def test_app_limited_marking_starts_and_ends():
    """Nothing to send with the window open marks what follows app-limited until it is delivered."""
    rec = Recorder()
    p = Pair(cc=rec, nbytes=3 * MSS)
    early = p.send(0.0)
    p.sender.send(50 * MSS)
    later = p.send(0.05)
    assert [s.app_limited for s in early] == [False] * 3
    assert [s.app_limited for s in later] == [True] * 7
    p.round_trip(early, 0.0, 0.1)
    assert [s.app_limited for s in rec.samples] == [False] * 3
    p.round_trip(later[:1], 0.05, 0.1)
    assert rec.samples[-1].app_limited
    assert [s.app_limited for s in p.send(0.15)] == [False] * 4


def test_rate_sample_shorter_than_min_rtt_is_discarded():
    """The ACK of a spurious resend comes too soon to measure anything: no rate."""
    rec = Recorder()
    p = Pair(cc=rec, nbytes=MSS)
    [orig] = p.send(0.0)
    p.sender.handle_timer(1.0)
    p.send(1.0)
    p.ack(p.arrive([orig], 1.0), 1.05)
    assert rec.samples[-1].interval_s == pytest.approx(0.05)
    assert rec.samples[-1].delivery_rate is None


# --- pacing ---


def test_pacer_spaces_segments_by_payload_over_rate():
    """At 1 MB/s a 1000-byte segment leaves every 1 ms; get_timer is the pacing clock."""
    p = Pair(cc=Recorder(pacing_rate=1e6))
    assert [s.seq for s in p.send(0.0)] == [0]
    assert p.sender.get_timer() == pytest.approx(0.001)
    assert p.send(0.0005) == []
    assert [s.seq for s in p.send(0.001)] == [MSS]
    assert [s.seq for s in p.send(0.0025)] == [2 * MSS]
    assert p.sender.get_timer() == pytest.approx(0.0035)


def test_pacing_clock_is_not_a_timer_when_the_window_is_full():
    """A full window hides the pacing clock, so get_timer is the RTO, not a stale past time."""
    p = Pair(cc=Recorder(pacing_rate=1e6))
    for i in range(10):
        assert len(p.send(i * 0.001)) == 1
    assert p.sender.flight == 10 * MSS
    assert p.sender.get_timer() == RTO_INITIAL_S


# --- receiver ---


def test_receiver_acks_every_in_order_segment():
    """ACK every packet: cumulative ACK, no SACK, the segment's send time echoed."""
    r = Receiver(ack_wire=ACK_WIRE)
    assert r.receive(seg(0, 0.0), 0.05) == Ack(1000, (), 0.0, ACK_WIRE)
    assert r.receive(seg(1, 0.001), 0.051) == Ack(2000, (), 0.001, ACK_WIRE)
    assert (r.delivered, r.acks_sent) == (2000, 2)


def test_delayed_ack_every_second_segment_or_at_the_deadline():
    """ack_every=2, 40 ms: the 2nd segment is ACKed at once; a lone one at exactly now + 40 ms."""
    r = Receiver(ack_every=2, ack_delay=0.04, ack_wire=ACK_WIRE)
    assert r.receive(seg(0, 0.0), 0.05) is None
    assert r.get_timer() == 0.05 + 0.04
    assert r.receive(seg(1, 0.001), 0.06) == Ack(2000, (), 0.001, ACK_WIRE)
    assert r.get_timer() is None
    assert r.receive(seg(2, 0.002), 0.07) is None
    assert r.get_timer() == 0.07 + 0.04
    assert r.handle_timer(0.1) is None
    assert r.handle_timer(0.07 + 0.04) == Ack(3000, (), 0.002, ACK_WIRE)
    assert r.get_timer() is None
    assert r.acks_sent == 2


def test_out_of_order_acks_at_once_with_at_most_three_blocks_newest_first():
    """Each out-of-order arrival is ACKed at once; the newest (here highest) block first."""
    r = Receiver(ack_every=2, ack_delay=0.04)
    assert r.receive(seg(0), 0.0) is None
    assert r.receive(seg(2), 0.0).sack == ((2000, 3000),)
    assert r.receive(seg(4), 0.0).sack == ((4000, 5000), (2000, 3000))
    r.receive(seg(6), 0.0)
    ack = r.receive(seg(8), 0.0)
    assert (ack.ack, ack.sack) == (1000, ((8000, 9000), (6000, 7000), (4000, 5000)))


def test_sack_first_block_holds_the_segment_that_triggered_it():
    """RFC 2018 §4: a resend filling a low hole is reported first, then the recent blocks."""
    r = Receiver()
    for i in (0, 2, 4, 6, 8):
        r.receive(seg(i), 0.0)
    ack = r.receive(seg(3), 0.0)  # joins [2000, 3000) and [4000, 5000)
    assert ack.sack == ((2000, 5000), (8000, 9000), (6000, 7000))


def test_gap_fill_acks_at_once_cumulatively():
    """The segment that fills the hole is ACKed at once, even under ack_every=2."""
    r = Receiver(ack_every=2, ack_delay=0.04)
    assert r.receive(seg(0), 0.0) is None
    assert r.receive(seg(2, 0.002), 0.01) == Ack(1000, ((2000, 3000),), 0.002, 52)
    assert r.receive(seg(1, 0.001), 0.02) == Ack(3000, (), 0.001, 52)
    assert r.get_timer() is None


def test_duplicate_segment_is_acked_at_once():
    """A segment below rcv_nxt (a spurious resend) gets an immediate ACK."""
    r = Receiver(ack_every=2, ack_delay=0.04)
    r.receive(seg(0), 0.0)
    r.receive(seg(1), 0.0)
    assert r.receive(seg(0, 0.5), 0.6) == Ack(2000, (), 0.5, 52)


# --- errors ---


def test_unknown_controller_lists_the_known_ones():
    """A typo in cc names every registered controller."""
    with pytest.raises(LocalProtocolError, match=r"'renoo'.*known: .*bbr.*cubic.*newreno"):
        Sender(cc="renoo")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_window": 0}, "initial window must be ≥ 1"),
        ({"mss": 0}, "mss must be > 0"),
        ({"header": -1}, "header ≥ 0"),
    ],
)
def test_bad_sender_parameters(kwargs, message):
    """Impossible sender settings are LocalProtocolErrors that say what is wrong."""
    with pytest.raises(LocalProtocolError, match=message):
        Sender(**kwargs)


def test_ack_beyond_snd_nxt_and_negative_send_are_errors():
    """The sender refuses an ACK for data it never sent and a negative write."""
    p = Pair()
    p.send(0.0)
    with pytest.raises(LocalProtocolError, match="ACK 10001 beyond snd_nxt 10000"):
        p.sender.receive_ack(Ack(10_001, (), 0.0, 52), 0.1)
    with pytest.raises(LocalProtocolError, match="negative"):
        p.sender.send(-1)
    assert issubclass(LocalProtocolError, ProtocolError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ack_every": 0}, "ack_every must be ≥ 1"),
        ({"ack_delay": -0.1}, "ack_delay ≥ 0"),
        ({"ack_every": 2}, "needs an ack_delay"),
    ],
)
def test_bad_receiver_parameters(kwargs, message):
    """Impossible ACK policies are rejected when the receiver is built."""
    with pytest.raises(LocalProtocolError, match=message):
        Receiver(**kwargs)


def test_first_flight_stops_at_the_syn_window_until_the_first_ack():
    """IW 300 with a 65,535 B SYN window: full segments and one short one, then an ACK opens it.

    Not application-limited while held: the receiver's window is what binds.
    """
    p = Pair(initial_window=300, nbytes=300 * MSS)
    p.sender.first_flight = 65_535
    first = p.send(0.0)
    assert sum(s.length for s in first) == 65_535
    assert [s.length for s in first[-2:]] == [MSS, 65_535 % MSS]
    assert p.send(0.0) == []
    assert not p.sender._app_limited_until
    acks = p.arrive(first[:1], 0.1)
    p.ack(acks, 0.2)
    assert p.sender.first_flight is None
    assert len(p.send(0.2)) > 200  # the rest of cwnd 300 (+1 acked) now goes


def test_first_flight_must_be_positive():
    with pytest.raises(LocalProtocolError, match="first_flight"):
        Sender(first_flight=0)


class _RateBlind(Recorder):
    """A controller that does not override on_rate_sample: it records on_ack's rate."""

    on_rate_sample = CongestionController.on_rate_sample  # the base's no-op hook

    def on_ack(self, *, acked, rtt, now, in_flight, delivery_rate) -> None:
        self.calls.append(("ack", {"delivery_rate": delivery_rate}))


def test_rate_samples_are_built_only_for_controllers_that_read_them():
    """A controller without on_rate_sample gets delivery_rate None; one with it gets samples."""
    for cc, wants in ((_RateBlind(), False), (Recorder(), True)):
        p = Pair(cc=cc, nbytes=4 * MSS)
        acks = p.arrive(p.send(0.0), 0.1)
        p.ack(acks, 0.2)
        assert bool(cc.samples) == wants
        if not wants:
            assert [kw["delivery_rate"] for kw in cc.events("ack")] == [None] * 4
    assert [s.acked for s in cc.samples] == [MSS] * 4
