"""Random loss is not congestion: Mathis, BBR, selective retransmission, FEC (§12.3.3).

Four views of one lossy path:

- the Mathis bound, the rate a loss-driven TCP settles at, ``(MSS/R)·C/√p``;
- BBR, which measures the bottleneck rate instead: ``BDP = max_bw × min_rtt``,
  ``cwnd = 2·BDP`` and ideal goodput ``(1 − p)·B``;
- idealised selective retransmission: one round per RTT, every lost packet sent
  again the next round, losses independent with probability ``p``. Each packet
  needs a geometric number of rounds, so the rounds ``K`` for ``n`` packets are
  the maximum of ``n`` geometrics: ``P(K ≤ k) = (1 − p^k)^n``. No window
  shrinkage and no timeouts, so this is a lower bound that favours TCP;
- forward error correction with any MDS erasure code: ``k`` data symbols plus
  ``r`` repair symbols decode from any ``k`` of the ``k + r``.

Times: a transfer that needs ``K`` rounds completes at
``serial + (K − 1)·RTT``, where ``serial`` is the loss-free budget (RTT + model +
send). Scalars unless a docstring says that arrays broadcast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tierwise.errors import ModelError
from tierwise.model._check import ArrayLike, nonneg, positive, probability

__all__ = [
    "BBR_CWND_GAIN",
    "C_PERIODIC",
    "C_RANDOM",
    "C_SIMPLE",
    "PROBE_BW_UP_GAIN",
    "STARTUP_PACING_GAIN",
    "TAIL_EPSILON",
    "FecPlan",
    "bbr_bdp_bytes",
    "bbr_cwnd_bytes",
    "expected_lost_packets",
    "expected_rounds",
    "fec_expected_rounds",
    "fec_overhead",
    "fec_plan",
    "fec_repair_symbols",
    "fec_rounds_cdf",
    "fec_rounds_pmf",
    "fec_rounds_quantile",
    "fec_success",
    "ideal_goodput_bytes_per_s",
    "mathis_rate_bytes_per_s",
    "packet_count",
    "retransmit_time_s",
    "rounds_cdf",
    "rounds_pmf",
    "rounds_quantile",
]

# Mathis et al., "The Macroscopic Behavior of the TCP Congestion Avoidance
# Algorithm", ACM CCR 1997 (footnote 4 of the reference).
C_SIMPLE = 1.0  # eq. (4): the constant dropped, the bound the path records use
C_PERIODIC = math.sqrt(3 / 2)  # eq. (3), periodic loss, every segment ACKed (≈ 1.22)
C_RANDOM = 1.31  # random loss

# draft-cardwell-iccrg-bbr-congestion-control-02 (footnote 5 of the reference).
STARTUP_PACING_GAIN = 4 * math.log(2)  # ≈ 2.77, BBR.startup_pacing_gain
PROBE_BW_UP_GAIN = 1.25  # ProbeBW_UP pacing gain
BBR_CWND_GAIN = 2.0  # BBR.cwnd_gain: cwnd = 2 · BDP, headroom for ACK aggregation

TAIL_EPSILON = 1e-15  # a rounds distribution is cut where P(K > k) falls below this
MAX_ROUNDS = 10_000_000  # refuse sums longer than this (loss too close to 1)
# FEC blocks: at most this many symbols (data + repair; 7 GB of 1,448 B symbols), and at
# most this many (round, deficit) terms in a rounds distribution (about a second's work)
MAX_FEC_SYMBOLS = 5_000_000
MAX_FEC_TERMS = 200_000_000
_CHUNK_TERMS = 4_000_000  # terms evaluated at once: bounds the memory, not the work


def mathis_rate_bytes_per_s(
    mss_bytes: ArrayLike, rtt_s: ArrayLike, loss: ArrayLike, c: ArrayLike = C_SIMPLE
) -> ArrayLike:
    """Mathis bound ``B ≤ (MSS/R)·C/√p`` (§12.3.3, Mathis eq. 3/4); arrays broadcast.

    MSS 1,448 B, R 0.2 s, p 0.14: 0.155 Mbit/s with C = 1, 0.189 Mbit/s with C = 1.22.
    Infinite at ``p = 0``: the bound says nothing about a loss-free path.
    """
    positive("MSS", mss_bytes)
    positive("RTT", rtt_s)
    probability("loss", loss, open_upper=True)
    positive("Mathis constant C", c)
    root = np.sqrt(np.asarray(loss, dtype=float))
    safe = np.where(root > 0, root, 1.0)
    rate = np.where(root > 0, np.divide(mss_bytes, rtt_s) * np.asarray(c) / safe, np.inf)
    return rate[()] if rate.ndim == 0 else rate


def bbr_bdp_bytes(max_bw_bytes_per_s: ArrayLike, min_rtt_s: ArrayLike) -> ArrayLike:
    """BBR's bandwidth-delay product ``BDP = max_bw × min_rtt`` (§12.3.3).

    333 Mbit/s × 0.2 s = 8.325 MB.
    """
    nonneg("max_bw", max_bw_bytes_per_s)
    nonneg("min_rtt", min_rtt_s)
    return np.multiply(max_bw_bytes_per_s, min_rtt_s)


def bbr_cwnd_bytes(
    max_bw_bytes_per_s: ArrayLike, min_rtt_s: ArrayLike, gain: ArrayLike = BBR_CWND_GAIN
) -> ArrayLike:
    """BBR's congestion window ``cwnd = cwnd_gain · BDP`` (§12.3.3): 16.65 MB on the path."""
    positive("cwnd gain", gain)
    return np.multiply(gain, bbr_bdp_bytes(max_bw_bytes_per_s, min_rtt_s))


