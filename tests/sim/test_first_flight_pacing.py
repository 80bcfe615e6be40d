"""A paced sender whose first flight the SYN window caps must not spin.

bbr and bbr-linux with an initial window larger than the SYN window (65,535 B) used
to re-arm their pacing timer in the past for ever once the first flight was out, so
the lab's prediction for ``--factor initcwnd=10,40,300`` never returned.
"""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierwise.model.transport import SYN_WINDOW_BYTES, TIMESTAMP_MSS_BYTES
from tierwise.proto import CONTROLLERS, Sender
from tierwise.sim import PathSpec, TcpSpec, run_request

RTT_S = 0.2
RATE_BYTES_PER_S = 100e6 / 8
SIZE_BYTES = 354_640  # the README's lab request


@pytest.mark.parametrize("cc", ["bbr", "bbr-linux"])
def test_sender_arms_no_pacing_deadline_while_the_peer_window_binds(cc: str) -> None:
    """Once the first flight is out, the only deadline is the retransmission timer."""
    sender = Sender(mss=TIMESTAMP_MSS_BYTES, initial_window=300, cc=cc, first_flight=65_535)
    sender.send(SIZE_BYTES)
    now = 0.0
    while sender.snd_nxt < 65_535:
        if not sender.segments_to_send(now):
            deadline = sender.get_timer()
            assert deadline is not None and deadline > now  # the pacer waits, time moves
            now = deadline
    assert sender.segments_to_send(now) == []
    assert sender.get_timer() == pytest.approx(sender._rto_at)
    assert sender.get_timer() > now + 0.1


@pytest.mark.parametrize("cc", ["bbr", "bbr-linux"])
@pytest.mark.parametrize("iw", [10, 40, 300])
@pytest.mark.parametrize("handshake_rtts", [0, 1])
def test_lab_request_prediction_ends(cc: str, iw: int, handshake_rtts: int) -> None:
    """The lab's prediction (run_request as lab.experiments.request.predict calls it) finishes."""
    result = run_request(
        PathSpec(RATE_BYTES_PER_S, RATE_BYTES_PER_S, RTT_S, queue_bytes=1000 * 1500),
        TcpSpec(
            cc=cc, initial_window=iw, handshake_rtts=handshake_rtts, syn_window=SYN_WINDOW_BYTES
        ),
        SIZE_BYTES,
        1000,
        0.030,
        until=60.0,
    )
    floor_s = (handshake_rtts + 2) * RTT_S / 2 + SIZE_BYTES / RATE_BYTES_PER_S
    assert math.isfinite(result.time_s)
    assert floor_s < result.time_s < floor_s + 8 * RTT_S
    if handshake_rtts and iw * TIMESTAMP_MSS_BYTES > SYN_WINDOW_BYTES:
        # the SYN window binds: the first flight is 65,535 B, a full window needs ≥ 2 RTTs
        assert result.time_s > floor_s + RTT_S


def test_lab_predict_for_the_readme_factor_returns() -> None:
    """``lab request --factor initcwnd=…,300`` on a bbr host: predict() returns."""
    from tierwise.lab.experiments.request import RequestExperiment, predict

    pred = predict(RequestExperiment(), "cold", 300 * TIMESTAMP_MSS_BYTES, "bbr")
    assert pred["closed_form_s"] * 0.9 < pred["sim_s"] < pred["closed_form_s"] * 1.2


FUZZ_EXAMPLES = int(os.environ.get("TIERWISE_FUZZ_EXAMPLES", "40"))  # raise for a long local run


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cc=st.sampled_from(sorted(CONTROLLERS)),
    iw=st.integers(1, 400),
    handshake_rtts=st.integers(0, 2),
    syn_window=st.one_of(st.none(), st.integers(1, 65_535)),
    mss=st.integers(100, 1448),
    loss=st.sampled_from([0.0, 0.01, 0.05]),
    queue_packets=st.sampled_from([math.inf, 8, 200]),
    upload=st.integers(0, 200_000),
)
def test_any_request_ends_with_time_advancing(
    cc, iw, handshake_rtts, syn_window, mss, loss, queue_packets, upload
) -> None:
    """Any controller, window, SYN window, loss and queue: the request finishes, finitely."""
    result = run_request(
        PathSpec(2.5e6, 2.5e6, 0.05, up_loss=loss, down_loss=loss, queue_packets=queue_packets),
        TcpSpec(
            cc=cc,
            mss=mss,
            initial_window=iw,
            handshake_rtts=handshake_rtts,
            syn_window=syn_window,
        ),
        upload,
        1000,
        0.01,
        seed=3,
        until=600.0,
    )
    assert math.isfinite(result.time_s) and result.time_s >= 0.01 + 0.025 - 1e-9  # proc + RTT/2
