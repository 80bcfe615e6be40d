"""Benchmark: the relay under floods of hostile datagrams, each class beside a quiet run.

``tierwise relay gateway`` (with ``--stats``) and ``tierwise relay client --forward``
run as processes on 127.0.0.1; a source thread answers each connection's 8-byte size
with that many bytes. Measured quiet, then while ``tests/relay/flooder.py`` floods
(as fast as one core sends, ``sendmmsg``, for at most ``--seconds``) one class:

* gateway: ``random`` bytes, ``unknown`` session ids, ``hello``-shaped (dated now, no
  admission tag), ``hello-observed`` (the same with the key's current admission tag, as an
  on-path observer could copy from a client's HELLO; ``hello-observed-spoofed``: from
  random 127/8 sources, raw socket: root), ``replay`` (authentic datagrams
  of a live second session, recorded here and replayed), ``badtag`` (the live
  session's id, a bad tag), ``spoofed`` (a live session's id and a bad tag from random
  127/8 sources, raw socket: root);
* the client's UDP port, spoofed from the gateway's address: ``client-random``,
  ``client-unknown``, ``client-badtag`` (the client's session id, random packet numbers),
  ``client-badtag-pn`` (the same with the packet numbers the gateway is about to send,
  as an on-path attacker could read them, without their tokens), ``client-replay``
  (authentic datagrams of the gateway to the client, captured off loopback and replayed:
  root).

``spin`` sends nothing and keeps one core busy: the control, what losing a core to a
flooder costs on this host whatever it sends (on loopback the kernel's work on a
flood, the socket filters included, is done on the sender's core).

``--pin`` puts the flooder (and the spin) on CPU 0 and everything of the relay — gateway,
client, this process with its source and measuring threads — on CPU 1, quiet runs too:
on loopback the kernel's receive path for a flooded datagram (softirq, the socket
filter, the drop) runs in the sender's context, and a flooder on another host would not
take the relay's core; pinned, a class's ratio to quiet is what it costs the relay
itself. Unpinned, it is that plus losing a core of this 2-core host to the flooder.
Pinned, the quiet runs keep the flooder's core awake with a process that naps 100 µs at
a time (``nap``, next to no CPU): on this VM (``sched_vcpu_pack``) a wholly idle core
made the relay pinned to the other 4-5 × slower (the guest kernel seems to pack other
tasks onto the one busy core), which would flatter every flood class.

Per class: the bulk goodput of an established session (``--mb`` MB down), the median
of ``--requests`` requests of 354,640 B, the seconds a new client's session takes to
come up, the datagrams the flooder sent and the kernel's and the gateway's drops.
Goals (issue 30): bulk ≥ 50 % of quiet, request ≤ 1.5 × quiet, new session ≤ 2 s.

    python benchmarks/relay_flood.py [--mb 20] [--requests 9] [--seconds 20]
        [--classes random,unknown,...] [--pin]
    python benchmarks/relay_flood.py --hello-cost --rounds 20   # a cookie reply's cost
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from _args import positive_float, positive_int, run

from tierwise.proto.relay import wire
from tierwise.proto.relay.crypto import admission_key, admission_tag
from tierwise.relay import kfilter
from tierwise.relay.client import Client

ROOT = Path(__file__).resolve().parent.parent
FLOODER = ROOT / "tests" / "relay" / "flooder.py"
CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]
REQUEST_BYTES = 354_640
# client-badtag-pn: the flooder's 1,024 numbers spread over the next 24,576 packets (a 20 MB
# download and its requests): most forgeries are ahead of the session, each an AEAD check
PN_STEP = 24
GATEWAY_CLASSES = (
    "spin", "random", "unknown", "hello", "hello-observed", "hello-observed-spoofed", "replay",
    "badtag", "spoofed",
)  # fmt: skip
CLIENT_CLASSES = (
    "client-random", "client-unknown", "client-badtag", "client-badtag-pn", "client-replay",
)  # fmt: skip


def _ns_a_datagram(tx: socket.socket, rx: socket.socket, datagram: bytes) -> float:
    """Nanoseconds a datagram from ``tx`` to ``rx`` costs, sent and read 32 at a time
    (20,000 of them): the kernel's path, socket filters included."""
    to = rx.getsockname()
    t0 = time.perf_counter_ns()
    for _ in range(20_000 // 32):
        for _ in range(32):
            tx.sendto(datagram, to)
        for _ in range(32):
            rx.recv(2048)
    return (time.perf_counter_ns() - t0) / 20_000


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(port: int, nbytes: int, timeout: float = 120.0) -> float:
    """Seconds to ask for and receive ``nbytes`` through the relay's forward port."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(nbytes.to_bytes(8, "big"))
        got = 0
        while got < nbytes and (data := s.recv(1 << 18)):
            got += len(data)
    if got != nbytes:
        raise SystemExit(f"received {got} of {nbytes} bytes")
    return time.perf_counter() - start


def stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as r:
        return json.load(r)


def udp_port_of(pid: int) -> int:
    """The local UDP port of a process's (one) UDP socket, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        cols = line.split()
        if cols[9] in inodes:
            return int(cols[1].split(":")[1], 16)
    raise SystemExit(f"no UDP socket in process {pid}")


class Recorder:
    """A second session in this process (a thread's event loop): its datagrams to the
    gateway recorded, to be replayed; the session kept open while the floods run."""

    def __init__(
        self, psk: bytes, gw: tuple[str, int], fwd: int | None, namespace: str | None = None
    ) -> None:
        """``fwd``: a forward port whose traffic the recording waits for (None: the
        session's own keep-alives for 3 s); ``namespace``: the lab namespace the session's
        socket lives in (``relay_flood_lab.py``)."""
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self._run, args=(namespace,), daemon=True).start()
        self.sent: list[bytes] = []
        self.client = Client(psk, gw)
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(20)
        fetch_async = asyncio.run_coroutine_threadsafe(self._traffic(fwd), self.loop)
        fetch_async.result(30)

    def _run(self, namespace: str | None) -> None:
        if namespace is None:
            self.loop.run_forever()
            return
        from tierwise.lab.bench import netns

        with netns.entered(namespace):  # the thread's sockets are the namespace's
            self.loop.run_forever()

    async def _start(self) -> None:
        await self.client.start()
        await asyncio.wait_for(self.client.ready.wait(), 10)
        transport = self.client._transport
        assert transport is not None
        inner = transport.send_many

        def send_many(datagrams: list) -> None:  # type: ignore[type-arg]
            if len(self.sent) < 2000:
                self.sent.extend(bytes(d) for d, _ in datagrams)
            inner(datagrams)

        transport.send_many = send_many  # type: ignore[method-assign]

    async def _traffic(self, fwd: int | None) -> None:
        if fwd is None:
            await asyncio.sleep(3)  # keep-alives and their ACKs
            return
        loop = asyncio.get_running_loop()
        # datagrams this session sends: a request's ACKs and an upload's data
        await loop.run_in_executor(None, fetch, fwd, 1)

    @property
    def cid(self) -> bytes:
        assert self.client.session is not None
        return self.client.session.conn.connection_id

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.client.close)


