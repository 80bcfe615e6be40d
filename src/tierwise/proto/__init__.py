"""Sans-IO transport: objects that take bytes and the current time and return what to send.

Nothing here reads a clock or opens a socket, so the same endpoints run inside the
simulator (:mod:`tierwise.sim`) and, later, behind real sockets in the relay.
"""

from tierwise.proto import fixed as _fixed  # noqa: F401  (registers "fixed")
from tierwise.proto.congestion import CONTROLLERS, CongestionController, make_controller
from tierwise.proto.fec import CauchyCode, FecReceiver, FecSender, Report, Symbol
from tierwise.proto.rangeset import RangeSet
from tierwise.proto.streams import Chunk, StreamData, StreamDelivery, StreamScheduler
from tierwise.proto.tcp import Ack, Receiver, Segment, Sender

__all__ = [
    "CONTROLLERS",
    "Ack",
    "CauchyCode",
    "Chunk",
    "CongestionController",
    "FecReceiver",
    "FecSender",
    "RangeSet",
    "Receiver",
    "Report",
    "Segment",
    "Sender",
    "StreamData",
    "StreamDelivery",
    "StreamScheduler",
    "Symbol",
    "make_controller",
]
