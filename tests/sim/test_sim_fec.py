"""A FEC-carried request over simulated lossy links, checked against the closed form (§12.3.3).

The closed form (:mod:`tierwise.model.loss`) says: 245 data symbols at 14 % loss
need 63 repair symbols for 99.9 % block success; the request then completes in
about 241 ms (RTT 200 ms + model 30 ms + sending 308 symbols at 333 Mbit/s), and
a block topped up round by round needs ``K`` rounds with
:func:`~tierwise.model.loss.fec_rounds_pmf`. The simulator must agree.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest

from tierwise.errors import SimulationError
from tierwise.model.loss import fec_rounds_pmf, retransmit_time_s
from tierwise.proto.fec import FEC_HEADER_BYTES, UDP_IP_HEADER_BYTES
from tierwise.sim.fec import run_fec_request

MBIT = 1e6 / 8
RATE = 333 * MBIT  # capacity knee of §12.3.3
RTT = 0.2
MODEL = 0.030
FILE = 354_640
MSS = 1448
LOSS = 0.14
TARGET = 0.999
K = 245
WIRE = MSS + FEC_HEADER_BYTES + UDP_IP_HEADER_BYTES  # 1,496 bytes per symbol
REPLY_WIRE = FEC_HEADER_BYTES + UDP_IP_HEADER_BYTES  # an empty reply: one header-only datagram


def _request(seed: int, **kwargs):
    args = {"virtual": True} | kwargs
    return run_fec_request(RATE, RATE, RTT, LOSS, FILE, MSS, MODEL, TARGET, seed, **args)


MEDIAN_SEEDS = 200  # the median test's seeds: the first of the 2,000 test's, run once


def _runs(seeds: range) -> tuple[np.ndarray, np.ndarray]:
    runs = [_request(s) for s in seeds]
    return np.array([r.time_s for r in runs]), np.array([r.rounds for r in runs])


@cache
def _section_runs(seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """Times and rounds of seeds 0 … seeds − 1; the median test's seeds are run once (a
    seed's run depends on the seed alone, so the 2,000 test reuses them)."""
    if seeds <= MEDIAN_SEEDS:
        return _runs(range(seeds))
    head, tail = _section_runs(MEDIAN_SEEDS), _runs(range(MEDIAN_SEEDS, seeds))
    return np.concatenate([head[0], tail[0]]), np.concatenate([head[1], tail[1]])


