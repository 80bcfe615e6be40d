"""Single-factor runs of the §12.3.5 request: one factor changes, everything else fixed.

``tierwise lab request --factor initcwnd=10,40,300`` (or ``cc=cubic,bbr``,
``idle=0s,3s``) sends the same request once per level per run, in one mode, and
rotates the order of the levels run by run (run ``r`` starts at level ``r mod n``:
a Latin square, so every level takes every position equally often and slow drift
on the host hits all levels alike).

Factors and what stays fixed:

- ``initcwnd=N,…`` — the route's ``initcwnd`` in both namespaces (default mode
  ``cold``). Fixed for every level: ``initrwnd`` 300 and 8 MB socket buffers on the
  client socket and the server listener, so the receiver's window never binds and
  only the sender's initial window changes. Predictions use IW = N segments in
  :func:`~tierwise.model.transport.window_wait_s` and in ``TcpSpec.initial_window``.
  (The SYN-ACK's window field is unscaled, so a new connection's first flight is at
  most 65,535 B = 45 segments whatever ``initcwnd`` says; the models do not know.)
- ``cc=NAME,…`` — ``TCP_CONGESTION`` on the client socket and the server listener
  (default mode ``cold``); everything else kernel defaults. The closed form does
  not depend on the controller; the simulator runs the level's controller.
- ``idle=T,…`` — on a kept connection (mode ``warm``, kernel defaults), an
  unrecorded request, then ``T`` of silence, then the recorded request. Whether
  Linux restarts the window after that idle gap (``tcp_slow_start_after_idle``,
  halving per RTO, never for BBR) is predicted with
  :func:`~tierwise.model.transport.window_after_idle` from the sender's measured
  ``cwnd`` and RTO and the idle time on the wire (``idle_wire_s``: since the
  previous upload's last segment left, not since the kernel accepted it), and
  shown as ``restart``. Level ``0s`` still idles about R + T_proc (the reply's
  round trip), below Linux's RTO floor of R + 200 ms, so the window is kept.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np

from tierwise.errors import ScenarioError, shown
from tierwise.lab.bench import netns
from tierwise.lab.bench.path import EmulatedPath
from tierwise.lab.bench.service import ModelService, ServiceConfig, set_buffers
from tierwise.lab.experiments.request import (
    CONGESTION_CONTROLS,
    TUNED_BUFFER_BYTES,
    TUNED_WINDOW_SEGMENTS,
    ColdMode,
    Knobs,
    Mode,
    RequestExperiment,
    Sample,
    median_pacing,
    predict,
    request_parameters,
    sysctl,
)
from tierwise.model.transport import (
    INITIAL_WINDOW_SEGMENTS,
    SYN_WINDOW_BYTES,
    TIMESTAMP_MSS_BYTES,
    window_after_idle,
)
from tierwise.units import parse_quantity

__all__ = [
    "FACTORS",
    "Factor",
    "alternation",
    "median_sample",
    "parse_factor",
    "run_factor",
]

MAX_INITCWND = 1000  # segments; the kernel accepts more, but nothing here needs it
MAX_IDLE_S = 60.0


@dataclass(frozen=True)
class FactorSpec:
    """One factor: what its levels are, the modes it applies to, its default mode."""

    unit: str
    modes: tuple[str, ...]
    default_mode: str
    help: str


FACTORS: dict[str, FactorSpec] = {
    "initcwnd": FactorSpec("segments", ("cold", "warm"), "cold", "route initcwnd, e.g. 10,40,300"),
    "cc": FactorSpec("", ("cold", "warm"), "cold", "congestion control, e.g. cubic,bbr"),
    "idle": FactorSpec("s", ("warm",), "warm", "idle gap before a kept request, e.g. 0s,3s"),
}


@dataclass(frozen=True)
class Factor:
    """A parsed ``--factor NAME=L1,L2,…``: ``levels`` in SI units, ``labels`` as typed."""

    name: str
    levels: tuple[int | float | str, ...]
    labels: tuple[str, ...]

    @property
    def spec(self) -> FactorSpec:
        return FACTORS[self.name]


def _bad(message: str) -> ScenarioError:
    return ScenarioError(message, source="--factor")


def parse_factor(text: str) -> Factor:
    """``"initcwnd=10,40,300"`` → ``Factor("initcwnd", (10, 40, 300), …)``; else ScenarioError."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep:
        raise _bad(f"expected NAME=LEVEL,LEVEL,… (e.g. initcwnd=10,40,300), got {shown(text)}")
    if name not in FACTORS:
        raise _bad(f"unknown factor {shown(name)}; known: {', '.join(FACTORS)}")
    labels = tuple(level.strip() for level in rest.split(","))
    if len(labels) < 2 or any(not level for level in labels):
        raise _bad(f"{name} needs at least two non-empty levels, got {shown(rest.strip())}")
    if len(set(labels)) != len(labels):
        raise _bad(f"{name} has a repeated level in {shown(rest.strip())}")
    levels = tuple(_level(name, label) for label in labels)
    if len(set(levels)) != len(levels):
        raise _bad(f"{name} has two levels with the same value in {shown(rest.strip())}")
    return Factor(name, levels, labels)


