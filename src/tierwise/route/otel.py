"""OpenTelemetry traces of the gateway's requests (``[trace]`` in route.toml).

One trace per request: a root span ``POST /v1/chat/completions`` (a child of the
client's W3C ``traceparent`` when it sends one), a span per stage of
:mod:`tierwise.route.stages` (read body, parse, decide, then per attempt: serialize,
network up, engine queue, prefill, decode — for a stream the wait for its first
token, then its decode — network down; after it: deserialize, client send), and a
span per attempt named by its kind — ``attempt`` (the first), ``hedge`` (started while
an earlier one still ran) or ``failover`` (after one failed).
Each attempt's own ``traceparent`` goes upstream, so a server that traces joins the
trace under the attempt that reached it.

The spans are built from the gateway's clock readings when the request ends (only the
root and attempt spans are opened while it runs, the attempts' to name the upstream
parent): the hot path pays one context lookup per attempt. The server-reported stages
(engine queue, prefill, and a whole answer's decode) are placed just before the
answer's headers, where the server spent them; their durations are exact, their
placement within the time to headers is not known. Off unless ``[trace] otlp`` is
set (or a tracer provider is handed to the router, as the tests do); then nothing of
OpenTelemetry is even imported.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["RequestTrace", "Tracing", "provider_from_config"]

_PROPAGATOR = TraceContextTextMapPropagator()


def provider_from_config(otlp: str, sample: float, service: str) -> TracerProvider:
    """A provider exporting by OTLP/HTTP to ``otlp`` in batches (off the request path),
    sampling ``sample`` of the traces that arrive without a sampled parent."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        sampler=ParentBased(TraceIdRatioBased(sample)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp)))
    return provider


