"""`tierwise reproduce --lab`: §12.3.5's measured rows from a live run of real kernel TCP."""

from __future__ import annotations

from tests.lab.conftest import lab
from tierwise.reproduce.live import LIVE_SECTION, _cases, live_results


def test_live_rows_judge_the_regime_not_the_milliseconds() -> None:
    """3.9× and 'at the floor' agree; a kept connection far above the floor does not."""
    good = _cases({"cold": {"median_s": 1.2}, "warm-tuned": {"median_s": 0.26}}, 0.2585)
    assert all(c.agrees(c.compute()) for c in good)
    slow = _cases({"cold": {"median_s": 1.2}, "warm-tuned": {"median_s": 0.6}}, 0.2585)
    assert not any(c.agrees(c.compute()) for c in slow)


@lab
def test_live_run_reproduces_the_case() -> None:
    """On the lab, a new connection is over 3× a kept, tuned one, which sits at the floor."""
    results = live_results(runs=3)
    assert [r.case.section for r in results] == [LIVE_SECTION] * 2
    assert all(r.agrees for r in results), [(r.case.quantity, r.computed) for r in results]