def _level(name: str, label: str) -> int | float | str:
    if name == "initcwnd":
        if not label.isdigit() or len(label) > 9 or not 1 <= int(label) <= MAX_INITCWND:
            raise _bad(f"initcwnd levels are segment counts 1–{MAX_INITCWND}, got {shown(label)}")
        return int(label)
    if name == "cc":
        if label not in CONGESTION_CONTROLS:
            raise _bad(
                f"unknown congestion control {shown(label)}; "
                f"known: {', '.join(CONGESTION_CONTROLS)}"
            )
        return label
    try:
        seconds = parse_quantity(label, "time")
    except Exception as exc:  # UnitError: say it as a --factor error, one line
        raise _bad(f"idle level {shown(label)} is not a time (e.g. 0s, 3s, 500ms): {exc}") from None
    if not 0 <= seconds <= MAX_IDLE_S:
        raise _bad(f"idle levels must lie in 0–{MAX_IDLE_S:g} s, got {shown(label)}")
    return float(seconds)


def alternation(n_levels: int, runs: int) -> list[list[int]]:
    """Level indices per run: run ``r`` is the levels rotated by ``r`` (a Latin square)."""
    if n_levels < 1 or runs < 1:
        raise ValueError("need at least one level and one run")
    base = list(range(n_levels))
    return [base[r % n_levels :] + base[: r % n_levels] for r in range(runs)]


def resolve_mode(factor: Factor, modes: tuple[str, ...] | None) -> str:
    """The one mode a factor run uses: the factor's default, or the single one asked for."""
    if modes is None:
        return factor.spec.default_mode
    if len(modes) != 1 or modes[0] not in factor.spec.modes:
        raise ScenarioError(
            f"--factor {factor.name} runs one mode ({' or '.join(factor.spec.modes)}), got "
            f"{','.join(modes) or '(none)'}",
            source="--modes",
        )
    return modes[0]


