"""``tierwise lab route``: predictive routing against static, lowest-latency and an oracle.

By default in network namespaces (root): a client and three model servers behind
emulated paths, kernel TCP, the world changed live — see :mod:`tierwise.lab.route_netns`.
With ``--loopback`` (no root) as before: three ``tierwise lab model-server``
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

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from tierwise.errors import LabError, ScenarioError
from tierwise.lab.model_server import free_port, wait_ready
from tierwise.outfile import staged, write_text

__all__ = ["lab_route_command", "run_world"]

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]
MBIT = 1e6 / 8
# name: tier, rtt s, uplink bytes/s, decode step s
SITES = {
    "device": ("device", 0.0, 0.0, 0.030),
    "edge": ("edge", 0.010, 80 * MBIT, 0.015),
    "cloud": ("cloud", 0.060, 80 * MBIT, 0.005),
}
OUT_TOKENS = 30


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


def workload(
    n: int,
    seed: int,
    image_bytes: tuple[int, int] = (250_000, 1_000_000),
    image_share: float = 0.3,
) -> list[dict]:
    """A recorded mix: short text prompts, and a share with an image (base64: 4/3 the bytes)."""
    import base64
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        content: list[dict] = [{"type": "text", "text": "describe " * rng.randint(5, 50)}]
        if rng.random() < image_share:
            raw = rng.randbytes(rng.randint(*image_bytes))
            url = "data:image/png;base64," + base64.b64encode(raw).decode()
            content.append({"type": "image_url", "image_url": {"url": url}})
        out.append({"messages": [{"role": "user", "content": content}], "max_tokens": OUT_TOKENS})
    return out


def true_time_s(name: str, w: dict, body_bytes: int) -> float:
    """What the site takes for a request in world ``w`` (inf if down)."""
    _, rtt, _, step = SITES[name]
    if w[name]["down"]:
        return float("inf")
    up = w[name]["uplink_bytes_per_s"]
    return rtt + (body_bytes / up if up else 0.0) + OUT_TOKENS * step * w[name]["slowdown"]


def route_toml(
    sites: dict[str, tuple], urls: dict[str, str], port: int, log: Path, strategy: str
) -> str:
    """The gateway's ``route.toml``: the sites' true values as priors, and the strategy."""
    lines = [
        f'[decision]\nstrategy = "{strategy}"\ndeadline = "30 s"\n',
        f'[gateway]\nport = {port}\ndecisions_log = "{log}"\nprobe_interval = "1 s"\n',
    ]
    for name, (tier, rtt, up, step) in sites.items():
        lines.append(
            f'[[site]]\nname = "{name}"\ntier = "{tier}"\nurl = "{urls[name]}"\n'
            f'decode_step = "{step} s"\nprefill_per_token = "0 s"\nrtt = "{rtt} s"\n'
            + (f'uplink = "{up * 8 / 1e6} Mbit/s"\ndownlink = "1 Gbit/s"\n' if up else "")
        )
    return "\n".join(lines)


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


def _start_sites() -> tuple[list[subprocess.Popen[bytes]], dict[str, str]]:
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
            procs, urls = _start_sites()
            with Progress(transient=True) as progress:
                runs = {s: run_strategy(s, urls, bodies, tmp, progress) for s in strategies}
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    return runs, bodies


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A ``tierwise-lab-route-*`` directory for the gateways' configs and decisions logs,
    removed on every exit — normal, error, Ctrl-C or SIGTERM (which the CLI raises as an
    interrupt). What the user asked to keep (``--json``, ``--plot``) is written elsewhere,
    after the records have been read."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tierwise-lab-route-") as name:
        yield Path(name)


STRATEGIES = ("predictive", "static", "lowest-latency")


def lab_route_command(
    requests: Annotated[
        int, typer.Option("--requests", help="Requests in the mix.", min=20, max=400)
    ] = 40,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the recorded mix.")] = 1,
    strategies: Annotated[
        str, typer.Option("--strategies", help="Comma-separated: " + ",".join(STRATEGIES))
    ] = ",".join(STRATEGIES),
    loopback: Annotated[
        bool,
        typer.Option(
            "--loopback",
            help="No root: sites on loopback with emulated delays in the servers, "
            "not kernel TCP over emulated paths in namespaces.",
        ),
    ] = False,
    plot_to: Annotated[
        Path | None, typer.Option("--plot", help="Write PNG and SVG here (path without suffix).")
    ] = None,
    json_to: Annotated[
        Path | None, typer.Option("--json", help="Write the per-strategy figures here.")
    ] = None,
) -> None:
    """Compare routing strategies through world changes: a client and three model servers
    in network namespaces behind emulated paths (root), or on loopback (``--loopback``)."""
    chosen = [s.strip() for s in strategies.split(",") if s.strip()]
    for s in chosen:
        if s not in STRATEGIES:
            raise ScenarioError(
                f"unknown strategy {s!r}; known: {', '.join(STRATEGIES)}", source="--strategies"
            )
    if json_to is not None and not _dir_exists(json_to):
        raise ScenarioError("no such directory for the figures", source=f"--json {json_to}")
    if loopback:
        runs, bodies = run_world(requests, seed, chosen)
        figures = report(runs, bodies)
        if json_to is not None:
            write_text(json_to, json.dumps(figures, indent=1) + "\n")
        if plot_to is not None:
            plot(runs, bodies, plot_to)
        return
    from tierwise.lab.bench import netns
    from tierwise.lab.route_netns import ns_plot, ns_report, run_ns_world

    if (reason := netns.lab_unavailable_reason()) is not None:
        raise LabError(f"{reason} (or run on loopback: --loopback)")
    runs, bodies, fits = run_ns_world(requests, seed, chosen)
    figures = ns_report(runs, bodies, fits)
    if json_to is not None:
        write_text(json_to, json.dumps(figures, indent=1) + "\n")
    if plot_to is not None:
        ns_plot(runs, plot_to)


def _dir_exists(file: Path) -> bool:
    """Whether ``file``'s directory exists (checked before a run of minutes, not after)."""
    try:
        return file.resolve().parent.is_dir()
    except (OSError, ValueError):
        return False


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


