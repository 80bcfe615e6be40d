"""Runs over :mod:`tierwise.lab.experiments.tunnels`'s transports: the request, the bulk.

``run_via_requests``: the §12.3.5 request (354,640 B up, 30 ms processing, 1,000 B
back by default) alternated run by run over each transport, reported beside the
floor ``R + S/B + T_proc + S_resp/B`` (§12.1.1). ``sessions`` says what carries it:
``warm`` (one session per transport, warmed by three requests), ``new`` (each timed
request on a new session: the transport's ends are restarted before it and start
knowing nothing of the path), ``remembered`` (the same, but the relay's ends keep
their path memory across the restarts, learned first by a warm-up session).
``beside_bulk_bytes``: each timed request runs while the same transport carries a bulk
download of that size from another service (started ``BULK_LEAD_S`` before it, stopped
after it): an interactive request beside bulk on one session (issue 32).

``run_via_bulk``: ``size_bytes`` server → client through each transport (or until
``duration_s``), goodput against the path rate and the CPU seconds per GB each end
of the transport spent (from ``/proc/<pid>/stat``, user + system; kernel TCP's work
is not a process's and is not counted).
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tierwise.errors import LabError
from tierwise.lab.bench import netns
from tierwise.lab.bench.emulator import DEFAULT_POLICE_BURST_BYTES, Direction
from tierwise.lab.bench.path import MTU_BYTES, EmulatedPath, PathConfig
from tierwise.lab.bench.service import ModelService, ServiceConfig, set_buffers, set_congestion
from tierwise.lab.experiments.request import (
    TUNED_BUFFER_BYTES,
    RequestExperiment,
    TimedConnection,
    serial_floor_s,
)
from tierwise.lab.experiments.tunnels import (
    Tunnel,
    digest_ok,
    kcptun_unavailable_reason,
    open_tunnel,
    retry_until,
    tunnel_record,
    upload_body,
)

__all__ = ["ViaBulk", "ViaExperiment", "run_via_bulk", "run_via_requests"]

WARMUP_REQUESTS = 3  # untimed, per transport: the relay's session measures the path first
WARMUP_TIMEOUT_S = 30.0
BULK_CHUNK_BYTES = 1 << 20
BULK_CONNECT_TIMEOUT_S = 15.0
MAX_BULK_S = 600.0
GB = 1e9
SESSIONS = ("warm", "new", "remembered")
BULK_LEAD_S = 2.0  # a bulk beside a request runs this long first: past its start-up


@dataclass(frozen=True)
class ViaExperiment:
    """The request of ``request`` over each of ``vias`` (``request.modes`` is not used)."""

    request: RequestExperiment
    vias: tuple[str, ...]
    mtu_bytes: int = MTU_BYTES  # of the path (the relay and kcptun follow it)
    sessions: str = "warm"  # "warm", "new" or "remembered" (see the module)
    beside_bulk_bytes: int = 0  # > 0: each timed request beside a bulk download this large

    def __post_init__(self) -> None:
        if self.sessions not in SESSIONS:
            raise LabError(f"sessions must be one of {', '.join(SESSIONS)}")
        if self.beside_bulk_bytes and self.sessions != "warm":
            raise LabError("a request beside bulk runs on a warm session")


def _check_kcptun(vias: tuple[str, ...]) -> None:
    reason = kcptun_unavailable_reason() if "kcptun" in vias else None
    if reason is not None:
        raise LabError(f"--via kcptun: {reason}")


def run_via_requests(exp: ViaExperiment, progress: Callable[[dict], None] | None = None) -> dict:
    """Bring a path up, run the request over every transport alternately; the JSON record."""
    netns.require_lab()
    _check_kcptun(exp.vias)
    req = exp.request
    body = upload_body(req.size_bytes, req.seed)
    config = ServiceConfig(req.processing_s, req.response_bytes, None, req.cc, digest=True)
    path = EmulatedPath(replace(req.path_config(), mtu_bytes=exp.mtu_bytes))
    with path, ModelService(path.server_ns, path.server_addr, config) as svc:
        target = (path.server_addr, svc.port)
        if exp.sessions == "warm":
            samples, records = _on_warm_sessions(exp, path, target, body, progress)
        else:
            samples, records = _on_new_sessions(exp, path, target, body, progress)
    return {
        "experiment": "request-via",
        "parameters": {
            **_parameters(req, exp.vias),
            "mtu_bytes": exp.mtu_bytes,
            "sessions": exp.sessions,
            "beside_bulk_bytes": exp.beside_bulk_bytes,
        },
        "kernel": os.uname().release,
        "namespaces": {"client": path.client_ns, "server": path.server_ns},
        "transports": records,
        "emulator": {k: vars(v) for k, v in (path.stats or {}).items()},
        "summary": summarise_vias(samples, req, exp.vias),
        "samples": samples,
    }


def _on_warm_sessions(
    exp: ViaExperiment,
    path: EmulatedPath,
    target: tuple[str, int],
    body: bytes,
    progress: Callable[[dict], None] | None,
) -> tuple[list[dict], dict]:
    """One warmed session per transport for every timed request (beside bulk, maybe)."""
    req = exp.request
    with contextlib.ExitStack() as stack:
        source = None
        if exp.beside_bulk_bytes:
            source = _Source(path, exp.beside_bulk_bytes, req.cc)
            stack.callback(source.close)
        extra = {"bulk": source.address} if source is not None else None
        tunnels = {
            via: stack.enter_context(
                open_tunnel(via, path, target, req.rtt_s, req.rate_bytes_per_s, extra=extra)
            )
            for via in exp.vias
        }
        for tunnel in tunnels.values():
            _warm(path, tunnel, body, req.cc)
        samples = _alternate(path, tunnels, body, req, progress, source)
        records = {via: tunnel_record(t) for via, t in tunnels.items()}
    return samples, records


def _on_new_sessions(
    exp: ViaExperiment,
    path: EmulatedPath,
    target: tuple[str, int],
    body: bytes,
    progress: Callable[[dict], None] | None,
) -> tuple[list[dict], dict]:
    """Each timed request on a transport started for it (its first session): with no
    memory of the path (``new``) or with the memory earlier sessions left (``remembered``,
    first a warm session that learns the path)."""
    req = exp.request
    records: dict = {}
    with tempfile.TemporaryDirectory(prefix="tw-memory-") as memory:
        kept = memory if exp.sessions == "remembered" else None
        if kept is not None:
            for via in exp.vias:
                with open_tunnel(via, path, target, req.rtt_s, req.rate_bytes_per_s,
                                 memory_dir=kept) as tunnel:  # fmt: skip
                    _warm(path, tunnel, body, req.cc)
        samples = []
        start = time.perf_counter()
        for run in range(req.runs):
            for via in exp.vias:
                with open_tunnel(via, path, target, req.rtt_s, req.rate_bytes_per_s,
                                 memory_dir=kept) as tunnel:  # fmt: skip
                    sample = _timed(path, tunnel, body, req, run, start)
                    records[via] = tunnel_record(tunnel)
                samples.append(sample)
                if progress is not None:
                    progress(sample)
    return samples, records


def _parameters(req: RequestExperiment, vias: tuple[str, ...]) -> dict:
    return {
        "vias": list(vias),
        "size_bytes": req.size_bytes,
        "processing_s": req.processing_s,
        "response_bytes": req.response_bytes,
        "runs": req.runs,
        "cc": req.cc,
        "rtt_s": req.rtt_s,
        "rate_bytes_per_s": req.rate_bytes_per_s,
        "loss_up": req.loss_up,
        "loss_down": req.loss_down,
        "seed": req.seed,
        "warmup_requests": WARMUP_REQUESTS,
    }


def _request(path: EmulatedPath, tunnel: Tunnel, body: bytes, cc: str | None) -> TimedConnection:
    """One ``POST /infer`` on a new application connection; raises on a wrong answer."""

    def make_socket() -> socket.socket:
        sock = path.socket("client")
        if cc is not None and tunnel.via == "direct":
            set_congestion(sock, cc)
        return sock

    conn = TimedConnection(tunnel.host, tunnel.port, make_socket)
    try:
        conn.exchange(body)
    finally:
        conn.close()
    if not digest_ok(body, conn.payload):
        raise LabError(f"{tunnel.via}: the service received other bytes than were sent")
    return conn


def _warm(path: EmulatedPath, tunnel: Tunnel, body: bytes, cc: str | None) -> None:
    for _ in range(WARMUP_REQUESTS):
        retry_until(
            lambda: _request(path, tunnel, body, cc), WARMUP_TIMEOUT_S, f"{tunnel.via} warm-up"
        )
        tunnel.check_alive()


def _alternate(
    path: EmulatedPath,
    tunnels: dict[str, Tunnel],
    body: bytes,
    req: RequestExperiment,
    progress: Callable[[dict], None] | None,
    bulk: _Source | None = None,
) -> list[dict]:
    samples = []
    start = time.perf_counter()
    for run in range(req.runs):
        for tunnel in tunnels.values():
            if bulk is None:
                sample = _timed(path, tunnel, body, req, run, start)
            else:
                with _BulkBeside(path, tunnel, bulk, req.cc) as beside:
                    sample = _timed(path, tunnel, body, req, run, start)
                sample["bulk_bytes_during"] = beside.received_during(sample)
            samples.append(sample)
            if progress is not None:
                progress(sample)
    return samples


def _timed(
    path: EmulatedPath, tunnel: Tunnel, body: bytes, req: RequestExperiment, run: int, start: float
) -> dict:
    """One timed request; a failure is a result (its error), not the end of the run."""
    sample: dict = {"via": tunnel.via, "run": run}
    try:
        conn = _request(path, tunnel, body, req.cc)
    except (OSError, LabError) as exc:
        tunnel.check_alive()
        sample.update(time_s=None, error=f"{type(exc).__name__}: {exc}")
    else:
        events = {k: v - start for k, v in conn.events.items() if k != "response_bytes"}
        sample.update(time_s=events["last_response"] - events["connect_start"], events_s=events)
        sample["at_s"] = conn.events["connect_start"]
    return sample


class _BulkBeside:
    """A bulk download through ``tunnel`` from ``source`` on a thread, started
    ``BULK_LEAD_S`` before the block's body and stopped at its end; what arrived when."""

    def __init__(self, path: EmulatedPath, tunnel: Tunnel, source: _Source, cc: str) -> None:
        self.sock = path.socket("client")
        if tunnel.via == "direct":
            set_buffers(self.sock, TUNED_BUFFER_BYTES * 2)
            set_congestion(self.sock, cc)
            self.address = source.address
        else:
            self.address = (tunnel.host, tunnel.extra_ports["bulk"])
        self.arrivals: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True, name="bulk-beside")

    def __enter__(self) -> _BulkBeside:
        self.sock.settimeout(BULK_CONNECT_TIMEOUT_S)
        self.sock.connect(self.address)
        self.thread.start()
        time.sleep(BULK_LEAD_S)
        return self

    def _read(self) -> None:
        buf = bytearray(BULK_CHUNK_BYTES)
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                n = self.sock.recv_into(buf)
            except TimeoutError:
                continue
            except OSError:
                return
            if not n:
                return
            self.arrivals.append((time.perf_counter(), n))

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()

    def received_during(self, sample: dict) -> int:
        """Bytes of the bulk that arrived while the request ran (0: the bulk had ended)."""
        if sample.get("time_s") is None:
            return 0
        t0 = sample["at_s"]
        return sum(n for t, n in self.arrivals if t0 <= t <= t0 + sample["time_s"])