def median_sample(samples: list[dict]) -> dict:
    """The sample whose time is the median (the lower middle one for an even count)."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples, key=lambda s: s["time_s"])
    return ordered[(len(ordered) - 1) // 2]


# --- running -------------------------------------------------------------------------


class _Level:
    """One level: a way to send the request plus what to switch before each request."""

    def __init__(self, mode: Mode, before: Callable[[], None] = lambda: None):
        self.mode = mode
        self.before = before


class _Buffered(ColdMode):
    def _socket(self) -> socket.socket:
        sock = super()._socket()
        set_buffers(sock, TUNED_BUFFER_BYTES)
        return sock


class _BufferedWarm(Mode):
    def _socket(self) -> socket.socket:
        sock = super()._socket()
        set_buffers(sock, TUNED_BUFFER_BYTES)
        return sock


class Routes(Knobs):
    """The route metrics of both namespaces, changed only when they differ."""

    def __init__(self, path: EmulatedPath):
        super().__init__(path)
        self.current: tuple[int, int] | None = None

    def window(self, initcwnd: int, initrwnd: int = TUNED_WINDOW_SEGMENTS) -> None:
        if self.current == (initcwnd, initrwnd):
            return
        for ns, _, _ in self.ends:
            metrics = ["initcwnd", str(initcwnd), "initrwnd", str(initrwnd)]
            netns.ip("-n", ns, "route", "change", *self.routes[ns], *metrics)
        self.current = (initcwnd, initrwnd)

    def reset(self) -> None:
        for ns, _, _ in self.ends:
            netns.ip("-n", ns, "route", "change", *self.routes[ns])
        self.current = None


def _fixed(factor: Factor, mode: str, cc: str) -> list[str]:
    if factor.name == "initcwnd":
        return [
            f"mode {mode}",
            f"initrwnd {TUNED_WINDOW_SEGMENTS} on both namespaces' routes",
            f"SO_SNDBUF/SO_RCVBUF {TUNED_BUFFER_BYTES} B on the client socket and "
            "the server listener",
            f"congestion control {cc}",
        ]
    if factor.name == "cc":
        return [f"mode {mode}", "kernel defaults otherwise"]
    return [
        f"mode {mode}",
        "kernel defaults (tcp_slow_start_after_idle=1)",
        f"congestion control {cc}",
        "an unrecorded request on the same connection right before each idle gap",
    ]


def run_factor(
    exp: RequestExperiment,
    factor: Factor,
    mode: str,
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """Bring a path up, run every level ``exp.runs`` times in rotated order; the JSON record."""
    netns.require_lab()
    path = EmulatedPath(exp.path_config())
    with path:
        cc_default = sysctl(path.client_ns, "net.ipv4.tcp_congestion_control")
        cc = exp.cc or cc_default
        samples, order, server_cc = _run_levels(path, exp, factor, mode, progress)
    return {
        "experiment": "factor",
        "factor": factor.name,
        "levels": list(factor.labels),
        "level_values": list(factor.levels),
        "mode": mode,
        "parameters": request_parameters(replace(exp, modes=(mode,))),
        "kernel": os.uname().release,
        "seeds": {"path": exp.seed, "sim": exp.seed},
        "cc": cc if factor.name != "cc" else None,
        "namespace_default_cc": cc_default,
        "fixed": _fixed(factor, mode, cc),
        "order": [[factor.labels[i] for i in run] for run in order],
        "server_cc_seen": server_cc,
        "emulator": {k: asdict(v) for k, v in (path.stats or {}).items()},
        "summary": summarise_factor(samples, exp, factor, mode, cc),
        "samples": samples,
    }


def _run_levels(
    path: EmulatedPath,
    exp: RequestExperiment,
    factor: Factor,
    mode: str,
    progress: Callable[[dict], None] | None,
) -> tuple[list[dict], list[list[int]], list[str]]:
    body = bytes(exp.size_bytes)
    routes = Routes(path)
    buffered = factor.name == "initcwnd"
    services: list[ModelService] = []
    levels: list[_Level] = []
    order = alternation(len(factor.levels), exp.runs)
    samples: list[dict] = []
    try:
        for value in factor.levels:
            cc = value if factor.name == "cc" else exp.cc
            svc = ModelService(
                path.server_ns,
                path.server_addr,
                ServiceConfig(
                    exp.processing_s,
                    exp.response_bytes,
                    TUNED_BUFFER_BYTES if buffered else None,
                    cc,
                ),
            )
            svc.start()
            services.append(svc)
            if mode == "cold":
                cls = _Buffered if buffered else ColdMode
            else:
                cls = _BufferedWarm if buffered else Mode
            levels.append(_Level(cls(path, svc.port, body, cc), _before(factor, value, routes)))
        for level in levels:
            level.before()
            level.mode.open()
        start = time.perf_counter()
        previous: dict[int, dict[str, float]] = {}  # absolute events of each level's last exchange
        for run, indices in enumerate(order):
            for i in indices:
                level = levels[i]
                level.before()
                if factor.name == "idle":
                    previous[i] = level.mode.request()[0]  # unrecorded: the window grows again
                    time.sleep(float(factor.levels[i]))
                events, before, idle = level.mode.request()
                record = {
                    "level": factor.labels[i],
                    **asdict(_sample(events, before, idle, mode, run, start)),
                    "idle_wire_s": _idle_on_the_wire(previous.get(i), events, exp),
                }
                previous[i] = events
                samples.append(record)
                if progress is not None:
                    progress(record)
    finally:
        for level in levels:
            level.mode.close()
        server_cc: set[str] = set()
        for svc in services:
            server_cc |= svc.congestion_seen
            svc.stop()
        if buffered:
            routes.reset()
    return samples, order, sorted(server_cc)


def _before(factor: Factor, value: object, routes: Routes) -> Callable[[], None]:
    if factor.name == "initcwnd":
        return lambda: routes.window(int(value))  # type: ignore[call-overload]
    return lambda: None


def _sample(
    events: dict[str, float],
    before: dict[str, float],
    idle: float | None,
    name: str,
    run: int,
    start: float,
) -> Sample:
    events = dict(events)
    nbytes = events.pop("response_bytes")
    begin = events.get("connect_start", events["first_sent"])
    sample = Sample(
        name, run, events["last_response"] - begin, {k: v - start for k, v in events.items()}
    )
    sample.tcp_before = dict(before)
    sample.tcp_before["response_bytes"] = nbytes
    sample.idle_s = idle
    return sample


def _idle_on_the_wire(
    previous: dict[str, float] | None, events: dict[str, float], exp: RequestExperiment
) -> float | None:
    """How long the client's TCP had sent no data when this request began.

    ``idle_s`` counts from ``last_sent`` of the previous exchange, when the kernel
    *accepted* the last byte; on a window-limited upload the segments leave up to a
    second later, and Linux measures idle from the last segment sent. That segment
    left about one RTT plus the processing time before the response's first byte
    arrived, so the idle gap is ``first_sent − (first_response − R − T_proc)``.
    """
    if previous is None or "connect_start" in events:
        return None
    last_data = previous["first_response"] - exp.rtt_s - exp.processing_s
    return max(0.0, events["first_sent"] - max(last_data, previous["last_sent"]))


# --- predictions ---------------------------------------------------------------------


def _start_window(
    mode: str, samples: list[dict], iw_segments: int, cc: str
) -> tuple[float, bool | None]:
    """The window the recorded upload starts with, and (kept connections) whether it restarts."""
    iw = iw_segments * TIMESTAMP_MSS_BYTES
    if mode == "cold":
        return iw, None
    windows, restarts = [], []
    for s in samples:
        before = s["tcp_before"]
        idle = s["idle_wire_s"] if s.get("idle_wire_s") is not None else s["idle_s"]
        if idle is None or not before.get("rto_s") or not before.get("cwnd_segments"):
            continue
        cwnd = before["cwnd_segments"] * TIMESTAMP_MSS_BYTES
        w = window_after_idle(cwnd, idle, before["rto_s"], iw, restart=cc != "bbr", rule="linux")
        windows.append(w)
        restarts.append(w < cwnd)
    if not windows:
        return iw, None
    return statistics.median(windows), sum(restarts) * 2 > len(restarts)


def summarise_factor(
    samples: list[dict], exp: RequestExperiment, factor: Factor, mode: str, cc: str
) -> dict[str, dict]:
    """Median, p90, p99 per level, with the closed-form and simulated predictions beside them."""
    summary = {}
    for label, value in zip(factor.labels, factor.levels, strict=True):
        mine = [s for s in samples if s["level"] == label]
        times = np.array([s["time_s"] for s in mine])
        median, p90, p99 = np.percentile(times, [50, 90, 99]) if len(times) else (np.nan,) * 3
        level_cc = str(value) if factor.name == "cc" else cc
        iw = int(value) if factor.name == "initcwnd" else INITIAL_WINDOW_SEGMENTS  # type: ignore[call-overload]
        window, restart = _start_window(mode, mine, iw, level_cc)
        pacing = median_pacing([s.get("tcp_before", {}) for s in mine], level_cc)
        pred = predict(exp, mode, window, level_cc, pacing)
        entry = {
            "runs": len(mine),
            "median_s": float(median),
            "p90_s": float(p90),
            "p99_s": float(p99),
            **pred,
            "initial_window_segments": iw,
            "cc": level_cc,
        }
        if factor.name == "initcwnd" and mode == "cold":
            entry["syn_window_capped"] = iw * TIMESTAMP_MSS_BYTES > SYN_WINDOW_BYTES
        if restart is not None:
            entry["window_restarts"] = restart
            wire = [s["idle_wire_s"] for s in mine if s.get("idle_wire_s") is not None]
            if wire:
                entry["idle_on_the_wire_s"] = float(statistics.median(wire))
        summary[label] = entry
    return summary


def check_factor_modes(modes: str | None) -> tuple[str, ...] | None:
    """``--modes`` as given (None when not given)."""
    if modes is None:
        return None
    return tuple(m.strip() for m in modes.split(",") if m.strip())
