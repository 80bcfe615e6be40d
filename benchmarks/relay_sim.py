"""Benchmark: the relay's RelayConnection over a simulated 200 ms path, against the floor.

The issue's request case (354,640 B up, 1,000 B down; the processing time is
left out because the simulated gateway answers at once) on a warm session, at
0 %, 3.6 % and 14 % random loss in both directions (with the uplink's FEC
overhead), and a bulk transfer on a new session and on a warm one (three
requests first, as a deployed session would have measured the path). The
floor is ``RTT + up/rate + down/rate``. Synthetic time, so the figures do not
depend on the machine's load; the CPU seconds (both ends, one process) do.

    python benchmarks/relay_sim.py [--requests 60] [--bulk-mb 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _args import positive_float, positive_int, run
from rich.progress import Progress

from tierwise.sim.relay import Net, Path, all_done, payload, request_response

RATE_BYTES_PER_S = 333e6 / 8
UP_BYTES, DOWN_BYTES = 354_640, 1000


def requests(loss: float, count: int, progress: Progress) -> tuple[np.ndarray, float]:
    """Completion times of ``count`` sequential requests after 5 warm-up ones, FEC overhead."""
    net = Net(Path(loss=loss), Path(loss=loss), seed=17)
    up, down = payload("up", UP_BYTES), payload("down", DOWN_BYTES)
    net.on_gateway_stream = lambda sid, data: net.gateway.send(sid, down, end_stream=True)
    times = []
    task = progress.add_task(f"requests at {loss:.1%} loss", total=count + 5)
    for _ in range(count + 5):
        sid = net.client.open_stream()
        start = net.now
        net.client.send(sid, up, end_stream=True)
        net.run(start + 60, lambda sid=sid: sid in net.finished["client"])
        assert bytes(net.received["gateway"].pop(sid)) == up
        assert bytes(net.received["client"].pop(sid)) == down
        times.append(net.now - start)
        net.run(net.now + 0.05)
        progress.advance(task)
    stats = net.client.stats
    return np.array(times[5:]), stats.repair_bytes_sent / stats.stream_bytes_sent


def bulk(loss: float, size: int, warm: bool, progress: Progress) -> tuple[float, float]:
    """Goodput (bytes/s) and CPU seconds of one ``size``-byte transfer.

    ``warm``: three requests first, so the session has measured the path (a deployed
    relay's long-lived session); otherwise the transfer starts on a new session.
    """
    net = Net(Path(loss=loss), Path(loss=loss), seed=23)
    data = payload("bulk", size)
    progress.add_task(f"bulk {size / 1e6:.0f} MB at {loss:.1%} loss", total=None)
    net.run(5, lambda: net.client.established)
    if warm:
        expected = request_response(net, [(UP_BYTES, DOWN_BYTES)] * 3)
        net.run(net.now + 30, all_done(net, expected))
        net.on_gateway_stream = None
    sid = net.client.open_stream(priority=5)
    cpu0, start = time.process_time(), net.now
    net.client.send(sid, data, end_stream=True)
    net.run(start + 600, lambda: sid in net.finished["gateway"])
    assert bytes(net.received["gateway"][sid]) == data
    return size / (net.now - start), time.process_time() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=positive_int, default=60)
    parser.add_argument("--bulk-mb", type=positive_float, default=20)
    args = parser.parse_args()
    floor = 0.2 + (UP_BYTES + DOWN_BYTES) / RATE_BYTES_PER_S
    rows, bulk_rows = [], []
    with Progress(transient=True) as progress:
        for loss in (0.0, 0.036, 0.14):
            t, overhead = requests(loss, args.requests, progress)
            rows.append((loss, np.median(t) / floor, np.percentile(t, 99) / floor, overhead))
        for warm in (False, True):
            for loss in (0.0, 0.14):
                size = int(args.bulk_mb * 1e6)
                bulk_rows.append((warm, loss, *bulk(loss, size, warm, progress)))
    print(f"floor {floor * 1e3:.1f} ms (200 ms RTT, 333 Mbit/s)")
    print("| loss | median / floor | p99 / floor | FEC overhead (up) |\n|---|---|---|---|")
    for loss, med, p99, overhead in rows:
        print(f"| {loss:.1%} | {med:.3f} | {p99:.3f} | {overhead:.0%} |")
    print("| bulk | loss | goodput / path rate | CPU s per GB (both ends) |\n|---|---|---|---|")
    for warm, loss, goodput, cpu in bulk_rows:
        gb = args.bulk_mb / 1000
        session = "warm session" if warm else "new session"
        print(f"| {session} | {loss:.1%} | {goodput / RATE_BYTES_PER_S:.2f} | {cpu / gb:.0f} |")


if __name__ == "__main__":
    run(main)
