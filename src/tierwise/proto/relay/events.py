"""Events a :class:`RelayConnection` hands to its owner (h11 ``_events.py`` style)."""

from __future__ import annotations

from dataclasses import dataclass

from tierwise.errors import LocalProtocolError

__all__ = [
    "ConnectionTerminated",
    "Event",
    "HandshakeCompleted",
    "PeerResponsive",
    "PeerSilent",
    "StreamDataReceived",
    "StreamReset",
]


@dataclass(slots=True, unsafe_hash=True)
class Event:
    """Base of every relay event."""


@dataclass(slots=True, unsafe_hash=True)
class HandshakeCompleted(Event):
    """Session keys are in place; streams may carry data."""


# One per data packet received: its own __init__, which a compiled build runs in C (a
# frozen dataclass's generated __init__ ran as Python there, ≈ 30 × slower). The events
# are no longer frozen (a frozen base forbids an unfrozen subclass); nothing mutates them.
@dataclass(slots=True, init=False, unsafe_hash=True)
class StreamDataReceived(Event):
    """In-order bytes of a stream; ``end_stream``: the peer closed its half."""

    stream_id: int
    data: bytes
    end_stream: bool

    def __init__(self, stream_id: int, data: bytes, end_stream: bool = False) -> None:
        if stream_id < 0:
            raise LocalProtocolError(f"stream id must be ≥ 0, got {stream_id}")
        self.stream_id, self.data, self.end_stream = stream_id, data, end_stream


@dataclass(slots=True, unsafe_hash=True)
class StreamReset(Event):
    """The peer abandoned a stream (or refused it: ``code`` says why)."""

    stream_id: int
    code: int


@dataclass(slots=True, unsafe_hash=True)
class ConnectionTerminated(Event):
    """The session is over: the peer closed it, or it went silent for the idle timeout."""

    code: int
    reason: str


@dataclass(slots=True, unsafe_hash=True)
class PeerSilent(Event):
    """The peer left data unanswered for the dead-peer silence; with ``silent_grace_s`` the
    session is kept (probing) instead of ended: a path blackout, or a peer that is gone."""

    silence_s: float


@dataclass(slots=True, unsafe_hash=True)
class PeerResponsive(Event):
    """A silent session heard an authentic datagram again: the blackout is over."""
