"""``tierwise lab route --relay-path``: one cloud site reached directly and through the relay.

::

    tw-<pid>-rp (client)                     emulator                 tw-<pid>-<i>-srv
    gateway + harness ─ 10.77.1.1 ─── 200 ms, 50 Mbit/s, loss ─── cloud model server
    relay client (SOCKS 127.0.0.1:1080)  ══ UDP session ══       relay gateway

The site is configured ``via = ["direct", "relay"]`` (two routes: ``cloud`` and
``cloud+relay``, :mod:`tierwise.route.config`) with the path's true RTT and rate as
priors and **no** loss prior: the router learns the loss from the relay client's own
measurements (``GET /stats`` on its SOCKS port, :mod:`tierwise.route.relaypath`) and
from what its transfers take. Two worlds, each a run of its own: ``lossy`` (random
loss each way, where the relay should win: kernel TCP's recovery against FEC) and
``clean`` (no loss: the two routes cross the same path, so direct should tie).

The oracle is measured as in :mod:`tierwise.lab.world.namespaces`: each route, warmed by
one pass of the probes, timed by pinned requests (``x-tierwise-site``) of three sizes,
three of each (their mean: the expected time, which a median of three misses when one
sample is direct TCP's retransmission timeout, a heavy tail), and fitted
``a + b · bytes``; its pass pins every request to the route that fit says is faster.
The predictive gateway's total over the oracle's, and its failed requests, are the
figures (issue 32's goal: ≤ 1.05×, none failed).
"""

from __future__ import annotations

import contextlib
import functools
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tierwise.lab.bench.procs import stop
from tierwise.lab.world.common import CLI, MBIT, scratch_dir, workload

__all__ = ["RELAY_WORLDS", "relay_path_report", "run_relay_path"]

RTT_S = 0.2
RATE_BYTES_PER_S = 50 * MBIT
DECODE_STEP_S = 0.005
SERVER_PORT = 8000
RELAY_PORT = 7443
SOCKS = "127.0.0.1:1080"
GATEWAY_PORT = 8088
PIN = "x-tierwise-site"
RELAY_WORLDS = {"lossy": 0.14, "clean": 0.0}  # world: random loss each way
ROUTES = ("cloud", "cloud+relay")
BODY_BYTES = (20_000, 200_000)  # image sizes of the mix: kernel TCP at 14 % crawls beyond
# per probe size: the mean, the route's expected time (the median of three hid direct
# TCP's retransmission timeouts at 14 % loss: the router then beat that "oracle" by 25 %)
CALIBRATE_REPEATS = 3
WARM_S = 8.0  # the relay session's first measurements before any request (probes only)


def route_toml(url: str, log: Path, strategy: str) -> str:
    """The gateway's config: one site, both ways, the path's RTT and rate as priors."""
    return (
        f'[decision]\nstrategy = "{strategy}"\ndeadline = "60 s"\n\n'
        f'[gateway]\nport = {GATEWAY_PORT}\ndecisions_log = "{log}"\nprobe_interval = "1 s"\n\n'
        f'[[site]]\nname = "cloud"\ntier = "cloud"\nurl = "{url}"\n'
        f'decode_step = "{DECODE_STEP_S} s"\nprefill_per_token = "0 s"\nrtt = "{RTT_S} s"\n'
        f'uplink = "{RATE_BYTES_PER_S * 8e-6:g} Mbit/s"\n'
        f'downlink = "{RATE_BYTES_PER_S * 8e-6:g} Mbit/s"\n'
        f'via = ["direct", "relay"]\nrelay = "{SOCKS}"\n'
    )


