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


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every relay event."""


@dataclass(frozen=True, slots=True)
class HandshakeCompleted(Event):
    """Session keys are in place; streams may carry data."""


@dataclass(frozen=True, slots=True)
class StreamDataReceived(Event):
    """In-order bytes of a stream; ``end_stream``: the peer closed its half."""

    stream_id: int
    data: bytes
    end_stream: bool = False

    def __post_init__(self) -> None:
        if self.stream_id < 0:
            raise LocalProtocolError(f"stream id must be ≥ 0, got {self.stream_id}")


@dataclass(frozen=True, slots=True)
class StreamReset(Event):
    """The peer abandoned a stream (or refused it: ``code`` says why)."""

    stream_id: int
    code: int


@dataclass(frozen=True, slots=True)
class ConnectionTerminated(Event):
    """The session is over: the peer closed it, or it went silent for the idle timeout."""

    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class PeerSilent(Event):
    """The peer left data unanswered for the dead-peer silence; with ``silent_grace_s`` the
    session is kept (probing) instead of ended: a path blackout, or a peer that is gone."""

    silence_s: float


@dataclass(frozen=True, slots=True)
class PeerResponsive(Event):
    """A silent session heard an authentic datagram again: the blackout is over."""