def udp_drops(port: int) -> int:
    """The kernel's drops for the UDP socket bound to ``port`` (``/proc/net/udp``: its
    queue's overflows and its socket filter's drops)."""
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        cols = line.split()
        if int(cols[1].split(":")[1], 16) == port:
            return int(cols[-1])
    return 0


class Capture:
    """The UDP payloads from port ``src`` to port ``dst`` on loopback (the first 2,000), read
    off ``lo`` with a packet socket while the block runs (root; elsewhere none)."""

    def __init__(self, src: int, dst: int) -> None:
        self.src, self.dst = src, dst
        self.datagrams: list[bytes] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Capture:
        if os.geteuid() == 0:
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(5)

    def _read(self) -> None:
        eth_p_ip = 0x0800
        with socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(eth_p_ip)) as s:
            s.bind(("lo", 0))
            s.settimeout(0.1)
            while not self._done.is_set() and len(self.datagrams) < 2000:
                try:
                    packet, addr = s.recvfrom(65535)
                except TimeoutError:
                    continue
                if addr[2] == socket.PACKET_OUTGOING or packet[9] != socket.IPPROTO_UDP:
                    continue  # each loopback packet is seen going out and coming in
                ihl = (packet[0] & 0x0F) * 4
                sport, dport = (
                    int.from_bytes(packet[ihl : ihl + 2], "big"),
                    int.from_bytes(packet[ihl + 2 : ihl + 4], "big"),
                )
                if (sport, dport) == (self.src, self.dst):
                    self.datagrams.append(packet[ihl + 8 :])


