"""The gateway: an OpenAI-compatible front that predicts, chooses, forwards and learns.

uvicorn in front, one warm pool per site behind (:class:`~tierwise.route.h1.H1Transport`).
The completions are served as plain ASGI — the request's headers read from the scope
once, the answer sent as two ASGI messages, its upstream request and answer as raw
bytes and header pairs (no starlette ``Request``/``Response`` nor httpx model objects on
that path); starlette routes the rest (``/metrics``, the pass-through, 404s) and the
probes use ``httpx.AsyncClient`` over the same pool. For
``/v1/chat/completions`` and ``/v1/completions`` it predicts each site's whole-task
time (:mod:`tierwise.route.predict`), tries the chosen site and fails over — on a
timeout, a connection error or a 5xx, within the request's deadline — to the next;
a site that keeps failing is benched (circuit breaker) and probed back. Streams are
passed through byte for byte. Every attempt's stages feed the estimates
(:mod:`tierwise.route.learn`); every request is a line in the decisions log; the
counters are on ``/metrics`` (Prometheus). Other paths go to the default site.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import functools
import json
import math
import sys
import time
import traceback
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tierwise.errors import ScenarioError
from tierwise.openai_api import RequestRejected, error_body, parse_request
from tierwise.route.config import RouteConfig
from tierwise.route.edge import DEPARTURE, Gate, read_body, refuse, rejection
from tierwise.route.estimate import Adaptive
from tierwise.route.fleet import apply_kind
from tierwise.route.h1 import KEEPALIVE_EXPIRY_S, Answer, H1Transport, Origin
from tierwise.route.learn import Timing, parse_server_timing
from tierwise.route.metrics import Metrics
from tierwise.route.netio import AsyncioBackend
from tierwise.route.pareto import (
    TASK_HEADER,
    WEIGHTS_HEADER,
    choose_pareto,
    parse_task,
    parse_weights,
)
from tierwise.route.predict import (
    DEFAULT_OUTPUT_TOKENS,
    Prediction,
    Reason,
    RequestShape,
    SiteModel,
    meets,
    pick,
    predict,
)
from tierwise.route.relaypath import fetch_relay_path
from tierwise.route.request import (
    DEADLINE_HEADER,
    HEADER_BYTES,
    LEAN_BYTES,
    RESIDENCY_HEADER,
    SITE_HEADER,
    body_json,
    estimate_prompt_tokens,
    parse_deadline,
    requested_output_tokens,
    strip_inline_data,
)
from tierwise.route.slots import SlotQueue
from tierwise.route.sse import (
    DONE,
    SseScan,
    usage_chunk,
    wants_whole_as_stream,
    whole_answer,
)
from tierwise.route.stages import Marks, Work, decompose
from tierwise.route.upload import CONNECTS, MIN_BYTES, SlowUpload, UploadWatch, watch_backend

__all__ = ["Breaker", "Router"]

COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")
HOP_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding"}
DROP_REQUEST = HOP_HEADERS | {"accept-encoding", DEADLINE_HEADER, RESIDENCY_HEADER, SITE_HEADER,
                              WEIGHTS_HEADER, TASK_HEADER}  # fmt: skip
DROP_RESPONSE = HOP_HEADERS | {"content-encoding", "date", "server"}  # uvicorn sets its own
_DROP_REQUEST_RAW = frozenset(h.encode() for h in DROP_REQUEST)
_DROP_RESPONSE_RAW = frozenset(h.encode() for h in DROP_RESPONSE)
MAX_BENCH_S = 60.0
TRIAL_GAP_S = 5.0  # a site never heard from: tried at most this often (Router._trial)
MAX_CONNECTIONS = 1000  # per site: httpx's pool default is 100; streams hold one each
MAX_KEEPALIVE = 256  # idle connections kept per site
PROBE_TIMEOUT_S = 2.0
SUSPECT_PROBE_S = 0.5  # a failing or benched site is probed this often at first,
SUSPECT_BACKOFF = 1.5  # each failed probe stretches the gap by this factor,
PROBE_TICK_S = 0.1  # up to the probe interval; the loop looks this often
LATENCY_ALPHA = 0.3  # the lowest-latency strategy's EWMA weight
WHOLE_BEFORE_STREAMS = 3  # whole_as_stream: answers with the site's usage, first


@dataclass
class Breaker:
    """Circuit breaker: ``failures_to_bench`` failures in a row bench a site for ``bench_s``
    (doubling each time, up to a minute); once the bench time is over one request or
    probe may try it (half-open), and a success closes it. A benched site is still
    probed: a probe that succeeds closes the breaker at once (the site is back), one
    that fails leaves the bench as it is (:meth:`probe_failed`), so a site that returns
    is re-admitted within a probe interval instead of after a doubled bench."""

    failures_to_bench: int
    base_s: float
    bench_s: float = 0.0
    failures: int = 0
    open_until: float = 0.0

    def benched(self, now: float) -> bool:
        return self.open_until > now

    def success(self) -> None:
        self.failures, self.bench_s = 0, 0.0

    def probe_ok(self, now: float) -> None:
        """A probe answered: a benched site becomes half-open (one failure re-benches it)."""
        if self.benched(now):
            self.open_until, self.failures = now, self.failures_to_bench - 1

    def probe_failed(self, now: float) -> None:
        """A failed probe counts as a failure only for a site that is not benched."""
        if not self.benched(now):
            self.failure(now)

    def failure(self, now: float) -> None:
        self.failures += 1
        if self.failures >= self.failures_to_bench:
            self.bench_s = min(max(self.bench_s * 2, self.base_s), MAX_BENCH_S)
            self.open_until, self.failures = now + self.bench_s, 0


@dataclass
class SiteState:
    model: SiteModel
    client: httpx.AsyncClient
    breaker: Breaker
    transport: H1Transport
    headers: dict[str, str]
    last_used: float = 0.0
    quiet_until: float = 0.0  # a dropped upload's bytes still queue on the path until then
    suspect_at: float = math.inf  # the next quick probe of a failing site (inf: not suspect)
    suspect_gap_s: float = SUSPECT_PROBE_S
    trial_after: float = 0.0  # a site never heard from is not tried again before this
    probing: bool = False
    targets: dict[str, tuple[Origin, bytes]] = field(default_factory=dict)
    raw_headers: list[tuple[bytes, bytes]] = field(default_factory=list)  # ``headers``, raw

    def target(self, path: str) -> tuple[Origin, bytes]:
        """Where ``path`` goes at this site: its origin and request target (cached: the
        same few paths over and over)."""
        if (found := self.targets.get(path)) is None:
            url = self.client.base_url.join(path.lstrip("/"))
            found = self.targets[path] = (Origin.of(url), url.raw_path)
        return found


@dataclass
class Attempt:
    site: str
    outcome: str  # "ok", "5xx 500", "timeout", "connect error", ...
    time_s: float
    response: Answer | None = None
    timing: Timing = field(default_factory=Timing)
    sent_at: float = 0.0
    started: float = 0.0  # time.monotonic() when it was sent
    slot: int | None = None  # its job in the site's line (a site with known slots)
    held: bool = False  # counted in flight at its site until its answer ends
    work: Work = field(default_factory=Work)  # the gateway's work relaying its answer
    seen: int | None = None  # its entry in the site's slot learner (slots not configured)
    as_stream: bool = False  # a whole answer asked of the site as a stream (whole_as_stream)


class Router:
    """The gateway's state and its ASGI app (``router.app``)."""

    def __init__(
        self,
        cfg: RouteConfig,
        models: list[SiteModel],
        tracer_provider: Any = None,
        state: Any = None,
    ) -> None:
        """``state``: the fleet's :class:`~tierwise.route.fleetconf.StateTarget` (checked by
        the CLI; built here from ``gateway.state`` when None)."""
        self.cfg = cfg
        self.tracing = _tracing(cfg, tracer_provider)  # None: no traces, no OpenTelemetry
        self._own_tracing = tracer_provider is None and self.tracing is not None
        self.models = {m.site.name: m for m in models}
        self.priors = copy.deepcopy(self.models)  # the static strategy's never-updated copy
        self.latency: dict[str, float] = {}  # the lowest-latency strategy's EWMA per site
        # lowest-latency is the common router: no prediction drives its attempts (no upload
        # watch, no hedge at 3× the prediction) — it fails over on a connection error, a
        # 5xx or the fixed timeout (gateway.timeout, within the request's deadline) only
        self.predicted_attempts = cfg.decision.strategy != "lowest-latency"
        self.sites: dict[str, SiteState] = {}
        self.previous: dict[str, str] = {}
        self.output_tokens: dict[str, Adaptive] = {}
        from tierwise.route.fleetconf import replica_name

        self.replica = replica_name(cfg.gateway.replica, cfg.gateway.port)
        fleet_on = cfg.gateway.state is not None
        self.metrics = Metrics(self.replica if fleet_on or cfg.gateway.replica else None)
        self.inflight = {m.site.name: 0 for m in models}  # attempts sent or in line, per site
        self.fleet, self.link = None, None  # the fleet's shared state (gateway.state)
        self._state = state
        self.gate = Gate(cfg.gateway, self.metrics.registry)  # keys, rates, in flight
        self.regions = {"any", "device", *(m.site.region for m in models if m.site.region)}
        self.log = None
        self._probe_task: asyncio.Task | None = None
        self._faults_told: set[tuple[str, str, int | None]] = set()  # internal errors logged
        self.other = Starlette(
            routes=[
                *(Route(p, _not_allowed, methods=_METHODS) for p in COMPLETION_PATHS),
                Route("/metrics", self.metrics_page, methods=["GET"]),
                Route("/v1/{path:path}", self.passthrough, methods=_METHODS),
                Route("/{path:path}", _not_found, methods=_METHODS),
            ],
            lifespan=self._lifespan,
            exception_handlers={Exception: self._internal_error_page},
        )
        self.app = _App(self)

    async def dispatch(self, scope, receive, send) -> None:
        """Every HTTP request passes the gate (:mod:`tierwise.route.edge`: key, rate, in
        flight) first, its key removed from what is forwarded. Completions then go
        straight to :meth:`complete` (the hot path skips starlette's routing and
        middleware); everything else, lifespan included, to :attr:`other`."""
        if scope["type"] != "http":
            await self.other(scope, receive, send)
            return
        open_page = scope["path"] == "/metrics" and self.gate.metrics_open
        try:
            client = None if open_page else self.gate.admit(scope)
        except RequestRejected as exc:
            self.gate.note(exc)
            await rejection(exc)(scope, receive, send)
            return
        if client is not None:  # the client's key is ours: never passed upstream
            scope["headers"] = [h for h in scope["headers"] if h[0] != b"authorization"]
        try:
            if scope["method"] == "POST" and scope["path"] in _HOT:
                try:
                    response = await self.complete(_Incoming(scope, receive), client)
                except Exception as exc:  # a fault of ours, not the client's: said, not hidden
                    response = self._internal_error(exc)
                await response(scope, receive, send)
            else:
                await self.other(scope, receive, send)
        finally:
            self.gate.release(client)

    async def _internal_error_page(self, request: Request, exc: Exception) -> Response:
        """The same for the pages starlette serves (the pass-through, ``/metrics``)."""
        return self._internal_error(exc)

    def _internal_error(self, exc: Exception) -> Response:
        """A fault inside the gateway before an answer began: the client gets OpenAI's
        500 (``server_error``), the operator the traceback on stderr, once per kind of
        fault (where it was raised), and every one on ``/metrics``."""
        where = traceback.extract_tb(exc.__traceback__)[-1]
        kind = (type(exc).__name__, where.filename, where.lineno)
        self.metrics.internal_errors.inc()
        if kind not in self._faults_told:
            self._faults_told.add(kind)
            text = "".join(traceback.format_exception(exc))
            print(f"tierwise route: internal error (told once):\n{text}", file=sys.stderr)
        body = error_body(
            f"internal error in the gateway ({type(exc).__name__}); the operator's log has it",
            "server_error",
        )
        return JSONResponse(body, 500)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette):
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        """Open the clients and the decisions log, and start the light probes."""
        g = self.cfg.gateway
        for name, m in self.models.items():
            site = m.site
            headers = {"authorization": f"Bearer {key}"} if (key := site.api_key()) else {}
            transport = _transport(site, self.metrics.resent.labels(name).inc)
            client = httpx.AsyncClient(base_url=site.url, headers=headers, transport=transport)
            breaker = Breaker(g.failures_to_bench, g.bench)
            self.sites[name] = st = SiteState(m, client, breaker, transport, headers)
            st.raw_headers = [(k.encode(), v.encode("latin-1")) for k, v in headers.items()]
        log = g.decisions_log.replace("{replica}", self.replica.replace(":", "-"))
        self.log = open(log, "a", encoding="utf-8")
        if g.state is not None:
            await self._join_fleet()
        self._probe_task = asyncio.create_task(self._probe_loop())

    async def _join_fleet(self) -> None:
        """Load the fleet's state before taking traffic, then share in the background."""
        from tierwise.route.fleet import Fleet
        from tierwise.route.fleetconf import state_target
        from tierwise.route.fleetlink import FleetLink

        g = self.cfg.gateway
        assert g.state is not None
        target = self._state or state_target(g.state, g.state_password_file, g.state_ca_file)
        self.fleet = Fleet(self.replica, self.models)
        self.link = FleetLink(
            self.fleet, target, on_event=self._fleet_event,
            inflight=lambda: dict(self.inflight), metrics=self.metrics,
        )  # fmt: skip
        await self.link.start()

    def _observe(self, site: str, kind: str, **data: Any) -> None:
        """Learn from one observation — through the fleet when there is one (merged in
        time order with the others', and published), else straight into the model."""
        if self.fleet is None or self.link is None:
            apply_kind(self.models[site], kind, data)
            return
        self.link.publish(self.fleet.observe(site, kind, **data))

    def _fleet_event(self, kind: str, site: str, data: dict[str, Any]) -> None:
        """Another replica used a site (its estimates are fresh: no probe needed here, as
        one router would not probe a site it just used), benched it (avoid it here too,
        until its time is over) or saw it answer again (half-open here too)."""
        st = self.sites.get(site)
        if st is None:
            return
        now = time.monotonic()
        if kind == "used":
            st.last_used = max(st.last_used, now)
        elif kind == "bench":
            until_s = float(data.get("until", 0.0)) - time.time()
            if 0 < until_s <= MAX_BENCH_S:
                st.breaker.open_until = max(st.breaker.open_until, now + until_s)
                st.breaker.bench_s = max(st.breaker.bench_s, until_s)
                st.suspect_at = min(st.suspect_at, now + SUSPECT_PROBE_S)
        elif kind == "unbench":
            st.breaker.probe_ok(now)

    async def stop(self) -> None:
        if self.link is not None:
            await self.link.stop()
        if self._probe_task:
            self._probe_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe_task
        for st in self.sites.values():
            await st.client.aclose()
        if self.log:
            self.log.close()
        if self._own_tracing:
            self.tracing.shutdown()

    # ------------------------------------------------------------------ completions

    async def complete(self, request: _Incoming, client=None) -> Any:
        """Check the request at the edge; predict, choose, forward with failover; stream
        or return the answer."""
        marks = Marks(time.perf_counter())
        try:
            body, data = await self._checked(request, marks)
        except RequestRejected as exc:
            self.gate.note(exc)
            return rejection(exc)
        t0 = time.perf_counter()
        marks.parse_s = t0 - marks.arrived - marks.read_s
        try:
            shape = self._shape(request, body, data)
        except ScenarioError as exc:
            return _error(400, str(exc), "invalid_request_error")
        now = time.monotonic()
        preds = [self._predicted(name, st, shape, now) for name, st in self.sites.items()]
        order, reason, front = self._choose(preds, shape, now)
        if (pinned := request.headers.get(SITE_HEADER)) is not None:
            if pinned not in self.sites:
                known = ", ".join(self.sites)
                return _error(
                    400,
                    f"{SITE_HEADER}: no site {pinned!r}; known: {known}",
                    "invalid_request_error",
                )
            order, reason = [pinned], f"pinned by {SITE_HEADER}"
        if not order:  # every site benched or infeasible: try the benched ones anyway
            order = [p.site for p in sorted(preds, key=lambda p: p.option.time_s)]
            order = [n for n in order if not any("residency" in r for r in _reasons(preds, n))]
        record = _record(shape, preds, order, reason)
        record["client"] = client.name if client is not None else None
        record["replica"] = self.replica
        if front is not None:
            record["pareto"] = front
        if self.tracing is not None:
            record["_trace"] = trace = self.tracing.start(
                request.headers, shape.path, marks.arrived
            )
            _TRACE.set(trace)
        marks.decided = time.perf_counter()
        record["decide_s"] = marks.decide_s = marks.decided - t0
        record["_marks"] = marks
        as_stream = self._as_stream(body, data, order)
        work = self._forward(request, body, shape, preds, order, record, t0, as_stream)
        if shape.stream:
            return await work
        return await self._unless_gone(request, work, record, t0)

    def _as_stream(self, body: bytes, data: dict[str, Any], order: list[str]) -> bytes | None:
        """The body asking for a stream, for a whole answer to a site that is asked for
        streams (``whole_as_stream``), if the request allows it (:func:`wants_whole_as_stream`;
        not a body whose inline data was set aside to parse it)."""
        if not any(self.sites[n].model.site.whole_as_stream for n in order):
            return None
        if len(body) > LEAN_BYTES or not wants_whole_as_stream(data):
            return None
        return json.dumps({**data, "stream": True}, separators=(",", ":")).encode()

    async def _unless_gone(self, request: _Incoming, work, record, t0: float) -> Any:
        """Await a whole answer unless the client leaves first: then the work is cancelled,
        and with it the site's request (its connection closed: a server that watches it
        stops; one asked for a stream, ``whole_as_stream``, stops between tokens)."""
        # the work runs in this task, not a new one: up to its first wait it is what it
        # was (it joins a site's line before the next request is predicted)
        with _OnDeparture(request.scope, request.receive) as leaving:
            try:
                return await work
            except asyncio.CancelledError:
                if not leaving.fired:
                    raise
                leaving.me.uncancel()
        if "outcome" not in record:
            record["outcome"] = "client gone"
            record["total_s"] = time.perf_counter() - t0
            self._close_record(record)
            self._write(record)
        return Response(status_code=499)  # nobody reads it

    def _predicted(self, name: str, st: SiteState, shape: RequestShape, now: float) -> Prediction:
        """The site's prediction, behind a dropped upload still draining and behind the
        other replicas' requests in flight at a site whose slots are known."""
        pred = predict(st.model, shape, st.breaker.benched(now), now)
        wait_s = st.quiet_until - now
        if self.link is not None and st.model.slots is not None:
            others = self.link.others_inflight.get(name, 0)
            wait_s = max(wait_s, 0.0) + others / st.model.slots.slots * _service_s(pred)
        return _behind_backlog(pred, wait_s)

    def _choose(self, preds: list[Prediction], shape: RequestShape, now: float):
        """The order to try the sites in, by ``decision.strategy``."""
        strategy = self.cfg.decision.strategy
        if strategy == "predictive" and self.cfg.decision.objective == "pareto":
            return self._pareto(preds, shape)
        if strategy == "predictive":
            order, reason = pick(preds, self.cfg, shape, self.previous.get(shape.path))
            return (*self._trial(preds, order, reason, shape, now), None)
        if strategy == "static":  # the same planner with the priors only, never updated
            benched = {n: st.breaker.benched(now) for n, st in self.sites.items()}
            fixed = [predict(m, shape, benched[n], now) for n, m in self.priors.items()]
            order, reason = pick(fixed, self.cfg, shape, None)
            if isinstance(reason, Reason):
                return order, dc_replace(reason, prefix="static: "), None
            return order, "static: " + reason, None
        usable = [p.site for p in preds if p.option.feasible]
        order = sorted(usable, key=lambda n: self.latency.get(n, 0.0))
        return order, "lowest-latency: the lowest EWMA of past latency", None

    def _trial(self, preds: list[Prediction], order: list[str], reason, shape, now: float):
        """A site never heard from is predicted from its priors alone, and a prior that is
        too slow would never be corrected: it is never chosen, so never learned (a real
        engine behind a stand-in's priors: 0.31 s predicted, 0.04 s true, the cloud chosen
        for every request). Such a site is tried once — first in the order, the choice
        behind it as the failover — when it is feasible, meets the request's deadline,
        and its optimistic time (prediction less one standard deviation, which for a prior
        is half of it) beats the choice's prediction; again after ``TRIAL_GAP_S`` only if
        that try brought no answer."""
        if not order or self.cfg.decision.objective != "time":
            return order, reason
        by_site = {p.site: p for p in preds}
        best = by_site[order[0]].option.time_s
        for p in sorted(preds, key=lambda p: p.option.time_s - p.sigma_s):
            if p.option.time_s - p.sigma_s >= best:
                break
            st = self.sites[p.site]
            if p.site == order[0] or not p.option.feasible or st.model.heard_from():
                continue
            if now < st.trial_after:
                continue
            if shape.deadline_s is not None and not meets(p, self.cfg.decision, shape.deadline_s):
                continue
            st.trial_after = now + TRIAL_GAP_S
            why = (
                f"trial of {p.site}: never heard from, its prior "
                f"{p.option.time_s * 1e3:.0f} ± {p.sigma_s * 1e3:.0f} ms against "
                f"{order[0]}'s {best * 1e3:.0f} ms"
            )
            return [p.site, *(n for n in order if n != p.site)], why
        return order, reason

    def _pareto(self, preds: list[Prediction], shape: RequestShape):
        """``objective = "pareto"`` (:mod:`.pareto`): the choice first, then the other
        feasible sites by time; the front and its metrics for the decisions log."""
        if shape.deadline_s is not None:
            for p in preds:
                p.option.meets_deadline = meets(p, self.cfg.decision, shape.deadline_s)
        weights = shape.weights if shape.weights is not None else self.cfg.decision.weights
        choice, reason, front = choose_pareto(preds, self.models, shape, weights, shape.task)
        feasible = sorted((p for p in preds if p.option.feasible), key=lambda p: p.expected_s)
        order = ([choice] if choice else []) + [p.site for p in feasible if p.site != choice]
        return order, reason, front

    async def _checked(self, request: _Incoming, marks: Marks) -> tuple[bytes, dict[str, Any]]:
        """The body (read within ``gateway.max_body``) and its JSON, parsed once and
        checked against OpenAI's schema; the ``x-tierwise-residency`` header checked."""
        g = self.cfg.gateway
        try:
            body = await read_body(request, int(g.max_body))
        except ClientDisconnect:
            raise refuse(400, "The client went away before its body was read.") from None
        marks.read_s = time.perf_counter() - marks.arrived
        lean = strip_inline_data(body) if len(body) > LEAN_BYTES else body
        data = parse_request(request.scope["path"], lean, g.max_json_depth)
        residency = request.headers.get(RESIDENCY_HEADER)
        if residency is not None and residency not in self.regions:
            raise refuse(
                400, f"{RESIDENCY_HEADER}: expected one of {', '.join(sorted(self.regions))}, "
                f"got {residency[:40]!r}", "invalid_header",
            )  # fmt: skip
        return body, data

    def _shape(self, request: _Incoming, body: bytes, data: dict[str, Any] | None = None):
        data = body_json(body) if data is None else data
        path = request.scope["path"]
        deadline = parse_deadline(request.headers.get(DEADLINE_HEADER))
        cap = requested_output_tokens(data)
        learned = self.output_tokens.get(path)
        if learned is None:
            learned = self.output_tokens[path] = Adaptive(DEFAULT_OUTPUT_TOKENS)
        residency = request.headers.get(RESIDENCY_HEADER) or self.cfg.decision.residency
        options = data.get("stream_options")
        weights, task = None, None
        if self.cfg.decision.objective == "pareto":
            header = parse_weights(request.headers.get(WEIGHTS_HEADER))
            weights = {**self.cfg.decision.weights, **header} if header else None
            task = parse_task(request.headers.get(TASK_HEADER))
        return RequestShape(
            path=path,
            bytes_up=len(body) + HEADER_BYTES,
            prompt_tokens=estimate_prompt_tokens(data),
            output_tokens=cap or round(learned.value),
            output_learned=cap is None,
            stream=bool(data.get("stream")),
            deadline_s=deadline or self.cfg.decision.deadline,
            residency=residency,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            weights=weights,
            task=task,
        )

    async def _forward(
        self, request, body, shape, preds, order, record, t0, as_stream: bytes | None = None
    ) -> Response:
        """Try the sites in ``order``; one that outlives its patience is hedged, not dropped.

        An attempt that fails (5xx, connection error, timeout, slow upload) hands over to
        the next site at once. One still running at its patience (:meth:`_patience_s`)
        keeps running while the next site starts: the first answer wins and the others
        are cancelled — so a site that is merely slow (the device 3× slower, a queue)
        can still win, and a stalled one costs no more than its patience.
        """
        by_site = {p.site: p for p in preds}
        headers = _forward_raw(request.scope)
        attempts: list[Attempt] = []
        queue = order[: self.cfg.decision.max_attempts]
        if len(queue) == 1 or not self.predicted_attempts:  # nothing to hedge
            return await self._in_turn(request, body, shape, by_site, queue, record, t0, as_stream)
        running: dict[asyncio.Task, tuple[str, float]] = {}
        try:
            return await self._hedged(
                body, shape, by_site, queue, record, t0, as_stream, headers, attempts, running
            )
        finally:  # cancelled (the client left): the attempts still running stop too
            for task in running:
                task.cancel()

    async def _hedged(
        self, body, shape, by_site, queue, record, t0, as_stream, headers, attempts, running
    ) -> Response:
        """:meth:`_forward`'s loop over the sites with hedging (its docstring)."""
        hedge_at = math.inf
        while queue or running:
            if queue and (not running or time.perf_counter() >= hedge_at):
                name, queue = queue[0], queue[1:]
                next_s = min((by_site[n].option.time_s for n in queue), default=math.inf)
                budget_s = self._budget_s(shape, t0)
                if budget_s <= 0:
                    queue = []
                    continue
                watch = self._upload_watch(name, body, by_site[name], next_s)
                coro = self._attempt(
                    name, shape.path, headers, body, budget_s, watch, _service_s(by_site[name]),
                    as_stream,
                )  # fmt: skip
                running[asyncio.create_task(coro)] = (name, time.perf_counter())
                hedge_at = time.perf_counter() + self._patience_s(by_site[name], next_s)
            wait_s = max(hedge_at - time.perf_counter(), 0.0) if queue else None
            wait_s = None if wait_s is not None and math.isinf(wait_s) else wait_s
            done, _ = await asyncio.wait(
                running, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                running.pop(task)
                a = self._settled(task.result(), shape)
                attempts.append(a)
                if a.response is not None:
                    attempts += await self._cancel(running, shape)
                    return await self._answer(a, shape, by_site[a.site], record, attempts, t0)
        return self._no_site(record, attempts)

    async def _in_turn(
        self, request, body, shape, by_site, queue, record, t0, as_stream: bytes | None = None
    ) -> Response:
        """The sites one after another, each awaited in this task — when there is nothing
        to hedge (one candidate, or the common router): no task per attempt."""
        headers = _forward_raw(request.scope)
        attempts: list[Attempt] = []
        for name in queue:
            budget_s = self._budget_s(shape, t0)
            if budget_s <= 0:
                break
            service_s = _service_s(by_site[name])
            sent = await self._attempt(
                name, shape.path, headers, body, budget_s, None, service_s, as_stream
            )
            a = self._settled(sent, shape)
            attempts.append(a)
            if a.response is not None:
                return await self._answer(a, shape, by_site[a.site], record, attempts, t0)
        return self._no_site(record, attempts)

    def _settled(self, a: Attempt, shape: RequestShape) -> Attempt:
        """Learn what an ended attempt tells before the next site is tried."""
        if a.outcome == "timeout":
            self._observe(a.site, "timeout", shape=shape, elapsed_s=a.time_s)
            self._latency_sample(a.site, a.time_s)  # its latency was at least this
        if a.response is None:
            self.metrics.failovers.inc()
        return a

    def _no_site(self, record: dict[str, Any], attempts: list[Attempt]) -> Response:
        record["attempts"] = [_attempt_dict(a) for a in attempts]
        record["outcome"] = "no site"
        self._close_record(record)
        self._write(record)
        self.metrics.no_site.inc()
        tried = "; ".join(f"{a.site}: {a.outcome}" for a in attempts) or "none tried"
        return _error(503, f"no site could answer within the deadline ({tried})", "no_site")

    def _close_record(self, record: dict[str, Any]) -> None:
        """Decompose and end the trace of a request that ended without an answer."""
        marks, trace, end = record.pop("_marks"), record.pop("_trace", None), time.perf_counter()
        record["decomposition"] = decompose(end - marks.arrived, marks)
        if trace is not None:
            trace.finish(record, marks, end)

    async def _cancel(self, running: dict[asyncio.Task, tuple[str, float]], shape) -> list:
        """Stop the attempts a faster site has overtaken; each counts as a timeout."""
        out = []
        for task, (name, started) in running.items():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                late = await task
                if late.response is not None:  # it answered meanwhile: not needed
                    await late.response.aclose()
                    self._release(late)
            elapsed_s = time.perf_counter() - started
            self._observe(name, "timeout", shape=shape, elapsed_s=elapsed_s)
            out.append(self._failed(self.sites[name], name, "overtaken", started))
        return out

    def _budget_s(self, shape: RequestShape, t0: float) -> float:
        """What an attempt may take at most: the rest of the deadline, or gateway.timeout."""
        if shape.deadline_s is None:
            return self.cfg.gateway.timeout
        return min(self.cfg.gateway.timeout, shape.deadline_s - (time.perf_counter() - t0))

    def _patience_s(self, pred: Prediction, next_s: float) -> float:
        """When to start the next site beside this one: 3× its prediction (+1 s at least),
        and not before the next site's whole predicted time (``next_s``) — starting it
        sooner could not end sooner. Never for the common router (:attr:`predicted_attempts`
        false): it waits for an error or the fixed timeout."""
        if not self.predicted_attempts:
            return math.inf
        t = pred.option.time_s
        return max(3.0 * t, t + 1.0, next_s)

    def _upload_watch(
        self, name: str, body: bytes, pred: Prediction, next_s: float
    ) -> UploadWatch | None:
        """Watch a large upload to a remote site when another site is left to try (not for
        the common router, which has no prediction to watch against)."""
        m = self.sites[name].model
        if not self.predicted_attempts:
            return None
        if math.isinf(next_s) or not m.site.remote or len(body) < MIN_BYTES:
            return None
        upload_s = len(body) / max(m.up_rate.value, 1.0)
        rest_s = max(pred.option.time_s - upload_s - m.rtt_s.value, 0.0)
        return UploadWatch(len(body), m.rtt_s.value, rest_s, next_s)

    async def _attempt(
        self,
        name: str,
        path: str,
        headers,
        body: bytes,
        timeout: float,
        watch=None,
        service_s: float = 0.0,
        as_stream: bytes | None = None,
    ) -> Attempt:
        """One request to one site. At a site whose line the gateway keeps, the request is
        a job in it from now until its answer ends (:meth:`_release`) or it fails, and is
        sent once it has a slot (:mod:`tierwise.route.slots`)."""
        line = self.sites[name].model.slots
        slot = line.add(time.monotonic(), service_s) if line is not None else None
        joined = time.perf_counter()
        self.inflight[name] += 1
        others = sum(self.inflight.values()) - 1  # beside it on the loops (learn: RTT)
        try:
            if line is not None and slot is not None:
                await self._turn(line, slot, timeout)
            waited_s = time.perf_counter() - joined
            timeout = max(timeout - waited_s, 1e-3)
            learner = self.sites[name].model.slot_learner
            seen = learner.begin(time.monotonic()) if learner is not None else None
            m = self.sites[name].model
            # the first few whole answers go as they are: their usage teaches the site's
            # prompt count, which an assembled answer's usage then gives
            streamed = (
                as_stream is not None
                and m.site.whole_as_stream
                and m.prompt_map.n >= WHOLE_BEFORE_STREAMS
            )
            sent_body = as_stream if streamed and as_stream is not None else body
            a = await self._attempt_once(name, path, headers, sent_body, timeout, watch)
            a.seen, a.as_stream = seen, streamed
            a.timing.overlap = max(others, sum(self.inflight.values()) - 1)
            if a.response is None and learner is not None:
                learner.end(seen, time.monotonic())
        except TimeoutError:  # no slot within the attempt's budget: the line, not a failure
            self.inflight[name] -= 1
            if line is not None:
                line.done(slot, time.monotonic())
            return Attempt(name, "timeout (in line)", time.perf_counter() - joined)
        except BaseException:
            self.inflight[name] -= 1
            if line is not None:
                line.done(slot, time.monotonic())
            raise
        if a.response is None:
            self.inflight[name] -= 1
        else:
            a.held = True  # in flight until its answer ends (:meth:`_release`)
        if line is not None:
            a.timing.queued_s = waited_s
            if a.response is None:
                line.done(slot, time.monotonic())
            else:
                a.slot = slot
        return a

    def _progress(self, a: Attempt, shape: RequestShape, tokens: int, decode_s: float) -> None:
        """A stream in a kept line: its rest is the tokens still to come at its own pace."""
        line = self.sites[a.site].model.slots
        if line is not None:
            step_s = decode_s / (tokens - 1)
            rest_s = max(shape.output_tokens - tokens, 0) * step_s
            line.progress(a.slot, time.monotonic(), rest_s)

    @staticmethod
    async def _turn(line, slot: int, timeout: float) -> None:
        """Wait for the job's slot at most ``timeout`` (TimeoutError after)."""
        async with asyncio.timeout(timeout):
            await line.turn(slot)

    def _release(self, a: Attempt) -> None:
        """The attempt's answer has ended: its slot goes to the next in line."""
        if a.held:
            a.held = False
            self.inflight[a.site] -= 1
        m = self.sites[a.site].model
        if m.slot_learner is not None and a.seen is not None:
            m.slot_learner.end(a.seen, time.monotonic())
            a.seen = None
        if m.slots is None or a.slot is None:
            return
        m.slots.done(a.slot, time.monotonic())
        a.slot = None

    def _first_token(self, a: Attempt, pred: Prediction) -> None:
        """A stream's first token: what it tells of the site's slots, if they are learned."""
        m = self.sites[a.site].model
        if m.slot_learner is None or a.seen is None:
            return
        first_s = pred.stages_s.get("first_token", 0.0)
        value = m.slot_learner.first(a.seen, time.monotonic(), first_s)
        if value is None:
            return
        if m.slots is None:  # from now on the gateway keeps the site's line
            m.slots = SlotQueue(value)
        else:
            m.slots.slots = value

    async def _attempt_once(
        self, name: str, path: str, headers, body: bytes, timeout: float, watch=None
    ) -> Attempt:
        st = self.sites[name]
        st.last_used = time.monotonic()
        t = Timing()
        connects: list[float] = []  # the backend notes a new connection's connect time here
        token = CONNECTS.set(connects)
        sent = time.perf_counter()
        if (trace := _TRACE.get()) is not None:  # the attempt's span is the upstream parent
            headers = _with_headers(headers, trace.attempt(name, sent))
        if st.raw_headers:  # the site's own (its API key), unless the client sent that header
            names = {k for k, _ in headers}
            headers = [h for h in st.raw_headers if h[0] not in names] + headers
        origin, target = st.target(path)
        send = st.transport.send(origin, b"POST", target, headers, body, _timeout(timeout))
        t.build_s = time.perf_counter() - sent
        try:
            resp = await self._send(send, timeout, watch)
        except SlowUpload as slow:
            return self._slow_upload(st, name, slow, sent)
        except (httpx.TimeoutException, TimeoutError):
            return self._failed(st, name, "timeout", sent)
        except httpx.TransportError as exc:
            return self._failed(st, name, f"connection error ({type(exc).__name__})", sent)
        finally:
            CONNECTS.reset(token)
        t.headers_s = time.perf_counter() - sent
        t.connect_s = connects[0] if connects else None
        if resp.status_code >= 500:
            await resp.aclose()
            return self._failed(st, name, f"{resp.status_code} from site", sent)
        timing = resp.header(b"server-timing")
        t.server = parse_server_timing(timing.decode("latin-1") if timing is not None else None)
        started = time.monotonic() - (time.perf_counter() - sent)
        return Attempt(name, "ok", t.headers_s, resp, t, sent, started)

    async def _send(self, send, timeout: float, watch: UploadWatch | None) -> Answer:
        """Await ``send`` (:meth:`H1Transport.send`: the pool's transport itself, no
        cookies, auth, redirects or hooks to run per request). The common router's fixed
        timeout bounds the whole attempt up to the answer's headers; a predicted attempt is
        bounded by its patience instead."""
        if watch is not None:
            return await watch.run(send)
        if self.predicted_attempts:
            return await send
        # uvloop's clock is cached per loop iteration and coarse (milliseconds): a timeout
        # armed on it alone fires up to a few ms before ``timeout`` has really passed
        lag_s = max(0.0, time.monotonic() - asyncio.get_running_loop().time())
        async with asyncio.timeout(timeout + lag_s):
            return await send

    def _slow_upload(self, st: SiteState, name: str, slow: SlowUpload, sent: float) -> Attempt:
        """An upload given up on: not a failure of the site, but a bound on its uplink."""
        self._observe(name, "bound", name="up_rate", value=slow.rate_bytes_per_s)
        st.quiet_until = time.monotonic() + slow.drain_s
        self.metrics.requests.labels(name, "slow upload").inc()
        mbit = slow.rate_bytes_per_s * 8e-6
        outcome = f"slow upload ({mbit:.1f} Mbit/s, {slow.drain_s:.2f} s backlog)"
        return Attempt(name, outcome, time.perf_counter() - sent)

    def _failed(self, st: SiteState, name: str, outcome: str, sent: float) -> Attempt:
        now = time.monotonic()
        was_benched = st.breaker.benched(now)
        st.breaker.failure(now)
        if self.link is not None and not was_benched and st.breaker.benched(now):
            self.link.event("bench", name, until=time.time() + st.breaker.bench_s)
        st.suspect_at, st.suspect_gap_s = min(st.suspect_at, now + SUSPECT_PROBE_S), SUSPECT_PROBE_S
        st.model.failure_p = 0.8 * st.model.failure_p + 0.2
        self.metrics.requests.labels(name, "failed").inc()
        return Attempt(name, outcome, time.perf_counter() - sent)

    async def _answer(self, a: Attempt, shape, pred, record, attempts, t0) -> Any:
        resp = a.response
        assert resp is not None
        headers = [(k, v) for k, v in _lower(resp.headers) if k not in _DROP_RESPONSE_RAW]
        headers += [(b"x-tierwise-site", a.site.encode()),
                    (b"x-tierwise-predicted-s", b"%.4f" % pred.option.time_s)]  # fmt: skip
        if shape.stream and resp.status_code < 400:
            gen = self._relay_stream(a, shape, pred, record, attempts, t0)
            return _Streamed(resp.status_code, headers, gen)
        if a.as_stream and resp.status_code < 400:
            return await self._assemble(a, shape, pred, record, attempts, t0, headers)
        try:
            content = await resp.aread()
        except httpx.HTTPError as exc:  # the site answered, then broke off mid-body
            self._failed(self.sites[a.site], a.site, "broken body", a.sent_at)
            return _error(502, f"{a.site} broke off its answer ({type(exc).__name__})", "upstream")
        finally:
            await resp.aclose()
            self._release(a)
        a.timing.end_s = time.perf_counter() - a.sent_at
        a.timing.bytes_down = len(content)
        parsing = time.perf_counter()
        a.timing.tokens_out, a.timing.prompt_tokens = _usage_tokens(content)
        a.work.usage_s = time.perf_counter() - parsing
        a.timing.tokens_from = "usage"
        finish = functools.partial(self._finish, a, shape, pred, record, attempts, t0)
        return _Whole(resp.status_code, headers, content, finish)

    async def _assemble(self, a: Attempt, shape, pred, record, attempts, t0, headers) -> Any:
        """A whole answer asked of the site as a stream (``whole_as_stream``): its events
        read and timed as a stream's (first token, pace: learned as a stream), then put
        together as the whole answer (:func:`~tierwise.route.sse.whole_answer`) with
        ``usage``: the site's, or the tokens counted and the prompt estimated (the record
        says so). A client that leaves meanwhile cancels this (:meth:`_unless_gone`)."""
        resp, t = a.response, a.timing
        assert resp is not None
        scan = SseScan().keep()
        record["asked_as_stream"] = True
        try:
            async for chunk in resp.aiter_raw():
                now = time.perf_counter() - a.sent_at
                if scan.feed(chunk):
                    if t.first_token_s is None:
                        t.first_token_s = now
                        self._first_token(a, pred)
                    t.last_token_s = now
                    if a.slot is not None and scan.tokens >= 3:
                        self._progress(a, shape, scan.tokens, now - t.first_token_s)
                t.bytes_down += len(chunk)
        except httpx.HTTPError as exc:  # the site broke off mid-answer
            self._failed(self.sites[a.site], a.site, "broken body", a.sent_at)
            return _error(502, f"{a.site} broke off its answer ({type(exc).__name__})", "upstream")
        except BaseException:  # cancelled: the client went away
            record["stream_error"] = "client disconnected"
            raise
        finally:
            await self._stream_ended(a, scan)
            if "stream_error" in record:
                self._finish(a, dc_replace(shape, stream=True), pred, record, attempts, t0)
        m = self.sites[a.site].model
        usage = scan.usage if isinstance(scan.usage, dict) else None
        if usage is None or not isinstance(usage.get("completion_tokens"), int):
            prompt = m.prompt_tokens(shape.prompt_tokens)
            usage = {"prompt_tokens": prompt, "completion_tokens": scan.tokens,
                     "total_tokens": prompt + scan.tokens}  # fmt: skip
            how = "learned from usage" if m.prompt_map.n else "characters / 4"
            record["usage_added"] = {**usage, "by": "gateway", "prompt": "estimated",
                                     "prompt_from": how, "whole_from_stream": True}  # fmt: skip
        chat = shape.path.endswith("/chat/completions")
        content = json.dumps(whole_answer(scan, chat, usage)).encode()
        t.bytes_down = max(t.bytes_down, len(content))
        headers = [h for h in headers if h[0] != b"content-type"]
        headers.append((b"content-type", b"application/json"))
        streamed = dc_replace(shape, stream=True)  # learned as the stream it was
        finish = functools.partial(self._finish, a, streamed, pred, record, attempts, t0)
        return _Whole(resp.status_code, headers, content, finish)

    async def _relay_stream(self, a: Attempt, shape, pred, record, attempts, t0):
        """Pass the upstream bytes through unchanged, timing each token event on the way.

        A client that asked for ``stream_options.include_usage`` gets a usage chunk
        before ``data: [DONE]`` if the site sent none (the record says so). A client
        that goes away ends this generator: the upstream response is closed, which
        cancels the request at a server that watches its connection (llama.cpp's does
        between tokens)."""
        resp, t, w = a.response, a.timing, a.work
        assert resp is not None
        scan = SseScan()
        added = False
        clock = time.perf_counter
        try:
            async for chunk in resp.aiter_raw():
                before = clock()
                now = before - a.sent_at
                done = (w.deser_s, w.send_s)  # the work so far, for the stages (stages.py)
                if scan.feed(chunk):
                    if t.first_token_s is None:
                        t.first_token_s, w.at_first = now, done
                        self._first_token(a, pred)
                    t.last_token_s, w.at_last = now, done
                    if a.slot is not None and scan.tokens >= 3:
                        self._progress(a, shape, scan.tokens, now - t.first_token_s)
                t.bytes_down += len(chunk)
                at = chunk.find(DONE) if shape.include_usage and not added else -1
                if at >= 0 and scan.usage is None:
                    m = self.sites[a.site].model
                    event, usage = usage_chunk(scan, m.prompt_tokens(shape.prompt_tokens))
                    how = "learned from usage" if m.prompt_map.n else "characters / 4"
                    record["usage_added"] = {
                        **usage, "by": "gateway", "prompt": "estimated", "prompt_from": how,
                    }  # fmt: skip
                    added = True
                    chunk = chunk[:at] + event + chunk[at:]
                sending = clock()
                w.deser_s += sending - before
                yield chunk
                w.send_s += clock() - sending
        except httpx.HTTPError as exc:
            record["stream_error"] = type(exc).__name__
        except BaseException:  # the client went away (cancelled): no more to relay
            record["stream_error"] = "client disconnected"
            raise
        finally:
            await self._stream_ended(a, scan)
            self._finish(a, shape, pred, record, attempts, t0)

    async def _stream_ended(self, a: Attempt, scan: SseScan) -> None:
        """A streamed answer's end — whole, cut or cancelled: the site's response closed,
        its slot released, its timing ended with the events seen and the tokens out (by
        the site's ``usage`` where it sent one, else by the token events counted)."""
        assert a.response is not None
        await a.response.aclose()
        t = a.timing
        t.overlap = max(t.overlap, sum(self.inflight.values()) - 1)  # itself still counted
        self._release(a)
        t.end_s = time.perf_counter() - a.sent_at
        t.events = scan.events
        usage = scan.usage if isinstance(scan.usage, dict) else {}
        if isinstance(tokens := usage.get("completion_tokens"), int):
            t.tokens_out, t.tokens_from = tokens, "usage"
        else:
            t.tokens_out, t.tokens_from = scan.tokens, "events"

    def _finish(self, a: Attempt, shape, pred: Prediction, record, attempts, t0) -> None:
        done = time.perf_counter()  # the answer is handed over: what follows is not its time
        st = self.sites[a.site]
        self._release(a)
        ok = a.response is not None and a.response.status_code < 400
        if ok:
            st.breaker.success()
            st.suspect_at = math.inf
            st.model.failure_p *= 0.8
            actual = a.timing.end_s + (a.timing.queued_s or 0.0)  # its time in line too
            st.model.error_rel.update(abs(actual - pred.option.time_s) / max(actual, 1e-9))
            cut = "stream_error" in record  # a cut stream's timing is not the request's
            if a.started >= st.quiet_until and not cut:  # nor our own dropped bytes' queue
                self._observe(a.site, "learn", shape=shape, timing=a.timing)
            if shape.output_learned and a.timing.tokens_out:
                self.output_tokens[shape.path].update(a.timing.tokens_out)
            self.previous[shape.path] = a.site
            self._latency_sample(a.site, actual)
        record["chosen"] = a.site
        record["outcome"] = "ok" if ok else f"{a.response.status_code} passed through"
        record["actual_s"] = a.timing.end_s + (a.timing.queued_s or 0.0)
        record["total_s"] = done - t0
        record["stages"] = a.timing.to_dict()
        marks, trace, end = record.pop("_marks"), record.pop("_trace", None), done
        record["decomposition"] = self._decomposition(a, shape, record, marks, end)
        record["attempts"] = [_attempt_dict(x) for x in attempts]
        record["estimates"] = {a.site: st.model.estimates()}
        if (slots := st.model.slots_said()) is not None:
            record["slots"] = {a.site: slots}
        if (fit := st.model.service_fit()) is not None:
            record["service_fit"] = {a.site: fit}
        self.metrics.observe(a.site, record, pred, st.model, st.breaker)
        if trace is not None:
            trace.finish(record, marks, end, a)
        self._write(record)

    def _decomposition(self, a: Attempt, shape, record, marks: Marks, end: float) -> dict:
        """The six-stage split of the request's client-visible time (:mod:`.stages`)."""
        m = self.sites[a.site].model
        net_s = m.rtt_s.value + shape.bytes_up / max(m.up_rate.value, 1.0) if m.site.remote else 0.0
        return decompose(
            end - marks.arrived, marks, a.sent_at, a.timing,
            stream=shape.stream,
            retried=bool(record["order"]) and a.site != record["order"][0],
            network_estimate_s=net_s, work=a.work,
        )  # fmt: skip

    def _latency_sample(self, name: str, latency_s: float) -> None:
        """The lowest-latency strategy's EWMA of a site's past latency (a timed-out
        attempt's elapsed time counts too: its latency was at least that)."""
        last = self.latency.get(name, latency_s)
        self.latency[name] = last + LATENCY_ALPHA * (latency_s - last)

    def _write(self, record: dict[str, Any]) -> None:
        """The request's line in the decisions log, and its time to decide on ``/metrics``
        — after the answer: what only a reader needs is composed here, off its path (the
        predictions as dicts, the choice's reason as a sentence)."""
        if "decide_s" in record:
            self.metrics.decide.observe(record["decide_s"])
        if isinstance(preds := record.get("predicted"), list):
            record["predicted"] = {p.site: p.to_dict() for p in preds}
        if isinstance(reason := record.get("reason"), Reason):
            record["reason"] = str(reason)
        if self.log is not None:
            self.log.write(_LOG_JSON.encode(record) + "\n")
            self.log.flush()

    # ------------------------------------------------------------- other endpoints

    async def metrics_page(self, request: Request) -> Response:
        now = time.monotonic()
        for name, st in self.sites.items():
            self.metrics.benched.labels(name).set(1.0 if st.breaker.benched(now) else 0.0)
        body, content_type = self.metrics.render()
        return Response(body, media_type=content_type)

    async def passthrough(self, request: Request) -> Response:
        """Any other path, to the default site, unchanged."""
        name = self.cfg.gateway.default_site or self.cfg.site[0].name
        st = self.sites[name]
        try:
            content = await read_body(request, int(self.cfg.gateway.max_body))
        except RequestRejected as exc:
            self.gate.note(exc)
            return rejection(exc)
        except ClientDisconnect:
            return rejection(refuse(400, "The client went away before its body was read."))
        req = st.client.build_request(
            request.method,
            request.url.path,
            params=request.query_params,
            content=content,
            headers=_forward_headers(request),
            timeout=self.cfg.gateway.timeout,
        )
        try:
            resp = await st.client.send(req, stream=True)
        except httpx.HTTPError as exc:
            return _error(502, f"default site {name}: {type(exc).__name__}", "upstream_error")
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in DROP_RESPONSE}
        return StreamingResponse(
            _aiter_and_close(resp), status_code=resp.status_code, headers=headers
        )

    async def _probe_loop(self) -> None:
        """Light probes (``GET /v1/models``) keep idle sites' estimates fresh and bring a
        failing site back quickly: a site that failed is probed every 0.5 s, the gap
        stretching 1.5× per failed probe up to the probe interval, and the first probe
        that answers re-admits it on trial (half-open) — so a restarted server is used
        again within about half a second of coming back (§12.5.3: recover from a
        disconnect), while a site that stays down costs a probe per interval."""
        interval = self.cfg.gateway.probe_interval
        probes: set[asyncio.Task] = set()
        relays_read = -math.inf
        while True:
            now = time.monotonic()
            if now - relays_read >= interval and self._relay_routes():
                relays_read = now
                task = asyncio.create_task(self._read_relays())
                probes.add(task)
                task.add_done_callback(probes.discard)
            for name, st in self.sites.items():
                idle = now - st.last_used >= interval
                if not st.probing and (idle or now >= st.suspect_at):
                    st.probing = True
                    task = asyncio.create_task(self._probe(name, st))
                    probes.add(task)
                    task.add_done_callback(probes.discard)
            try:
                await asyncio.sleep(min(PROBE_TICK_S, interval / 2))
            except asyncio.CancelledError:
                for task in probes:
                    task.cancel()
                raise

    def _relay_routes(self) -> list[str]:
        return [n for n, st in self.sites.items() if st.model.site.via == "relay"]

    async def _read_relays(self) -> None:
        """Each relay client's measurements of its path (:mod:`tierwise.route.relaypath`):
        the loss each way into the relay route and its direct siblings over the same path."""
        for name in self._relay_routes():
            host, _, port = (self.sites[name].model.site.relay or "").rpartition(":")
            path = await fetch_relay_path(host.strip("[]"), int(port)) if port else None
            if path is None:
                continue
            for route in (name, *self.cfg.siblings(name)):
                if route in self.sites:
                    for key, value in path.samples().items():
                        self._observe(route, "sample", name=key, value=value)

    async def _probe(self, name: str, st: SiteState) -> None:
        try:
            ok, rtt_s, probed_at = await self._probe_once(st)
        finally:
            st.probing = False
        now = time.monotonic()
        if not ok:
            st.breaker.probe_failed(now)
            if not math.isinf(st.suspect_at):  # back off, bounded by the probe interval
                interval = self.cfg.gateway.probe_interval
                st.suspect_gap_s = min(st.suspect_gap_s * SUSPECT_BACKOFF, interval)
                st.suspect_at = now + st.suspect_gap_s
            return
        if self.link is not None and st.breaker.benched(now):
            self.link.event("unbench", name)
        st.breaker.probe_ok(now)
        if not math.isinf(st.suspect_at):  # back: its past failures no longer predict
            st.model.failure_p *= 0.5
            st.suspect_at, st.suspect_gap_s = math.inf, SUSPECT_PROBE_S
        if st.model.site.remote and probed_at >= st.quiet_until:
            self._observe(name, "sample", name="rtt_s", value=rtt_s)
        self.metrics.probes.labels(name).inc()

    async def _probe_once(self, st: SiteState) -> tuple[bool, float, float]:
        """One ``GET /v1/models``: whether it answered, its time, when it was sent.

        A site whose line the gateway keeps (``slots``: an engine such as llama.cpp's,
        whose ``/v1/models`` waits behind the request it is running) is timed by a TCP
        connect instead — the kernel answers that, not the engine, so the RTT is not the
        engine's queue — and asked ``/v1/models`` only when nothing of ours is in line."""
        line = st.model.slots
        if line is not None and st.model.site.via == "direct":
            return await self._probe_connect(st, ask=not line.jobs)
        st.last_used = probed_at = time.monotonic()
        sent = time.perf_counter()
        try:
            resp = await st.client.get("/v1/models", timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            return False, 0.0, probed_at
        return resp.status_code < 500, time.perf_counter() - sent, probed_at

    async def _probe_connect(self, st: SiteState, ask: bool) -> tuple[bool, float, float]:
        """A TCP connect for the RTT and, if ``ask``, ``GET /v1/models`` for the status."""
        st.last_used = probed_at = time.monotonic()
        try:
            rtt_s = await _connect_s(st.client.base_url, PROBE_TIMEOUT_S)
            if ask:
                resp = await st.client.get("/v1/models", timeout=PROBE_TIMEOUT_S)
                return resp.status_code < 500, rtt_s, probed_at
        except (httpx.HTTPError, OSError, TimeoutError):
            return False, 0.0, probed_at
        return True, rtt_s, probed_at


async def _connect_s(url: httpx.URL, timeout_s: float) -> float:
    """The time a TCP connect to ``url``'s host and port takes (one RTT)."""
    port = url.port or (443 if url.scheme == "https" else 80)
    sent = time.perf_counter()
    async with asyncio.timeout(timeout_s):
        _, writer = await asyncio.open_connection(url.host, port)
    rtt_s = time.perf_counter() - sent
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return rtt_s


def _transport(site, on_resend=None) -> H1Transport:
    """A warm pool per site: :class:`~tierwise.route.h1.H1Transport` for every site —
    plain HTTP, HTTPS (checked against ``ca_file``'s CAs) and behind the relay (SOCKS5) —
    so a pooled connection closed as it is reused is sent again on a new one whatever the
    site (``on_resend`` counts it). A direct site's bytes go over the
    :mod:`tierwise.route.netio` backend under the upload watch, which hands the watch its
    socket and times new connections; a relay site's socket is the local relay client's,
    whose acknowledgements and connect time say nothing of the path: no watch there."""
    backend = AsyncioBackend() if site.via == "relay" else watch_backend(AsyncioBackend())
    return H1Transport(
        backend, MAX_CONNECTIONS, MAX_KEEPALIVE, KEEPALIVE_EXPIRY_S,
        verify=site.tls(), proxy=site.relay if site.via == "relay" else None,
        on_resend=on_resend,
    )  # fmt: skip


_HOT = frozenset(COMPLETION_PATHS)
_LOG_JSON = json.JSONEncoder(separators=(",", ":"))  # json.dumps makes one per call
# The request's trace (tierwise.route.otel.RequestTrace) while tracing is on: attempts,
# hedges among them run as tasks of their own, and find it here to name their parent.
_TRACE: contextvars.ContextVar[Any] = contextvars.ContextVar("tierwise_route_trace", default=None)


def _tracing(cfg: RouteConfig, provider: Any) -> Any:
    """The gateway's :class:`~tierwise.route.otel.Tracing`, or None (nothing imported)."""
    if provider is None and cfg.trace.otlp is None:
        return None
    from tierwise.route.otel import Tracing, provider_from_config

    if provider is None:
        provider = provider_from_config(cfg.trace.otlp, cfg.trace.sample, cfg.trace.service)
    return Tracing(provider)


@functools.lru_cache(maxsize=64)
def _timeout_cached(timeout_s: float) -> dict[str, float | None]:
    return httpx.Timeout(timeout_s).as_dict()


def _timeout(timeout_s: float) -> dict[str, float | None]:
    """httpcore's timeout extension for ``timeout_s`` (the same few values, cached)."""
    return _timeout_cached(round(timeout_s, 3))


class _App:
    """The gateway's ASGI 3 app (an object with an async ``__call__``, as servers expect)."""

    def __init__(self, router: Router) -> None:
        self.router = router

    async def __call__(self, scope, receive, send) -> None:
        await self.router.dispatch(scope, receive, send)


_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def _disconnected(receive) -> None:
    """Return when the client has gone (ASGI ``http.disconnect``; the body is read by now)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _aiter_and_close(resp: httpx.Response):
    try:
        async for chunk in resp.aiter_raw():
            yield chunk
    finally:
        await resp.aclose()


def _behind_backlog(pred: Prediction, wait_s: float) -> Prediction:
    """A site whose path still drains a dropped upload: every byte waits behind it."""
    if wait_s <= 0:
        return pred
    o = pred.option
    option = dc_replace(
        o, time_s=o.time_s + wait_s, breakdown_s={**o.breakdown_s, "backlog": wait_s}
    )
    return dc_replace(pred, option=option, expected_s=pred.expected_s + wait_s)


def _forward_headers(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.headers.items() if k.lower() not in DROP_REQUEST}


def _forward_raw(scope: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """The client's headers to pass upstream, as the ASGI scope holds them (names in lower
    case, a repeated header repeated)."""
    return [h for h in scope["headers"] if h[0] not in _DROP_REQUEST_RAW]


def _with_headers(
    headers: list[tuple[bytes, bytes]], more: dict[str, str]
) -> list[tuple[bytes, bytes]]:
    """``headers`` with ``more`` (lower-case names) in place of any of the same name."""
    extra = [(k.encode(), v.encode("latin-1")) for k, v in more.items()]
    names = {k for k, _ in extra}
    return [h for h in headers if h[0] not in names] + extra


def _lower(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower(), v) for k, v in headers]


class _Incoming:
    """A completion request as the hot path reads it: the ASGI scope and ``receive``, and
    its headers as a dict built once (names in lower case; of a repeated header the first
    value, as starlette's ``Headers.get`` answers)."""

    __slots__ = ("headers", "receive", "scope")

    def __init__(self, scope: dict[str, Any], receive: Any) -> None:
        self.scope, self.receive = scope, receive
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        self.headers = headers


class _OnDeparture:
    """The current task cancelled when the request's client leaves — told by the guarded
    protocol's :class:`~tierwise.route.edge.Departure`, or else (another server) by a task
    awaiting ASGI's ``http.disconnect`` through ``receive``. ``fired``: it was (so a
    ``CancelledError`` is the departure's, to be uncancelled, not the server's)."""

    def __init__(self, scope: dict[str, Any], receive: Any = None) -> None:
        me = asyncio.current_task()
        assert me is not None
        self.me, self.fired, self.receive = me, False, receive
        self.departure = scope.get("extensions", {}).get(DEPARTURE)
        self.task: asyncio.Task | None = None

    def _left(self) -> None:
        self.fired = True
        self.me.cancel()

    async def _watch(self) -> None:
        await _disconnected(self.receive)
        self._left()

    def __enter__(self) -> _OnDeparture:
        if self.departure is not None:
            self.departure.watch(self._left)
        elif self.receive is not None:
            self.task = asyncio.create_task(self._watch())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()
        elif self.departure is not None:
            self.departure.unwatch(self._left)


class _Streamed:
    """A stream as ASGI messages, each piece as it comes; a client that leaves ends it
    (the relaying generator is cancelled where it waits, then closed). Under the guarded
    protocol its :class:`~tierwise.route.edge.Departure` says so; under another server
    starlette's ``StreamingResponse`` listens for ``http.disconnect`` (a task group per
    stream)."""

    __slots__ = ("gen", "headers", "status")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], gen: Any) -> None:
        self.status, self.headers, self.gen = status, headers, gen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if DEPARTURE not in scope.get("extensions", {}):
            streaming = StreamingResponse(self.gen, status_code=self.status)
            streaming.raw_headers = self.headers  # as they came (repeats stay repeated)
            await streaming(scope, receive, send)
            return
        with _OnDeparture(scope) as leaving:
            try:
                await send({"type": "http.response.start", "status": self.status,
                            "headers": self.headers})  # fmt: skip
                async for chunk in self.gen:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            except asyncio.CancelledError:
                if not leaving.fired:
                    raise
                leaving.me.uncancel()
            finally:
                await self.gen.aclose()  # cancelled while sending: the generator ends here