class Tracing:
    """The gateway's tracer; :meth:`start` opens one request's trace."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("tierwise.route")

    def start(self, headers: Mapping[str, str], path: str, arrived: float) -> RequestTrace:
        """The root span of a request that arrived at ``arrived`` (perf_counter)."""
        clock = _Clock(time.time_ns(), time.perf_counter())
        parent = _PROPAGATOR.extract(carrier=headers)
        root = self.tracer.start_span(
            f"POST {path}", context=parent, kind=SpanKind.SERVER,
            start_time=clock.ns(arrived), attributes={"http.route": path},
        )  # fmt: skip
        return RequestTrace(self.tracer, root, clock)

    def shutdown(self) -> None:
        """Flush the spans still batched (the gateway is stopping)."""
        if hasattr(self.provider, "shutdown"):
            self.provider.shutdown()


@dataclass
class _Clock:
    """perf_counter seconds to epoch nanoseconds, anchored once per request."""

    epoch_ns: int
    perf: float

    def ns(self, perf: float) -> int:
        return self.epoch_ns + int((perf - self.perf) * 1e9)


@dataclass
class RequestTrace:
    """One request's spans: the root, the attempts by site, and the stages at the end."""

    tracer: Any
    root: Any
    clock: _Clock
    attempts: dict[str, tuple[Any, float]] = field(default_factory=dict)  # site: (span, sent)

    def attempt(self, site: str, sent: float) -> dict[str, str]:
        """Open the attempt's span; the ``traceparent`` (and ``tracestate``) to send upstream."""
        ctx = trace.set_span_in_context(self.root)
        span = self.tracer.start_span(
            "attempt", context=ctx, kind=SpanKind.CLIENT, start_time=self.clock.ns(sent),
            attributes={"tierwise.site": site},
        )  # fmt: skip
        self.attempts[site] = (span, sent)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier

    def finish(self, record: dict[str, Any], marks: Any, end: float, answer: Any = None) -> None:
        """Name and end the attempts, add the stage spans, end the root at ``end``."""
        if not self.root.is_recording():
            return
        self._stage(self.root, "read body", marks.arrived, marks.read_s)
        self._stage(self.root, "parse", marks.arrived + marks.read_s, marks.parse_s)
        self._stage(self.root, "decide", marks.decided - marks.decide_s, marks.decide_s)
        self._end_attempts(record.get("attempts", []), answer)
        self._answer_stages(answer, record, end)
        root = self.root
        root.set_attribute("tierwise.outcome", record.get("outcome", "?"))
        if record.get("chosen"):
            root.set_attribute("tierwise.chosen", record["chosen"])
        d = record.get("decomposition") or {}
        for term, value in d.get("terms_s", {}).items():
            root.set_attribute(f"tierwise.stage.{term}_s", value)
        if "residual_s" in d:
            root.set_attribute("tierwise.stage.residual_s", d["residual_s"])
        if record.get("outcome") != "ok":
            root.set_status(Status(StatusCode.ERROR, record.get("outcome", "")))
        root.end(end_time=self.clock.ns(end))

    def _stage(self, parent: Any, name: str, start: float, duration_s: float) -> None:
        if duration_s <= 0:
            return
        span = self.tracer.start_span(
            name, context=trace.set_span_in_context(parent), start_time=self.clock.ns(start)
        )
        span.end(end_time=self.clock.ns(start + duration_s))

    def _end_attempts(self, outcomes: list[dict[str, Any]], answer: Any) -> None:
        """Each attempt ends at its own time, named ``attempt``, ``hedge`` or ``failover``."""
        ended: list[float] = []
        by_site = {o["site"]: o for o in outcomes}
        for site, (span, sent) in sorted(self.attempts.items(), key=lambda kv: kv[1][1]):
            o = by_site.get(site, {"outcome": "cancelled", "time_s": 0.0})
            won = answer is not None and site == answer.site
            stop = sent + (answer.timing.end_s if won else o["time_s"])
            kind = "attempt" if not ended else ("hedge" if max(ended) > sent else "failover")
            span.update_name(kind)
            span.set_attribute("tierwise.attempt.kind", kind)
            span.set_attribute("tierwise.attempt.outcome", o["outcome"])
            if o["outcome"] != "ok":
                span.set_status(Status(StatusCode.ERROR, o["outcome"]))
            span.end(end_time=self.clock.ns(stop))
            ended.append(stop)

    def _answer_stages(self, a: Any, record: dict[str, Any], end: float) -> None:
        """The answering attempt's stages under its span; the tail under the root."""
        if a is None or a.site not in self.attempts:
            return
        span, sent = self.attempts[a.site]
        parts = (record.get("decomposition") or {}).get("parts_s", {})
        t = a.timing
        headers = sent + t.headers_s
        self._stage(span, "serialize", sent, t.build_s)
        self._stage(span, "network up", sent + t.build_s, parts.get("network.up", 0.0))
        server = [("engine queue", "scheduling.engine"), ("prefill", "compute.prefill")]
        if not record.get("stream"):
            server.append(("decode", "compute.decode"))
        at = headers - sum(parts.get(key, 0.0) for _, key in server)
        if "compute.unsplit" in parts:
            server = [("server", "compute.unsplit")]
            at = headers - parts["compute.unsplit"]
        for name, key in server:
            self._stage(span, name, at, parts.get(key, 0.0))
            at += parts.get(key, 0.0)
        if record.get("stream") and t.first_token_s is not None and t.last_token_s is not None:
            first_s = t.first_token_s - t.headers_s  # the first event after the headers
            self._stage(span, "first token", headers, first_s)
            self._stage(span, "decode", sent + t.first_token_s, t.last_token_s - t.first_token_s)
            self._stage(span, "network down", sent + t.last_token_s, t.end_s - t.last_token_s)
        else:
            self._stage(span, "network down", headers, t.end_s - t.headers_s)
            self._stage(self.root, "deserialize", sent + t.end_s, a.work.usage_s)
            send_s = parts.get("io_wait.client_send", 0.0)
            self._stage(self.root, "client send", end - send_s, send_s)
