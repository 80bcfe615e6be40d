"""Arithmetic in the binary fields GF(2^8) and GF(2^16), vectorised with numpy.

Elements are the integers ``0 … 2^m − 1`` read as polynomials over GF(2);
addition is XOR and multiplication goes through log/antilog tables built from a
primitive polynomial (``α = x`` generates every non-zero element)::

    a·b = exp[log a + log b]

``exp`` holds the cycle of powers twice, so the sum of two logs needs no
``mod 2^m − 1``; ``log 0`` points past both copies into a run of zeros, so a zero
factor gives zero with no branch. Every operation works elementwise on whole
arrays: one table lookup multiplies all the bytes of a symbol.

GF(2^8) (``x^8 + x^4 + x^3 + x^2 + 1``, Rizzo's and zfec's polynomial) is the
byte field of classic Reed–Solomon erasure codes and allows ``k + r ≤ 256``
symbols per block. GF(2^16) (``x^16 + x^5 + x^3 + x^2 + 1``, as in Leopard-RS)
allows 65,536, which a single block of §12.3.3 (245 data + 63 repair = 308
symbols) needs; its elements are little-endian byte pairs.

The module keeps its historical name; :func:`field` returns either field.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from tierwise.errors import LocalProtocolError

__all__ = ["GF256", "GaloisField", "field"]

POLYNOMIALS = {
    8: 0x11D,  # x^8 + x^4 + x^3 + x^2 + 1 (Lin & Costello app. A; Rizzo's fec.c, zfec)
    16: 0x1002D,  # x^16 + x^5 + x^3 + x^2 + 1 (Leopard-RS)
}


class GaloisField:
    """GF(2^m) with log/antilog tables; ``dtype`` is the numpy type of one element."""

    __slots__ = ("_exp", "_log", "bits", "dtype", "order", "polynomial", "wire_dtype")

    def __init__(self, bits: int, polynomial: int) -> None:
        if bits not in (8, 16):
            raise LocalProtocolError(f"only GF(2^8) and GF(2^16) are supported, got 2^{bits}")
        self.bits, self.polynomial = bits, polynomial
        self.order = 1 << bits
        self.dtype = np.dtype(np.uint8 if bits == 8 else np.uint16)
        self.wire_dtype = np.dtype("u1" if bits == 8 else "<u2")
        self._exp, self._log = _tables(bits, polynomial)

    def __repr__(self) -> str:
        return f"GaloisField(2^{self.bits}, {self.polynomial:#x})"

    @property
    def element_bytes(self) -> int:
        return self.bits // 8

    # ------------------------------------------------------------- elementwise

    def mul(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        """``a·b`` elementwise (arrays broadcast)."""
        return self._exp[self._log[a] + self._log[b]]

    def div(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        """``a / b`` elementwise; division by zero is an error."""
        if np.any(np.asarray(b) == 0):
            raise ZeroDivisionError("division by zero in " + repr(self))
        q = self.order - 1
        # log 0 is past both copies of the cycle, so a zero numerator stays zero
        return self._exp[self._log[a] + (q - self._log[b]) % q]

    def inv(self, a: np.ndarray | int) -> np.ndarray:
        """``1 / a`` elementwise."""
        return self.div(1, a)

    def log_of(self, a: np.ndarray) -> np.ndarray:
        """The table logs of ``a`` (``log 0`` is the zero sentinel), for repeated products."""
        return self._log[a]

    def exp_of(self, logs: np.ndarray) -> np.ndarray:
        """Elements from sums of two table logs (see :meth:`log_of`)."""
        return self._exp[logs]

    # ----------------------------------------------------------------- symbols

    def from_bytes(self, data: bytes | np.ndarray) -> np.ndarray:
        """A symbol's bytes as field elements (pairs of bytes, little-endian, in GF(2^16))."""
        raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
        if raw.size % self.element_bytes:
            raise LocalProtocolError(
                f"a GF(2^{self.bits}) symbol needs a multiple of {self.element_bytes} bytes, "
                f"got {raw.size}"
            )
        return raw.view(self.wire_dtype)

    def to_bytes(self, elements: np.ndarray) -> np.ndarray:
        """Field elements back to ``uint8`` (the inverse of :meth:`from_bytes`)."""
        return np.ascontiguousarray(elements, dtype=self.wire_dtype).view(np.uint8)

    # ------------------------------------------------------------------ matrices

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a @ b`` over the field: ``(n×k)·(k×L)``, one ``k×L`` lookup per output row.

        ``b`` is usually ``k`` symbols of ``L`` elements; its logs are taken once.
        """
        a = np.asarray(a, dtype=self.dtype)
        b = np.asarray(b, dtype=self.dtype)
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise LocalProtocolError(f"cannot multiply shapes {a.shape} and {b.shape}")
        out = np.zeros((a.shape[0], b.shape[1]), dtype=self.dtype)
        if a.shape[1] == 0:
            return out
        log_a, log_b = self._log[a], self._log[b]
        for i in range(a.shape[0]):
            out[i] = np.bitwise_xor.reduce(self._exp[log_a[i][:, None] + log_b], axis=0)
        return out

    def solve(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``x`` with ``a·x = b`` by Gauss–Jordan elimination; ``a`` square and invertible.

        Each pivot clears its column in every other row with one outer product,
        so the work is ``n`` array operations of ``n × (n + L)`` elements.
        """
        a = np.array(a, dtype=self.dtype)
        b = np.array(b, dtype=self.dtype)
        n = a.shape[0]
        if a.shape != (n, n) or b.ndim != 2 or b.shape[0] != n:
            raise LocalProtocolError(
                f"solve needs a square a and matching b, got {a.shape}, {b.shape}"
            )
        m = np.concatenate([a, b], axis=1)
        for col in range(n):
            nonzero = np.flatnonzero(m[col:, col])
            if nonzero.size == 0:
                raise LocalProtocolError(f"singular matrix over {self!r} (column {col})")
            pivot = col + int(nonzero[0])
            if pivot != col:
                m[[col, pivot]] = m[[pivot, col]]
            m[col] = self.div(m[col], m[col, col])
            factors = m[:, col].copy()
            factors[col] = 0
            m ^= self._exp[self._log[factors][:, None] + self._log[m[col]][None, :]]
        return m[:, n:]

    def inverse(self, a: np.ndarray) -> np.ndarray:
        """``a⁻¹`` (Gauss–Jordan on ``[a | I]``)."""
        n = np.asarray(a).shape[0]
        return self.solve(a, np.eye(n, dtype=self.dtype))


