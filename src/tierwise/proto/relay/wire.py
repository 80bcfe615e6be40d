"""The relay's wire format: packet headers and frames, and the one parser for untrusted bytes.

Every datagram starts with the same 17-byte header (big-endian), which is also
the AEAD's associated data, so nothing in it can be changed undetected::

    type u8 | connection id (8 bytes) | packet number u64

    HELLO    (client → gateway)  header | client random (32) | stream window u64 |
                                 session window u64 | sent u64 (Unix ns, 0: undated) |
                                 version u8 (1) | admission tag (8) | zero padding |
                                 tag (16)
    WELCOME  (gateway → client)  header | gateway random (32) | stream window u64 |
                                 session window u64 | tag (16)
    DATA     (both ways)         header | packet-number token (4) | AEAD(frames)
                                 (ciphertext + 16-byte tag; header and token: the AD)

A HELLO is padded to :data:`HELLO_BYTES` so the WELCOME it earns is smaller
(no amplification); its send time lets a gateway refuse a recorded HELLO replayed
later (a second session for nobody). Its version byte says how the rest is laid out
(:data:`HELLO_VERSION`; a gateway drops another version unanswered, as malformed — a
client that needs a version the gateway does not speak sees no WELCOME). Its admission
tag (:func:`~tierwise.proto.relay.crypto.admission_tag`, the window of its send time and
a slot drawn for each HELLO; slot 0 is the one tag a window of the first version 1
clients) lets a gateway's kernel drop HELLO-shaped floods from anyone without the key
before they queue, and a tag copied from the path once it is seen flooded. A DATA
packet's token (:class:`~tierwise.proto.relay.crypto.PacketTokens`, version 2) is a
keyed function of its packet number that an on-path observer cannot know before the
packet is sent: a receiver's kernel lists the tokens of the numbers it accepts next
(:func:`tierwise.relay.kfilter.client_window_program`), so forgeries that copy the numbers
off the path are dropped before they queue; a receiver without the filter checks it
before the AEAD. Version 1 (no token) and version 2 ends refuse each other's HELLOs
unanswered. Frames inside a DATA packet::

    PADDING          0x00  (the rest of the packet)
    PING             0x01
    ACK              0x02  delay_us u32 | loss_ppm u32 | n u8 | n × (start u64, end u64)
    STREAM           0x03  stream u32 | offset u64 | flags u8 | priority u8 | length u16 | data
                           flags: FIN 0x01, ACK_LATER 0x02 (a window-filling bulk flight:
                           the receiver may acknowledge it late, once per several packets)
    RESET            0x04  stream u32 | code u16 | final size u64
    MAX_DATA         0x05  limit u64
    MAX_STREAM_DATA  0x06  stream u32 | limit u64
    REPAIR           0x07  code u8 | first pn u64 | k u8 | r u8 | index u8 | length u16 | bytes
    CLOSE            0x08  code u16
    PATH_CHALLENGE   0x09  data (8 bytes, random)
    PATH_RESPONSE    0x0A  data (8 bytes: the challenge's, echoed)

ACK ranges are half-open packet-number ranges, highest first; ``loss_ppm`` is
the receiver's measured raw loss of the direction it acknowledges (§12.3.3:
the two directions of a path may differ). :func:`parse_frames` is the only
function that reads frames; it checks the length before every read and raises
:class:`FrameError` (a counted drop for the caller) on anything malformed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tierwise.errors import RemoteProtocolError

__all__ = [
    "DATA_HEADER",
    "DATA_HEADER_BYTES",
    "HEADER",
    "HELLO_ADMIT_AT",
    "HELLO_BYTES",
    "HELLO_TIME_AT",
    "HELLO_VERSION",
    "HELLO_VERSION_AT",
    "PN_TOKEN_AT",
    "PN_TOKEN_BYTES",
    "Ack",
    "Close",
    "Frame",
    "FrameError",
    "MaxData",
    "MaxStreamData",
    "PathChallenge",
    "PathResponse",
    "Ping",
    "Repair",
    "Reset",
    "StreamFrame",
    "append_stream_frame",
    "encode_frame",
    "parse_frames",
    "parse_header",
]

HELLO, WELCOME, DATA = 1, 2, 3
HEADER = struct.Struct(">B8sQ")
HEADER_BYTES = HEADER.size  # 17
# DATA: the header, then the packet number's token (crypto.PacketTokens): 21 bytes
PN_TOKEN_AT = HEADER_BYTES
PN_TOKEN_BYTES = 4
DATA_HEADER = struct.Struct(">B8sQ4s")
DATA_HEADER_BYTES = DATA_HEADER.size  # 21
RANDOM_BYTES = 32
TAG_BYTES = 16
HELLO_BYTES = 1200  # QUIC's minimum Initial size (RFC 9000 §14.1): the reply is never larger
# Where a HELLO has its send time, version and admission tag (after header, random, windows).
HELLO_TIME_AT = HEADER_BYTES + RANDOM_BYTES + 16
HELLO_VERSION_AT = HELLO_TIME_AT + 8
HELLO_ADMIT_AT = HELLO_VERSION_AT + 1
HELLO_VERSION = 2  # 1: before the DATA token; 0 (zero padding there): before the admission tag
FIN = 0x01
ACK_LATER = 0x02  # a receiver that does not know the flag ignores it (and acknowledges early)
ACK_RANGES_MAX = 32

_ACK = struct.Struct(">IIB")
_RANGE = struct.Struct(">QQ")
_STREAM = struct.Struct(">IQBBH")
_STREAM_HEAD = struct.Struct(">BIQBBH")  # the type byte and a STREAM frame's fields
_RESET = struct.Struct(">IHQ")
_U64 = struct.Struct(">Q")
_MSD = struct.Struct(">IQ")
_REPAIR = struct.Struct(">BQBBBH")
_U16 = struct.Struct(">H")
PATH_DATA_BYTES = 8
_PATH = struct.Struct(">8s")


class FrameError(RemoteProtocolError):
    """A datagram or frame is malformed (the caller counts it as a drop)."""


@dataclass(frozen=True, slots=True)
class Ping:
    """Ack-eliciting, carries nothing (a probe)."""


# Built per packet: a plain dataclass with its own __init__ (compiled, a compiled build
# constructs it in C; the frozen dataclass's generated __init__ ran as Python, ≈ 30 × slower).
# Equality, hashing and repr are the dataclass's; nothing mutates a frame.
@dataclass(slots=True, init=False, unsafe_hash=True)
class Ack:
    """Packet-number ranges received, highest first, and the measured loss of that direction."""

    ranges: tuple[tuple[int, int], ...]
    delay_s: float
    loss: float

    def __init__(
        self, ranges: tuple[tuple[int, int], ...], delay_s: float = 0.0, loss: float = 0.0
    ) -> None:
        self.ranges, self.delay_s, self.loss = ranges, delay_s, loss


@dataclass(slots=True, init=False, unsafe_hash=True)
class StreamFrame:
    """Bytes ``[offset, offset + len(data))`` of a stream; the first one opens it."""

    stream_id: int
    offset: int
    data: bytes
    fin: bool
    priority: int
    ack_later: bool  # the sender is in a bulk flight: a delayed ACK will do

    def __init__(
        self,
        stream_id: int,
        offset: int,
        data: bytes,
        fin: bool = False,
        priority: int = 0,
        ack_later: bool = False,
    ) -> None:
        self.stream_id, self.offset, self.data = stream_id, offset, data
        self.fin, self.priority, self.ack_later = fin, priority, ack_later


@dataclass(frozen=True, slots=True)
class Reset:
    """The sender abandons a stream at ``final_size`` bytes."""

    stream_id: int
    code: int
    final_size: int


@dataclass(frozen=True, slots=True)
class MaxData:
    """Session flow-control credit: the peer may send stream bytes up to ``limit`` in total."""

    limit: int


@dataclass(frozen=True, slots=True)
class MaxStreamData:
    """Stream flow-control credit: bytes up to offset ``limit``."""

    stream_id: int
    limit: int


@dataclass(slots=True, init=False, unsafe_hash=True)
class Repair:
    """Repair symbol ``index`` (≥ k) of the FEC block of packets ``first_pn … first_pn+k−1``."""

    code: int
    first_pn: int
    k: int
    r: int
    index: int
    data: bytes

    def __init__(self, code: int, first_pn: int, k: int, r: int, index: int, data: bytes) -> None:
        self.code, self.first_pn, self.k, self.r, self.index = code, first_pn, k, r, index
        self.data = data


@dataclass(frozen=True, slots=True)
class Close:
    """The session ends (``code`` 0: orderly)."""

    code: int = 0


@dataclass(frozen=True, slots=True)
class PathChallenge:
    """Is the peer at the address this went to? (RFC 9000 §8.2: 8 unpredictable bytes.)"""

    data: bytes


@dataclass(frozen=True, slots=True)
class PathResponse:
    """The data of a PATH_CHALLENGE this end received, sent back: it was reachable there."""

    data: bytes


Frame = (
    Ping
    | Ack
    | StreamFrame
    | Reset
    | MaxData
    | MaxStreamData
    | Repair
    | Close
    | PathChallenge
    | PathResponse
)


def parse_header(data: bytes) -> tuple[int, bytes, int]:
    """``(type, connection id, packet number)`` of a datagram, or :class:`FrameError`."""
    if len(data) < HEADER_BYTES + TAG_BYTES:
        raise FrameError(f"datagram of {len(data)} bytes is shorter than a header and tag")
    kind, cid, pn = HEADER.unpack_from(data)
    if kind not in (HELLO, WELCOME, DATA):
        raise FrameError(f"unknown packet type {kind}")
    return kind, cid, pn


def encode_frame(frame: Frame) -> bytes:
    """The bytes of one frame."""
    # isinstance before the table: a compiled build checks a native class in a few
    # instructions, where a dict of lambdas is a lookup and a call through Python
    if isinstance(frame, StreamFrame):
        return _encode_stream(frame)
    if isinstance(frame, Ack):
        return _encode_ack(frame)
    if isinstance(frame, Repair):
        return _encode_repair(frame)
    return _ENCODERS[type(frame)](frame)


def _encode_ack(f: Ack) -> bytes:
    ranges = f.ranges[:ACK_RANGES_MAX]
    head = _ACK.pack(min(round(f.delay_s * 1e6), 0xFFFFFFFF), round(f.loss * 1e6), len(ranges))
    return b"\x02" + head + b"".join(_RANGE.pack(s, e) for s, e in ranges)


def append_stream_frame(
    out: bytearray,
    stream_id: int,
    offset: int,
    data: bytes,
    fin: bool,
    priority: int,
    ack_later: bool,
) -> None:
    """Append the bytes of ``StreamFrame(stream_id, offset, data, fin, priority, ack_later)``
    to ``out`` without building the frame (the sender's per-packet path)."""
    flags = (FIN if fin else 0) | (ACK_LATER if ack_later else 0)
    out += _STREAM_HEAD.pack(0x03, stream_id, offset, flags, priority, len(data))
    out += data


def _encode_stream(f: StreamFrame) -> bytes:
    out = bytearray()
    append_stream_frame(out, f.stream_id, f.offset, f.data, f.fin, f.priority, f.ack_later)
    return bytes(out)


def _encode_repair(f: Repair) -> bytes:
    head = _REPAIR.pack(f.code, f.first_pn, f.k, f.r, f.index, len(f.data))
    return b"\x07" + head + f.data


_ENCODERS = {
    Ping: lambda f: b"\x01",
    Ack: _encode_ack,
    StreamFrame: _encode_stream,
    Reset: lambda f: b"\x04" + _RESET.pack(f.stream_id, f.code, f.final_size),
    MaxData: lambda f: b"\x05" + _U64.pack(f.limit),
    MaxStreamData: lambda f: b"\x06" + _MSD.pack(f.stream_id, f.limit),
    Repair: _encode_repair,
    Close: lambda f: b"\x08" + _U16.pack(f.code),
    PathChallenge: lambda f: b"\x09" + _PATH.pack(f.data),
    PathResponse: lambda f: b"\x0a" + _PATH.pack(f.data),
}


def stream_frame_overhead() -> int:
    """Bytes a STREAM frame adds to its data."""
    return 1 + _STREAM.size


def parse_frames(buf: bytes) -> list[Frame]:
    """Every frame of a decrypted payload; :class:`FrameError` if any is malformed."""
    frames: list[Frame] = []
    pos, end = 0, len(buf)
    while pos < end:
        kind = buf[pos]
        pos += 1
        if kind == 0x00:
            break
        if kind == 0x03:  # the common frames first, without the table's call through Python
            frame, pos = _parse_stream(buf, pos)
            frames.append(frame)
            continue
        if kind == 0x02:
            frame, pos = _parse_ack(buf, pos)
            frames.append(frame)
            continue
        parser = _PARSERS.get(kind)
        if parser is None:
            raise FrameError(f"unknown frame type {kind:#04x} at byte {pos - 1}")
        frame, pos = parser(buf, pos)
        frames.append(frame)
    return frames


def _need(buf: bytes, pos: int, n: int) -> None:
    if pos + n > len(buf):
        raise FrameError(f"frame truncated: need {n} bytes at {pos}, have {len(buf) - pos}")


def _parse_ack(buf: bytes, pos: int) -> tuple[Frame, int]:
    _need(buf, pos, _ACK.size)
    delay_us, loss_ppm, n = _ACK.unpack_from(buf, pos)
    pos += _ACK.size
    _need(buf, pos, n * _RANGE.size)
    ranges = tuple(_RANGE.unpack_from(buf, pos + i * _RANGE.size) for i in range(n))
    if any(s >= e for s, e in ranges) or loss_ppm > 1_000_000:
        raise FrameError("ACK frame has an empty range or a loss above 100 %")
    return Ack(ranges, delay_us / 1e6, loss_ppm / 1e6), pos + n * _RANGE.size


def _parse_stream(buf: bytes, pos: int) -> tuple[Frame, int]:
    _need(buf, pos, _STREAM.size)
    sid, offset, flags, prio, length = _STREAM.unpack_from(buf, pos)
    pos += _STREAM.size
    _need(buf, pos, length)
    if offset + length >= 1 << 62:
        raise FrameError("STREAM frame beyond the largest offset")
    data = bytes(buf[pos : pos + length])
    return StreamFrame(sid, offset, data, bool(flags & FIN), prio, bool(flags & ACK_LATER)), (
        pos + length
    )


def _parse_fixed(st: struct.Struct, make):  # type: ignore[no-untyped-def]
    def parse(buf: bytes, pos: int) -> tuple[Frame, int]:
        _need(buf, pos, st.size)
        return make(*st.unpack_from(buf, pos)), pos + st.size

    return parse


def _parse_repair(buf: bytes, pos: int) -> tuple[Frame, int]:
    _need(buf, pos, _REPAIR.size)
    code, first_pn, k, r, index, length = _REPAIR.unpack_from(buf, pos)
    pos += _REPAIR.size
    _need(buf, pos, length)
    if not (k >= 1 and r >= 1 and k <= index < k + r and k + r <= 256):
        raise FrameError(f"REPAIR frame with k={k}, r={r}, index={index}")
    return Repair(code, first_pn, k, r, index, bytes(buf[pos : pos + length])), pos + length


_PARSERS = {
    0x01: lambda buf, pos: (Ping(), pos),
    0x02: _parse_ack,
    0x03: _parse_stream,
    0x04: _parse_fixed(_RESET, Reset),
    0x05: _parse_fixed(_U64, MaxData),
    0x06: _parse_fixed(_MSD, MaxStreamData),
    0x07: _parse_repair,
    0x08: _parse_fixed(_U16, Close),
    0x09: _parse_fixed(_PATH, PathChallenge),
    0x0A: _parse_fixed(_PATH, PathResponse),
}
