"""The batching UDP endpoint on real loopback sockets: batches in, GSO runs out, fallback."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Callable

from tierwise.relay.batchudp import (
    MAX_BATCH,
    SOL_UDP,
    UDP_GRO,
    UDP_SEGMENT,
    BatchTransport,
    open_batch_endpoint,
)


class Recorder(asyncio.DatagramProtocol):
    """Records each batch it is handed."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[bytes, tuple]]] = []
        self.arrivals: list[list[float]] = []
        self.got = asyncio.Event()

    def datagrams_received(
        self, batch: list[tuple[bytes, tuple]], arrivals: list[float] | None = None
    ) -> None:
        self.batches.append(batch)
        self.arrivals.append(arrivals or [])
        self.got.set()

    @property
    def datagrams(self) -> list[bytes]:
        return [data for batch in self.batches for data, _ in batch]


def _peer() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.settimeout(2)
    return sock


def test_queued_datagrams_arrive_as_one_batch() -> None:
    """Datagrams waiting in the socket are handed over in one call, bounded per wake-up."""

    async def run() -> list[list[tuple[bytes, tuple]]]:
        proto = Recorder()
        transport = await open_batch_endpoint(proto, local_addr=("127.0.0.1", 0))
        port = transport.get_extra_info("sockname")[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for i in range(MAX_BATCH + 10):  # sent before the loop can read any
                tx.sendto(i.to_bytes(2, "big") * 100, ("127.0.0.1", port))
        while len(proto.datagrams) < MAX_BATCH + 10:
            proto.got.clear()
            await asyncio.wait_for(proto.got.wait(), 2)
        transport.close()
        return proto.batches

    batches = asyncio.run(run())
    assert [len(b) for b in batches] == [MAX_BATCH, 10]
    flat = [data for batch in batches for data, _ in batch]
    assert flat == [i.to_bytes(2, "big") * 100 for i in range(MAX_BATCH + 10)]


def test_arrival_times_are_the_kernels_not_the_read() -> None:
    """A datagram read 100 ms after it arrived is handed over with its arrival time (the
    kernel's stamp on the loop's clock), so a busy reader's delay is not the path's."""

    async def run() -> tuple[list[float], float, float]:
        loop = asyncio.get_running_loop()
        proto = Recorder()
        transport = await open_batch_endpoint(proto, local_addr=("127.0.0.1", 0))
        assert isinstance(transport, BatchTransport) and transport.stamps
        port = transport.get_extra_info("sockname")[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            await _until_stamped(proto, lambda: tx.sendto(b"warm", ("127.0.0.1", port)))
            sent = loop.time()
            tx.sendto(b"early", ("127.0.0.1", port))
            time.sleep(0.1)  # the loop is busy: nothing reads the socket meanwhile
            tx.sendto(b"late", ("127.0.0.1", port))
        while len(proto.datagrams) < 2:
            proto.got.clear()
            await asyncio.wait_for(proto.got.wait(), 2)
        read = loop.time()
        transport.close()
        return [t for batch in proto.arrivals for t in batch], sent, read

    arrivals, sent, read = asyncio.run(run())
    assert len(arrivals) == 2
    # kernel arrival times, not read times: both were read at once after the second, yet
    # they are the 0.1 s sleep apart (the upper bounds only allow for a loaded host)
    assert sent - 0.002 <= arrivals[0] <= sent + 0.5
    assert 0.09 <= arrivals[1] - arrivals[0] <= 0.6
    assert arrivals[1] <= read


async def _until_stamped(proto: Recorder, send: Callable[[], object]) -> None:
    """Wait until the kernel stamps arrivals, then forget what was read.

    The first socket that asks for ``SO_TIMESTAMPNS`` turns stamping on through a kernel
    work item (the ``netstamp_needed`` static key); until it has run, a datagram is
    stamped when it is read (2 of 60 runs on a loaded host). A datagram that waited
    20 ms in the socket must carry a stamp that much older than its read.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while True:
        proto.batches.clear()
        proto.arrivals.clear()
        send()
        time.sleep(0.02)  # the loop is busy: the datagram waits in the socket
        proto.got.clear()
        await asyncio.wait_for(proto.got.wait(), 2)
        if proto.arrivals[0] and proto.arrivals[0][0] <= loop.time() - 0.015:
            break
        assert loop.time() < deadline, "arrivals never carried the kernel's stamp"
        await asyncio.sleep(0.05)
    proto.batches.clear()
    proto.arrivals.clear()


def _send_and_read(datagrams: list[bytes]) -> tuple[list[bytes], bool]:
    """Send with ``send_many`` to a plain socket; what it read, and whether GSO stayed on."""

    async def run() -> bool:
        transport = await open_batch_endpoint(Recorder(), local_addr=("127.0.0.1", 0))
        assert isinstance(transport, BatchTransport)
        transport.send_many([(d, peer.getsockname()) for d in datagrams])
        await asyncio.sleep(0)
        gso = transport.gso
        transport.close()
        return gso

    with _peer() as peer:
        gso = asyncio.run(run())
        return [peer.recv(65535) for _ in datagrams], gso


def test_equal_size_runs_arrive_as_separate_datagrams() -> None:
    """A GSO run (equal sizes, a shorter last one) reaches the peer datagram by datagram."""
    datagrams = [bytes([i]) * 1200 for i in range(20)] + [b"tail" * 10, b"x" * 1300]
    got, _ = _send_and_read(datagrams)
    assert got == datagrams


def test_a_run_the_kernel_refuses_falls_back_to_single_sends(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A run larger than one UDP send (EMSGSIZE): each datagram is sent on its own, and GSO
    stays on (EMSGSIZE is about a size, as for a segment above the MTU, not a missing GSO)."""
    datagrams = [bytes([i % 256]) * 1000 for i in range(70)]

    def whole(datagrams: list, i: int) -> int:  # one run of 70 kB: more than one UDP send takes
        return len(datagrams)

    monkeypatch.setattr(BatchTransport, "_run_end", staticmethod(whole))
    got, gso = _send_and_read(datagrams)
    assert got == datagrams and gso is True


def test_a_kernel_without_gso_turns_it_off_for_good(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A run refused for want of GSO (ENOPROTOOPT, EINVAL, EIO): single sends from then on."""
    datagrams = [bytes([i]) * 1000 for i in range(10)]
    transmit = BatchTransport._transmit

    def no_gso(self: BatchTransport, run: list, addr: object) -> None:
        if len(run) > 1:
            raise OSError(errno.ENOPROTOOPT, "no UDP_SEGMENT")
        transmit(self, run, addr)

    monkeypatch.setattr(BatchTransport, "_transmit", no_gso)
    got, gso = _send_and_read(datagrams)
    assert got == datagrams and gso is False


def _gso_burst_read(gro: bool, sizes: list[int]) -> tuple[list[bytes], list[bytes], int, bool]:
    """One GSO ``sendmsg`` of datagrams of ``sizes`` into an endpoint: sent, read, reads, GRO."""
    sent = [bytes([i]) * n for i, n in enumerate(sizes)]

    async def run() -> tuple[list[bytes], int, bool]:
        proto = Recorder()
        transport = await open_batch_endpoint(proto, local_addr=("127.0.0.1", 0), gro=gro)
        assert isinstance(transport, BatchTransport)
        port = transport.get_extra_info("sockname")[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            cmsg = [(SOL_UDP, UDP_SEGMENT, sizes[0].to_bytes(2, "little"))]
            tx.sendmsg([b"".join(sent)], cmsg, 0, ("127.0.0.1", port))
        while len(proto.datagrams) < len(sent):
            proto.got.clear()
            await asyncio.wait_for(proto.got.wait(), 2)
        transport.close()
        return proto.datagrams, transport.reads, transport.gro

    got, reads, on = asyncio.run(run())
    return sent, got, reads, on


def test_a_gso_burst_is_read_in_one_call_and_cut_back_into_datagrams() -> None:
    """With UDP_GRO the kernel hands the burst over whole (one ``recvmsg``), and the
    endpoint cuts it at the segment size it reports: the same datagrams, in order,
    the shorter last one included."""
    sent, got, reads, on = _gso_burst_read(True, [1300] * 20 + [77])
    assert on, "this kernel refused UDP_GRO (Linux >= 5.0 has it)"
    assert got == sent
    assert reads < len(sent) // 4  # one call here; a busy kernel may split the run


def test_without_gro_each_datagram_is_one_read() -> None:
    """The fallback (a kernel without UDP_GRO, or ``gro=False``): the same burst arrives
    datagram by datagram, one system call each, with the same bytes."""
    sent, got, reads, on = _gso_burst_read(False, [1300] * 20 + [77])
    assert not on
    assert got == sent and reads == len(sent)


def test_gro_refused_by_the_socket_falls_back(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A kernel that refuses the option (ENOPROTOOPT) leaves GRO off; reads still work."""
    real = socket.socket.setsockopt

    def refuse(self, level, option, value):  # type: ignore[no-untyped-def]
        if (level, option) == (SOL_UDP, UDP_GRO):
            raise OSError(92, "Protocol not available")
        return real(self, level, option, value)

    monkeypatch.setattr(socket.socket, "setsockopt", refuse)
    sent, got, reads, on = _gso_burst_read(True, [900] * 8)
    assert not on
    assert got == sent and reads == len(sent)


def test_relay_sockets_never_fragment() -> None:
    """The endpoint's socket sets Don't Fragment in probe mode (IPv4 and IPv6)."""
    from tierwise.relay.batchudp import IP_MTU_DISCOVER, IP_PMTUDISC_PROBE, IPV6_MTU_DISCOVER

    async def run() -> list[int]:
        modes = []
        for host, level, option in (
            ("127.0.0.1", socket.IPPROTO_IP, IP_MTU_DISCOVER),
            ("::1", socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER),
        ):
            try:
                transport = await open_batch_endpoint(Recorder(), local_addr=(host, 0))
            except OSError:  # no IPv6 on this host
                continue
            assert isinstance(transport, BatchTransport) and transport.no_fragments
            modes.append(transport.get_extra_info("socket").getsockopt(level, option))
            transport.close()
        return modes

    modes = asyncio.run(run())
    assert modes and all(mode == IP_PMTUDISC_PROBE for mode in modes)


def test_an_oversize_datagram_is_counted_not_raised() -> None:
    """A datagram the kernel refuses for its size (EMSGSIZE) is counted and dropped; the
    protocol hears no error, GSO stays on, and the datagrams after it still leave."""

    class Errors(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.errors: list[Exception] = []

        def error_received(self, exc: Exception) -> None:
            self.errors.append(exc)

    async def run() -> tuple[int, bool, list[Exception], list[bytes]]:
        rx = _peer()
        proto = Errors()
        transport = await open_batch_endpoint(proto, remote_addr=rx.getsockname())
        assert isinstance(transport, BatchTransport)
        too_big = b"x" * 65_508  # beyond any IPv4 UDP payload: EMSGSIZE
        transport.send_many([(too_big, None), (b"a" * 500, None), (b"b" * 500, None)])
        got = [rx.recv(70_000), rx.recv(70_000)]
        transport.close()
        rx.close()
        return transport.oversize, transport.gso, proto.errors, got

    oversize, gso, errors, got = asyncio.run(run())
    assert oversize == 1 and gso and errors == []
    assert got == [b"a" * 500, b"b" * 500]
