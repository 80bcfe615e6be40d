"""The gateway over real HTTP on loopback: byte-exact streams, failover, breaker, metrics."""

from __future__ import annotations

import contextlib
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

from tests.modelserver import free_port, model_server
from tierwise.catalog import load_catalog
from tierwise.route.config import RouteConfig
from tierwise.route.gateway import Router
from tierwise.route.predict import site_model

pytestmark = pytest.mark.slow

# Odd chunk boundaries, a multi-byte character split across chunks, CRLF, a comment line.
CHUNKS = [
    b'data: {"choices":[{"text":"h\xc3',
    b'\xa9"}]}\r\n\r\n: keep-alive\n\n',
    b"data: [DONE]\n\n",
]


@contextlib.contextmanager
def served(app, port: int) -> Iterator[str]:
    """Run an ASGI app with uvicorn in a thread on ``port``; yield its URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
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


def gateway(sites: list[dict], tmp_path: Path, **decision) -> tuple[Router, int]:
    cfg = RouteConfig.model_validate(
        {
            "site": sites,
            "decision": {"hysteresis": 0.0, **decision},
            "gateway": {"decisions_log": str(tmp_path / "d.jsonl"), "probe_interval": "0.5 s"},
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
    """Upstream SSE bytes reach the client unchanged; other paths go to the default site."""

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
            metrics = httpx.get(gw + "/metrics").text
    assert 'tierwise_route_requests_total{outcome="ok",site="only"} 1.0' in metrics
    assert "tierwise_route_decide_seconds_count 1.0" in metrics
    assert '"chosen":"only"' in (tmp_path / "d.jsonl").read_text()


def test_failover_breaker_and_no_site(tmp_path: Path) -> None:
    """5xx and stalls fail over within the deadline; a failing site is benched; all down is 503."""
    fast_args = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")
    with (
        model_server(*fast_args) as fast,
        model_server("--decode-step", "5 ms", "--prefill-per-token", "0 s") as slow,
    ):
        router, port = gateway([site("fast", fast, "1 ms"), site("slow", slow, "5 ms")], tmp_path)
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        with served(router.app, port) as gw:
            ok = httpx.post(gw + "/v1/chat/completions", json=body)
            assert ok.status_code == 200 and ok.headers["x-tierwise-site"] == "fast"
            httpx.post(fast + "/admin/behaviour", json={"error_rate": 1.0})
            sites = [
                httpx.post(gw + "/v1/chat/completions", json=body).headers["x-tierwise-site"]
                for _ in range(4)
            ]
            assert sites == ["slow"] * 4
            assert 'tierwise_route_benched{site="fast"} 1.0' in httpx.get(gw + "/metrics").text
            stall = {"error_rate": 0.0, "stall_rate": 1.0, "stall_s": 30.0}
            httpx.post(fast + "/admin/behaviour", json=stall)
            time.sleep(router.cfg.gateway.bench + 1.0)  # the bench ends; fast is preferred again
            t0 = time.perf_counter()
            hdr = {"x-tierwise-deadline": "3 s"}
            stalled = httpx.post(gw + "/v1/chat/completions", json=body, headers=hdr)
            assert stalled.status_code == 200 and stalled.headers["x-tierwise-site"] == "slow"
            assert time.perf_counter() - t0 < 3.0
            for url in (fast, slow):
                httpx.post(url + "/admin/behaviour", json={"down": True, "stall_rate": 0.0})
            none = httpx.post(gw + "/v1/chat/completions", json=body)
    assert none.status_code == 503
    message = none.json()["error"]["message"]
    assert message.startswith("no site could answer") and "503" in message
    log = (tmp_path / "d.jsonl").read_text()
    assert '"outcome":"timeout"' in log and '"outcome":"500 from site"' in log
