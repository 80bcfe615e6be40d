"""Benchmark: streams through the gateway while the site closes pooled connections on reuse.

The keep-alive race behind the ``ReadError``s of ``route_gateway.py``'s 200 concurrent
streams on a loaded host, made to happen every time, for a plain-HTTP site and an HTTPS
one. Two stand-ins — ``tierwise lab model-server`` (uvicorn) and the same app served by
uvicorn over TLS with a test CA's certificate (``trustme``); both close a connection 5 s
after its last answer — and one ``tierwise route`` in front of them (sites ``http`` and
``https``, the latter with the CA as its ``ca_file``), real processes on loopback. Each
wave warms the gateway's upstream pools with ``--streams`` streamed requests pinned to
each site, waits until those connections are ``AGE`` seconds idle, stops both stand-ins
(SIGSTOP: their loops are late, as on a loaded host), sends ``--streams`` more to each
site through the gateway, and lets the stand-ins go on ``--stall`` seconds later — past
their keep-alive, so their due timers close the connections with the new requests
unread in them. ``--baseline SRC`` runs a second gateway from another source tree
(``git archive <commit> src | tar -x -C DIR``, then ``DIR/src``) side by side: both send
their waves in the same stall. An age counts from the client's end of the warming wave;
the gateway released the wave's first connections up to ~0.8 s before (50 streams on a
loaded host), so 3.0 s is the age at which all of them are still in its pool (4 s) and
the stall (2.5 s) carries the stand-ins past their keep-alive. Each line also gives the
gateway's count of resends (``tierwise_route_upstream_resent_total``; a tree without it
shows none).

    python benchmarks/route_keepalive.py [--streams 50] [--ages 3.0,4.9] [--stall 2.5]
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
import time
from pathlib import Path

import httpx
from _args import positive_float, positive_int, run
from rich.progress import Progress

from tierwise.lab.world.model_server import free_port, wait_ready

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]
BODY = {"prompt": "hi", "max_tokens": 20, "stream": True}
SITES = ("http", "https")
TLS_SERVER = """\
import sys, uvicorn
from tierwise.lab.world.model_server import Behaviour, ModelServer
app = ModelServer("qwen3-8b", Behaviour(decode_step_s=0.01, prefill_s_per_token=0.0,
                                        slots=1000)).app
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error",
            ssl_certfile=sys.argv[2])
