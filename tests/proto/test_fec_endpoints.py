"""FecSender and FecReceiver as a pair with a synthetic clock: sizes, reports, top-ups, timers."""

from __future__ import annotations

import numpy as np
import pytest

from tierwise.errors import LocalProtocolError, RemoteProtocolError
from tierwise.proto import fec
from tierwise.proto.fec import (
    FEC_HEADER_BYTES,
    REPORT_HEADER_BYTES,
    UDP_IP_HEADER_BYTES,
    FecReceiver,
    FecSender,
    Report,
    Symbol,
    parse_datagram,
    repair_symbols_needed,
)

ONE_WAY = 0.05  # seconds, each direction
SPACING = 1e-4  # seconds between arrivals of back-to-back symbols


def _payload(size: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def _deliver(receiver: FecReceiver, symbols: list[Symbol], start: float, drop=()) -> float:
    """Feed ``symbols`` (as bytes, over the wire) except the positions in ``drop``."""
    t = start
    for i, sym in enumerate(symbols):
        t = start + i * SPACING
        if i not in drop:
            receiver.receive_datagram(sym.to_bytes(), t)
    return t


def _one_report(receiver: FecReceiver, now: float) -> Report:
    reports = receiver.datagrams_to_send(now)
    assert len(reports) == 1
    return reports[0]


# ------------------------------------------------------------------ first round


def test_first_round_sizes_and_flags():
    """950 B in 100-byte symbols: 10 data + r repair, 148 B each on the wire, one burst end."""
    payload = _payload(950)
    sender = FecSender(payload, loss=0.1, target=0.99, symbol_bytes=100)
    r = repair_symbols_needed(10, 0.1, 0.99)
    symbols = sender.datagrams_to_send(0.0)
    assert len(symbols) == 10 + r == sender.stats.symbols_sent
    assert [s.index for s in symbols] == list(range(10 + r))
    assert [s.seq for s in symbols] == list(range(10 + r))
    assert {(s.k, s.r, s.round, s.block, s.pad) for s in symbols} == {(10, r, 1, 0, 50)}
    assert all(s.final and not s.wide for s in symbols)
    assert [s.burst_end for s in symbols] == [False] * (9 + r) + [True]
    assert {s.wire for s in symbols} == {100 + FEC_HEADER_BYTES + UDP_IP_HEADER_BYTES} == {148}
    assert sender.stats.bytes_on_wire == 148 * (10 + r)
    assert symbols[0].data == payload[:100]
    assert sender.get_timer() == pytest.approx(fec.RTO_INITIAL_S)
    assert sender.datagrams_to_send(0.0) == []


def test_decodes_from_any_k_and_reports_complete():
    """Drop r symbols (data among them): the receiver decodes, delivers and says so."""
    payload = _payload(950, 1)
    sender = FecSender(payload, loss=0.1, target=0.99, symbol_bytes=100)
    symbols = sender.datagrams_to_send(0.0)
    r = len(symbols) - 10
    receiver = FecReceiver()
    _deliver(receiver, symbols, ONE_WAY, drop=set(range(r)))
    assert receiver.complete and receiver.read() == payload
    assert receiver.delivered_bytes == 950 and receiver.rounds == {0: 1}
    report = _one_report(receiver, 0.06)
    assert report.message_complete and report.complete == ((0, 1),) and report.missing == ()
    assert report.wire == REPORT_HEADER_BYTES + 8 + UDP_IP_HEADER_BYTES == 54
    sender.receive_datagram(report.to_bytes(), 0.11)
    assert sender.done and sender.get_timer() is None
    assert sender.srtt == pytest.approx(0.11 - 0.0)


def test_completion_mid_burst_reports_at_once():
    """The k-th symbol triggers a report before the burst ends; later ones only at its end."""
    sender = FecSender(_payload(400), loss=0.2, target=0.99, symbol_bytes=100)
    symbols = sender.datagrams_to_send(0.0)
    receiver = FecReceiver()
    for t, sym in enumerate(symbols[:4]):
        receiver.receive_symbol(sym, 1.0 + t)
    assert receiver.complete and receiver.get_timer() == 4.0
    assert _one_report(receiver, 4.0).message_complete
    receiver.receive_symbol(symbols[4], 5.0)
    assert receiver.datagrams_to_send(5.0) == []  # not the burst's end: wait for it
    assert receiver.stats.duplicates == 1


# -------------------------------------------------------------------- top-ups


def test_tail_loss_gap_report_and_one_round_top_up():
    """Lose r + 2 symbols including the burst's last: a gap report, then exactly 2 more."""
    payload = _payload(950, 2)
    sender = FecSender(payload, loss=0.1, target=0.99, symbol_bytes=100)
    symbols = sender.datagrams_to_send(0.0)
    n, r = len(symbols), len(symbols) - 10
    receiver = FecReceiver()
    drop = {0, 3, *range(n - r, n)}  # two data symbols and every repair symbol
    last = _deliver(receiver, symbols, ONE_WAY, drop=drop)
    arrived = ONE_WAY + (n - r - 1) * SPACING  # the last symbol that got through
    assert last > arrived
    assert receiver.get_timer() == pytest.approx(arrived + fec.GAP_MIN_S)
    assert receiver.datagrams_to_send(arrived) == []
    receiver.handle_timer(arrived + fec.GAP_MIN_S)
    report = _one_report(receiver, arrived + fec.GAP_MIN_S)
    assert report.burst_over and report.missing == ((0, 2),)
    assert report.largest_seq == n - r - 1 and report.received == 8
    sender.receive_report(parse_datagram(report.to_bytes()), 0.2)
    top_up = sender.datagrams_to_send(0.2)
    assert [(s.index, s.round, s.seq) for s in top_up] == [(n, 2, n), (n + 1, 2, n + 1)]
    assert top_up[-1].burst_end and sender.stats.topup_symbols == 2
    _deliver(receiver, top_up, 0.25)
    assert receiver.complete and receiver.read() == payload
    assert receiver.rounds == {0: 2}


def test_report_mid_burst_does_not_top_up_what_is_in_flight():
    """A report before the burst is over counts later symbols as in flight: no top-up."""
    sender = FecSender(_payload(1000), loss=0.1, target=0.99, symbol_bytes=100)
    symbols = sender.datagrams_to_send(0.0)
    receiver = FecReceiver()
    for t, sym in enumerate(symbols[2:5]):  # seqs 0 and 1 lost
        receiver.receive_symbol(sym, 0.05 + t * SPACING)
    receiver.handle_timer(1.0)  # a long pause: the receiver thinks the burst is over
    report = _one_report(receiver, 1.0)
    assert report.burst_over and report.missing == ((0, 7),)
    sender.receive_report(report, 1.05)
    # seen through the burst's end: 7 needed, nothing after it in flight
    assert len(sender.datagrams_to_send(1.05)) == 7
    stale = Report(4, 3, missing=((0, 7),))  # the same state, burst not over
    sender.receive_report(stale, 1.1)
    assert sender.datagrams_to_send(1.1) == []


def test_retransmission_timer_tops_up_everything_missing():
    """No report at all: at the RTO the sender resends k fresh repair symbols, round 2."""
    sender = FecSender(_payload(500), loss=0.1, target=0.9, symbol_bytes=100)
    first = sender.datagrams_to_send(0.0)
    assert sender.get_timer() == 1.0
    sender.handle_timer(0.5)
    assert sender.stats.timeouts == 0
    sender.handle_timer(1.0)
    again = sender.datagrams_to_send(1.0)
    assert sender.stats.timeouts == 1 and sender.rto == 2.0
    assert [s.round for s in again] == [2] * 5
    assert [s.index for s in again] == list(range(len(first), len(first) + 5))
    assert sender.get_timer() == 3.0
    receiver = FecReceiver()
    _deliver(receiver, again, 1.05)
    assert receiver.complete and receiver.rounds == {0: 2}


def test_fresh_indices_wrap_to_resend_in_gf256():
    """Past index 255 a GF(2^8) block resends from index 0, so top-ups never run out."""
    sender = FecSender(_payload(250 * 4), loss=0.01, target=0.9, symbol_bytes=4)
    first = sender.datagrams_to_send(0.0)
    assert not first[0].wide and len(first) == 250 + first[0].r
    sender.handle_timer(1.0)
    indices = [s.index for s in sender.datagrams_to_send(1.0)]
    assert indices == [*range(len(first), 256), *range(250 - (256 - len(first)))]


# ------------------------------------------------------------- blocks and fields


def test_multi_block_in_order_delivery_over_lossy_rounds():
    """30 symbols in blocks of ≤ 8; random loss, round after round, until all arrive in order."""
    payload = _payload(64 * 30 + 7, 3)
    sender = FecSender(payload, loss=0.2, target=0.9, symbol_bytes=64, max_block=8)
    assert [b.k for b in sender.blocks] == [8, 8, 8, 7]
    receiver = FecReceiver()
    rng = np.random.default_rng(3)
    now, got = 0.0, b""
    for _ in range(20):
        symbols = sender.datagrams_to_send(now)
        kept = [s for s in symbols if rng.random() > 0.3]
        for i, sym in enumerate(kept):
            receiver.receive_datagram(sym.to_bytes(), now + ONE_WAY + i * SPACING)
        got += receiver.read()
        assert payload.startswith(got)
        now += 2 * ONE_WAY
        receiver.handle_timer(now)
        for report in receiver.datagrams_to_send(now):
            sender.receive_datagram(report.to_bytes(), now + ONE_WAY)
        now += ONE_WAY
        sender.handle_timer(now)
        if receiver.complete:
            break
    assert receiver.complete and got == payload
    assert set(receiver.rounds) == {0, 1, 2, 3}


def test_blocks_past_256_symbols_use_gf65536():
    """300 data symbols in one block: the WIDE flag, GF(2^16) and exact bytes."""
    payload = _payload(300 * 16, 4)
    sender = FecSender(payload, loss=0.1, target=0.99, symbol_bytes=16)
    symbols = sender.datagrams_to_send(0.0)
    assert all(s.wide for s in symbols) and len(symbols) > 300
    receiver = FecReceiver()
    rng = np.random.default_rng(4)
    keep = set(rng.permutation(len(symbols))[:300].tolist())
    _deliver(receiver, symbols, 0.1, drop=set(range(len(symbols))) - keep)
    assert receiver.complete and receiver.read() == payload


def test_odd_symbol_size_cannot_go_wide():
    """GF(2^16) needs an even symbol size; the error says so."""
    sender = FecSender(300 * 15, loss=0.1, symbol_bytes=15)
    with pytest.raises(LocalProtocolError, match="even symbol size"):
        sender.datagrams_to_send(0.0)


def test_empty_message_is_one_header_only_datagram():
    """A zero-byte reply is still one 48-byte datagram, and it completes."""
    sender = FecSender(b"", loss=0.0)
    (sym,) = sender.datagrams_to_send(0.0)
    assert (sym.k, sym.r, sym.length, sym.wire) == (1, 0, 0, 48)
    receiver = FecReceiver()
    receiver.receive_datagram(sym.to_bytes(), 0.1)
    assert receiver.complete and receiver.read() == b""


def test_virtual_mode_counts_sizes():
    """A size instead of bytes: same symbols and wire sizes, no bytes to serialise."""
    sender = FecSender(354_640, loss=0.14)
    symbols = sender.datagrams_to_send(0.0)
    assert len(symbols) == 308 and sender.stats.repair_symbols == 63
    assert symbols[0].data is None and all(s.wide for s in symbols)
    assert sender.stats.bytes_on_wire == 308 * (1448 + 48) == 460_768
    with pytest.raises(LocalProtocolError, match="virtual"):
        symbols[0].to_bytes()
    receiver = FecReceiver()
    for sym in symbols[63:]:
        receiver.receive_symbol(sym, 0.1)
    assert receiver.complete and receiver.delivered_bytes == 354_640 and receiver.read() == b""


# ------------------------------------------------------------ pacing and loss


def test_pacing_spaces_symbols_at_the_rate():
    """At 148,000 B/s each 148-byte symbol waits 1 ms; the timer says when."""
    sender = FecSender(_payload(300), loss=0.0, symbol_bytes=100, pacing_rate_bytes_per_s=148e3)
    assert len(sender.datagrams_to_send(0.0)) == 1
    assert sender.get_timer() == pytest.approx(0.001)
    assert sender.datagrams_to_send(0.0005) == []
    (second,) = sender.datagrams_to_send(0.001)
    (third,) = sender.datagrams_to_send(0.002)
    assert (second.seq, third.seq, third.burst_end) == (1, 2, True)
    assert sender.get_timer() == pytest.approx(0.002 + fec.RTO_INITIAL_S)


def test_measured_loss_raises_later_blocks_repair():
    """Paced, adaptive: after a report showing 45 % loss, the next block gets more repair."""
    sender = FecSender(
        _payload(2000),
        loss=0.05,
        target=0.99,
        symbol_bytes=100,
        max_block=10,
        pacing_rate_bytes_per_s=1e9,
        adapt_loss=True,
    )
    first = [s for t in range(12) for s in sender.datagrams_to_send(t * 1e-3)]
    first_r = first[0].r
    assert first_r == repair_symbols_needed(10, 0.05, 0.99)
    receiver = FecReceiver()
    for sym in first[::2]:
        receiver.receive_symbol(sym, 0.1)
    sender.receive_report(receiver.report(), 0.2)
    assert len(first) == 12 and receiver.report().largest_seq == 10
    assert sender.measured_loss == pytest.approx(1 - 6 / 11)
    assert sender.loss_estimate > 0.05
    later = [s for t in range(200) for s in sender.datagrams_to_send(0.2 + t * 1e-3)]
    block_1 = [s for s in later if s.block == 1]
    assert block_1[0].r == repair_symbols_needed(10, sender.loss_estimate, 0.99) > first_r


# ------------------------------------------------------------------ wire format


def test_symbol_round_trips_through_bytes():
    """Every header field survives to_bytes / parse_datagram."""
    sym = Symbol(7, 300, 245, 63, 123456, 3, 4, pad=1, flags=fec.FINAL | fec.WIDE, data=b"abcd")
    raw = sym.to_bytes()
    assert len(raw) == FEC_HEADER_BYTES + 4
    assert parse_datagram(raw) == sym


def test_report_round_trips_through_bytes():
    """Ranges, needs, the cut and both flags survive; the size is 18 + 8·ranges + 6·needs."""
    report = Report(99, 80, ((0, 3), (5, 9)), ((3, 2), (4, 7)), 10, False, True)
    raw = report.to_bytes()
    assert len(raw) == REPORT_HEADER_BYTES + 2 * 8 + 2 * 6
    assert parse_datagram(raw) == report


def test_long_reports_are_cut_to_the_lowest_blocks():
    """Too many incomplete blocks for one report: the lowest are described, and where it stops."""
    receiver = FecReceiver()
    for b in range(fec.REPORT_MISSING_MAX + 10):
        receiver.receive_symbol(Symbol(b, 0, 2, 0, b, 1, 1, data=b"x"), 0.0)
    report = receiver.report()
    assert len(report.missing) == fec.REPORT_MISSING_MAX
    assert report.covered_below == fec.REPORT_MISSING_MAX
    assert report.wire <= 1500


def test_malformed_datagrams_are_remote_errors():
    """Unknown type, short header, lying length: the peer's fault."""
    with pytest.raises(RemoteProtocolError, match="unknown"):
        parse_datagram(b"\x09rest")
    with pytest.raises(RemoteProtocolError):
        parse_datagram(b"\x01\x00")
    raw = Report(1, 1, ((0, 1),)).to_bytes()
    with pytest.raises(RemoteProtocolError, match="header says"):
        parse_datagram(raw[:-1])


def test_peer_misbehaviour_is_detected():
    """A report for symbols never sent, or symbols that disagree on k, are remote errors."""
    sender = FecSender(_payload(300), loss=0.0, symbol_bytes=100)
    sender.datagrams_to_send(0.0)
    with pytest.raises(RemoteProtocolError, match="only 3 symbols sent"):
        sender.receive_report(Report(5, 1), 0.1)
    receiver = FecReceiver()
    receiver.receive_symbol(Symbol(0, 0, 3, 0, 0, 1, 1, data=b"a"), 0.0)
    with pytest.raises(RemoteProtocolError, match="disagree"):
        receiver.receive_symbol(Symbol(0, 1, 4, 0, 1, 1, 1, data=b"b"), 0.0)


def test_bad_configuration_is_a_local_error():
    """Loss outside [0, 1), a negative size or a zero rate are our misuse."""
    for kwargs in (
        {"loss": 1.0},
        {"loss": 0.1, "target": 1.0},
        {"loss": 0.1, "symbol_bytes": 0},
        {"loss": 0.1, "pacing_rate_bytes_per_s": 0.0},
        {"loss": 0.1, "repair_symbols": -1},
    ):
        with pytest.raises(LocalProtocolError):
            FecSender(100, **kwargs)
    with pytest.raises(LocalProtocolError):
        FecSender(-1, loss=0.1)
