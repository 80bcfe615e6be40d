"""The gateway over real HTTP on loopback: byte-exact streams, failover, breaker, metrics."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.modelserver import free_port, model_servers
from tierwise.catalog import load_catalog
from tierwise.route.config import RouteConfig
from tierwise.route.gateway import Router
from tierwise.route.predict import site_model
from tierwise.route.replay import read_log

pytestmark = pytest.mark.slow

# Odd chunk boundaries, a multi-byte character split across chunks, CRLF, a comment line.
CHUNKS = [
    b'data: {"choices":[{"text":"h\xc3',
    b'\xa9"}]}\r\n\r\n: keep-alive\n\n',
    b"data: [DONE]\n\n",
]


@contextlib.contextmanager
def served(app, port: int, config: uvicorn.Config | None = None) -> Iterator[str]:
    """Run an ASGI app with uvicorn in a thread on ``port`` (or as ``config`` says);
    yield its URL."""
    config = config or uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        assert not thread.is_alive(), "the server did not stop within 10 s (a hung shutdown)"


def gateway(
    sites: list[dict],
    tmp_path: Path,
    probe_interval: str = "0.5 s",
    strategy: str = "predictive",
    **more: str,
) -> tuple[Router, int]:
    log = str(tmp_path / "d.jsonl")
    cfg = RouteConfig.model_validate(
        {
            "site": sites,
            "decision": {"hysteresis": 0.0, "strategy": strategy},
            "gateway": {"decisions_log": log, "probe_interval": probe_interval, **more},
        }
    )
    models = [site_model(s, load_catalog(), "test") for s in cfg.site]
    return Router(cfg, models), free_port()


def site(name: str, url: str, step: str, tier: str = "edge") -> dict:
    return {
        "name": name, "tier": tier, "url": url, "decode_step": step,
        "uplink": "1 Gbit/s", "downlink": "1 Gbit/s", "rtt": "1 ms",
    }  # fmt: skip


def test_stream_passes_through_byte_exact(tmp_path: Path) -> None:
    """Upstream SSE bytes reach the client unchanged; other paths go to the default site;
    a request pinned to an unknown site is a 400."""

    async def stream(request):
        async def body():
            for chunk in CHUNKS:
                yield chunk

        return StreamingResponse(body(), media_type="text/event-stream")

    upstream = Starlette(routes=[Route("/v1/completions", stream, methods=["POST"]),
                                 Route("/v1/models", stream, methods=["GET"])])  # fmt: skip
    with served(upstream, free_port()) as url:
        router, port = gateway([site("only", url, "10 ms")], tmp_path)
        with served(router.app, port) as gw:
            got = httpx.post(gw + "/v1/completions", json={"prompt": "x", "stream": True})
            assert got.content == b"".join(CHUNKS)
            assert got.headers["x-tierwise-site"] == "only"
            assert httpx.get(gw + "/v1/models").content == b"".join(CHUNKS)
            pinned = {"x-tierwise-site": "nowhere"}
            bad = httpx.post(gw + "/v1/completions", json={"prompt": "x"}, headers=pinned)
            assert bad.status_code == 400 and "'nowhere'" in bad.json()["error"]["message"]
            metrics = httpx.get(gw + "/metrics").text
    assert 'tierwise_route_requests_total{outcome="ok",site="only"} 1.0' in metrics
    assert "tierwise_route_decide_seconds_count 1.0" in metrics
    assert '"chosen":"only"' in (tmp_path / "d.jsonl").read_text()


def test_failover_breaker_and_no_site(tmp_path: Path) -> None:
    """5xx fail over and bench a site; a stall is hedged, not waited out; all down is 503.

    Robust under load by construction: no idle probes run (an hour apart); the failing
    site answers every request and every probe with a 503 (``down``), so no probe of a
    failing site re-admits it and the bench (30 s) outlasts any slowness of the host;
    its end is a probe after the site is back, awaited on ``/metrics``, not slept for;
    the slow site is slower by far more than a loaded host's noise in the estimates
    (30 ms against 1 ms per token); and the stall is judged by the log's attempts, not
    by a wall-clock cap.
    """
    fast_args = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")
    slow_args = ("--decode-step", "30 ms", "--prefill-per-token", "0 s")
    with model_servers(fast_args, slow_args) as (fast, slow):
        sites = [site("fast", fast, "1 ms"), site("slow", slow, "30 ms")]
        router, port = gateway(sites, tmp_path, probe_interval="1 h", bench="30 s")
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=60) as c:
            ok = c.post("/v1/chat/completions", json=body)
            assert ok.status_code == 200 and ok.headers["x-tierwise-site"] == "fast"
            httpx.post(fast + "/admin/behaviour", json={"down": True})
            chosen = [c.post("/v1/chat/completions", json=body).headers["x-tierwise-site"]
                      for _ in range(4)]  # fmt: skip
            assert chosen == ["slow"] * 4
            assert 'tierwise_route_benched{site="fast"} 1.0' in c.get("/metrics").text
            stall = {"down": False, "stall_rate": 1.0, "stall_s": 60.0}
            httpx.post(fast + "/admin/behaviour", json=stall)
            _until(lambda: 'benched{site="fast"} 0.0' in c.get("/metrics").text)
            hdr = {"x-tierwise-deadline": "30 s"}
            t0 = time.perf_counter()
            stalled = c.post("/v1/chat/completions", json=body, headers=hdr)
            assert stalled.status_code == 200 and stalled.headers["x-tierwise-site"] == "slow"
            assert time.perf_counter() - t0 < 30.0  # hedged after the patience, not the stall
            for url in (fast, slow):
                httpx.post(url + "/admin/behaviour", json={"down": True, "stall_rate": 0.0})
            none = c.post("/v1/chat/completions", json=body)
    assert none.status_code == 503
    message = none.json()["error"]["message"]
    assert message.startswith("no site could answer") and "503" in message
    records = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    # what the router wrote is what `route decisions` and `route replay` read (the model
    # servers' Server-Timing stages included)
    assert read_log(tmp_path / "d.jsonl") == records
    assert any(r.get("stages", {}).get("server_s") for r in records)
    assert all(isinstance(r["reason"], str) and r["reason"] for r in records)
    assert all(isinstance(p["time_s"], float) for r in records for p in r["predicted"].values())
    hedged = records[5]["attempts"]
    assert [a["site"] for a in hedged] == ["slow", "fast"]
    assert hedged[1]["outcome"] == "overtaken" and hedged[1]["time_s"] >= 1.0
    assert any(a["outcome"] == "503 from site" for r in records[1:5] for a in r["attempts"])


def _until(condition, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds (a state, not a duration, ends the wait)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_a_fault_inside_the_gateway_is_openai_shaped_and_told_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A fault of the gateway's own (here injected into prediction; once it was a
    negative answer size from a forecast) answers OpenAI's 500 with ``server_error`` —
    not a bare "Internal Server Error" — prints its traceback once per place, counts
    every one, and the next request is served."""
    import tierwise.route.gateway as gw_module

    real = gw_module.predict
    faulty = {"on": True}

    def predict(*args, **kwargs):
        if faulty["on"]:
            raise ValueError("a fault injected into prediction")
        return real(*args, **kwargs)

    monkeypatch.setattr(gw_module, "predict", predict)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    with model_servers(("--decode-step", "1 ms")) as (url,):
        router, port = gateway([site("only", url, "1 ms")], tmp_path, probe_interval="1 h")
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=30) as c:
            bad = [c.post("/v1/chat/completions", json=body) for _ in range(3)]
            faulty["on"] = False
            ok = c.post("/v1/chat/completions", json=body)
            metrics = c.get("/metrics").text
    for r in bad:
        assert r.status_code == 500
        err = r.json()["error"]
        assert err["type"] == "server_error" and "ValueError" in err["message"]
        assert set(err) == {"message", "type", "param", "code"}
    assert ok.status_code == 200
    assert "tierwise_route_internal_errors_total 3.0" in metrics
    err_text = capfd.readouterr().err
    assert err_text.count("ValueError: a fault injected into prediction") == 1
    assert "Traceback" in err_text


def test_a_site_whose_prior_is_too_slow_is_tried_once_and_then_learned(tmp_path: Path) -> None:
    """A site's prior says 14 ms a token, its server takes 1 ms: never chosen on its
    prior, it would never be learned. It is tried once (its prior less one standard
    deviation beats the other site), then chosen on what it answered; a site whose
    prior, even so, is far slower (the device) is never tried."""
    args = [("--decode-step", d, "--prefill-per-token", "0 s") for d in ("1 ms", "8 ms", "1 ms")]
    with model_servers(*args) as (hidden, known, far):
        sites = [site("hidden", hidden, "14 ms"), site("known", known, "8 ms"),
                 site("far", far, "200 ms")]  # fmt: skip
        router, port = gateway(sites, tmp_path, probe_interval="1 h")
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=60) as c:
            chosen = [c.post("/v1/chat/completions", json=body).headers["x-tierwise-site"]
                      for _ in range(6)]  # fmt: skip
    assert "hidden" in chosen[:3] and chosen[-3:] == ["hidden"] * 3, chosen
    assert "far" not in chosen
    reasons = [r["reason"] for r in read_log(tmp_path / "d.jsonl")]
    assert sum(r.startswith("trial of hidden") for r in reasons) == 1, reasons
