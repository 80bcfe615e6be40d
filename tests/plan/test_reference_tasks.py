"""The chapter's printed numbers, recomputed: the table is reproduce.cases.tasks."""

from __future__ import annotations

import pytest

from tests.conftest import plan_example, plan_text
from tierwise.reproduce.cases.tasks import ROWS


@pytest.mark.parametrize(
    ("section", "what", "example", "overrides", "site", "expected", "tol"),
    ROWS,
    ids=[f"{r[0]} {r[1]}" for r in ROWS],
)
def test_reference_time(section, what, example, overrides, site, expected, tol):
    """Each printed completion time is recomputed from a scenario plus --set overrides."""
    assert plan_example(example, *overrides).option(site).time_s == pytest.approx(expected, abs=tol)


def test_upload_share_and_amdahl():
    """§12.1.1: upload is 12 s (about 94 %) and compute about 2.3 % of 12.8 s."""
    o = plan_example("photo-retouch").option("cloud")
    assert o.breakdown_s["upload"] == pytest.approx(12.0)
    assert o.breakdown_s["upload"] / o.time_s == pytest.approx(0.94, abs=0.005)
    assert o.breakdown_s["model"] / o.time_s == pytest.approx(0.023, abs=0.0005)


def test_compressed_round_time():
    """§12.1.3: a compressed round takes 0.25 + 0.03 + 2.5 = 2.78 s, saving 0.72 s per round."""
    p = plan_example("screenshot-agent", "task.compress.ratio=0.25", "task.compress.time=30 ms")
    assert p.option("remote").time_s / 30 == pytest.approx(2.78)


def test_voice_stream_late_chunk():
    """§12.1.2: first play at 78 ms; the 50 ms chunk arrives at 123 ms and stalls playback 5 ms."""
    o = plan_example("voice-stream").option("server")
    assert o.extra["first_play_s"] == pytest.approx(0.078)
    assert o.extra["arrive_s"][:4] == pytest.approx([0.038, 0.058, 0.123, 0.098])
    assert o.extra["stall_s"] == pytest.approx(0.005)
    assert o.extra["play_s"][3] == pytest.approx(0.143)
    assert o.extra["min_buffer_s"] == pytest.approx(0.045)


def test_voice_stream_larger_buffer():
    """§12.1.2: a 45 ms buffer avoids the stall and starts playback 5 ms later (83 ms)."""
    o = plan_example("voice-stream", "task.buffer=45 ms").option("server")
    assert o.extra["stall_s"] == pytest.approx(0.0, abs=1e-12)
    assert o.extra["first_play_s"] == pytest.approx(0.083)


def test_voice_stream_derives_send_and_propagation_from_the_site():
    """Without send/propagation, a chunk's send is chunk_bytes/downlink and propagation RTT/2."""
    p = plan_text("""
[task]
kind = "stream"
chunks = 4
period = "20 ms"
chunk_bytes = "960 B"
compute = "12 ms"
buffer = "40 ms"
[[site]]
name = "server"
tier = "edge"
downlink = "7.68 Mbit/s"
rtt = "10 ms"
[[site]]
name = "phone"
tier = "device"
""")
    server = p.option("server")
    # 960 B at 7.68 Mbit/s = 1 ms send; 5 ms propagation: chunk 0 arrives at 20+12+1+5 ms
    assert server.extra["arrive_s"][0] == pytest.approx(0.038)
    assert p.option("phone").extra["arrive_s"][0] == pytest.approx(0.032)
