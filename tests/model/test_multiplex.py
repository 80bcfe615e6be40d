"""Several streams: link schedules, delivery order, on-time audio, cancel (§12.3.4, §12.4.2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import tierwise.calc.network  # noqa: F401  (registers the entries)
from tierwise.cli import app
from tierwise.errors import ModelError, ScenarioError
from tierwise.model import multiplex

times = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
flow_sets = st.lists(
    st.tuples(times, st.floats(min_value=0.0, max_value=10.0), st.integers(0, 3)),
    min_size=1,
    max_size=6,
)


def _flows(raw):
    return [multiplex.Flow(f"f{i}", a, s, prio) for i, (a, s, prio) in enumerate(raw)]


def test_fifo_is_non_preemptive_by_arrival():
    """FIFO ignores priority and serves in arrival order; ties keep listing order."""
    done = multiplex.link_schedule(
        [("late", 1.0, 1.0, 0), ("first", 0.0, 2.0, 5), ("tie", 1.0, 1.0, 0)], "fifo"
    )
    assert done == {"late": 3.0, "first": 2.0, "tie": 4.0}


def test_priority_preempts_and_resumes():
    """An urgent flow interrupts a bulk one, which resumes where it stopped."""
    done = multiplex.link_schedule(
        [multiplex.Flow("bulk", 0, 4, 1), multiplex.Flow("ping", 1, 0.5, 0)], "priority"
    )
    assert done == {"bulk": 4.5, "ping": 1.5}


def test_idle_link_waits_for_the_next_arrival():
    """A gap with nothing to send leaves the link idle under both policies."""
    flows = [("a", 0, 1, 0), ("b", 5, 1, 0)]
    for policy in multiplex.POLICIES:
        assert multiplex.link_schedule(flows, policy) == {"a": 1.0, "b": 6.0}


@given(flow_sets)
def test_both_policies_finish_the_link_at_the_same_time(raw):
    """Both schedules are work-conserving, so the last byte leaves at the same time."""
    flows = _flows(raw)
    fifo = multiplex.link_schedule(flows, "fifo")
    prio = multiplex.link_schedule(flows, "priority")
    assert max(prio.values()) == pytest.approx(max(fifo.values()), abs=1e-9)
    for f in flows:
        assert prio[f.name] >= f.arrival_s + f.send_s - 1e-9
        assert fifo[f.name] >= f.arrival_s + f.send_s - 1e-9


@given(flow_sets, times, st.floats(0.0, 10.0))
def test_the_most_urgent_flow_never_waits(raw, arrival, send):
    """A flow more urgent than all others finishes at arrival + send under priority."""
    flows = [*_flows(raw), multiplex.Flow("urgent", arrival, send, -1)]
    assert multiplex.link_schedule(flows, "priority")["urgent"] == pytest.approx(arrival + send)


@pytest.mark.parametrize(
    ("flows", "policy"),
    [
        ([("a", 0, 1, 0)], "round-robin"),
        ([], "fifo"),
        ([("a", 0, 1, 0), ("a", 1, 1, 0)], "fifo"),
        ([("a", 0, -1, 0)], "priority"),
        ([("a", -1, 1, 0)], "fifo"),
        ([("a", "soon", 1, 0)], "fifo"),
    ],
)
def test_bad_schedules_are_model_errors(flows, policy):
    """Unknown policy, no flows, duplicate names, negative times are refused."""
    with pytest.raises(ModelError):
        multiplex.link_schedule(flows, policy)


def test_unknown_policy_lists_the_known_ones():
    """The error names the policies that exist."""
    with pytest.raises(ModelError, match="fifo, priority"):
        multiplex.link_schedule([("a", 0, 1, 0)], "wfq")


segment_lists = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), times), min_size=1, max_size=12
)


@given(segment_lists)
def test_per_stream_delivery_is_never_later(segments):
    """Per-stream ordering delivers every stream no later than one ordered byte stream."""
    ordered = multiplex.delivery_times(segments, "connection")
    per_stream = multiplex.delivery_times(segments, "stream")
    for name, when in per_stream.stream_s.items():
        assert when <= ordered.stream_s[name]
        assert when == per_stream.complete_s[name]  # no stream waits for another
    assert (np.diff(ordered.segment_s) >= 0).all()
    assert (ordered.segment_s >= [a for _, a in segments]).all()


def test_a_gap_blocks_only_its_own_stream_per_stream():
    """Connection order holds the audio behind the image's gap; per-stream does not."""
    segments = [("image", 1.0), ("image", 7.0), ("audio", 3.0)]
    ordered = multiplex.delivery_times(segments, "connection")
    assert ordered.segment_s.tolist() == [1.0, 7.0, 7.0]
    assert ordered.wait_s == {"image": 0.0, "audio": 4.0}
    assert multiplex.delivery_times(segments, "stream").segment_s.tolist() == [1.0, 7.0, 3.0]


