"""The chapter's printed numbers, recomputed: the table is reproduce.cases.queqiao."""

from __future__ import annotations

import pytest

from tests.conftest import plan_text
from tierwise.calc import REGISTRY
from tierwise.reproduce.cases.queqiao import MS, ROWS, SPEECH


@pytest.mark.parametrize(
    ("section", "what", "get", "expected", "tol"), ROWS, ids=[f"{r[0]} {r[1]}" for r in ROWS]
)
def test_queqiao_ideal_times(section, what, get, expected, tol):
    """The lower bound the §12.3.5 case compares its measurements with."""
    assert get(plan_text(SPEECH)) == pytest.approx(expected, abs=tol)


def test_model_speedup_saves_at_most_27_ms():
    """§12.3.5: a model 10× faster (30 → 3 ms) saves at most 27 ms."""
    p = plan_text(SPEECH, "task.compute.time=3 ms")
    assert (plan_text(SPEECH).option("remote").time_s - p.option("remote").time_s) / MS == (
        pytest.approx(27.0)
    )


def test_cold_request_model_against_the_case():
    """A cold TCP+TLS 1.3 request with IW 10 on a clean path: 238.5 + 400 + 795 ms."""
    p = plan_text(SPEECH, "site.remote.connection=reused", "site.remote.initial_window=10")
    assert p.option("remote").time_s / MS == pytest.approx(1433.3, abs=0.5)
    r = REGISTRY["slow-start"].run({})
    assert r["rounds"] == 5
    assert r["window_wait_s"] == pytest.approx(p.option("remote").breakdown_s["window_wait"])
