"""Forward error correction, sans-IO: an MDS erasure code and the endpoints that use it (§12.3.3).

The code
    :class:`CauchyCode` is a systematic Cauchy Reed–Solomon code. A block of ``k``
    data symbols is sent as is (indices ``0 … k−1``); repair symbol ``x ≥ k`` is
    ``Σ_i d_i / (x ⊕ i)`` over GF(2^8) (blocks up to 256 symbols) or GF(2^16)
    (up to 65,536). Every square submatrix of a Cauchy matrix is invertible, so
    the receiver recovers the block from *any* ``k`` of the symbols sent: it
    subtracts the data it holds from the repair symbols and solves for the
    ``e`` missing data symbols, an ``e × e`` system.

The endpoints
    :class:`FecSender` splits a message into blocks of at most ``max_block``
    symbols (RFC 5052 §9.1 partition), adds ``r`` repair symbols per block,
    chosen as the smallest ``r`` whose block success ``P(Binomial(k+r, p) ≤ r)``
    reaches the target, and tops up incomplete blocks from the receiver's
    reports, one round per report — the round-by-round model of
    :func:`tierwise.model.loss.fec_rounds_pmf`. :class:`FecReceiver` decodes a
    block as soon as it holds ``k`` symbols, delivers the bytes in order, and
    reports at the end of each burst.

Round-by-round top-up (RACK-style accounting, no reordering window)::

    report  = (largest seq received, burst over?, per incomplete block: still needed)
    seen    = the end of that seq's burst if the burst is over, else the seq itself
    deficit = still needed − symbols of the block sent after ``seen``, or queued
    deficit > 0  →  send ``deficit`` fresh repair symbols, round = 1 + last round seen

A report goes out when the message completes, when the last symbol of a burst
arrives (``BURST_END``), or, if that symbol is lost, once the arrivals pause
(``max(GAP_MIN_S, GAP_FACTOR × mean gap)``); the last two mark the burst over,
so its lost tail counts as lost rather than in flight. If no report comes
back, the sender's retransmission timer (RFC 6298 estimator and backoff)
treats everything outstanding as lost and tops up.

Pacing: ``pacing_rate_bytes_per_s=None`` (the default) hands a whole burst over
at once and leaves the pacing to the link queue (the simulator's links send at
the path rate); a rate paces the symbols and arms the timer between them.

Wire format (big-endian), after UDP/IPv4 (:data:`UDP_IP_HEADER_BYTES` = 28)::

    symbol  type=1 u8 | flags u8 | round u16 | block u32 | seq u32
            | k u16 | index u16 | r u16 | pad u16 | symbol bytes     (20-byte header)
    report  type=2 u8 | flags u8 | n_complete u16 | n_missing u16
            | largest_seq u32 | received u32 | covered_below u32     (18-byte header)
            | n_complete × (start u32, end u32) | n_missing × (block u32, needed u16)

Symbol flags: ``FINAL`` (the message's last block), ``BURST_END``, ``WIDE``
(GF(2^16)); report flags: ``MESSAGE_COMPLETE``, ``BURST_OVER``. ``pad`` is the
zero padding at the end of the block's last data symbol. In *virtual* mode
(``payload`` given as a size) symbols carry sizes only, for long simulations;
they cannot be serialised.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from tierwise.errors import LocalProtocolError, RemoteProtocolError
from tierwise.proto.gf256 import GaloisField
from tierwise.proto.gf256 import field as galois_field
from tierwise.proto.rangeset import RangeSet

__all__ = [
    "FEC_HEADER_BYTES",
    "REPORT_HEADER_BYTES",
    "UDP_IP_HEADER_BYTES",
    "CauchyCode",
    "FecReceiver",
    "FecReceiverStats",
    "FecSender",
    "FecSenderStats",
    "Report",
    "Symbol",
    "parse_datagram",
    "partition_blocks",
    "repair_symbols_needed",
]

SYMBOL_BYTES = 1448  # one MSS, the symbol size of §12.3.3 (footnote 6)
SUCCESS_TARGET = 0.999  # block success target of §12.3.3
UDP_IP_HEADER_BYTES = 28  # IPv4 (20) + UDP (8)
FEC_HEADER_BYTES = 20
REPORT_HEADER_BYTES = 18
MAX_BLOCK_SYMBOLS = 65535  # k must fit the u16 header field
GAP_MIN_S = 0.001  # a pause this long ends a burst whose last symbol was lost
GAP_FACTOR = 4.0  # … or this many mean inter-arrival gaps, if longer
REPORT_RANGES_MAX = 64  # keeps a report within one 1,500-byte datagram
REPORT_MISSING_MAX = 128
RTO_INITIAL_S = 1.0  # RFC 6298 §2.1
RTO_MIN_S = 0.2  # Linux TCP_RTO_MIN
RTO_MAX_S = 60.0  # RFC 6298 §2.5
LOSS_PRIOR_SYMBOLS = 100.0  # weight of the configured loss when blending in measurements
ALL_BLOCKS = 0xFFFFFFFF  # covered_below when a report describes every block

FINAL, BURST_END, WIDE = 0x01, 0x02, 0x04
MESSAGE_COMPLETE, BURST_OVER = 0x01, 0x02
_SYMBOL_TYPE, _REPORT_TYPE = 1, 2
_SYMBOL = struct.Struct(">BBHIIHHHH")
_REPORT = struct.Struct(">BBHHIII")
_RANGE = struct.Struct(">II")
_MISSING = struct.Struct(">IH")


# ------------------------------------------------------------------------ the code


class CauchyCode:
    """Systematic MDS erasure code for blocks of ``k`` symbols, indices ``< n_max``.

    ``n_max ≤ 256`` uses GF(2^8) (any symbol length); up to 65,536 uses
    GF(2^16) (even symbol lengths). Symbols are ``uint8`` rows of equal length.
    """

    def __init__(self, k: int, n_max: int = 256) -> None:
        if not 1 <= k <= n_max <= 1 << 16:
            raise LocalProtocolError(f"need 1 ≤ k ≤ n_max ≤ 65,536, got k={k}, n_max={n_max}")
        self.k, self.n_max = k, n_max
        self.field: GaloisField = galois_field(8 if n_max <= 256 else 16)

    def __repr__(self) -> str:
        return f"CauchyCode(k={self.k}, n_max={self.n_max}, GF(2^{self.field.bits}))"

    def coefficients(self, repair_indices: Sequence[int]) -> np.ndarray:
        """The rows ``1 / (x ⊕ i)``, ``i = 0 … k−1``, of repair symbols ``x``."""
        x = np.asarray(repair_indices, dtype=np.int64)
        if x.size and (x.min() < self.k or x.max() >= self.n_max):
            raise LocalProtocolError(
                f"repair indices must lie in [{self.k}, {self.n_max}), got {list(x)}"
            )
        return self.field.inv(x[:, None] ^ np.arange(self.k)[None, :])

    def encode(self, data: np.ndarray | Sequence[bytes], indices: Iterable[int]) -> np.ndarray:
        """Repair symbols ``indices`` (each ``≥ k``) of the ``k × L`` data, as ``len × L`` bytes."""
        d = self._symbols(data, self.k)
        coeffs = self.coefficients(list(indices))
        width = d.shape[1] * self.field.element_bytes
        return self.field.to_bytes(self.field.matmul(coeffs, d)).reshape(len(coeffs), width)

    def decode(self, symbols: Mapping[int, bytes | np.ndarray]) -> np.ndarray:
        """The ``k × L`` data from any ``k`` distinct symbols ``{index: bytes}``."""
        if len(symbols) < self.k:
            raise LocalProtocolError(
                f"a block of k={self.k} needs {self.k} distinct symbols to decode, "
                f"got {len(symbols)}"
            )
        if any(not 0 <= i < self.n_max for i in symbols):
            raise LocalProtocolError(f"symbol indices must lie in [0, {self.n_max})")
        present = sorted(i for i in symbols if i < self.k)
        missing = sorted(set(range(self.k)) - set(present))
        repair = sorted(i for i in symbols if i >= self.k)[: len(missing)]
        rows = [
            np.frombuffer(symbols[i], dtype=np.uint8)
            if isinstance(symbols[i], bytes)
            else np.asarray(symbols[i], dtype=np.uint8)
            for i in present + repair
        ]
        if len({r.size for r in rows}) > 1:
            raise LocalProtocolError("all symbols of a block must have the same length")
        width = rows[0].size
        out = np.empty((self.k, width), dtype=np.uint8)
        if present:
            out[present] = np.stack(rows[: len(present)])
        if missing:
            out[missing] = self._recover(present, missing, repair, out, rows[len(present) :])
        return out

    def _recover(
        self,
        present: list[int],
        missing: list[int],
        repair: list[int],
        out: np.ndarray,
        repair_rows: list[np.ndarray],
    ) -> np.ndarray:
        """Solve ``C[repair, missing]·x = repair − C[repair, present]·data``."""
        f = self.field
        coeffs = self.coefficients(repair)
        rhs = self._symbols(np.stack(repair_rows), len(repair)).copy()
        if present:
            rhs ^= f.matmul(coeffs[:, present], self._symbols(out[present], len(present)))
        solved = f.solve(coeffs[:, missing], rhs)
        return f.to_bytes(solved).reshape(len(missing), out.shape[1])

    def _symbols(self, data: np.ndarray | Sequence[bytes], count: int) -> np.ndarray:
        """``count`` equal-length byte rows as a ``count × (L / element bytes)`` field array."""
        if isinstance(data, np.ndarray):
            raw = np.ascontiguousarray(data, dtype=np.uint8)
        else:
            raw = np.stack([np.frombuffer(s, dtype=np.uint8) for s in data]) if data else None
        if raw is None or raw.ndim != 2 or raw.shape[0] != count:
            shape = None if raw is None else raw.shape
            raise LocalProtocolError(f"expected {count} symbols of equal length, got {shape}")
        width, odd = divmod(raw.shape[1], self.field.element_bytes)
        if odd:
            raise LocalProtocolError(f"GF(2^16) symbols need an even length, got {raw.shape[1]}")
        return self.field.from_bytes(raw.reshape(-1)).reshape(count, width)


def partition_blocks(n_symbols: int, max_block: int) -> list[int]:
    """Block sizes for ``n_symbols``: as few blocks as fit, sizes differing by at most one.

    RFC 5052 §9.1: ``N = ⌈n / max⌉`` blocks, the first ``n − N·⌊n/N⌋`` of them
    one symbol larger. 300 symbols with at most 245 per block → 150 + 150.
    """
    if n_symbols < 0 or max_block < 1:
        raise LocalProtocolError(f"need n ≥ 0 and max_block ≥ 1, got {n_symbols}, {max_block}")
    if n_symbols == 0:
        return []
    blocks = math.ceil(n_symbols / max_block)
    small, large_count = divmod(n_symbols, blocks)
    return [small + 1] * large_count + [small] * (blocks - large_count)


def repair_symbols_needed(k: int, loss: float, target: float) -> int:
    """Smallest ``r`` with ``P(Binomial(k + r, p) ≤ r) ≥ target`` (§12.3.3).

    The same sum as :func:`tierwise.model.loss.fec_repair_symbols` (which proto
    may not import): the negative-binomial terms ``C(k+i−1, i)·p^i·(1−p)^k``,
    each in log space, added in order until the target is reached.
    245 symbols at 14 %, target 0.999 → 63.
    """
    if k < 0 or not 0.0 <= loss < 1.0 or not 0.0 <= target < 1.0:
        raise LocalProtocolError(
            f"need k ≥ 0, loss in [0, 1), target in [0, 1); got {k}, {loss}, {target}"
        )
    if k == 0 or loss == 0.0:
        return 0
    log_p, log_q = math.log(loss), k * math.log1p(-loss)
    limit = math.ceil(k * loss / (1 - loss) + 40 * math.sqrt(k * loss) / (1 - loss) + 100)
    total, lg_k = 0.0, math.lgamma(k)
    for i in range(limit):
        total += math.exp(math.lgamma(i + k) - math.lgamma(i + 1) - lg_k + i * log_p + log_q)
        if total >= target:
            return i
    raise LocalProtocolError(f"success target {target!r} is not reachable in floating point")


# ---------------------------------------------------------------------- datagrams


@dataclass(frozen=True, slots=True)
class Symbol:
    """One FEC datagram: data (``index < k``) or repair symbol ``index`` of ``block``.

    ``data`` is ``None`` in virtual mode (sizes only). ``wire`` counts every
    header: the symbol, the 20-byte FEC header and ``overhead`` (UDP/IP).
    """

    block: int
    index: int
    k: int
    r: int
    seq: int
    round: int
    length: int
    pad: int = 0
    flags: int = 0
    data: bytes | None = None
    overhead: int = UDP_IP_HEADER_BYTES

    def __post_init__(self) -> None:
        if not (1 <= self.k <= MAX_BLOCK_SYMBOLS and 0 <= self.index < 1 << 16):
            raise LocalProtocolError(f"bad symbol: k={self.k}, index={self.index}")
        if self.data is not None and len(self.data) != self.length:
            raise LocalProtocolError(f"symbol length {self.length} ≠ {len(self.data)} data bytes")

    @property
    def wire(self) -> int:
        return self.length + FEC_HEADER_BYTES + self.overhead

    @property
    def final(self) -> bool:
        return bool(self.flags & FINAL)

    @property
    def burst_end(self) -> bool:
        return bool(self.flags & BURST_END)

    @property
    def wide(self) -> bool:
        return bool(self.flags & WIDE)

    def to_bytes(self) -> bytes:
        if self.data is None:
            raise LocalProtocolError("a virtual symbol (sizes only) has no bytes to send")
        head = _SYMBOL.pack(
            _SYMBOL_TYPE,
            self.flags,
            self.round,
            self.block,
            self.seq,
            self.k,
            self.index,
            self.r,
            self.pad,
        )
        return head + self.data


@dataclass(frozen=True, slots=True)
class Report:
    """The receiver's state: what it holds up to ``largest_seq`` and what each block lacks.

    ``complete``: ranges ``[start, end)`` of decoded blocks; ``missing``:
    ``(block, symbols still needed)`` for blocks seen but not decoded. Blocks
    at or above ``covered_below`` are not described (the report was cut).
    """

    largest_seq: int
    received: int
    complete: tuple[tuple[int, int], ...] = ()
    missing: tuple[tuple[int, int], ...] = ()
    covered_below: int = ALL_BLOCKS
    message_complete: bool = False
    burst_over: bool = False
    overhead: int = UDP_IP_HEADER_BYTES

    @property
    def wire(self) -> int:
        return (
            REPORT_HEADER_BYTES
            + _RANGE.size * len(self.complete)
            + _MISSING.size * len(self.missing)
            + self.overhead
        )

    def to_bytes(self) -> bytes:
        parts = [
            _REPORT.pack(
                _REPORT_TYPE,
                (MESSAGE_COMPLETE if self.message_complete else 0)
                | (BURST_OVER if self.burst_over else 0),
                len(self.complete),
                len(self.missing),
                self.largest_seq,
                self.received,
                self.covered_below,
            )
        ]
        parts += [_RANGE.pack(s, e) for s, e in self.complete]
        parts += [_MISSING.pack(b, n) for b, n in self.missing]
        return b"".join(parts)


def parse_datagram(data: bytes, overhead: int = UDP_IP_HEADER_BYTES) -> Symbol | Report:
    """A :class:`Symbol` or :class:`Report` from its bytes; malformed input is the peer's fault."""
    try:
        if data[:1] == bytes([_SYMBOL_TYPE]):
            _, flags, rnd, block, seq, k, index, r, pad = _SYMBOL.unpack_from(data)
            body = bytes(data[_SYMBOL.size :])
            return Symbol(block, index, k, r, seq, rnd, len(body), pad, flags, body, overhead)
        if data[:1] == bytes([_REPORT_TYPE]):
            return _parse_report(data, overhead)
    except (struct.error, LocalProtocolError) as exc:
        raise RemoteProtocolError(f"malformed FEC datagram: {exc}") from exc
    raise RemoteProtocolError(f"unknown FEC datagram type {data[:1]!r}")


