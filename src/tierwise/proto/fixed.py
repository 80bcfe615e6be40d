"""A fixed congestion window: the sender never has more than ``W`` bytes in flight.

Used to check the simulator against ``B_useful = min(B_path, W/R)`` (§12.3.2).
"""

from __future__ import annotations

from tierwise.proto.congestion import CongestionController, register

__all__ = ["FixedWindow"]


@register
class FixedWindow(CongestionController):
    """``cwnd`` stays at the initial window whatever happens."""

    name = "fixed"

    def on_ack(self, *, acked, rtt, now, in_flight, delivery_rate) -> None:
        """The window does not grow."""

    def on_congestion(self, *, now: float, in_flight: int) -> None:
        """Nor shrink."""

    def on_rto(self, *, now: float, in_flight: int) -> None:
        """Not even on a timeout."""
