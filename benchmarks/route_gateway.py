"""Benchmark: what the route gateway adds to a request, and 200 concurrent streams.

One ``tierwise lab model-server`` and one ``tierwise route`` gateway in front of it,
both real processes on loopback, and for reference a bare pass-through proxy (a
plain starlette + uvicorn + httpx hop with no prediction, learning, log or metrics,
and none of the gateway's transport work: its httptools HTTP/1.1 transport, its own
network backend and one write per small message — :mod:`tierwise.route.h1`,
:mod:`tierwise.route.netio`, :mod:`tierwise.route.coalesce`).
A raw TCP forwarder (uvloop, bytes only, no HTTP) is the floor: what one more
process in the path costs on this machine. Part 1 alternates the same non-streaming
request sent directly, through the raw forwarder, the bare proxy and the gateway (one
warm keep-alive client each) and compares medians, with each hop's CPU per request
(user + system, from /proc) — steadier than latency on a shared machine. With a
baseline, the two gateways swap places every other pair (a gateway's work after its
answer overlaps the next request: the one after it would otherwise always pay). Part 2 opens
200 streaming requests at once through the gateway, several rounds, and counts errors
and the gateway's resident memory after each round.

The gateway runs as it would face the world: client keys on (``gateway.keys_file``,
every request with ``Authorization: Bearer``) and every body checked against OpenAI's
schema. ``--baseline SRC`` adds, alternating with the others, a second gateway run from
another source tree (``git archive <commit> src | tar -x -C DIR``, then ``DIR/src``) —
the before of a change, measured beside the after — with the same key if that tree
has client keys (``tierwise/route/keys.py``), else without.

    python benchmarks/route_gateway.py [--pairs 300] [--concurrent 200] [--rounds 5]
                                       [--baseline DIR/src]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _args import positive_int, run
from rich.progress import Progress

from tierwise.lab.world.model_server import free_port, wait_ready
from tierwise.route.keys import add_key
from tierwise.route.replay import read_log

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]
BODY = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 1}


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(
    args: list[str], url: str | None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``args``; wait until ``url`` answers (or, with None, until the port is bound)."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    if url is not None:
        wait_ready(proc, url)
    else:
        port = int(args[-2])
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
    return proc


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def overhead(
    urls: dict[str, str], pairs: int, pids: dict[str, int], headers: dict[str, dict[str, str]]
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Times per path and CPU per request of each hop's process, alternating."""
    times: dict[str, list[float]] = {name: [] for name in urls}
    cpu = dict.fromkeys(pids, 0.0)
    clients = {name: httpx.Client(headers=headers.get(name, {})) for name in urls}
    with Progress() as progress:
        task = progress.add_task("alternating rounds", total=pairs)
        for _ in range(20):  # warm every path and the gateway's estimates
            for name, url in urls.items():
                clients[name].post(url + "/v1/chat/completions", json=BODY)
        names = list(urls)
        for i in range(pairs):
            # the two gateways swap places every other pair: each one's work after its
            # answer (learning, the log) overlaps the request after it, whoever that is
            swap = i % 2 == 1 and "baseline gateway" in urls
            order = [_swap(n) for n in names] if swap else names
            for name in order:
                url = urls[name]
                c0 = cpu_s(pids[name]) if name in pids else 0.0
                t0 = time.perf_counter()
                r = clients[name].post(url + "/v1/chat/completions", json=BODY)
                times[name].append(time.perf_counter() - t0)
                if name in pids:
                    cpu[name] += cpu_s(pids[name]) - c0
                assert r.status_code == 200, r.text
            progress.advance(task)
    for c in clients.values():
        c.close()
    return times, {name: c / pairs for name, c in cpu.items()}


def _swap(name: str) -> str:
    return {"gateway": "baseline gateway", "baseline gateway": "gateway"}.get(name, name)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def raw_forwarder(port: int, upstream_port: int) -> None:
    """The floor: a uvloop TCP forwarder, one upstream connection per client connection."""
    import uvloop

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(pump(reader, up_w), pump(up_r, writer), return_exceptions=True)

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(serve())


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


