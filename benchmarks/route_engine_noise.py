"""Host noise on a real engine: the same-shaped request repeated, on 1 and 2 engine threads.

Two llama.cpp servers (``llama_cpp.server``) on the same random 512-wide, 8-layer model
(:mod:`tierwise.lab.world.engine`), one with 1 thread and one with 2, are sent the same
shape of streamed chat request in turn (``--prompt`` tokens of fresh words each time, so
no prefix is cached, and ``--output`` tokens), one request at a time. Per engine:
time to first token and time per token (median, 10th and 90th percentile), and the
error of the best constant predictor in hindsight (every request's whole time
predicted by the median of all: a floor no predictor reaches without knowing the
host's next seconds). Beside each request, the cores' worth of CPU other processes
took meanwhile (/proc/stat less this process's and the engines').

    python benchmarks/route_engine_noise.py [--pairs 30] [--prompt 300] [--output 30]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from _args import positive_int, run
from rich.progress import Progress
from route_engine import _cpu_ticks, prompt

from tierwise.lab.world.engine import ENGINE_SIZES, llama_server, write_tiny_gguf


def one(url: str, body: dict) -> tuple[float, float]:
    """Time to first token and per token (s) of one streamed request."""
    t0 = time.perf_counter()
    first = last = 0.0
    tokens = 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                last = time.perf_counter()
                first = first or last
                tokens += 1
    return first - t0, (last - first) / max(tokens - 1, 1)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=positive_int, default=30, help="requests per engine")
    ap.add_argument("--prompt", type=positive_int, default=300, help="prompt tokens")
    ap.add_argument("--output", type=positive_int, default=30, help="output tokens")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    model = write_tiny_gguf(tmp / "small.gguf", ENGINE_SIZES["small"], seed=0)
    rng = random.Random(5)
    rows: dict[int, list[tuple[float, float, float]]] = {1: [], 2: []}
    context = ENGINE_SIZES["small"].context
    with (
        llama_server(model, threads=1, context=context) as (u1, p1),
        llama_server(model, threads=2, context=context) as (u2, p2),
        Progress() as progress,
    ):
        engines = {1: (u1, p1.pid), 2: (u2, p2.pid)}
        messages = [{"role": "user", "content": prompt(rng, args.prompt)}]
        for url, _ in engines.values():  # weights paged in
            httpx.post(url + "/v1/chat/completions", timeout=600,
                       json={"model": "tiny", "messages": messages, "max_tokens": 2})  # fmt: skip
        task = progress.add_task("same-shape requests", total=2 * args.pairs)
        for i in range(args.pairs):
            for threads in (1, 2) if i % 2 == 0 else (2, 1):
                url, pid = engines[threads]
                body = {
                    "model": "tiny", "stream": True, "max_tokens": args.output,
                    "messages": [{"role": "user", "content": prompt(rng, args.prompt)}],
                }  # fmt: skip
                before = _cpu_ticks([os.getpid(), pid])
                ttft, step = one(url, body)
                after = _cpu_ticks([os.getpid(), pid])
                others = 0.0
                if before and after and after[1] > before[1]:
                    busy, total, own = (a - b for a, b in zip(after, before, strict=True))
                    others = max(busy - own, 0) / total * (os.cpu_count() or 1)
                rows[threads].append((ttft, step, others))
                progress.advance(task)
    for threads, got in rows.items():
        ttft = [r[0] for r in got]
        step = [r[1] * 1e3 for r in got]
        whole = [r[0] + (args.output - 1) * r[1] for r in got]
        mid = statistics.median(whole)
        err = [abs(w / mid - 1) for w in whole]
        others = [r[2] for r in got]
        p10, p90 = pct(step, 0.1), pct(step, 0.9)
        print(
            f"{threads} thread(s): first token median {statistics.median(ttft):.3f} s "
            f"(p10 {pct(ttft, 0.1):.3f}, p90 {pct(ttft, 0.9):.3f}); per token median "
            f"{statistics.median(step):.1f} ms (p10 {p10:.1f}, p90 {p90:.1f}); best "
            f"constant predictor median {statistics.median(err):.0%}, p90 {pct(err, 0.9):.0%}; "
            f"others used {min(others):.2f}-{max(others):.2f} cores"
        )  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    run(main)
