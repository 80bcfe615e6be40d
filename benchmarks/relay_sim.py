"""Benchmark: the relay's RelayConnection over a simulated 200 ms path, against the floor.

The issue's request case (354,640 B up, 1,000 B down; the processing time is
left out because the simulated gateway answers at once) on a warm session, at
0 %, 3.6 % and 14 % random loss in both directions (with the uplink's FEC
overhead), and a bulk transfer on a new session and on a warm one (three
requests first, as a deployed session would have measured the path). The
floor is ``RTT + up/rate + down/rate``. Synthetic time, so the figures do not
depend on the machine's load; the CPU seconds (both ends, one process) do.

    python benchmarks/relay_sim.py [--requests 60] [--bulk-mb 20]

``--lab`` runs instead the lab's bulk case like for like (``tierwise lab throughput
--via relay``): ``--bulk-mb`` from the gateway to the client at ``--rate-mbit``, 200 ms,
the emulator's 1.5 MB queue, Bernoulli ``--loss`` on the download only, lost before
the queue as the emulator does; with ``--reader-cost-us`` the client reads as the real
process does, up to 64 datagrams per wake-up (each with its arrival time), spending that
much per datagram before its ACKs leave (0: one at a time, as the plain simulator)::

    python benchmarks/relay_sim.py --lab --bulk-mb 30 --rate-mbit 200 --loss 0.14 \
        --reader-cost-us 0,150 [--fec-bulk-target 0.99,0] [--seed 23,5,7]

``--pmtu`` runs short sessions with path MTU discovery (``max_datagram_bytes`` 8,880,
a jumbo link's): a new session per seed, then ``--requests`` requests one after another
(the issue's 354,640 B up, then a 354,640 B download, in turn), over links whose MTU is
9,000 (the search pays), 1,500 (the larger probes are lost) and 1,470 (every probe is
lost: only the base size fits), at each of ``--losses``; per link the requests' time
over the floor, datagrams and repairs per session, the loss each sender read from its
peer against the path's, and the probes lost::

    python benchmarks/relay_sim.py --pmtu --requests 8 --losses 0,0.036,0.14 --seed 31,32,33

``--cold N`` runs a new session's first request instead, ``N`` seeds at each of
``--losses``: once the handshake is done the client sends the issue's request
(354,640 B up, 1,000 B down), timed against the same floor, with the default session
settings and with ``initial_rate_bytes_per_s`` and ``initial_loss`` set to the path's
(an operator who knows the path); per loss the median
and p99 over the seeds, how many answers needed a retransmission, and the repairs
each end sent per request::

    python benchmarks/relay_sim.py --cold 200 --losses 0,0.036,0.14
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _args import fraction, positive_float, positive_int, run
from rich.progress import Progress

from tierwise.proto.relay import RelayConfig
from tierwise.proto.relay.pmtu import REPAIR_EXTRA_BYTES
from tierwise.relay.pathmemory import PathMemory
from tierwise.sim.relay import (
    Net,
    OneWayPath,
    all_done,
    batched_download,
    payload,
    request_response,
)

RATE_BYTES_PER_S = 333e6 / 8
UP_BYTES, DOWN_BYTES = 354_640, 1000


def requests(loss: float, count: int, progress: Progress) -> tuple[np.ndarray, float]:
    """Completion times of ``count`` sequential requests after 5 warm-up ones, FEC overhead."""
    net = Net(OneWayPath(loss=loss), OneWayPath(loss=loss), seed=17)
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
    net = Net(OneWayPath(loss=loss), OneWayPath(loss=loss), seed=23)
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


LAB_QUEUE_BYTES = 1_500_000  # the lab emulator's queue (lab/bench/emulator.py)


class LabPath(OneWayPath):
    """The lab emulator's order: a lost packet takes no queue room; tail drop by bytes."""

    tail_drops = 0

    def arrivals(self, size: int, now: float, rng: np.random.Generator) -> list[float]:
        self.sent += 1
        if self._lost(rng):
            self.dropped += 1
            return []
        start = max(now, self.free_at)
        if (start - now) * self.rate_bytes_per_s + size > LAB_QUEUE_BYTES:
            self.tail_drops += 1
            return []
        self.free_at = start + size / self.rate_bytes_per_s
        return [self.free_at + self.delay_s]