def _parse_report(data: bytes, overhead: int) -> Report:
    _, flags, n_complete, n_missing, largest, received, covered = _REPORT.unpack_from(data)
    expected = _REPORT.size + _RANGE.size * n_complete + _MISSING.size * n_missing
    if len(data) != expected:
        raise RemoteProtocolError(f"report of {len(data)} bytes, header says {expected}")
    at = _REPORT.size
    complete = tuple(_RANGE.unpack_from(data, at + _RANGE.size * i) for i in range(n_complete))
    at += _RANGE.size * n_complete
    missing = tuple(_MISSING.unpack_from(data, at + _MISSING.size * i) for i in range(n_missing))
    return Report(
        largest,
        received,
        complete,
        missing,
        covered,
        bool(flags & MESSAGE_COMPLETE),
        bool(flags & BURST_OVER),
        overhead,
    )


# ------------------------------------------------------------------------- sender


@dataclass
class FecSenderStats:
    symbols_sent: int = 0
    data_symbols: int = 0
    repair_symbols: int = 0  # planned repair, sent with the data (round 1)
    topup_symbols: int = 0  # sent later for blocks a report showed incomplete
    bytes_on_wire: int = 0
    reports: int = 0
    timeouts: int = 0
    rounds: int = 0  # highest round sent


