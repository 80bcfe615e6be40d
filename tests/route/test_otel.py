"""OpenTelemetry traces of the gateway, checked span by span with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.modelserver import free_port, model_servers
from tests.route.test_gateway import gateway, served, site
from tierwise.catalog import load_catalog
from tierwise.route.config import RouteConfig
from tierwise.route.gateway import Router
from tierwise.route.predict import site_model

pytestmark = pytest.mark.slow

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def _upstream(seen: list[str | None]) -> Starlette:
    """A site that answers at once and notes the ``traceparent`` each request carried."""

    async def complete(request):
        seen.append(request.headers.get("traceparent"))
        await asyncio.sleep(0.008)  # the 6 ms it reports, and more (uvloop may wake early)
        body = {"choices": [{"message": {"content": "ok"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 5}}  # fmt: skip
        return JSONResponse(body, headers={"server-timing": "queue;dur=1, prefill;dur=2, "
                                           "decode;dur=3"})  # fmt: skip

    async def models(request):
        return JSONResponse({"data": []})

    return Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"]),
                             Route("/v1/models", models)])  # fmt: skip


def _traced(sites: list[dict], tmp_path: Path, **more) -> tuple[Router, int, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    router, port = gateway(sites, tmp_path, probe_interval="1 h", **more)
    models = list(router.models.values())
    return Router(router.cfg, models, tracer_provider=provider), port, exporter


def test_trace_joins_the_client_and_reaches_the_site(tmp_path: Path) -> None:
    """The root span continues the client's trace; the attempt's span is the parent the
    site sees in its traceparent; every stage is a span whose length is the record's."""
    seen: list[str | None] = []
    with served(_upstream(seen), free_port()) as url:
        router, port, exporter = _traced([site("only", url, "1 ms")], tmp_path)
        with served(router.app, port) as gw:
            got = httpx.post(gw + "/v1/chat/completions", json=CHAT,
                             headers={"traceparent": TRACEPARENT})  # fmt: skip
            assert got.status_code == 200
    spans = exporter.get_finished_spans()
    by_name = {s.name: s for s in spans}
    root, attempt = by_name["POST /v1/chat/completions"], by_name["attempt"]
    assert {s.context.trace_id for s in spans} == {int(CLIENT_TRACE, 16)}
    assert root.parent.span_id == int(CLIENT_SPAN, 16) and root.kind == SpanKind.SERVER
    assert attempt.parent.span_id == root.context.span_id and attempt.kind == SpanKind.CLIENT
    assert attempt.attributes["tierwise.site"] == "only"
    assert seen == [f"00-{CLIENT_TRACE}-{attempt.context.span_id:016x}-01"]
    record = json.loads((tmp_path / "d.jsonl").read_text())
    parts = record["decomposition"]["parts_s"]
    under_root = {"read body", "parse", "decide", "deserialize", "client send"}
    under_attempt = {"serialize", "network up", "engine queue", "prefill", "decode",
                     "network down"}  # fmt: skip
    for name in under_root | under_attempt:
        span = by_name[name]
        parent = root if name in under_root else attempt
        assert span.parent.span_id == parent.context.span_id, name
        assert parent.start_time <= span.start_time <= span.end_time
    same = {"engine queue": "scheduling.engine", "prefill": "compute.prefill",
            "decode": "compute.decode", "network up": "network.up",
            "client send": "io_wait.client_send"}  # fmt: skip
    for name, key in same.items():
        span = by_name[name]
        assert (span.end_time - span.start_time) / 1e9 == pytest.approx(parts[key], abs=2e-9)
    assert by_name["prefill"].end_time - by_name["prefill"].start_time == pytest.approx(2e6)
    assert root.attributes["tierwise.chosen"] == "only"
    assert root.attributes["tierwise.stage.compute_s"] == pytest.approx(0.005)


def test_failover_and_hedge_spans(tmp_path: Path) -> None:
    """A site answering 500 leaves a failed ``attempt`` and a ``failover``; a stalled one
    an ``attempt`` overtaken by a ``hedge`` started while it still ran."""
    args = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")
    with model_servers(args, ("--decode-step", "5 ms", "--prefill-per-token", "0 s")) as (a, b):
        sites = [site("fast", a, "1 ms"), site("slow", b, "5 ms")]
        router, port, exporter = _traced(sites, tmp_path, bench="1 h", failures_to_bench=99)
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=60) as c:
            httpx.post(a + "/admin/behaviour", json={"error_rate": 1.0})
            assert c.post("/v1/chat/completions", json=CHAT).headers["x-tierwise-site"] == "slow"
            stall = {"error_rate": 0.0, "stall_rate": 1.0, "stall_s": 60.0}
            httpx.post(a + "/admin/behaviour", json=stall)
            assert c.post("/v1/chat/completions", json=CHAT).headers["x-tierwise-site"] == "slow"
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.kind == SpanKind.SERVER]
    assert len(roots) == 2
    kids = [
        sorted((s for s in spans if s.kind == SpanKind.CLIENT
                and s.parent.span_id == r.context.span_id), key=lambda s: s.start_time)
        for r in sorted(roots, key=lambda r: r.start_time)
    ]  # fmt: skip
    failed, failover = kids[0]
    assert (failed.name, failed.attributes["tierwise.attempt.outcome"]) == (
        "attempt", "500 from site")  # fmt: skip
    assert failover.name == "failover" and failover.start_time >= failed.end_time
    assert failover.attributes["tierwise.site"] == "slow"
    stalled, hedge = kids[1]
    assert stalled.attributes["tierwise.attempt.outcome"] == "overtaken"
    assert hedge.name == "hedge" and hedge.start_time < stalled.end_time
    assert not failed.status.is_ok and hedge.status.is_ok


def test_off_by_default_passes_traceparent_on(tmp_path: Path) -> None:
    """Without [trace] the gateway imports nothing of OpenTelemetry and passes the
    client's traceparent upstream unchanged; a bad [trace] value is a config error."""
    seen: list[str | None] = []
    with served(_upstream(seen), free_port()) as url:
        router, port = gateway([site("only", url, "1 ms")], tmp_path, probe_interval="1 h")
        assert router.tracing is None
        with served(router.app, port) as gw:
            httpx.post(gw + "/v1/chat/completions", json=CHAT, headers={"traceparent": TRACEPARENT})
    assert seen == [TRACEPARENT]
    probe = ("import sys, tierwise.route.gateway as g, tierwise.route.cli; "
             "print(any(m.startswith('opentelemetry') for m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
    with pytest.raises(Exception, match="otlp"):
        RouteConfig.model_validate({"site": [site("only", url, "1 ms")],
                                    "trace": {"otlp": "localhost:4318"}})  # fmt: skip
    cfg = RouteConfig.model_validate(
        {"site": [site("only", url, "1 ms")], "trace": {"otlp": "http://127.0.0.1:9/v1/traces"}}
    )
    traced = Router(cfg, [site_model(s, load_catalog(), "t") for s in cfg.site])
    assert traced.tracing is not None
    traced.tracing.shutdown()