def new_session_s(psk: bytes, gw: tuple[str, int]) -> float:
    """Seconds from a new client's start to its session being up (or 10 s: never)."""

    async def go() -> float:
        client = Client(psk, gw)
        t0 = time.perf_counter()
        try:
            await client.start()
            await asyncio.wait_for(client.ready.wait(), 10)
            return time.perf_counter() - t0
        except TimeoutError:
            return float("inf")
        finally:
            client.close()

    return asyncio.run(go())


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(args: argparse.Namespace, fwd: int, psk: bytes, gw: tuple[str, int]) -> dict:
    session_s = new_session_s(psk, gw)
    bulk_s = fetch(fwd, int(args.mb * 1e6))
    requests = [fetch(fwd, REQUEST_BYTES) for _ in range(args.requests)]
    return {
        "goodput_mbit": args.mb * 8 / bulk_s,
        "request_ms": statistics.median(requests) * 1e3,
        "session_s": session_s,
    }


def flooder(kind: str, args: argparse.Namespace, ctx: dict, tmp: Path) -> list[str]:
    cmd = [sys.executable, str(FLOODER), "--seconds", str(args.seconds)]
    gw_to = f"--to=127.0.0.1:{ctx['gw_port']}"
    cl_to = f"--to=127.0.0.1:{ctx['client_port']}"
    spoof_gw = f"--spoof=127.0.0.1:{ctx['gw_port']}"
    if kind in ("spin", "nap", "random", "unknown", "hello"):
        return [*cmd, gw_to, "--kind", kind]
    if kind == "hello-observed":
        return [*cmd, gw_to, "--kind", "hello", "--tag", ctx["tag"]]
    if kind == "hello-observed-spoofed":
        return [*cmd, gw_to, "--kind", "hello", "--tag", ctx["tag"], "--spoof", "random:0"]
    if kind == "replay":
        path = tmp / "replay.hex"
        path.write_text("\n".join(d.hex() for d in ctx["recorded"]))
        return [*cmd, gw_to, "--kind", "file", "--payloads", str(path)]
    if kind == "badtag":
        return [*cmd, gw_to, "--kind", "badtag", "--cid", ctx["cid"]]
    if kind == "spoofed":
        return [*cmd, gw_to, "--kind", "badtag", "--cid", ctx["cid"], "--spoof", "random:0"]
    if kind == "client-replay":  # what the gateway sent the client, as captured off the path
        path = tmp / "client-replay.hex"
        path.write_text("\n".join(d.hex() for d in ctx["to_client"]))
        return [*cmd, cl_to, "--kind", "file", "--payloads", str(path), spoof_gw]
    if kind == "client-badtag":
        return [*cmd, cl_to, "--kind", "badtag", "--cid", ctx["client_cid"], spoof_gw]
    if kind == "client-badtag-pn":  # the numbers the gateway sends next, as read off the path
        (entry,) = [e for e in stats(ctx["stats_port"])["sessions"] if e["id"] == ctx["client_cid"]]
        pns = ["--pn-from", str(entry["packets_sent"]), "--pn-step", str(PN_STEP)]
        return [*cmd, cl_to, "--kind", "badtag", "--cid", ctx["client_cid"], *pns, spoof_gw]
    return [*cmd, cl_to, "--kind", kind.removeprefix("client-"), spoof_gw]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=positive_float, default=20)
    parser.add_argument("--requests", type=positive_int, default=9)
    parser.add_argument("--seconds", type=positive_float, default=20, help="a flood's bound")
    parser.add_argument("--classes", default=",".join(GATEWAY_CLASSES + CLIENT_CLASSES))
    parser.add_argument("--pin", action="store_true", help="flooder on CPU 0, relay on CPU 1")
    parser.add_argument(
        "--base-src",
        default=None,
        help="no floods: this tree against the relay in DIR, alternately",
    )
    parser.add_argument("--rounds", type=positive_int, default=10, help="with --base-src")
    parser.add_argument(
        "--kernel-cost",
        action="store_true",
        help="no floods: the steering's cost per datagram at rest",
    )
    parser.add_argument("--sessions", type=positive_int, default=64, help="with --kernel-cost")
    parser.add_argument(
        "--hello-cost",
        action="store_true",
        help="no floods: a copied-tag HELLO's cost to the gateway against a cookie reply's",
    )
    parser.add_argument(
        "--token-cost",
        action="store_true",
        help="no floods: the packet-number tokens' cost a datagram and the window's reloads",
    )
    args = parser.parse_args()
    if args.token_cost:
        token_cost(args)
        return
    if args.kernel_cost:
        kernel_cost(args)
        return
    if args.hello_cost:
        asyncio.run(hello_cost(args))
        return
    relay_cpu = flood_cpu = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--pin needs two CPUs")
        flood_cpu, relay_cpu = {cpus[0]}, {cpus[1]}
        os.sched_setaffinity(0, relay_cpu)  # before any thread: they inherit it
    where = f"flooder on CPU {flood_cpu}, relay on CPU {relay_cpu}" if args.pin else "unpinned"
    print(f"placement: {where}; load {os.getloadavg()[0]:.2f}")
    classes = [c for c in args.classes.split(",") if c]
    for c in classes:
        if c not in GATEWAY_CLASSES + CLIENT_CLASSES:
            parser.error(f"unknown class {c!r}")
    if os.geteuid() != 0:
        classes = [c for c in classes if not ("spoofed" in c or "client" in c)]
        print("not root: the spoofed classes (raw sockets) are left out")
    server = socket.create_server(("127.0.0.1", 0))
    sys.path.insert(0, str(FLOODER.parent))  # tests/relay/flooder.py: the flood and the source
    from flooder import sized_source

    threading.Thread(target=sized_source, args=(server,), daemon=True).start()
    sport = server.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        key = tmp / "relay.key"
        subprocess.run([*CLI, "relay", "keygen", "--out", str(key)], check=True)
        psk = bytes.fromhex(key.read_text().strip())
        if args.base_src:
            at_rest(args, key, sport, relay_cpu)
            return
        stats_port = free_port()
        gwp, clp, gw_port, fwd = start_relay(key, sport, _on_cpus(relay_cpu), stats_port)
        try:
            gw = ("127.0.0.1", gw_port)
            ids = {s["id"] for s in stats(stats_port)["sessions"]}
            recorder = Recorder(psk, gw, fwd)
            ctx = {
                "gw_port": gw_port,
                "stats_port": stats_port,
                "client_port": udp_port_of(clp.pid),
                "client_cid": next(iter(ids)),
                "cid": recorder.cid.hex(),
                "recorded": recorder.sent,
                "tag": admission_tag(admission_key(psk), time.time()).hex(),
            }
            with Capture(gw_port, ctx["client_port"]) as captured:
                fetch(fwd, int(args.mb * 1e6))  # warm
            ctx["to_client"] = captured.datagrams

            def quiet() -> dict:
                if not args.pin:
                    return measure(args, fwd, psk, gw)
                # the flooder's core kept awake, next to no CPU: on this VM a wholly idle
                # core slowed the relay pinned to the other 4-5 × (the docstring)
                nap = subprocess.Popen(flooder("nap", args, ctx, tmp), stdout=subprocess.PIPE,
                                       preexec_fn=_on_cpus(flood_cpu))  # fmt: skip
                try:
                    return measure(args, fwd, psk, gw)
                finally:
                    nap.terminate()
                    nap.communicate(timeout=30)

            rows = [("quiet", quiet(), 0, 0.0)]
            for kind in classes:
                before = stats(stats_port)["totals"]
                client_drops = udp_drops(ctx["client_port"])
                cpu0 = cpu_s(gwp.pid)
                flood = subprocess.Popen(flooder(kind, args, ctx, tmp), stdout=subprocess.PIPE,
                                         text=True, preexec_fn=_on_cpus(flood_cpu))  # fmt: skip
                time.sleep(0.5)
                try:
                    row = measure(args, fwd, psk, gw)
                finally:
                    flood.terminate()
                    out = flood.communicate(timeout=30)[0].split()
                sent = int(int(out[0]) / float(out[1])) if len(out) == 2 else 0  # a second
                after = stats(stats_port)["totals"]
                drops = {
                    k: after[k] - before.get(k, 0)
                    for k in after
                    if k.startswith("dropped_") or k == "hello_tags_struck"
                }
                drops["client_kernel"] = udp_drops(ctx["client_port"]) - client_drops
                row["drops"] = {k: v for k, v in drops.items() if v}
                rows.append((kind, row, sent, cpu_s(gwp.pid) - cpu0))
                rows.append(("quiet", quiet(), 0, 0.0))
            recorder.close()
        finally:
            for p in (gwp, clp):
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
    report(rows)
    print(f"load at the end {os.getloadavg()[0]:.2f}")


