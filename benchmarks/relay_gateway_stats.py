"""Benchmark: what one answer of the gateway's stats endpoint costs as sessions grow.

Two real :class:`~tierwise.relay.gateway.Gateway` objects on loopback UDP sockets, one
holding ``--few`` sessions and one ``--many``, each session opened by a real client
handshake (a :class:`~tierwise.proto.relay.RelayConnection` HELLO fed to the gateway;
its WELCOME goes to a closed loopback port). Both then answer ``/stats`` (the snapshot
as JSON, what the endpoint sends) and ``/metrics`` (the Prometheus text), alternately,
``--repeats`` times each; the median time per answer, its size, and the ratio many/few
are printed. The listed sessions are bounded (32), so the answer's size stays flat;
the totals are one pass over every session's counters, so its time grows with them.

    python benchmarks/relay_gateway_stats.py [--few 64] [--many 4096] [--repeats 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

from _args import positive_int, run

from tierwise.jsonvalue import plain
from tierwise.proto.relay import RelayConfig, RelayConnection
from tierwise.relay.gateway import Gateway
from tierwise.relay.metrics import render_metrics

KEY = bytes(range(32))
ANSWERS = {
    "stats": lambda gw: json.dumps(plain(gw.snapshot())).encode(),
    "metrics": lambda gw: render_metrics(gw.snapshot()),
}


async def gateway_with(n: int) -> tuple[Gateway, asyncio.BaseTransport]:
    """A gateway on a loopback socket with ``n`` sessions established by real HELLOs."""
    loop = asyncio.get_running_loop()
    config = RelayConfig(idle_timeout_s=3600.0, keepalive_s=1800.0)
    gw = Gateway(KEY, {("127.0.0.1", 9)}, config=config, max_sessions=n)
    transport, _ = await loop.create_datagram_endpoint(lambda: gw, local_addr=("127.0.0.1", 0))
    addr = transport.get_extra_info("sockname")
    for i in range(n):
        client = RelayConnection(KEY, is_client=True, config=config)
        client.connect(addr, loop.time(), wall_s=time.time())
        ((hello, _),) = client.datagrams_to_send(loop.time())
        gw.datagrams_received([(hello, ("127.0.0.1", 20000 + i % 40000))])
    assert len(gw.sessions) == n, len(gw.sessions)
    return gw, transport


async def measure(few: int, many: int, repeats: int) -> dict:
    gateways = {few: await gateway_with(few), many: await gateway_with(many)}
    times: dict[tuple[str, int], list[float]] = {}
    sizes: dict[tuple[str, int], int] = {}
    for _ in range(repeats):
        for kind, answer in ANSWERS.items():
            for n, (gw, _) in gateways.items():  # side by side: the same load for both
                t0 = time.perf_counter()
                body = answer(gw)
                times.setdefault((kind, n), []).append(time.perf_counter() - t0)
                sizes[kind, n] = len(body)
    for _gw, transport in gateways.values():
        transport.close()
    out = {}
    for kind in ANSWERS:
        med = {n: statistics.median(times[kind, n]) for n in (few, many)}
        out[kind] = {
            **{f"median_s_{n}": med[n] for n in (few, many)},
            **{f"bytes_{n}": sizes[kind, n] for n in (few, many)},
            "ratio_many_over_few": med[many] / med[few],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--few", type=positive_int, default=64)
    parser.add_argument("--many", type=positive_int, default=4096)
    parser.add_argument("--repeats", type=positive_int, default=200)
    args = parser.parse_args()
    load = os.getloadavg()
    result = asyncio.run(measure(args.few, args.many, args.repeats))
    print(json.dumps({"loadavg": load, "after_loadavg": os.getloadavg(), **result}, indent=2))


if __name__ == "__main__":
    run(main)
