"""``tierwise lab route`` in network namespaces: a client and three servers, real kernel TCP.

::

    tw-<pid>-route (client)            emulator per path            tw-<pid>-<i>-srv
    gateway + this harness ─ 10.77.1.1 ──── 0.4 ms, no limit ───── device model server
                           ─ 10.77.2.1 ──── 10 ms, 20 Mbit/s ───── edge model server
                           ─ 10.77.3.1 ──── 60 ms, 80 Mbit/s ───── cloud model server

Each site's ``tierwise lab model-server`` runs in its own namespace behind its own
user-space emulated path (:class:`tierwise.lab.bench.path.EmulatedPath`, sharing one
client namespace); the gateway (``tierwise route``) and the client run in the client
namespace, so every request is kernel TCP through the emulator. The world changes live,
at fixed request numbers: the cloud path's uplink is retuned 80 → 3 Mbit/s in the
running emulator; the edge's server is killed (its kernel resets the gateway's
connections) and restarted 10 s later; the device's decode is slowed 3× through its
``/admin/behaviour``.

With ``engine`` set (``tierwise lab route --engine llama.cpp``), the edge's stand-in is
a real engine instead: llama.cpp's server on a random model
(:mod:`tierwise.lab.world.engine`) in the edge's namespace, one request at a time
(the gateway is told ``slots = 1``); it is killed and restarted like the stand-in. A
text model reads no images, so that world's mix is text only (prompts of 5–50 words,
calibrated with prompts of three lengths).

The oracle is measured, not computed: each site in each of its states is first timed
with pinned requests of three sizes through a gateway (``x-tierwise-site``) and
fitted ``a + b · bytes`` (so TCP's slow start and both HTTP hops are in it); then a
last pass pins every request to the site that fit says is best in the world of that
moment — it knows the uplink, whether the edge is up and the device's slow-down.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierwise.lab.bench.procs import stop
from tierwise.lab.world.common import CLI, MBIT, route_toml, scratch_dir, workload

__all__ = ["ENGINE_SITE", "NS_SITES", "NsWorld", "oracle_site", "run_ns_world"]

SERVER_PORT = 8000
PIN = "x-tierwise-site"  # the gateway's pin header (tierwise.route.request.SITE_HEADER)
# name: tier, rtt s, uplink bytes/s (0: the emulator's ceiling, no prior), decode step s
NS_SITES = {
    "device": ("device", 0.0004, 0.0, 0.030),
    "edge": ("edge", 0.010, 20 * MBIT, 0.010),
    "cloud": ("cloud", 0.060, 80 * MBIT, 0.005),
}
COLLAPSED_BYTES_PER_S = 3 * MBIT
EDGE_DOWN_S = 10.0
DEVICE_SLOWDOWN = 3.0
Fits = dict[str, tuple[float, float]]
ENGINE_SITE = "edge"  # the site a real engine takes (--engine)
CHANGES = {"cloud uplink 3 Mbit/s": 0.25, "edge down 10 s": 0.45, "device 3× slower": 0.7}


@dataclass
class WorldState:
    """What the harness set before a request (the oracle's knowledge)."""

    cloud_up_bytes_per_s: float = NS_SITES["cloud"][2]
    edge_up: bool = True
    device_slowdown: float = 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "cloud_up_bytes_per_s": self.cloud_up_bytes_per_s,
            "edge_up": self.edge_up,
            "device_slowdown": self.device_slowdown,
        }


def state_key(name: str, w: dict[str, Any]) -> str:
    """Which of a site's states the world puts it in (the oracle's fits are per state)."""
    if name == "cloud":
        return f"cloud@{w['cloud_up_bytes_per_s'] * 8e-6:g}Mbit/s"
    if name == "device":
        return f"device@{w['device_slowdown']:g}x"
    return name


def model_time_s(name: str, w: dict[str, Any], body_bytes: int, fits: Fits) -> float:
    """The oracle's time for a request: the state's measured fit, ``a + b · bytes``."""
    if name == "edge" and not w["edge_up"]:
        return float("inf")
    a, b = fits[state_key(name, w)]
    return a + b * body_bytes


def oracle_site(w: dict[str, Any], body_bytes: int, fits: Fits) -> str:
    """The site with the shortest measured-fit time in world ``w``."""
    return min(NS_SITES, key=lambda s: model_time_s(s, w, body_bytes, fits))


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """``time = a + b · bytes`` (b ≥ 0) through the smallest body's mean time exactly,
    least squares for the others: text requests are most of a mix, so the line must
    not trade their time for the images' (a plain fit missed text by 0.1 s)."""
    x0 = min(x for x, _ in points)
    y0 = sum(y for x, y in points if x == x0) / sum(1 for x, _ in points if x == x0)
    sxx = sum((x - x0) ** 2 for x, _ in points)
    b = max(sum((x - x0) * (y - y0) for x, y in points) / sxx, 0.0) if sxx else 0.0
    return y0 - b * x0, b


