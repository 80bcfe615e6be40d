"""Loss models: Mathis, BBR, selective retransmission rounds and FEC (§12.3.3)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import tierwise.calc.network  # noqa: F401  (registers the entries)
from tierwise.cli import app
from tierwise.errors import ModelError
from tierwise.model import loss

packets = st.integers(min_value=0, max_value=400)
losses = st.floats(min_value=0.0, max_value=0.8, allow_nan=False)
rounds = st.integers(min_value=0, max_value=40)
quantiles = st.floats(min_value=0.0, max_value=0.9999, allow_nan=False)
data_symbols = st.integers(min_value=1, max_value=300)
repair_counts = st.integers(min_value=0, max_value=120)


def test_mathis_constants_and_broadcast():
    """C = √(3/2) and 1.31 scale the C = 1 bound; arrays broadcast; p = 0 is unbounded."""
    base = loss.mathis_rate_bytes_per_s(1448, 0.2, 0.14)
    assert loss.mathis_rate_bytes_per_s(1448, 0.2, 0.14, loss.C_PERIODIC) == pytest.approx(
        base * math.sqrt(1.5)
    )
    got = loss.mathis_rate_bytes_per_s(1448, np.array([0.1, 0.2]), np.array([[0.0], [0.14]]))
    assert got.shape == (2, 2)
    assert np.isinf(got[0]).all()
    assert got[1, 1] == pytest.approx(base)


@given(st.floats(min_value=1e-6, max_value=0.99), st.floats(min_value=1e-6, max_value=0.99))
def test_mathis_smaller_loss_is_never_slower(p, q):
    """The bound falls as the loss rises."""
    lo, hi = sorted((p, q))
    assert loss.mathis_rate_bytes_per_s(1448, 0.2, lo) >= loss.mathis_rate_bytes_per_s(
        1448, 0.2, hi
    )


def test_bbr_window_and_goodput():
    """cwnd is twice the BDP; goodput is the delivered share of the pacing rate."""
    assert loss.bbr_cwnd_bytes(1e6, 0.1) == 2 * loss.bbr_bdp_bytes(1e6, 0.1) == 2e5
    assert loss.ideal_goodput_bytes_per_s(1e6, 0.25) == pytest.approx(7.5e5)
    assert loss.ideal_goodput_bytes_per_s(1e6, 1.0) == 0.0


def test_packet_count_rounds_up():
    """A partial last packet still counts; zero bytes need no packet."""
    assert loss.packet_count(1448 * 3, 1448) == 3
    assert loss.packet_count(1448 * 3 + 1, 1448) == 4
    assert loss.packet_count(0, 1448) == 0


@given(packets, losses, rounds)
def test_rounds_cdf_monotone_in_k(n, p, k):
    """One more round never lowers P(all delivered)."""
    assert loss.rounds_cdf(n, p, k + 1) >= loss.rounds_cdf(n, p, k)


@given(packets, losses, losses, rounds)
def test_rounds_cdf_smaller_loss_is_higher(n, p, q, k):
    """Less loss never lowers P(all delivered within k rounds)."""
    lo, hi = sorted((p, q))
    assert loss.rounds_cdf(n, lo, k) >= loss.rounds_cdf(n, hi, k)


def test_rounds_cdf_edges_and_broadcast():
    """Zero packets need zero rounds; no loss needs exactly one; arrays broadcast."""
    assert loss.rounds_cdf(0, 0.5, 0) == 1.0
    assert loss.rounds_cdf(5, 0.0, 0) == 0.0
    assert loss.rounds_cdf(5, 0.0, 1) == 1.0
    got = loss.rounds_cdf(np.array([1, 2]), 0.5, np.array([[1], [2]]))
    np.testing.assert_allclose(got, [[0.5, 0.25], [0.75, 0.5625]])


@settings(max_examples=60)
@given(packets, losses)
def test_rounds_pmf_is_a_distribution(n, p):
    """The pmf is non-negative, sums to 1 within 1e-12 and matches the CDF's steps."""
    pmf = loss.rounds_pmf(n, p)
    assert (pmf >= 0).all()
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    ks = np.arange(pmf.size)
    np.testing.assert_allclose(np.cumsum(pmf), loss.rounds_cdf(n, p, ks), atol=1e-12)
    assert loss.expected_rounds(n, p) == pytest.approx(float(ks @ pmf), abs=1e-9)


