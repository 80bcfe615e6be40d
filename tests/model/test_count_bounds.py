"""Counts from the user never size an array unchecked: chunks and rounds."""

from __future__ import annotations

import pytest
from tests.conftest import calc_json

from tierwise.errors import ModelError
from tierwise.model import loop, multiplex, stream
from tierwise.scenario.loader import bundled_example

HUGE = 10**30


@pytest.mark.parametrize("progress", ["kept", "lost"])
def test_equal_rounds_disconnect_matches_the_per_round_sum(progress):
    """The O(1) form equals the per-round sum of the same rounds."""
    rounds = [1.5734] * 10
    want = loop.disconnect_extra_s(rounds, 10, 1.0, progress)
    assert loop.equal_rounds_disconnect_extra_s(1.5734, 10, 1.0, progress) == pytest.approx(want)


def test_disconnect_after_a_trillion_rounds_is_instant():
    """calc disconnect builds no per-round list: 10^12 rounds answer at once."""
    out = calc_json("disconnect", "--after-round", str(10**12))
    assert out["lost_extra_s"] == pytest.approx(1 + 1.5734e12)


@pytest.mark.parametrize(
    "call",
    [
        lambda: stream.capture_ready_s(HUGE, 0.02),
        lambda: multiplex.scheduled_play_s(stream.MAX_CHUNKS + 1, 0.4, 0.02),
    ],
)
def test_too_many_chunks_is_a_model_error(call):
    """Chunk counts past the limit name it instead of reaching numpy."""
    with pytest.raises(ModelError, match="1,000,000"):
        call()


def test_stream_plan_with_huge_chunks_is_one_line(cli):
    """A stream task of 10^30 chunks: exit 2 and one line, not numpy's dimension error."""
    r = cli("plan", bundled_example("voice-stream"), "--set", f"task.chunks={HUGE}")
    assert r.code == 2 and len(r.stderr.splitlines()) == 1
    assert "limit of 1,000,000" in r.stderr and "dimension" not in r.stderr
