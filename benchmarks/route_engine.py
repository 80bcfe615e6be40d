"""Benchmark: how well ``tierwise route`` predicts a real engine's whole-request time.

llama.cpp's server (``llama_cpp.server``, one request at a time) on a random
512-wide, 8-layer llama model (136 MB, written by :mod:`tierwise.lab.world.engine`;
nothing downloaded) behind a ``tierwise route`` gateway process, both on loopback.
The router starts from priors only (``decode_step = "16 ms"``, ``prefill_per_token =
"0.6 ms"``, ``slots = 1``) and learns from the requests it forwards. A seeded mixed
workload: bursts of 1–8 concurrent chat requests, prompts of 16–2,000 tokens and
``max_tokens`` of 1–256 (both log-uniform), half of them streamed. Each request's
prediction is the gateway's ``x-tierwise-predicted-s`` header; its actual time is the
client's, from sending to the last byte. One request straight to the engine first
pages its weights in (the first answer of a fresh process is seconds slower).
Reported: the median and 90th percentile of the absolute relative error over all
requests and after the first 20, beside an EWMA of past latency (α = 0.3, the common
router's estimate) as a peer.
Goal: median ≤ 10 % and p90 ≤ 25 % after 20 requests. Also printed: the CPU that
other processes took during the run (cores' worth, from /proc/stat less this
benchmark's, the engine's and the gateway's own), the host noise the figures carry.
With ``--per-burst``: each burst's factor (the median of its requests' actual over
predicted time) beside the cores other processes took in the 2 s before it started and
while it ran, and their correlations over the run — whether the host's slowdowns could
have been seen coming (what was known before a burst) or only while it ran.
One engine thread by default: llama.cpp's threads wait for each other by spinning, and
two on a 2-core machine that others share ran 3× (first token) to 25× (per token)
slower than one in the same minutes (docs/validation.md).

    python benchmarks/route_engine.py [--requests 80] [--seed 1] [--threads 1] [--whole-as-stream]
                                      [--log FILE] [--per-burst]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _args import positive_int, run

from tierwise.lab.world.engine import ENGINE_SIZES, llama_server, write_tiny_gguf
from tierwise.lab.world.model_server import free_port, wait_ready

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]
WORDS = "the of and to in is was for on that with as by at from his it an were are which".split()
CHARS_PER_TOKEN = 1.57  # this vocabulary's text: characters per engine token (measured)


def prompt(rng: random.Random, tokens: int) -> str:
    """Text of about ``tokens`` engine tokens."""
    out: list[str] = []
    size = 0
    while size < tokens * CHARS_PER_TOKEN:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def workload(seed: int, n: int) -> list[list[dict]]:
    """Bursts of concurrent requests: each a body, seeded."""
    rng = random.Random(seed)
    bursts: list[list[dict]] = []
    total = 0
    while total < n:
        size = min(rng.randint(1, 8), n - total)
        burst = []
        for _ in range(size):
            tokens = round(16 * (2000 / 16) ** rng.random())
            body = {
                "model": "tiny",
                "messages": [{"role": "user", "content": prompt(rng, tokens)}],
                "max_tokens": round(256 ** rng.random()),
                "stream": rng.random() < 0.5,
            }
            burst.append(body)
        bursts.append(burst)
        total += size
    return bursts


async def one(client: httpx.AsyncClient, body: dict, delay_s: float) -> tuple[float, float]:
    """Send ``body`` after ``delay_s``; its predicted and actual whole time."""
    await asyncio.sleep(delay_s)
    t0 = time.perf_counter()
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        async for _ in resp.aiter_raw():
            pass
    actual = time.perf_counter() - t0
    assert resp.status_code == 200, resp.status_code
    return float(resp.headers["x-tierwise-predicted-s"]), actual


async def drive(
    gateway: str,
    bursts: list[list[dict]],
    spans: list[tuple[float, float]] | None = None,
) -> list[tuple[float, float]]:
    """Each burst's requests at once (a few ms apart, in order), one burst after another;
    each burst's start and end (``time.monotonic``) appended to ``spans``."""
    out: list[tuple[float, float]] = []
    async with httpx.AsyncClient(base_url=gateway, timeout=600) as client:
        for i, burst in enumerate(bursts):
            start = time.monotonic()
            got = await asyncio.gather(*(one(client, b, 0.005 * j) for j, b in enumerate(burst)))
            if spans is not None:
                spans.append((start, time.monotonic()))
            out += got
            print(f"burst {i + 1}/{len(bursts)}: {len(burst)} requests, "
                  f"{sum(a for _, a in got):.1f} s in all", file=sys.stderr)  # fmt: skip
    return out