def chi2_sf(x: float, df: int) -> float:
    """``P(χ²_df > x)`` for integer ``df`` (closed forms; no scipy needed)."""
    half = x / 2
    if df % 2 == 0:
        return math.exp(-half) * sum(half**i / math.factorial(i) for i in range(df // 2))
    tail = math.erfc(math.sqrt(half))
    terms = (half ** (i - 0.5) / math.gamma(i + 0.5) for i in range(1, (df + 1) // 2))
    return tail + math.exp(-half) * sum(terms)


def rounds_chi2(observed: np.ndarray, pmf: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom, rounds binned until each expects ≥ 5."""
    n = observed.sum()
    obs = np.zeros(max(observed.size, pmf.size))
    obs[: observed.size] = observed
    exp = np.zeros(obs.size)
    exp[: pmf.size] = pmf * n
    bins_o, bins_e, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(obs[1:], exp[1:], strict=True):  # round 0 never happens
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= 5:
            bins_o.append(acc_o)
            bins_e.append(acc_e)
            acc_o = acc_e = 0.0
    bins_o[-1] += acc_o
    bins_e[-1] += acc_e + n * max(0.0, 1 - pmf.sum())
    o, e = np.array(bins_o), np.array(bins_e)
    return float(((o - e) ** 2 / e).sum()), len(o) - 1


def test_chi2_sf_matches_known_critical_values():
    """The helper: χ² critical values at α = 0.001 (df 1–6) give 0.001."""
    for df, critical in [(1, 10.828), (2, 13.816), (3, 16.266), (4, 18.467), (5, 20.515)]:
        assert chi2_sf(critical, df) == pytest.approx(0.001, rel=1e-3)


# ---------------------------------------------------------------- §12.3.3 itself


def test_section_12_3_3_request_with_real_bytes():
    """354,640 B as 245 + 63 symbols of real bytes, serialised: decoded intact in ≈ 241 ms."""
    result = _request(0, virtual=False, serialize=True)
    up = result.up
    assert result.payload_ok is True
    assert (up["blocks"], up["data_symbols"], up["repair_symbols"]) == (1, 245, 63)
    assert up["symbols_sent"] == 308 and up["topup_symbols"] == 0 and up["rounds"] == 1
    assert up["data_wire_bytes"] == 308 * WIRE == 460_768
    assert up["symbols_received"] == 308 - up["link_lost"]
    assert 0.2385 < result.time_s < 0.2411  # serial budget 238.5 ms ≤ t ≤ closed form 241 ms
    assert result.upload_done_s == pytest.approx(result.time_s - MODEL - RTT / 2, abs=1e-4)


def test_section_12_3_3_median_over_200_seeds():
    """Median ≈ 241 ms (§12.3.3); decoding at the k-th arrival is what the sim adds.

    The closed form sends all 308 symbols (10.7 ms); the receiver decodes once
    k = 245 have arrived, on average after k / (1 − p) = 284.9 symbols.
    """
    times, rounds = _section_runs(MEDIAN_SEEDS)
    median = float(np.median(times))
    closed_form = RTT + MODEL + (K + 63) * MSS / RATE  # 240.7 ms, the text's "≈ 241 ms"
    kth_arrival = RTT + MODEL + (K / (1 - LOSS)) * WIRE / RATE + REPLY_WIRE / RATE
    assert median == pytest.approx(0.241, abs=0.001)
    assert closed_form == pytest.approx(0.241, abs=0.0005)
    assert median == pytest.approx(kth_arrival, abs=2 * WIRE / RATE)
    assert median <= RTT + MODEL + (K + 63) * WIRE / RATE
    assert (rounds == 1).mean() >= 0.995
    assert times.max() < 0.25 or (rounds > 1).any()


@pytest.mark.slow
def test_section_12_3_3_no_top_up_in_999_of_1000():
    """2,000 seeds: ≥ 99.9 % need no top-up round, as P(K = 1) = 0.99927 predicts."""
    times, rounds = _section_runs(2000)
    p1 = fec_rounds_pmf(K, 63, LOSS)[1]
    assert p1 == pytest.approx(0.99927, abs=5e-6)
    topped = int((rounds > 1).sum())
    assert (rounds == 1).mean() >= 0.999
    # and not suspiciously few either: Poisson(2000 · 0.00073 = 1.46) puts 23 % on zero
    assert topped <= 8
    single = times[rounds == 1]
    assert np.median(single) == pytest.approx(0.241, abs=0.001)


# ------------------------------------------------------ rounds: sim ⇄ closed form


def _rounds_and_times(k: int, r: int, loss: float, seeds: int):
    runs = [
        run_fec_request(
            RATE,
            RATE,
            RTT,
            loss,
            k * MSS,
            MSS,
            MODEL,
            TARGET,
            s,
            virtual=True,
            repair_symbols=r,
        )
        for s in range(seeds)
    ]
    rounds = np.array([x.rounds for x in runs])
    times = np.array([x.time_s for x in runs])
    timeouts = np.array([x.up["timeouts"] for x in runs])
    return rounds, times, timeouts


def _assert_rounds_agree(k: int, r: int, loss: float, seeds: int) -> None:
    rounds, times, timeouts = _rounds_and_times(k, r, loss, seeds)
    pmf = fec_rounds_pmf(k, r, loss)
    stat, df = rounds_chi2(np.bincount(rounds), pmf)
    p_value = chi2_sf(stat, df)
    assert p_value > 1e-3, f"χ² = {stat:.1f} on {df} df (p = {p_value:.2g})"
    mean_closed = float((np.arange(pmf.size) * pmf).sum())
    assert rounds.mean() == pytest.approx(mean_closed, abs=4 * rounds.std() / math.sqrt(seeds))
    # a round that gets a report costs one RTT: t(K) = serial + (K − 1)·RTT
    serial = float(np.median(times[rounds == 1])) if (rounds == 1).any() else None
    for kk in range(2, 4):
        clean = times[(rounds == kk) & (timeouts == 0)]
        if serial is not None and clean.size >= 5:
            expected = retransmit_time_s(serial, RTT, kk)
            assert float(np.median(clean)) == pytest.approx(expected, abs=0.003)


def test_rounds_agree_with_closed_form():
    """k = 50, r = 3 at 14 %: the simulated rounds fit fec_rounds_pmf (χ², 400 seeds)."""
    _assert_rounds_agree(50, 3, 0.14, 400)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("k", "r", "loss", "seeds"),
    [(50, 0, 0.14, 1500), (20, 2, 0.30, 2000), (245, 40, 0.14, 1000), (50, 3, 0.14, 2000)],
)
def test_rounds_agree_with_closed_form_many_seeds(k, r, loss, seeds):
    """More configurations and seeds: plain retransmission (r = 0), heavy loss, the big block."""
    _assert_rounds_agree(k, r, loss, seeds)


# -------------------------------------------------------------- other shapes


def test_real_bytes_survive_top_up_rounds():
    """No repair at 14 %: several top-up rounds, real bytes over the wire, decoded intact."""
    results = [
        run_fec_request(
            RATE,
            RATE,
            RTT,
            LOSS,
            50 * MSS + 123,
            MSS,
            MODEL,
            TARGET,
            s,
            repair_symbols=0,
            serialize=True,
        )
        for s in range(4)
    ]
    assert all(r.payload_ok for r in results)
    assert max(r.rounds for r in results) >= 3
    assert all(r.up["topup_symbols"] > 0 for r in results)


def test_request_split_into_blocks():
    """max_block 100: 245 symbols as 82 + 82 + 81, each with its own repair, decoded intact."""
    result = _request(1, virtual=False, max_block=100)
    assert result.payload_ok and result.up["blocks"] == 3
    assert result.up["data_symbols"] == 245 and result.up["repair_symbols"] > 63


def test_fec_reply_over_lossy_downlink():
    """A 100 kB reply as FEC over a 5 % lossy downlink: planned repair, intact bytes."""
    result = _request(2, virtual=False, reply_bytes=100_000, down_loss=0.05)
    down = result.down
    assert result.payload_ok and down["mode"] == "fec"
    assert down["data_symbols"] == math.ceil(100_000 / MSS) and down["repair_symbols"] > 0
    assert result.time_s > result.upload_done_s + MODEL + RTT / 2


def test_tcp_reply():
    """A plain TCP reply on the warm connection: its segments and the extra time to send it."""
    result = _request(3, reply="tcp", reply_bytes=14_480)
    assert result.down["mode"] == "tcp" and result.down["segments"] == 10
    assert result.time_s == pytest.approx(result.upload_done_s + MODEL + RTT / 2, abs=0.001)


def test_bursty_loss_still_delivers():
    """Gilbert–Elliott loss (mean ≈ 14 %): the request still arrives intact."""
    ge = {"p_gb": 0.05, "p_bg": 0.3, "loss_good": 0.02, "loss_bad": 0.85}
    result = run_fec_request(RATE, RATE, RTT, ge, FILE, MSS, MODEL, TARGET, 4)
    assert result.payload_ok and result.up["repair_symbols"] > 0


def test_same_seed_same_result():
    """A seed fixes every draw: two runs give identical summaries."""
    assert _request(5).summary() == _request(5).summary()


def test_bad_arguments():
    """Unknown reply mode, empty TCP reply, or too little simulated time are errors."""
    with pytest.raises(SimulationError, match="reply must be"):
        _request(0, reply="udp")
    with pytest.raises(SimulationError, match="TCP reply"):
        _request(0, reply="tcp")
    with pytest.raises(SimulationError, match="did not finish"):
        _request(0, until=0.1)