def ideal_goodput_bytes_per_s(rate_bytes_per_s: ArrayLike, loss: ArrayLike) -> ArrayLike:
    """Goodput of a sender pacing at the measured rate ``(1 − p)·B`` (§12.3.3).

    0.86 × 333 Mbit/s ≈ 286 Mbit/s, about 1,850 times the Mathis bound.
    """
    nonneg("rate", rate_bytes_per_s)
    probability("loss", loss)
    return np.multiply(np.subtract(1.0, loss), rate_bytes_per_s)


def packet_count(size_bytes: float, mss_bytes: float) -> int:
    """Packets needed for ``size_bytes``: ``⌈S / MSS⌉`` (354,640 B at 1,448 B → 245, §12.3.3)."""
    nonneg("size", size_bytes)
    positive("MSS", mss_bytes)
    return math.ceil(size_bytes / mss_bytes)


def expected_lost_packets(n_packets: ArrayLike, loss: ArrayLike) -> ArrayLike:
    """Expected losses in the first round ``n·p`` (245 × 0.14 = 34.3, §12.3.3)."""
    nonneg("packet count", n_packets)
    probability("loss", loss)
    return np.multiply(n_packets, loss)


def rounds_cdf(n_packets: ArrayLike, loss: ArrayLike, k: ArrayLike) -> ArrayLike:
    """``P(K ≤ k) = (1 − p^k)^n``: all ``n`` packets delivered within ``k`` rounds (§12.3.3).

    Idealised selective retransmission, independent loss; arrays broadcast.
    Zero packets need zero rounds (``P(K ≤ 0) = 1`` when ``n = 0``).
    """
    n = _counts("packet count", n_packets)
    p = np.asarray(probability("loss", loss, open_upper=True), dtype=float)
    kk = _counts("rounds", k)
    return _cdf(n, p, kk)


def rounds_pmf(n_packets: int, loss: float, max_rounds: int | None = None) -> np.ndarray:
    """``P(K = k) = (1 − p^k)^n − (1 − p^{k−1})^n``, index ``k`` = rounds (§12.3.3).

    Index 0 holds ``P(K = 0)``: 1 for zero packets (nothing to send needs no
    round), 0 otherwise. Without ``max_rounds`` the array stops at the first
    ``k`` whose tail ``P(K > k)`` is below :data:`TAIL_EPSILON`, so it sums to 1
    within 1e-12; with ``max_rounds`` it covers ``k = 0..max_rounds`` and the
    mass beyond is left out (the sum is then ``P(K ≤ max_rounds)``).
    """
    n = _count("packet count", n_packets)
    probability("loss", loss, open_upper=True)
    last = _last_round(n, loss) if max_rounds is None else _count("max rounds", max_rounds)
    k = np.arange(last + 1)
    cdf = np.asarray(_cdf(n, float(loss), k), dtype=float)
    tail = _tail(n, float(loss), k)
    # differences of whichever side is small keep their relative accuracy
    from_cdf = np.diff(cdf, prepend=0.0)
    from_tail = -np.diff(tail, prepend=1.0)
    return np.where(cdf <= 0.5, from_cdf, from_tail)


