"""calc entries that answer inverse questions (§12.3.3, §12.4.3; exercises 12-6, 12-10)."""

from __future__ import annotations

from tierwise.calc._registry import Param, calc
from tierwise.model import inverse, multipath
from tierwise.model import loss as m


@calc(
    "fec-max-loss",
    "Highest loss rate a fixed number of repair symbols still covers at a success target",
    "§12.3.3, exercise 12-10(d)",
    Param("size", "size", "data to protect", "354640 B"),
    Param("mss", "size", "maximum segment size (one FEC symbol)", "1448 B"),
    Param("repair", "int", "repair symbols sent with the block", 63),
    Param("target", "float", "block success target", 0.999),
)
def fec_max_loss(size, mss, repair, target):
    """p* = max{p : P(Binomial(k + r, p) ≤ r) ≥ target}, k = ⌈S/MSS⌉ (bisection on p)."""
    k = m.packet_count(size, mss)
    p_max = inverse.fec_max_loss(k, repair, target)
    return {
        "data_symbols": k,
        "repair_symbols": repair,
        "overhead": float(m.fec_overhead(k, repair)),
        "max_loss": p_max,
        "block_success_at_max": m.fec_success(k, repair, p_max),
    }


@calc(
    "split-exit-threshold",
    "Exit rate below which a shared exit, not the two paths, bounds a split transfer",
    "§12.4.3, exercise 12-6(b)",
    Param("size", "size", "payload split over the two paths", "30 MB"),
    Param("fast", "rate", "rate of path 1", "20 Mbit/s"),
    Param("slow", "rate", "rate of path 2", "10 Mbit/s"),
    Param("fraction", "float", "share on path 1 (-1: the optimum B1/(B1 + B2))", -1.0),
)
def split_exit_threshold(size, fast, slow, fraction):
    """B* = S / max(xS/B1, (1 − x)S/B2); optimum x gives B* = B1 + B2."""
    x = None if fraction < 0 else fraction
    split_s = float(multipath.split_time_s(size, fast, slow, x))
    return {
        "split_s": split_s,
        "exit_threshold_rate_bytes_per_s": float(
            inverse.exit_bottleneck_rate_bytes_per_s(size, fast, slow, x)
        ),
    }
