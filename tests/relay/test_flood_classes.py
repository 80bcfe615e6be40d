"""Each class of hostile traffic, as fast as one core sends it, at the gateway's port and
at the client's: established sessions carry on, a new client gets in.

Gateway and client run as processes; ``tests/relay/flooder.py`` floods for at most
``FLOOD_S`` (sendmmsg; the spoofed classes use a raw socket: root). The bounds are
loose, for a loaded 2-core host that also runs the flooder; the goals (bulk ≥ 50 %,
request ≤ 1.5×, new session ≤ 2 s) are measured by benchmarks/relay_flood.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.relay.flooder import sized_source
from tests.relay.test_cli import CLI, free_port
from tierwise.relay.client import Client

pytestmark = pytest.mark.slow

FLOODER = Path(__file__).with_name("flooder.py")
FLOOD_S = 40.0  # at most: stopped once measured
REQUEST_BYTES = 354_640
BULK_BYTES = 5_000_000
ROOT = os.geteuid() == 0


def fetch(port: int, nbytes: int) -> float:
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(nbytes.to_bytes(8, "big"))
        got = 0
        while got < nbytes and (chunk := s.recv(1 << 18)):
            got += len(chunk)
    assert got == nbytes
    return time.perf_counter() - start


def udp_port_of(pid: int) -> int:
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
    raise AssertionError("no UDP socket")


class Relay:
    """A gateway process (with --stats), a client process forwarding to a source thread,
    and a second session in this process whose datagrams are recorded (to replay)."""

    def __init__(self, tmp: Path) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=sized_source, args=(self.server,), daemon=True).start()
        sport = self.server.getsockname()[1]
        key = tmp / "relay.key"
        subprocess.run([*CLI, "relay", "keygen", "--out", str(key)], check=True)
        self.psk = bytes.fromhex(key.read_text().strip())
        self.gw_port, self.fwd, self.stats_port = (
            free_port(socket.SOCK_DGRAM), free_port(), free_port(),
        )  # fmt: skip
        common = ["--key-file", str(key), "--log-level", "warning"]
        self.procs = [
            subprocess.Popen([*CLI, "relay", "gateway", "--listen", f"127.0.0.1:{self.gw_port}",
                              "--allow", f"127.0.0.1:{sport}", "--stats",
                              f"127.0.0.1:{self.stats_port}", *common]),
            subprocess.Popen([*CLI, "relay", "client", "--gateway", f"127.0.0.1:{self.gw_port}",
                              "--forward", f"127.0.0.1:{self.fwd}=127.0.0.1:{sport}", *common]),
        ]  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                fetch(self.fwd, 1000)
                break
            except (OSError, AssertionError):
                assert time.monotonic() < deadline, "the relay did not come up"
                time.sleep(0.2)
        self.client_cid = self.stats()["sessions"][0]["id"]
        self.client_port = udp_port_of(self.procs[1].pid)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.recorded: list[bytes] = []
        self.second = Client(self.psk, ("127.0.0.1", self.gw_port))
        asyncio.run_coroutine_threadsafe(self._second(), self.loop).result(20)

    async def _second(self) -> None:
        await self.second.start()
        await asyncio.wait_for(self.second.ready.wait(), 10)
        transport = self.second._transport
        assert transport is not None
        inner = transport.send_many

        def send_many(datagrams: list) -> None:  # type: ignore[type-arg]
            self.recorded.extend(bytes(d) for d, _ in datagrams[: 500 - len(self.recorded)])
            inner(datagrams)

        transport.send_many = send_many  # type: ignore[method-assign]
        for _ in range(50):
            self.second._probe()
            await asyncio.sleep(0.002)

    @property
    def second_cid(self) -> str:
        assert self.second.session is not None
        return self.second.session.conn.connection_id.hex()

    def stats(self) -> dict:
        url = f"http://127.0.0.1:{self.stats_port}/stats"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.second.close)
        for p in self.procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.server.close()


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    r = Relay(tmp_path)
    yield r
    r.close()


def new_session_s(psk: bytes, port: int) -> float:
    async def go() -> float:
        client = Client(psk, ("127.0.0.1", port))
        t0 = time.perf_counter()
        try:
            await client.start()
            await asyncio.wait_for(client.ready.wait(), 10)
            return time.perf_counter() - t0
        finally:
            client.close()

    return asyncio.run(go())


def flood_args(kind: str, relay: Relay, tmp: Path) -> list[str]:
    gw, cl = f"--to=127.0.0.1:{relay.gw_port}", f"--to=127.0.0.1:{relay.client_port}"
    as_gateway = f"--spoof=127.0.0.1:{relay.gw_port}"
    if kind == "replay":
        path = tmp / "replay.hex"
        path.write_text("\n".join(d.hex() for d in relay.recorded))
        return [gw, "--kind", "file", "--payloads", str(path)]
    return {
        "random": [gw, "--kind", "random"],
        "unknown": [gw, "--kind", "unknown"],
        # HELLO-shaped, dated now, without the key's admission tag: the kernel drops it
        # before the HELLO queue, so a new client's HELLO is read at once
        "hello": [gw, "--kind", "hello"],
        # the same with a current admission tag copied from the path: the gateway strikes
        # the tag, and the kernel drops the rest
        "hello-observed": [gw, "--kind", "hello", "--tag", observed_tag(relay.psk)],
        "badtag": [gw, "--kind", "badtag", "--cid", relay.second_cid],
        "spoofed": [gw, "--kind", "badtag", "--cid", relay.second_cid, "--spoof", "random:0"],
        "client-random": [cl, "--kind", "random", as_gateway],
        "client-unknown": [cl, "--kind", "unknown", as_gateway],
        "client-hello": [cl, "--kind", "hello", as_gateway],
        "client-badtag": [cl, "--kind", "badtag", "--cid", relay.client_cid, as_gateway],
        # the numbers the gateway sends next, as read off the path (without their tokens:
        # the client's token window drops them in the kernel; they took bulk to 4 %)
        "client-badtag-pn": [
            cl,
            "--kind",
            "badtag",
            "--cid",
            relay.client_cid,
            "--pn-from",
            str(next_pn(relay)),
            "--pn-step",
            "8",
            as_gateway,
        ],
    }[kind]


def next_pn(relay: Relay) -> int:
    """The packet number the gateway sends the client next (its packets sent so far)."""
    (entry,) = [e for e in relay.stats()["sessions"] if e["id"] == relay.client_cid]
    return int(entry["packets_sent"])


def observed_tag(psk: bytes) -> str:
    from tierwise.proto.relay.crypto import admission_key, admission_tag

    return admission_tag(admission_key(psk), time.time()).hex()


CLASSES = ["random", "unknown", "hello", "hello-observed", "replay", "badtag", "spoofed",
           "client-random", "client-unknown", "client-hello", "client-badtag",
           "client-badtag-pn"]  # fmt: skip


@pytest.mark.parametrize("kind", CLASSES)
def test_a_flood_class_leaves_sessions_and_admission_working(
    kind: str, relay: Relay, tmp_path: Path
) -> None:
    if ("spoofed" in kind or kind.startswith("client-")) and not ROOT:
        pytest.skip("spoofed sources need a raw socket (root)")
    quiet = [fetch(relay.fwd, REQUEST_BYTES) for _ in range(5)]
    quiet_bulk = fetch(relay.fwd, BULK_BYTES)
    before = relay.stats()["totals"]
    args = flood_args(kind, relay, tmp_path)
    flood = subprocess.Popen(
        [sys.executable, str(FLOODER), "--seconds", str(FLOOD_S), *args],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        session_s = new_session_s(relay.psk, relay.gw_port)
        loud = [fetch(relay.fwd, REQUEST_BYTES) for _ in range(5)]
        loud_bulk = fetch(relay.fwd, BULK_BYTES)
        running = flood.poll() is None
    finally:
        flood.terminate()
        out = flood.communicate(timeout=30)[0].split()
    sent, elapsed = int(out[0]), float(out[1])
    after = relay.stats()["totals"]
    drops = {
        k: after[k] - before[k] for k in after if k.startswith("dropped_") and after[k] != before[k]
    }
    ratio = statistics.median(loud) / statistics.median(quiet)
    print(
        f"\n{kind}: {sent / elapsed:.0f} datagrams/s; request ×{ratio:.2f}, bulk "
        f"{quiet_bulk / loud_bulk:.0%} of quiet, new session {session_s * 1e3:.0f} ms; {drops}"
    )
    assert sent > 20_000
    assert running, "the measurement outlasted the flood"
    assert session_s < 5.0
    if kind == "hello":  # the goal: nothing of the flood reaches the HELLO queue
        assert session_s < 2.0
        assert drops.get("dropped_auth", 0) == 0 and drops["dropped_kernel"] > sent * 0.9
    if kind == "hello-observed":  # its tag struck after a few reads: the kernel's drops
        assert session_s < 2.0 and after["hello_tags_struck"] > before["hello_tags_struck"]
        assert drops.get("dropped_auth", 0) < sent * 0.1 and drops["dropped_kernel"] > sent * 0.9
    # not the goal (benchmarks/relay_flood.py measures that, pinned and not): the fault
    # class this guards is a flood that takes sessions off the air (a download once
    # stalled for the whole flood, ×46); unpinned on a loaded 2-core host the flooder's
    # core alone costs ×2–7, so the bound leaves room for that and no more
    assert ratio < 12.0
    assert loud_bulk < quiet_bulk * 12
    if not kind.startswith("client-"):  # counted where an operator looks
        assert sum(drops.values()) > sent * 0.5