async def concurrent_round(gateway: str, n: int, headers: dict[str, str]) -> tuple[int, int]:
    """``n`` streaming requests at once; (ok, failed)."""
    body = {"prompt": "hi", "max_tokens": 20, "stream": True}
    limits = httpx.Limits(max_connections=n + 10)
    async with httpx.AsyncClient(limits=limits, timeout=60, headers=headers) as client:

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
    if sys.argv[1:2] == ["--serve-raw"]:
        raw_forwarder(int(sys.argv[2]), int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=positive_int, default=300)
    ap.add_argument("--concurrent", type=positive_int, default=200)
    ap.add_argument("--rounds", type=positive_int, default=5)
    ap.add_argument("--baseline", type=Path, help="src/ of another tierwise, run beside")
    args = ap.parse_args()
    ms_port, gw_port = free_port(), free_port()
    direct, gateway = f"http://127.0.0.1:{ms_port}", f"http://127.0.0.1:{gw_port}"
    server_args = ["--port", str(ms_port), "--decode-step", "10 ms", "--slots", "1000"]
    server = start(
        [*CLI, "lab", "model-server", *server_args, "--prefill-per-token", "0 s"], direct
    )
    tmp = Path(tempfile.mkdtemp())
    key = add_key(tmp / "keys.toml", "bench", rate=1e6, burst=10**6, concurrency=10**6)
    auth = {"authorization": f"Bearer {key}"}
    site = (
        f'[[site]]\nname = "edge"\ntier = "edge"\nurl = "{direct}"\ndecode_step = "10 ms"\n'
        'uplink = "1 Gbit/s"\ndownlink = "1 Gbit/s"\n'
    )
    (tmp / "route.toml").write_text(
        f'[gateway]\nport = {gw_port}\ndecisions_log = "{tmp}/d.jsonl"\n'
        f'keys_file = "{tmp}/keys.toml"\n{site}'
    )
    gw = start([*CLI, "route", "--config", str(tmp / "route.toml")], gateway)
    base = None
    base_keyed = False
    if args.baseline is not None:  # the other source tree's gateway, keyed if it can be
        base_port = free_port()
        base_keyed = (args.baseline / "tierwise" / "route" / "keys.py").is_file()
        keys = f'keys_file = "{tmp}/keys.toml"\n' if base_keyed else ""
        (tmp / "base.toml").write_text(
            f'[gateway]\nport = {base_port}\ndecisions_log = "{tmp}/base.jsonl"\n{keys}{site}'
        )
        env = {**os.environ, "PYTHONPATH": str(args.baseline.resolve())}
        base_cmd = [*CLI, "route", "--config", str(tmp / "base.toml")]
        base = start(base_cmd, f"http://127.0.0.1:{base_port}", env)
    px_port = free_port()
    proxy = f"http://127.0.0.1:{px_port}"
    px = start([sys.executable, __file__, "--serve-proxy", str(px_port), direct], proxy)
    raw_port = free_port()
    raw = f"http://127.0.0.1:{raw_port}"
    fw = start([sys.executable, __file__, "--serve-raw", str(raw_port), str(ms_port)], None)
    try:
        urls = {"direct": direct, "raw forwarder": raw, "bare proxy": proxy, "gateway": gateway}
        pids = {"raw forwarder": fw.pid, "bare proxy": px.pid, "gateway": gw.pid}
        if base is not None:
            urls["baseline gateway"] = f"http://127.0.0.1:{base_port}"
            pids["baseline gateway"] = base.pid
        headers = {"gateway": auth, **({"baseline gateway": auth} if base_keyed else {})}
        times, cpu = overhead(urls, args.pairs, pids, headers)
        med = {k: statistics.median(t) for k, t in times.items()}
        d, r, b, g = (med[k] for k in list(urls)[:4])
        print(
            f"median direct {d * 1e3:.2f} ms, raw forwarder {r * 1e3:.2f} ms, "
            f"bare proxy {b * 1e3:.2f} ms, gateway {g * 1e3:.2f} ms: "
            f"the gateway (keys and validation on) adds {(g - d) * 1e3:.2f} ms (goal ≤ 1.5 ms), "
            f"a bare proxy hop {(b - d) * 1e3:.2f} ms, a raw forwarder {(r - d) * 1e3:.2f} ms"
        )
        tail = {k: p99(t) for k, t in times.items()}
        print(
            "p99 "
            + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in tail.items())
            + f": the gateway adds {(tail['gateway'] - tail['direct']) * 1e3:.2f} ms (goal ≤ 5 ms)"
        )
        if base is not None:
            bm, bt = med["baseline gateway"], tail["baseline gateway"]
            print(
                f"baseline gateway ({args.baseline}, {'keys' if base_keyed else 'no keys'}): "
                f"adds {(bm - d) * 1e3:.2f} ms "
                f"median, {(bt - tail['direct']) * 1e3:.2f} ms p99; this one "
                f"{(g - bm) * 1e3:+.2f} ms median beside it"
            )
        print("CPU per request: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in cpu.items()))
        logs = {"gateway": tmp / "d.jsonl"}
        if base is not None:
            logs["baseline gateway"] = tmp / "base.jsonl"
        for name, log in logs.items():  # the first are the warm-up's
            recs = [r for r in read_log(log) if "decide_s" in r][20:]
            decide = statistics.median(r["decide_s"] for r in recs)
            inside = statistics.median(r["total_s"] - r["actual_s"] for r in recs)
            print(f"{name}'s own work per request (median of its clocks): predict+choose "
                  f"{decide * 1e3:.3f} ms, all outside the upstream attempt "
                  f"{inside * 1e3:.3f} ms")  # fmt: skip
        print(f"gateway RSS before the concurrent rounds: {rss_mib(gw.pid):.1f} MiB")
        for i in range(args.rounds):
            t0 = time.perf_counter()
            ok, failed = asyncio.run(concurrent_round(gateway, args.concurrent, auth))
            took = time.perf_counter() - t0
            print(f"round {i + 1}: {ok} ok, {failed} failed in {took:.2f} s; "
                  f"gateway RSS {rss_mib(gw.pid):.1f} MiB")  # fmt: skip
        for rec in read_log(tmp / "d.jsonl"):  # why a request failed, from the gateway's log
            if rec.get("outcome") != "ok" or rec.get("stream_error"):
                print("not ok:", rec.get("outcome"), rec.get("stream_error"), rec.get("attempts"))
    finally:
        for proc in (fw, px, gw, server, *([base] if base else [])):
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    run(main)
