"""Benchmark: the CPU a relay sender's stream buffer costs per GB, against another tree.

A :class:`~tierwise.proto.relay.streams.SendStream` fed as the gateway's pipe feeds it
(64 kB writes), every new byte framed into 1,352-byte frames, and the frames
acknowledged in order ``--window`` bytes behind the writes (the unacknowledged window
of a bulk transfer: about rate × RTT). Each window size runs in a worker process for
this tree and, with ``--base-src DIR``, for that tree (``PYTHONPATH=DIR``), alternated
``--repeats`` times; the table gives the median CPU seconds per GB.

    python benchmarks/relay_sendbuf.py [--mb 100] [--windows 1,5,16] [--repeats 3] [--base-src DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from _args import positive_float, positive_int, run

WRITE_BYTES, FRAME_BYTES = 64 * 1024, 1352


def worker(window: int, total: int) -> float:
    """CPU seconds to write, frame and acknowledge ``total`` bytes through ``window``."""
    from tierwise.proto.relay.streams import SendStream

    s, block, acked = SendStream(0, 5, 1 << 62), bytes(WRITE_BYTES), 0
    cpu = time.process_time()
    while s.end < total:
        s.write(block, False)
        while s.has_new():
            s.next_frame(FRAME_BYTES, 1 << 62)
        while acked + FRAME_BYTES <= s.end - window:
            s.on_acked(acked, acked + FRAME_BYTES, False)
            acked += FRAME_BYTES
    return time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=positive_float, default=100)
    parser.add_argument("--windows", default="1,5,16", help="MB in flight, comma-separated")
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--base-src", help="a source tree (its src/) to run side by side")
    parser.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(worker(*args.worker))
        return
    try:
        windows = [int(float(w) * 1e6) for w in args.windows.split(",")]
    except ValueError:
        parser.error(f"--windows: expected MB numbers like 1,5,16, got {args.windows!r}")
    total = int(args.mb * 1e6)
    trees = {"this": None, **({"base": args.base_src} if args.base_src else {})}
    cpu: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeats):
        for window in windows:
            for name, src in trees.items():
                env = dict(os.environ, **({"PYTHONPATH": src} if src else {}))
                argv = [sys.executable, __file__, "--worker", str(window), str(total)]
                out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
                cpu.setdefault((name, window), []).append(float(out.stdout))
    load = os.getloadavg()[0]
    print(
        f"{args.mb:g} MB in {WRITE_BYTES // 1024} kB writes, {args.repeats} alternated "
        f"repeat(s), median; load average (1 min) {load:.2f}"
    )
    print("| window | " + " | ".join(f"{n}: CPU s per GB" for n in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for window in windows:
        cells = [statistics.median(cpu[(n, window)]) * 1e9 / total for n in trees]
        print(f"| {window / 1e6:g} MB | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


if __name__ == "__main__":
    run(main)
