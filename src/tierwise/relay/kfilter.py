"""Kernel-side drops for the relay's UDP sockets: classic BPF that runs before the queue.

A flood of datagrams that are not the relay's costs the gateway ~14 µs of Python
each, and before Python sees them they share the socket's receive queue with real
traffic: at a few hundred thousand a second the queue overflows and every session
stalls. The programs here run in the kernel at the sender's expense (in the softirq
of the datagram's arrival, on loopback the sender's own system call):

* :func:`steer_program`, a ``SO_REUSEPORT`` steering program
  (``SO_ATTACH_REUSEPORT_CBPF``) over the three sockets the gateway binds to its one
  port: a DATA datagram whose connection id and source address and port are those of a
  session goes to socket 0, the session socket (no filter of its own); other DATA to
  socket 2, the moved socket (:func:`moved_program`: DATA naming a session — a client
  that moved, or a replay or forgery from elsewhere); the rest to socket 1, the HELLO
  socket (:func:`hello_program`: type HELLO, at least ``HELLO_BYTES``, this version, and
  an admission tag of the gateway's key for a window near its clock: a HELLO-shaped flood
  from anyone without the key is dropped here, so a client's HELLO finds the queue
  empty; :mod:`tierwise.proto.relay.crypto`). A chain of
  compares per session (9 instructions over IPv4, 15 over IPv6), rebuilt and swapped
  atomically as sessions open, end and move.
* :func:`gateway_program`, where steering is refused, on the one socket: HELLOs (as
  :func:`hello_program`) and DATA naming a session in use. Random bytes, unknown ids, WELCOMEs,
  short datagrams are dropped. Past :data:`MAX_FILTER_IDS` ids the id chain is left out.
* :func:`client_program`, on the client's (connected) socket: WELCOME or DATA naming
  one of the client's session ids, with a packet number its sessions can have reached (a
  forgery's random 64-bit number is dropped: four instructions).
* :func:`client_window_program`, the same with the established session's next packet
  numbers listed with their tokens (:class:`~tierwise.proto.relay.crypto.PacketTokens`):
  a DATA of that session passes only with a number of the window, not one received
  before the program was built, and that number's token — so forgeries that copy the
  numbers off the path (which cannot know a token before its packet is sent), and
  replays of what was received, are dropped here. A binary tree on the number's offset
  in the window picks a bucket of 16 numbers whose tokens a chain compares
  (:class:`TokenWindow`: ~1.25 instructions a number, log2(size / 16) + up to 16
  compares a datagram); the client rebuilds it as the window advances (a template whose
  constants alone change).

What passes is checked as before (header parse, AEAD): the programs only decide what
is worth reading, and never drop a datagram the gateway could have accepted — a
retransmitted HELLO, a session's DATA from a new address (migration), a datagram of
any size the session could send. A datagram the socket filter drops counts in the
socket's drops, which the kernel reports with ``SO_RXQ_OVFL`` (with the queue's
overflows: both are datagrams Python never saw).

Classic BPF on a UDP socket sees the UDP header first (offset 0): the relay's header is
at :data:`UDP_HEADER_BYTES`. A reuseport program sees the payload at offset 0. Where
the kernel refuses a program (not Linux, an old kernel) the socket works unfiltered.
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import socket
import struct
import sys
from array import array
from collections.abc import Iterable

from tierwise.proto.relay import wire

__all__ = [
    "MAX_FILTER_IDS",
    "TokenWindow",
    "attach",
    "attach_or_loosen",
    "attach_raw",
    "attach_steering",
    "client_program",
    "client_window_program",
    "gateway_program",
    "hello_program",
    "moved_program",
    "steer_program",
]

log = logging.getLogger("tierwise.relay.kfilter")

SO_ATTACH_FILTER = 26  # asm-generic/socket.h
SO_DETACH_FILTER = 27
SO_ATTACH_REUSEPORT_CBPF = 51
BPF_MAXINSNS = 4096
UDP_HEADER_BYTES = 8
# five instructions per id and a few around: well inside BPF_MAXINSNS
MAX_FILTER_IDS = 768
# admission tags a HELLO may carry (one key: 9, see proto.relay.crypto); five
# instructions each, so well inside BPF_MAXINSNS beside nothing else
MAX_TAGS = 768
ACCEPT = 0xFFFFFFFF  # keep the whole datagram
DROP = 0

# linux/filter.h opcodes (classic BPF)
LD_W_ABS, LD_H_ABS, LD_B_ABS, LD_LEN, LD_IMM = 0x20, 0x28, 0x30, 0x80, 0x00
TAX, TXA, SUB_K = 0x07, 0x87, 0x14  # X = A; A = X; A -= k
NET = 0xFFF00000  # SKF_NET_OFF (-0x100000): loads relative to the IP header
JA, JEQ, JGT, JGE, JEQ_X = 0x05, 0x15, 0x25, 0x35, 0x1D
RET_K, RET_A = 0x06, 0x16

_INSN = struct.Struct("=HBBI")
_loosened = False  # a program was refused and loosened (warned once)
Insn = tuple[int, int, int, int]
_ID = struct.Struct(">II")


def _ret(k: int) -> Insn:
    return (RET_K, 0, 0, k)


def _shape(base: int) -> list[Insn]:
    """The datagram's relay type byte in A, or a drop if it is shorter than header and tag."""
    return [
        (LD_LEN, 0, 0, 0),
        (JGE, 1, 0, base + wire.HEADER_BYTES + wire.TAG_BYTES),
        _ret(DROP),
        (LD_B_ABS, 0, 0, base),
    ]