class _Whole:
    """A whole answer as two ASGI messages (head with its ``content-length``, then the
    body), then ``after`` — the learning and the log, off the client's clock."""

    __slots__ = ("after", "body", "headers", "status")

    def __init__(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, after: Any = None
    ) -> None:
        self.status, self.headers, self.body, self.after = status, headers, body, after

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.headers.append((b"content-length", b"%d" % len(self.body)))
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})
        if self.after is not None:
            self.after()


def _reasons(preds: list[Prediction], name: str) -> list[str]:
    return next(p.option.reasons for p in preds if p.site == name)


def _usage_tokens(content: bytes) -> tuple[int, int | None]:
    """Completion and prompt tokens from a whole answer's ``usage`` (0 and None if absent)."""
    try:
        usage = json.loads(content).get("usage") or {}
        prompt = usage.get("prompt_tokens")
        return int(usage.get("completion_tokens") or 0), prompt if isinstance(prompt, int) else None
    except (ValueError, AttributeError, TypeError):
        return 0, None


def _service_s(pred: Prediction) -> float:
    """The predicted time a request holds its site's slot (first token and decode)."""
    return pred.stages_s.get("first_token", 0.0) + pred.stages_s.get("decode", 0.0)


def _record(shape: RequestShape, preds, order: list[str], reason) -> dict[str, Any]:
    """The request's decisions-log record; ``predicted`` and ``reason`` are made readable
    when it is written (:meth:`Router._write`)."""
    return {
        "ts": time.time(),
        "path": shape.path,
        "stream": shape.stream,
        "bytes_up": shape.bytes_up,
        "prompt_tokens": shape.prompt_tokens,
        "output_tokens": shape.output_tokens,
        "deadline_s": shape.deadline_s,
        "residency": shape.residency,
        "predicted": list(preds),
        "order": order,
        "reason": reason,
    }


def _attempt_dict(a: Attempt) -> dict[str, Any]:
    return {"site": a.site, "outcome": a.outcome, "time_s": a.time_s}


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse(error_body(message, kind), status_code=status)


async def _not_found(request: Request) -> Response:
    return rejection(refuse(404, f"Unknown path {request.url.path[:80]!r}: this gateway serves "
                            "/v1/chat/completions, /v1/completions, other /v1/ paths of its "
                            "default site, and /metrics.", "unknown_url"))  # fmt: skip


async def _not_allowed(request: Request) -> Response:
    exc = refuse(405, f"{request.method} is not allowed here: send POST.", "method_not_allowed")
    exc.headers["allow"] = "POST"
    return rejection(exc)