def summarise_vias(samples: list[dict], req: RequestExperiment, vias: tuple[str, ...]) -> dict:
    """Per transport: median, p90, p99 and their ratios to the floor; failures counted."""
    import numpy as np

    floor = serial_floor_s(req)
    summary: dict[str, dict] = {}
    for via in vias:
        times = [s["time_s"] for s in samples if s["via"] == via and s["time_s"] is not None]
        failed = sum(1 for s in samples if s["via"] == via and s["time_s"] is None)
        row: dict = {"runs": len(times), "failed": failed, "floor_s": floor}
        if times:
            median, p90, p99 = (float(x) for x in np.percentile(times, [50, 90, 99]))
            row.update(median_s=median, p90_s=p90, p99_s=p99)
            row.update(median_over_floor=median / floor, p99_over_floor=p99 / floor)
        summary[via] = row
    base = summary.get("relay", {}).get("median_s")
    for row in summary.values():
        if base and "median_s" in row:
            row["median_over_relay"] = row["median_s"] / base
    return summary


# --- bulk ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ViaBulk:
    """``size_bytes`` server → client over each transport at each download loss level."""

    vias: tuple[str, ...]
    losses: tuple[float, ...] = (0.0, 0.14)
    size_bytes: int = 100_000_000
    duration_s: float = 120.0  # the bound: a transfer still running then is stopped
    rtt_s: float = 0.200
    rate_bytes_per_s: float = 333e6 / 8
    cc: str = "cubic"
    seed: int = 0
    mtu_bytes: int = MTU_BYTES  # of the path (the relay and kcptun follow it)
    # a token-bucket policer on the download (emulator.Direction's); None: none
    police_bytes_per_s: float | None = None
    police_burst_bytes: int = DEFAULT_POLICE_BURST_BYTES

    def __post_init__(self) -> None:
        if not 0 < self.duration_s <= MAX_BULK_S:
            raise LabError(f"the bulk duration must lie in (0, {MAX_BULK_S:g}] s")
        if self.size_bytes <= 0:
            raise LabError("the bulk size must be positive")

    def path_config(self, loss: float) -> PathConfig:
        """Half the RTT and the rate each way; ``loss`` (and the policer) on the download
        only (§12.3.3)."""
        up = Direction(delay_s=self.rtt_s / 2, rate_bytes_per_s=self.rate_bytes_per_s)
        down = Direction(
            delay_s=self.rtt_s / 2,
            rate_bytes_per_s=self.rate_bytes_per_s,
            loss=loss,
            police_rate_bytes_per_s=self.police_bytes_per_s,
            police_burst_bytes=self.police_burst_bytes,
        )
        return PathConfig(up=up, down=down, seed=self.seed, mtu_bytes=self.mtu_bytes)