def gateway_program(
    ids: Iterable[bytes],
    base: int = UDP_HEADER_BYTES,
    tags: Iterable[bytes] | None = None,
    loose: bool = False,
) -> list[Insn]:
    """DATA naming one of ``ids`` (every well-shaped DATA past ``MAX_FILTER_IDS`` of
    them, or ``loose``); HELLOs too (for a socket that is not split from the HELLOs), as
    :func:`hello_program` with ``tags``."""
    ids = sorted(set(ids))
    prog = _shape(base)
    # A: type. HELLO: its own checks; DATA: its id; anything else: drop
    hello = hello_program(base, tags)
    prog += [(JEQ, 0, 1, wire.DATA), (JA, 0, 0, len(hello)), *hello]
    room = (BPF_MAXINSNS - len(prog) - 1) // 5  # the tags' chain shares the program
    prog += _ids_chain(ids, base, loose, min(room, MAX_FILTER_IDS))
    return prog


def _ids_chain(
    ids: list[bytes], base: int, loose: bool = False, most: int = MAX_FILTER_IDS
) -> list[Insn]:
    """From a DATA datagram: accept if its id is one of ``ids`` (any, ``loose``, or past
    ``most`` of them), else drop."""
    return _words_chain(ids, base + 1, -1 if loose else most)


def _words_chain(values: list[bytes], at: int, most: int) -> list[Insn]:
    """Accept if the 8 bytes at ``at`` are one of ``values`` (past ``most`` of them: any),
    else drop."""
    if len(values) > most:
        return [_ret(ACCEPT)]  # too many to list: the shape alone (Python checks the rest)
    prog: list[Insn] = []
    for value in sorted(set(values)):
        hi, lo = _ID.unpack(value)
        prog += [
            (LD_W_ABS, 0, 0, at),
            (JEQ, 0, 3, hi),
            (LD_W_ABS, 0, 0, at + 4),
            (JEQ, 0, 1, lo),
            _ret(ACCEPT),
        ]
    prog.append(_ret(DROP))
    return prog


def hello_program(base: int = UDP_HEADER_BYTES, tags: Iterable[bytes] | None = None) -> list[Insn]:
    """HELLOs: type HELLO, at least ``HELLO_BYTES`` long, and (``tags`` given) this
    version with one of ``tags`` as its admission tag (the gateway's key's tags for the
    windows near its clock; past ``MAX_TAGS`` of them, any tag: the shape alone)."""
    prog = [
        (LD_LEN, 0, 0, 0),
        (JGE, 1, 0, base + wire.HELLO_BYTES),
        _ret(DROP),
        (LD_B_ABS, 0, 0, base),
        (JEQ, 1, 0, wire.HELLO),
        _ret(DROP),
    ]
    if tags is None:
        return [*prog, _ret(ACCEPT)]
    prog += [
        (LD_B_ABS, 0, 0, base + wire.HELLO_VERSION_AT),
        (JEQ, 1, 0, wire.HELLO_VERSION),
        _ret(DROP),
    ]
    return prog + _words_chain(list(tags), base + wire.HELLO_ADMIT_AT, MAX_TAGS)


