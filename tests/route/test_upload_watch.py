"""The upload watch: fail over when an upload's own progress predicts a loss."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.route.gateway import WATCH_MIN_BYTES, SlowUpload, UploadWatch

MB = 1_000_000


def watch(sent: int, switch_s: float = 1.0) -> UploadWatch:
    w = UploadWatch(bytes(8 * MB), rtt_s=0.06, rest_s=0.15, switch_s=switch_s)
    w.sent = sent
    return w


def test_collapsed_uplink_is_dropped_early() -> None:
    """1 MB taken in 2 s (≤ 4 Mbit/s): 7 MB more cannot beat a 1 s alternative."""
    with pytest.raises(SlowUpload) as caught:
        watch(MB).check(2.0)
    assert caught.value.rate_bytes_per_s == pytest.approx(MB / (2.0 - 0.03))


def test_healthy_upload_goes_on() -> None:
    """1 MB in 0.1 s (80 Mbit/s) leaves 0.7 s + 0.15 s: sooner than the alternative."""
    watch(MB).check(0.11)


def test_nothing_is_judged_before_enough_bytes_or_time() -> None:
    """Slow start: under 256 kB sent, or before 0.1 s, the rate is not measured yet."""
    watch(WATCH_MIN_BYTES - 1).check(50.0)
    watch(4 * MB).check(0.09)


@given(st.integers(WATCH_MIN_BYTES, 8 * MB), st.floats(0.12, 100.0))
def test_never_drops_an_upload_that_would_win(sent: int, elapsed_s: float) -> None:
    """Whenever it drops, even the optimistic rate finishes later than the next site."""
    w = watch(sent)
    try:
        w.check(elapsed_s)
    except SlowUpload as slow:
        remaining_s = (8 * MB - sent) / slow.rate_bytes_per_s + w.rest_s
        assert remaining_s > w.switch_s


def test_chunks_are_the_whole_body() -> None:
    """Streamed in chunks, the body arrives byte for byte."""
    body = bytes(range(256)) * 1000
    w = UploadWatch(body, rtt_s=0.0, rest_s=0.0, switch_s=1e9)

    async def collect() -> bytes:
        return b"".join([chunk async for chunk in w])

    assert asyncio.run(collect()) == body
