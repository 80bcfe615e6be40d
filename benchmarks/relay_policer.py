"""Benchmark: the relay over a policed path, with and without its policer detection.

A token-bucket policer (``tierwise.sim.link.Policer``) on the download of a simulated
path drops what exceeds its rate without queueing first. The gateway sends bulk for
``--seconds``; the figures are the goodput over the policed rate and the share of the
download's datagrams the path dropped, over the whole transfer and after ``--warm``
seconds (the steady state). The peers, in the same run, are the same relay with the
detector switched off (its rounds never judged): the rate control it had before, which
takes the policer's drops for random loss; and the same relay judging settled rounds
only, without the first rounds' per-ACK judgement (``PolicingDetector.early``), as it
was before that judgement: it declared the policer at round 7, after five rounds at
the link's rate. Synthetic time: the figures do not depend on the host's load.

    python benchmarks/relay_policer.py [--seconds 30] [--warm 8] [--seed 1,2]

Cases (``--cases``): police Mbit/s / link Mbit/s / RTT ms / bucket bytes / random loss.
"""

from __future__ import annotations

import argparse

from _args import positive_float, run
from rich.progress import Progress

from tierwise.proto.relay.police import PolicingDetector
from tierwise.sim.relay import Net, OneWayPath, payload

CASES = [
    (20, 100, 100, 96_000, 0.0),
    (20, 100, 30, 96_000, 0.0),
    (5, 100, 200, 96_000, 0.0),
    (20, 100, 100, 300_000, 0.0),
    (20, 100, 100, 96_000, 0.02),
]


MODES = {"detects": "detects", "late": "peer: settled rounds only", "blind": "peer: no detection"}


def bulk(case: tuple, seconds: float, warm: float, seed: int, mode: str) -> dict[str, float]:
    police_mbit, link_mbit, rtt_ms, bucket, loss = case
    police = police_mbit * 1e6 / 8
    rtt = rtt_ms / 1e3
    down = OneWayPath(
        delay_s=rtt / 2,
        rate_bytes_per_s=link_mbit * 1e6 / 8,
        loss=loss,
        police_rate_bytes_per_s=police,
        police_burst_bytes=bucket,
    )
    up = OneWayPath(delay_s=rtt / 2, rate_bytes_per_s=link_mbit * 1e6 / 8, loss=loss)
    net = Net(up, down, seed=seed)
    if mode == "blind":
        net.gateway.rate.police = _Blind()
    elif mode == "late":
        net.gateway.rate.police.early = False
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    net.client.send(sid, b"x", end_stream=True)
    data = payload("bulk", int(police * seconds * 1.5))
    net.on_gateway_stream = lambda s, _: net.gateway.send(s, data, end_stream=True)
    start = net.now
    net.run(start + warm)
    got0, sent0, dropped0 = len(net.received["client"].get(sid, b"")), down.sent, down.dropped
    net.run(start + seconds)
    got = len(net.received["client"].get(sid, b""))
    return {
        "whole": got / seconds / police,
        "whole_loss": down.dropped / down.sent,
        "steady": (got - got0) / (seconds - warm) / police,
        "steady_loss": (down.dropped - dropped0) / max(down.sent - sent0, 1),
    }


class _Blind(PolicingDetector):
    """The detector never judging: the relay's rate control before policer detection."""

    def __init__(self) -> None:
        super().__init__()
        self.early = False

    def _judge(self) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=positive_float, default=30.0)
    ap.add_argument("--warm", type=positive_float, default=8.0)
    ap.add_argument("--seed", default="1", help="comma-separated seeds")
    args = ap.parse_args()
    if args.warm >= args.seconds:
        ap.error("--warm must be shorter than --seconds")
    seeds = [int(s) for s in args.seed.split(",")]
    rows = []
    with Progress(transient=True) as progress:
        total = len(CASES) * len(seeds) * len(MODES)
        task = progress.add_task("policed bulk transfers", total=total)
        for case in CASES:
            for mode in MODES:
                runs = []
                for seed in seeds:
                    runs.append(bulk(case, args.seconds, args.warm, seed, mode))
                    progress.advance(task)
                mean = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
                rows.append((case, mode, mean))
    print(f"bulk {args.seconds:g} s, steady after {args.warm:g} s, seeds {args.seed}")
    head = "| police / link Mbit/s | RTT | bucket | random loss | relay |"
    head += " goodput / police (whole, steady) | path loss (whole, steady) |"
    print(head + "\n|---|---|---|---|---|---|---|")
    for (pm, lm, rtt, bucket, loss), mode, m in rows:
        who = MODES[mode]
        print(
            f"| {pm} / {lm} | {rtt} ms | {bucket:,} B | {loss:.0%} | {who} | "
            f"{m['whole']:.2f}, {m['steady']:.2f} | {m['whole_loss']:.1%}, {m['steady_loss']:.1%} |"
        )


if __name__ == "__main__":
    run(main)