def lab_download(
    rate: float,
    loss: float,
    size: int,
    cost_s: float,
    seed: int = 23,
    config: RelayConfig | None = None,
) -> dict:
    """The lab's bulk case in synthetic time: gateway → client, loss on the download.

    ``cost_s`` > 0: the client reads up to 64 datagrams per wake-up and sends its ACKs
    after ``cost_s`` per datagram read; 0: each datagram at its arrival
    (:func:`tierwise.sim.relay.batched_download`)."""
    up, down = LabPath(rate_bytes_per_s=rate), LabPath(rate_bytes_per_s=rate, loss=loss)
    net = Net(up, down, seed=seed, config=config)
    net.run(5, lambda: net.client.established)
    client, gateway = net.client, net.gateway
    sid = client.open_stream(priority=5)
    client.send(sid, b"GET", end_stream=True)
    net.run(net.now + 2, lambda: sid in net.finished["gateway"])
    net.run(net.now + 0.3)
    cpu0 = time.process_time()
    r = batched_download(
        net, sid, payload("bulk", size), cost_s=cost_s if cost_s > 0 else None, bound_s=600
    )
    g, c = gateway.stats, client.stats
    return {
        "goodput": r.received / r.seconds / rate,
        "complete": r.complete,
        "startup_end": r.startup_end,
        "sent": g.packets_sent,
        "repairs": g.repair_packets_sent,
        "lost": g.packets_lost,
        "acks": c.packets_sent,
        "recovered": c.fec_recovered,
        "tail_drops": down.tail_drops,
        "cpu_s": time.process_time() - cpu0,
    }


