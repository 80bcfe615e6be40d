"""Prepare once, reuse many times: migration, kept state, retries (§12.2.3, §12.5.2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tierwise.calc import REGISTRY
from tierwise.errors import ModelError
from tierwise.model import reuse

MIB = 2**20
LINK = 80e6 / 8  # 80 Mbit/s in bytes per second

savings = st.floats(1e-3, 10.0)
prepares = st.floats(0.0, 1e3)
probabilities = st.floats(1e-6, 1.0)


def test_migration_prepare_is_transfer_plus_restore():
    """M = state / link + restore."""
    assert reuse.migration_prepare_s(64 * MIB, LINK, 1.0) == pytest.approx(64 * MIB / LINK + 1.0)
    assert reuse.migration_prepare_s(0.0, LINK, 0.0) == 0.0


@pytest.mark.parametrize(
    "args", [(-1.0, LINK, 1.0), (64 * MIB, 0.0, 1.0), (64 * MIB, -LINK, 1.0), (64 * MIB, LINK, -1)]
)
def test_migration_prepare_refuses_out_of_domain(args):
    """Negative state or restore, zero or negative link: ModelError."""
    with pytest.raises(ModelError):
        reuse.migration_prepare_s(*args)


def test_net_saving_evaluates_a_list_of_rounds():
    """G(N) = N Δt − M for several N at once."""
    got = reuse.net_saving_s(np.array([0, 10, 20]), 0.4, 7.0)
    np.testing.assert_allclose(got, [-7.0, -3.0, 1.0])


def test_net_saving_broadcasts_rounds_against_savings():
    """Rounds × savings as a grid."""
    got = reuse.net_saving_s(np.array([[10], [20]]), np.array([0.1, 0.4]), 2.0)
    np.testing.assert_allclose(got, [[-1.0, 2.0], [0.0, 6.0]])


@pytest.mark.parametrize("args", [(-1, 0.4, 7.0), (10, 0.4, -1.0), (10, np.nan, 7.0)])
def test_net_saving_refuses_out_of_domain(args):
    """Negative rounds or preparation, non-finite saving: ModelError."""
    with pytest.raises(ModelError):
        reuse.net_saving_s(*args)


def test_net_saving_accepts_a_negative_saving():
    """A slower new device is a valid input: the loss grows each round."""
    assert reuse.net_saving_s(10, -0.1, 1.0) == pytest.approx(-2.0)


def test_breakeven_rounds_examples():
    """N = ⌊M/Δt⌋ + 1; an exact multiple still needs one more round; M = 0 needs one."""
    assert reuse.breakeven_rounds(0.4, 7.7108864) == 20
    assert reuse.breakeven_rounds(0.5, 8.0) == 17
    assert reuse.breakeven_rounds(1.0, 0.0) == 1
    assert reuse.breakeven_rounds(np.inf, 7.7) == 1
    assert isinstance(reuse.breakeven_rounds(0.4, 7.7), int)


def test_breakeven_rounds_broadcasts():
    """Arrays give integer arrays."""
    got = reuse.breakeven_rounds(np.array([0.2, 0.4, 0.8]), 7.7108864)
    assert got.dtype.kind == "i"
    np.testing.assert_array_equal(got, [39, 20, 10])


@pytest.mark.parametrize("args", [(0.0, 7.7), (-0.4, 7.7), (0.4, -1.0), (np.nan, 7.7)])
def test_breakeven_rounds_refuses_out_of_domain(args):
    """A saving that is not positive never pays back; negative preparation is refused."""
    with pytest.raises(ModelError):
        reuse.breakeven_rounds(*args)


@given(saving=savings, prepare=prepares)
def test_breakeven_rounds_is_where_net_saving_turns_positive(saving, prepare):
    """G(N) > 0 at the break-even N and G(N − 1) ≤ 0."""
    n = reuse.breakeven_rounds(saving, prepare)
    assert reuse.net_saving_s(n, saving, prepare) > 0
    assert reuse.net_saving_s(n - 1, saving, prepare) <= 0


@given(saving=savings, more=st.floats(1.0, 100.0), prepare=prepares)
def test_more_saving_never_raises_breakeven(saving, more, prepare):
    """A larger Δt never needs more rounds."""
    assert reuse.breakeven_rounds(saving * more, prepare) <= reuse.breakeven_rounds(saving, prepare)


@given(saving=savings, prepare=prepares, extra=st.floats(0.0, 1e3))
def test_larger_preparation_never_lowers_breakeven(saving, prepare, extra):
    """A larger M never needs fewer rounds."""
    assert reuse.breakeven_rounds(saving, prepare + extra) >= reuse.breakeven_rounds(
        saving, prepare
    )


def test_keep_state_chain():
    """Saved GPU-seconds ÷ holding share gives the break-even hold time."""
    saved = reuse.recompute_saving_s(3e14, 1e14, 1e15)
    share = reuse.holding_share(8e9, 80e9)
    assert saved == pytest.approx(0.2)
    assert share == pytest.approx(0.1)
    assert reuse.hold_breakeven_s(saved, share) == pytest.approx(2.0)


def test_hold_breakeven_with_nothing_held_is_infinite():
    """Holding zero bytes never uses up the saving."""
    assert reuse.hold_breakeven_s(0.2, 0.0) == np.inf
    np.testing.assert_array_equal(
        reuse.hold_breakeven_s(np.array([0.2, 0.2]), np.array([0.0, 0.1])), [np.inf, 2.0]
    )


def test_keep_state_broadcasts():
    """Arrays of states and memories broadcast."""
    share = reuse.holding_share(np.array([1e9, 4e9]), np.array([[8e9], [80e9]]))
    np.testing.assert_allclose(share, [[0.125, 0.5], [0.0125, 0.05]])
    saved = reuse.recompute_saving_s(np.array([2e14, 3e14]), 1e14, 1e15)
    np.testing.assert_allclose(saved, [0.1, 0.2])


@pytest.mark.parametrize(
    ("func", "args"),
    [
        (reuse.recompute_saving_s, (-1.0, 0.0, 1e15)),
        (reuse.recompute_saving_s, (3e14, 1e14, 0.0)),
        (reuse.holding_share, (-1.0, 80e9)),
        (reuse.holding_share, (1e9, 0.0)),
        (reuse.holding_share, (81e9, 80e9)),
        (reuse.hold_breakeven_s, (-0.1, 0.01)),
        (reuse.hold_breakeven_s, (0.1, -0.01)),
        (reuse.resend_saving_s, (-1.0, 0.0, 1e6)),
        (reuse.resend_saving_s, (66207, 10193, 0.0)),
    ],
)
def test_keep_state_refuses_out_of_domain(func, args):
    """Negative sizes or work, zero rates or memory, state larger than memory: ModelError."""
    with pytest.raises(ModelError):
        func(*args)


def test_resend_saving():
    """Fewer bytes on the wire save (S_resend − S_kept) / B."""
    assert reuse.resend_saving_s(2e6, 1e6, 1e6) == pytest.approx(1.0)


def test_retry_cost():
    """E = C/p and 1/p attempts; certain success costs exactly C."""
    assert reuse.expected_retry_cost(3.0, 1.0) == 3.0
    assert reuse.expected_retry_cost(1.0, 0.5) == 2.0
    np.testing.assert_allclose(reuse.expected_attempts(np.array([1.0, 0.5, 0.25])), [1, 2, 4])
    np.testing.assert_allclose(
        reuse.expected_retry_cost(np.array([[1.0], [2.0]]), np.array([1.0, 0.5])), [[1, 2], [2, 4]]
    )


@pytest.mark.parametrize("args", [(1.0, 0.0), (1.0, -0.1), (1.0, 1.01), (-1.0, 0.5), (1.0, np.nan)])
def test_retry_cost_refuses_out_of_domain(args):
    """p must lie in (0, 1]; the cost must be non-negative."""
    with pytest.raises(ModelError):
        reuse.expected_retry_cost(*args)


@given(p=probabilities, q=probabilities, cost=st.floats(0.0, 1e6))
def test_retry_cost_falls_as_success_rises(p, q, cost):
    """A higher success probability never costs more, and E ≥ C."""
    assume(p <= q)
    assert reuse.expected_retry_cost(cost, q) <= reuse.expected_retry_cost(cost, p)
    assert reuse.expected_retry_cost(cost, p) >= cost


def test_migration_calc_without_saving_has_no_breakeven():
    """A zero saving per round never pays back: break-even is null, G(N) = −M."""
    out = REGISTRY["migration"].run({"saving": "0 s", "rounds": "5"})
    assert out["breakeven_rounds"] is None
    assert out["net_saving_s"]["5"] == pytest.approx(-out["prepare_s"])


def test_keep_state_calc_refuses_state_larger_than_memory():
    """The calc entry surfaces the model's domain error."""
    with pytest.raises(ModelError):
        REGISTRY["keep-state"].run({"state": "100 GB"})
