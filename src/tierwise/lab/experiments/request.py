"""The §12.3.5 request experiment: one upload, three ways to carry it, modes alternated.

Each run sends the same ``POST /infer`` (``size_bytes`` up, ``response_bytes`` back,
``processing_s`` at the service) once per mode, in the order given, so slow drift
in the host hits every mode alike (§12.3.5 insists on alternating). Modes:

- ``cold``: a new connection per request, kernel defaults. Time runs from
  ``connect()`` to the last response byte.
- ``warm``: one kept connection, kernel defaults: after the idle gap (the other
  modes' runs) Linux restarts slow start (``tcp_slow_start_after_idle = 1``).
- ``warm-tuned``: one kept connection with the knobs of :data:`TUNED_KNOBS`. The
  namespace-wide ones are switched on before each of its requests and back off
  before any other mode's, so the other modes always see kernel defaults.

Time for kept connections runs from the first request byte handed to the kernel
to the last response byte. Event times per request (seconds from the run's start):
``connect_start``/``connect_end`` (cold only), ``first_sent`` (the first ``send``
call begins), ``last_sent`` (``sendall`` returned: the kernel *accepted* the last
byte into its send buffer, not that it left or arrived), ``first_response`` (a
byte of the response is readable), ``last_response`` (the whole body is read).

Predictions beside each mode: the closed form (serial floor ``R + S/B + T_proc +
S_resp/B``; cold adds the TCP handshake, 1 RTT — there is no TLS here — and the
slow-start wait of :func:`~tierwise.model.transport.window_wait_s` with IW 10 ×
1448 B) and the packet-level simulator (:func:`tierwise.sim.run_request`).
"""

from __future__ import annotations

import http.client
import os
import socket
import statistics
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from tierwise.errors import LabError, SimulationError, shown
from tierwise.lab.bench import netns
from tierwise.lab.bench.budget import BudgetExceeded, wall_budget
from tierwise.lab.bench.emulator import DEFAULT_QUEUE_BYTES, Direction
from tierwise.lab.bench.path import EmulatedPath, PathConfig
from tierwise.lab.bench.service import (
    INFER_PATH,
    ModelService,
    ServiceConfig,
    set_buffers,
    set_congestion,
)
from tierwise.model.request import serial_time_s
from tierwise.model.transport import (
    INITIAL_WINDOW_SEGMENTS,
    SYN_WINDOW_BYTES,
    TIMESTAMP_MSS_BYTES,
    window_after_idle,
    window_wait_s,
)
from tierwise.sim import PathSpec, TcpSpec, run_request

__all__ = [
    "MODES",
    "TUNED_KNOBS",
    "ColdMode",
    "Mode",
    "RequestExperiment",
    "Sample",
    "WarmTunedMode",
    "predict",
    "request_parameters",
    "run_experiment",
    "simulated_s",
    "summarise",
]

MODES = ("cold", "warm", "warm-tuned")
CONGESTION_CONTROLS = {"reno": "newreno", "cubic": "cubic", "bbr": "bbr-linux"}  # kernel → sim
TCP_HANDSHAKE_RTTS = 1  # SYN, SYN-ACK; the request rides with the final ACK (RFC 9293)
TUNED_WINDOW_SEGMENTS = 300  # initcwnd/initrwnd: above the 245 segments of the 354,640 B upload
TUNED_BUFFER_BYTES = 8 << 20  # ≥ 2 × the 2.5 MB BDP of 100 Mbit/s × 200 ms
TUNED_KNOBS = (
    "net.ipv4.tcp_slow_start_after_idle=0 in both namespaces",
    f"initcwnd {TUNED_WINDOW_SEGMENTS} initrwnd {TUNED_WINDOW_SEGMENTS} on both namespaces' routes",
    f"SO_SNDBUF/SO_RCVBUF {TUNED_BUFFER_BYTES} B on the client socket and the server listener",
)
SOCKET_TIMEOUT_S = 60.0
SUBPROCESS_TIMEOUT_S = 10.0
TCP_INFO_FORMAT = "8x I 56x I I I I"  # tcpi_rto, then tcpi_rtt, rttvar, snd_ssthresh, snd_cwnd
TCP_INFO_BYTES = 168  # through tcpi_delivery_rate (Linux ≥ 4.9)
TCP_INFO_PACING_OFFSET = 104  # __u64 tcpi_pacing_rate, bytes/s
TCP_INFO_DELIVERY_OFFSET = 160  # __u64 tcpi_delivery_rate, bytes/s
TCP_CC_INFO = 26  # <linux/tcp.h>; not exported by Python's socket module
# A prediction takes ~0.02 s (354,640 B, 200 ms, 100 Mbit/s); past this it is abandoned.
PREDICTION_BUDGET_S = 10.0
PREDICTION_UNTIL_S = 3600.0  # simulated seconds, run_request's own default


