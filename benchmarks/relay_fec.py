"""Benchmark: the relay's erasure code on its I/O path, zfec against the project's Cauchy code.

One FEC block as the relay builds it (§12.3.3): ``k`` sealed datagrams of up to
1,352-byte symbols, ``r`` repair symbols sized for the loss rate at the 99.9 %
target; encode, then decode after losing ``min(r, loss·k)`` data symbols. Runs
alternate (zfec, cauchy, zfec, ...) and the medians are compared. Both codes are
MDS over GF(2^8), so the choice is speed alone.

    python benchmarks/relay_fec.py [--k 128] [--loss 0.14] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _args import fraction, positive_int, run
from rich.progress import Progress

from tierwise.proto.fec import repair_symbols_needed
from tierwise.proto.relay.fec import CODES, decode_block, encode_block

SYMBOL_BYTES = 1352


def one_block(code: int, k: int, r: int, lost: int, symbols: list[bytes]) -> float:
    """Seconds to encode ``r`` repairs and decode with ``lost`` data symbols missing."""
    start = time.perf_counter()
    repairs = encode_block(code, symbols, r)
    have = {i: s for i, s in enumerate(symbols) if i >= lost}
    have |= {k + i: s for i, s in enumerate(repairs[:lost])}
    out = decode_block(code, k, r, have)
    elapsed = time.perf_counter() - start
    assert out[:lost] == symbols[:lost]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=positive_int, default=128)
    parser.add_argument("--loss", type=fraction, default=0.14)
    parser.add_argument("--repeats", type=positive_int, default=7)
    args = parser.parse_args()
    k = args.k
    r = min(repair_symbols_needed(k, args.loss, 0.999), 256 - k)
    lost = min(r, round(args.loss * k))
    symbols = [os.urandom(SYMBOL_BYTES) for _ in range(k)]
    times: dict[str, list[float]] = {name: [] for name in CODES}
    with Progress(transient=True) as progress:
        task = progress.add_task("blocks", total=args.repeats * len(CODES))
        for _ in range(args.repeats):
            for name, code in CODES.items():
                times[name].append(one_block(code, k, r, lost, symbols))
                progress.advance(task)
    data_mb = k * SYMBOL_BYTES / 1e6
    print(f"block: k={k}, r={r} (loss {args.loss:.1%}, target 99.9 %), {lost} data symbols lost")
    for name, t in times.items():
        med = statistics.median(t)
        print(f"{name:7s} median {med * 1e3:8.2f} ms per block  {data_mb / med:8.1f} MB/s of data")
    ratio = statistics.median(times["cauchy"]) / statistics.median(times["zfec"])
    print(f"zfec is {ratio:.1f}x faster than the Cauchy code")


if __name__ == "__main__":
    run(main)
