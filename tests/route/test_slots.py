"""The gateway's own line at a one-slot engine, and the service fit that times it."""

from __future__ import annotations

import asyncio
import random

import pytest

from tierwise.route.estimate import LinearFit
from tierwise.route.slots import SlotQueue


def test_line_admits_oldest_first_and_predicts_the_wait() -> None:
    """One slot: the first runs at once, the others wait in the order they came; the wait
    of a newcomer is the running job's rest plus the waiting jobs' service."""

    async def run() -> None:
        line = SlotQueue(1)
        a = line.add(0.0, 2.0)
        b = line.add(0.5, 1.0)
        c = line.add(0.6, 3.0)
        assert await line.turn(a) == 0.0
        assert line.wait_s(1.0) == pytest.approx(1.0 + 1.0 + 3.0)
        line.progress(a, 1.0, 4.0)  # the stream says it needs 4 s more
        assert line.wait_s(1.0) == pytest.approx(4.0 + 1.0 + 3.0)
        assert line.done(a, 2.5) == 0.0
        assert await asyncio.wait_for(line.turn(b), 1) == 2.5  # b before c
        assert line.done(c, 2.6) is None  # c gave up waiting: it never started
        assert line.wait_s(2.6) == pytest.approx(0.9)
        line.done(b, 3.0)
        assert line.wait_s(3.0) == 0.0 and not line.jobs

    asyncio.run(run())


def test_fit_learns_prefill_and_decode_and_follows_a_slowdown() -> None:
    """Time to first token ``a + b n + c n²`` from noisy observations (n in thousands);
    then the server runs 1.6× slower and the pace follows within a few requests."""
    rng = random.Random(3)
    fit = LinearFit([0.0, 0.6, 0.0], [0.05, 0.6, 0.6], pace_alpha=0.3, groups=[0, 0, 0])

    def truth(n: float) -> float:
        return 0.02 + 0.9 * n + 0.3 * n * n

    for _ in range(40):
        n = 0.016 * 125 ** rng.random()  # 16 to 2,000 tokens, log-uniform
        fit.update([1.0, n, n * n], truth(n) * (1 + rng.gauss(0, 0.05)))
    errors = [abs(fit.predict([1.0, n, n * n]) - truth(n)) / truth(n) for n in (0.05, 0.5, 1.5)]
    assert max(errors) < 0.1
    for _ in range(6):
        n = rng.uniform(0.016, 2.0)
        fit.update([1.0, n, n * n], 1.6 * truth(n))
    assert fit.predict([1.0, 1.0, 1.0]) == pytest.approx(1.6 * truth(1.0), rel=0.15)
