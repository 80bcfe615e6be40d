"""Benchmark: CPU per datagram and per MB of the relay's sans-IO pair, compiled against pure.

Two :class:`~tierwise.proto.relay.RelayConnection` objects (client and gateway, the
objects ``tierwise relay`` deploys: sealing, framing, ACK ranges, rate, FEC, stream
reassembly) over ``sim/relay.py``'s path in synthetic time, 333 Mbit/s, 200 ms RTT:

- bulk: ``--mb`` MB client → gateway on an established session, at 0 % and 14 % loss;
- requests: ``--requests`` sequential 354,640 B requests (1,000 B replies) on a warm
  session at 3.6 % loss.

Each case runs in its own worker process, once on the pure-Python path
(``TIERWISE_PURE_PYTHON=1``) and once compiled (``python -m tierwise.sim.build``),
alternating, ``--repeats`` times; the table gives medians of process CPU time (both
ends and the simulated path, in one process) and checks that both paths produce the
same outcome (synthetic completion time and packet counts). ``--profile`` prints the
pure path's cProfile instead (where the Python time goes). ``--base-src DIR`` adds the
same workers run from another source tree (``PYTHONPATH=DIR``, e.g. main's ``src``,
built or not), alternated with this tree's, so a change is measured as a ratio against
its parent on the same loaded host; the outcomes must then match across both trees too.

    python benchmarks/relay_native.py [--mb 10] [--requests 20] [--repeats 3] [--base-src DIR]
    python benchmarks/relay_native.py --profile bulk0 [--mb 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _args import choices_list, positive_float, positive_int, run

UP_BYTES, DOWN_BYTES = 354_640, 1000
CASES = ("bulk0", "bulk14", "req3.6")


def _one_way_path() -> type:
    """The simulated path class of the tree under test (``Path`` before its rename), so
    ``--base-src`` can measure a tree from either side of it."""
    from tierwise.sim import relay

    return getattr(relay, "OneWayPath", None) or relay.Path


def _bulk(loss: float, megabytes: float) -> dict[str, float | int]:
    from tierwise.sim.relay import Net, payload

    OneWayPath = _one_way_path()

    net = Net(OneWayPath(loss=loss), OneWayPath(loss=loss), seed=23)
    data = payload("bulk", int(megabytes * 1e6))
    net.run(5, lambda: net.client.established)
    sid = net.client.open_stream(priority=5)
    cpu0, start = time.process_time(), net.now
    net.client.send(sid, data, end_stream=True)
    net.run(start + 600, lambda: sid in net.finished["gateway"])
    cpu = time.process_time() - cpu0
    assert bytes(net.received["gateway"][sid]) == data
    return _outcome(net, cpu, net.now - start, len(data))


def _requests(loss: float, count: int) -> dict[str, float | int]:
    from tierwise.sim.relay import Net, payload

    OneWayPath = _one_way_path()

    net = Net(OneWayPath(loss=loss), OneWayPath(loss=loss), seed=17)
    up, down = payload("up", UP_BYTES), payload("down", DOWN_BYTES)
    net.on_gateway_stream = lambda sid, data: net.gateway.send(sid, down, end_stream=True)
    net.run(5, lambda: net.client.established)
    cpu0, start = time.process_time(), net.now
    for _ in range(count):
        sid = net.client.open_stream()
        net.client.send(sid, up, end_stream=True)
        net.run(net.now + 60, lambda sid=sid: sid in net.finished["client"])
        assert bytes(net.received["client"].pop(sid)) == down
        net.received["gateway"].pop(sid)
        net.run(net.now + 0.05)
    cpu = time.process_time() - cpu0
    return _outcome(net, cpu, net.now - start, count * (UP_BYTES + DOWN_BYTES))


def _outcome(net: object, cpu: float, sim_s: float, nbytes: int) -> dict[str, float | int]:
    client, gateway = net.client.stats, net.gateway.stats  # type: ignore[attr-defined]
    return {
        "cpu_s": cpu,
        "sim_s": sim_s,
        "bytes": nbytes,
        "datagrams": client.packets_sent + gateway.packets_sent,
        "lost": client.packets_lost + gateway.packets_lost,
        "recovered": client.fec_recovered + gateway.fec_recovered,
    }


def worker(case: str, megabytes: float, requests: int) -> dict[str, float | int | bool]:
    """One case in this process; which path ran is part of the answer."""
    from tierwise.sim.build import active

    runs = {
        "bulk0": lambda: _bulk(0.0, megabytes),
        "bulk14": lambda: _bulk(0.14, megabytes),
        "req3.6": lambda: _requests(0.036, requests),
    }
    return {"compiled": active(), **runs[case]()}


def _spawn(
    case: str, pure: bool, args: argparse.Namespace, src: str | None = None
) -> dict[str, float | int | bool]:
    env = {k: v for k, v in os.environ.items() if k != "TIERWISE_PURE_PYTHON"}
    if pure:
        env["TIERWISE_PURE_PYTHON"] = "1"
    if src is not None:
        env["PYTHONPATH"] = src
    cmd = [sys.executable, __file__, "--worker", case, "--mb", str(args.mb)]
    cmd += ["--requests", str(args.requests)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout)


def _profile(case: str, args: argparse.Namespace) -> None:
    import cProfile
    import pstats

    if os.environ.get("TIERWISE_PURE_PYTHON") != "1":
        # tierwise (imported by _args) chose its path at import: start again on the pure one
        env = {**os.environ, "TIERWISE_PURE_PYTHON": "1"}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    import tierwise.sim.build
    import tierwise.sim.relay  # imports are not the hot path: load them before profiling

    assert not tierwise.sim.build.active()
    prof = cProfile.Profile()
    prof.enable()
    worker(case, args.mb, args.requests)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=positive_float, default=10)
    parser.add_argument("--requests", type=positive_int, default=20)
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--cases", type=choices_list(tuple(CASES)), default=",".join(CASES))
    parser.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--profile", choices=CASES, help="cProfile of one pure-Python run")
    parser.add_argument("--base-src", help="a source tree (its src/) to run side by side")
    args = parser.parse_args()
    if args.base_src is not None and not os.path.isdir(os.path.join(args.base_src, "tierwise")):
        parser.error(f"--base-src {args.base_src}: expected a directory holding tierwise/")
    if args.worker:
        print(json.dumps(worker(args.worker, args.mb, args.requests)))
        return
    if args.profile:
        _profile(args.profile, args)
        return
    from tierwise.sim.build import status

    print(f"build: {status()}; load average {os.getloadavg()[0]:.2f} at start")
    trees = {"this": None, **({"base": args.base_src} if args.base_src else {})}
    head = "| case | tree | path | CPU s (median) | CPU ms per MB | µs per datagram | sim s |"
    head += " datagrams |"
    print(head + "\n|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        runs: dict[tuple[str, bool], list[dict[str, float | int | bool]]] = {}
        for _ in range(args.repeats):
            for tree, src in trees.items():
                for pure in (True, False):
                    runs.setdefault((tree, pure), []).append(_spawn(case, pure, args, src))
        for key in [k for k, rs in runs.items() if not k[1] and not rs[0]["compiled"]]:
            del runs[key]  # that tree is not built: only its pure row
        outcomes = {
            json.dumps({k: r[k] for k in ("sim_s", "datagrams", "lost")})
            for rs in runs.values()
            for r in rs
        }
        cpu = {key: statistics.median(float(r["cpu_s"]) for r in rs) for key, rs in runs.items()}
        for (tree, pure), rs in runs.items():
            first = rs[0]
            per_mb = cpu[tree, pure] / (float(first["bytes"]) / 1e6) * 1e3
            per_dg = cpu[tree, pure] / float(first["datagrams"]) * 1e6
            path = "pure" if pure else "compiled"
            print(
                f"| {case} | {tree} | {path} | {cpu[tree, pure]:.2f} | {per_mb:.0f} | "
                f"{per_dg:.1f} | {float(first['sim_s']):.4f} | {first['datagrams']} |"
            )
        for pure in (True, False):
            if ("this", pure) in cpu and ("base", pure) in cpu:
                ratio = cpu["this", pure] / cpu["base", pure]
                print(f"| {case} | this / base | {'pure' if pure else 'compiled'} | {ratio:.2f} |")
        if len(outcomes) != 1:
            print(f"  outcomes differ: {sorted(outcomes)}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    run(main)
