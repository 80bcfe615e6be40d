"""The relay's transport, sans-IO (§12.3.5): one sealed UDP session carrying many streams.

:class:`RelayConnection` is the whole protocol; :mod:`.wire` the format,
:mod:`.crypto` the sealing, :mod:`.fec` the erasure coding, :mod:`.rate` the
sending rate, :mod:`.streams` the per-stream buffers. The asyncio shell is
:mod:`tierwise.relay`; the simulator drives the same object.
"""

from tierwise.proto.relay.connection import RelayConfig, RelayConnection, RelayStats
from tierwise.proto.relay.crypto import KEY_BYTES
from tierwise.proto.relay.events import (
    ConnectionTerminated,
    Event,
    HandshakeCompleted,
    PeerResponsive,
    PeerSilent,
    StreamDataReceived,
    StreamReset,
)

__all__ = [
    "KEY_BYTES",
    "ConnectionTerminated",
    "Event",
    "HandshakeCompleted",
    "PeerResponsive",
    "PeerSilent",
    "RelayConfig",
    "RelayConnection",
    "RelayStats",
    "StreamDataReceived",
    "StreamReset",
]