"""


def ages(text: str) -> list[float]:
    """Comma-separated idle ages in seconds, each in (0.1, 60]."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of seconds") from None
    if not all(0.1 < v <= 60 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each age lies in (0.1, 60] s")
    return values


async def one(client: httpx.AsyncClient, url: str, site: str) -> str:
    """One streamed request pinned to ``site``: "ok", or what the client got instead."""
    pin = {"x-tierwise-site": site}
    try:
        async with client.stream("POST", url + "/v1/completions", json=BODY, headers=pin) as r:
            data = b"".join([c async for c in r.aiter_raw()])
    except httpx.HTTPError as exc:
        return type(exc).__name__
    if r.status_code == 200 and data.endswith(b"data: [DONE]\n\n"):
        return "ok"
    why = re.search(rb"connection error \((\w+)\)", data)  # the gateway's attempt outcome
    return f"{r.status_code} ({why.group(1).decode()} upstream)" if why else str(r.status_code)


async def waves(server_pids: list[int], gateways: dict[str, str], args) -> dict:
    """Per (gateway, site, age): a count of outcomes. The sites take turns (a wave pinned
    to one site at a time, as many streams as the single-site race had)."""
    out: dict[tuple[str, str, float], collections.Counter] = {}
    limits = httpx.Limits(max_connections=4 * args.streams)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        def burst(site: str) -> dict[str, list[asyncio.Future]]:
            return {
                name: [asyncio.ensure_future(one(client, url, site)) for _ in range(args.streams)]
                for name, url in gateways.items()
            }

        def stall(sig: signal.Signals) -> None:
            for pid in server_pids:
                os.kill(pid, sig)

        with Progress() as progress:
            task = progress.add_task("stalled waves", total=len(args.ages) * len(SITES))
            for age in args.ages:
                for site in SITES:
                    for futures in burst(site).values():  # warm each gateway's upstream pool
                        await asyncio.gather(*futures)
                    await asyncio.sleep(age - 0.1)
                    stall(signal.SIGSTOP)
                    try:
                        await asyncio.sleep(0.05)
                        sent = burst(site)
                        await asyncio.sleep(args.stall)
                    finally:
                        stall(signal.SIGCONT)
                    for name, futures in sent.items():
                        out[name, site, age] = collections.Counter(await asyncio.gather(*futures))
                    progress.advance(task)
    return out


def resent(url: str) -> dict[str, float]:
    """The gateway's resends per site, from its ``/metrics`` (empty for a tree without)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    found = re.findall(r'tierwise_route_upstream_resent_total\{site="(\w+)"\} (\S+)', text)
    return {site: float(n) for site, n in found}


def tls_files(tmp: Path) -> tuple[Path, Path]:
    """A test CA's certificate for 127.0.0.1 (with its key) and the CA's own, as PEM files."""
    import trustme

    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(tmp / "server.pem")
    ca.cert_pem.write_to_path(tmp / "ca.pem")
    return tmp / "server.pem", tmp / "ca.pem"


def wait_tls(proc: subprocess.Popen[bytes], url: str, ca: Path) -> None:
    import ssl

    verify = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/v1/models", verify=verify, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url}: the TLS stand-in did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=positive_int, default=50)
    ap.add_argument("--ages", type=ages, default=[3.0, 4.9], help="idle seconds, e.g. 3.0,4.9")
    ap.add_argument("--stall", type=positive_float, default=2.5, help="seconds stopped")
    ap.add_argument("--baseline", type=Path, help="src/ of another tierwise, run beside")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / "tierwise" / "__init__.py").is_file():
        ap.error(f"--baseline: {args.baseline} is not a src/ directory holding tierwise/")
    procs: list[subprocess.Popen[bytes]] = []
    tmp = Path(tempfile.mkdtemp())

    def start(args_: list[str], url: str, env: dict[str, str] | None = None) -> None:
        proc = subprocess.Popen(args_, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        procs.append(proc)
        wait_ready(proc, url)

    try:
        urls = {site: f"{site}://127.0.0.1:{free_port()}" for site in SITES}
        server_args = ["--port", urls["http"].rsplit(":", 1)[1], "--decode-step", "10 ms"]
        start([*CLI, "lab", "model-server", *server_args, "--slots", "1000",
               "--prefill-per-token", "0 s"], urls["http"])  # fmt: skip
        cert, ca = tls_files(tmp)
        tls_port = urls["https"].rsplit(":", 1)[1]
        tls_args = [sys.executable, "-c", TLS_SERVER, tls_port, str(cert)]
        procs.append(subprocess.Popen(tls_args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        wait_tls(procs[-1], urls["https"], ca)
        servers = [proc.pid for proc in procs]
        trees = {"this tree": None}
        if args.baseline is not None:
            trees[f"baseline {args.baseline}"] = args.baseline
        gateways = {}
        for i, (name, src) in enumerate(trees.items()):
            port = free_port()
            sites = "".join(
                f'[[site]]\nname = "{site}"\ntier = "edge"\nurl = "{url}"\n'
                'decode_step = "10 ms"\nuplink = "1 Gbit/s"\ndownlink = "1 Gbit/s"\n'
                + (f'ca_file = "{ca}"\n' if site == "https" else "")
                for site, url in urls.items()
            )
            (tmp / f"route{i}.toml").write_text(
                f'[gateway]\nport = {port}\ndecisions_log = "{tmp}/d{i}.jsonl"\n{sites}'
            )
            env = None if src is None else {**os.environ, "PYTHONPATH": str(src.resolve())}
            url = f"http://127.0.0.1:{port}"
            start([*CLI, "route", "--config", str(tmp / f"route{i}.toml")], url, env)
            gateways[name] = url
        results = asyncio.run(waves(servers, gateways, args))
        for (name, site, age), counts in results.items():
            ok = counts.pop("ok", 0)
            rest = ", ".join(f"{n} × {what}" for what, n in counts.most_common()) or "none failed"
            print(
                f"{name}, {site} site: reused at {age:g} s idle, site stalled {args.stall:g} s: "
                f"{ok}/{args.streams} ok; {rest}"
            )
        for name, url in gateways.items():
            print(f"{name}: resends per site {resent(url) or '(not counted)'}")
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    run(main)
