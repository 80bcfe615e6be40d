"""The simulator against the reference's packet-level figures and the closed forms (§12.3.2)."""

from __future__ import annotations

import pytest

from tierwise.model import transport
from tierwise.sim import PathSpec, TcpSpec, run_request

MBIT = 125_000.0
PHOTO_PATH = PathSpec(20 * MBIT, 100 * MBIT, 0.1)
PHOTO_TCP = TcpSpec(cc="slowstart", mss=1168, header=60, ack_bytes=92, initial_window=10)


def _wire(r) -> int:
    return sum(r.up[k] + r.down[k] for k in ("data_wire_bytes", "ack_wire_bytes"))


@pytest.fixture(scope="module")
def photo():
    return run_request(PHOTO_PATH, PHOTO_TCP, 30_000_000, 5_000_000, 0.3)


def test_photo_request_matches_the_reference(photo):
    """§12.3.2 / note 17: 14.36339008 s (within 0.1 %; it matches to the microsecond)."""
    assert photo.time_s == pytest.approx(14.36339008, rel=1e-3)
    assert photo.time_s == pytest.approx(14.36339008, abs=1e-6)


def test_photo_request_packets_and_bytes(photo):
    """Note 17: 25,685 up + 4,281 down packets, as many ACKs, 39,554,832 bytes on the wire."""
    assert (photo.up["segments"], photo.down["segments"]) == (25_685, 4_281)
    assert (photo.up["acks"], photo.down["acks"]) == (25_685, 4_281)
    assert _wire(photo) == 39_554_832


@pytest.mark.parametrize("cc", ["slowstart", "newreno"])
def test_ack_thinning_moves_fewer_bytes(photo, cc):
    """One ACK per 2 packets or 10 ms moves about 1.38 MB fewer bytes (note 18)."""
    tcp = TcpSpec(cc=cc, mss=1168, header=60, ack_bytes=92, ack_every=2, ack_delay=0.01)
    thin = run_request(PHOTO_PATH, tcp, 30_000_000, 5_000_000, 0.3)
    assert (_wire(photo) - _wire(thin)) / 1e6 == pytest.approx(1.38, abs=0.005)
    # Fewer ACKs slow the window's growth a little; docs/validation.md compares with the
    # reference's +43 ms (a NewReno configuration it does not fully state).
    assert 0 < thin.time_s - photo.time_s < 0.05


def test_fixed_window_gives_min_of_rate_and_window_over_rtt():
    """No loss, fixed 64 kB-ish window: throughput is min(B, W/R) within 1 %."""
    window = 55 * 1168
    r = run_request(
        PHOTO_PATH,
        TcpSpec(cc="fixed", mss=1168, header=60, ack_bytes=92, initial_window=55),
        30_000_000,
        0,
        0.0,
    )
    payload_rate = 20 * MBIT * 1168 / 1228
    closed = 30e6 / transport.useful_rate_bytes_per_s(payload_rate, window, 0.1)
    assert r.time_s == pytest.approx(closed, rel=0.01)


def test_slow_start_matches_the_closed_form():
    """§12.3.2/§12.3.5: 355 KB from a 10-segment window at 333 Mbit/s, 200 ms: 4 stalled RTTs."""
    tcp = TcpSpec(cc="slowstart", mss=1448, header=52, ack_bytes=52)
    r = run_request(PathSpec(333 * MBIT, 333 * MBIT, 0.2), tcp, 354_640, 0, 0.03)
    send, _ = transport.slow_start_send_s(354_640, 333 * MBIT * 1448 / 1500, 0.2, 10, 1448)
    assert r.time_s == pytest.approx(send + 0.1 + 0.03, rel=1e-3)


@pytest.mark.parametrize("iw", [10, 40, 300])
def test_syn_window_cap_matches_the_closed_form(iw):
    """New connection, SYN window 65,535 B: the simulator and the closed form agree within 1 %.

    IW 300 is the lab's case (0.656 s measured); IW 10 and 40 are below the cap.
    """
    path = PathSpec(12.5e6, 12.5e6, 0.2, queue_bytes=1.5e6)
    tcp = TcpSpec(cc="cubic", initial_window=iw, handshake_rtts=1, syn_window=65_535)
    sim = run_request(path, tcp, 354_640, 1000, 0.03).time_s
    wait = transport.window_wait_s(
        354_640, 12.5e6, 0.2, iw, 1448, first_flight_bytes=transport.SYN_WINDOW_BYTES
    )
    closed = 0.2 + 0.2 + 354_640 / 12.5e6 + 0.03 + 1000 / 12.5e6 + wait
    assert sim == pytest.approx(closed, rel=0.01)


def test_same_seed_same_trace_bytes(tmp_path):
    """Deterministic: the same seed writes a byte-identical trace; another seed differs."""
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.05, up_loss=0.02)
    tcp = TcpSpec(cc="newreno", mss=1168, header=60, ack_bytes=92)
    files = []
    for i, seed in enumerate((7, 7, 8)):
        r = run_request(path, tcp, 2_000_000, 10_000, 0.01, seed=seed, trace=True)
        files.append(tmp_path / f"t{i}.csv")
        r.trace.write_csv(str(files[-1]))
    assert files[0].read_bytes() == files[1].read_bytes()
    assert files[0].read_bytes() != files[2].read_bytes()


def test_loss_makes_retransmissions_and_still_completes():
    """With 14 % random loss every byte still arrives, through retransmissions."""
    tcp = TcpSpec(cc="newreno", mss=1448, header=52, ack_bytes=52)
    r = run_request(
        PathSpec(333 * MBIT, 333 * MBIT, 0.2, up_loss=0.14), tcp, 354_640, 0, 0.03, seed=3
    )
    assert r.up["retransmissions"] >= r.up["link_lost"] > 0
    assert r.time_s > 0.2385


def test_handshake_round_trips_as_packets():
    """A TCP + TLS 1.3 set-up (2 RTTs) delays the §12.3.5 cold request by 0.4 s."""
    path = PathSpec(333 * MBIT, 333 * MBIT, 0.2)
    base = run_request(path, TcpSpec(cc="slowstart"), 354_640, 0, 0.03)
    cold = run_request(path, TcpSpec(cc="slowstart", handshake_rtts=2), 354_640, 0, 0.03)
    assert cold.time_s - base.time_s == pytest.approx(0.4, abs=0.001)
    # the closed form's cold request (1.4336 s) also counts the reply's trip back
    assert cold.time_s + 0.1 == pytest.approx(1.4336, abs=0.001)


@pytest.mark.slow
def test_selective_retransmission_approaches_the_idealised_rounds():
    """§12.3.3: 245 packets at 14 %, unbounded window — the closed form is a lower bound the
    simulator approaches: its mean lies within 15 % above it (the gap is tail losses, which
    wait for the retransmission timer instead of one round trip; docs/validation.md)."""
    import numpy as np

    from tierwise.model import loss

    path = PathSpec(333 * MBIT, 333 * MBIT, 0.2, up_loss=0.14)
    tcp = TcpSpec(cc="fixed", mss=1448, header=52, ack_bytes=52, initial_window=1000)
    times = np.array([run_request(path, tcp, 354_640, 0, 0.03, seed=s).time_s for s in range(200)])
    closed = 0.1 + 354_640 / (333 * MBIT) + 0.03 + (loss.expected_rounds(245, 0.14) - 1) * 0.2
    assert closed <= times.mean() <= 1.15 * closed
    assert times.min() >= 0.1 + 354_640 / (333 * MBIT) + 0.03 - 1e-9