def start_relay(
    key: Path,
    sport: int,
    preexec: Callable[[], None] | None,
    stats_port: int | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen, subprocess.Popen, int, int]:
    """A gateway and a client forwarding to ``sport``, up: (gateway, client, the
    gateway's UDP port, the client's forward port)."""
    gw_port, fwd = free_port(socket.SOCK_DGRAM), free_port()
    common = ["--key-file", str(key), "--log-level", "warning"]
    stats_args = ["--stats", f"127.0.0.1:{stats_port}"] if stats_port else []
    gwp = subprocess.Popen([*CLI, "relay", "gateway", "--listen", f"127.0.0.1:{gw_port}",
                            "--allow", f"127.0.0.1:{sport}", *stats_args, *common],
                           preexec_fn=preexec, env=env)  # fmt: skip
    forward = f"127.0.0.1:{fwd}=127.0.0.1:{sport}"
    clp = subprocess.Popen([*CLI, "relay", "client", "--gateway", f"127.0.0.1:{gw_port}",
                            "--forward", forward, "--socks", f"127.0.0.1:{free_port()}",
                            *common],
                           preexec_fn=preexec, env=env)  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            fetch(fwd, 1000, timeout=2)
            break
        except (OSError, SystemExit):
            time.sleep(0.2)
    return gwp, clp, gw_port, fwd


