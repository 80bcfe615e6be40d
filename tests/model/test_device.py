"""Unit and property tests of the device bounds (tierwise.model.device, calc/device)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.calc import REGISTRY
from tierwise.errors import CatalogError, ModelError, ScenarioError
from tierwise.model import device as m

GB = 1e9
KV_TOK = 147_456.0

sizes = st.floats(min_value=0.0, max_value=1e12, allow_nan=False)
rates = st.floats(min_value=1e6, max_value=1e13, allow_nan=False)
memories = st.floats(min_value=0.0, max_value=1e12, allow_nan=False)


# --- plain values -------------------------------------------------------------------------


def test_bandwidth_is_channels_times_width_times_pin_rate():
    """Two x32 channels at 1 GB/s per pin move 64 GB/s."""
    assert m.memory_bandwidth_bytes_per_s(2, 32, 1e9) == pytest.approx(64e9)


def test_ddr_pin_rate_counts_both_edges():
    """1 GHz double data rate is 2 Gbit/s = 0.25 GB/s per pin; single rate half of that."""
    assert m.ddr_pin_rate_bytes_per_s(1e9) == pytest.approx(0.25e9)
    assert m.ddr_pin_rate_bytes_per_s(1e9, 1) == pytest.approx(0.125e9)


def test_weight_bytes_bf16_is_identity():
    """Two bytes per value is the BF16 reference itself."""
    assert m.weight_bytes(10 * GB, 2.0) == pytest.approx(10 * GB)


def test_decode_step_tokens_and_time_are_consistent():
    """t = (W + KV)/B, r = 1/t and G tokens take G × t."""
    step = m.decode_step_s(8 * GB, 2 * GB, 100 * GB)
    assert step == pytest.approx(0.1)
    assert m.decode_tokens_per_s(step) == pytest.approx(10.0)
    assert m.decode_time_s(45, step) == pytest.approx(4.5)


def test_budget_can_be_negative_and_affords_nothing():
    """Client work longer than a round's share leaves a negative budget and zero tokens."""
    budget = m.model_budget_s(10.0, 20, 0.6)
    assert budget == pytest.approx(-0.1)
    assert m.affordable_tokens(budget, 0.05) == 0.0


def test_free_memory_negative_when_weights_do_not_fit():
    """Weights larger than memory minus reserve leave a negative free space and no requests."""
    free = m.free_memory_bytes(6 * GB, 4 * GB, 4.61 * GB)
    assert free == pytest.approx(-2.61 * GB)
    assert m.requests_fit(free, KV_TOK, 8192) == 0
    assert m.max_context_tokens(free, KV_TOK) == 0


def test_memory_fit_matches_the_vectorised_helpers():
    """The scalar MemoryFit agrees with free_memory_bytes, requests_fit and max_context_tokens."""
    fit = m.memory_fit(12 * GB, 4 * GB, 4.61 * GB, KV_TOK, 8192)
    assert fit.fits_weights
    assert fit.free_bytes == pytest.approx(3.39 * GB)
    assert (fit.requests, fit.max_context_tokens) == (2, 22_989)
    assert isinstance(fit.requests, int) and isinstance(fit.max_context_tokens, int)


def test_memory_fit_weights_too_large():
    """A model that does not fit reports no requests and no context."""
    fit = m.memory_fit(12 * GB, 4 * GB, 16.38 * GB, KV_TOK, 8192)
    assert (fit.fits_weights, fit.requests, fit.max_context_tokens) == (False, 0, 0)


def test_memory_fit_zero_context_counts_no_requests():
    """With no context per request, only the weights are checked; counts stay zero."""
    fit = m.memory_fit(6 * GB, 4 * GB, 1.7 * GB, KV_TOK, 0)
    assert fit.fits_weights and fit.requests == 0 and fit.max_context_tokens > 0


def test_energy_and_power():
    """E = G × e, P = r × e and the power ceiling P / e invert each other."""
    assert m.token_energy_j(100, 0.5) == pytest.approx(50.0)
    assert m.generation_power_w(10, 0.5) == pytest.approx(5.0)
    assert m.power_limited_tokens_per_s(5.0, 0.5) == pytest.approx(10.0)
    assert m.busy_energy_j(600, 3.0) == pytest.approx(1800.0)
    assert m.battery_fraction(20, 500) == pytest.approx(0.04)


def test_binding_constraint_scalars_give_str():
    """The smaller ceiling binds; a tie counts as bandwidth."""
    assert m.binding_constraint(5.2, 18.3) == "bandwidth"
    assert m.binding_constraint(30.0, 18.3) == "power"
    assert m.binding_constraint(18.3, 18.3) == "bandwidth"
    assert isinstance(m.binding_constraint(1.0, 2.0), str)