def _peer_words(addr: tuple) -> tuple[int, int, list[int]]:
    """Where a datagram from ``addr`` has its source port and address (offsets from the IP
    header, no options or extension headers) and the address as 32-bit words."""
    ip = ipaddress.ip_address(addr[0].split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # on an IPv6 socket: the datagram came over IPv4
    if ip.version == 4:
        return 20, 12, [int(ip)]
    raw = ip.packed
    return 40, 8, [int.from_bytes(raw[i : i + 4], "big") for i in range(0, 16, 4)]


def steer_program(peers: Iterable[tuple[bytes, tuple]] = (), loose: bool = False) -> list[Insn]:
    """``SO_REUSEPORT`` steering (payload at offset 0): a DATA datagram naming a session
    from that session's own address (``peers``: id, address) goes to socket 0, the
    session socket; other DATA (a session's datagrams from another address: a client that
    moved, or a replay) to socket 2, the moved socket; the rest (HELLOs) to socket 1, the
    HELLO socket; their filters and read budgets take it from there. Past
    ``BPF_MAXINSNS`` (9 instructions a peer over IPv4, 15 over IPv6: some 450 peers):
    HELLOs to 1, the rest to 0 (the session socket then filters
    nothing: every DATA is read, as without the programs); ``loose``: that at once (for
    a kernel that refuses the long program, :func:`attach_or_loosen`)."""
    peers = sorted(set(peers))
    prog: list[Insn] = [
        (LD_LEN, 0, 0, 0),
        (JGE, 1, 0, wire.HEADER_BYTES + wire.TAG_BYTES),
        _ret(1),
        (LD_B_ABS, 0, 0, 0),
        (JEQ, 1, 0, wire.DATA),
        _ret(1),
    ]
    miss = 2  # a DATA datagram from elsewhere: the moved socket
    shape_only = [*prog[:4], (JEQ, 0, 1, wire.HELLO), _ret(1), _ret(0)]
    if loose:
        return shape_only
    for cid, addr in peers:
        hi, lo = _ID.unpack(cid)
        port_at, addr_at, words = _peer_words(addr)
        tests = [
            (LD_W_ABS, 0, 0, 1), (JEQ, 0, 0, hi),
            (LD_W_ABS, 0, 0, 5), (JEQ, 0, 0, lo),
            (LD_H_ABS, 0, 0, NET + port_at), (JEQ, 0, 0, addr[1]),
        ]  # fmt: skip
        for i, word in enumerate(words):
            tests += [(LD_W_ABS, 0, 0, NET + addr_at + 4 * i), (JEQ, 0, 0, word)]
        length = len(tests) + 1  # and the return
        for i, (code, jt, _, k) in enumerate(tests):
            if code == JEQ:
                tests[i] = (code, jt, length - i - 1, k)  # a miss: the next peer's block
        prog += [*tests, _ret(0)]
        if len(prog) >= BPF_MAXINSNS:
            return shape_only
    prog.append(_ret(miss))
    return prog


def moved_program(
    ids: Iterable[bytes], base: int = UDP_HEADER_BYTES, loose: bool = False
) -> list[Insn]:
    """The moved socket's filter: DATA naming one of ``ids`` (a session's datagram from
    another address than its own: a client that moved, or a replay or forgery); ``loose``:
    any DATA."""
    prog = _shape(base)
    prog += [(JEQ, 1, 0, wire.DATA), _ret(DROP)]
    return prog + _ids_chain(sorted(set(ids)), base, loose)


def client_program(
    ids: Iterable[bytes], base: int = UDP_HEADER_BYTES, pn_high: int = 0
) -> list[Insn]:
    """The client's socket: WELCOME or DATA naming one of ``ids`` (its session ids),
    a DATA's packet number below ``(pn_high + 2) << 32`` (``pn_high``: the highest word of
    the largest number its sessions have received; a session's numbers start at 0 and
    grow by one a packet, so a forgery with a random 64-bit number — a live id copied, a
    bad tag — is dropped here, with odds 1 in 2^31 of passing)."""
    ids = sorted(set(ids))
    prog = _shape(base)
    prog += [
        (JEQ, 4, 0, wire.WELCOME),  # to the ids
        (JEQ, 0, 2, wire.DATA),
        (LD_W_ABS, 0, 0, base + 1 + 8),  # the packet number's high word
        (JGT, 0, 1, pn_high + 1),  # not above: to the ids
        _ret(DROP),
    ]
    prog += _ids_chain(ids, base)
    return prog


class TokenWindow:
    """A window of ``size`` packet numbers for :func:`client_window_program`: one block of
    instructions, with its own returns, that accepts a DATA datagram whose packet number
    is ``first … first + size − 1`` (``first``'s high word) and whose token is one of
    the tokens of its *bucket* (``BUCKET`` consecutive numbers of the window) not skipped
    (numbers received before the block was built); built once, then only its constants
    change (:meth:`block`).

    A binary tree on the number's offset in the window picks the bucket; the bucket
    compares the token with its numbers' tokens in a chain: ~1.25 instructions a number
    (a reload's cost is mostly the kernel's check and JIT of them), log2(size / BUCKET)
    + up to BUCKET compares a datagram. A token of another number of the same bucket
    passes here (Python checks the exact one before the AEAD): a forger who has not seen
    the bucket's tokens passes with odds ``BUCKET`` / 2^32."""

    BUCKET = 16

    def __init__(self, size: int, base: int = UDP_HEADER_BYTES) -> None:
        if not 2 * self.BUCKET <= size <= 2048 or size % self.BUCKET:
            raise ValueError(f"a token window of {size} numbers ({2 * self.BUCKET} … 2048, "
                             f"a multiple of {self.BUCKET})")  # fmt: skip
        self.size = size
        head: list[Insn] = [
            (LD_W_ABS, 0, 0, base + 9),  # the packet number's high word
            (JEQ, 2, 0, 0),  # first's (set by block)
            (JEQ, 1, 0, 0),  # the last's (set by block: the next where the window straddles)
            _ret(DROP),
            (LD_W_ABS, 0, 0, base + wire.PN_TOKEN_AT),
            (TAX, 0, 0, 0),  # X: the datagram's token
            (LD_W_ABS, 0, 0, base + 13),  # the low word
            (SUB_K, 0, 0, 0),  # − first's low word (set by block): the offset, mod 2^32
            (JGE, 0, 1, size),
            _ret(DROP),
        ]
        prog = head + self._tree(0, size // self.BUCKET)
        self._slots = [0] * size  # where each number's compare is (built with k = offset)
        for at in range(len(head), len(prog)):
            if prog[at][0] == JEQ:  # past the head, only the buckets' compares
                self._slots[prog[at][3]] = at
        self.insns = len(prog)
        self._template = array("I", b"".join(_INSN.pack(*insn) for insn in prog))
        (self._skip_word,) = array("I", _INSN.pack(JEQ, 0, 0, 0)[:4])  # on to the next

    def _tree(self, lo: int, hi: int) -> list[Insn]:
        """Buckets ``lo … hi − 1`` (A: the offset): a bucket loads the token into A and
        compares it with each of its numbers' tokens (k: the number's offset, for now)."""
        if hi - lo == 1:
            n = self.BUCKET
            chain = [(JEQ, n - i, 0, lo * n + i) for i in range(n)]
            return [(TXA, 0, 0, 0), *chain, _ret(DROP), _ret(ACCEPT)]
        mid = (lo + hi) // 2
        left, right = self._tree(lo, mid), self._tree(mid, hi)
        if len(left) <= 255:
            return [(JGE, len(left), 0, mid * self.BUCKET), *left, *right]
        return [(JGE, 0, 1, mid * self.BUCKET), (JA, 0, 0, len(left)), *left, *right]

    def block(self, first: int, tokens: bytes, skip: Iterable[int] = ()) -> bytes:
        """The block for numbers ``first …`` (``tokens``: theirs, 4 bytes each, at least
        ``size`` of them), leaving out offsets ``skip`` (numbers received already)."""
        prog = array("I", self._template)
        prog[3] = first >> 32  # the k of instruction 1
        prog[5] = (first + self.size - 1) >> 32  # of instruction 2
        prog[15] = first & 0xFFFFFFFF  # of instruction 7 (the offset: mod 2^32 across)
        toks = array("I", tokens[: 4 * self.size])
        if sys.byteorder == "little":
            toks.byteswap()  # a load compares the bytes as a big-endian word
        for at, tok in zip(self._slots, toks, strict=True):
            prog[2 * at + 1] = tok
        for i in skip:
            at = self._slots[i]
            prog[2 * at] = self._skip_word  # both ways to the next: no compare
        return prog.tobytes()


def client_window_program(
    ids: Iterable[bytes],
    windows: Iterable[tuple[bytes, bytes]] = (),
    base: int = UDP_HEADER_BYTES,
    pn_high: int = 0,
) -> bytes:
    """:func:`client_program` with token windows (the raw program, for :func:`attach_raw`):
    ``windows`` are ``(id, block)`` — a session's id and its :meth:`TokenWindow.block` —
    and a DATA naming such an id passes only through its block; the other ids' DATA as in
    :func:`client_program` (the packet-number bound); a WELCOME naming any of them."""
    ids = sorted(set(ids))
    windows = list(windows)
    windowed = {cid for cid, _ in windows}
    rest = [cid for cid in ids if cid not in windowed]
    raw: list[bytes] = []
    count = 0

    def put(insns: list[Insn]) -> None:
        nonlocal count
        raw.append(b"".join(_INSN.pack(*insn) for insn in insns))
        count += len(insns)

    welcome_chain = _ids_chain(ids, base)
    put(_shape(base))
    blocks = sum(5 + len(block) // 8 for _, block in windows)
    rest_chain = [
        (LD_W_ABS, 0, 0, base + 1 + 8),
        (JGT, 0, 1, pn_high + 1),
        _ret(DROP),
        *(_ids_chain(rest, base) if rest else [_ret(DROP)]),
    ]
    put([
        (JEQ, 0, 1, wire.WELCOME),
        (JA, 0, 0, 2 + blocks + len(rest_chain)),  # to the WELCOME's id chain
        (JEQ, 1, 0, wire.DATA),
        _ret(DROP),
    ])  # fmt: skip
    for cid, block in windows:
        hi, lo = _ID.unpack(cid)
        put([
            (LD_W_ABS, 0, 0, base + 1), (JEQ, 0, 2, hi),
            (LD_W_ABS, 0, 0, base + 5), (JEQ, 1, 0, lo),
            (JA, 0, 0, len(block) // 8),  # another id: the next block
        ])  # fmt: skip
        raw.append(block)
        count += len(block) // 8
    put(rest_chain)
    put(welcome_chain)
    if count > BPF_MAXINSNS:
        raise ValueError(f"a classic BPF program of {count} instructions")
    return b"".join(raw)


def _fprog(prog: list[Insn]) -> tuple[bytes, ctypes.Array]:
    if not prog or len(prog) > BPF_MAXINSNS:
        raise ValueError(f"a classic BPF program of {len(prog)} instructions")
    return _fprog_raw(b"".join(_INSN.pack(*insn) for insn in prog))


def _fprog_raw(raw: bytes) -> tuple[bytes, ctypes.Array]:
    buf = ctypes.create_string_buffer(raw, len(raw))
    # struct sock_fprog: unsigned short len; (padding); struct sock_filter *filter
    return struct.pack("HL", len(raw) // _INSN.size, ctypes.addressof(buf)), buf


def _set_program(
    sock: socket.socket, option: int, packed: tuple[bytes, ctypes.Array], what: str
) -> bool:
    fprog, buf = packed
    try:
        sock.setsockopt(socket.SOL_SOCKET, option, fprog)
    except OSError as exc:
        log.debug("%s refused: %s", what, exc)
        return False
    finally:
        del buf  # the kernel copied the program
    return True


def attach_raw(sock: socket.socket, raw: bytes) -> bool:
    """:func:`attach` of a program already packed (:func:`client_window_program`)."""
    return _set_program(sock, SO_ATTACH_FILTER, _fprog_raw(raw), "socket filter")


def attach(sock: socket.socket, prog: list[Insn]) -> bool:
    """Attach (or atomically replace) ``sock``'s filter; False where the kernel refuses."""
    return _set_program(sock, SO_ATTACH_FILTER, _fprog(prog), "socket filter")


def detach(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
    except OSError:
        pass


def attach_or_loosen(
    sock: socket.socket, prog: list[Insn], loose: list[Insn], steering: bool = False
) -> bool:
    """Attach ``prog``, or where the kernel refuses it (a long program is charged to the
    socket's option memory, ``net.core.optmem_max``: 131,072 bytes took about 2,500
    instructions on Linux 6.18, and 20,480 before Linux 6.9 fewer) ``loose``, which
    drops less but never keeps a stale program that would drop a session's datagrams."""
    global _loosened
    put = attach_steering if steering else attach
    if put(sock, prog):
        return True
    log.log(
        logging.DEBUG if _loosened else logging.WARNING,
        "the kernel refused a %d-instruction socket program (net.core.optmem_max?): "
        "filtering by shape only", len(prog),
    )  # fmt: skip
    _loosened = True  # once a process: a gateway rebuilds its programs at every session
    return put(sock, loose)


def attach_steering(sock: socket.socket, prog: list[Insn]) -> bool:
    """Attach a reuseport steering program to ``sock``'s group; False where refused."""
    return _set_program(sock, SO_ATTACH_REUSEPORT_CBPF, _fprog(prog), "reuseport steering")
