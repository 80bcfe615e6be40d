"""The circuit breaker: bench after repeated failures, doubling, closed by a success."""

from __future__ import annotations

from tierwise.route.gateway import Breaker


def test_bench_after_failures_and_double() -> None:
    """Three failures bench for 5 s; the next three for 10 s; a success resets."""
    b = Breaker(failures_to_bench=3, base_s=5.0)
    for _ in range(2):
        b.failure(100.0)
    assert not b.benched(100.0)
    b.failure(100.0)
    assert b.benched(104.9) and not b.benched(105.1)
    for _ in range(3):
        b.failure(106.0)
    assert b.benched(115.9) and not b.benched(116.1)
    b.success()
    for _ in range(3):
        b.failure(200.0)
    assert not b.benched(205.1)


def test_bench_is_capped_at_a_minute() -> None:
    """However often a site fails, it is probed again within a minute."""
    b = Breaker(failures_to_bench=1, base_s=5.0)
    for t in range(0, 1000, 100):
        b.failure(float(t))
    assert b.bench_s == 60.0


def test_probe_readmits_a_benched_site_half_open() -> None:
    """A probe that answers ends the bench; one more failure benches again, twice as long."""
    b = Breaker(failures_to_bench=3, base_s=5.0)
    for _ in range(3):
        b.failure(100.0)
    b.probe_failed(101.0)  # still down: the bench stays as it was, not doubled
    assert b.benched(104.9) and b.bench_s == 5.0
    b.probe_ok(102.0)
    assert not b.benched(102.0)
    b.failure(103.0)
    assert b.benched(112.9) and not b.benched(113.1)


def test_probe_never_clears_request_failures() -> None:
    """A site whose probe answers while its completions fail is still benched."""
    b = Breaker(failures_to_bench=3, base_s=5.0)
    b.failure(100.0)
    b.failure(100.0)
    b.probe_ok(100.5)
    b.failure(101.0)
    assert b.benched(101.0)
