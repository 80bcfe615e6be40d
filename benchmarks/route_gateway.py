"""Benchmark: what the route gateway adds to a request, and 200 concurrent streams.

One ``tierwise lab model-server`` and one ``tierwise route`` gateway in front of it,
both real processes on loopback. Part 1 alternates the same non-streaming request
sent directly and through the gateway (one warm keep-alive client each) and compares
medians. Part 2 opens 200 streaming requests at once through the gateway, several
rounds, and counts errors and the gateway's resident memory after each round.

    python benchmarks/route_gateway.py [--pairs 300] [--concurrent 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from rich.progress import Progress

from tierwise.lab.model_server import free_port, wait_ready
from tierwise.route.replay import read_log

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]
BODY = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 1}


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(args: list[str], url: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_ready(proc, url)
    return proc


def overhead(direct: str, gateway: str, pairs: int) -> tuple[float, float]:
    """Median time direct and through the gateway, alternating, warm clients."""
    times: dict[str, list[float]] = {"direct": [], "gateway": []}
    with httpx.Client() as a, httpx.Client() as b, Progress() as progress:
        task = progress.add_task("direct / gateway pairs", total=pairs)
        for _ in range(20):  # warm both paths and the gateway's estimates
            a.post(direct + "/v1/chat/completions", json=BODY)
            b.post(gateway + "/v1/chat/completions", json=BODY)
        for _ in range(pairs):
            for name, client, url in (("direct", a, direct), ("gateway", b, gateway)):
                t0 = time.perf_counter()
                r = client.post(url + "/v1/chat/completions", json=BODY)
                times[name].append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
            progress.advance(task)
    return statistics.median(times["direct"]), statistics.median(times["gateway"])


async def concurrent_round(gateway: str, n: int) -> tuple[int, int]:
    """``n`` streaming requests at once; (ok, failed)."""
    body = {"prompt": "hi", "max_tokens": 20, "stream": True}
    limits = httpx.Limits(max_connections=n + 10)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one() -> bool:
            try:
                async with client.stream("POST", gateway + "/v1/completions", json=body) as r:
                    data = b"".join([c async for c in r.aiter_raw()])
                return r.status_code == 200 and data.endswith(b"data: [DONE]\n\n")
            except httpx.HTTPError:
                return False

        results = await asyncio.gather(*(one() for _ in range(n)))
    return sum(results), n - sum(results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--concurrent", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ms_port, gw_port = free_port(), free_port()
    direct, gateway = f"http://127.0.0.1:{ms_port}", f"http://127.0.0.1:{gw_port}"
    server_args = ["--port", str(ms_port), "--decode-step", "10 ms", "--slots", "1000"]
    server = start(
        [*CLI, "lab", "model-server", *server_args, "--prefill-per-token", "0 s"], direct
    )
    tmp = Path(tempfile.mkdtemp())
    (tmp / "route.toml").write_text(
        f'[gateway]\nport = {gw_port}\ndecisions_log = "{tmp}/d.jsonl"\n'
        f'[[site]]\nname = "edge"\ntier = "edge"\nurl = "{direct}"\ndecode_step = "10 ms"\n'
        'uplink = "1 Gbit/s"\ndownlink = "1 Gbit/s"\n'
    )
    gw = start([*CLI, "route", "--config", str(tmp / "route.toml")], gateway)
    try:
        d, g = overhead(direct, gateway, args.pairs)
        print(f"median direct {d * 1e3:.2f} ms, via gateway {g * 1e3:.2f} ms: "
              f"adds {(g - d) * 1e3:.2f} ms (goal ≤ 2 ms)")  # fmt: skip
        recs = read_log(tmp / "d.jsonl")
        decide = statistics.median(r["decide_s"] for r in recs)
        inside = statistics.median(r["total_s"] - r["actual_s"] for r in recs)
        print(f"gateway's own work per request (median): predict+choose {decide * 1e3:.3f} ms, "
              f"all outside the upstream attempt {inside * 1e3:.3f} ms")  # fmt: skip
        print(f"gateway RSS before the concurrent rounds: {rss_mib(gw.pid):.1f} MiB")
        for i in range(args.rounds):
            t0 = time.perf_counter()
            ok, failed = asyncio.run(concurrent_round(gateway, args.concurrent))
            took = time.perf_counter() - t0
            print(f"round {i + 1}: {ok} ok, {failed} failed in {took:.2f} s; "
                  f"gateway RSS {rss_mib(gw.pid):.1f} MiB")  # fmt: skip
    finally:
        for proc in (gw, server):
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