def test_training_state():
    """Full Adam is 16 B/param; LoRA is 2 B/param base plus 16 B/param adapter."""
    assert m.training_state_bytes(1e9) == pytest.approx(16 * GB)
    assert m.lora_state_bytes(1e9, 1e6) == pytest.approx(2 * GB + 16e6)
    assert m.lora_adapter_params(8, 100, 50, 2) == 2 * 8 * 150
    assert m.params_fit(24 * GB, 16) == pytest.approx(1.5e9)
    assert m.params_fit(1 * GB, 2, fixed_bytes=2 * GB) == 0.0


# --- vectorised input ---------------------------------------------------------------------


def test_decode_step_broadcasts_over_bandwidths():
    """An array of bandwidths gives one step time each."""
    bw = np.array([84.8, 819.0, 1792.0]) * GB
    got = m.decode_step_s(15.14 * GB, 1.21 * GB, bw)
    assert got.shape == (3,)
    np.testing.assert_allclose(got, [16.35 / 84.8, 16.35 / 819, 16.35 / 1792])


def test_capacity_broadcasts_over_memory_options():
    """Memory options 6/12/16/24 GB give the q4_0 table of §12.1.5 elementwise."""
    free = m.free_memory_bytes(np.array([6, 12, 16, 24]) * GB, 4 * GB, 4.61 * GB)
    np.testing.assert_allclose(free / GB, [-2.61, 3.39, 7.39, 15.39])
    np.testing.assert_array_equal(m.requests_fit(free, KV_TOK, 8192), [0, 2, 6, 12])
    assert m.max_context_tokens(free, KV_TOK).shape == (4,)


def test_energy_range_broadcasts():
    """A [low, high] energy per token gives [low, high] energy and power ceilings."""
    e = np.array([0.576, 0.756])
    np.testing.assert_allclose(m.token_energy_j(900, e), [518.4, 680.4])
    np.testing.assert_allclose(m.power_limited_tokens_per_s(13.8, e), [13.8 / 0.576, 13.8 / 0.756])


def test_binding_constraint_arrays_give_array():
    """Arrays of ceilings give an array of names."""
    got = m.binding_constraint(np.array([5.0, 30.0]), np.array([18.0, 18.0]))
    assert list(got) == ["bandwidth", "power"]


def test_weight_bytes_broadcasts_over_formats():
    """One BF16 size against several bytes-per-value gives one size each."""
    bpv = np.array([64 / 32, 34 / 32, 18 / 32, 84 / 256])
    np.testing.assert_allclose(
        m.weight_bytes(16.38 * GB, bpv) / GB, [16.38, 8.701875, 4.606875, 2.6873438], rtol=1e-6
    )


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("func", "args"),
    [
        (m.weight_bytes, (-1.0, 2.0)),
        (m.weight_bytes, (1.0, 0.0)),
        (m.kv_bytes, (-1.0, 8192)),
        (m.decode_step_s, (1.0, 1.0, 0.0)),
        (m.decode_step_s, (-1.0, 1.0, 1.0)),
        (m.decode_step_s, (1.0, 1.0, np.array([1.0, 0.0]))),
        (m.decode_step_s, (np.nan, 1.0, 1.0)),
        (m.decode_tokens_per_s, (0.0,)),
        (m.memory_bandwidth_bytes_per_s, (0, 16, 1e9)),
        (m.ddr_pin_rate_bytes_per_s, (-5.3e9,)),
        (m.model_budget_s, (45.0, 0, 0.3)),
        (m.affordable_tokens, (1.95, 0.0)),
        (m.free_memory_bytes, (-1.0, 0.0, 0.0)),
        (m.requests_fit, (1e9, 0.0, 8192)),
        (m.requests_fit, (1e9, KV_TOK, 0)),
        (m.max_context_tokens, (1e9, -1.0)),
        (m.memory_fit, (1e9, 0.0, -1.0, KV_TOK, 8192)),
        (m.memory_fit, (1e9, 0.0, 0.0, -1.0, 8192)),
        (m.power_limited_tokens_per_s, (13.8, 0.0)),
        (m.generation_power_w, (-1.0, 0.5)),
        (m.battery_fraction, (20, 0)),
        (m.busy_energy_j, (600.0, -1.0)),
        (m.training_state_bytes, (-1.0,)),
        (m.params_fit, (24e9, 0.0)),
        (m.binding_constraint, (-1.0, 1.0)),
    ],
)
def test_out_of_domain_raises_model_error(func, args):
    """Negative sizes, zero rates and other out-of-domain values raise ModelError."""
    with pytest.raises(ModelError):
        func(*args)