def test_rounds_pmf_edges():
    """Zero packets: all mass at k = 0; no loss: all at k = 1; max_rounds truncates."""
    assert loss.rounds_pmf(0, 0.3).tolist() == [1.0]
    assert loss.rounds_pmf(7, 0.0).tolist() == [0.0, 1.0]
    np.testing.assert_allclose(loss.rounds_pmf(2, 0.5, max_rounds=2), [0, 0.25, 0.3125])
    assert loss.expected_rounds(0, 0.5) == 0.0
    assert loss.expected_rounds(1, 0.5) == pytest.approx(2.0)  # a geometric mean 1/(1 − p)


@given(packets, losses, quantiles)
def test_quantile_consistent_with_cdf(n, p, q):
    """The quantile is the smallest k whose CDF reaches q."""
    k = loss.rounds_quantile(n, p, q)
    assert loss.rounds_cdf(n, p, k) >= q
    if k > 0:
        assert loss.rounds_cdf(n, p, k - 1) < q


@given(packets, losses, losses, quantiles)
def test_smaller_loss_never_slower_with_retransmission(n, p, q, quantile):
    """Less loss never raises the mean or any quantile of the completion time."""
    lo, hi = sorted((p, q))
    mean = [loss.retransmit_time_s(0.24, 0.2, loss.expected_rounds(n, x)) for x in (lo, hi)]
    tail = [loss.rounds_quantile(n, x, quantile) for x in (lo, hi)]
    assert mean[0] <= mean[1] + 1e-12
    assert tail[0] <= tail[1]


def test_retransmit_time_counts_extra_rounds_only():
    """The first round is the serial budget; each further round adds one RTT."""
    np.testing.assert_allclose(
        loss.retransmit_time_s(0.24, 0.2, np.array([0, 1, 3])), [0.24, 0.24, 0.64]
    )


def _exact_success(k, r, p):
    p = Fraction(p)
    n = k + r
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(r + 1))


@pytest.mark.parametrize(("k", "r", "p"), [(1, 0, 0.3), (5, 2, 0.1), (20, 7, 0.25), (50, 30, 0.4)])
def test_fec_success_is_the_exact_binomial(k, r, p):
    """P(Binomial(k + r, p) ≤ r) agrees with exact rational arithmetic."""
    assert loss.fec_success(k, r, p) == pytest.approx(float(_exact_success(k, r, p)), rel=1e-12)


@given(data_symbols, repair_counts, losses)
def test_fec_success_monotone_in_r(k, r, p):
    """Another repair symbol never lowers the block success."""
    assert loss.fec_success(k, r + 1, p) >= loss.fec_success(k, r, p)


@given(data_symbols, repair_counts, losses, losses)
def test_fec_success_smaller_loss_is_higher(k, r, p, q):
    """Less loss never lowers the block success."""
    lo, hi = sorted((p, q))
    assert loss.fec_success(k, r, lo) >= loss.fec_success(k, r, hi) - 1e-12


@given(data_symbols, st.floats(min_value=0.0, max_value=0.5), st.floats(0.5, 0.9999))
def test_fec_repair_symbols_is_the_least(k, p, target):
    """The chosen r reaches the target and r − 1 does not."""
    r = loss.fec_repair_symbols(k, p, target)
    assert loss.fec_success(k, r, p) >= target
    if r > 0:
        assert loss.fec_success(k, r - 1, p) < target


def test_fec_edges():
    """No data or no loss needs no repair; the overhead is r/k."""
    assert loss.fec_success(0, 0, 0.5) == 1.0
    assert loss.fec_repair_symbols(0, 0.5, 0.999) == 0
    assert loss.fec_repair_symbols(10, 0.0, 0.999) == 0
    assert loss.fec_overhead(200, 50) == 0.25
    plan = loss.fec_plan(245, 0.14, 0.999, 1448)
    assert (plan.repair_symbols, plan.send_bytes) == (63, 308 * 1448)


@settings(max_examples=40)
@given(st.integers(1, 120), losses, st.integers(0, 12))
def test_fec_with_no_repair_is_retransmission(k, p, m):
    """r = 0: topping up the deficit is selective retransmission."""
    assert loss.fec_rounds_cdf(k, 0, p, m) == pytest.approx(loss.rounds_cdf(k, p, m), abs=1e-12)