def expected_rounds(n_packets: int, loss: float) -> float:
    """``E[K] = Σ_{k≥0} P(K > k) = Σ_{k≥0} 1 − (1 − p^k)^n`` (§12.3.3).

    245 packets at 14 %: 3.587 rounds, so ``0.2385 + 2.587 × 0.2 ≈ 0.756 s``.
    """
    n = _count("packet count", n_packets)
    probability("loss", loss, open_upper=True)
    return float(_tail(n, float(loss), np.arange(_last_round(n, loss) + 1)).sum())


def rounds_quantile(n_packets: int, loss: float, q: float) -> int:
    """Smallest ``k`` with ``(1 − p^k)^n ≥ q`` (§12.3.3: 245 packets, 14 %, q 0.99 → 6).

    Closed form ``k = ⌈ln(1 − q^{1/n}) / ln p⌉``, then checked against the CDF.
    """
    n = _count("packet count", n_packets)
    probability("loss", loss, open_upper=True)
    probability("quantile", q, open_upper=True)
    if n == 0 or q == 0:
        return 0
    if loss == 0:
        return 1
    guess = math.log(-math.expm1(math.log(q) / n)) / math.log(loss)
    k = max(1, math.ceil(guess - 1e-9))
    while _cdf(n, loss, k) < q:
        k += 1
    while k > 1 and _cdf(n, loss, k - 1) >= q:
        k -= 1
    return k


def retransmit_time_s(serial_s: ArrayLike, rtt_s: ArrayLike, rounds: ArrayLike) -> ArrayLike:
    """Completion after ``K`` rounds: ``serial + (K − 1)·R`` (§12.3.3, exercise 12-10(b)).

    The first round is the loss-free serial budget itself; each extra round adds
    one RTT. ``K ≤ 1`` (including zero packets) adds nothing. Arrays broadcast;
    ``K`` may be a mean (not an integer).
    """
    nonneg("serial time", serial_s)
    nonneg("RTT", rtt_s)
    nonneg("rounds", rounds)
    extra = np.maximum(np.subtract(rounds, 1.0), 0.0)
    return np.add(serial_s, np.multiply(extra, rtt_s))


def fec_success(k_data: int, r_repair: int, loss: float) -> float:
    """Block success ``P(Binomial(k + r, p) ≤ r)`` for an MDS code (§12.3.3).

    Computed exactly as the equivalent negative-binomial sum
    ``Σ_{i=0}^{r} C(k+i−1, i)·p^i·(1−p)^k`` (at most ``r`` losses before the
    ``k``-th arrival), each term in log space and summed in order. Each extra
    repair symbol appends a non-negative term, so the result is non-decreasing
    in ``r`` even in floating point. ``k = 0`` always succeeds.
    """
    k = _count("data symbols", k_data)
    r = _count("repair symbols", r_repair)
    probability("loss", loss, open_upper=True)
    _block_symbols(k, r)
    # a running sum, as in fec_repair_symbols: the same rounding, and monotone in r
    return min(1.0, float(np.cumsum(_fec_terms(k, float(loss), r + 1))[-1]))


def fec_repair_symbols(k_data: int, loss: float, target: float) -> int:
    """Smallest ``r`` with ``fec_success(k, r, p) ≥ target`` (§12.3.3, exercise 12-10(c)).

    245 data symbols at 14 % and target 0.999 → 63; at 3.6 % → 20.
    """
    k = _count("data symbols", k_data)
    probability("loss", loss, open_upper=True)
    probability("success target", target, open_upper=True)
    if k == 0 or loss == 0:
        return 0
    # mean + 40 sd of the negative binomial: far past any reachable target
    mean = k * loss / (1 - loss)
    spread = math.sqrt(k * loss) / (1 - loss)
    limit = math.ceil(mean + 40 * spread + 100)
    if k + limit > MAX_FEC_SYMBOLS:
        raise ModelError(
            f"{k:,} data symbols at loss {loss:g} need about {mean:,.0f} repair symbols; "
            f"the FEC model is limited to {MAX_FEC_SYMBOLS:,} symbols a block "
            "(send smaller blocks, or the loss is too high for FEC)"
        )
    reached = np.flatnonzero(np.cumsum(_fec_terms(k, float(loss), limit)) >= target)
    if reached.size == 0:
        raise ModelError(f"success target {target!r} is not reachable in floating point")
    return int(reached[0])


def fec_overhead(k_data: ArrayLike, r_repair: ArrayLike) -> ArrayLike:
    """Redundancy ``r / k`` (63 / 245 = 25.7 %, §12.3.3)."""
    positive("data symbols", k_data)
    nonneg("repair symbols", r_repair)
    return np.divide(r_repair, k_data)


