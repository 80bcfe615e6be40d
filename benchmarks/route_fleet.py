"""Benchmark: ``tierwise route`` replicas sharing state through Redis (issue 31's goals).

Every figure is measured against a peer in the same run, with real processes: Debian's
``redis-server`` and ``haproxy``, ``tierwise route`` replicas and ``tierwise lab
model-server`` stand-ins on loopback.

- staleness: from an observation at one replica to its merge at the others (each
  replica's ``tierwise_route_fleet_staleness_seconds``), three replicas behind HAProxy
  (goal: median ≤ 100 ms, p99 ≤ 1 s);
- bench: a site benched by one replica, seen benched by the two others (goal ≤ 1 s);
- redis killed: SIGKILL mid-run, restarted a few seconds later: failed requests (goal 0)
  and the time from Redis returning until every replica is back (goal ≤ 5 s);
- added latency: one gateway with state on beside one without, requests alternating
  (goal: median grows ≤ 0.2 ms);
- the world: ``tierwise lab route --loopback --replicas 3`` (three sharing within 5 % of
  one router, and ≥ 20 % less than three alone);
- merging's cost per observation beside learning alone (no goal; docs/design.md).

    python benchmarks/route_fleet.py --requests 300 --world 80
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import httpx
from _args import positive_int, run

from tierwise.lab.world.common import CLI
from tierwise.lab.world.fleet import haproxy, missing, redis_server
from tierwise.lab.world.model_server import free_port, wait_ready

BODY = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
FAST = ["--decode-step", "1 ms", "--prefill-per-token", "0 s"]


def toml(port: int, log: Path, urls: dict[str, str], bench: str = "5 s") -> str:
    lines = [
        '[decision]\nhysteresis = 0.0\n',
        f'[gateway]\nport = {port}\ndecisions_log = "{log}"\nprobe_interval = "1 s"\n'
        f'bench = "{bench}"\n',
    ]  # fmt: skip
    for i, (name, url) in enumerate(urls.items()):
        lines.append(
            f'[[site]]\nname = "{name}"\ntier = "edge"\nurl = "{url}"\n'
            f'decode_step = "{1 + i} ms"\nrtt = "1 ms"\nuplink = "1 Gbit/s"\n'
            'downlink = "1 Gbit/s"\n'
        )
    return "\n".join(lines)


@contextlib.contextmanager
def stand_ins(n: int) -> Iterator[dict[str, str]]:
    procs, urls = [], {}
    try:
        for i in range(n):
            port = free_port()
            cmd = [*CLI, "lab", "model-server", "--port", str(port), *FAST]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            urls[f"s{i}"] = f"http://127.0.0.1:{port}"
        for p, url in zip(procs, urls.values(), strict=True):
            wait_ready(p, url)
        yield urls
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def gateways(
    n: int, urls: dict[str, str], tmp: Path, state: str | None, tag: str = "r"
) -> Iterator[list[str]]:
    procs, out = [], []
    try:
        for i in range(n):
            port = free_port()
            cfg = tmp / f"{tag}{i}.toml"
            cfg.write_text(toml(port, tmp / f"{tag}{i}.jsonl", urls))
            extra = ["--state", state] if state else []
            procs.append(subprocess.Popen(
                [*CLI, "route", "--config", str(cfg), "--replica", f"{tag}{i}", *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            ))  # fmt: skip
            out.append(f"http://127.0.0.1:{port}")
        for p, url in zip(procs, out, strict=True):
            wait_ready(p, url)
        yield out
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def metric(text: str, name: str, **labels: str) -> float | None:
    """One sample's value from a Prometheus text page."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def histogram_quantiles(pages: list[str], name: str, qs: tuple[float, ...]) -> dict:
    """Quantiles of a histogram summed over several pages (linear within a bucket)."""
    buckets: dict[float, float] = {}
    for text in pages:
        for line in text.splitlines():
            if line.startswith(name + "_bucket{"):
                le = line.split('le="')[1].split('"')[0]
                bound = float("inf") if le == "+Inf" else float(le)
                buckets[bound] = buckets.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    bounds = sorted(buckets)
    total = buckets.get(float("inf"), 0.0)
    out = {"count": total}
    for q in qs:
        target, lo, below = q * total, 0.0, 0.0
        for b in bounds:
            if buckets[b] >= target:
                hi = b if b != float("inf") else lo
                share = (target - below) / max(buckets[b] - below, 1e-12)
                out[q] = lo + share * (hi - lo)
                break
            lo, below = b, buckets[b]
    return out


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def staleness_and_kill(requests: int, tmp: Path, progress) -> dict:
    """Three replicas behind HAProxy, four clients; Redis SIGKILLed at a third of the
    run and restarted at two thirds: staleness quantiles, failures, time back."""
    with contextlib.ExitStack() as stack:
        urls = stack.enter_context(stand_ins(2))
        redis = stack.enter_context(redis_server())
        gws = stack.enter_context(gateways(3, urls, tmp, redis.url))
        lb = stack.enter_context(haproxy([_port(u) for u in gws]))
        failed, done = [0], [0]
        lock = threading.Lock()
        task = progress.add_task("staleness, Redis killed", total=requests)

        def client() -> None:
            with httpx.Client(timeout=30) as c:
                while True:
                    with lock:
                        if done[0] >= requests:
                            return
                        done[0] += 1
                    try:
                        ok = c.post(lb.url + "/v1/chat/completions", content=BODY).status_code
                    except httpx.HTTPError:
                        ok = 0
                    with lock:
                        failed[0] += ok != 200
                    progress.advance(task)

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        while done[0] < requests // 3:
            time.sleep(0.01)
        staleness_pages = [httpx.get(g + "/metrics").text for g in gws]
        redis.kill()
        while done[0] < 2 * requests // 3:
            time.sleep(0.01)
        redis.start()
        t_back = time.monotonic()
        while not all(metric(httpx.get(g + "/metrics").text, "tierwise_route_fleet_up") == 1.0
                      for g in gws):  # fmt: skip
            time.sleep(0.01)
        back_s = time.monotonic() - t_back
        for t in threads:
            t.join()
        pages = [httpx.get(g + "/metrics").text for g in gws]
    q = histogram_quantiles(staleness_pages, "tierwise_route_fleet_staleness_seconds",
                            (0.5, 0.99))  # fmt: skip
    dropped = sum(metric(p, "tierwise_route_fleet_observations_total", what="dropped") or 0
                  for p in pages)  # fmt: skip
    return {"requests": requests, "failed": failed[0], "back_s": back_s,
            "staleness_median_s": q.get(0.5), "staleness_p99_s": q.get(0.99),
            "staleness_samples": q["count"], "dropped": dropped}  # fmt: skip