class RelayWorld:
    """The client namespace, the path, the model server and the relay's two ends."""

    def __init__(self, loss: float, seed: int) -> None:
        self.loss, self.seed = loss, seed
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stack = contextlib.ExitStack()
        self.client_ns = ""
        self.url = ""

    def __enter__(self) -> RelayWorld:
        from tierwise.lab.bench import netns
        from tierwise.lab.bench.path import EmulatedPath, PathConfig

        try:
            self.client_ns = self._stack.enter_context(netns.owned("rp"))
            cfg = PathConfig.symmetric(
                rtt_s=RTT_S, rate_bytes_per_s=RATE_BYTES_PER_S, loss=self.loss, seed=self.seed
            )
            path = self._stack.enter_context(EmulatedPath(cfg, index=1, client_ns=self.client_ns))
            self.url = f"http://{path.server_addr}:{SERVER_PORT}"
            work = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="tw-rp-")))
            self._start(path, work)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            _stop(proc)
        self._stack.close()

    def _start(self, path: Any, work: Path) -> None:
        from tierwise.errors import LabError
        from tierwise.lab.bench import netns

        server = [*CLI, "lab", "model-server", "--host", path.server_addr]
        server += ["--port", str(SERVER_PORT), "--decode-step", f"{DECODE_STEP_S} s"]
        server += ["--prefill-per-token", "0 s", "--slots", "64"]
        self._spawn(path.server_ns, server)
        key = str(work / "relay.key")
        made = subprocess.run([*CLI, "relay", "keygen", "--out", key], capture_output=True)
        if made.returncode != 0:
            raise LabError(f"relay keygen failed: {made.stderr.decode().strip()}")
        gateway = f"{path.server_addr}:{RELAY_PORT}"
        self._spawn(path.server_ns, [*CLI, "relay", "gateway", "--listen", gateway, "--allow",
                                     f"{path.server_addr}:{SERVER_PORT}", "--key-file", key,
                                     "--log-level", "warning"])  # fmt: skip
        client = [*CLI, "relay", "client", "--gateway", gateway, "--socks", SOCKS]
        self._spawn(self.client_ns, [*client, "--key-file", key, "--log-level", "warning"])
        with netns.entered(self.client_ns):
            _wait_http(self.procs[0], self.url)

    def _spawn(self, namespace: str, argv: list[str]) -> None:
        from tierwise.lab.bench import netns

        self.procs.append(
            subprocess.Popen(
                netns.exec_argv(namespace, argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    @contextlib.contextmanager
    def gateway(self, tmp: Path, strategy: str, label: str) -> Any:
        """A ``tierwise route`` in the client namespace; its URL and decisions log."""
        from tierwise.lab.bench import netns

        log = tmp / f"{label}.jsonl"
        (tmp / f"{label}.toml").write_text(route_toml(self.url, log, strategy))
        cmd = [*CLI, "route", "--config", str(tmp / f"{label}.toml")]
        proc = subprocess.Popen(
            netns.exec_argv(self.client_ns, cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        url = f"http://127.0.0.1:{GATEWAY_PORT}"
        try:
            with netns.entered(self.client_ns):
                _wait_http(proc, url)
            yield url, log
        finally:
            _stop(proc)


def _wait_http(proc: subprocess.Popen[bytes], url: str) -> None:
    from tierwise.errors import LabError
    from tierwise.lab.world.model_server import wait_ready

    try:
        wait_ready(proc, url, timeout_s=60.0)
    except RuntimeError as exc:
        raise LabError(str(exc)) from None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    stop(proc)


def _post(client: Any, url: str, body: bytes, pin: str | None) -> tuple[bool, float]:
    headers = {"content-type": "application/json", **({PIN: pin} if pin else {})}
    t0 = time.perf_counter()
    try:
        r = client.post(url + "/v1/chat/completions", content=body, headers=headers)
    except Exception:  # a transport error (reset, timeout) is a failed request, counted
        return False, time.perf_counter() - t0
    return r.status_code == 200, time.perf_counter() - t0


def calibrate(world: RelayWorld, tmp: Path, probes: list[bytes]) -> dict[str, tuple]:
    """Each route's measured ``a + b · bytes`` from pinned requests of the probe sizes."""
    import httpx

    from tierwise.errors import LabError
    from tierwise.lab.bench import netns
    from tierwise.lab.world.namespaces import fit_line

    fits = {}
    with world.gateway(tmp, "static", "calibrate") as (url, _):
        with netns.entered(world.client_ns), httpx.Client(timeout=120) as client:
            for route in ROUTES:
                for body in probes:  # warm: the connection open, the relay's rate measured
                    _post(client, url, body, route)
                points = []
                for body in probes:
                    times = []
                    for _ in range(CALIBRATE_REPEATS):
                        ok, seconds = _post(client, url, body, route)
                        if not ok:
                            raise LabError(f"calibrating {route}: the request failed")
                        times.append(seconds)
                    points.append((len(body), statistics.fmean(times)))
                fits[route] = fit_line(points)
    return fits


def oracle_route(fits: dict[str, tuple], nbytes: int) -> str:
    return min(ROUTES, key=lambda r: fits[r][0] + fits[r][1] * nbytes)


def run_pass(
    world: RelayWorld, tmp: Path, label: str, bodies: list[bytes], fits: dict | None, step: Any
) -> dict[str, Any]:
    """The mix through a fresh gateway: predictive, or pinned to the oracle's route."""
    import httpx

    from tierwise.lab.bench import netns

    times, chosen, failed = [], [], 0
    with world.gateway(tmp, "predictive", label) as (url, log):
        with netns.entered(world.client_ns), httpx.Client(timeout=180) as client:
            time.sleep(WARM_S)  # the gateway's probes: the relay session measures the path
            for body in bodies:
                pin = oracle_route(fits, len(body)) if fits else None
                ok, seconds = _post(client, url, body, pin)
                failed += not ok
                times.append(seconds)
                step()
        records = [json.loads(line) for line in log.read_text().splitlines() if line]
    chosen = [r.get("chosen") for r in records]
    return {"times_s": times, "chosen": chosen, "failed": failed, "total_s": sum(times)}


def run_relay_path(
    requests: int, seed: int, worlds: tuple[str, ...] = tuple(RELAY_WORLDS)
) -> dict[str, Any]:
    """Each world: the oracle's fits, the predictive pass and the oracle's pass."""
    from rich.progress import Progress

    mix = workload(requests, seed, image_bytes=BODY_BYTES, image_share=0.5)
    bodies = [json.dumps(b).encode() for b in mix]
    probes = [json.dumps(b[0]).encode() for b in (
        workload(1, 7, image_share=0.0),
        workload(1, 7, image_bytes=(BODY_BYTES[0],) * 2, image_share=1.0),
        workload(1, 7, image_bytes=(BODY_BYTES[1],) * 2, image_share=1.0),
    )]  # fmt: skip
    out: dict[str, Any] = {"requests": requests, "seed": seed, "worlds": {}}
    with Progress(transient=True) as progress, scratch_dir() as tmp:
        for name in worlds:
            task = progress.add_task(f"{name}: predictive, oracle", total=2 * requests)
            step = functools.partial(progress.advance, task)
            with RelayWorld(RELAY_WORLDS[name], seed) as world:
                fits = calibrate(world, tmp, probes)
                predictive = run_pass(world, tmp, f"{name}-predictive", bodies, None, step)
                oracle = run_pass(world, tmp, f"{name}-oracle", bodies, fits, step)
            best = [oracle_route(fits, len(b)) for b in bodies]
            out["worlds"][name] = {
                "loss": RELAY_WORLDS[name],
                "fits": {r: {"a_s": a, "b_s_per_byte": b} for r, (a, b) in fits.items()},
                "predictive": predictive,
                "oracle": oracle,
                "vs_oracle": predictive["total_s"] / oracle["total_s"],
                "agree": sum(c == b for c, b in zip(predictive["chosen"], best, strict=False)),
                "relay_chosen": sum(c == "cloud+relay" for c in predictive["chosen"]),
            }
    return out


def relay_path_report(figures: dict[str, Any]) -> None:
    """One line per world: the predictive total against the measured oracle."""
    n = figures["requests"]
    print(f"{n} requests per pass, RTT {RTT_S * 1e3:g} ms, {RATE_BYTES_PER_S * 8e-6:g} Mbit/s")
    for name, w in figures["worlds"].items():
        fits = ", ".join(
            f"{r} {f['a_s'] * 1e3:.0f} ms + {f['b_s_per_byte'] * 1e6:.2f} s/MB"
            for r, f in w["fits"].items()
        )
        print(
            f"{name:6s} (loss {w['loss']:.0%} each way): predictive "
            f"{w['predictive']['total_s']:.2f} s = {w['vs_oracle']:.3f}× the oracle's "
            f"{w['oracle']['total_s']:.2f} s; relay "
            f"chosen {w['relay_chosen']}/{n}, as the oracle {w['agree']}/{n}; failed "
            f"{w['predictive']['failed']} (oracle {w['oracle']['failed']}); fits: {fits}"
        )
