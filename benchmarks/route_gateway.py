"""Benchmark: what the route gateway adds to a request, and 200 concurrent streams.

One ``tierwise lab model-server`` and one ``tierwise route`` gateway in front of it,
both real processes on loopback, and for reference a bare pass-through proxy (a
plain starlette + uvicorn + httpx hop with no prediction, learning, log or metrics,
and none of the gateway's transport work: its own httpcore network backend and one
write per small message, :mod:`tierwise.route.netio`, :mod:`tierwise.route.wire`).
Part 1 alternates the same non-streaming request sent directly, through the bare
proxy and through the gateway (one warm keep-alive client each) and compares
medians. Part 2 opens 200 streaming requests at once through the gateway, several
rounds, and counts errors and the gateway's resident memory after each round.

    python benchmarks/route_gateway.py [--pairs 300] [--concurrent 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
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


def overhead(urls: dict[str, str], pairs: int) -> dict[str, float]:
    """Median time per path (direct, bare proxy, gateway), alternating, warm clients."""
    times: dict[str, list[float]] = {name: [] for name in urls}
    clients = {name: httpx.Client() for name in urls}
    with Progress() as progress:
        task = progress.add_task("alternating rounds", total=pairs)
        for _ in range(20):  # warm every path and the gateway's estimates
            for name, url in urls.items():
                clients[name].post(url + "/v1/chat/completions", json=BODY)
        for _ in range(pairs):
            for name, url in urls.items():
                t0 = time.perf_counter()
                r = clients[name].post(url + "/v1/chat/completions", json=BODY)
                times[name].append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
            progress.advance(task)
    for c in clients.values():
        c.close()
    return {name: statistics.median(t) for name, t in times.items()}


def bare_proxy(port: int, upstream: str) -> None:
    """The reference hop: forward the body, return the answer; nothing else."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=upstream)

    async def forward(request):
        r = await client.post(request.url.path, content=await request.body())
        return Response(r.content, status_code=r.status_code, media_type="application/json")

    async def health(request):
        return Response(b"ok")

    routes = [Route("/v1/chat/completions", forward, methods=["POST"]), Route("/health", health)]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


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
    if sys.argv[1:2] == ["--serve-proxy"]:
        bare_proxy(int(sys.argv[2]), sys.argv[3])
        return
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
    px_port = free_port()
    proxy = f"http://127.0.0.1:{px_port}"
    px = start([sys.executable, __file__, "--serve-proxy", str(px_port), direct], proxy)
    try:
        med = overhead({"direct": direct, "bare proxy": proxy, "gateway": gateway}, args.pairs)
        d, b, g = med["direct"], med["bare proxy"], med["gateway"]
        print(
            f"median direct {d * 1e3:.2f} ms, bare proxy {b * 1e3:.2f} ms, "
            f"gateway {g * 1e3:.2f} ms: the gateway adds {(g - d) * 1e3:.2f} ms "
            f"(goal ≤ 2 ms), a bare proxy hop {(b - d) * 1e3:.2f} ms"
        )
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
        for rec in read_log(tmp / "d.jsonl"):  # why a request failed, from the gateway's log
            if rec.get("outcome") != "ok" or rec.get("stream_error"):
                print("not ok:", rec.get("outcome"), rec.get("stream_error"), rec.get("attempts"))
    finally:
        for proc in (px, gw, server):
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