def fec_rounds_cdf(k_data: int, r_repair: int, loss: float, rounds: int) -> float:
    """``P(K ≤ m)`` when a failed block is topped up round by round (§12.3.3).

    Round 1 sends ``k + r`` symbols; ``X ~ Binomial(k + r, p)`` are lost and the
    deficit ``D = max(X − r, 0)`` is re-sent as fresh repair symbols, one round
    per RTT, each lost again with probability ``p``, exactly like selective
    retransmission of ``D`` packets:
    ``P(K ≤ m) = Σ_x P(X = x)·(1 − p^{m−1})^{max(x−r, 0)}`` for ``m ≥ 1``.
    ``r = 0`` gives :func:`rounds_cdf`. More repair symbols never lower it.
    """
    k = _count("data symbols", k_data)
    r = _count("repair symbols", r_repair)
    probability("loss", loss, open_upper=True)
    m = _count("rounds", rounds)
    return float(_fec_cdf(k, r, float(loss), np.array([m]))[0])


def fec_rounds_pmf(k_data: int, r_repair: int, loss: float) -> np.ndarray:
    """``P(K = m)`` for FEC topped up round by round, index ``m`` = rounds (§12.3.3).

    Same layout and cut as :func:`rounds_pmf` (which it equals for ``r = 0``):
    index 0 is ``P(K = 0)``, 1 only for ``k = 0``; sums to 1 within 1e-12.
    At 14 % with 63 repair symbols for 245: ``P(K = 1) ≈ 0.99927``.
    """
    k = _count("data symbols", k_data)
    r = _count("repair symbols", r_repair)
    probability("loss", loss, open_upper=True)
    last = _last_round(k, float(loss))
    cdf = _fec_cdf(k, r, float(loss), np.arange(last + 1))
    return np.maximum(np.diff(cdf, prepend=0.0), 0.0)


def fec_expected_rounds(k_data: int, r_repair: int, loss: float) -> float:
    """``E[K] = Σ_{m≥0} 1 − P(K ≤ m)`` for FEC topped up round by round (§12.3.3).

    At 14 % with 63 repair symbols for 245: about 1.001 rounds.
    """
    k = _count("data symbols", k_data)
    r = _count("repair symbols", r_repair)
    probability("loss", loss, open_upper=True)
    # FEC needs no more rounds than plain retransmission, so its horizon suffices
    last = _last_round(k, float(loss))
    return float((1.0 - _fec_cdf(k, r, float(loss), np.arange(last + 1))).sum())


def fec_rounds_quantile(k_data: int, r_repair: int, loss: float, q: float) -> int:
    """Smallest ``m`` with ``fec_rounds_cdf(k, r, p, m) ≥ q`` (§12.3.3).

    Never more than :func:`rounds_quantile` for the same ``k`` (FEC only helps).
    """
    k = _count("data symbols", k_data)
    r = _count("repair symbols", r_repair)
    bound = rounds_quantile(k, loss, q)
    reached = np.flatnonzero(_fec_cdf(k, r, float(loss), np.arange(bound + 1)) >= q)
    return int(reached[0]) if reached.size else bound


@dataclass(frozen=True)
class FecPlan:
    """The repair symbols chosen for a target and what they cost (§12.3.3)."""

    data_symbols: int
    repair_symbols: int
    success: float
    overhead: float
    send_bytes: float


def fec_plan(k_data: int, loss: float, target: float, symbol_bytes: float) -> FecPlan:
    """Repair symbols for ``target``, their success, overhead ``r/k`` and bytes ``(k+r)·size``.

    245 symbols of 1,448 B at 14 %, target 0.999: 63 repair, 25.7 %, 308 symbols.
    """
    positive("symbol size", symbol_bytes)
    r = fec_repair_symbols(k_data, loss, target)
    overhead = float(fec_overhead(k_data, r)) if k_data else 0.0
    return FecPlan(
        k_data, r, fec_success(k_data, r, loss), overhead, (k_data + r) * float(symbol_bytes)
    )


def _block_symbols(k: int, r: int) -> int:
    """``k + r``, if within :data:`MAX_FEC_SYMBOLS` (each symbol costs a term in memory)."""
    total = k + r
    if total > MAX_FEC_SYMBOLS:
        raise ModelError(
            f"an FEC block of {total:,} symbols ({k:,} data + {r:,} repair) is over the "
            f"model's limit of {MAX_FEC_SYMBOLS:,} symbols"
        )
    return total