@dataclass(frozen=True)
class RequestExperiment:
    """Parameters of one experiment (SI units); ``cc`` None keeps the namespaces' default."""

    size_bytes: int = 354_640
    processing_s: float = 0.030
    response_bytes: int = 1000
    modes: tuple[str, ...] = MODES
    runs: int = 20
    cc: str | None = None
    rtt_s: float = 0.200
    rate_bytes_per_s: float = 100e6 / 8
    loss_up: float = 0.0
    loss_down: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            shown_modes = shown(unknown) if unknown else "(none)"
            raise LabError(f"unknown mode(s) {shown_modes}; known: {', '.join(MODES)}")
        if self.cc is not None and self.cc not in CONGESTION_CONTROLS:
            known = ", ".join(CONGESTION_CONTROLS)
            raise LabError(f"unknown --cc {shown(self.cc)}; known: {known}")
        if self.runs < 1 or self.size_bytes < 0 or self.response_bytes < 0:
            raise LabError("runs must be ≥ 1 and sizes ≥ 0")

    def path_config(self) -> PathConfig:
        def direction(loss: float) -> dict:
            return {
                "delay_s": self.rtt_s / 2,
                "rate_bytes_per_s": self.rate_bytes_per_s,
                "loss": loss,
            }

        return PathConfig(
            up=Direction(**direction(self.loss_up)),
            down=Direction(**direction(self.loss_down)),
            seed=self.seed,
        )


@dataclass
class Sample:
    """One request's events (seconds since the run began) and the sender's TCP state before it."""

    mode: str
    run: int
    time_s: float
    events_s: dict[str, float]
    tcp_before: dict[str, float] = field(default_factory=dict)
    idle_s: float | None = None  # since this connection last sent (kept connections)


# --- the client ----------------------------------------------------------------------


