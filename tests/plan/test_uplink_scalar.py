"""The scalar uplink path (one request on the gateway's path) against the vectorised one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.errors import ScenarioError
from tierwise.plan.options import _uplink, _uplink_rate
from tierwise.scenario.schema import Site

rates = st.one_of(
    st.floats(1e-3, 1e12),
    st.integers(1, 10**12),
    st.just(float("inf")),
)
values = st.one_of(
    st.none(),
    rates,
    st.lists(st.floats(1e-3, 1e12), min_size=1, max_size=3),
    st.floats(1e-3, 1e12).map(np.float64),
    st.floats(1e-3, 1e12).map(np.asarray),  # a 0-d array, as a sweep may pass
)


def _site(uplink: object) -> Site:
    return Site.model_construct(name="edge", tier="edge", uplink=uplink)


def _outcome(f, *args):
    try:
        return "ok", f(*args)
    except ScenarioError as exc:
        return "error", str(exc)


@settings(max_examples=300, deadline=None)
@given(site_value=values, override=values, needed=st.booleans())
def test_scalar_uplink_equals_the_vectorised(site_value, override, needed) -> None:
    """Same rate, or the same error, as ``_uplink(…, n=1)[0]`` over scalars, lists and None."""
    site = _site(site_value)
    scalar = _outcome(_uplink_rate, site, override, "route.toml", needed)
    vector = _outcome(lambda: float(_uplink(site, override, 1, "route.toml", needed)[0]))
    assert scalar == vector
    if scalar[0] == "ok":
        assert type(scalar[1]) is float


def test_scalar_uplink_names_a_missing_uplink() -> None:
    """A remote site without an uplink is the same one-line error on the scalar path."""
    with pytest.raises(ScenarioError, match=r"site\.edge\.uplink"):
        _uplink_rate(_site(None), None, "route.toml", needed=True)
    assert _uplink_rate(_site(None), None, "route.toml", needed=False) == float("inf")
