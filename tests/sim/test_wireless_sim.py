"""The shared wireless medium against the §12.4.1 closed forms, and the ACK-thinning trade-off."""

from __future__ import annotations

import pytest

from tierwise.errors import SimulationError
from tierwise.model import wireless as air
from tierwise.sim.engine import Simulator
from tierwise.sim.wireless import WirelessMedium, run_wireless_transfer
from tierwise.sim.workloads import TcpSpec

US = 1e-6
# §12.3.2/§12.4.1 packets: 1,168-byte payloads + 60-byte headers = 1,228-byte IP packets,
# 92-byte end-to-end ACKs.
EVERY = TcpSpec(cc="newreno", mss=1168, header=60, ack_bytes=92)
THINNED = TcpSpec(cc="newreno", mss=1168, header=60, ack_bytes=92, ack_every=2, ack_delay=0.010)


def test_exchanges_are_302_and_134_us():
    """§12.4.1: 34 + 208 + 16 + 44 = 302 µs for data, 134 µs for an end-to-end ACK."""
    medium = WirelessMedium(Simulator())
    assert medium.exchange_s(1228) == pytest.approx(302 * US, abs=1e-12)
    assert medium.exchange_s(92) == pytest.approx(134 * US, abs=1e-12)
    assert medium.exchange_s(1228) == pytest.approx(float(air.exchange_s(1228, 54e6, 6e6)))


def test_both_directions_take_turns_first_come_first_served():
    """Frames put at once from opposite ports: each waits for the exchanges before it."""
    sim = Simulator()
    medium = WirelessMedium(sim)
    up, down = medium.port("up"), medium.port("down")
    got: dict[str, float] = {}
    up.put("data", 1228, lambda p: got.setdefault(p, sim.now))
    down.put("ack", 92, lambda p: got.setdefault(p, sim.now))
    up.put("data2", 1228, lambda p: got.setdefault(p, sim.now))
    sim.run()
    assert got["data"] == pytest.approx((34 + 208) * US)  # passed up when its PPDU ends
    assert got["ack"] == pytest.approx((302 + 34 + 40) * US)
    assert got["data2"] == pytest.approx((302 + 134 + 34 + 208) * US)
    assert medium.busy_s == pytest.approx((2 * 302 + 134) * US)
    assert medium.exchanges == 3


def test_wired_legs_come_before_or_after_the_air():
    """An ACK crosses its wire before contending; data cross the wire after the air."""
    sim = Simulator()
    medium = WirelessMedium(sim)
    up = medium.port("up", wired_after_s=0.010)
    down = medium.port("down", wired_before_s=0.010)
    got: dict[str, float] = {}
    down.put("ack", 92, lambda p: got.setdefault(p, sim.now))
    up.put("data", 1228, lambda p: got.setdefault(p, sim.now))
    sim.run()
    assert got["data"] == pytest.approx(0.010 + (34 + 208) * US)  # the air was free at 0
    assert got["ack"] == pytest.approx(0.010 + (34 + 40) * US)  # the air was free again at 10 ms


def test_n_data_and_n_ack_exchanges_take_n_times_436_us():
    """§12.4.1: air time of N data + N ACK exchanges is N × (302 + 134) µs."""
    n = 400
    r = run_wireless_transfer(n * 1168, EVERY, wired_one_way_s=0.005)
    assert (r.data_exchanges, r.ack_exchanges) == (n, n)
    assert r.busy_s == pytest.approx(n * 436 * US, rel=1e-9)
    assert r.busy_s == pytest.approx(r.closed_form_airtime_s, rel=1e-9)
    assert r.time_s >= n * 302 * US


def test_random_backoff_is_seeded_and_adds_whole_slots():
    """cw_slots > 0 adds 0..cw slots per exchange, the same draws for the same seed."""
    runs = [
        run_wireless_transfer(200 * 1168, EVERY, cw_slots=15, seed=s, wired_one_way_s=0.005)
        for s in (1, 1, 2)
    ]
    assert runs[0].busy_s == runs[1].busy_s != runs[2].busy_s
    extra_slots = (runs[0].busy_s - runs[0].closed_form_airtime_s) / air.SLOT_S
    assert extra_slots == pytest.approx(round(extra_slots), abs=1e-6)
    assert 0 < extra_slots < 15 * (runs[0].data_exchanges + runs[0].ack_exchanges)


def test_ack_thinning_frees_half_the_ack_air_time_and_speeds_a_30_mb_upload():
    """§12.4.1 / exercise 12-5: every-2-packets ACKs free ≈ n/2 × 134 µs of air.

    30 MB over 54/6 Mbit/s with 10 ms of wire behind the access point, NewReno, no
    loss: 25,685 data exchanges; 25,685 → 12,843 ACK exchanges free 1.72 s of air
    (11.20 → 9.48 s). The upload finishes 10.18 s → 9.07 s: thinning wins on a
    shared medium because the ACKs it removes competed with the data for the air,
    while the 10 ms delayed ACK stalls the window only at a flight's odd tail.
    Part of the freed air (ACKs queued behind the last data frame) was never on
    the critical path, so the gain (1.11 s) is smaller than the air freed.
    """
    every = run_wireless_transfer(30_000_000, EVERY, wired_one_way_s=0.010)
    thin = run_wireless_transfer(30_000_000, THINNED, wired_one_way_s=0.010)
    assert every.data_exchanges == thin.data_exchanges == 25_685
    assert (every.ack_exchanges, thin.ack_exchanges) == (25_685, 12_843)
    freed = float(air.ack_thinning_saving_s(25_685, 2, air.exchange_s(92, 54e6, 6e6)))
    assert every.busy_s - thin.busy_s == pytest.approx(freed, rel=1e-9)
    assert freed == pytest.approx(1.72, abs=0.005)
    gain = every.time_s - thin.time_s
    assert 0.5 < gain < freed
    assert every.time_s == pytest.approx(10.18, abs=0.01)
    assert thin.time_s == pytest.approx(9.07, abs=0.01)


def test_ack_thinning_buys_nothing_when_the_window_not_the_air_is_the_limit():
    """A 100 kB upload behind 50 ms of wire is window-bound: freed air does not shorten it."""
    every = run_wireless_transfer(100_000, EVERY, wired_one_way_s=0.050)
    thin = run_wireless_transfer(100_000, THINNED, wired_one_way_s=0.050)
    assert thin.busy_s < every.busy_s
    assert thin.time_s >= every.time_s


@pytest.mark.parametrize(
    "kwargs",
    [{"data_rate_bit_per_s": 0.0}, {"ack_rate_bit_per_s": float("inf")}, {"cw_slots": -1}],
)
def test_impossible_medium_is_refused(kwargs):
    """Zero or infinite rates and negative windows raise SimulationError."""
    with pytest.raises(SimulationError):
        WirelessMedium(Simulator(), **kwargs)