@settings(max_examples=40)
@given(st.integers(1, 120), st.integers(0, 40), losses, quantiles)
def test_more_repair_symbols_never_slower(k, r, p, q):
    """More repair symbols never add a round, so they cost at most their own send time."""
    symbol_s = 1448 / 41.625e6
    for m in range(6):
        assert loss.fec_rounds_cdf(k, r + 1, p, m) >= loss.fec_rounds_cdf(k, r, p, m) - 1e-12
    before = loss.fec_rounds_quantile(k, r, p, q)
    after = loss.fec_rounds_quantile(k, r + 1, p, q)
    assert after <= before
    t = [
        loss.retransmit_time_s(0.23 + (k + x) * symbol_s, 0.2, rr)
        for x, rr in ((r, before), (r + 1, after))
    ]
    assert t[1] <= t[0] + symbol_s + 1e-12
    assert loss.fec_expected_rounds(k, r + 1, p) <= loss.fec_expected_rounds(k, r, p) + 1e-9


@settings(max_examples=40)
@given(st.integers(0, 120), st.integers(0, 40), losses)
def test_fec_rounds_pmf_is_a_distribution(k, r, p):
    """The FEC rounds pmf sums to 1, matches its CDF and its mean; r = 0 is retransmission."""
    pmf = loss.fec_rounds_pmf(k, r, p)
    assert (pmf >= 0).all()
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    ms = np.arange(pmf.size)
    assert float(ms @ pmf) == pytest.approx(loss.fec_expected_rounds(k, r, p), abs=1e-9)
    if r == 0:
        plain = loss.rounds_pmf(k, p)
        np.testing.assert_allclose(pmf[: plain.size], plain, atol=1e-12)


def test_fec_expected_rounds_matches_retransmission_without_repair():
    """With r = 0 the mean rounds equal plain retransmission's; 63 repair symbols ≈ 1 round."""
    assert loss.fec_expected_rounds(245, 0, 0.14) == pytest.approx(
        loss.expected_rounds(245, 0.14), abs=1e-9
    )
    assert 1.0 < loss.fec_expected_rounds(245, 63, 0.14) < 1.002


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (loss.mathis_rate_bytes_per_s, (1448, 0.2, 1.0)),
        (loss.mathis_rate_bytes_per_s, (1448, 0.2, -0.1)),
        (loss.mathis_rate_bytes_per_s, (-1, 0.2, 0.1)),
        (loss.mathis_rate_bytes_per_s, (1448, 0.0, 0.1)),
        (loss.bbr_bdp_bytes, (-1.0, 0.2)),
        (loss.ideal_goodput_bytes_per_s, (1e6, 1.5)),
        (loss.packet_count, (-1, 1448)),
        (loss.rounds_cdf, (10, 1.0, 3)),
        (loss.rounds_cdf, (10, 0.1, 2.5)),
        (loss.rounds_cdf, (-1, 0.1, 2)),
        (loss.rounds_pmf, (10.5, 0.1)),
        (loss.expected_rounds, (10, 1.0)),
        (loss.expected_rounds, (10, 1 - 1e-12)),
        (loss.rounds_quantile, (10, 0.1, 1.0)),
        (loss.rounds_quantile, (10, 0.1, -0.5)),
        (loss.retransmit_time_s, (0.2, 0.2, -1)),
        (loss.fec_success, (-1, 3, 0.1)),
        (loss.fec_success, (10, 3, 1.0)),
        (loss.fec_success, (True, 3, 0.1)),
        (loss.fec_repair_symbols, (10, 0.1, 1.0)),
        (loss.fec_repair_symbols, (10, 1.0, 0.9)),
        (loss.fec_overhead, (0, 3)),
        (loss.fec_plan, (10, 0.1, 0.9, 0)),
    ],
)
def test_out_of_domain_values_are_model_errors(call, args):
    """Loss ≥ 1, a target of 1, negative or fractional counts are refused."""
    with pytest.raises(ModelError):
        call(*args)


@pytest.mark.parametrize(
    ("name", "args", "needle"),
    [
        ("retransmit", ["--loss", "1"], "loss"),
        ("fec", ["--target", "1"], "target"),
        ("mathis", ["--loss", "-0.1"], "loss"),
        ("bbr", ["--loss", "1.5"], "loss"),
    ],
)
def test_calc_refuses_out_of_domain_values(name, args, needle):
    """`tierwise calc` raises the model's ModelError (the CLI's exit-2 path) naming the value."""
    result = CliRunner().invoke(app, ["calc", name, *args, "--json"])
    assert isinstance(result.exception, ModelError), result.output
    assert needle in str(result.exception)
