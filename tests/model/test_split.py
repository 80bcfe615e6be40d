"""Model split across devices: feature size, encoder placement, TP start-up (§12.2.2, §12.2.4)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.calc import REGISTRY
from tierwise.errors import ModelError
from tierwise.model import split

MBIT = 1e6 / 8  # bytes per second in one Mbit/s
SLOW_UPLINK = 6.4 * MBIT
PORT = 50e9  # one 400 Gbit/s ConnectX-7 port, one direction
FEATURES = 8_192_000.0


def _placement(uplink=SLOW_UPLINK, **kw):
    args = dict(
        encode_flops=1.31e12,
        local_flop_rate=165.2e12,
        remote_flop_rate=989.4e12,
        input_bytes=0.8e6,
        features_bytes=FEATURES,
        uplink_bytes_per_s=uplink,
    )
    return split.encoder_placement(**{**args, **kw})


def test_feature_bytes_counts_every_group():
    """400 tokens × 2560 × 4 groups × 2 bytes is exactly 8,192,000 bytes."""
    assert split.feature_bytes(400, 2560, 4) == FEATURES
    assert split.feature_bytes(400, 2560) == FEATURES / 4


def test_feature_bytes_broadcasts():
    """Token counts and widths given as arrays broadcast together."""
    got = split.feature_bytes(np.array([[100], [400]]), np.array([1280, 2560]), 4)
    assert got.shape == (2, 2)
    np.testing.assert_allclose(got[1, 1], FEATURES)
    np.testing.assert_allclose(got[0], [100 * 1280 * 8, 100 * 2560 * 8])


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(tokens=-1, width=2560),
        dict(tokens=400, width=-2560),
        dict(tokens=400, width=2560, groups=np.nan),
        dict(tokens=400, width=2560, value_bytes=0),
    ],
)
def test_feature_bytes_refuses_out_of_domain(kwargs):
    """Negative counts and zero bytes per value are ModelErrors."""
    with pytest.raises(ModelError):
        split.feature_bytes(**kwargs)


def test_prefix_kv_bytes_and_errors():
    """KV grows linearly with tokens; a negative per-token size is refused."""
    assert split.prefix_kv_bytes(400, 144 * 1024) == 400 * 144 * 1024
    np.testing.assert_allclose(split.prefix_kv_bytes(np.arange(3), 10.0), [0, 10, 20])
    with pytest.raises(ModelError):
        split.prefix_kv_bytes(400, -1.0)


def test_placement_parts_add_up():
    """ΔT equals local − remote and compute + transfer differences."""
    p = _placement(convert_s=0.05)
    assert p.delta_s == pytest.approx(p.local_s - p.remote_s)
    assert p.delta_s == pytest.approx(p.compute_diff_s + p.transfer_diff_s)
    assert p.compute_diff_s == pytest.approx(1.31e12 / 165.2e12 - 1.31e12 / 989.4e12 + 0.05)
    assert p.transfer_diff_s == pytest.approx((FEATURES - 0.8e6) / SLOW_UPLINK)


def test_dominant_term_flips_with_the_link():
    """On the slow uplink the transfer decides; on a 50 GB/s port the encode difference does."""
    assert bool(_placement().transfer_dominates)
    assert not bool(_placement(uplink=PORT).transfer_dominates)


def test_local_encoding_wins_when_features_are_smaller_and_device_faster():
    """ΔT < 0 when the device is faster and sends fewer bytes than the input."""
    p = _placement(local_flop_rate=2e15, features_bytes=0.1e6)
    assert p.delta_s < 0


def test_placement_broadcasts_over_uplinks():
    """An array of uplinks gives an array of ΔT, falling as the link gets faster."""
    uplinks = np.array([1.0, 6.4, 100.0, 400_000.0]) * MBIT
    p = _placement(uplink=uplinks)
    assert p.delta_s.shape == (4,)
    assert np.all(np.diff(p.delta_s) < 0)
    np.testing.assert_array_equal(p.transfer_dominates, [True, True, True, False])


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(uplink=0.0),
        dict(uplink=-1.0),
        dict(input_bytes=-1.0),
        dict(features_bytes=-1.0),
        dict(encode_flops=-1.0),
        dict(local_flop_rate=0.0),
        dict(convert_s=-0.1),
    ],
)
def test_placement_refuses_out_of_domain(kwargs):
    """Zero rates, negative sizes or work, and negative conversion time are ModelErrors."""
    with pytest.raises(ModelError):
        _placement(**kwargs)


@given(
    features=st.floats(0, 1e9),
    extra=st.floats(0, 1e9),
    uplink=st.floats(1e3, 1e11),
)
def test_more_feature_bytes_never_help_local_encoding(features, extra, uplink):
    """ΔT is non-decreasing in the feature size."""
    small = _placement(uplink=uplink, features_bytes=features).delta_s
    large = _placement(uplink=uplink, features_bytes=features + extra).delta_s
    assert large >= small


def test_tp_startup_is_144_alpha():
    """36 layers × 2 reductions × 2 phases = 144 start-ups per token."""
    assert split.tp_reductions(36) == 72
    assert split.tp_startup_s(36, 1.0) == 144.0
    assert split.tp_startup_s(36, 1.0, reductions_per_layer=1, phases_per_reduction=1) == 36.0


def test_tp_startup_broadcasts():
    """α and layer counts as arrays broadcast together."""
    got = split.tp_startup_s(np.array([[12], [36]]), np.array([2e-6, 134e-6]))
    np.testing.assert_allclose(got, [[48 * 2e-6, 48 * 134e-6], [144 * 2e-6, 144 * 134e-6]])


@pytest.mark.parametrize(
    "args", [(-1, 2e-6), (36, -2e-6), (36, np.inf), (36, 2e-6, -2), (36, 2e-6, 2, -1)]
)
def test_tp_startup_refuses_out_of_domain(args):
    """Negative layers, α, reductions or phases are ModelErrors."""
    with pytest.raises(ModelError):
        split.tp_startup_s(*args)


@given(layers=st.integers(0, 200), alpha=st.floats(0, 1e-2), factor=st.floats(1, 100))
def test_tp_startup_scales_with_alpha(layers, alpha, factor):
    """A larger α never shortens the start-up time."""
    assert split.tp_startup_s(layers, alpha * factor) >= split.tp_startup_s(layers, alpha)


def test_calc_entries_report_dominant_term_and_ratio():
    """The calc entries name the dominant term and the ratio to a decode step."""
    slow = REGISTRY["encoder-placement"].run({})
    fast = REGISTRY["encoder-placement"].run({"uplink": "400 Gbit/s"})
    assert (slow["dominant"], fast["dominant"]) == ("transfer", "compute")
    assert slow["local_wins"] is False
    tp = REGISTRY["tp-startup"].run({"alpha": "134 µs", "decode_step": "9.12 ms"})
    assert tp["startups"] == 144
    assert tp["decode_step_ratio"] == pytest.approx(144 * 134e-6 / 9.12e-3)
    assert "decode_step_ratio" not in REGISTRY["tp-startup"].run({"decode_step": "0 s"})


def test_calc_entry_refuses_zero_uplink():
    """A zero uplink on the command line surfaces as a ModelError."""
    with pytest.raises(ModelError):
        REGISTRY["encoder-placement"].run({"uplink": "0 Mbit/s"})
