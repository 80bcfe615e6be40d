"""The route world on loopback: predictive routing against static, lowest-latency, an oracle.

``tierwise lab route --loopback`` (no root; in network namespaces by default, see
:mod:`tierwise.lab.world.namespaces`): three ``tierwise lab model-server``
processes on loopback stand in for a device, an edge and a cloud site; each waits
out its path (``--rtt``, ``--uplink``) before serving, outside ``Server-Timing``, so
the gateway sees those as network. One recorded mix — text prompts and image
uploads — is sent one request at a time through ``tierwise route`` under each
strategy (a fresh gateway each), with the same world changes at the same request
numbers: cloud uplink 80 → 3 Mbit/s, then the edge down for a stretch, then the
device's decode 3× slower. On loopback the oracle is computed (RTT + bytes / uplink
+ tokens × step; the servers are deterministic) plus the median loopback overhead
measured in the predictive run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tierwise.lab.world.common import CLI, MBIT, OUT_TOKENS, route_toml, scratch_dir, workload
from tierwise.lab.world.model_server import free_port, wait_ready

__all__ = ["SITES", "follow", "report", "run_world", "true_time_s", "world"]

SITES = {
    "device": ("device", 0.0, 0.0, 0.030),
    "edge": ("edge", 0.010, 80 * MBIT, 0.015),
    "cloud": ("cloud", 0.060, 80 * MBIT, 0.005),
}


def world(i: int, n: int) -> dict[str, dict]:
    """The servers' behaviour before request ``i`` (changes at fixed shares of the run)."""
    w = {
        name: {"uplink_bytes_per_s": up, "down": False, "slowdown": 1.0}
        for name, (_, _, up, _) in SITES.items()
    }
    if i >= n * 0.25:
        w["cloud"]["uplink_bytes_per_s"] = 3 * MBIT
    if n * 0.45 <= i < n * 0.6:
        w["edge"]["down"] = True
    if i >= n * 0.7:
        w["device"]["slowdown"] = 3.0
    return w


def true_time_s(name: str, w: dict, body_bytes: int) -> float:
    """What the site takes for a request in world ``w`` (inf if down)."""
    _, rtt, _, step = SITES[name]
    if w[name]["down"]:
        return float("inf")
    up = w[name]["uplink_bytes_per_s"]
    return rtt + (body_bytes / up if up else 0.0) + OUT_TOKENS * step * w[name]["slowdown"]


def run_strategy(strategy: str, urls, bodies, tmp: Path, progress) -> list[dict]:
    """Send the mix through a fresh gateway with ``strategy``; the decisions log's records."""
    import httpx

    port, log = free_port(), tmp / f"{strategy}.jsonl"
    (tmp / f"{strategy}.toml").write_text(route_toml(SITES, urls, port, log, strategy))
    gw = subprocess.Popen(
        [*CLI, "route", "--config", str(tmp / f"{strategy}.toml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    gateway = f"http://127.0.0.1:{port}"
    failed = 0
    task = progress.add_task(strategy, total=len(bodies))
    try:
        wait_ready(gw, gateway)
        with httpx.Client(timeout=60) as client:
            for i, body in enumerate(bodies):
                for name, change in world(i, len(bodies)).items():
                    client.post(urls[name] + "/admin/behaviour", json=change)
                r = client.post(gateway + "/v1/chat/completions", content=body)
                failed += r.status_code != 200
                progress.advance(task)
    finally:
        gw.terminate()
        gw.wait(10)
    records = [json.loads(line) for line in log.read_text().splitlines() if line]
    for rec in records:
        rec["client_failed"] = failed
    return records


def start_sites() -> tuple[list[subprocess.Popen[bytes]], dict[str, str]]:
    procs, urls = [], {}
    for name, (_, rtt, up, step) in SITES.items():
        port = free_port()
        urls[name] = f"http://127.0.0.1:{port}"
        extra = ["--uplink", f"{up} B/s"] if up else []
        cmd = [*CLI, "lab", "model-server", "--port", str(port), "--decode-step", f"{step} s"]
        cmd += ["--prefill-per-token", "0 s", "--rtt", f"{rtt} s", *extra]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        wait_ready(procs[-1], urls[name])
    return procs, urls


def run_world(requests: int, seed: int, strategies: list[str]) -> tuple[dict, list[bytes]]:
    """Run the mix under each strategy; the decisions-log records per strategy, and bodies."""
    from rich.progress import Progress

    bodies = [json.dumps(b).encode() for b in workload(requests, seed)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with scratch_dir() as tmp:
            procs, urls = start_sites()
            with Progress(transient=True) as progress:
                runs = {s: run_strategy(s, urls, bodies, tmp, progress) for s in strategies}
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    return runs, bodies


def report(runs: dict[str, list[dict]], bodies: list[bytes]) -> dict[str, dict]:
    """Print totals against the oracle, agreement, failures, prediction error, follow;
    return them per strategy (what ``--json`` writes)."""
    import statistics

    n = len(bodies)
    best = [
        min(SITES, key=lambda s: true_time_s(s, world(i, n), len(b))) for i, b in enumerate(bodies)
    ]
    pred = runs.get("predictive", [])
    overhead = (
        statistics.median(
            r["total_s"] - true_time_s(r["chosen"], world(i, n), len(bodies[i]))
            for i, r in enumerate(pred)
            if r.get("chosen")
        )
        if pred
        else 0.0
    )
    oracle = sum(true_time_s(best[i], world(i, n), len(b)) for i, b in enumerate(bodies))
    oracle += overhead * n
    print(f"{n} requests; oracle total {oracle:.2f} s (incl. {overhead * 1e3:.1f} ms/request)")
    out = {name: _figures(recs, best, oracle, n) for name, recs in runs.items()}
    for name, row in out.items():
        print(
            f"{name:15s} total {row['total_s']:7.2f} s ({row['vs_oracle']:5.2f}× oracle), "
            f"first choice = oracle's {row['agree']}/{n}, client failures {row['failed']}, "
            f"median |pred err| after 10: {row['median_error'] * 100:.1f} %"
        )
    for name, row in out.items():
        print(name, "follow:", row["follow"])
    return out


def _figures(recs: list[dict], best: list[str], oracle_s: float, n: int) -> dict:
    """One strategy's figures against the computed oracle."""
    import statistics

    total = sum(r.get("total_s", 0.0) for r in recs)
    errors = [
        abs(r["actual_s"] - r["predicted"][r["chosen"]]["time_s"]) / r["actual_s"]
        for r in recs[10:]
        if r.get("chosen")
    ]
    return {
        "total_s": total,
        "vs_oracle": total / oracle_s,
        "agree": sum(r["order"][:1] == [best[i]] for i, r in enumerate(recs)),
        "failed": recs[0]["client_failed"] if recs else 0,
        "median_error": statistics.median(errors) if errors else float("nan"),
        "follow": follow(recs, best, n),
    }


def follow(recs: list[dict], best: list[str], n: int) -> list[int | None]:
    """After each change: how many requests until the choice matches the oracle's again."""
    out: list[int | None] = []
    for start in (round(n * 0.25), round(n * 0.45), round(n * 0.6), round(n * 0.7)):
        k = next(
            (j for j in range(start, min(n, len(recs))) if recs[j]["order"][:1] == [best[j]]), None
        )
        out.append(None if k is None else k - start + 1)
    return out