def _fec_terms(k: int, p: float, count: int) -> np.ndarray:
    """``C(k+i−1, i)·p^i·(1−p)^k`` for ``i = 0..count−1`` (negative binomial pmf)."""
    i = np.arange(count, dtype=float)
    if k == 0 or p == 0:  # nothing to lose: all mass at zero losses
        return np.where(i == 0, 1.0, 0.0)
    log_c = _lgamma(i + k) - _lgamma(i + 1) - math.lgamma(k)
    return np.exp(log_c + i * math.log(p) + k * math.log1p(-p))


def _deficit_pmf(k: int, r: int, p: float) -> np.ndarray:
    """``P(D = d)`` for ``D = max(X − r, 0)``, ``X ~ Binomial(k + r, p)``."""
    total = _block_symbols(k, r)
    x = np.arange(total + 1, dtype=float)
    if p == 0:
        lost = np.where(x == 0, 1.0, 0.0)
    else:
        log_c = math.lgamma(total + 1) - _lgamma(x + 1) - _lgamma(total - x + 1)
        lost = np.exp(log_c + x * math.log(p) + (total - x) * math.log1p(-p))
    return np.concatenate(([lost[: r + 1].sum()], lost[r + 1 :]))


def _fec_cdf(k: int, r: int, p: float, m: np.ndarray) -> np.ndarray:
    """``P(K ≤ m)`` for each ``m``: ``Σ_d P(D = d)·(1 − p^{m−1})^d``, ``P(K ≤ 0) = [k = 0]``."""
    if k == 0:
        return np.ones(m.shape)
    deficit_pmf = _deficit_pmf(k, r, p)
    if m.size * deficit_pmf.size > MAX_FEC_TERMS:
        raise ModelError(
            f"the FEC rounds distribution needs {m.size:,} rounds × {deficit_pmf.size:,} "
            f"deficits, over the model's limit of {MAX_FEC_TERMS:,} terms (the loss is too "
            "high for this block)"
        )
    d = np.arange(deficit_pmf.size, dtype=float)
    later = np.maximum(m.astype(float) - 1.0, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_keep = np.log1p(-(p**later))  # log P(one deficit symbol arrives in m − 1 rounds)
    cdf = np.empty(m.shape)
    rows = max(1, _CHUNK_TERMS // d.size)
    for start in range(0, m.size, rows):  # a block of rounds at a time: bounded memory
        with np.errstate(divide="ignore", invalid="ignore"):
            powers = np.exp(np.outer(log_keep[start : start + rows], d))
        powers[:, 0] = 1.0  # a zero deficit needs no further round, even when m = 1
        cdf[start : start + rows] = powers @ deficit_pmf
    return np.where(m == 0, 0.0, np.minimum(cdf, 1.0))


_lgamma = np.vectorize(math.lgamma, otypes=[float])


def _tail(n: int, p: float, k: np.ndarray) -> np.ndarray:
    """``P(K > k) = 1 − (1 − p^k)^n``, accurate when tiny."""
    if n == 0:
        return np.zeros(k.shape)
    with np.errstate(divide="ignore"):
        return -np.expm1(n * np.log1p(-(p ** k.astype(float))))


def _cdf(n: ArrayLike, p: ArrayLike, k: ArrayLike) -> ArrayLike:
    n, p, k = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (n, p, k)))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_cdf = n * np.log1p(-(p**k))
    out = np.where(n == 0, 1.0, np.exp(np.where(n == 0, 0.0, log_cdf)))
    return out[()] if out.ndim == 0 else out


def _last_round(n: int, p: float) -> int:
    """First ``k`` with ``P(K > k) < TAIL_EPSILON`` (``n·p^k`` bounds the tail)."""
    if n == 0:
        return 0
    if p == 0:
        return 1
    bound = math.ceil(math.log(TAIL_EPSILON / n) / math.log(p)) + 1
    if bound > MAX_ROUNDS:
        raise ModelError(f"loss {p!r} is too close to 1: over {MAX_ROUNDS:,} rounds to sum")
    tail = _tail(n, p, np.arange(bound + 1))
    return int(np.flatnonzero(tail < TAIL_EPSILON)[0])


def _count(name: str, value: int) -> int:
    """An integer count ≥ 0 (floats equal to an integer are accepted)."""
    if isinstance(value, bool):
        raise ModelError(f"{name} must be an integer ≥ 0, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ModelError(f"{name} must be an integer ≥ 0, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or number != int(number):
        raise ModelError(f"{name} must be an integer ≥ 0, got {value!r}")
    return int(number)


def _counts(name: str, value: ArrayLike) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.floor(arr)):
        raise ModelError(f"{name} must be integers ≥ 0, got {value!r}")
    return arr