class _Source:
    """A TCP server in the server namespace: each connection gets ``size_bytes``, then FIN."""

    def __init__(self, path: EmulatedPath, size_bytes: int, cc: str):
        self.listener = path.socket("server")
        set_buffers(self.listener, TUNED_BUFFER_BYTES * 2)
        set_congestion(self.listener, cc)
        self.listener.bind((path.server_addr, 0))
        self.listener.listen(4)
        self.size_bytes = size_bytes
        self.thread = threading.Thread(target=self._serve, daemon=True, name="bulk-source")
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.listener.getsockname()

    def _serve(self) -> None:
        """Accept until closed; every connection is fed by its own thread.

        One per connection: a tunnel's readiness probe (connect, close) reaches this
        server too, and the transfer must not wait behind it or die with it.
        """
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._feed, args=(conn,), daemon=True).start()

    def _feed(self, conn: socket.socket) -> None:
        chunk = memoryview(bytes(range(256)) * (BULK_CHUNK_BYTES // 256))
        with conn, contextlib.suppress(OSError):
            left = self.size_bytes
            while left > 0:
                left -= conn.send(chunk[: min(left, BULK_CHUNK_BYTES)])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(5)


def run_via_bulk(exp: ViaBulk, progress: Callable[[dict], None] | None = None) -> dict:
    """Every (loss, transport) transfer; the JSON-ready record."""
    netns.require_lab()
    _check_kcptun(exp.vias)
    rows, emulator = [], {}
    for loss in exp.losses:
        # a policed path gets a new emulator per transport: its counters then say what each
        # one lost to the policer (and each starts with a full bucket)
        groups = [(via,) for via in exp.vias] if exp.police_bytes_per_s else [exp.vias]
        for vias in groups:
            path = EmulatedPath(exp.path_config(loss))
            with path:
                source = _Source(path, exp.size_bytes, exp.cc)
                try:
                    level = [
                        {"loss": loss, "via": via, **_bulk_once(path, source, via, exp)}
                        for via in vias
                    ]
                finally:
                    source.close()
            # the path's counters over these transfers (lost, dropped at the queue, policed)
            counters = {k: vars(v) for k, v in (path.stats or {}).items()}
            emulator[f"{loss:g}" if len(groups) == 1 else f"{loss:g}/{vias[0]}"] = counters
            if exp.police_bytes_per_s:
                level[0].update(_policed(level[0], counters, exp.police_bytes_per_s))
            for row in level:
                rows.append(row)
                if progress is not None:
                    progress(row)
    return {
        "experiment": "throughput-via",
        "parameters": {
            "vias": list(exp.vias),
            "losses": list(exp.losses),
            "loss_direction": "down (server → client; the server sends)",
            "size_bytes": exp.size_bytes,
            "duration_s": exp.duration_s,
            "rtt_s": exp.rtt_s,
            "rate_bytes_per_s": exp.rate_bytes_per_s,
            "cc_direct": exp.cc,
            "mtu_bytes": exp.mtu_bytes,
            "police_bytes_per_s": exp.police_bytes_per_s,
            "police_burst_bytes": exp.police_burst_bytes if exp.police_bytes_per_s else None,
        },
        "kernel": os.uname().release,
        "rows": rows,
        "emulator": emulator,
    }


def _policed(row: dict, counters: dict, police_bytes_per_s: float) -> dict:
    """A policed transfer's share of the policed rate and of its packets the path dropped
    (lost, policed or dropped at the queue), from its own emulator's download counters."""
    down = counters.get("down", {})
    packets = down.get("packets", 0)
    dropped = sum(down.get(k, 0) for k in ("lost", "dropped", "policed"))
    return {
        "goodput_over_police": row["goodput_bytes_per_s"] / police_bytes_per_s,
        "path_loss": dropped / packets if packets else 0.0,
        "policed_share": down.get("policed", 0) / packets if packets else 0.0,
    }


def _bulk_once(path: EmulatedPath, source: _Source, via: str, exp: ViaBulk) -> dict:
    with open_tunnel(via, path, source.address, exp.rtt_s, exp.rate_bytes_per_s) as tunnel:
        cpu_before = tunnel.cpu_s()
        received, elapsed, ended = _receive(path, tunnel, exp)
        cpu = {end: s - cpu_before[end] for end, s in tunnel.cpu_s().items()}
        record = tunnel_record(tunnel)
    goodput = received / elapsed if elapsed > 0 else 0.0
    gigabytes = received / GB
    return {
        "received_bytes": received,
        "complete": received == exp.size_bytes,
        "ended": ended,
        "elapsed_s": elapsed,
        "goodput_bytes_per_s": goodput,
        "goodput_over_rate": goodput / exp.rate_bytes_per_s,
        "cpu_s": cpu,
        "cpu_s_per_gb": {end: s / gigabytes for end, s in cpu.items()} if gigabytes else {},
        **record,
    }


def _receive(path: EmulatedPath, tunnel: Tunnel, exp: ViaBulk) -> tuple[int, float, str]:
    """Connect through the tunnel and read until EOF, the size, or the duration bound.

    Also how the transfer ended: ``size`` (all of it), ``eof`` (an orderly close before
    that: a truncation), ``reset`` (the connection broke) or ``bound`` (still running at
    the duration bound), so a short transfer is never mistaken for a complete one.
    """
    sock = path.socket("client")
    ended = "bound"
    with sock:
        if tunnel.via == "direct":
            set_buffers(sock, TUNED_BUFFER_BYTES * 2)
            set_congestion(sock, exp.cc)
        sock.settimeout(BULK_CONNECT_TIMEOUT_S)
        start = time.perf_counter()
        sock.connect((tunnel.host, tunnel.port))
        stop = start + exp.duration_s
        buf = bytearray(BULK_CHUNK_BYTES)
        received = 0
        last = start
        while received < exp.size_bytes and (now := time.perf_counter()) < stop:
            sock.settimeout(max(0.01, stop - now))
            try:
                n = sock.recv_into(buf)
            except TimeoutError:
                break
            except OSError:
                ended = "reset"
                break
            if not n:
                ended = "eof"
                break
            received += n
            last = time.perf_counter()
        if received >= exp.size_bytes:
            ended = "size"
    return received, last - start, ended
