"""A site's slots learned from its streams when the config does not say (issue 29).

The rule alone on made-up timelines (a one-slot server, two slots, a server that
serves everyone at once), then llama.cpp's server (one request at a time) behind a
site without ``slots``: after a few overlapping streams the gateway keeps its line.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.route.test_gateway import _until, gateway, served
from tierwise.lab.world.engine import engine_unavailable_reason, llama_server, write_tiny_gguf
from tierwise.route.slots import HOLDS, SlotLearner


def serve(slots: int | None, arrivals: list[float], service_s: list[float]) -> SlotLearner:
    """Run a server with ``slots`` (None: all at once) FIFO over the arrivals; feed the
    learner its begins, first tokens and ends in time order; return it."""
    events: list[tuple[float, int, str, int]] = []  # (time, order, kind, job)
    lanes = [0.0] * (slots or len(arrivals))
    for i, (at, s) in enumerate(zip(arrivals, service_s, strict=True)):
        lane = min(range(len(lanes)), key=lanes.__getitem__)
        start = max(at, lanes[lane])
        lanes[lane] = start + s
        events += [(at, 0, "begin", i), (start + 0.01, 1, "first", i), (start + s, 2, "end", i)]
    learner, keys = SlotLearner(), {}
    for t, _, kind, i in sorted(events):
        if kind == "begin":
            keys[i] = learner.begin(t)
        elif kind == "first":
            learner.first(keys[i], t, 0.01)
        else:
            learner.end(keys[i], t)
    return learner


def test_one_slot_is_learned_from_streams_that_wait() -> None:
    learner = serve(1, [0.0, 0.001, 0.002, 0.003, 1.0], [0.3, 0.2, 0.25, 0.2, 0.1])
    assert learner.holds >= HOLDS and learner.value == 1


def test_two_slots_are_learned() -> None:
    arrivals = [0.0, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006]
    learner = serve(2, arrivals, [0.3, 0.35, 0.2, 0.25, 0.3, 0.2, 0.3])
    assert learner.value == 2


def test_a_few_requests_are_not_enough() -> None:
    assert serve(1, [0.0, 0.001], [0.3, 0.3]).value is None  # one hold, not three


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 2.0), min_size=2, max_size=12),
    st.lists(st.floats(0.05, 1.0), min_size=12, max_size=12),
)
def test_a_server_that_serves_everyone_keeps_no_slots(arrivals, service) -> None:
    """Every stream starts at once: overlaps, never a hold, so no line is imposed."""
    learner = serve(None, sorted(arrivals), service[: len(arrivals)])
    assert learner.value is None and learner.holds == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.lists(st.floats(0.05, 1.0), min_size=12, max_size=12))
def test_a_learned_value_never_exceeds_the_slots(slots, service) -> None:
    """Whatever the service times, what is learned is never more than the server has."""
    arrivals = [0.001 * i for i in range(12)]
    learner = serve(slots, arrivals, service)
    assert learner.served <= slots
    assert learner.value in (None, learner.served)


@pytest.mark.slow
@pytest.mark.skipif(
    engine_unavailable_reason() is not None, reason=str(engine_unavailable_reason())
)
def test_the_engine_slots_are_learned(tmp_path: Path) -> None:
    """llama.cpp's server, one request at a time, as a site without ``slots``: overlapping
    streams show it; the gateway then keeps its line (later requests wait in it, and the
    wait is predicted).

    The streams overlap by construction, whatever the host's load: the engine is stopped
    (SIGSTOP) until all three are in flight at the gateway, so none can end before the
    others are sent."""
    openai = pytest.importorskip("openai")
    model = write_tiny_gguf(tmp_path / "tiny.gguf", seed=1)
    engine_site = {"name": "engine", "tier": "edge", "decode_step": "2 ms",
                   "prefill_per_token": "0.1 ms", "uplink": "1 Gbit/s",
                   "downlink": "1 Gbit/s", "rtt": "1 ms"}  # fmt: skip
    with llama_server(model) as (engine, proc):
        router, port = gateway([{**engine_site, "url": engine}], tmp_path, probe_interval="1 h")
        with served(router.app, port) as gw:
            client = openai.OpenAI(base_url=gw + "/v1", api_key="unused", max_retries=0)
            messages = [{"role": "user", "content": "count to many"}]
            counts: list[int] = []

            def stream() -> None:
                chunks = client.chat.completions.create(
                    model="tiny", messages=messages, max_tokens=120, stream=True
                )
                counts.append(sum(1 for c in chunks if c.choices and c.choices[0].delta.content))

            def overlapping() -> None:
                """Three streams, all in flight at the gateway before the engine goes on."""
                before = len(counts)
                proc.send_signal(signal.SIGSTOP)
                try:
                    threads = [threading.Thread(target=stream) for _ in range(3)]
                    for t in threads:
                        t.start()
                    _until(lambda: router.inflight["engine"] == 3)
                finally:
                    proc.send_signal(signal.SIGCONT)
                for t in threads:
                    t.join()
                assert counts[before:] == [120] * 3

            deadline = time.monotonic() + 120
            while router.models["engine"].slots is None:
                assert time.monotonic() < deadline, "no slots learned"
                overlapping()
            overlapping()
    log = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    last = log[-3:]
    assert all(r["slots"]["engine"] == {"value": 1, "from": "learned from streams"} for r in last)
    assert max(r["stages"]["queued_s"] for r in last) > 0  # waited in the gateway's line
    assert max(r["predicted"]["engine"]["stages_s"]["queue"] for r in last) > 0