def plot(runs: dict[str, list[dict]], bodies: list[bytes], stem: Path) -> None:
    """Per-request time of each strategy and the oracle, the world changes shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(bodies)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    spans = [
        (0.25, 1.0, "cloud uplink 3 Mbit/s", 0.06),
        (0.45, 0.6, "edge down", 0.12),
        (0.7, 1.0, "device 3× slower", 0.06),
    ]
    for lo, hi, label, alpha in spans:
        ax.axvspan(n * lo, n * hi, alpha=alpha, color="grey", lw=0)
        ax.text(n * lo + 0.5, 0.98, label, fontsize=7, va="top", transform=ax.get_xaxis_transform())
    oracle = [min(true_time_s(s, world(i, n), len(b)) for s in SITES) for i, b in enumerate(bodies)]
    ax.plot(oracle, "k:", lw=1, label="oracle (model time, no overhead)")
    for name, recs in runs.items():
        ax.plot([r.get("total_s", float("nan")) for r in recs], marker=".", lw=0.8, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("request")
    ax.set_ylabel("time seen by the client (s)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, 0.9))
    fig.tight_layout()
    stem.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".png", ".svg"):
        with staged(stem.with_suffix(suffix)) as partial:
            fig.savefig(partial, dpi=120)
    print(f"wrote {stem}.png and .svg")


def follow(recs: list[dict], best: list[str], n: int) -> list[int | None]:
    """After each change: how many requests until the choice matches the oracle's again."""
    out: list[int | None] = []
    for start in (round(n * 0.25), round(n * 0.45), round(n * 0.6), round(n * 0.7)):
        k = next(
            (j for j in range(start, min(n, len(recs))) if recs[j]["order"][:1] == [best[j]]), None
        )
        out.append(None if k is None else k - start + 1)
    return out