def errors(pairs: list[tuple[float, float]]) -> list[float]:
    return [abs(p - a) / a for p, a in pairs]


def ewma_peer(
    pairs: list[tuple[float, float]], bursts: list[list[dict]]
) -> list[tuple[float, float]]:
    """The EWMA of latency known when each request was sent (the bursts before it)."""
    out, level, at = [], None, 0
    for burst in bursts:
        done = pairs[at : at + len(burst)]
        for _, actual in done:
            out.append((level if level is not None else actual, actual))
        for _, actual in done:
            level = actual if level is None else level + 0.3 * (actual - level)
        at += len(burst)
    return out[1:]  # the very first has no past


def _cpu_ticks(pids: list[int]) -> tuple[int, int, int] | None:
    """The host's busy and total clock ticks (all cores) and those ``pids`` used: what
    everything else on the machine took during a run is the difference of two reads."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        own = 0
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            own += int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, ValueError, IndexError):
        return None
    return sum(v) - v[3] - v[4], sum(v), own


def others_cores(before: tuple[int, int, int] | None, after: tuple[int, int, int] | None) -> str:
    """Cores' worth of CPU that other processes used between two reads (host noise)."""
    if before is None or after is None or after[1] <= before[1]:
        return "unknown"
    busy, total, own = (a - b for a, b in zip(after, before, strict=True))
    return f"{max(busy - own, 0) / total * (os.cpu_count() or 1):.2f} of {os.cpu_count()}"


class CpuSampler(threading.Thread):
    """Reads the host's and ``pids``' CPU ticks every ``every_s`` (monotonic time)."""

    def __init__(self, pids: list[int], every_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pids, self.every_s = pids, every_s
        self.samples: list[tuple[float, tuple[int, int, int]]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            if (ticks := _cpu_ticks(self.pids)) is not None:
                self.samples.append((time.monotonic(), ticks))
            self.stopped.wait(self.every_s)

    def others(self, t0: float, t1: float) -> float:
        """Cores' worth other processes took between ``t0`` and ``t1`` (nearest reads)."""
        inside = [s for t, s in self.samples if t0 <= t <= t1]
        if len(inside) < 2:
            return math.nan
        (busy0, total0, own0), (busy1, total1, own1) = inside[0], inside[-1]
        share = max((busy1 - busy0) - (own1 - own0), 0) / max(total1 - total0, 1)
        return share * (os.cpu_count() or 1)


def per_burst(
    pairs: list[tuple[float, float]], bursts: list[list[dict]],
    spans: list[tuple[float, float]], cpu: CpuSampler,
) -> None:  # fmt: skip
    """Each burst's factor beside the others' CPU before and during it, and correlations."""
    rows, at = [], 0
    for burst, (start, end) in zip(bursts, spans, strict=True):
        logs = [math.log(a / p) for p, a in pairs[at : at + len(burst)]]
        at += len(burst)
        rows.append((math.exp(statistics.median(logs)), cpu.others(start - 2.0, start),
                     cpu.others(start, end), len(burst)))  # fmt: skip
    print("burst: factor (actual / predicted, median), others' cores 2 s before, during")
    for i, (factor, before, during, size) in enumerate(rows):
        print(f"  {i + 1:2d} ({size} req): {factor:5.2f}  {before:4.2f}  {during:4.2f}")
    ok = [r for r in rows[2:] if not math.isnan(r[1]) and not math.isnan(r[2])]
    if len(ok) > 3:
        logf = [math.log(r[0]) for r in ok]
        print(f"correlation of log factor with others' cores (bursts 3 on): before "
              f"{statistics.correlation(logf, [r[1] for r in ok]):+.2f}, during "
              f"{statistics.correlation(logf, [r[2] for r in ok]):+.2f}")  # fmt: skip


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)]