@dataclass
class NsWorld:
    """The client namespace, three paths and three model servers; ``with`` brings them up."""

    paths: dict[str, Any] = field(default_factory=dict)
    servers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    state: WorldState = field(default_factory=WorldState)
    client_ns: str = ""
    engine_model: Path | None = None  # a GGUF file: the edge is llama.cpp's server on it
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _restart: threading.Timer | None = None

    def __enter__(self) -> NsWorld:
        from tierwise.lab.bench import netns
        from tierwise.lab.bench.path import EmulatedPath, PathConfig

        try:
            self.client_ns = self._stack.enter_context(netns.owned("route"))
            for i, (name, (_, rtt, up, _)) in enumerate(NS_SITES.items(), start=1):
                cfg = PathConfig.symmetric(rtt_s=rtt, rate_bytes_per_s=up or None, seed=i)
                path = EmulatedPath(cfg, index=i, client_ns=self.client_ns)
                self.paths[name] = self._stack.enter_context(path)
                self.urls[name] = f"http://{path.server_addr}:{SERVER_PORT}"
                self._start_server(name)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._restart is not None:
            self._restart.cancel()
        for proc in self.servers.values():
            _stop(proc)
        self._stack.close()

    def _start_server(self, name: str) -> None:
        from tierwise.lab.bench import netns

        path, step = self.paths[name], NS_SITES[name][3]
        if name == ENGINE_SITE and self.engine_model is not None:
            self._start_engine(name)
            return
        cmd = [*CLI, "lab", "model-server", "--host", path.server_addr]
        cmd += ["--port", str(SERVER_PORT), "--decode-step", f"{step} s"]
        cmd += ["--prefill-per-token", "0 s", "--slots", "64"]
        proc = subprocess.Popen(
            netns.exec_argv(path.server_ns, cmd),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.servers[name] = proc
        with netns.entered(self.client_ns):
            _ready(proc, self.urls[name])

    def _start_engine(self, name: str) -> None:
        from tierwise.lab.bench import netns
        from tierwise.lab.world.engine import engine_command, wait_engine_ready

        assert self.engine_model is not None
        path = self.paths[name]
        cmd = engine_command(self.engine_model, path.server_addr, SERVER_PORT)
        proc = subprocess.Popen(
            netns.exec_argv(path.server_ns, cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.servers[name] = proc
        with netns.entered(self.client_ns):
            wait_engine_ready(proc, self.urls[name])

    def slots(self) -> dict[str, int]:
        """The gateway's ``slots`` per site: one at a real engine."""
        return {ENGINE_SITE: 1} if self.engine_model is not None else {}

    def reset(self, client: Any) -> None:
        """The world as it starts: full cloud uplink, the edge up, the device at speed."""
        from tierwise.lab.bench.emulator import Direction

        if self._restart is not None:
            self._restart.join()
        rtt, up = NS_SITES["cloud"][1], NS_SITES["cloud"][2]
        self.paths["cloud"].retune(up=Direction(delay_s=rtt / 2, rate_bytes_per_s=up))
        client.post(self.urls["device"] + "/admin/behaviour", json={"slowdown": 1.0})
        self.state = WorldState()

    def calibrate(self, client: Any, gateway: str) -> Fits:
        """The oracle's knowledge: each site in each of its states, measured by pinned
        requests of three sizes (text, 1.3 MB, 5.3 MB) and fitted ``a + b · bytes``.

        Measured rather than computed, so TCP's slow start, the emulator and both HTTP
        hops are in it exactly as the strategies meet them.
        """
        from tierwise.lab.bench.emulator import Direction

        probes = _probe_bodies(text_only=self.engine_model is not None)
        self.reset(client)
        fits: Fits = {}
        for name in NS_SITES:
            _pinned(client, gateway, name, probes[:1])  # warm: the connection is open
            fits[state_key(name, self.state.as_dict())] = fit_line(
                _pinned(client, gateway, name, probes)
            )
        rtt = NS_SITES["cloud"][1]
        slow = Direction(delay_s=rtt / 2, rate_bytes_per_s=COLLAPSED_BYTES_PER_S)
        self.paths["cloud"].retune(up=slow)
        self.state.cloud_up_bytes_per_s = COLLAPSED_BYTES_PER_S
        fits[state_key("cloud", self.state.as_dict())] = fit_line(
            _pinned(client, gateway, "cloud", probes[:2])
        )
        client.post(self.urls["device"] + "/admin/behaviour", json={"slowdown": DEVICE_SLOWDOWN})
        self.state.device_slowdown = DEVICE_SLOWDOWN
        fits[state_key("device", self.state.as_dict())] = fit_line(
            _pinned(client, gateway, "device", probes)
        )
        self.reset(client)
        return fits

    def before(self, i: int, n: int, client: Any) -> dict[str, Any]:
        """Apply the change due before request ``i`` of ``n``; the world the request meets."""
        from tierwise.lab.bench.emulator import Direction

        if i == round(n * CHANGES["cloud uplink 3 Mbit/s"]):
            rtt = NS_SITES["cloud"][1]
            slow = Direction(delay_s=rtt / 2, rate_bytes_per_s=COLLAPSED_BYTES_PER_S)
            self.paths["cloud"].retune(up=slow)
            self.state.cloud_up_bytes_per_s = COLLAPSED_BYTES_PER_S
        if i == round(n * CHANGES["edge down 10 s"]):
            _stop(self.servers["edge"], kill=True)
            self.state.edge_up = False
            self._restart = threading.Timer(EDGE_DOWN_S, self._edge_back)
            self._restart.start()
        if i == round(n * CHANGES["device 3× slower"]):
            slowdown = {"slowdown": DEVICE_SLOWDOWN}
            client.post(self.urls["device"] + "/admin/behaviour", json=slowdown)
            self.state.device_slowdown = DEVICE_SLOWDOWN
        return self.state.as_dict()

    def _edge_back(self) -> None:
        self._start_server("edge")
        self.state.edge_up = True


def _probe_bodies(text_only: bool = False) -> list[bytes]:
    """A text prompt and two image uploads (1.3 MB and 5.3 MB bodies) for calibration;
    ``text_only`` (a real engine, which reads no images): prompts of three lengths."""
    import json

    if text_only:
        content = ["describe " * words for words in (10, 100, 300)]
        out = [{"messages": [{"role": "user", "content": c}], "max_tokens": 30} for c in content]
        return [json.dumps(b).encode() for b in out]

    text = workload(1, 7, image_share=0.0)
    small = workload(1, 7, image_bytes=(1_000_000, 1_000_000), image_share=1.0)
    large = workload(1, 7, image_bytes=(4_000_000, 4_000_000), image_share=1.0)
    return [json.dumps(b[0]).encode() for b in (text, small, large)]


def _pinned(client: Any, gateway: str, name: str, bodies: list[bytes]) -> list[tuple[int, float]]:
    """(bytes, seconds) of each body sent through the gateway pinned to ``name``."""
    out = []
    for body in bodies:
        t0 = time.perf_counter()
        headers = {PIN: name, "content-type": "application/json"}
        r = client.post(gateway + "/v1/chat/completions", content=body, headers=headers)
        if r.status_code != 200:
            from tierwise.errors import LabError

            raise LabError(f"calibrating {name}: {r.status_code} {r.text[:300]}")
        out.append((len(body), time.perf_counter() - t0))
    return out


def _ready(proc: subprocess.Popen[bytes], url: str) -> None:
    """Wait for a server of the lab to answer; one that does not is a :class:`LabError`."""
    from tierwise.errors import LabError
    from tierwise.lab.world.model_server import wait_ready

    try:
        wait_ready(proc, url, timeout_s=60.0)
    except RuntimeError as exc:
        raise LabError(str(exc)) from None


def _stop(proc: subprocess.Popen[bytes], kill: bool = False) -> None:
    stop(proc, kill=kill)


def run_ns_strategy(
    world: NsWorld,
    strategy: str,
    bodies: list[bytes],
    tmp: Path,
    progress: Any,
    fits: Fits | None = None,
) -> list[dict]:
    """One pass of the mix through a fresh gateway in the client namespace; its records."""
    import json

    import httpx

    from tierwise.lab.bench import netns

    port, log = 8088, tmp / f"{strategy}.jsonl"
    gw_strategy = "predictive" if strategy == "oracle" else strategy
    toml = route_toml(NS_SITES, world.urls, port, log, gw_strategy, world.slots())
    (tmp / f"{strategy}.toml").write_text(toml)
    cmd = [*CLI, "route", "--config", str(tmp / f"{strategy}.toml")]
    gw = subprocess.Popen(
        netns.exec_argv(world.client_ns, cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    gateway, worlds, failed = f"http://127.0.0.1:{port}", [], 0
    task = progress.add_task(strategy, total=len(bodies))
    try:
        with netns.entered(world.client_ns), httpx.Client(timeout=120) as client:
            _ready(gw, gateway)
            world.reset(client)
            for i, body in enumerate(bodies):
                w = world.before(i, len(bodies), client)
                pin = {PIN: oracle_site(w, len(body), fits)} if fits else {}
                pin["content-type"] = "application/json"  # llama.cpp's server needs it
                r = client.post(gateway + "/v1/chat/completions", content=body, headers=pin)
                failed += r.status_code != 200
                worlds.append({**w, "client_ok": r.status_code == 200})
                progress.advance(task)
    finally:
        _stop(gw)
    records = [json.loads(line) for line in log.read_text().splitlines() if line]
    for rec, w in zip(records, worlds, strict=False):
        rec["world"] = w
        rec["client_failed"] = failed
    return records


def run_ns_world(
    requests: int,
    seed: int,
    strategies: list[str],
    engine_size: str | None = None,
    replicas: int = 1,
) -> tuple[dict[str, list[dict]], list[bytes], Fits]:
    """The mix (1–8 MB image uploads) under each strategy and the measured oracle; with
    ``engine_size`` (a key of :data:`~tierwise.lab.world.engine.ENGINE_SIZES`) the edge is
    llama.cpp's server on a random model of that size; with ``replicas`` > 1, also that
    many gateways behind HAProxy sharing state (``fleet-shared``) and not (``fleet-alone``)
    (:func:`tierwise.lab.world.fleet.run_ns_fleet`)."""
    import json

    from rich.progress import Progress

    share = 0.0 if engine_size is not None else 0.25  # a text engine reads no images
    mix = workload(requests, seed, image_bytes=(750_000, 6_000_000), image_share=share)
    bodies = [json.dumps(b).encode() for b in mix]
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(scratch_dir())
        model = None
        if engine_size is not None:
            from tierwise.lab.world.engine import ENGINE_SIZES, write_tiny_gguf

            model = write_tiny_gguf(tmp / "engine.gguf", ENGINE_SIZES[engine_size])
        world = stack.enter_context(NsWorld(engine_model=model))
        progress = stack.enter_context(Progress(transient=True))
        fits = calibrate_world(world, tmp)
        runs = {s: run_ns_strategy(world, s, bodies, tmp, progress) for s in strategies}
        if replicas > 1:
            for label, shared in (("fleet-shared", True), ("fleet-alone", False)):
                runs[label] = run_ns_fleet(world, label, bodies, tmp, progress, replicas, shared)
        runs["oracle"] = run_ns_strategy(world, "oracle", bodies, tmp, progress, fits)
    return runs, bodies, fits


def calibrate_world(world: NsWorld, tmp: Path) -> Fits:
    """The oracle's fits, measured through a gateway of their own."""
    import httpx

    from tierwise.lab.bench import netns

    port, log = 8088, tmp / "calibrate.jsonl"
    toml = route_toml(NS_SITES, world.urls, port, log, "static", world.slots())
    (tmp / "calibrate.toml").write_text(toml)
    cmd = [*CLI, "route", "--config", str(tmp / "calibrate.toml")]
    gw = subprocess.Popen(
        netns.exec_argv(world.client_ns, cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        with netns.entered(world.client_ns), httpx.Client(timeout=120) as client:
            _ready(gw, f"http://127.0.0.1:{port}")
            return world.calibrate(client, f"http://127.0.0.1:{port}")
    finally:
        _stop(gw)


def ns_report(runs: dict[str, list[dict]], bodies: list[bytes], fits: Fits) -> dict[str, dict]:
    """Totals against the measured oracle, agreement, failures, error, follow; printed."""
    import statistics

    n = len(bodies)
    oracle_total = sum(r.get("total_s", 0.0) for r in runs["oracle"])
    out: dict[str, dict] = {}
    print(f"{n} requests in namespaces; measured oracle total {oracle_total:.2f} s")
    for key, (a, b) in fits.items():
        mbit = 8e-6 / b if b > 0 else float("inf")
        print(f"  oracle's fit {key:16s} {a * 1e3:7.1f} ms + bytes at {mbit:7.2f} Mbit/s")
    for name, recs in runs.items():
        best = [oracle_site(r["world"], len(bodies[i]), fits) for i, r in enumerate(recs)]
        total = sum(r.get("total_s", 0.0) for r in recs)
        errors = [
            abs(r["actual_s"] - r["predicted"][r["chosen"]]["time_s"]) / r["actual_s"]
            for r in recs[10:]
            if r.get("chosen")
        ]
        row = {
            "total_s": total,
            "vs_oracle": total / oracle_total,
            "agree": sum(r["order"][:1] == [best[i]] for i, r in enumerate(recs)),
            "failed": sum(not r["world"]["client_ok"] for r in recs),
            "failed_in_outage": sum(
                not r["world"]["client_ok"] for r in recs if not r["world"]["edge_up"]
            ),
            "median_error": statistics.median(errors) if errors else float("nan"),
            "follow": ns_follow(recs, best),
        }
        out[name] = row
        print(
            f"{name:15s} total {total:7.2f} s ({row['vs_oracle']:5.3f}× oracle), first choice "
            f"= oracle's {row['agree']}/{n}, failed {row['failed']} "
            f"({row['failed_in_outage']} in the outage), median |pred err| after 10: "
            f"{row['median_error'] * 100:.1f} %, follow (requests, s): {row['follow']}"
        )
    return out


def ns_follow(recs: list[dict], best: list[str]) -> list[tuple[int, float] | None]:
    """After each world change: requests, and seconds, until the first choice is the oracle's."""
    keys = ("cloud_up_bytes_per_s", "edge_up", "device_slowdown")
    starts = [
        i
        for i in range(1, len(recs))
        if any(recs[i]["world"][k] != recs[i - 1]["world"][k] for k in keys)
    ]
    out: list[tuple[int, float] | None] = []
    for start in starts:
        k = next((j for j in range(start, len(recs)) if recs[j]["order"][:1] == [best[j]]), None)
        if k is None:
            out.append(None)
            continue
        waited_s = sum(r.get("total_s", 0.0) for r in recs[start:k])
        out.append((k - start + 1, round(waited_s, 2)))
    return out


def run_ns_fleet(
    world: NsWorld,
    label: str,
    bodies: list[bytes],
    tmp: Path,
    progress: Any,
    replicas: int,
    shared: bool,
) -> list[dict]:
    """The namespace world's mix through ``replicas`` gateways behind HAProxy in the
    client namespace, sharing state through a Redis there (``shared``) or learning alone;
    the replicas' records merged by time, each with the world it met."""
    import json

    import httpx

    from tierwise.lab.bench import netns
    from tierwise.lab.world.fleet import haproxy, redis_server

    def inside(argv: list[str]) -> list[str]:
        return netns.exec_argv(world.client_ns, argv)

    procs, logs, worlds, failed = [], [], [], 0
    task = progress.add_task(label, total=len(bodies))
    with contextlib.ExitStack() as stack:
        stack.enter_context(netns.entered(world.client_ns))  # ports, waits: in there
        state = stack.enter_context(redis_server(wrap=inside)).url if shared else None
        try:
            ports = [8090 + i for i in range(replicas)]
            for i, port in enumerate(ports):
                log = tmp / f"{label}-{i}.jsonl"
                cfg = tmp / f"{label}-{i}.toml"
                cfg.write_text(route_toml(NS_SITES, world.urls, port, log, "predictive",
                                          world.slots()))  # fmt: skip
                extra = ["--state", state] if state else []
                cmd = [*CLI, "route", "--config", str(cfg), "--replica", f"r{i}", *extra]
                procs.append(subprocess.Popen(inside(cmd), stdout=subprocess.DEVNULL,
                                              stderr=subprocess.PIPE))  # fmt: skip
                logs.append(log)
            for proc, port in zip(procs, ports, strict=True):
                _ready(proc, f"http://127.0.0.1:{port}")
            lb = stack.enter_context(haproxy(ports, wrap=inside))
            client = stack.enter_context(httpx.Client(timeout=120))
            world.reset(client)
            for i, body in enumerate(bodies):
                w = world.before(i, len(bodies), client)
                head = {"content-type": "application/json"}
                r = client.post(lb.url + "/v1/chat/completions", content=body, headers=head)
                failed += r.status_code != 200
                worlds.append({**w, "client_ok": r.status_code == 200})
                progress.advance(task)
        finally:
            for proc in procs:
                _stop(proc)
    records = [json.loads(line) for log in logs if log.exists()
               for line in log.read_text().splitlines() if line]  # fmt: skip
    records.sort(key=lambda r: r.get("ts", 0))
    for rec, w in zip(records, worlds, strict=False):
        rec["world"] = w
        rec["client_failed"] = failed
    return records
