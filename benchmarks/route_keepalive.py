"""Benchmark: streams through the gateway while the site closes pooled connections on reuse.

The keep-alive race behind the ``ReadError``s of ``route_gateway.py``'s 200 concurrent
streams on a loaded host, made to happen every time. One ``tierwise lab model-server``
(uvicorn: it closes a connection 5 s after its last answer) and one ``tierwise route``
in front of it, real processes on loopback. Each wave warms the gateway's upstream pool
with ``--streams`` streamed requests, waits until those connections are ``AGE`` seconds
idle, stops the model server (SIGSTOP: its loop is late, as on a loaded host), sends
``--streams`` more through the gateway, and lets the server go on ``--stall`` seconds
later — past its keep-alive, so its due timers close the connections with the new
requests unread in them (a reset). ``--baseline SRC`` runs a second gateway from another
source tree (``git archive <commit> src | tar -x -C DIR``, then ``DIR/src``) side by
side: both send their waves in the same stall.

    python benchmarks/route_keepalive.py [--streams 50] [--ages 3.9,4.9] [--stall 1.3]
                                         [--baseline DIR/src]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
from _args import positive_float, positive_int, run
from rich.progress import Progress

from tierwise.lab.world.model_server import free_port, wait_ready

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]
BODY = {"prompt": "hi", "max_tokens": 20, "stream": True}


def ages(text: str) -> list[float]:
    """Comma-separated idle ages in seconds, each in (0.1, 60]."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of seconds") from None
    if not all(0.1 < v <= 60 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each age lies in (0.1, 60] s")
    return values


async def one(client: httpx.AsyncClient, url: str) -> str:
    """One streamed request: "ok", or what the client got instead."""
    try:
        async with client.stream("POST", url + "/v1/completions", json=BODY) as r:
            data = b"".join([c async for c in r.aiter_raw()])
    except httpx.HTTPError as exc:
        return type(exc).__name__
    if r.status_code == 200 and data.endswith(b"data: [DONE]\n\n"):
        return "ok"
    why = re.search(rb"connection error \((\w+)\)", data)  # the gateway's attempt outcome
    return f"{r.status_code} ({why.group(1).decode()} upstream)" if why else str(r.status_code)


async def waves(server_pid: int, gateways: dict[str, str], args) -> dict:
    """Per (gateway, age): a count of outcomes."""
    out: dict[tuple[str, float], collections.Counter] = {}
    limits = httpx.Limits(max_connections=4 * args.streams)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        def burst() -> dict[str, list[asyncio.Future]]:
            return {
                name: [asyncio.ensure_future(one(client, url)) for _ in range(args.streams)]
                for name, url in gateways.items()
            }

        with Progress() as progress:
            task = progress.add_task("stalled waves", total=len(args.ages))
            for age in args.ages:
                for futures in burst().values():  # warm each gateway's upstream pool
                    await asyncio.gather(*futures)
                await asyncio.sleep(age - 0.1)
                os.kill(server_pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(0.05)
                    sent = burst()
                    await asyncio.sleep(args.stall)
                finally:
                    os.kill(server_pid, signal.SIGCONT)
                for name, futures in sent.items():
                    out[name, age] = collections.Counter(await asyncio.gather(*futures))
                progress.advance(task)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=positive_int, default=50)
    ap.add_argument("--ages", type=ages, default=[3.9, 4.9], help="idle seconds, e.g. 3.9,4.9")
    ap.add_argument("--stall", type=positive_float, default=1.3, help="seconds stopped")
    ap.add_argument("--baseline", type=Path, help="src/ of another tierwise, run beside")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / "tierwise" / "__init__.py").is_file():
        ap.error(f"--baseline: {args.baseline} is not a src/ directory holding tierwise/")
    ms_port = free_port()
    direct = f"http://127.0.0.1:{ms_port}"
    server_args = ["--port", str(ms_port), "--decode-step", "10 ms", "--slots", "1000"]
    procs: list[subprocess.Popen[bytes]] = []
    tmp = Path(tempfile.mkdtemp())

    def start(args_: list[str], url: str, env: dict[str, str] | None = None) -> None:
        proc = subprocess.Popen(args_, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        procs.append(proc)
        wait_ready(proc, url)

    try:
        start([*CLI, "lab", "model-server", *server_args, "--prefill-per-token", "0 s"], direct)
        trees = {"this tree": None}
        if args.baseline is not None:
            trees[f"baseline {args.baseline}"] = args.baseline
        gateways = {}
        for i, (name, src) in enumerate(trees.items()):
            port = free_port()
            (tmp / f"route{i}.toml").write_text(
                f'[gateway]\nport = {port}\ndecisions_log = "{tmp}/d{i}.jsonl"\n'
                f'[[site]]\nname = "edge"\ntier = "edge"\nurl = "{direct}"\n'
                'decode_step = "10 ms"\nuplink = "1 Gbit/s"\ndownlink = "1 Gbit/s"\n'
            )
            env = None if src is None else {**os.environ, "PYTHONPATH": str(src.resolve())}
            url = f"http://127.0.0.1:{port}"
            start([*CLI, "route", "--config", str(tmp / f"route{i}.toml")], url, env)
            gateways[name] = url
        results = asyncio.run(waves(procs[0].pid, gateways, args))
        for (name, age), counts in results.items():
            ok = counts.pop("ok", 0)
            rest = ", ".join(f"{n} × {what}" for what, n in counts.most_common()) or "none failed"
            print(
                f"{name}: reused at {age:g} s idle, site stalled {args.stall:g} s: "
                f"{ok}/{args.streams} ok; {rest}"
            )
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    run(main)