class TimedConnection(http.client.HTTPConnection):
    """``http.client`` over a socket from ``make_socket``, noting when bytes go and come."""

    def __init__(self, host: str, port: int, make_socket: Callable[[], socket.socket]):
        super().__init__(host, port, timeout=SOCKET_TIMEOUT_S)
        self._make_socket = make_socket
        self.events: dict[str, float] = {}
        self.payload = b""

    def connect(self) -> None:
        sock = self._make_socket()
        sock.settimeout(self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.events["connect_start"] = time.perf_counter()
        try:
            sock.connect((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.events["connect_end"] = time.perf_counter()
        self.sock = sock

    def send(self, data: bytes) -> None:
        self.events.setdefault("first_sent", time.perf_counter())
        super().send(data)
        self.events["last_sent"] = time.perf_counter()  # the kernel accepted it

    def exchange(self, body: bytes) -> dict[str, float]:
        """One ``POST /infer``; the absolute event times (``perf_counter``)."""
        self.events = {}
        if self.sock is None:
            self.connect()
        self.request(
            "POST", INFER_PATH, body=body, headers={"Content-Type": "application/octet-stream"}
        )
        self.sock.recv(1, socket.MSG_PEEK)  # blocks until the first response byte is here
        self.events["first_response"] = time.perf_counter()
        response = self.getresponse()
        payload = response.read()
        self.events["last_response"] = time.perf_counter()
        if response.status != 200:
            raise LabError(f"the model service answered {response.status} {response.reason}")
        self.events["response_bytes"] = len(payload)
        self.payload = payload
        return dict(self.events)


def tcp_state(sock: socket.socket) -> dict[str, float]:
    """The sender's window, timers and pacing from ``TCP_INFO`` (SI units).

    With BBR, also its model from ``TCP_CC_INFO`` (``struct tcp_bbr_info``): the
    bottleneck bandwidth estimate, the minimum RTT, and the pacing and window gains.
    """
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
    rto_us, rtt_us, rttvar_us, ssthresh, cwnd = struct.unpack_from(TCP_INFO_FORMAT, raw)
    state = {
        "rto_s": rto_us * 1e-6,
        "srtt_s": rtt_us * 1e-6,
        "rttvar_s": rttvar_us * 1e-6,
        "ssthresh_segments": ssthresh,
        "cwnd_segments": cwnd,
    }
    if len(raw) >= TCP_INFO_DELIVERY_OFFSET + 8:
        (pacing,) = struct.unpack_from("Q", raw, TCP_INFO_PACING_OFFSET)
        (delivery,) = struct.unpack_from("Q", raw, TCP_INFO_DELIVERY_OFFSET)
        state["pacing_rate_bytes_per_s"] = float(pacing)
        state["delivery_rate_bytes_per_s"] = float(delivery)
    cc = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0")
    if cc == b"bbr":
        info = sock.getsockopt(socket.IPPROTO_TCP, TCP_CC_INFO, 20)
        bw_lo, bw_hi, min_rtt_us, pacing_gain, cwnd_gain = struct.unpack("5I", info)
        state["bbr_bw_bytes_per_s"] = float(bw_hi << 32 | bw_lo)
        state["bbr_min_rtt_s"] = min_rtt_us * 1e-6
        state["bbr_pacing_gain"] = pacing_gain / 256
        state["bbr_cwnd_gain"] = cwnd_gain / 256
    return state


# --- namespace-wide knobs ------------------------------------------------------------


def _run(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"`{' '.join(argv)}` failed: {exc}") from exc
    if proc.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def sysctl(namespace: str, key: str, value: str | None = None) -> str:
    """Read (or, with ``value``, set) ``key`` inside ``namespace`` via ``ip netns exec``."""
    args = ["sysctl", "-n", key] if value is None else ["sysctl", "-w", f"{key}={value}"]
    return _run(netns.exec_argv(namespace, args))


class Knobs:
    """Switches the namespace-wide tuned settings on and off, only when they change."""

    def __init__(self, path: EmulatedPath):
        self.ends = [
            (path.client_ns, path.client_dev, path.client_addr),
            (path.server_ns, path.server_dev, path.server_addr),
        ]
        self.routes = {ns: self._connected_route(ns, dev) for ns, dev, _ in self.ends}
        self.tuned = False

    @staticmethod
    def _connected_route(namespace: str, dev: str) -> list[str]:
        line = netns.ip("-n", namespace, "route", "show", "dev", dev).stdout.split("\n")[0].split()
        if not line:
            raise LabError(f"no route on {dev} in {namespace}")
        return [line[0], "dev", dev, *line[1:]]

    def set(self, tuned: bool) -> None:
        if tuned == self.tuned:
            return
        windows = str(TUNED_WINDOW_SEGMENTS)
        metrics = ["initcwnd", windows, "initrwnd", windows] if tuned else []
        for ns, _, _ in self.ends:
            sysctl(ns, "net.ipv4.tcp_slow_start_after_idle", "0" if tuned else "1")
            netns.ip("-n", ns, "route", "change", *self.routes[ns], *metrics)
        self.tuned = tuned


# --- modes ---------------------------------------------------------------------------


class Mode:
    """A way to carry the request; ``request()`` returns absolute event times."""

    tuned = False
    kept = True

    def __init__(self, path: EmulatedPath, port: int, body: bytes, cc: str | None):
        self.path, self.port, self.body, self.cc = path, port, body, cc
        self.conn: TimedConnection | None = None
        self.last_sent: float | None = None

    def _socket(self) -> socket.socket:
        sock = self.path.socket("client")
        if self.cc is not None:
            set_congestion(sock, self.cc)
        return sock

    def _connection(self) -> TimedConnection:
        return TimedConnection(self.path.server_addr, self.port, self._socket)

    def open(self) -> None:
        """Open the kept connection and warm it with one request that is not recorded."""
        self.conn = self._connection()
        self.conn.connect()
        self.last_sent = self.conn.exchange(self.body)["last_sent"]

    def request(self) -> tuple[dict[str, float], dict[str, float], float | None]:
        assert self.conn is not None
        before = tcp_state(self.conn.sock)
        events = self.conn.exchange(self.body)
        idle = events["first_sent"] - self.last_sent if self.last_sent is not None else None
        self.last_sent = events["last_sent"]
        return events, before, idle

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class ColdMode(Mode):
    """A new connection per request: its handshake and slow start are in every sample."""

    kept = False

    def open(self) -> None:
        pass

    def request(self) -> tuple[dict[str, float], dict[str, float], float | None]:
        conn = self._connection()
        try:
            return conn.exchange(self.body), {}, None
        finally:
            conn.close()


class WarmTunedMode(Mode):
    tuned = True

    def _socket(self) -> socket.socket:
        sock = super()._socket()
        set_buffers(sock, TUNED_BUFFER_BYTES)
        return sock


MODE_CLASSES: dict[str, type[Mode]] = {"cold": ColdMode, "warm": Mode, "warm-tuned": WarmTunedMode}


# --- the experiment ------------------------------------------------------------------


def run_experiment(
    exp: RequestExperiment, progress: Callable[[Sample], None] | None = None
) -> dict:
    """Bring a path up, run ``exp``, tear it down; the JSON-ready record."""
    netns.require_lab()
    path = EmulatedPath(exp.path_config())
    with path:
        setup = _configure(path, exp)
        samples, server_cc = _run_modes(path, exp, progress)
    return {
        "experiment": "request",
        "parameters": request_parameters(exp),
        "kernel": os.uname().release,
        "seeds": {"path": exp.seed, "sim": exp.seed},
        "namespaces": {"client": path.client_ns, "server": path.server_ns},
        **setup,
        "server_cc_seen": server_cc,
        "emulator": {k: asdict(v) for k, v in (path.stats or {}).items()},
        "summary": summarise(samples, exp, setup["cc"]),
        "samples": [asdict(s) for s in samples],
    }


def _configure(path: EmulatedPath, exp: RequestExperiment) -> dict:
    defaults = {
        key: sysctl(path.client_ns, key)
        for key in ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_slow_start_after_idle")
    }
    how = "namespace default"
    if exp.cc is not None:
        how = "sysctl net.ipv4.tcp_congestion_control in both namespaces"
        try:
            for ns in (path.client_ns, path.server_ns):
                sysctl(ns, "net.ipv4.tcp_congestion_control", exp.cc)
        except LabError:
            # A namespace may only default to the host's tcp_allowed_congestion_control;
            # root may still choose any loaded algorithm per socket.
            how = "TCP_CONGESTION on every socket (the host restricts it as a namespace default)"
    cc = exp.cc or sysctl(path.client_ns, "net.ipv4.tcp_congestion_control")
    knobs = list(TUNED_KNOBS) if "warm-tuned" in exp.modes else []
    return {"cc": cc, "cc_set_by": how, "namespace_defaults": defaults, "warm_tuned_knobs": knobs}


def _run_modes(
    path: EmulatedPath, exp: RequestExperiment, progress: Callable[[Sample], None] | None
) -> tuple[list[Sample], list[str]]:
    body = bytes(exp.size_bytes)
    plain = ServiceConfig(exp.processing_s, exp.response_bytes, None, exp.cc)
    tuned = ServiceConfig(exp.processing_s, exp.response_bytes, TUNED_BUFFER_BYTES, exp.cc)
    knobs = Knobs(path)
    samples: list[Sample] = []
    with (
        ModelService(path.server_ns, path.server_addr, plain) as svc,
        ModelService(path.server_ns, path.server_addr, tuned) as svc_tuned,
    ):
        modes = {
            m: MODE_CLASSES[m](path, (svc_tuned if m == "warm-tuned" else svc).port, body, exp.cc)
            for m in exp.modes
        }
        try:
            for mode in modes.values():
                knobs.set(mode.tuned)
                mode.open()
            start = time.perf_counter()
            for run in range(exp.runs):
                for name, mode in modes.items():
                    knobs.set(mode.tuned)
                    sample = _sample(name, run, mode, start)
                    samples.append(sample)
                    if progress is not None:
                        progress(sample)
        finally:
            for mode in modes.values():
                mode.close()
            knobs.set(False)
        server_cc = sorted(svc.congestion_seen | svc_tuned.congestion_seen)
    return samples, server_cc


def _sample(name: str, run: int, mode: Mode, start: float) -> Sample:
    events, before, idle = mode.request()
    nbytes = events.pop("response_bytes")
    begin = events.get("connect_start", events["first_sent"])
    rel = {k: v - start for k, v in events.items()}
    sample = Sample(name, run, events["last_response"] - begin, rel, before, idle)
    sample.tcp_before["response_bytes"] = nbytes
    return sample


def request_parameters(exp: RequestExperiment) -> dict:
    """The experiment's parameters as a record holds them."""
    return {
        "size_bytes": exp.size_bytes,
        "processing_s": exp.processing_s,
        "response_bytes": exp.response_bytes,
        "modes": list(exp.modes),
        "runs": exp.runs,
        "cc_requested": exp.cc,
        "rtt_s": exp.rtt_s,
        "rate_bytes_per_s": exp.rate_bytes_per_s,
        "loss_up": exp.loss_up,
        "loss_down": exp.loss_down,
        "queue_bytes": DEFAULT_QUEUE_BYTES,
        "mss_bytes": TIMESTAMP_MSS_BYTES,
        "tls": False,
    }


# --- predictions and summary -----------------------------------------------------------


def serial_floor_s(exp: RequestExperiment) -> float:
    """``R + S/B + T_proc + S_resp/B`` (§12.1.1): an open connection whose window never binds."""
    return float(
        serial_time_s(
            exp.size_bytes,
            exp.rate_bytes_per_s,
            exp.rtt_s,
            exp.processing_s,
            exp.response_bytes,
            exp.rate_bytes_per_s,
        )
    )


def start_window_bytes(mode: str, samples: list[Sample], cc: str) -> float:
    """The window the upload starts with: IW for cold; after idle (Linux rule) for warm."""
    iw = INITIAL_WINDOW_SEGMENTS * TIMESTAMP_MSS_BYTES
    if mode == "cold":
        return iw
    if mode == "warm-tuned":
        return max(TUNED_WINDOW_SEGMENTS * TIMESTAMP_MSS_BYTES, _median_cwnd(samples))
    windows = [
        window_after_idle(
            s.tcp_before["cwnd_segments"] * TIMESTAMP_MSS_BYTES,
            s.idle_s,
            s.tcp_before["rto_s"],
            iw,
            restart=cc != "bbr",
            rule="linux",
        )
        for s in samples
        if s.idle_s is not None and s.tcp_before.get("rto_s")
    ]
    return statistics.median(windows) if windows else iw


def _median_cwnd(samples: list[Sample]) -> float:
    cwnds = [s.tcp_before["cwnd_segments"] for s in samples if "cwnd_segments" in s.tcp_before]
    return statistics.median(cwnds) * TIMESTAMP_MSS_BYTES if cwnds else 0.0


def predict(
    exp: RequestExperiment,
    mode: str,
    window_bytes: float,
    cc: str,
    pacing_bytes_per_s: float | None = None,
) -> dict[str, float]:
    """Closed-form and simulated request time for ``mode`` starting from ``window_bytes``.

    A new connection's first flight is capped by the SYN-ACK's unscaled window
    (:data:`~tierwise.model.transport.SYN_WINDOW_BYTES`) in the closed form. With
    ``pacing_bytes_per_s`` (BBR paces every segment; read from ``TCP_INFO`` before the
    request) a third prediction, ``paced_s``, sends the upload at ``min(B, pacing)``.
    """
    handshake = TCP_HANDSHAKE_RTTS * exp.rtt_s if mode == "cold" else 0.0
    wait = window_wait_s(
        exp.size_bytes,
        exp.rate_bytes_per_s,
        exp.rtt_s,
        INITIAL_WINDOW_SEGMENTS,
        TIMESTAMP_MSS_BYTES,
        start_window_bytes=window_bytes,
        first_flight_bytes=SYN_WINDOW_BYTES if mode == "cold" else None,
    )
    segments = max(1, round(window_bytes / TIMESTAMP_MSS_BYTES))
    sim_cc = CONGESTION_CONTROLS.get(cc, "cubic")
    sim_s, sim_note = simulated_s(exp, mode, segments, sim_cc)
    out = {
        "serial_floor_s": serial_floor_s(exp),
        "handshake_s": handshake,
        "window_wait_s": float(wait),
        "closed_form_s": serial_floor_s(exp) + handshake + float(wait),
        "sim_s": sim_s,
        "start_window_segments": segments,
    }
    if sim_note is not None:
        out["sim_note"] = sim_note
    if pacing_bytes_per_s:
        paced_rate = min(exp.rate_bytes_per_s, pacing_bytes_per_s)
        out["pacing_rate_bytes_per_s"] = float(pacing_bytes_per_s)
        out["paced_s"] = out["closed_form_s"] + exp.size_bytes * (
            1 / paced_rate - 1 / exp.rate_bytes_per_s
        )
    return out


def simulated_s(
    exp: RequestExperiment,
    mode: str,
    segments: int,
    sim_cc: str,
    budget_s: float | None = None,
) -> tuple[float | None, str | None]:
    """The packet-level simulator's request time, or (None, why) when it cannot tell.

    Bounded: a simulation that has not finished within ``budget_s`` of wall time
    (default :data:`PREDICTION_BUDGET_S`) or :data:`PREDICTION_UNTIL_S` simulated is
    abandoned, so a prediction never keeps the measured results from being shown.
    """
    budget_s = PREDICTION_BUDGET_S if budget_s is None else budget_s
    what = f"{sim_cc}, initial window {segments}"
    try:
        with wall_budget(budget_s):
            result = run_request(
                PathSpec(
                    exp.rate_bytes_per_s,
                    exp.rate_bytes_per_s,
                    exp.rtt_s,
                    exp.loss_up,
                    exp.loss_down,
                    queue_bytes=DEFAULT_QUEUE_BYTES,
                ),
                TcpSpec(
                    cc=sim_cc,
                    initial_window=segments,
                    handshake_rtts=TCP_HANDSHAKE_RTTS if mode == "cold" else 0,
                    syn_window=SYN_WINDOW_BYTES,  # applies only with the handshake (cold)
                ),
                exp.size_bytes,
                exp.response_bytes,
                exp.processing_s,
                seed=exp.seed,
                until=PREDICTION_UNTIL_S,
            )
    except BudgetExceeded as exc:
        return None, f"sim ({what}) {exc}; left blank"
    except SimulationError as exc:
        return None, f"sim ({what}): {exc}; left blank"
    return result.time_s, None


def median_pacing(tcp_before: list[dict[str, float]], cc: str) -> float | None:
    """BBR's pacing rate before the request (median over runs); None for other controls."""
    rates = [t.get("pacing_rate_bytes_per_s") for t in tcp_before]
    rates = [r for r in rates if r]
    return float(statistics.median(rates)) if cc == "bbr" and rates else None


def summarise(samples: list[Sample], exp: RequestExperiment, cc: str) -> dict[str, dict]:
    """Median, p90, p99 of request time per mode, with the predictions beside them."""
    summary = {}
    for mode in exp.modes:
        mine = [s for s in samples if s.mode == mode]
        times = np.array([s.time_s for s in mine])
        median, p90, p99 = np.percentile(times, [50, 90, 99]) if len(times) else (np.nan,) * 3
        summary[mode] = {
            "runs": len(mine),
            "median_s": float(median),
            "p90_s": float(p90),
            "p99_s": float(p99),
            **predict(
                exp,
                mode,
                start_window_bytes(mode, mine, cc),
                cc,
                median_pacing([s.tcp_before for s in mine], cc),
            ),
        }
    return summary