class _OutBlock:
    __slots__ = (
        "block",
        "code",
        "complete",
        "final",
        "first",
        "k",
        "missing",
        "next_index",
        "pad",
        "queued",
        "r",
        "rounds",
        "seqs",
        "wide",
    )

    def __init__(self, block: int, first: int, k: int, pad: int, final: bool) -> None:
        self.block, self.first, self.k, self.pad, self.final = block, first, k, pad, final
        self.r = 0
        self.code: CauchyCode | None = None
        self.wide = False
        self.next_index = k
        self.queued = 0
        self.seqs: list[int] = []  # seq numbers sent, ascending
        self.rounds: list[int] = []  # round of each, non-decreasing
        self.missing: int | None = None  # still needed, as of the latest report
        self.complete = False


class FecSender:
    """Sends one message as FEC blocks and tops them up from the receiver's reports.

    ``payload``: the bytes, or a size for a virtual (sizes-only) transfer.
    ``loss``: the configured loss probability the repair is planned for;
    with ``adapt_loss`` blocks queued later blend in the loss measured from
    reports. ``repair_symbols`` fixes ``r`` per block instead. ``repair_policy``
    is ``(k, loss, target) → r`` (default :func:`repair_symbols_needed`).
    """

    def __init__(
        self,
        payload: bytes | int,
        *,
        loss: float,
        symbol_bytes: int = SYMBOL_BYTES,
        target: float = SUCCESS_TARGET,
        max_block: int | None = None,
        repair_symbols: int | None = None,
        repair_policy: Callable[[int, float, float], int] = repair_symbols_needed,
        adapt_loss: bool = False,
        pacing_rate_bytes_per_s: float | None = None,
        overhead_bytes: int = UDP_IP_HEADER_BYTES,
        initial_rto_s: float = RTO_INITIAL_S,
    ) -> None:
        self._check_config(
            payload, loss, symbol_bytes, target, max_block, repair_symbols, pacing_rate_bytes_per_s
        )
        self.size = payload if isinstance(payload, int) else len(payload)
        self.virtual = isinstance(payload, int)
        self.loss, self.target, self.adapt_loss = loss, target, adapt_loss
        self.fixed_repair, self.repair_policy = repair_symbols, repair_policy
        self.pacing_rate, self.overhead = pacing_rate_bytes_per_s, overhead_bytes
        self.symbol_length = min(symbol_bytes, self.size)
        n_symbols = math.ceil(self.size / self.symbol_length) if self.size else 1
        self._data = None if self.virtual else self._symbol_rows(payload, n_symbols)
        sizes = partition_blocks(n_symbols, min(max_block or MAX_BLOCK_SYMBOLS, MAX_BLOCK_SYMBOLS))
        firsts = accumulate(sizes[:-1], initial=0)
        pad, last = n_symbols * self.symbol_length - self.size, len(sizes) - 1
        self.blocks = [
            _OutBlock(b, first, k, pad if b == last else 0, b == last)
            for b, (first, k) in enumerate(zip(firsts, sizes, strict=True))
        ]
        self.stats = FecSenderStats()
        self._unqueued = deque(self.blocks)
        self._pending: deque[tuple[_OutBlock, int, bytes | None, int]] = deque()
        self._seq = 0
        self._sent_at: list[float] = []
        self._burst_ends: list[int] = []  # seqs sent with BURST_END, ascending
        self._largest_acked = -1
        self._received = 0
        self._next_send_at = 0.0
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.rto = initial_rto_s
        self._rto_at: float | None = None
        self.done = False

    @staticmethod
    def _check_config(payload, loss, symbol_bytes, target, max_block, repair, rate) -> None:
        if isinstance(payload, bool) or not isinstance(payload, int | bytes | bytearray):
            raise LocalProtocolError(f"payload must be bytes or a size in bytes, got {payload!r}")
        if isinstance(payload, int) and payload < 0:
            raise LocalProtocolError(f"payload size must be ≥ 0, got {payload}")
        if not 0.0 <= loss < 1.0 or not 0.0 <= target < 1.0:
            raise LocalProtocolError(f"need loss and target in [0, 1), got {loss}, {target}")
        if symbol_bytes < 1 or (max_block is not None and max_block < 1):
            raise LocalProtocolError(
                f"need symbol_bytes ≥ 1, max_block ≥ 1: {symbol_bytes}, {max_block}"
            )
        if (repair is not None and repair < 0) or (rate is not None and not rate > 0):
            raise LocalProtocolError(f"need repair ≥ 0 and a pacing rate > 0: {repair}, {rate}")

    def _symbol_rows(self, payload: bytes, n_symbols: int) -> np.ndarray:
        padded = np.zeros(n_symbols * self.symbol_length, dtype=np.uint8)
        padded[: self.size] = np.frombuffer(bytes(payload), dtype=np.uint8)
        return padded.reshape(n_symbols, self.symbol_length)

    # ------------------------------------------------------------------ loss

    @property
    def measured_loss(self) -> float | None:
        """``1 − received / sent`` over the symbols the latest report covers."""
        sent = self._largest_acked + 1
        return None if sent <= 0 else max(0.0, 1.0 - self._received / sent)

    @property
    def loss_estimate(self) -> float:
        """The loss blocks are planned for: configured, or blended with measurement."""
        if not self.adapt_loss or self._largest_acked < 0:
            return self.loss
        sent = self._largest_acked + 1
        lost = sent - min(self._received, sent)
        estimate = (lost + self.loss * LOSS_PRIOR_SYMBOLS) / (sent + LOSS_PRIOR_SYMBOLS)
        return min(estimate, 0.99)

    # ---------------------------------------------------------------- output

    def datagrams_to_send(self, now: float) -> list[Symbol]:
        """Symbols to send now: everything queued, or what the pacing rate allows."""
        out: list[Symbol] = []
        if self.done:
            return out
        self._skip_complete()
        while self._pending:
            if self.pacing_rate and now < self._next_send_at - 1e-12:
                break
            block, index, data, rnd = self._pending.popleft()
            block.queued -= 1
            self._skip_complete()
            out.append(self._emit(block, index, data, rnd, now, not self._pending))
        if out:
            self._rto_at = now + self.rto
        return out

    def _skip_complete(self) -> None:
        """Drop queued symbols of blocks already decoded; queue more blocks when empty."""
        while True:
            while self._pending and self._pending[0][0].complete:
                self._pending.popleft()[0].queued -= 1
            if self._pending or not self._unqueued:
                return
            self._fill()

    def _emit(
        self,
        block: _OutBlock,
        index: int,
        data: bytes | None,
        rnd: int,
        now: float,
        burst_end: bool,
    ) -> Symbol:
        flags = (FINAL if block.final else 0) | (WIDE if block.wide else 0)
        sym = Symbol(
            block.block,
            index,
            block.k,
            block.r,
            self._seq,
            rnd,
            self.symbol_length,
            block.pad,
            flags | (BURST_END if burst_end else 0),
            data,
            self.overhead,
        )
        block.seqs.append(self._seq)
        block.rounds.append(rnd)
        if burst_end:
            self._burst_ends.append(self._seq)
        self._sent_at.append(now)
        self._seq += 1
        s = self.stats
        s.symbols_sent += 1
        s.bytes_on_wire += sym.wire
        s.rounds = max(s.rounds, rnd)
        if self.pacing_rate:
            self._next_send_at = max(now, self._next_send_at) + sym.wire / self.pacing_rate
        return sym

    def _fill(self) -> None:
        """Queue the next block (paced) or all remaining blocks (unpaced)."""
        while self._unqueued and (not self.pacing_rate or not self._pending):
            self._queue_block(self._unqueued.popleft())

    def _queue_block(self, block: _OutBlock) -> None:
        k = block.k
        r = self.fixed_repair
        if r is None:
            r = int(self.repair_policy(k, self.loss_estimate, self.target))
        block.r = r
        block.wide = k + r > 256
        block.code = CauchyCode(k, 1 << 16 if block.wide else 256)
        if block.wide and self.symbol_length % 2:
            raise LocalProtocolError(
                f"block {block.block} has {k + r} symbols, past GF(2^8)'s 256: GF(2^16) "
                f"needs an even symbol size, got {self.symbol_length}"
            )
        if k + r > block.code.n_max:
            raise LocalProtocolError(f"k + r = {k + r} exceeds {block.code.n_max} symbols")
        for i in range(k):
            data = None if self._data is None else self._data[block.first + i].tobytes()
            self._pending.append((block, i, data, 1))
        block.queued += k
        self._queue_repair(block, r, 1)
        self.stats.data_symbols += k
        self.stats.repair_symbols += r

    def _queue_repair(self, block: _OutBlock, count: int, rnd: int) -> None:
        """``count`` fresh repair symbols; past the field's last index, wrap to 0 and resend."""
        code = block.code
        assert code is not None
        indices = [(block.next_index + j) % code.n_max for j in range(count)]
        block.next_index += count
        payloads: dict[int, bytes | None] = dict.fromkeys(indices)
        if self._data is not None:
            data = self._data[block.first : block.first + block.k]
            fresh = sorted({i for i in indices if i >= block.k})
            for i, row in zip(fresh, code.encode(data, fresh), strict=True):
                payloads[i] = row.tobytes()
            for i in indices:
                if i < block.k:
                    payloads[i] = data[i].tobytes()
        for i in indices:
            self._pending.append((block, i, payloads[i], rnd))
        block.queued += count

    # ----------------------------------------------------------------- input

    def receive_datagram(self, data: bytes, now: float) -> None:
        """A datagram from the receiver (a report)."""
        report = parse_datagram(data, self.overhead)
        if not isinstance(report, Report):
            raise RemoteProtocolError("the sender received a symbol, not a report")
        self.receive_report(report, now)

    def receive_report(self, report: Report, now: float) -> None:
        """Learn what the receiver holds; top up blocks that cannot complete otherwise."""
        if report.largest_seq >= self._seq:
            raise RemoteProtocolError(
                f"report covers seq {report.largest_seq}, only {self._seq} symbols sent"
            )
        self.stats.reports += 1
        newer = report.largest_seq > self._largest_acked
        if newer:
            self._rtt_sample(now - self._sent_at[report.largest_seq])
            self._largest_acked, self._received = report.largest_seq, report.received
        self._mark_complete(report)
        if self.done:
            return
        seen = self._seen_through(report)
        missing = dict(report.missing)
        for block in self.blocks:
            if block.block >= report.covered_below or block.complete or not block.seqs:
                continue
            covered = bisect_right(block.seqs, seen)
            if covered == 0:
                continue  # nothing of this block had been sent before that seq
            needed = missing.get(block.block, block.k)
            if newer:
                block.missing = needed
            # a stale report sees more in flight than lost since: it never over-sends
            deficit = needed - (len(block.seqs) - covered) - block.queued
            if deficit > 0:
                self._top_up(block, deficit, block.rounds[covered - 1] + 1)

    def _seen_through(self, report: Report) -> int:
        """The last seq the report accounts for: its burst's end, if the receiver saw it end.

        Symbols after ``largest_seq`` in a burst that is over were lost, not in flight.
        """
        if not report.burst_over:
            return report.largest_seq
        i = bisect_left(self._burst_ends, report.largest_seq)
        return self._burst_ends[i] if i < len(self._burst_ends) else report.largest_seq

    def _mark_complete(self, report: Report) -> None:
        for start, end in report.complete:
            for block in self.blocks[start : min(end, len(self.blocks))]:
                block.complete = True
        if report.message_complete or all(b.complete for b in self.blocks):
            for block in self.blocks:
                block.complete = True
            self.done = True
            self._rto_at = None
            self._pending.clear()

    def _top_up(self, block: _OutBlock, count: int, rnd: int) -> None:
        self._queue_repair(block, count, rnd)
        self.stats.topup_symbols += count

    def _rtt_sample(self, rtt: float) -> None:
        """RFC 6298 §2.2–2.3 smoothing; RTO floored at :data:`RTO_MIN_S`."""
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = min(max(self.srtt + 4 * self.rttvar, RTO_MIN_S), RTO_MAX_S)

    # ---------------------------------------------------------------- timers

    def get_timer(self) -> float | None:
        """The retransmission timer, or the pacing clock while symbols wait."""
        if self.done:
            return None
        pace = self._next_send_at if self.pacing_rate and self._pending else None
        times = [t for t in (self._rto_at, pace) if t is not None]
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        """No report in time: everything outstanding is lost; top up every incomplete block."""
        if self.done or self._rto_at is None or now < self._rto_at - 1e-12:
            return
        self.stats.timeouts += 1
        self._rto_at = None
        self.rto = min(self.rto * 2, RTO_MAX_S)
        topped = False
        for block in self.blocks:
            if block.complete or not block.seqs:
                continue
            needed = block.k if block.missing is None else block.missing
            if needed - block.queued > 0:
                self._top_up(block, needed - block.queued, block.rounds[-1] + 1)
                topped = True
        if not topped:
            self._rto_at = now + self.rto