def test_calc_unknown_format_is_a_catalog_error():
    """An unknown --format names the known ones."""
    with pytest.raises(CatalogError, match="q4_0"):
        REGISTRY["decode-bound"].run({"format": "q9_9"})


def test_calc_zero_bandwidth_is_a_model_error():
    """Zero bandwidth through the calc layer is refused by the model."""
    with pytest.raises(ModelError):
        REGISTRY["decode-bound"].run({"bandwidth": "0 GB/s"})


def test_calc_rejects_a_bare_number_for_a_size():
    """A size without a unit is never guessed."""
    with pytest.raises(ScenarioError):
        REGISTRY["memory-capacity"].run({"memory": "12"})


def test_calc_format_is_case_insensitive():
    """Q4_0 and q4_0 name the same format."""
    lower = REGISTRY["decode-bound"].run({"format": "q4_0"})
    upper = REGISTRY["decode-bound"].run({"format": "Q4_0"})
    assert lower == upper


# --- properties ---------------------------------------------------------------------------


@given(w=sizes, kv=sizes, b1=rates, b2=rates)
def test_more_bandwidth_is_never_slower(w, kv, b1, b2):
    """Raising the memory bandwidth never lengthens a decode step."""
    lo, hi = sorted((b1, b2))
    assert m.decode_step_s(w, kv, hi) <= m.decode_step_s(w, kv, lo)


@given(
    m1=memories,
    m2=memories,
    reserve=memories,
    resident=memories,
    kv=st.floats(min_value=1.0, max_value=1e7),
    ctx=st.integers(min_value=1, max_value=10**6),
)
def test_more_memory_never_fits_fewer_requests(m1, m2, reserve, resident, kv, ctx):
    """Raising the memory never lowers the request count or the longest context."""
    lo, hi = sorted((m1, m2))
    small = m.memory_fit(lo, reserve, resident, kv, ctx)
    large = m.memory_fit(hi, reserve, resident, kv, ctx)
    assert large.requests >= small.requests
    assert large.max_context_tokens >= small.max_context_tokens
    assert large.fits_weights or not small.fits_weights


@given(
    free=memories,
    kv=st.floats(min_value=1.0, max_value=1e7),
    ctx=st.integers(min_value=1, max_value=10**6),
)
def test_requests_fit_is_the_floor(free, kv, ctx):
    """n requests fit and n + 1 do not."""
    n = m.requests_fit(free, kv, ctx)
    per_request = kv * ctx
    assert n * per_request <= free * (1 + 1e-12)
    assert (n + 1) * per_request > free * (1 - 1e-12)


@given(budget=st.floats(min_value=-10, max_value=100), step=st.floats(min_value=1e-4, max_value=10))
def test_affordable_tokens_fit_the_budget(budget, step):
    """⌊affordable⌋ tokens never take longer than a non-negative budget."""
    tokens = math.floor(m.affordable_tokens(budget, step))
    assert tokens >= 0
    assert m.decode_time_s(tokens, step) <= max(budget, 0.0) * (1 + 1e-12)


@given(bw=st.floats(min_value=0, max_value=1e3), pw=st.floats(min_value=0, max_value=1e3))
def test_binding_constraint_names_the_smaller_ceiling(bw, pw):
    """The binding ceiling is the smaller of the two."""
    which = m.binding_constraint(bw, pw)
    assert (bw if which == "bandwidth" else pw) == min(bw, pw)


@given(bf16=sizes, a=st.floats(0.1, 4.0), b=st.floats(0.1, 4.0))
def test_fewer_bytes_per_value_never_more_weight(bf16, a, b):
    """A smaller format never reads more bytes."""
    lo, hi = sorted((a, b))
    assert m.weight_bytes(bf16, lo) <= m.weight_bytes(bf16, hi)


def test_cli_bad_format_exits_2_with_one_line(cli):
    """An unknown format through the real command line is one error line and exit status 2."""
    run = cli("calc", "decode-bound", "--format", "q9_9", "--json")
    assert run.code == 2
    assert "q4_0" in run.stderr and run.stderr.strip().count("\n") == 0


def test_cli_decode_bound_json(cli):
    """`tierwise calc decode-bound --json` prints SI numbers keyed by unit."""
    run = cli("calc", "decode-bound", "--format", "q4_0", "--json")
    assert run.code == 0, run.stderr
    assert run.json()["step_s"] == pytest.approx(0.0644, abs=5e-5)