def line(name: str, errs: list[float]) -> str:
    return f"{name}: median {statistics.median(errs):.1%}, p90 {pct(errs, 0.9):.1%} (n={len(errs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=positive_int, default=80)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--threads", type=positive_int, default=1,
        help="the engine's threads (more than the cores it has to itself: see docs/validation.md)",
    )  # fmt: skip
    ap.add_argument(
        "--whole-as-stream", action="store_true",
        help="the site's whole_as_stream: whole answers asked of the engine as streams",
    )  # fmt: skip
    ap.add_argument("--log", type=Path, help="keep the gateway's decisions log here")
    ap.add_argument(
        "--per-burst", action="store_true",
        help="each burst's factor beside the CPU others took before and during it",
    )  # fmt: skip
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    model = write_tiny_gguf(tmp / "small.gguf", ENGINE_SIZES["small"], seed=0)
    bursts = workload(args.seed, args.requests)
    log = args.log or tmp / "d.jsonl"
    size = ENGINE_SIZES["small"]
    with llama_server(model, threads=args.threads, context=size.context) as (
        engine,
        proc,
    ):
        gw_port = free_port()
        gateway = f"http://127.0.0.1:{gw_port}"
        (tmp / "route.toml").write_text(
            f'[gateway]\nport = {gw_port}\ndecisions_log = "{log}"\ntimeout = "1 h"\n'
            f'[[site]]\nname = "engine"\ntier = "edge"\nurl = "{engine}"\n'
            'decode_step = "16 ms"\nprefill_per_token = "0.6 ms"\nslots = 1\n'
            'uplink = "1 Gbit/s"\ndownlink = "1 Gbit/s"\nrtt = "1 ms"\n'
            f"whole_as_stream = {str(args.whole_as_stream).lower()}\n"
        )
        gw = subprocess.Popen(
            [*CLI, "route", "--config", str(tmp / "route.toml")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_ready(gw, gateway)
            warm = workload(args.seed + 1000, 1)[0][0] | {
                "stream": False,
                "max_tokens": 8,
            }
            httpx.post(engine + "/v1/chat/completions", json=warm, timeout=600)  # weights paged in
            pids = [os.getpid(), proc.pid, gw.pid]
            ticks = _cpu_ticks(pids)
            cpu, spans = CpuSampler(pids), []
            cpu.start()
            t0 = time.perf_counter()
            pairs = asyncio.run(drive(gateway, bursts, spans))
            took = time.perf_counter() - t0
            others = others_cores(ticks, _cpu_ticks(pids))
            cpu.stopped.set()
        finally:
            gw.terminate()
            gw.wait(10)
    peer = ewma_peer(pairs, bursts)
    print(f"{len(pairs)} requests in {len(bursts)} bursts, {took:.0f} s, seed {args.seed}, "
          f"engine threads {args.threads}; other processes used {others} cores, load "
          f"average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(line("router, all", errors(pairs)))
    print(line("router, after 20", errors(pairs[20:])))
    print(line("EWMA of latency, all", errors(peer)))
    print(line("EWMA of latency, after 20", errors(peer[19:])))
    if args.per_burst:
        per_burst(pairs, bursts, spans, cpu)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    run(main)
