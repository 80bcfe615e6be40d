"""A bounded UDP flooder for the relay's flood tests and benchmarks (loopback, or the lab's
own paths from inside a lab namespace).

``python tests/relay/flooder.py --to 127.0.0.1:PORT --kind random --seconds 3``
sends as fast as one core can (``sendmmsg`` of ``BATCH`` datagrams a call, through
ctypes), or ``--rate`` datagrams a second, for at most ``--seconds`` and ``--max``
datagrams, then prints how many it sent and exits. Kinds:

``random``   random bytes, 20–1300 long
``unknown``  a DATA header naming a random session id, random body
``hello``    HELLO-shaped: type HELLO, ``HELLO_BYTES`` long, dated now, random
             otherwise (no admission tag: the gateway's kernel drops it); with
             ``--tag HEX``, this version and that admission tag (one seen on the path:
             the gateway gets as far as its AEAD check)
``badtag``   DATA naming ``--cid`` (a live session), random body and tag; a random
             packet number, or with ``--pn-from N`` plausible ones, ``N``, ``N +
             --pn-step``, … (an on-path attacker reading the session's numbers; the
             packet-number token, which it cannot know before the packet is sent,
             random)
``file``     the datagrams in ``--payloads`` (hex, one a line) in turn: authentic
             datagrams recorded from a session, replayed
``spin``     nothing sent: one core kept busy as long (the control: what losing a
             core to the flooder costs, whatever it sends)
``nap``      nothing sent: a 100 µs sleep in a loop, next to no CPU (a pinned
             benchmark's quiet peer: on this VM a wholly idle core made a relay
             pinned to the other one 4-5 × slower, as if the kernel packed other
             tasks onto the busy core)

``--spoof HOST:PORT`` sends from that address (a raw socket with its own IP header,
root only; port 0: a random port each datagram; host ``random``: a random address in
127.0.0.0/8 each datagram). Only loopback destinations are accepted.
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import os
import random
import signal
import socket
import struct
import sys
import time
from pathlib import Path

HELLO, DATA = 1, 3
HELLO_BYTES = 1200
HELLO_TIME_AT = 17 + 32 + 16
HELLO_VERSION = 2  # proto.relay.wire.HELLO_VERSION
HELLO_ADMIT_AT = HELLO_TIME_AT + 9  # after the version byte
BATCH = 64
POOL = 1024


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(_Iovec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint)]


def _sockaddr_in(host: str, port: int) -> bytes:
    return struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton(host))


def payloads(
    kind: str,
    cid: bytes | None,
    path: str | None,
    tag: bytes | None = None,
    pn_from: int | None = None,
    pn_step: int = 1,
) -> list[bytes]:
    rng = random.Random(1)
    out = []
    if kind == "file":
        assert path is not None
        with open(path) as f:
            out = [bytes.fromhex(line) for line in f if line.strip()]
        return out or [os.urandom(64)]
    for i in range(POOL):
        if kind == "random":
            out.append(os.urandom(20 + rng.randrange(1280)))
        elif kind == "unknown":
            out.append(bytes([DATA]) + os.urandom(16 + 40 + rng.randrange(1200)))
        elif kind == "hello":
            body = bytearray(os.urandom(HELLO_BYTES))
            body[0] = HELLO
            struct.pack_into(">Q", body, HELLO_TIME_AT, time.time_ns() + i)
            if tag is not None:
                body[HELLO_ADMIT_AT - 1 : HELLO_ADMIT_AT + len(tag)] = bytes([HELLO_VERSION]) + tag
            out.append(bytes(body))
        elif kind == "badtag":
            assert cid is not None
            pn = os.urandom(8) if pn_from is None else struct.pack(">Q", pn_from + i * pn_step)
            out.append(bytes([DATA]) + cid + pn + os.urandom(40 + rng.randrange(1200)))
        else:
            raise SystemExit(f"unknown kind {kind!r}")
    return out


def _ip_udp(src: tuple[str, int], dst: tuple[str, int], data: bytes) -> bytes:
    udp = struct.pack(">HHHH", src[1], dst[1], 8 + len(data), 0)  # checksum 0: none (IPv4)
    ip = struct.pack(
        ">BBHHHBBH4s4s", 0x45, 0, 20 + 8 + len(data), 0, 0x4000, 64, socket.IPPROTO_UDP, 0,
        socket.inet_aton(src[0]), socket.inet_aton(dst[0]),
    )  # fmt: skip
    return ip + udp + data


SOURCE_BLOCK = os.urandom(1 << 16)


def sized_source(server: socket.socket) -> None:
    """The flood tests' and benchmark's service: each connection reads an 8-byte size,
    gets that many bytes back and is closed; returns when ``server`` is closed."""
    import threading

    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=_serve_sized, args=(conn,), daemon=True).start()


def _serve_sized(conn: socket.socket) -> None:
    with conn:
        try:
            got = b""
            while len(got) < 8 and (chunk := conn.recv(8 - len(got))):
                got += chunk
            left = int.from_bytes(got, "big")
            while left > 0:
                left -= conn.send(SOURCE_BLOCK[: min(left, len(SOURCE_BLOCK))])
        except OSError:
            pass


LAB_SUBNET = ipaddress.ip_network("10.77.0.0/16")  # tierwise.lab.bench.path's paths


def _in_a_lab_namespace(host: str) -> bool:
    """``host`` is on a lab path and this process runs in one of the lab's namespaces
    (``ip netns exec tw-…`` into its server side): the flood stays inside the lab."""
    if ipaddress.ip_address(host) not in LAB_SUBNET:
        return False
    try:
        here = os.stat("/proc/self/ns/net").st_ino
        return any(here == ns.stat().st_ino for ns in Path("/run/netns").glob("tw-*"))
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--to", required=True)
    ap.add_argument("--kind", default="random")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--max", type=int, default=50_000_000)
    ap.add_argument("--rate", type=float, default=0.0, help="datagrams/s (0: as fast as it can)")
    ap.add_argument("--cid", default=None, help="a session id in hex (badtag)")
    ap.add_argument("--payloads", default=None)
    ap.add_argument("--tag", default=None, help="an admission tag in hex (hello)")
    ap.add_argument("--spoof", default=None, help="HOST:PORT to send from (raw socket)")
    ap.add_argument("--pn-from", type=int, default=None, help="badtag: plausible numbers")
    ap.add_argument("--pn-step", type=int, default=1)
    args = ap.parse_args(argv)
    host, _, port = args.to.rpartition(":")
    dst = (host, int(port))
    if not (ipaddress.ip_address(host).is_loopback or _in_a_lab_namespace(host)):
        raise SystemExit("the flooder sends to loopback or, inside a lab namespace, the lab only")
    seconds = min(args.seconds, 120.0)
    if args.kind in ("spin", "nap"):
        stop_spin: list[int] = []
        signal.signal(signal.SIGTERM, lambda *_: stop_spin.append(1))
        nap_s = 0.0001 if args.kind == "nap" else 0.0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds and not stop_spin:
            if nap_s:
                time.sleep(nap_s)
        print(0, f"{time.monotonic() - t0:.3f}")
        return 0
    cid = bytes.fromhex(args.cid) if args.cid else None
    tag = bytes.fromhex(args.tag) if args.tag else None
    pool = payloads(args.kind, cid, args.payloads, tag, args.pn_from, args.pn_step)
    if args.spoof:
        shost, _, sport = args.spoof.rpartition(":")
        rng = random.Random(2)
        packets = []
        for i, data in enumerate(pool * max(1, POOL // len(pool))):
            src_host = shost if shost != "random" else f"127.{rng.randrange(256)}.{i % 256}.9"
            src_port = int(sport) or 1024 + rng.randrange(60000)
            packets.append(_ip_udp((src_host, src_port), dst, data))
        pool = packets
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        name = _sockaddr_in(dst[0], 0)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        name = _sockaddr_in(*dst)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    libc = ctypes.CDLL(None, use_errno=True)
    keep = [ctypes.create_string_buffer(p, len(p)) for p in pool]
    addr = ctypes.create_string_buffer(name, len(name))
    n = len(pool)
    ring = (_Mmsghdr * (n + BATCH))()
    iovs = (_Iovec * (n + BATCH))()
    for i in range(n + BATCH):
        buf = keep[i % n]
        iovs[i].base, iovs[i].len = ctypes.addressof(buf), len(pool[i % n])
        h = ring[i].hdr
        h.name, h.namelen = ctypes.addressof(addr), len(name)
        h.iov, h.iovlen = ctypes.pointer(iovs[i]), 1
    fd = sock.fileno()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))  # stop early, still report
    sent, t0 = 0, time.monotonic()
    while sent < args.max and not stop:
        now = time.monotonic() - t0
        if now >= seconds:
            break
        want = BATCH
        if args.rate:
            due = int(now * args.rate) - sent
            if due <= 0:
                time.sleep(0.001)
                continue
            want = min(BATCH, due)
        want = min(want, args.max - sent)
        start = sent % n
        got = libc.sendmmsg(fd, ctypes.byref(ring, start * ctypes.sizeof(_Mmsghdr)), want, 0)
        if got > 0:
            sent += got
        elif ctypes.get_errno() not in (0, 11, 105):  # EAGAIN, ENOBUFS: try again
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    print(sent, f"{time.monotonic() - t0:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
