"""The lowest-latency baseline is a common router: no prediction drives its attempts."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.modelserver import model_server, model_servers
from tests.route.test_gateway import gateway, served, site
from tierwise.route.predict import RequestShape, predict
from tierwise.route.upload import MIN_BYTES

pytestmark = pytest.mark.slow

FAST = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def _big_shape() -> RequestShape:
    return RequestShape(
        path="/v1/chat/completions", bytes_up=MIN_BYTES, prompt_tokens=10, output_tokens=5,
        output_learned=False, stream=False, deadline_s=None, residency="any",
    )  # fmt: skip


def test_common_router_waits_out_its_fixed_timeout(tmp_path: Path) -> None:
    """A stalled site is given up on at gateway.timeout (an ordinary timeout, then the next
    site), not hedged at 3× its prediction; no upload watch; the timeout enters the EWMA."""
    with model_servers(FAST, FAST) as (fast, other):
        sites = [site("fast", fast, "1 ms"), site("other", other, "1 ms")]
        router, port = gateway(
            sites, tmp_path, probe_interval="1 h", strategy="lowest-latency", timeout="1.5 s"
        )
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=60) as c:
            for _ in range(3):  # each site once (an unknown EWMA is 0), then the lower
                assert c.post("/v1/chat/completions", json=BODY).status_code == 200
            pred = predict(router.sites["fast"].model, _big_shape())
            unwatched = router._upload_watch("fast", b"x" * MIN_BYTES, pred, 1.0)
            patience_s = router._patience_s(pred, 1.0)
            first = min(router.latency, key=router.latency.__getitem__)
            url = fast if first == "fast" else other
            httpx.post(url + "/admin/behaviour", json={"stall_rate": 1.0, "stall_s": 30.0})
            hdr = {"x-tierwise-deadline": "20 s"}
            answer = c.post("/v1/chat/completions", json=BODY, headers=hdr)
            latency = dict(router.latency)
    assert unwatched is None and patience_s == float("inf")
    assert answer.status_code == 200 and answer.headers["x-tierwise-site"] != first
    last = json.loads((tmp_path / "d.jsonl").read_text().splitlines()[-1])
    (stalled, *_) = last["attempts"]
    assert stalled["site"] == first and stalled["outcome"] == "timeout"
    assert 1.5 <= stalled["time_s"] < 10.0
    assert latency[first] >= 0.3 * 1.5  # the timed-out attempt's time is a sample


def test_predictive_keeps_its_watch_and_patience(tmp_path: Path) -> None:
    """The predictive strategy still watches a large remote upload and hedges."""
    with model_server(*FAST) as fast:
        router, port = gateway([site("fast", fast, "1 ms")], tmp_path, probe_interval="1 h")
        with served(router.app, port):
            pred = predict(router.sites["fast"].model, _big_shape())
            watch = router._upload_watch("fast", b"x" * MIN_BYTES, pred, 1.0)
            patience_s = router._patience_s(pred, 1.0)
    assert watch is not None and 1.0 <= patience_s < 10.0