def _tables(bits: int, polynomial: int) -> tuple[np.ndarray, np.ndarray]:
    """``exp`` (the powers of α twice, then zeros) and ``log`` (``log 0`` = the zero run)."""
    order = 1 << bits
    q = order - 1
    powers = np.empty(q, dtype=np.int64)
    x = 1
    for i in range(q):
        powers[i] = x
        x <<= 1
        if x & order:
            x ^= polynomial
    if x != 1 or np.unique(powers).size != q:
        raise LocalProtocolError(f"{polynomial:#x} is not primitive for GF(2^{bits})")
    dtype = np.uint8 if bits == 8 else np.uint16
    exp = np.zeros(4 * q + 1, dtype=dtype)  # indices up to 2·log 0 = 4q
    exp[:q] = powers
    exp[q : 2 * q] = powers
    log = np.empty(order, dtype=np.int64)
    log[powers] = np.arange(q)
    log[0] = 2 * q  # any sum with log 0 lands in exp[2q:], all zeros
    exp.setflags(write=False)
    log.setflags(write=False)
    return exp, log


@cache
def field(bits: int) -> GaloisField:
    """The shared GF(2^8) or GF(2^16) (tables built once, on first use)."""
    if bits not in POLYNOMIALS:
        raise LocalProtocolError(f"no field GF(2^{bits}); known: 2^8, 2^16")
    return GaloisField(bits, POLYNOMIALS[bits])


GF256 = field(8)
