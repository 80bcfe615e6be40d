"""Sans-IO transport: objects that take bytes and the current time and return what to send.

Nothing here reads a clock or opens a socket, so the same endpoints run inside the
simulator (:mod:`tierwise.sim`) and, later, behind real sockets in the relay.
The exports load on first use (PEP 562): a TCP run does not import the FEC code.
"""

from __future__ import annotations

from tierwise.lazy import lazy_exports
from tierwise.proto import fixed as _fixed  # noqa: F401  (registers "fixed")

# name → module that defines it
_LAZY = {
    "CONTROLLERS": "tierwise.proto.congestion",
    "CongestionController": "tierwise.proto.congestion",
    "make_controller": "tierwise.proto.congestion",
    "CauchyCode": "tierwise.proto.fec",
    "FecReceiver": "tierwise.proto.fec",
    "FecSender": "tierwise.proto.fec",
    "Report": "tierwise.proto.fec",
    "Symbol": "tierwise.proto.fec",
    "RangeSet": "tierwise.proto.rangeset",
    "Chunk": "tierwise.proto.streams",
    "StreamData": "tierwise.proto.streams",
    "StreamDelivery": "tierwise.proto.streams",
    "StreamScheduler": "tierwise.proto.streams",
    "Ack": "tierwise.proto.tcp",
    "Receiver": "tierwise.proto.tcp",
    "Segment": "tierwise.proto.tcp",
    "Sender": "tierwise.proto.tcp",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
