"""Forward error correction over sealed datagrams (§12.3.3).

The sender groups the datagrams it sends into blocks of consecutive packet
numbers; when a block closes (``max_k`` datagrams, or the sender has nothing
more to send right now) it adds ``r`` repair symbols, the smallest ``r`` that
recovers the block with probability ``target`` at the measured loss
(:func:`tierwise.proto.fec.repair_symbols_needed`: 245 symbols at 14 % need
63). A symbol is ``length u16 ‖ datagram``, zero-padded to the block's longest.
Repair symbols travel in REPAIR frames inside sealed datagrams; a recovered
datagram is authenticated and replay-checked again like any other, so FEC
opens no way around the AEAD.

Two erasure codes give identical guarantees (MDS over GF(2^8), k + r ≤ 256):
``zfec`` (Rizzo's Vandermonde code, compiled C; code 1) and the project's own
:class:`tierwise.proto.fec.CauchyCode` (numpy; code 2). The REPAIR frame
names its code, so the receiver always decodes with the sender's.
docs/benchmarks.md compares their speed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import lru_cache

# imported with the relay, not at its first block with repairs: a lazy import there cost
# a process just started 2.4 ms of its event loop (a new session's first lossy flight)
import zfec  # type: ignore[import-untyped]

from tierwise.errors import LocalProtocolError
from tierwise.proto.fec import CauchyCode, repair_symbols_needed
from tierwise.proto.relay.wire import Repair

__all__ = ["CODES", "FecDecoder", "FecEncoder", "decode_block", "encode_block"]

MAX_SYMBOLS = 256  # GF(2^8): k + r ≤ 256
CODE_ZFEC, CODE_CAUCHY = 1, 2
CODES = {"zfec": CODE_ZFEC, "cauchy": CODE_CAUCHY}
CACHE_PACKETS = 2048  # datagrams kept for decoding; older ones are dropped
_LEN = struct.Struct(">H")


@lru_cache(maxsize=64)
def _zfec_encoder(k: int, m: int):  # type: ignore[no-untyped-def]
    return zfec.Encoder(k, m)


def encode_block(code: int, symbols: list[bytes], r: int) -> list[bytes]:
    """``r`` repair symbols (indices ``k … k+r−1``) of ``k`` equal-length symbols."""
    k = len(symbols)
    if code == CODE_ZFEC:
        return list(_zfec_encoder(k, k + r).encode(symbols, list(range(k, k + r))))
    if code == CODE_CAUCHY:
        return [bytes(row) for row in CauchyCode(k).encode(symbols, range(k, k + r))]
    raise LocalProtocolError(f"unknown erasure code {code}; known: {sorted(CODES.values())}")


def decode_block(code: int, k: int, r: int, symbols: dict[int, bytes]) -> list[bytes]:
    """The ``k`` data symbols from any ``k`` of ``{index: symbol}``."""
    if code == CODE_ZFEC:
        chosen = sorted(symbols)[:k]
        out = zfec.Decoder(k, k + r).decode([symbols[i] for i in chosen], chosen)
        return [bytes(s) for s in out]
    if code == CODE_CAUCHY:
        return [bytes(row) for row in CauchyCode(k).decode(symbols)]
    raise LocalProtocolError(f"unknown erasure code {code}")


def to_symbol(datagram: bytes, width: int) -> bytes:
    return _LEN.pack(len(datagram)) + datagram + bytes(width - 2 - len(datagram))


class FecEncoder:
    """Blocks of sent datagrams and their repair frames."""

    def __init__(self, code: int, max_k: int, target: float) -> None:
        if not 1 <= max_k < MAX_SYMBOLS:
            raise LocalProtocolError(f"FEC block size must be in [1, 255], got {max_k}")
        self.code, self.max_k, self.target = code, max_k, target
        self.first_pn = -1
        self.opened_s = 0.0
        self._block: list[bytes] = []
        self.protected = False  # the block carries stream data worth repairing
        self.repairs_sent = 0

    @property
    def open(self) -> bool:
        return bool(self._block)

    def add(self, pn: int, datagram: bytes, protect: bool, now: float = 0.0) -> None:
        if not self._block:
            self.first_pn, self.opened_s = pn, now
        elif pn != self.first_pn + len(self._block):
            raise LocalProtocolError(f"FEC block needs consecutive packets, got {pn}")
        self._block.append(datagram)
        self.protected = self.protected or protect

    @property
    def size(self) -> int:
        """Packets in the open block (numbered ``first_pn`` on)."""
        return len(self._block)

    @property
    def full(self) -> bool:
        return len(self._block) >= self.max_k

    def close(self, loss: float, target: float | None = None) -> list[Repair]:
        """End the block; its repair frames (none if no loss or nothing worth repairing).

        ``target`` overrides the block's success target (the connection raises it
        so that every block of a multi-block request together meets the request's).
        """
        block, self._block = self._block, []
        protected, self.protected = self.protected, False
        k = len(block)
        if not block or not protected or loss <= 0:
            return []
        goal = self.target if target is None else target
        if goal <= 0:  # no repairs: the block's losses are retransmitted
            return []
        r = min(repair_symbols_needed(k, min(loss, 0.5), goal), MAX_SYMBOLS - k)
        if r == 0:
            return []
        width = 2 + max(len(d) for d in block)
        repairs = encode_block(self.code, [to_symbol(d, width) for d in block], r)
        self.repairs_sent += r
        return [Repair(self.code, self.first_pn, k, r, k + i, s) for i, s in enumerate(repairs)]


class FecDecoder:
    """Recent datagrams and repair symbols; recovers a block's missing datagrams."""

    def __init__(self, cache_packets: int = CACHE_PACKETS) -> None:
        self.cache_packets = cache_packets
        self._cache: dict[int, bytes] = {}
        self._blocks: dict[int, tuple[Repair, dict[int, bytes]]] = {}
        self._done: set[int] = set()  # blocks complete or rebuilt: later repairs are spare
        self.recovered = 0
        self.spare_repairs = 0  # repairs that arrived for a block already whole

    def on_datagram(self, pn: int, datagram: bytes) -> None:
        self._cache[pn] = datagram
        if len(self._cache) > self.cache_packets:  # prune a quarter at once: O(1) per datagram
            floor = pn - self.cache_packets * 3 // 4
            for old in [p for p in self._cache if p < floor]:
                del self._cache[old]
            for first in [f for f in self._blocks if f < floor]:
                del self._blocks[first]
            self._done = {f for f in self._done if f >= floor}

    def on_repair(self, frame: Repair, received: Callable[[int], bool]) -> list[bytes]:
        """Store a repair symbol; the datagrams it lets us recover (``received(pn)``: seen?)."""
        first, k = frame.first_pn, frame.k
        if first in self._done:  # rebuilt or whole already: no scan of its k packets again
            self.spare_repairs += 1
            return []
        if all(received(pn) for pn in range(first, first + k)):
            self._blocks.pop(first, None)
            self._done.add(first)
            self.spare_repairs += 1
            return []
        entry = self._blocks.setdefault(first, (frame, {}))
        if (entry[0].k, entry[0].r, entry[0].code) != (k, frame.r, frame.code):
            return []
        entry[1][frame.index] = frame.data
        have = {i: self._cache[first + i] for i in range(k) if first + i in self._cache}
        if len(have) + len(entry[1]) < k:
            return []
        del self._blocks[first]
        self._done.add(first)
        return self._recover(frame, have, entry[1])

    def _recover(
        self, frame: Repair, have: dict[int, bytes], repairs: dict[int, bytes]
    ) -> list[bytes]:
        width = len(frame.data)
        if any(len(d) + 2 > width for d in have.values()) or any(
            len(s) != width for s in repairs.values()
        ):
            return []
        symbols = {i: to_symbol(d, width) for i, d in have.items()} | repairs
        data = decode_block(frame.code, frame.k, frame.r, symbols)
        out = []
        for i in range(frame.k):
            if i not in have:
                (length,) = _LEN.unpack_from(data[i])
                if length + 2 <= width:
                    out.append(data[i][2 : 2 + length])
        self.recovered += len(out)
        return out
