"""Benchmark: where one lab request's time goes through the relay (root).

Brings the lab path up (:class:`tierwise.lab.bench.path.EmulatedPath`, 200 ms RTT, 100
Mbit/s each way unless told), the model service and the relay's two processes with
``TIERWISE_RELAY_TRACE`` set (``tierwise.relay.trace``), warms the session, then times
``--runs`` requests and lines each up with both processes' traces on the host's
monotonic clock::

    sudo python benchmarks/relay_trace.py [--runs 5] [--loss 0] [--keep DIR]

Per request, in ms from ``connect()``: the client's first and last data datagram
out, the gateway's first and last datagram in, its first and last write to the
service (the last carries the FIN), the service's first response byte read by the
gateway, the client's last datagram in, and the application's last response byte;
with the pacing rate, window and estimate the client used and the datagrams and
repairs it sent. The floor is ``R + S/B + T_proc + S_resp/B``.

``--sessions new`` restarts both relay processes before each timed request (a path never
seen, as ``tierwise lab request --sessions new`` does) and adds the start-up's own
milestones: the first flight's ACKs at the client (kernel stamps), the second flight's
first and last datagram out, the pacing rate and estimate it left at, and its span at the
gateway against its bytes at the path's rate (a span longer than that: the client fed the
bottleneck too slowly)::

    sudo python benchmarks/relay_trace.py --sessions new --runs 8
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import tempfile
from pathlib import Path

from _args import fraction, positive_int, run

from tierwise.lab.bench.path import EmulatedPath
from tierwise.lab.bench.service import ModelService, ServiceConfig
from tierwise.lab.experiments.request import RequestExperiment, serial_floor_s
from tierwise.lab.experiments.tunnels import open_tunnel, process_cpu_s, upload_body
from tierwise.lab.experiments.via import _request, _warm


def read_trace(path: str) -> list[tuple[float, str, list[str]]]:
    rows = []
    for line in Path(path).read_text().splitlines():
        t, name, *rest = line.split()
        rows.append((float(t), name, rest))
    return rows


def traces(prefix: str, pids: dict[str, int]) -> dict[str, list]:
    """Each end's trace (its process is ``python -c``, so its pid is the child's)."""
    found = {}
    for end, pid in pids.items():
        files = glob.glob(f"{prefix}.*")
        match = [f for f in files if f.endswith(f".{pid}")] or []
        found[end] = read_trace(match[0]) if match else []
    return found


def window(rows: list, start: float, stop: float) -> list:
    return [r for r in rows if start <= r[0] <= stop]


def breakdown(
    ev: dict[str, float], client: list, gateway: list, until: float | None = None
) -> dict[str, float]:
    """Milliseconds from ``connect_start`` of each milestone of one request; its rows end
    10 ms after its last response byte or at ``until`` (the next request's connect), so
    the next request's rows never count as this one's."""
    t0, t1 = ev["connect_start"], ev["last_response"]
    stop = t1 + 0.01 if until is None else min(t1 + 0.01, until)
    c, g = window(client, t0, stop), window(gateway, t0, stop)
    ctx = [r for r in c if r[1] == "tx" and int(r[2][1]) > 600]
    crx = [r for r in c if r[1] == "rx"]
    grx = [r for r in g if r[1] == "rx" and int(r[2][0]) > 600]
    gw = [r for r in g if r[1] == "tcp_write"]
    gread = [r for r in g if r[1] == "tcp_read"]
    ms = lambda t: round((t - t0) * 1e3, 1)  # noqa: E731
    out = {
        "client_tcp_read_first": ms(next(r[0] for r in c if r[1] == "tcp_read")),
        "client_tx_first": ms(ctx[0][0]),
        "client_tx_last": ms(ctx[-1][0]),
        "gw_rx_first": ms(grx[0][0]),
        "gw_rx_last": ms(grx[-1][0]),
        "gw_write_first": ms(gw[0][0]),
        "gw_write_last": ms(gw[-1][0]),
        "gw_service_answer": ms(gread[0][0]) if gread else None,
        "client_rx_last": ms(crx[-1][0]),
        "app_last_byte": ms(t1),
        "client_datagrams": sum(int(r[2][0]) for r in ctx),
        "client_tx_calls": len(ctx),
        "gw_rx_big": len(grx),
    }
    first = ctx[0][2]
    out.update(pacing_Mbit=round(float(first[2]) * 8e-6, 1), cwnd_kB=round(float(first[3]) / 1e3))
    out.update(btl_bw_Mbit=round(float(first[4]) * 8e-6, 1), startup=first[7], app_lim=first[8])
    out["repairs"] = int(ctx[-1][2][6]) - int(first[6])
    out.update(_arrivals(out, t0, c, g, gw))
    return out


def _arrivals(out: dict, t0: float, client: list, gateway: list, writes: list) -> dict:
    """Kernel arrival stamps (``rxb``) against the times each process handled them.

    The gateway's first data batch and the batch after which it wrote the request's
    last byte; its lateness per batch during the upload (trace time − arrival); the
    client's last batch (the response) and its lateness; the largest gap between two
    writes to the service (a wait for a lost datagram's repair or retransmission).
    """
    ms = lambda t: round((t - t0) * 1e3, 2)  # noqa: E731
    rxb = [(r[0], float(r[2][1]), float(r[2][2]), int(r[2][0])) for r in gateway if r[1] == "rxb"]
    if not rxb:
        return {}
    first_t = t0 + out["gw_rx_first"] / 1e3
    last_t = t0 + out["gw_write_last"] / 1e3
    before_first = [b for b in rxb if b[0] <= first_t + 1e-6] or rxb[:1]
    upload = [b for b in rxb if before_first[-1][0] <= b[0] <= last_t]
    late = sorted((b[0] - b[1]) * 1e3 for b in upload)
    wt = [r[0] for r in writes if r[0] <= last_t]
    gaps = [b - a for a, b in itertools.pairwise(wt)]
    res = {
        "gw_kernel_first": ms(before_first[-1][1]),
        "gw_kernel_last": ms(upload[-1][2]),
        "gw_batches": len(upload),
        "gw_late_median": round(late[len(late) // 2], 2),
        "gw_late_max": round(late[-1], 2),
        "gw_write_gap_max": round(max(gaps, default=0.0) * 1e3, 2),
    }
    up = [r[0] for r in client if r[1] == "tx" and int(r[2][1]) > 600 and r[0] <= last_t]
    res["client_tx_upload_last"] = ms(up[-1]) if up else out["client_tx_first"]
    crx = [(r[0], float(r[2][2])) for r in client if r[1] == "rxb"]
    if crx:
        last_t, last_at = crx[-1]
        res.update(client_kernel_last=ms(last_at), client_late_last=ms(last_t) - ms(last_at))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=positive_int, default=5)
    ap.add_argument("--loss", type=fraction, default=0.0)
    ap.add_argument("--keep", help="copy the raw traces here")
    ap.add_argument("--json", help="write every request's milestones and segments here")
    ap.add_argument(
        "--sessions",
        choices=("warm", "new"),
        default="warm",
        help="warm: one warmed session; new: the processes restarted before each request",
    )
    args = ap.parse_args()
    req = RequestExperiment(loss_up=args.loss, loss_down=args.loss, runs=args.runs)
    floor = serial_floor_s(req)
    body = upload_body(req.size_bytes, req.seed)
    work = tempfile.mkdtemp(prefix="tw-trace-")
    prefix = os.path.join(args.keep or work, "relay")
    os.environ["TIERWISE_RELAY_TRACE"] = prefix
    config = ServiceConfig(req.processing_s, req.response_bytes, None, req.cc, digest=True)
    path = EmulatedPath(req.path_config())
    with path, ModelService(path.server_ns, path.server_addr, config) as svc:
        target = (path.server_addr, svc.port)
        if args.sessions == "new":
            cpu_ms, timed = _on_new_sessions(path, target, body, req, args.runs)
        else:
            cpu_ms, timed = _on_a_warm_session(path, target, body, req, args.runs)
    del os.environ["TIERWISE_RELAY_TRACE"]
    print(f"floor {floor * 1e3:.1f} ms; load average {os.getloadavg()[0]:.2f}")
    print(f"CPU ms per request (user + system): {cpu_ms}")
    parts, kparts, cparts, records = [], [], [], []
    for i, (ev, pids) in enumerate(timed):
        rows = traces(prefix, pids)
        until = timed[i + 1][0]["connect_start"] if i + 1 < len(timed) else None
        b = breakdown(ev, rows["client"], rows["server"], until)
        if args.sessions == "new":
            b.update(second_flight(ev, rows["client"], rows["server"], req))
            cparts.append(cold_segments(b, req))
        print(f"{b['app_last_byte'] / (floor * 1e3):.3f} x floor", b)
        parts.append(segments(b, req))
        kparts.append(kernel_segments(b, req))
        records.append({"events": ev, "breakdown": b, "kernel": kparts[-1]})
    print("ms per segment, less its share of the floor (median, min, max):")
    _table(parts)
    if all(kparts):
        print("at kernel arrival stamps (median, min, max):")
        _table(kparts)
        slow = sorted(kparts, key=lambda k: k["total - floor"])[-max(1, len(kparts) // 10) :]
        print(f"the slowest {len(slow)} (what the p99 is made of):")
        _table(slow)
    if cparts:
        print("a new session's start-up, ms (median, min, max):")
        _table(cparts)
    if args.json:
        Path(args.json).write_text(json.dumps({"floor_s": floor, "requests": records}, indent=1))


def _on_a_warm_session(
    path: EmulatedPath, target: tuple[str, int], body: bytes, req: RequestExperiment, runs: int
) -> tuple[dict, list]:
    """``runs`` requests on one session warmed first; CPU ms per request, (events, pids)."""
    with open_tunnel("relay", path, target, req.rtt_s, req.rate_bytes_per_s) as tunnel:
        _warm(path, tunnel, body, None)
        emulator = path._emulator.pid if path._emulator else None
        cpu0 = {**tunnel.cpu_s(), "emulator": process_cpu_s(emulator or 0)}
        events = [_request(path, tunnel, body, None).events for _ in range(runs)]
        cpu1 = {**tunnel.cpu_s(), "emulator": process_cpu_s(emulator or 0)}
        pids = {end: p.pid for end, p in tunnel.processes.items()}
    cpu_ms = {end: round((cpu1[end] - cpu0[end]) / runs * 1e3, 1) for end in cpu0}
    return cpu_ms, [(ev, pids) for ev in events]


def _on_new_sessions(
    path: EmulatedPath, target: tuple[str, int], body: bytes, req: RequestExperiment, runs: int
) -> tuple[dict, list]:
    """Each request the first of processes just started, with no memory of the path."""
    timed, cpu = [], {"client": 0.0, "server": 0.0}
    for _ in range(runs):
        with open_tunnel("relay", path, target, req.rtt_s, req.rate_bytes_per_s) as tunnel:
            cpu0 = tunnel.cpu_s()
            events = _request(path, tunnel, body, None).events
            for end, s in tunnel.cpu_s().items():
                cpu[end] += s - cpu0[end]
            timed.append((events, {end: p.pid for end, p in tunnel.processes.items()}))
    return {end: round(s / runs * 1e3, 1) for end, s in cpu.items()}, timed


def second_flight(ev: dict, client: list, gateway: list, req: RequestExperiment) -> dict:
    """A new session's start-up from both traces (ms from ``connect_start``): the first
    flight's first ACK at the client (kernel stamp), the second flight's first and last
    datagram out, with the pacing rate and estimate at its first, and its span at the
    gateway (kernel stamps) against its bytes at the path's rate."""
    t0, t1 = ev["connect_start"], ev["last_response"]
    ms = lambda t: round((t - t0) * 1e3, 2)  # noqa: E731
    c = window(client, t0, t1)
    tx = [r for r in c if r[1] == "tx" and int(r[2][1]) > 600]
    if not tx:
        return {}
    half_rtt = req.rtt_s / 2
    # the first flight's first ACK: the first batch whose kernel stamp is a round trip after
    # the flight left (earlier ones answer what the session sent before it)
    acks = [r for r in c if r[1] == "rxb" and float(r[2][1]) >= tx[0][0] + 0.9 * req.rtt_s]
    if not acks:
        return {}
    second = [r for r in tx if r[0] >= acks[0][0]]
    if not second:
        return {}
    first_flight = sum(int(r[2][0]) for r in tx if r[0] < acks[0][0])
    sent = sum(int(r[2][1]) for r in second)
    exits = [r for r in c if r[1] == "startup_end"]
    g = [r for r in gateway if r[1] == "rxb" and float(r[2][1]) >= second[0][0]]
    g = [r for r in g if float(r[2][1]) <= t1 - half_rtt]
    out = {
        "first_flight_datagrams": first_flight,
        "client_ack_first_kernel": ms(float(acks[0][2][1])),
        "client_ack_first_read": ms(acks[0][0]),
        "second_tx_first": ms(second[0][0]),
        "second_tx_last": ms(second[-1][0]),
        "second_datagrams": sum(int(r[2][0]) for r in second),
        "second_pacing_Mbit": round(float(second[0][2][2]) * 8e-6, 1),
        "second_btl_bw_Mbit": round(float(second[0][2][4]) * 8e-6, 1),
        "second_bytes": sent,
        "startup_exit": f"{exits[0][2][0]} {float(exits[0][2][1]) * 8e-6:.1f}" if exits else "",
        "startup_exit_at": ms(exits[0][0]) if exits else None,
    }
    if g:
        span = float(g[-1][2][2]) - float(g[0][2][1])
        out.update(gw_second_first=ms(float(g[0][2][1])), gw_second_last=ms(float(g[-1][2][2])))
        out["gw_second_span_over_bytes"] = round((span - sent / req.rate_bytes_per_s) * 1e3, 2)
    return out


def cold_segments(b: dict, req: RequestExperiment) -> dict[str, float]:
    """A new session's request cut at its start-up's milestones (ms)."""
    if "second_tx_first" not in b:
        return {}
    rtt_ms = req.rtt_s * 1e3
    seg = {
        "first datagram -> first ACK (kernel) - RTT": b["client_ack_first_kernel"]
        - b["client_tx_first"]
        - rtt_ms,
        "first ACK (kernel) -> read": b["client_ack_first_read"] - b["client_ack_first_kernel"],
        "first ACK (kernel) -> second flight": b["second_tx_first"] - b["client_ack_first_kernel"],
        "second flight: sent over (ms)": b["second_tx_last"] - b["second_tx_first"],
        "second flight: its bytes at B (ms)": b["second_bytes"] / req.rate_bytes_per_s * 1e3,
        "second flight: pacing (Mbit/s)": b["second_pacing_Mbit"],
        "second flight: estimate (Mbit/s)": b["second_btl_bw_Mbit"],
        "first flight (datagrams)": b["first_flight_datagrams"],
        "total - floor - RTT": b["app_last_byte"] - serial_floor_s(req) * 1e3 - rtt_ms,
    }
    if "gw_second_span_over_bytes" in b:
        seg["second flight at the gateway: span - bytes/B"] = b["gw_second_span_over_bytes"]
    return seg


def _table(parts: list[dict]) -> None:
    for name in parts[0]:
        values = sorted(p[name] for p in parts)
        median, low, high = values[len(values) // 2], values[0], values[-1]
        print(f"  {name:<42} {median:7.1f}  (min {low:.1f}, max {high:.1f})")


def segments(b: dict, req: RequestExperiment) -> dict[str, float]:
    """The request cut at the trace's milestones; each minus what the floor gives it (ms)."""
    one_way_ms, proc_ms = req.rtt_s / 2 * 1e3, req.processing_s * 1e3
    upload_ms = req.size_bytes / req.rate_bytes_per_s * 1e3
    return {
        "client: connect -> first datagram": b["client_tx_first"],
        "uplink delay - RTT/2": b["gw_rx_first"] - b["client_tx_first"] - one_way_ms,
        "upload at gateway - S/B": b["gw_rx_last"] - b["gw_rx_first"] - upload_ms,
        "gateway: last in -> last write": b["gw_write_last"] - b["gw_rx_last"],
        "service - T_proc": b["gw_service_answer"] - b["gw_write_last"] - proc_ms,
        "downlink - RTT/2": b["client_rx_last"] - b["gw_service_answer"] - one_way_ms,
        "client: last in -> app's last byte": b["app_last_byte"] - b["client_rx_last"],
        "total - floor": b["app_last_byte"] - serial_floor_s(req) * 1e3,
    }


def kernel_segments(b: dict, req: RequestExperiment) -> dict[str, float]:
    """The same request cut at kernel arrival stamps: the path's share against the processes'."""
    if "gw_kernel_first" not in b or "client_kernel_last" not in b:
        return {}
    one_way_ms, proc_ms = req.rtt_s / 2 * 1e3, req.processing_s * 1e3
    upload_ms = req.size_bytes / req.rate_bytes_per_s * 1e3
    return {
        "client: connect -> first datagram": b["client_tx_first"],
        "client: send spread - S/B (not in the sum)": b["client_tx_upload_last"]
        - b["client_tx_first"]
        - upload_ms,
        "upload: last arrival - first sent - RTT/2 - S/B": b["gw_kernel_last"]
        - b["client_tx_first"]
        - one_way_ms
        - upload_ms,
        "gateway: last arrival -> last write": b["gw_write_last"] - b["gw_kernel_last"],
        "service - T_proc": b["gw_service_answer"] - b["gw_write_last"] - proc_ms,
        "downlink (kernel) - RTT/2": b["client_kernel_last"] - b["gw_service_answer"] - one_way_ms,
        "client: last arrival -> app's last byte": b["app_last_byte"] - b["client_kernel_last"],
        "gateway lateness per batch, max": b["gw_late_max"],
        "gateway: largest gap between writes": b["gw_write_gap_max"],
        "total - floor": b["app_last_byte"] - serial_floor_s(req) * 1e3,
    }


if __name__ == "__main__":
    run(main)