def at_rest(args: argparse.Namespace, key: Path, sport: int, cpus: set[int] | None) -> None:
    """No flood: this tree's relay and ``--base-src``'s, both up, measured in turn
    (``--rounds`` rounds: each a bulk download on each, the order swapped each round, then
    ``--requests`` requests on each, one by one alternately): the same host load for both.
    Also the CPU seconds their gateway and client processes took over all rounds."""
    base_env = {**os.environ, "PYTHONPATH": str(Path(args.base_src).resolve())}
    pairs = {"this": start_relay(key, sport, _on_cpus(cpus)),
             "base": start_relay(key, sport, _on_cpus(cpus), env=base_env)}  # fmt: skip
    bulk: dict[str, list[float]] = {"this": [], "base": []}
    reqs: dict[str, list[float]] = {"this": [], "base": []}
    ratios: list[tuple[float, float]] = []

    def used_s(name: str) -> float:
        return cpu_s(pairs[name][0].pid) + cpu_s(pairs[name][1].pid)

    try:
        for fwd in (p[3] for p in pairs.values()):
            fetch(fwd, int(args.mb * 1e6))  # warm
        cpu0 = {name: used_s(name) for name in pairs}
        for i in range(args.rounds):
            order = ("this", "base") if i % 2 == 0 else ("base", "this")
            for name in order:
                bulk[name].append(args.mb * 8 / fetch(pairs[name][3], int(args.mb * 1e6)))
            got: dict[str, list[float]] = {"this": [], "base": []}
            for _ in range(args.requests):
                for name in order:
                    got[name].append(fetch(pairs[name][3], REQUEST_BYTES) * 1e3)
            for name in pairs:
                reqs[name] += got[name]
            medians = {name: statistics.median(got[name]) for name in pairs}
            ratios.append((bulk["this"][-1] / bulk["base"][-1], medians["this"] / medians["base"]))
        used = {name: used_s(name) - cpu0[name] for name in pairs}
    finally:
        for gwp, clp, _, _ in pairs.values():
            for p in (gwp, clp):
                p.terminate()
                p.wait(10)
    for name in pairs:
        print(f"{name}: bulk {statistics.median(bulk[name]):.0f} Mbit/s, request "
              f"{statistics.median(reqs[name]):.2f} ms (median of {len(reqs[name])}), "
              f"gateway + client CPU {used[name]:.2f} s")  # fmt: skip
    good = sorted(g for g, _ in ratios)
    req = sorted(r for _, r in ratios)
    overall = statistics.median(reqs["this"]) / statistics.median(reqs["base"])
    print(f"this / base: request {overall:.3f}, "
          f"CPU {used['this'] / used['base']:.3f}; per round: bulk median "
          f"{statistics.median(good):.3f} ({good[0]:.2f}-{good[-1]:.2f}), request median "
          f"{statistics.median(req):.3f} ({req[0]:.2f}-{req[-1]:.2f}); "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip


async def hello_cost(args: argparse.Namespace) -> None:
    """What answering a flooded HELLO with a cookie (WireGuard's cookie reply, QUIC's
    Retry) would cost the gateway against what a copied-tag HELLO costs it today, per
    HELLO read, in Python, alternately, ``--rounds`` rounds of 5,000: the gateway's own
    path for a HELLO with a listed tag and a random body (the ledger, the tag, the AEAD
    check that fails), and a cookie reply: an HMAC over the source address and port
    under a secret, a second HMAC binding the reply to the HELLO's AEAD tag (so an
    on-path forger cannot plant a cookie), and one ``sendto`` of the 49-byte reply; and
    ``bare``, the cookie alone (33 bytes, one HMAC)."""
    import hmac

    from tierwise.relay.gateway import Gateway

    psk = os.urandom(32)
    gateway = Gateway(psk, set())
    gateway._admission(time.time())
    tag = admission_tag(admission_key(psk), time.time())
    hellos = []
    for _ in range(5000):
        body = bytearray(os.urandom(wire.HELLO_BYTES))
        body[0] = wire.HELLO
        body[wire.HELLO_TIME_AT : wire.HELLO_TIME_AT + 8] = time.time_ns().to_bytes(8, "big")
        body[wire.HELLO_VERSION_AT] = wire.HELLO_VERSION
        body[wire.HELLO_ADMIT_AT : wire.HELLO_ADMIT_AT + 8] = tag
        hellos.append(bytes(body))
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setblocking(False)
    to, secret, mac_key = sink.getsockname(), os.urandom(32), os.urandom(32)
    src = ("127.0.0.1", 40000)

    def today() -> None:
        receive = gateway._receive
        for data in hellos:
            receive(data, src)

    def cookie() -> None:
        for data in hellos:
            made = hmac.digest(secret, f"{src[0]}:{src[1]}".encode(), "sha256")[:16]
            mac = hmac.digest(mac_key, data[:17] + made + data[-16:], "sha256")[:16]
            try:
                tx.sendto(data[:17] + made + mac, to)
            except BlockingIOError:
                pass

    def bare() -> None:  # the cookie alone, unauthenticated: the least a reply can cost
        for data in hellos:
            made = hmac.digest(secret, f"{src[0]}:{src[1]}".encode(), "sha256")[:16]
            try:
                tx.sendto(data[:17] + made, to)
            except BlockingIOError:
                pass

    runs = {"today": today, "cookie": cookie, "bare": bare}
    per: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(args.rounds):
        for name, fn in sorted(runs.items(), reverse=i % 2 == 1):
            t0 = time.perf_counter()
            fn()
            per[name].append((time.perf_counter() - t0) / len(hellos) * 1e6)
    print(f"load {os.getloadavg()[0]:.2f}; per HELLO read, median of {args.rounds} rounds:")
    for name, values in per.items():
        print(f"  {name:7} {statistics.median(values):.2f} µs "
              f"(range {min(values):.2f}–{max(values):.2f})")  # fmt: skip
    for name in ("cookie", "bare"):
        ratio = statistics.median(per[name]) / statistics.median(per["today"])
        print(f"  {name} / today: {ratio:.2f}")
    print(f"  gateway drops: {dict((k, v) for k, v in gateway.counters.items() if v)}")


def kernel_cost(args: argparse.Namespace) -> None:
    """At rest, what the steering costs a session's datagram: 1,200-byte DATA datagrams
    sent and read back over loopback (the receive path, the programs included, runs in
    the sender's system call) into a plain socket and into the gateway's three sockets
    with the steering for ``--sessions`` sessions (this datagram's the last checked),
    alternately, ``--rounds`` rounds of 20,000. Nanoseconds per datagram, send and read."""
    sessions = [(os.urandom(8), ("127.0.0.1", 20000 + i)) for i in range(args.sessions)]
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    cid = sessions[-1][0]
    sessions[-1] = (cid, tx.getsockname())
    payload = bytes([wire.DATA]) + cid + os.urandom(1200 - 9)
    plain = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    plain.bind(("127.0.0.1", 0))
    group = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    for sock in group:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    group[0].bind(("127.0.0.1", 0))
    kfilter.attach(group[1], kfilter.hello_program(tags=[os.urandom(8)]))
    kfilter.attach(group[2], kfilter.moved_program([c for c, _ in sessions]))
    for sock in group[1:]:
        sock.bind(group[0].getsockname())
    if not kfilter.attach_steering(group[0], kfilter.steer_program(sessions)):
        raise SystemExit("the kernel refused the steering program")
    ns: dict[str, list[float]] = {"plain": [], "steered": []}
    for i in range(args.rounds):
        for name in ("plain", "steered") if i % 2 == 0 else ("steered", "plain"):
            ns[name].append(_ns_a_datagram(tx, plain if name == "plain" else group[0], payload))
    plain_ns, steered_ns = statistics.median(ns["plain"]), statistics.median(ns["steered"])
    print(f"send + read of a 1,200 B datagram: plain {plain_ns:.0f} ns, steered "
          f"({args.sessions} sessions) {steered_ns:.0f} ns: +{steered_ns - plain_ns:.0f} ns "
          f"(medians of {args.rounds}); load {os.getloadavg()[0]:.2f}")  # fmt: skip


def token_cost(args: argparse.Namespace) -> None:
    """At rest, what the client's token window costs: a token in Python (the sender's per
    packet, and the receiver's check before the AEAD), a window reload (the block's
    tokens, the program, ``SO_ATTACH_FILTER`` on a real socket), and the kernel's run of
    the program per datagram (1,200-byte DATA sent and read back over loopback into a
    plain socket and one with the window, alternately); ``--rounds`` rounds each."""
    from tierwise.proto.relay.crypto import PacketTokens
    from tierwise.relay.client import RELOAD_AT, TOKEN_BEHIND, TOKEN_WINDOW

    tokens, cid = PacketTokens(os.urandom(32)), os.urandom(8)
    window = kfilter.TokenWindow(TOKEN_WINDOW)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    plain, windowed = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    for sock in (plain, windowed):
        sock.bind(("127.0.0.1", 0))

    def reload(first: int) -> None:
        block = window.block(first, tokens.tokens(first, TOKEN_WINDOW), range(TOKEN_BEHIND))
        if not kfilter.attach_raw(windowed, kfilter.client_window_program([cid], [(cid, block)])):
            raise SystemExit("the kernel refused the token window")

    every = RELOAD_AT * (TOKEN_WINDOW - TOKEN_BEHIND) // 4  # packets between reloads
    per: dict[str, list[float]] = {"token": [], "reload": [], "plain": [], "windowed": []}
    for r in range(args.rounds):
        first = r * 100_000
        t0 = time.perf_counter_ns()
        for pn in range(first, first + 100_000):
            tokens.token(pn)
        per["token"].append((time.perf_counter_ns() - t0) / 100_000)
        t0 = time.perf_counter_ns()
        for i in range(100):
            reload(first + i * every)
        per["reload"].append((time.perf_counter_ns() - t0) / 100)
        reload(first)
        # the middle of the window: log2(1024) compares down the tree
        datagram = wire.DATA_HEADER.pack(wire.DATA, cid, first + 600, tokens.token(first + 600))
        datagram += os.urandom(1200 - len(datagram))
        for name in ("plain", "windowed") if r % 2 == 0 else ("windowed", "plain"):
            per[name].append(_ns_a_datagram(tx, plain if name == "plain" else windowed, datagram))
    med = {name: statistics.median(v) for name, v in per.items()}
    print(f"window {TOKEN_WINDOW} numbers ({window.insns} instructions), medians of "
          f"{args.rounds} rounds; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"  token (sender per packet; receiver's check alike): {med['token']:.0f} ns")
    print(f"  reload (tokens, program, attach): {med['reload'] / 1e3:.0f} µs; at 20,000 "
          f"packets/s (one every {every}): {med['reload'] * 20_000 / every / 1e7:.2f} % "
          f"of a core")  # fmt: skip
    print(f"  send + read of 1,200 B: plain {med['plain']:.0f} ns, windowed "
          f"{med['windowed']:.0f} ns: +{med['windowed'] - med['plain']:.0f} ns")  # fmt: skip


def _on_cpus(cpus: set[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that pins the child to ``cpus`` (None: leave it where it is)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def report(rows: list[tuple[str, dict, int, float]]) -> None:
    """Each class against the median quiet run, and (where it ran) the ``spin`` control:
    the request's ratio to a host that only lost the flooder's core."""
    quiet = [r for k, r, _, _ in rows if k == "quiet"]
    q_good = statistics.median(r["goodput_mbit"] for r in quiet)
    q_req = statistics.median(r["request_ms"] for r in quiet)
    q_ses = statistics.median(r["session_s"] for r in quiet)
    spins = [r["request_ms"] for k, r, _, _ in rows if k == "spin"]
    s_req = statistics.median(spins) if spins else float("nan")
    print(f"quiet (median of {len(quiet)}): bulk {q_good:.0f} Mbit/s, request "
          f"{q_req:.1f} ms, new session {q_ses * 1e3:.0f} ms")  # fmt: skip
    print(f"{'class':22} {'flood/s':>9} {'bulk':>14} {'request':>16} {'× spin':>7} "
          f"{'session':>9}  gateway CPU s, drops")  # fmt: skip
    for kind, r, sent, cpu in rows:
        if kind == "quiet":
            continue
        good = r["goodput_mbit"] / q_good
        req = r["request_ms"] / q_req
        ok = good >= 0.5 and req <= 1.5 and r["session_s"] <= 2.0
        print(f"{kind:22} {sent:>9.0f} "
              f"{r['goodput_mbit']:>6.0f} ({good:4.0%}) {r['request_ms']:>7.1f} ms ×{req:4.2f} "
              f"×{r['request_ms'] / s_req:5.2f} {r['session_s']:>7.2f} s  {cpu:.1f} {r['drops']} "
              f"{'ok' if ok else 'MISSED'}")  # fmt: skip


if __name__ == "__main__":
    run(main)