@pytest.mark.parametrize(
    ("segments", "mode"),
    [([("a", 1.0)], "http2"), ([], "stream"), ([("a", -1.0)], "connection"), ([("a",)], "stream")],
)
def test_bad_deliveries_are_model_errors(segments, mode):
    """Unknown mode, no segments, negative or missing arrivals are refused."""
    with pytest.raises(ModelError):
        multiplex.delivery_times(segments, mode)


def test_on_time_content_counts_only_chunks_in_time():
    """A chunk arriving exactly at its slot plays; a later one is dropped."""
    play = multiplex.scheduled_play_s(3, 0.4, 0.02)
    np.testing.assert_allclose(play, [0.4, 0.42, 0.44])
    assert multiplex.on_time_content_s([0.4, 0.5, 0.1], play, 0.02) == pytest.approx(0.04)
    assert multiplex.on_time_content_s([0.0, 0.0, 0.0], play, [0.01, 0.02, 0.03]) == pytest.approx(
        0.06
    )


@given(st.lists(times, min_size=1, max_size=10), st.floats(0.0, 1.0))
def test_earlier_arrivals_never_lose_content(arrivals, earlier):
    """Arriving earlier never reduces the audio that plays on time."""
    play = multiplex.scheduled_play_s(len(arrivals), 0.4, 0.02)
    late = multiplex.on_time_content_s(arrivals, play, 0.02)
    soon = multiplex.on_time_content_s(np.maximum(np.array(arrivals) - earlier, 0), play, 0.02)
    assert soon >= late


def test_media_first_beats_fifo_behind_bulk():
    """Media-first arrivals are their own send time after ready; FIFO waits for the bulk."""
    ready = np.array([0.1, 0.2])
    first = multiplex.media_arrivals_s(ready, 0.01, 5.0, "priority", 0.05)
    fifo = multiplex.media_arrivals_s(ready, 0.01, 5.0, "fifo", 0.05)
    np.testing.assert_allclose(first, [0.16, 0.26])
    np.testing.assert_allclose(fifo, [5.06, 5.07])


def test_on_time_errors():
    """Mismatched shapes and a zero period are refused."""
    with pytest.raises(ModelError):
        multiplex.on_time_content_s([0.1, 0.2], [0.4], 0.02)
    with pytest.raises(ModelError):
        multiplex.on_time_content_s([0.1], [0.4], 0.0)
    with pytest.raises(ModelError):
        multiplex.scheduled_play_s(-1, 0.4, 0.02)


def test_cancel_two_paths():
    """Flush silences at once, drain after the buffer; the remote stops after the delay."""
    flushed = multiplex.cancel(1.0, 3, 0.02, 0.1)
    drained = multiplex.cancel(1.0, 3, 0.02, 0.1, flush=False)
    assert flushed == multiplex.Cancel(1.0, pytest.approx(1.1), pytest.approx(5.0))
    assert drained.silent_s == pytest.approx(1.06)
    assert drained.remote_stop_s == flushed.remote_stop_s


@pytest.mark.parametrize(
    "args", [(-1.0, 3, 0.02, 0.1), (0.0, -1, 0.02, 0.1), (0.0, 3, 0.0, 0.1), (0.0, 2.5, 0.02, 0.1)]
)
def test_cancel_errors(args):
    """Negative times, negative or fractional chunk counts and a zero period are refused."""
    with pytest.raises(ModelError):
        multiplex.cancel(*args)


def test_calc_needs_one_value_per_flow():
    """`tierwise calc link-schedule` refuses lists of different lengths."""
    result = CliRunner().invoke(app, ["calc", "link-schedule", "--send", "5 s", "--json"])
    assert isinstance(result.exception, ScenarioError)
    assert "--send 1" in str(result.exception)