def bench_spread(tmp: Path) -> dict:
    """A site failing at replica 0 (requests pinned to it) is benched there; how long
    until replicas 1 and 2 show it benched too."""
    with stand_ins(2) as urls, redis_server() as redis, gateways(3, urls, tmp, redis.url) as gws:
        httpx.post(urls["s0"] + "/admin/behaviour", json={"error_rate": 1.0})
        pin = {"x-tierwise-site": "s0"}
        with httpx.Client(timeout=30) as c:
            while metric(c.get(gws[0] + "/metrics").text, "tierwise_route_benched",
                         site="s0") != 1.0:  # fmt: skip
                c.post(gws[0] + "/v1/chat/completions", content=BODY, headers=pin)
            t0 = time.monotonic()
            seen = {}
            while len(seen) < 2 and time.monotonic() - t0 < 5:
                for g in gws[1:]:
                    page = c.get(g + "/metrics").text
                    if g not in seen and metric(page, "tierwise_route_benched", site="s0") == 1.0:
                        seen[g] = time.monotonic() - t0
    return {"seen_by": len(seen), "max_s": max(seen.values(), default=float("inf"))}


def added_latency(requests: int, tmp: Path, progress) -> dict:
    """One gateway with state on beside two without (the second an A/A control: the
    spread between identical gateways), requests rotating among the three."""
    with contextlib.ExitStack() as stack:
        urls = stack.enter_context(stand_ins(1))
        redis = stack.enter_context(redis_server())
        (on,) = stack.enter_context(gateways(1, urls, tmp, redis.url, "on"))
        (off,) = stack.enter_context(gateways(1, urls, tmp, None, "off"))
        (control,) = stack.enter_context(gateways(1, urls, tmp, None, "control"))
        order = [("on", on), ("off", off), ("control", control)]
        times: dict[str, list[float]] = {name: [] for name, _ in order}
        task = progress.add_task("added latency", total=3 * requests)
        with httpx.Client(timeout=30) as c:
            for _, url in order:  # warm
                for _ in range(20):
                    c.post(url + "/v1/chat/completions", content=BODY)
            for i in range(requests):
                for name, url in order[i % 3 :] + order[: i % 3]:
                    t0 = time.perf_counter()
                    c.post(url + "/v1/chat/completions", content=BODY)
                    times[name].append(time.perf_counter() - t0)
                    progress.advance(task)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"median_on_ms": med["on"], "median_off_ms": med["off"],
            "median_control_ms": med["control"], "added_ms": med["on"] - med["off"],
            "control_minus_off_ms": med["control"] - med["off"]}  # fmt: skip


def merge_cost(n: int = 2000) -> dict:
    """Microseconds per observation: learning alone (the peer), merged in order, and
    merged with every second one arriving one late (a rebuild from a checkpoint each);
    the best of five passes over the property test's observation mix."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from tests.route.test_fleet_merge import model, observations

    from tierwise.route.fleet import SiteLog, apply

    obs = observations(n, 1)

    def plain() -> None:
        m = model()
        for o in obs:
            apply(m, o)

    def in_order() -> None:
        log = SiteLog(model())
        for o in obs:
            log.add(o)

    def late() -> None:
        log = SiteLog(model())
        for i in range(0, n - 1, 2):
            log.add(obs[i + 1])
            log.add(obs[i])

    def best_us(f) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return min(times) / n * 1e6

    return {"learn_us": best_us(plain), "merge_in_order_us": best_us(in_order),
            "merge_half_late_us": best_us(late)}  # fmt: skip


def world(requests: int, tmp: Path) -> dict:
    out = tmp / "world.json"
    cmd = [*CLI, "lab", "route", "--loopback", "--replicas", "3", "--requests", str(requests),
           "--json", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text())


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=positive_int, default=300)
    parser.add_argument("--world", type=positive_int, default=80, help="requests in the world")
    parser.add_argument("--skip-world", action="store_true")
    args = parser.parse_args()
    if (reason := missing("redis-server", "haproxy")) is not None:
        sys.exit(f"error: {reason}")
    from rich.progress import Progress

    out: dict = {"load_before": load(), "merge": merge_cost()}
    with tempfile.TemporaryDirectory(prefix="tierwise-fleet-bench-") as name:
        tmp = Path(name)
        with Progress(transient=True) as progress:
            out["staleness_and_kill"] = staleness_and_kill(args.requests, tmp, progress)
            out["bench"] = bench_spread(tmp)
            out["added_latency"] = added_latency(args.requests, tmp, progress)
        if not args.skip_world:
            out["world"] = world(args.world, tmp)
    out["load_after"] = load()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    run(main)