# ----------------------------------------------------------------------- receiver


@dataclass
class FecReceiverStats:
    symbols: int = 0
    duplicates: int = 0  # an index already held, or a block already decoded
    blocks_decoded: int = 0
    reports: int = 0
    report_bytes_on_wire: int = 0


@dataclass
class _InBlock:
    k: int
    length: int
    pad: int
    wide: bool
    symbols: dict[int, bytes | None] = field(default_factory=dict)


class FecReceiver:
    """Collects symbols, decodes each block once it holds ``k``, delivers bytes in order."""

    def __init__(
        self,
        *,
        gap_min_s: float = GAP_MIN_S,
        gap_factor: float = GAP_FACTOR,
        overhead_bytes: int = UDP_IP_HEADER_BYTES,
    ) -> None:
        self.gap_min_s, self.gap_factor, self.overhead = gap_min_s, gap_factor, overhead_bytes
        self.stats = FecReceiverStats()
        self.rounds: dict[int, int] = {}  # block → round of the symbol that completed it
        self.delivered_bytes = 0
        self._blocks: dict[int, _InBlock] = {}
        self._complete = RangeSet()
        self._decoded: dict[int, bytes | int] = {}
        self._next_block = 0
        self._final_block: int | None = None
        self._out: list[bytes] = []
        self._largest_seq = -1
        self._last_arrival: float | None = None
        self._mean_gap: float | None = None
        self._gap_at: float | None = None
        self._report_at: float | None = None
        self._burst_over = False
        self._dirty = False

    @property
    def complete(self) -> bool:
        """Every block up to the final one is decoded and delivered."""
        return self._final_block is not None and self._next_block > self._final_block

    def read(self) -> bytes:
        """The bytes decoded in order since the last call (nothing in virtual mode)."""
        out, self._out = b"".join(self._out), []
        return out

    # ----------------------------------------------------------------- input

    def receive_datagram(self, data: bytes, now: float) -> None:
        sym = parse_datagram(data, self.overhead)
        if not isinstance(sym, Symbol):
            raise RemoteProtocolError("the receiver received a report, not a symbol")
        self.receive_symbol(sym, now)

    def receive_symbol(self, sym: Symbol, now: float) -> None:
        """Store ``sym``; decode its block at ``k`` symbols; schedule the next report."""
        self.stats.symbols += 1
        self._largest_seq = max(self._largest_seq, sym.seq)
        self._dirty = True
        self._track_gap(now)
        if sym.final:
            if self._final_block not in (None, sym.block):
                raise RemoteProtocolError(f"two final blocks: {self._final_block}, {sym.block}")
            self._final_block = sym.block
        self._burst_over = sym.burst_end
        was_complete = self.complete
        if self._complete.contains(sym.block):
            self.stats.duplicates += 1
        else:
            self._store(sym)
        if self.complete and not was_complete:
            self._report_at = now
        elif sym.burst_end:
            self._report_at = now
        else:
            self._gap_at = now + max(self.gap_min_s, self.gap_factor * (self._mean_gap or 0.0))

    def _track_gap(self, now: float) -> None:
        if self._last_arrival is not None:
            gap = now - self._last_arrival
            self._mean_gap = gap if self._mean_gap is None else 0.875 * self._mean_gap + gap / 8
        self._last_arrival = now

    def _store(self, sym: Symbol) -> None:
        block = self._blocks.get(sym.block)
        if block is None:
            block = self._blocks[sym.block] = _InBlock(sym.k, sym.length, sym.pad, sym.wide)
        elif (block.k, block.length, block.wide) != (sym.k, sym.length, sym.wide):
            raise RemoteProtocolError(f"block {sym.block}: symbols disagree on k, length or field")
        if sym.index in block.symbols:
            self.stats.duplicates += 1
            return
        block.symbols[sym.index] = sym.data
        if len(block.symbols) >= block.k:
            self._decode(sym.block, block)
            self.rounds[sym.block] = sym.round

    def _decode(self, number: int, block: _InBlock) -> None:
        size = block.k * block.length - block.pad
        if any(v is None for v in block.symbols.values()):
            self._decoded[number] = size
        else:
            code = CauchyCode(block.k, 1 << 16 if block.wide else 256)
            data = code.decode(block.symbols)  # type: ignore[arg-type]
            self._decoded[number] = data.reshape(-1)[:size].tobytes()
        del self._blocks[number]
        self._complete.add(number, number + 1)
        self.stats.blocks_decoded += 1
        while self._next_block in self._decoded:
            item = self._decoded.pop(self._next_block)
            if isinstance(item, bytes):
                self._out.append(item)
                self.delivered_bytes += len(item)
            else:
                self.delivered_bytes += item
            self._next_block += 1

    # ---------------------------------------------------------------- output

    def datagrams_to_send(self, now: float) -> list[Report]:
        """The report, if one is due and something arrived since the last."""
        if self._report_at is None or now < self._report_at - 1e-12 or not self._dirty:
            return []
        self._report_at = self._gap_at = None
        self._last_arrival = None  # the pause before the next burst is not a gap
        self._dirty = False
        report = self.report()
        self.stats.reports += 1
        self.stats.report_bytes_on_wire += report.wire
        return [report]

    def report(self) -> Report:
        """The current state, lowest blocks first, cut to fit one datagram."""
        ranges = list(self._complete)
        missing = sorted((b, blk.k - len(blk.symbols)) for b, blk in self._blocks.items())
        covered = ALL_BLOCKS
        if len(ranges) > REPORT_RANGES_MAX or len(missing) > REPORT_MISSING_MAX:
            cuts = [ranges[REPORT_RANGES_MAX][0]] if len(ranges) > REPORT_RANGES_MAX else []
            cuts += [missing[REPORT_MISSING_MAX][0]] if len(missing) > REPORT_MISSING_MAX else []
            covered = min(cuts)
            ranges = [(s, min(e, covered)) for s, e in ranges if s < covered]
            missing = [m for m in missing if m[0] < covered]
        return Report(
            self._largest_seq,
            self.stats.symbols,
            tuple(ranges),
            tuple(missing),
            covered,
            message_complete=self.complete,
            burst_over=self._burst_over,
            overhead=self.overhead,
        )

    # ---------------------------------------------------------------- timers

    def get_timer(self) -> float | None:
        """When a report falls due: now-ish after a burst, or after a pause in arrivals."""
        if not self._dirty:
            return None
        times = [t for t in (self._report_at, self._gap_at) if t is not None]
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        """Arrivals paused: the burst's last symbol was lost; report now."""
        if self._gap_at is not None and now >= self._gap_at - 1e-12:
            self._gap_at = None
            self._report_at = now
            self._burst_over = True
