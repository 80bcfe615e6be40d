"""A client that leaves a whole answer: the guarded protocol tells the gateway when the
connection goes (:class:`~tierwise.route.edge.Departure`, no task per request waiting
for ASGI's disconnect), and the site's request is cancelled then, not at its end."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.modelserver import model_server
from tests.route.routeproc import free_port, route_process, route_toml
from tierwise.route.edge import Departure

pytestmark = pytest.mark.slow

ANSWER_S = 2.0  # 100 tokens at 20 ms: what the client does not wait for


def test_departure_calls_back_once_and_at_once_when_already_gone() -> None:
    """A watcher is called when the client goes, one that comes later at once; one
    removed before is not."""
    calls: list[str] = []
    d = Departure()
    d.watch(lambda: calls.append("a"))
    removed = lambda: calls.append("removed")  # noqa: E731
    d.watch(removed)
    d.unwatch(removed)
    d.left()
    d.left()
    d.watch(lambda: calls.append("late"))
    assert calls == ["a", "late"] and d.gone


def test_a_client_leaving_a_whole_answer_ends_its_request(tmp_path) -> None:
    """The gateway (``tierwise route``, the guarded protocol) ends a whole answer's
    request when its client leaves, logs it as gone, and serves the next one."""
    args = ("--decode-step", "20 ms", "--prefill-per-token", "0 s")
    with model_server(*args) as site:
        port = free_port()
        with route_process(route_toml(tmp_path, site, port)) as (url, _):
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}
            t0 = time.perf_counter()
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(url + "/v1/chat/completions", json=body, timeout=0.3)
            log = tmp_path / "d.jsonl"
            gone = None
            while gone is None and time.perf_counter() - t0 < ANSWER_S:
                lines = log.read_text().splitlines() if log.exists() else []
                gone = next((json.loads(x) for x in lines if '"client gone"' in x), None)
                time.sleep(0.05)
            seen_s = time.perf_counter() - t0
            short = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            after = httpx.post(url + "/v1/chat/completions", json=short, timeout=10)
    assert gone is not None, "the departure was not logged before the answer's end"
    assert gone["total_s"] < ANSWER_S / 2 and seen_s < ANSWER_S / 2
    assert after.status_code == 200


def test_a_client_leaving_a_stream_ends_its_request(tmp_path) -> None:
    """A client that closes a stream after its first events: the gateway stops relaying,
    closes the site's stream (a cut stream in the log), and serves the next one whole."""
    args = ("--decode-step", "20 ms", "--prefill-per-token", "0 s")
    with model_server(*args) as site:
        port = free_port()
        with route_process(route_toml(tmp_path, site, port)) as (url, _):
            body = {"prompt": "hi", "max_tokens": 100, "stream": True}
            t0 = time.perf_counter()
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=10) as r:
                first = next(r.iter_raw())
            log = tmp_path / "d.jsonl"
            cut = None
            while cut is None and time.perf_counter() - t0 < ANSWER_S:
                lines = log.read_text().splitlines() if log.exists() else []
                cut = next((json.loads(x) for x in lines if "stream_error" in x), None)
                time.sleep(0.05)
            short = {"prompt": "hi", "max_tokens": 2, "stream": True}
            after = httpx.post(url + "/v1/completions", json=short, timeout=10)
    assert first.startswith(b"data: ") and r.status_code == 200
    assert cut is not None, "the cut stream was not logged before the answer's end"
    assert cut["stream_error"] == "client disconnected"
    assert cut["stages"]["tokens_out"] < 100 and cut["total_s"] < ANSWER_S / 2
    assert after.status_code == 200 and after.text.endswith("data: [DONE]\n\n")