def lab_main(args: argparse.Namespace) -> None:
    rate = args.rate_mbit * 1e6 / 8
    size = int(args.bulk_mb * 1e6)
    print(
        f"lab case: {size / 1e6:.0f} MB gateway → client, {args.rate_mbit:g} Mbit/s, 200 ms,"
        f" 1.5 MB queue, {args.loss:.1%} loss on the download"
    )
    print(
        "| bulk FEC target | seed | reader µs per datagram | goodput / path"
        " | start-up ended (s, MB/s) | datagrams sent | repairs | declared lost | rebuilt by FEC"
        " | ACKs | tail drops | CPU s per GB (both ends) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for target in args.fec_bulk_target or [RelayConfig().fec_bulk_target]:
        config = RelayConfig(fec_bulk_target=target)
        for cost_us, seed in ((c, s) for c in args.reader_cost_us for s in args.seed or [23]):
            r = lab_download(rate, args.loss, size, cost_us * 1e-6, seed=seed, config=config)
            end = r["startup_end"]
            ended = "—" if end is None else f"{end[0]:.2f}, {end[1] / 1e6:.2f}"
            done = "" if r["complete"] else " (bound)"
            print(
                f"| {target:g} | {seed} | {cost_us:g} | {r['goodput']:.3f}{done} | {ended}"
                f" | {r['sent']}"
                f" | {r['repairs']} | {r['lost']} | {r['recovered']} | {r['acks']}"
                f" | {r['tail_drops']} | {r['cpu_s'] / (size / 1e9):.0f} |"
            )


UDP_IP_BYTES = 28  # the simulated links count IPv4 and UDP headers against the MTU


def pmtu_session(mtu: int, loss: float, count: int, seed: int) -> dict:
    """A new session over ``mtu`` links, ``count`` requests in turn: up and down alike."""
    jumbo = RelayConfig(max_datagram_bytes=9000 - UDP_IP_BYTES - REPAIR_EXTRA_BYTES)
    up = OneWayPath(delay_s=0.1, loss=loss, mtu_bytes=mtu)
    down = OneWayPath(delay_s=0.1, loss=loss, mtu_bytes=mtu)
    net = Net(up, down, seed=seed, config=jumbo)
    net.run(5, lambda: net.client.established)
    floor_up = 0.2 + (UP_BYTES + DOWN_BYTES) / RATE_BYTES_PER_S
    floor_down = 0.2 + (3 + UP_BYTES) / RATE_BYTES_PER_S
    ratios = []
    for i in range(count):
        upload = i % 2 == 0  # the request, then a download of the same size
        sizes = (UP_BYTES, DOWN_BYTES) if upload else (3, UP_BYTES)
        expected = request_response(net, [sizes])
        start = net.now
        net.run(start + 60, all_done(net, expected))
        for sid, (sent_up, sent_down) in expected.items():
            assert bytes(net.received["gateway"].pop(sid)) == sent_up
            assert bytes(net.received["client"].pop(sid)) == sent_down
        ratios.append((net.now - start) / (floor_up if upload else floor_down))
        net.run(net.now + 0.05)
    ends = (net.client, net.gateway)
    return {
        "ratios": ratios,
        "datagrams": sum(e.stats.packets_sent for e in ends),
        "repairs": sum(e.stats.repair_packets_sent for e in ends),
        "peer_loss": [e.peer_loss for e in ends],
        "jumbo": sum(e.pmtu_stats()["datagram_bytes"] > 8000 for e in ends),
        "probes_lost": sum(e.pmtu_stats()["pmtu_probes_lost"] for e in ends),
    }


def pmtu_main(args: argparse.Namespace) -> None:
    seeds = args.seed or [31]
    print(
        f"{args.requests} requests on a new session, max_datagram_bytes 8,880, 200 ms,"
        f" 333 Mbit/s, seeds {','.join(map(str, seeds))}; request / floor (odd: 354,640 B up,"
        " even: 354,640 B down), over every seed's requests; per session: datagrams and"
        " repairs (both ends), the loss each end read from its peer at the end"
    )
    print(
        "| link MTU | loss | median | p90 | worst | first requests' median | datagrams"
        " | repairs | loss read − path loss | ends at 8,880 B | probes lost |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for loss in args.losses:
        for mtu in (9000, 1500, 1470):
            runs = [pmtu_session(mtu, loss, args.requests, seed) for seed in seeds]
            ratios = np.array([x for r in runs for x in r["ratios"]])
            first = np.median([r["ratios"][0] for r in runs])
            read = np.mean([x for r in runs for x in r["peer_loss"]]) - loss
            print(
                f"| {mtu} | {loss:.1%} | {np.median(ratios):.3f} | {np.percentile(ratios, 90):.3f}"
                f" | {ratios.max():.3f} | {first:.3f}"
                f" | {np.mean([r['datagrams'] for r in runs]):.0f}"
                f" | {np.mean([r['repairs'] for r in runs]):.0f} | {read:+.4f}"
                f" | {sum(r['jumbo'] for r in runs)} of {2 * len(runs)}"
                f" | {sum(r['probes_lost'] for r in runs)} |"
            )


def learned_priors(up: OneWayPath, down: OneWayPath, seed: int) -> tuple:
    """What a session that carried three of the issue's requests on this path leaves in
    each end's path memory, recalled for the next session: (client's, gateway's) prior."""
    net = Net(up, down, seed=seed)
    net.run(60, lambda: net.client.established)
    for _ in range(3):
        expected = request_response(net, [(UP_BYTES, DOWN_BYTES)])
        net.run(net.now + 60, all_done(net, expected))
    memories = []
    for conn in (net.client, net.gateway):
        memory = PathMemory(Path("unused.json"), "client" if conn.is_client else "gateway")
        memory.remember("peer", conn.path_estimate(), 0.0)
        memories.append(memory.recall("peer", 1.0))
    return tuple(memories)


def fresh_path(loss: float, rate_bytes_per_s: float = RATE_BYTES_PER_S, queue_s: float = 0.2):
    return OneWayPath(loss=loss, rate_bytes_per_s=rate_bytes_per_s, queue_s=queue_s)


def cold_request(
    loss: float, seed: int, mode: str = "defaults", now_rate_share: float = 1.0
) -> dict:
    """A new session's first request, sent once the handshake is done; timed from then.
    ``mode``: "defaults"; "tuned" (both ends know the path: initial rate = its rate,
    initial loss = its loss); "remembered" (each end recalls what a session on the path
    at full rate measured: its path memory); ``now_rate_share``: the path's rate now,
    as a share of the remembered one (a path that changed under the memory)."""
    config = RelayConfig(initial_rate_bytes_per_s=RATE_BYTES_PER_S, initial_loss=loss)
    rate = RATE_BYTES_PER_S * now_rate_share
    net = Net(
        fresh_path(loss, rate),
        fresh_path(loss, rate),
        seed=seed,
        config=config if mode == "tuned" else None,
    )
    if mode == "remembered":
        client_prior, gateway_prior = learned_priors(fresh_path(loss), fresh_path(loss), seed + 7)
        for conn, prior in ((net.client, client_prior), (net.gateway, gateway_prior)):
            if prior is not None:  # the gateway's answers (1,000 B) measure no rate
                conn.use_prior(prior)
    net.run(60, lambda: net.client.established)
    expected = request_response(net, [(UP_BYTES, DOWN_BYTES)])
    start = net.now
    net.run(start + 60, all_done(net, expected))
    for sid, (sent_up, sent_down) in expected.items():
        assert bytes(net.received["gateway"].pop(sid)) == sent_up
        assert bytes(net.received["client"].pop(sid)) == sent_down
    return {
        "time_s": net.now - start,
        "floor_s": 0.2 + (UP_BYTES + DOWN_BYTES) / rate,
        "answer_retransmitted": net.gateway.stats.retransmitted_bytes > 0,
        "repairs": (net.client.stats.repair_packets_sent, net.gateway.stats.repair_packets_sent),
        "lost": net.up.dropped + net.down.dropped,
        "prior": net.client.prior_state,
    }


MODES = {
    "defaults": "defaults",
    "tuned": "initial rate and loss: the path's",
    "remembered": "path memory of an earlier session",
}


def cold_main(args: argparse.Namespace) -> None:
    share = args.now_rate
    print(
        f"a new session's first request (354,640 B up, 1,000 B down, sent once established),"
        f" {args.cold} seeds per loss, 200 ms, {333 * share:g} Mbit/s"
        + (" (the memory's path: 333 Mbit/s)" if share != 1 else "")
        + "; time / floor"
    )
    print(
        "| session settings | loss | median | p99 | worst | answers retransmitted"
        " | client repairs per request | gateway repairs per request | datagrams lost |"
        "\n|---|---|---|---|---|---|---|---|---|"
    )
    with Progress(transient=True) as progress:
        for mode in args.modes:
            for loss in args.losses:
                label = MODES[mode]
                task = progress.add_task(f"{label}, {loss:.1%} loss", total=args.cold)
                runs = []
                for seed in range(args.cold):
                    runs.append(cold_request(loss, 1000 + seed, mode, share))
                    progress.advance(task)
                ratios = np.array([r["time_s"] / r["floor_s"] for r in runs])
                late = sum(r["answer_retransmitted"] for r in runs)
                up, down = (np.mean([r["repairs"][i] for r in runs]) for i in (0, 1))
                print(
                    f"| {label} | {loss:.1%} | {np.median(ratios):.3f}"
                    f" | {np.percentile(ratios, 99):.3f} | {ratios.max():.3f}"
                    f" | {late} of {len(runs)} | {up:.0f} | {down:.1f}"
                    f" | {np.mean([r['lost'] for r in runs]):.0f} |"
                )


def target_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of numbers") from None
    if not values or any(not 0 <= v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each target must be in [0, 1)")
    return values


def seed_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each seed must be ≥ 0")
    return values


def loss_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of numbers") from None
    if not values or any(not 0 <= v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each loss must be in [0, 1)")
    return values


def share(text: str) -> float:
    value = fraction(text) if text.strip() != "1" else 1.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a share in (0, 1]")
    return value


def mode_list(text: str) -> list[str]:
    modes = text.split(",")
    if not modes or any(m not in MODES for m in modes):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a list of {', '.join(MODES)}")
    return modes


def cost_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of numbers") from None
    if not values or any(not 0 <= v < 1e6 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each value must be in [0, 1e6) µs")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=positive_int, default=60)
    parser.add_argument("--bulk-mb", type=positive_float, default=20)
    parser.add_argument("--lab", action="store_true", help="the lab's bulk case (see above)")
    parser.add_argument("--rate-mbit", type=positive_float, default=333)
    parser.add_argument("--loss", type=fraction, default=0.14)
    parser.add_argument("--reader-cost-us", type=cost_list, default=[0.0, 150.0])
    parser.add_argument(
        "--fec-bulk-target",
        type=target_list,
        help="with --lab: RelayConfig.fec_bulk_target values to compare (default: the default)",
    )
    parser.add_argument(
        "--seed", type=seed_list, help="with --lab (default 23) or --pmtu (31): loss seeds"
    )
    parser.add_argument("--pmtu", action="store_true", help="short sessions with PMTU discovery")
    parser.add_argument(
        "--losses",
        type=loss_list,
        default=[0.0, 0.036],
        help="with --pmtu or --cold: random loss each way",
    )
    parser.add_argument(
        "--cold",
        type=positive_int,
        help="a new session's first request, this many seeds at each of --losses",
    )
    parser.add_argument(
        "--modes",
        type=mode_list,
        default=list(MODES),
        help=f"with --cold: session settings to compare, of {', '.join(MODES)}",
    )
    parser.add_argument(
        "--now-rate",
        type=share,
        default=1.0,
        help="with --cold: the path's rate as a share of 333 Mbit/s (what memory recalls)",
    )
    args = parser.parse_args()
    if args.cold:
        cold_main(args)
        return
    if args.lab:
        lab_main(args)
        return
    if args.pmtu:
        pmtu_main(args)
        return
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
