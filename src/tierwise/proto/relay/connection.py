"""The relay session, sans-IO: one object per client–gateway pair (§12.3.5, Queqiao).

Like aioquic's ``QuicConnection`` it reads no clock and opens no socket::

    conn.receive_datagram(data, addr, now)     # bytes from the network
    conn.datagrams_to_send(now)                # [(bytes, addr)] to put on it
    conn.get_timer(); conn.handle_timer(now)   # the one deadline to arm
    conn.next_event()                          # HandshakeCompleted, StreamDataReceived, …
    sid = conn.open_stream(priority=0); conn.send(sid, data, end_stream=True)

Handshake (1 RTT): the client sends HELLO (its random), the gateway answers
WELCOME (its random); both derive the session keys (:mod:`.crypto`). Opening
a stream costs nothing more: its first STREAM frame opens it.

Reliability is QUIC's (RFC 9002): packets are acknowledged by ranges, a packet
is lost three packets or 9/8 RTT after a later one was acknowledged, or when
the probe timer fires; lost stream bytes are sent again, lowest priority value
first. FEC (:mod:`.fec`) repairs most losses before that: a packet whose block
carries repair symbols is not declared lost by packet count until packets after
its block's last repair has been acknowledged (then it is lost at once: the
receiver held every repair and still could not rebuild it). The sending rate
(:mod:`.rate`) follows the delivery rate and is braked by queueing delay, not
by loss.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from tierwise.errors import LocalProtocolError
from tierwise.proto.rangeset import RangeSet
from tierwise.proto.relay import wire
from tierwise.proto.relay.crypto import (
    ADMIT_SLOTS,
    ADMIT_TAG_BYTES,
    ROTATE_PACKETS,
    DirectionKeys,
    ReplayWindow,
    admission_key,
    admission_tag,
    check_key,
    handshake_aead,
    random_bytes,
    session_keys,
)
from tierwise.proto.relay.events import (
    ConnectionTerminated,
    Event,
    HandshakeCompleted,
    PeerResponsive,
    PeerSilent,
    StreamDataReceived,
    StreamReset,
)
from tierwise.proto.relay.fec import CODES, FecDecoder, FecEncoder
from tierwise.proto.relay.meter import (
    LOSS_SLACK_PACKETS,
    LOSS_WINDOW_PACKETS,
    LossMeter,
    ReceiveRate,
    RttEstimator,
)
from tierwise.proto.relay.pmtu import MAX_DATAGRAM_BYTES, PmtuSearch
from tierwise.proto.relay.police import EARLY_LOSS
from tierwise.proto.relay.prior import PathPrior
from tierwise.proto.relay.rate import INITIAL_CWND_PACKETS, RateController, RateSample
from tierwise.proto.relay.streams import BULK_BYTES, RecvStream, SendStream
from tierwise.proto.relay.wire import (
    Ack,
    Close,
    Frame,
    FrameError,
    MaxData,
    MaxStreamData,
    PathChallenge,
    PathResponse,
    Ping,
    Repair,
    Reset,
    StreamFrame,
)

__all__ = ["RelayConfig", "RelayConnection", "RelayStats", "hello_admit_tag", "hello_sent_s"]

Addr = Any
TRAIN_MIN_PACKETS = 8  # an ACK train shorter than this is too noisy to time
# ... or timed by fewer ACKs than this after its first, or over less time than
# TRAIN_MIN_SPREAD_S: ACKs that a busy process or path let go together (in the lab two
# ACKs 17 µs apart, from one GSO burst) read as 650 MB/s on a 31 MB/s path. A host's
# scheduler wakes 0.1–0.2 ms late (lab/bench/emulator.py); 8 packets take 0.26 ms at
# 333 Mbit/s, and the receiver acknowledges every second packet. (0.5 ms cost the
# simulated new-session bulk at 14 % loss 0.47 → 0.40 of the path: fewer trains qualify.)
TRAIN_MIN_ACKS = 4
TRAIN_MIN_SPREAD_S = 0.00025
TRAIN_QUEUED = 1.5  # a train whose ACKs spread this much more than its sending did was queued
# A train's first two packets sent further apart than this share of the least RTT were two
# flights (a pause between): the train starts again at the second (once a round).
TRAIN_SEND_GAP_RTT = 0.25
IDLE_TIMES_KEPT = 4  # ... or the sender ran out of data between them (one of its last few)
# A start-up flight acknowledged in fewer ACKs than TRAIN_MIN_ACKS is timed by the peer's
# arrival stamps once this much of it is acknowledged (half the initial window: 1.7 ms at
# 100 Mbit/s, long enough that the ACKs' own jitter is a small part of it).
FIRST_FLIGHT_TRAIN_BYTES_MIN = 16 * 1350
FIRST_FLIGHT_TRAIN_PACKETS = 16  # ... and one acknowledged whole by one ACK, from this many
# A paced flight the peer took in at its sending pace (arrivals spread at most KEPT_SLACK ×
# the sending, over at least KEPT_MIN_PACKETS datagrams) shows the path carries that pace,
# even where ACKs that left late (a busy reader) read its train below it: path memory's
# evidence to raise a remembered rate (relay/pathmemory.py).
KEPT_MIN_PACKETS = 32
# A direction with no measurement of its own starts from the other's delivery rate only
# if that is worth this many new-session windows per round trip (_prior_from_reverse).
REVERSE_MIN_WINDOWS = 2
KEPT_SLACK = 1.1
# What a bulk flight's receiver may leave unread (bulk_read_delay_s), as a share of the
# minimum RTT: a 1 ms read pause needs a path of ≥ 16 ms (the lab's 200 ms: 12.5 ms).
BULK_READ_DELAY_RTT = 1 / 16
# A batch's first prompt ACK leaves before the rest of the batch is fed if this end sent
# no ACK for this share of the least RTT: a flight's first ACK (prompt_ack_due).
PROMPT_ACK_QUIET_RTT = 0.25
PACKET_THRESHOLD = 3  # RFC 9002 §6.1.1
TIME_THRESHOLD = 9 / 8
DEAD_PEER_PTOS = 6  # silence that ends a session (with dead_peer_s): this many probe timeouts
DEAD_PEER_MAX_FACTOR = 3.0  # ... but at most 3 × dead_peer_s (a queue-inflated RTT on a busy host)
PTO_MAX_S = 2.0  # cap on the probe backoff, so a path back from a blackout is used soon
# A silent session superseded by a new one to the same peer (superseded()) is gone if it
# stays silent this many probe timeouts after that (probed at once), at least the floor.
SUPERSEDED_PTOS = 4
SUPERSEDED_MIN_S = 0.25
HELLO_RETRY_S = 0.5
HELLO_RETRY_MAX_S = 4.0
HELLO_NOW_MIN_S = 0.25  # hello_now() sends nothing sooner than this after the last HELLO
REFUSED = 1  # RESET code: too many streams
# Streams this end reset whose peer's final size has not arrived yet: the peer answers a
# RESET with its own at once, so only the last RTT's resets (and refusals) wait; past
# max(this, 4 × max_streams) the oldest is settled at the highest offset received (its
# in-flight bytes then stay off the session window). An entry is two ints.
AWAIT_FINAL_MIN = 1024
_WINDOWS = struct.Struct(">QQ")
# After the windows, a HELLO carries its send time (u64 ns since the Unix epoch, 0: none),
# inside the authenticated bytes: a gateway refuses a recorded HELLO replayed later.
_HELLO_TIME = struct.Struct(">Q")
_HELLO_TIME_AT = wire.HELLO_TIME_AT
_DATA_HEADER = wire.DATA_HEADER  # the per-packet paths read these as module globals
_DATA_HEADER_BYTES = wire.DATA_HEADER_BYTES
_PN_TOKEN_AT = wire.PN_TOKEN_AT
_DATA = wire.DATA
FEC_BLOCK_AGE_RTT = 0.25  # a block's repairs leave at most a quarter RTT after its first packet
FEC_BLOCK_AGE_MIN_S = 0.002
_FAR_S = float("inf")  # "never" for a time
_EPS_S = 1e-9  # timers compare with this slack so a deadline met in floating point fires
_OPEN_BLOCK = 1 << 63  # protect_until of a packet whose block's last repair has not left yet
# A small write the sender then idles after (a model's token, an answer's few bytes) is
# latency-bound: lost beyond its repairs, it and every write behind it on its stream wait
# for a retransmission (≈ 1.25 RTT: at 50 tokens/s and 200 ms, about a dozen tokens). Its
# block is sized for this residual, not the request's 1 − fec_target: ≈ 1e-3 of tokens
# late at most (issue 32's goals; Queqiao sizes its short blocks for 1e-3). At 14 % loss
# that is 4 repairs of a one-datagram block instead of 3; at 3.6 %, 2 either way.
SMALL_WRITE_PACKETS = 2
SMALL_WRITE_RESIDUAL = 1e-4
FEC_BURST_BLOCKS_MAX = 16  # a burst longer than this (≈ 1.3 MB) is bulk: no per-request target
FEC_BULK_TAIL_TARGET = 0.99  # a bulk burst's last BDP: a retransmission there adds an RTT
PACKET_OVERHEAD_BYTES = 60  # header, tag, ACK and STREAM frame headers of a full data packet
ACK_HEAD_BYTES = 10  # an ACK frame's type, delay, loss and count; 16 bytes more per range
BURST_PACKETS = 8  # the pacer lets this many packets leave at once after a pause (a tail)
# A request's datagrams (a stream not yet bulk; a new session's unpaced first flight, whose
# ACK train times the path) are returned this many per call, the rest due at once: a
# process seals a call's datagrams before the first leaves, and a first flight of 64 sealed
# whole (50–90 µs each, pure Python) put the path's first byte 3–6 ms late, and every byte
# after it. Bulk keeps the pacer's quantum per call (fewer calls: less CPU per byte).
BURST_CALL_PACKETS = 8
# ...only on a path whose least RTT is unknown or at least this: below it the ends' CPU,
# not the path, sets a request's time, and each cut costs a turn of the event loop and the
# receiver an ACK per eight datagrams (on loopback a 354,640 B request took 1.18-1.27 x
# as long and both ends 1.11-1.15 x the CPU with every request cut), while the first
# byte's gain (the sealing of the rest, 0.7 ms in the lab) only counts against a round trip.
BURST_CALL_MIN_RTT_S = 0.001
# A pacing timer that fires late while data waited only for the pacer: the time it slept
# through is sent now, up to this much (an event loop on a busy host wakes 2–7 ms late;
# with only the pause allowance it sent 15 packets per wake, a fifth of its pacing rate).
LATE_WAKE_CREDIT_S = 0.010
# Path validation (RFC 9000 §8.2, §9.3): a gateway that hears the session's newest packet
# from a new address keeps sending to the validated one and challenges the new one; it
# moves only when the challenge's data comes back. Until then it sends the new address at
# most this many times the bytes it received from there (§8.1: no amplification), and
# gives up after this many challenges, spaced by a backed-off probe timeout.
AMPLIFICATION_FACTOR = 3
PATH_CHALLENGES = 4
PATH_TOKENS_KEPT = 4  # a late response to an earlier challenge of the same probe still counts
CHALLENGE_BYTES = wire.DATA_HEADER_BYTES + 1 + wire.PATH_DATA_BYTES + wire.TAG_BYTES  # its datagram


# Control frames that a lost packet's recovery sends again (one tuple, not a union per packet).
_RETRANSMITTED = (MaxData, MaxStreamData, Reset, Close)
# The opening rate probe waits this long after the handshake: an application that writes
# as the session opens (a request queued behind the handshake) is its own first flight,
# and 43 kB of PINGs ahead of it would only queue in front of its data (and of the ACKs
# it sends for a download beside it: on an 8 Mbit/s path those ACKs, bunched behind
# them, timed the gateway's first flight at 3.4 × the path).
OPEN_PROBE_IDLE_S = 0.002
SENT_STALE_MIN = 64  # lost packets' numbers left in RelayConnection._sent_pns before a rebuild


class State(Enum):
    START = "start"
    HELLO_SENT = "hello sent"
    ESTABLISHED = "established"
    CLOSED = "closed"


# The config and the counters stay plain Python classes in the optional mypyc build: the
# relay's I/O layer and `snapshot()` read them with vars(), which a native class lacks.
@mypyc_attr(native_class=False)
@dataclass(frozen=True)
class RelayConfig:
    """Tunables of a relay session (both ends should agree on the FEC code)."""

    # The largest data packet (a repair packet is ≤ pmtu.REPAIR_EXTRA_BYTES longer). Above
    # pmtu.BASE_DATAGRAM_BYTES the session starts there and discovers the path's MTU upward
    # to this (RFC 8899, :mod:`.pmtu`); at or below it, this is the size, fixed.
    max_datagram_bytes: int = 1350
    stream_window_bytes: int = 16 << 20  # ≥ 2 × BDP of 333 Mbit/s × 200 ms (8.3 MB)
    session_window_bytes: int = 32 << 20
    max_streams: int = 1024
    fec_code: str = "zfec"
    fec_target: float = 0.999  # §12.3.3's success target of a request (all its blocks)
    # Per block of a bulk burst (0: no repairs). With no request deadline a block FEC
    # misses costs a retransmission inside the window, not time (§12.3.3); fewer repairs
    # cost less CPU (zfec's encode grows with them) and bytes. 0.8: docs/benchmarks.md.
    fec_bulk_target: float = 0.8
    fec_max_k: int = 64  # zfec encodes + decodes 25 MB/s of data at 14 % loss (benchmarks.md)
    ack_every: int = 2  # RFC 9000 §13.2.2
    ack_every_bulk: int = 16  # packets flagged ACK_LATER (a bulk flight) per acknowledgement
    max_ack_delay_s: float = 0.005
    idle_timeout_s: float = 30.0
    keepalive_s: float = 5.0
    dead_peer_s: float | None = None  # end the session if data goes unanswered this long
    # With dead_peer_s: a session silent that long is not ended but reported (PeerSilent)
    # and kept, probing with backoff, until it hears from the peer again (PeerResponsive;
    # a blackout that ended), its owner proves the peer lost it (superseded(),
    # peer_unreachable()), or nothing came for this long since the last datagram.
    silent_grace_s: float | None = None
    rotate_packets: int = ROTATE_PACKETS
    initial_rate_bytes_per_s: float | None = None
    # The loss FEC assumes before the peer has judged a window of this direction: a new
    # session's first flights (with initial_rate_bytes_per_s, a whole request) are
    # protected on a path the operator knows to be lossy; the measured loss then rules.
    initial_loss: float = 0.0
    pacing_quantum_s: float = 0.001  # burst allowance of the pacer
    bulk_bytes: int = BULK_BYTES  # a stream that has sent this much yields to smaller ones
    # Flow-control credit for bytes the application has consumed (stream_consumed), not
    # for bytes handed to it: an I/O layer that writes into a socket sets this and reports
    # what the socket took, so a reader that stops bounds what the relay buffers for it
    # to the windows. Off, credit follows delivery (the simulator's endpoints).
    credit_on_consume: bool = False
    # Client: once the session is up and idle with nothing measured of the path (no start
    # rate, no remembered one), this many full-size PINGs go back to back: their ACK
    # train times the path, so the first request leaves at the measured rate instead of
    # waiting a round trip on its own first flight's ACKs. 0: none.
    open_probe_packets: int = 32

    def __post_init__(self) -> None:
        if self.fec_code not in CODES:
            raise LocalProtocolError(f"unknown FEC code {self.fec_code!r}; known: {sorted(CODES)}")
        if not 0.0 < self.fec_target < 1.0:
            raise LocalProtocolError(f"fec_target must be in (0, 1), got {self.fec_target}")
        if not 0.0 <= self.fec_bulk_target < 1.0:  # 0: bulk blocks go without repairs
            raise LocalProtocolError(
                f"fec_bulk_target must be in [0, 1), got {self.fec_bulk_target}"
            )
        if not 0.0 <= self.initial_loss <= 0.5:
            raise LocalProtocolError(f"initial_loss must be in [0, 0.5], got {self.initial_loss}")
        if not 0 <= self.open_probe_packets <= 256:
            raise LocalProtocolError(
                f"open_probe_packets must be in [0, 256], got {self.open_probe_packets}"
            )
        if self.rotate_packets < 1 or self.bulk_bytes < 1:
            raise LocalProtocolError("rotate_packets and bulk_bytes must be ≥ 1")
        if not 200 <= self.max_datagram_bytes <= MAX_DATAGRAM_BYTES:
            raise LocalProtocolError(
                f"max_datagram_bytes must be in [200, {MAX_DATAGRAM_BYTES}], "
                f"got {self.max_datagram_bytes}"
            )


@mypyc_attr(native_class=False)
@dataclass
class RelayStats:
    """Counters of one session (what ``tierwise relay stats`` shows)."""

    packets_sent: int = 0
    packets_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    dropped_malformed: int = 0
    dropped_auth: int = 0
    dropped_replay: int = 0
    dropped_token: int = 0  # DATA without its packet number's token (before the AEAD)
    dropped_flow_control: int = 0
    packets_lost: int = 0
    retransmitted_bytes: int = 0
    stream_bytes_sent: int = 0
    repair_packets_sent: int = 0
    repair_bytes_sent: int = 0
    fec_recovered: int = 0
    streams_opened: int = 0
    streams_refused: int = 0
    paths_validated: int = 0  # the peer moved (NAT rebinding) and answered at its new address
    path_probes_failed: int = 0  # a new address never answered (a copied or spoofed packet)


class _Sent:
    """A sent, ack-eliciting packet until it is acknowledged or lost.

    A plain class with typed slots, not a dataclass: one is built per packet, and a
    compiled build constructs a native class in C, where a dataclass's generated
    ``__init__`` runs as Python.
    """

    __slots__ = (
        "app_limited",
        "control",
        "delivered",
        "delivered_s",
        "eliciting",
        "first_sent_s",
        "pn",
        "protect_until",
        "repairs_done_s",
        "sent_s",
        "size",
        "streams",
    )

    def __init__(
        self,
        pn: int,
        sent_s: float,
        size: int,
        eliciting: bool,
        streams: list[tuple[int, int, int, bool]] | None = None,
        control: list[Frame] | None = None,
        delivered: int = 0,
        delivered_s: float = 0.0,
        first_sent_s: float = 0.0,
        app_limited: bool = False,
        protect_until: int | None = None,
    ) -> None:
        self.pn, self.sent_s, self.size, self.eliciting = pn, sent_s, size, eliciting
        self.streams = [] if streams is None else streams
        self.control = [] if control is None else control
        self.delivered, self.delivered_s, self.first_sent_s = delivered, delivered_s, first_sent_s
        self.app_limited = app_limited
        self.protect_until = protect_until
        self.repairs_done_s: float | None = None  # when the last repair of its block left


class _PathProbe:
    """A new peer address under validation (the gateway's side of RFC 9000 §8.2)."""

    __slots__ = ("addr", "next_at", "received", "sent", "tokens", "tries")

    def __init__(self, addr: Addr, now: float) -> None:
        self.addr = addr
        self.received = 0  # authentic bytes from addr (the amplification budget's base)
        self.sent = 0  # bytes sent to addr
        self.tokens: list[bytes] = []  # the challenges' data, newest last
        self.tries = 0
        self.next_at = now  # the next challenge is due then


class _Stream:
    __slots__ = ("fin_delivered", "recv", "send", "stream_id")

    def __init__(self, stream_id: int, send: SendStream, recv: RecvStream) -> None:
        self.stream_id, self.send, self.recv = stream_id, send, recv
        self.fin_delivered = False


class RelayConnection:
    """One authenticated relay session carrying many streams."""

    def __init__(
        self,
        key: bytes,
        *,
        is_client: bool,
        config: RelayConfig | None = None,
        connection_id: bytes | None = None,
        prior: PathPrior | None = None,
    ) -> None:
        self.config = config or RelayConfig()
        self.is_client = is_client
        self._psk = check_key(key)
        self._hs = handshake_aead(key, self.config.rotate_packets)
        self._admit_key: bytes | None = None  # a client's, made with its first HELLO
        self.connection_id = connection_id or (random_bytes(8) if is_client else b"")
        self.state = State.START
        self.peer_addr: Addr = None
        self.stats = RelayStats()
        self._events: deque[Event] = deque()
        # In-order bytes that arrived for the stream of ``_merge_event`` (a StreamDataReceived
        # still waiting in _events) after it was queued: joined into it when it is taken, so
        # a batch of datagrams read at once hands its owner one event per stream, not one
        # per datagram (each costs the I/O layer a pass through its Python handlers).
        self._merge_event: StreamDataReceived | None = None
        self._merge_chunks: list[bytes] = []
        self._random = random_bytes(32)
        self._client_random = b""
        self._welcome = b""
        self._welcome_due = False  # the gateway owes the client a WELCOME
        self._hello_at: float | None = None
        self._hello_retry_s = HELLO_RETRY_S
        self._hello_sent_s: float | None = None  # when the last HELLO left
        self._wall_offset_s: float | None = None  # wall clock − ``now`` (HELLO times)
        self._send_keys: DirectionKeys | None = None
        self._recv_keys: DirectionKeys | None = None
        self._replay = ReplayWindow()
        self._streams: dict[int, _Stream] = {}
        # Streams whose owner reports what its reader consumed (:meth:`stream_consumed`)
        # rather than counting delivery as consumption (:meth:`hold`). The connection never
        # reads it; it lives here so a stream's mark goes when the stream does: once the
        # owner has taken every event (the stream's last ones still find it held).
        self.held: set[int] = set()
        self._forgotten: list[int] = []  # held streams forgotten since the events drained
        self.hold_peer_streams = False  # streams the peer opens start held (a gateway's)
        # Kept equal to a scan of the streams (_sendable_stream, _queued_bytes) wherever a
        # stream's send side changes: the timer and the sender ask per datagram, several times.
        self._ready_unmetered: set[int] = set()  # lost bytes or a lone FIN to send
        self._ready_new: set[int] = set()  # new bytes within the stream's limit (need credit)
        self._queued = 0  # bytes written and never sent, all streams
        self._next_sid = 0 if is_client else 1
        self._peer_sids = RangeSet()  # peer streams ever opened, as id // 2
        # streams we reset (or refused) before the peer's final size came: (delivered, highest)
        self._await_final: dict[int, tuple[int, int]] = {}
        self._control: list[Frame] = []
        self._closing = False
        self._silent_since: float | None = None  # PeerSilent reported, nothing heard since
        self._superseded_at: float | None = None  # ... and a new session proves it gone then
        self._probe: _PathProbe | None = None  # gateway: a new client address being validated
        self._init_transport()
        self.prior: PathPrior | None = None
        self.prior_state = "none"  # "in use", "held" (start-up done) or "dropped: why"
        self._prior_reverse = False  # the prior is the other direction's rate, not memory
        self._bulk_checked_round = -1  # the round _note_interactive last looked for bulk in
        if prior is not None:
            self.use_prior(prior)

    def _init_transport(self) -> None:
        c = self.config
        self._pn = 0
        self._sent: dict[int, _Sent] = {}  # outstanding packets, in packet-number order
        # their numbers, ascending (bisected by _on_ack), plus numbers of packets declared
        # lost since (_sent_stale of them) that no ACK range has covered yet
        self._sent_pns: list[int] = []
        self._sent_stale = 0
        self._in_flight = 0
        self._largest_acked = -1
        self._acked_before = -1  # the largest acknowledged before the ACK frame being read
        self._rtt = RttEstimator()
        self._pmtu = PmtuSearch(c.max_datagram_bytes)
        self.rate = RateController(self._pmtu.datagram_bytes, c.initial_rate_bytes_per_s)
        self._initial_loss = c.initial_loss  # or a remembered path's (use_prior)
        self._delivered, self._delivered_s, self._first_sent_s = 0, 0.0, 0.0
        self._round_delivered = 0
        self._app_limited_until = 0
        self._train_moved = False  # this round's train has moved its start once (_delivery_rate)
        # when the sender last ran out of data (the latest few; _delivery_rate)
        self._idle_times: deque[float] = deque(maxlen=IDLE_TIMES_KEPT)
        self._sending = False  # a packet has left since the sender last ran out of data
        self._kept_bytes_per_s = 0.0  # the highest pace a flight was delivered at (KEPT_*)
        # first ACK's time, bytes, first sent_s, ACKs since the first, the latest ACK's time,
        # and the first ACK's receiver-side time (its arrival less the delay it reports)
        self._train: tuple[float, int, float, int, float, float] | None = None
        self._ack_recv_s = 0.0  # the ACK being read: when its largest packet reached the peer
        self._path_rtt_s = float("inf")  # least RTT less the ACK's delay (_one_ack_flight)
        self._ack_largest = -1  # ... and that packet's number
        self._next_send_s = 0.0
        self._paced_from = (0.0, 0, 0.0)  # the last paced datagram's slot, size, rate (_repace)
        self._pacer_bound = False  # the last send stopped only for the pacer (data and window left)
        self._pto_count = 0
        self._last_eliciting_s: float | None = None
        self._active_s: float | None = None  # when open streams first sent data (dead-peer rule)
        self._loss_time: float | None = None
        self._fec = FecEncoder(CODES[c.fec_code], c.fec_max_k, c.fec_target)
        self._fec_rx = FecDecoder()
        self._repairs: deque[Repair] = deque()
        self._burst_blocks = 0  # FEC blocks closed since the sender was last idle
        self._open_probe_left = 0  # the session's opening rate probe, datagrams still to send
        self._open_probe_at = 0.0  # ... not before this (OPEN_PROBE_IDLE_S after the handshake)
        self._probe_pns: set[int] = set()  # ... its datagrams in flight (no window room taken)
        self._probe_flying = 0  # ... and their bytes
        self._block_small = False  # the open FEC block carries a non-bulk stream's data
        self._small_write = False  # the block being closed is a latency-bound small write
        self._loss_meter = LossMeter()
        self._rx_rate = ReceiveRate()
        self.peer_loss = 0.0
        self._ack_needed, self._ack_count = False, 0
        self._ack_at: float | None = None
        self._ack_prompt = False  # a packet waiting for the next ACK wants it early
        self._ack_sent_s = -_FAR_S  # when this end last sent an ACK (prompt_ack_due)
        self._peer_ack_later = False  # the peer's last STREAM frame's ACK_LATER (for repairs)
        self._largest_recv_s = 0.0
        self._last_recv_s: float | None = None
        self._peer_max_data = c.session_window_bytes
        self._peer_stream_window = c.stream_window_bytes
        self._sent_new = 0
        self._local_max_data = c.session_window_bytes
        self._recv_total = 0
        self._delivered_total = 0
        self._delivered_bytes = 0  # stream bytes handed to the owner in events
        self._settled_bytes = 0  # bytes a stream's end credited without delivering them

    # ------------------------------------------------------------------ public API

    @property
    def established(self) -> bool:
        return self.state is State.ESTABLISHED

    @property
    def largest_received_pn(self) -> int:
        """The largest packet number accepted from the peer (-1: none yet)."""
        return self._replay.largest

    def accept_window(self, size: int, behind: int = 0) -> tuple[int, bytes, list[int]] | None:
        """The packet numbers this end would accept next, for a filter in front of it
        (:func:`tierwise.relay.kfilter.client_window_program`): ``(first, tokens, skip)``
        — ``size`` numbers from ``first`` (``behind`` at most before the next one, for
        reordering), their tokens (4 bytes each), and the offsets of those received
        already; None before the session's keys."""
        if self._recv_keys is None:
            return None
        largest = self._replay.largest
        first = max(0, largest + 1 - behind)
        seen = self._replay.seen.contains
        skip = [pn - first for pn in range(first, largest + 1) if seen(pn)]
        return first, self._recv_keys.tokens.tokens(first, size), skip

    def connect(self, addr: Addr, now: float, wall_s: float | None = None) -> None:
        """Client: start the handshake towards the gateway at ``addr``. ``wall_s``, the
        Unix time at ``now``, dates each HELLO (a gateway refuses an undated one, or one
        dated more than two minutes off its own clock: see :func:`hello_sent_s`)."""
        if not self.is_client or self.state is not State.START:
            raise LocalProtocolError(f"connect() needs a fresh client, state is {self.state.value}")
        self._wall_offset_s = None if wall_s is None else wall_s - now
        self.peer_addr = addr
        self.state = State.HELLO_SENT
        self._hello_at = now
        self._last_recv_s = now

    def use_prior(self, prior: PathPrior) -> None:
        """Start from what an earlier session measured of this path (:mod:`.prior`): paced
        at a share of its delivery rate, the window from its minimum RTT, FEC from its
        loss. Only before this end has sent data: a session already measuring ignores it."""
        if self.stats.packets_sent or self.state is State.CLOSED:
            return
        if self.config.initial_rate_bytes_per_s is not None:
            return  # the operator's start rate rules
        self._start_from(prior)

    def _start_from(self, prior: PathPrior) -> None:
        self.prior, self.prior_state = prior, "in use"
        self.rate = RateController(
            self._pmtu.datagram_bytes,
            prior.start_rate_bytes_per_s,
            prior.min_rtt_s,
            blind_bytes=prior.blind_bytes,
        )
        self._initial_loss = max(self.config.initial_loss, prior.loss)

    def _drop_prior(self, why: str) -> None:
        """The remembered path is not this one any more: go on as a new session would."""
        if self.prior_state != "in use":
            return
        self.prior_state = (
            f"dropped{' (the way back' + chr(39) + 's rate)' if self._prior_reverse else ''}: {why}"
        )
        self._initial_loss = self.config.initial_loss
        self.rate.forget_initial_rate()

    def _check_prior(self, now: float) -> None:
        """At a round's end: a minimum RTT longer than remembered (another route; the
        ACKs' own delay taken out, unlike a handshake's, which a gateway just started
        answers late) or start-up ended by the brake (a queue) drops the prior; start-up
        over otherwise, the prior has done its work."""
        if self.prior_state != "in use":
            return
        if self.prior.rtt_changed(self._rtt.min_s or 0.0):  # type: ignore[union-attr]
            self._drop_prior("the round trip is longer than remembered")
            return
        if self.rate.startup:
            return
        if self.rate.startup_exit == "brake":
            self._drop_prior("the first round trips queued")
        else:
            self.prior_state = "held"

    def hello_now(self, now: float) -> bool:
        """Client, handshake unanswered: say the same HELLO again now and start its backoff
        over (an application is waiting; the gateway may only just have come up). The
        same HELLO, not a new session: a gateway that got the first one answers this one
        from the same session, so no second session is opened for the one client. Nothing
        is sent within ``HELLO_NOW_MIN_S`` of the last HELLO; whether one is due now."""
        if self.state is not State.HELLO_SENT:
            return False
        if self._hello_sent_s is not None and now - self._hello_sent_s < HELLO_NOW_MIN_S:
            return False
        self._hello_at = now
        self._hello_retry_s = HELLO_RETRY_S
        return True

    def next_event(self) -> Event | None:
        if self._events:
            event = self._events.popleft()
            merged = self._merge_event
            if merged is not None and event is merged:
                self._merge_event = None
                if self._merge_chunks:
                    merged.data = b"".join([merged.data, *self._merge_chunks])
                    self._merge_chunks = []
            return event
        if self._forgotten:  # every event of a forgotten stream is taken: unmark it
            self.held.difference_update(self._forgotten)
            self._forgotten.clear()
        return None

    def hold(self, stream_id: int) -> None:
        """Mark a stream whose reader reports consumption (:attr:`held`); a stream already
        forgotten is marked only until its remaining events are taken."""
        if stream_id in self._streams or stream_id in self._forgotten:
            self.held.add(stream_id)

    def open_stream(self, priority: int = 0) -> int:
        """A new stream's id; it reaches the peer with its first bytes (smaller: more urgent)."""
        if not 0 <= priority <= 255:
            raise LocalProtocolError(f"priority must be in [0, 255], got {priority}")
        sid = self._next_sid
        self._next_sid += 2
        self._add_stream(sid, priority)
        return sid

    def send(self, stream_id: int, data: bytes, end_stream: bool = False) -> None:
        """Queue bytes on a stream; ``end_stream`` half-closes it."""
        stream = self._stream(stream_id)
        stream.send.write(data, end_stream)
        self._queued += len(data)
        self._reclassify(stream)
        if data and self.prior_state == "none" and self.rate.unmeasured:
            self._prior_from_reverse()
        if data and not stream.send.bulk:
            self._note_interactive()

    def _receiving_bulk(self) -> bool:
        """A stream past the bulk mark is arriving (asked once a round)."""
        mark = self.config.bulk_bytes
        return any(
            st.recv.highest >= mark and not st.recv.finished for st in self._streams.values()
        )

    def _note_interactive(self) -> None:
        """A small stream is active (a request arriving, an answer written): if this end is
        pumping bulk, its rate drains the bulk's queue at the bottleneck and keeps it out
        (:meth:`RateController.on_interactive`), so the small stream's bytes meet the
        propagation delay, not the bulk's queue. Looked for at most once a round."""
        rate = self.rate
        if rate.interactive:
            rate.on_interactive()
            return
        if self._bulk_checked_round == rate.round:
            return
        self._bulk_checked_round = rate.round
        # a bulk stream with bytes still to send: not one finishing its tail (a transfer
        # whose answer starts is no interactive stream beside it)
        if any(st.send.bulk and st.send.end > st.send.next_offset for st in self._streams.values()):
            rate.on_interactive()

    def _prior_from_reverse(self) -> None:
        """This direction has carried only small writes and ACKs (a download's client): its
        first flight would start as a new session's, a round trip or two over its floor
        beside the download. The other direction's delivery rate is the guess instead, as a
        remembered path's (:meth:`use_prior`): paced at a share of it, no more than the
        blind budget before the first ACK, and dropped by the same rules — a longer round
        trip, more loss, a queue — where the way back is slower (an asymmetric path). Only
        while a bulk stream is arriving (a download under way): an answer sent after its
        request has ended keeps the new session's start (a wrong guess there cost a PMTU
        black hole's recovery its transfer, test_relay_pmtu)."""
        rx_rate, min_rtt = self._rx_rate.bytes_per_s, self._rtt.min_s
        if min_rtt is None or not 0 < min_rtt <= 60 or self.state is not State.ESTABLISHED:
            return
        if (
            rx_rate * min_rtt
            < REVERSE_MIN_WINDOWS * INITIAL_CWND_PACKETS * self._pmtu.datagram_bytes
        ):
            return  # no faster than a new session's own start: nothing to gain
        if self.config.initial_rate_bytes_per_s is not None:
            return
        if not any(  # the way back is carrying a bulk stream now, not one that has ended
            st.recv.final_size is None and st.recv.highest >= self.config.bulk_bytes
            for st in self._streams.values()
        ):
            return
        self._start_from(PathPrior(min_rtt_s=min_rtt, rate_bytes_per_s=min(rx_rate, 1e11)))
        self._prior_reverse = True

    def close(self, stream_id: int) -> None:
        """Half-close: no more bytes from us on this stream."""
        self.send(stream_id, b"", end_stream=True)

    def reset(self, stream_id: int, code: int = 0) -> None:
        """Abandon a stream in both directions; the peer gets :class:`StreamReset`.

        Its received bytes not yet delivered, and those still in flight, go back to
        the session's window when the peer's final size arrives (the peer answers
        with its own RESET); delivered bytes the application drops unread it reports
        with :meth:`stream_consumed`.
        """
        stream = self._stream(stream_id)
        stream.send.reset_code = code
        self._control.append(Reset(stream_id, code, stream.send.next_offset))
        self._forget(stream_id)
        recv = stream.recv
        if recv.final_size is not None:
            self._settle(recv.final_size, recv.delivered, recv.highest)
        else:
            self._await_peer_final(stream_id, recv.delivered, recv.highest)

    def send_buffered_bytes(self, stream_id: int) -> int:
        """Bytes written and not yet acknowledged (the I/O layer's back-pressure signal)."""
        stream = self._streams.get(stream_id)
        return stream.send.buffered_bytes if stream else 0

    def ping(self) -> None:
        """Ask the peer for an acknowledgement (a liveness probe; no stream is touched)."""
        if self.state is State.ESTABLISHED:
            self._control.append(Ping())

    def close_session(self, code: int = 0) -> None:
        """End the session: a CLOSE frame goes out, then nothing more."""
        if self.state is State.ESTABLISHED:
            self._control.append(Close(code))
        self._closing = True

    @property
    def silent(self) -> bool:
        """PeerSilent was reported and the peer has said nothing since."""
        return self._silent_since is not None

    def superseded(self, now: float) -> None:
        """A new session to the same peer was just established while this one is silent.

        The path works again, so a peer that still holds this session answers its
        probes within a round trip; a restarted peer drops them unanswered (an unknown
        connection id). This session is probed at once and at its probe timeouts (the
        backoff starts over); silent for ``SUPERSEDED_PTOS`` probe timeouts (at least
        ``SUPERSEDED_MIN_S``), it ends: its streams are lost. Not silent: nothing happens.
        """
        if self._silent_since is None or self._superseded_at is not None:
            return
        wait_s = max(SUPERSEDED_PTOS * self._rtt.pto_s(self.config.max_ack_delay_s),
                     SUPERSEDED_MIN_S)  # fmt: skip
        self._superseded_at = now + wait_s
        self._pto_count = 0  # the probe backoff starts over (not the blackout's 2 s)
        self._control.append(Ping())

    def peer_unreachable(self, reason: str) -> None:
        """The owner learnt the peer's port is closed (an ICMP port unreachable from its
        address): a silent session ends now. One still answered is kept (an ICMP is
        unauthenticated; a live session outweighs it)."""
        if self._silent_since is not None:
            self._terminate(0, reason)

    @property
    def unconsumed_bytes(self) -> int:
        """Stream bytes delivered to the owner and not yet reported consumed (with
        ``credit_on_consume``): what the owner's readers still hold. Once every stream
        has ended it is 0; below 0, some bytes were credited twice (the peer may send
        more than the window); a positive remainder is window lost for good."""
        return self._delivered_bytes - (self._delivered_total - self._settled_bytes)

    def has_stream(self, stream_id: int) -> bool:
        """Whether the stream is open here (neither reset nor finished both ways)."""
        return stream_id in self._streams

    @property
    def stream_ids(self) -> list[int]:
        return list(self._streams)

    def _stream(self, stream_id: int) -> _Stream:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise LocalProtocolError(f"no open stream {stream_id}")
        return stream

    def _forget(self, sid: int) -> _Stream | None:
        """Take a stream out of the session (and out of the sender's ready sets)."""
        stream = self._streams.pop(sid, None)
        if sid in self.held:
            self._forgotten.append(sid)
        if stream is not None:
            self._queued -= stream.send.end - stream.send.next_offset
            self._ready_unmetered.discard(sid)
            self._ready_new.discard(sid)
        return stream

    def _reclassify(self, stream: _Stream) -> None:
        """Put a stream whose send side changed in the ready sets it now belongs to."""
        send, sid = stream.send, stream.stream_id
        if send.has_unmetered():
            self._ready_unmetered.add(sid)
        else:
            self._ready_unmetered.discard(sid)
        if send.has_new():
            self._ready_new.add(sid)
        else:
            self._ready_new.discard(sid)

    def _add_stream(self, sid: int, priority: int) -> _Stream:
        stream = _Stream(
            sid,
            SendStream(sid, priority, self._peer_stream_window, self.config.bulk_bytes),
            RecvStream(sid, self.config.stream_window_bytes, self.config.credit_on_consume),
        )
        self._streams[sid] = stream
        self.stats.streams_opened += 1
        return stream

    @property
    def bulk_arriving(self) -> bool:
        """The peer is sending a window-filling bulk flight (its last STREAM frame asked for
        a late ACK) and nothing received since wants a prompt one: what this end takes in
        may wait a little (an I/O layer pauses its reads, :mod:`tierwise.relay.batchudp`)."""
        return self._peer_ack_later and not self._ack_prompt

    def prompt_ack_due(self, now: float) -> bool:
        """The first ACK of a flight is due by ``now``: packets that asked for a prompt one
        (a start-up flight or a request's burst, not a bulk flight's ACK_LATER packets), and
        no ACK sent for a quarter of the least RTT (the flight's sender waits for this one
        to go on; the later ones come a batch apart anyway). An I/O layer feeding a batch
        sends it before the batch's other datagrams (``Session.send_prompt_ack``)."""
        at = self._ack_at
        if not (self._ack_needed and self._ack_prompt) or at is None or at > now + _EPS_S:
            return False
        return now - self._ack_sent_s > PROMPT_ACK_QUIET_RTT * (self._rtt.min_s or 0.0)

    @property
    def bulk_read_delay_s(self) -> float:
        """How long what arrives may wait unread: ``BULK_READ_DELAY_RTT`` of the minimum RTT
        while a bulk flight arrives (:attr:`bulk_arriving`), else 0 (also before this end
        has an RTT sample). On loopback a millisecond's pause is many round trips: the
        sender's window stalls behind the late ACKs (65 against 217 Mbit/s measured)."""
        min_s = self._rtt.min_s
        if min_s is None or not self.bulk_arriving:
            return 0.0
        return BULK_READ_DELAY_RTT * min_s

    @property
    def ack_read_delay_s(self) -> float:
        """How long the peer's ACKs may wait unread while this end paces a window-filling
        bulk flight (its last send stopped only for the pacer, past start-up, not
        app-limited): ``BULK_READ_DELAY_RTT`` of the minimum RTT, else 0. An ACK read late
        changes no sample (an I/O layer feeds it with its kernel arrival time); the pacer,
        not the ACKs, clocks such a flight out."""
        min_s = self._rtt.min_s
        rate = self.rate
        if min_s is None or not self._pacer_bound or rate.startup or rate.app_limited:
            return 0.0
        return BULK_READ_DELAY_RTT * min_s

    @property
    def in_flight_bytes(self) -> int:
        """Bytes sent and neither acknowledged nor declared lost."""
        return self._in_flight

    def snapshot(self) -> dict[str, float | int | str]:
        """Measurements and counters, SI units in the key names."""
        return {
            "state": self.state.value,
            "srtt_s": self._rtt.srtt_s,
            "min_rtt_s": self._rtt.min_s or 0.0,
            "bandwidth_bytes_per_s": self.rate.btl_bw_bytes_per_s,
            "pacing_rate_bytes_per_s": self.rate.pacing_rate_bytes_per_s,
            "loss_out": self.peer_loss,
            "loss_in": self._loss_meter.loss,
            "path_prior": self.prior_state,
            # what this end receives (the other end's sending estimate lives there)
            "delivery_in_bytes_per_s": self._rx_rate.bytes_per_s,
            "policed": int(self.rate.police.policed),
            "policed_rate_bytes_per_s": self.rate.police.ceiling_bytes_per_s or 0.0,
            "fec_overhead": self.stats.repair_bytes_sent / max(self.stats.stream_bytes_sent, 1),
            "streams": len(self._streams),
            **{k: v for k, v in vars(self.stats).items()},
            **self.pmtu_stats(),
        }

    def path_estimate(self) -> dict[str, float | int]:
        """What this session measured of its path, for the next one (path memory): the
        minimum RTT, the largest recent delivery rate of this end's direction (0: none
        measured, no start rate in it), whether that rate is the path's (start-up ended:
        a queued train, a full pipe or a queue found the bottleneck) or only a lower bound
        (flights paced below it), the highest pace a flight of at least
        ``KEPT_MIN_PACKETS`` reached the peer at (its arrivals as spread as its sending: the
        path carries at least that, whatever the ACKs' timing), the loss each way, the
        datagram size in use, and the packets each way the figures rest on."""
        return {
            "min_rtt_s": self._rtt.min_s or 0.0,
            "rate_out_bytes_per_s": self.rate.measured_bw_bytes_per_s,
            "rate_kept_bytes_per_s": self._kept_bytes_per_s,
            "rate_is_path": int(not self.rate.startup),
            "loss_out": self.peer_loss,
            "loss_in": self._loss_meter.loss,
            "datagram_bytes": self._pmtu.datagram_bytes,
            "packets_sent": self.stats.packets_sent,
            "packets_received": self.stats.packets_received,
        }

    def pmtu_stats(self) -> dict[str, int]:
        """This end's path MTU search (RFC 8899): the datagram it sends, its probes."""
        pmtu = self._pmtu
        return {
            "pmtu_bytes": pmtu.pmtu_bytes,
            "datagram_bytes": pmtu.datagram_bytes,
            "pmtu_probes_sent": pmtu.probes_sent,
            "pmtu_probes_acked": pmtu.probes_acked,
            "pmtu_probes_lost": pmtu.probes_lost,
            "pmtu_black_holes": pmtu.black_holes,
        }

    # ------------------------------------------------------------------ receiving

    def receive_datagram(self, data: bytes, addr: Addr, now: float) -> None:
        """Take one datagram; anything not authentic is counted and dropped, never answered."""
        if self.state is State.CLOSED:
            return
        try:
            kind, cid, pn = wire.parse_header(data)
        except FrameError:
            self.stats.dropped_malformed += 1
            return
        self.receive_parsed(data, kind, cid, pn, addr, now)

    def receive_parsed(
        self, data: bytes, kind: int, cid: bytes, pn: int, addr: Addr, now: float
    ) -> None:
        """:meth:`receive_datagram` for a caller that has read the header already
        (:func:`wire.parse_header`: a gateway finding the datagram's session)."""
        if self.state is State.CLOSED:
            return
        if self.connection_id and cid != self.connection_id:
            self.stats.dropped_auth += 1
            return
        if kind == wire.HELLO and not self.is_client:
            self._on_hello(data, cid, addr, now)
        elif kind == wire.WELCOME and self.is_client:
            self._on_welcome(data, now)
        elif kind == wire.DATA:
            self._on_data(data, pn, addr, now, recovered=False)
        else:
            self.stats.dropped_malformed += 1

    def _hello_bytes(self, now: float) -> bytes:
        c = self.config
        sent_ns = 0 if self._wall_offset_s is None else round((now + self._wall_offset_s) * 1e9)
        body = self._random + _WINDOWS.pack(c.stream_window_bytes, c.session_window_bytes)
        body += _HELLO_TIME.pack(max(sent_ns, 0))
        if self._admit_key is None:
            self._admit_key = admission_key(self._psk)
        # a slot drawn for each HELLO: a tag the gateway struck (copied by an on-path
        # flooder) shuts out one HELLO, not the client (crypto.ADMIT_SLOTS)
        slot = random_bytes(1)[0] % ADMIT_SLOTS
        tag = admission_tag(self._admit_key, sent_ns / 1e9, slot)
        body += bytes([wire.HELLO_VERSION]) + tag
        head = wire.HEADER.pack(wire.HELLO, self.connection_id, 0) + body
        head += bytes(wire.HELLO_BYTES - len(head) - wire.TAG_BYTES)
        return head + self._hs.encrypt(self._random[:12], b"", head)

    def _on_hello(self, data: bytes, cid: bytes, addr: Addr, now: float) -> None:
        head, tag = data[: -wire.TAG_BYTES], data[-wire.TAG_BYTES :]
        body_at = wire.HEADER_BYTES
        if len(data) != wire.HELLO_BYTES or data[wire.HELLO_VERSION_AT] != wire.HELLO_VERSION:
            self.stats.dropped_malformed += 1  # another layout: not ours to read
            return
        if not self._verify(head, tag, data[body_at:][:12], b""):
            self.stats.dropped_auth += 1
            return
        client_random = data[body_at : body_at + 32]
        if self.state is State.ESTABLISHED:
            if client_random == self._client_random:
                self._welcome_due = True  # our WELCOME was lost: say it again
            else:
                self.stats.dropped_auth += 1
            return
        windows = _WINDOWS.unpack_from(data, body_at + 32)
        self.connection_id, self._client_random, self.peer_addr = cid, client_random, addr
        self._set_peer_windows(*windows)
        recv, send = session_keys(
            self._psk, client_random, self._random, self.config.rotate_packets
        )
        self._establish(send, recv, now)
        self._welcome_due = True

    def _welcome_bytes(self) -> bytes:
        c = self.config
        body = self._random + _WINDOWS.pack(c.stream_window_bytes, c.session_window_bytes)
        head = wire.HEADER.pack(wire.WELCOME, self.connection_id, 0) + body
        return head + self._hs.encrypt(self._random[:12], b"", head + self._client_random)

    def _on_welcome(self, data: bytes, now: float) -> None:
        body_at = wire.HEADER_BYTES
        head, tag = data[: -wire.TAG_BYTES], data[-wire.TAG_BYTES :]
        ok = len(data) == body_at + 32 + _WINDOWS.size + wire.TAG_BYTES and self._verify(
            head, tag, data[body_at : body_at + 12], self._random
        )
        if not ok or self.state is not State.HELLO_SENT:
            self.stats.dropped_auth += 1
            return
        gateway_random = data[body_at : body_at + 32]
        send, recv = session_keys(
            self._psk, self._random, gateway_random, self.config.rotate_packets
        )
        self._establish(send, recv, now)

    def _verify(self, head: bytes, tag: bytes, nonce: bytes, extra: bytes) -> bool:
        from cryptography.exceptions import InvalidTag

        try:
            self._hs.decrypt(nonce, tag, head + extra)
        except InvalidTag:
            return False
        return True

    def _set_peer_windows(self, stream_window: int, session_window: int) -> None:
        self._peer_stream_window, self._peer_max_data = stream_window, session_window
        for stream in self._streams.values():
            stream.send.peer_limit = max(stream.send.peer_limit, stream_window)
            self._reclassify(stream)

    def _establish(self, send: DirectionKeys, recv: DirectionKeys, now: float) -> None:
        self._send_keys, self._recv_keys = send, recv
        self.state = State.ESTABLISHED
        self._hello_at = None
        self._last_recv_s = now
        if self.is_client:  # the keep-alive clock starts now: an unused session must live too
            self._last_eliciting_s = now
            self._open_probe_left = self.config.open_probe_packets
            self._open_probe_at = now + OPEN_PROBE_IDLE_S
        self._events.append(HandshakeCompleted())

    def _on_data(self, data: bytes, pn: int, addr: Addr, now: float, recovered: bool) -> None:
        if self._recv_keys is None:
            self.stats.dropped_auth += 1
            return
        if not self._replay.fresh(pn):
            self.stats.dropped_replay += 1
            return
        header = data[:_DATA_HEADER_BYTES]
        tokens = self._recv_keys.tokens  # the number's token, inline (no call in order)
        listed = tokens.listed if pn >> 4 == tokens.block else tokens.load(pn >> 4)
        if header[_PN_TOKEN_AT:] != listed[pn & 15]:
            # not this number's token (a forgery, or a version 1 peer's DATA): no AEAD
            self.stats.dropped_token += 1
            return
        plain = self._recv_keys.open(pn, header, data[wire.DATA_HEADER_BYTES :])
        if plain is None:
            self.stats.dropped_auth += 1
            return
        try:
            frames = wire.parse_frames(plain)
        except FrameError:
            self.stats.dropped_malformed += 1
            return
        self._replay.accept(pn)
        self.stats.packets_received += 1
        self.stats.bytes_received += len(data)
        self._last_recv_s = now
        if self._silent_since is not None:  # the blackout is over: carry on
            self._silent_since = self._superseded_at = None
            self._events.append(PeerResponsive())
        if not recovered:
            self._loss_meter.on_packet(pn)
            self._rx_rate.on_datagram(len(data), now)
            self._fec_rx.on_datagram(pn, data)
            if not self.is_client and addr is not None:
                self._check_path(addr, len(data), pn == self._replay.largest, now)
        self._handle_frames(frames, pn, now, recovered)

    def _check_path(self, addr: Addr, size: int, newest: bool, now: float) -> None:
        """An authentic datagram from ``addr``: has the client moved (RFC 9000 §9.3)?

        The session's newest packet from a new address may be the client after a NAT
        rebinding, or a copy an on-path attacker raced from elsewhere: the gateway keeps
        sending to the validated address and challenges the new one (a copy's sender
        cannot answer for the client). The newest packet from the validated address
        again ends a probe: the client is still there (§9.3.3).
        """
        probe = self._probe
        if addr == self.peer_addr:
            if newest and probe is not None:
                self._probe = None
            return
        if probe is None or probe.addr != addr:
            if not newest:
                return  # an older packet from elsewhere: a late copy, not a move
            probe = self._probe = _PathProbe(addr, now)
        probe.received += size

    def _on_path_response(self, f: PathResponse, now: float) -> None:
        probe = self._probe
        if probe is not None and f.data in probe.tokens:
            self.peer_addr = probe.addr  # the client answered there: it moved
            self._probe = None
            self.stats.paths_validated += 1

    def _on_path_challenge(self, f: PathChallenge, now: float) -> None:
        if self.is_client:  # answered at once, to the gateway (RFC 9000 §8.2.2)
            self._control.append(PathResponse(f.data))

    @staticmethod
    def _challenge_fits(probe: _PathProbe) -> bool:
        return probe.sent + CHALLENGE_BYTES <= AMPLIFICATION_FACTOR * probe.received

    def _path_challenges(self, now: float) -> list[tuple[bytes, Addr]]:
        """A challenge to the address under validation, if one is due and within budget."""
        probe = self._probe
        if probe is None or probe.tries >= PATH_CHALLENGES or now + _EPS_S < probe.next_at:
            return []
        if not self._challenge_fits(probe):
            return []  # wait until the new address has sent more
        token = random_bytes(wire.PATH_DATA_BYTES)
        probe.tokens = [*probe.tokens[-(PATH_TOKENS_KEPT - 1) :], token]
        datagram = self._emit([PathChallenge(token)], now, eliciting=False)
        probe.sent += len(datagram)
        probe.tries += 1
        pto = self._rtt.pto_s(self.config.max_ack_delay_s)
        probe.next_at = now + min(pto * 2 ** (probe.tries - 1), PTO_MAX_S)
        return [(datagram, probe.addr)]

    def _handle_frames(self, frames: list[Frame], pn: int, now: float, rebuilt: bool) -> None:
        if rebuilt:  # recovered from repairs: not a proof of where its sender can be reached
            frames = [f for f in frames if not isinstance(f, PathChallenge)]
        eliciting = False
        later: bool | None = None  # all its STREAM frames say ACK_LATER (None: it has none)
        other = False  # a frame that wants a prompt ACK (PING, control)
        recovered: list[bytes] = []
        for frame in frames:
            # the common frames called directly: the handler table is a call through Python
            if isinstance(frame, StreamFrame):
                self._on_stream_frame(frame, now)
                later = frame.ack_later and later is not False
                eliciting = True
            elif isinstance(frame, Ack):
                self._on_ack(frame, now)
            elif isinstance(frame, Repair):
                got = self._fec_rx.on_repair(frame, self._replay.seen.contains)
                recovered += got
                eliciting = True
            else:
                self._FRAME_HANDLERS[type(frame)](self, frame, now)
                if self.state is State.CLOSED:
                    return  # a CLOSE: what follows it (and what its repairs rebuild) is not
                    # the session's any more — no stream opened or fed after its end
                other = True
                eliciting = True
        if later is not None:
            self._peer_ack_later = later
        if eliciting:
            bulk = not other and (self._peer_ack_later if later is None else later)
            self._schedule_ack(pn, now, bulk)
        for datagram in recovered:
            self.stats.fec_recovered += 1
            _, _, rpn = wire.HEADER.unpack_from(datagram)
            self._on_data(datagram, rpn, None, now, recovered=True)

    def _schedule_ack(self, pn: int, now: float, bulk: bool = False) -> None:
        """When to acknowledge: RFC 9000 §13.2, with a bulk flight acknowledged less often.

        Every ``ack_every`` packets, and at once after a gap; but packets the sender
        flagged ACK_LATER (a window-filling bulk flight: not start-up, not a burst that
        fits the window, whose ACK trains time the path) every ``ack_every_bulk``, gaps
        included (the ACK-frequency draft's "ignore order": FEC repairs most losses, and
        the sender waits for a block's repairs before it declares one lost, so at 14 %
        loss an ACK per gap was one per batch read). At most ``max_ack_delay_s`` after
        the first packet waiting.
        """
        in_order = pn == self._replay.largest and (pn == 0 or self._replay.seen.contains(pn - 1))
        self._ack_needed = True
        self._ack_count += 1
        self._ack_prompt = self._ack_prompt or not bulk
        if pn == self._replay.largest:
            self._largest_recv_s = now
        c = self.config
        every = c.ack_every if self._ack_prompt else c.ack_every_bulk
        gap = not in_order and not bulk
        due = now if self._ack_count >= every or gap else now + c.max_ack_delay_s
        self._ack_at = due if self._ack_at is None else min(self._ack_at, due)

    def _on_stream_frame(self, f: StreamFrame, now: float) -> None:
        stream = self._streams.get(f.stream_id)
        if stream is None:
            stream = self._accept_stream(f)
            if stream is None:
                return
        recv = stream.recv
        before = recv.highest
        beyond = f.offset + len(f.data) - before
        if beyond > 0 and self._recv_total + beyond > self._local_max_data:
            self.stats.dropped_flow_control += 1  # past the session's credit
            return
        data = recv.take(f.offset, f.data, f.fin)
        if data is None:
            self.stats.dropped_flow_control += 1
            return
        self._recv_total += recv.highest - before
        if recv.highest < self.config.bulk_bytes:
            self._note_interactive()
        if data or (recv.finished and not stream.fin_delivered):
            stream.fin_delivered = recv.finished
            self._deliver(f.stream_id, data, recv.finished)
            self._delivered_bytes += len(data)
        self._after_delivery(stream, len(data))

    def _deliver(self, stream_id: int, data: bytes, fin: bool) -> None:
        """Queue a stream's in-order bytes: onto its event still waiting last in the queue
        (the owner has not taken it yet: a batch being read), else as a new event."""
        last = self._merge_event
        events = self._events
        if (
            last is not None
            and events
            and events[-1] is last
            and last.stream_id == stream_id
            and not last.end_stream
        ):
            if data:
                self._merge_chunks.append(data)
            last.end_stream = fin
            return
        if last is not None and self._merge_chunks:  # it is no longer last: join its bytes now
            last.data = b"".join([last.data, *self._merge_chunks])
            self._merge_chunks = []
        event = StreamDataReceived(stream_id, data, fin)
        events.append(event)
        self._merge_event = event

    def _accept_stream(self, f: StreamFrame) -> _Stream | None:
        sid = f.stream_id
        local = sid % 2 == (0 if self.is_client else 1)
        if local or self._peer_sids.contains(sid // 2):
            return None  # a late frame of a stream that is already gone
        self._peer_sids.add(sid // 2, sid // 2 + 1)
        if len(self._streams) >= self.config.max_streams:
            self.stats.streams_refused += 1
            self._control.append(Reset(sid, REFUSED, 0))
            self._await_peer_final(sid, 0, 0)
            return None
        if self.hold_peer_streams:
            self.held.add(sid)
        return self._add_stream(sid, f.priority)

    def _after_delivery(self, stream: _Stream, nbytes: int) -> None:
        if not self.config.credit_on_consume:
            self._grant(stream, nbytes)
        self._maybe_forget(stream)

    def stream_consumed(self, stream_id: int, nbytes: int) -> bool:
        """The application took ``nbytes`` more of a stream's delivered bytes (with
        ``credit_on_consume``; otherwise credit follows delivery and this does nothing).
        True when new credit was queued for the peer: the caller should transmit.
        Bytes of a stream that is gone still count for the session's window."""
        if not self.config.credit_on_consume or nbytes <= 0:
            return False
        return self._grant(self._streams.get(stream_id), nbytes)

    def _grant(self, stream: _Stream | None, nbytes: int) -> bool:
        """Raise the stream's and the session's limits for ``nbytes`` more consumed;
        whether a new limit was queued."""
        queued = False
        if stream is not None:
            stream.recv.consumed = min(stream.recv.consumed + nbytes, stream.recv.delivered)
            limit = stream.recv.credit_update()
            if limit is not None:
                self._control.append(MaxStreamData(stream.stream_id, limit))
                queued = True
        self._delivered_total += nbytes
        window = self.config.session_window_bytes
        if self._delivered_total + window - self._local_max_data >= window // 4:
            self._local_max_data = self._delivered_total + window
            self._control = [c for c in self._control if not isinstance(c, MaxData)]
            self._control.append(MaxData(self._local_max_data))
            queued = True
        return queued

    def _maybe_forget(self, stream: _Stream) -> None:
        if stream.send.done and stream.fin_delivered:
            self._forget(stream.stream_id)

    def _on_reset(self, f: Reset, now: float) -> None:
        """The peer's final size settles the stream's session credit (RFC 9000 §4.5); a
        stream still open here answers with its own final size, so the peer can too."""
        sid = f.stream_id
        stream = self._forget(sid)
        if stream is not None:
            stream.send.reset_code = f.code
            self._settle(f.final_size, stream.recv.delivered, stream.recv.highest)
            self._control.append(Reset(sid, f.code, stream.send.next_offset))
            self._events.append(StreamReset(sid, f.code))
        elif (waiting := self._await_final.pop(sid, None)) is not None:
            self._settle(f.final_size, *waiting)
        elif sid % 2 != self._next_sid % 2 and not self._peer_sids.contains(sid // 2):
            # reset before any of its bytes came: settled, and its late frames open nothing
            self._peer_sids.add(sid // 2, sid // 2 + 1)
            self._settle(f.final_size, 0, 0)
            self._control.append(Reset(sid, f.code, 0))

    def _await_peer_final(self, sid: int, delivered: int, highest: int) -> None:
        self._await_final[sid] = (delivered, highest)
        if len(self._await_final) > max(AWAIT_FINAL_MIN, 4 * self.config.max_streams):
            # the oldest waits no longer: what arrived of it counts now (its bytes still in
            # flight stay off the window); its peer's final size, if it ever comes, is ignored
            oldest = next(iter(self._await_final))
            delivered, highest = self._await_final.pop(oldest)
            self._settle(highest, delivered, highest)

    def _settle(self, final_size: int, delivered: int, highest: int) -> None:
        """A closed stream's final size counts in full: bytes never to be delivered
        (received out of order, lost, in flight) are credited to the session now."""
        final_size = max(final_size, highest)
        self._recv_total += final_size - highest
        if final_size > delivered:
            self._settled_bytes += final_size - delivered
            self._grant(None, final_size - delivered)

    def _on_max_data(self, f: MaxData, now: float) -> None:
        self._peer_max_data = max(self._peer_max_data, f.limit)

    def _on_max_stream_data(self, f: MaxStreamData, now: float) -> None:
        stream = self._streams.get(f.stream_id)
        if stream is not None:
            stream.send.peer_limit = max(stream.send.peer_limit, f.limit)
            self._reclassify(stream)

    def _on_close(self, f: Close, now: float) -> None:
        self._terminate(f.code, "closed by the peer")

    def _terminate(self, code: int, reason: str) -> None:
        if self.state is not State.CLOSED:
            self.state = State.CLOSED
            self._events.append(ConnectionTerminated(code, reason))

    def _on_ack(self, f: Ack, now: float) -> None:
        self.peer_loss = f.loss
        largest = f.ranges[0][1] - 1 if f.ranges else -1
        if largest >= self._pn:
            return  # acknowledges a packet we never sent: ignore the frame
        # Only the packets still outstanding in each range: a bisection into the sorted
        # packet numbers, not a walk over every number from the oldest outstanding one to
        # the range's end (the ranges repeat what earlier ACKs acknowledged); a range
        # below the oldest outstanding packet costs one comparison.
        newly: list[_Sent] = []
        sent, pns = self._sent, self._sent_pns
        lowest = next(iter(sent), largest + 1)
        for start, end in f.ranges:
            if end <= lowest:
                continue
            i = bisect_left(pns, start)
            j = bisect_left(pns, end, i)
            if i >= j:
                continue
            for pn in pns[i:j]:
                p = sent.pop(pn, None)
                if p is not None:
                    newly.append(p)
                else:  # declared lost before, acknowledged now: its number was stale here
                    self._sent_stale -= 1
            del pns[i:j]
        if not newly:
            self._probe_share(f.loss, largest)
            return
        self._acked_before = self._largest_acked
        self._ack_recv_s = now - f.delay_s
        if self.rate.police.timing:  # a session's first rounds: the policer's judgement
            self.rate.police.recv_s = self._ack_recv_s
        self._ack_largest = largest
        if largest > self._largest_acked:
            self._largest_acked = largest
            top = max(newly, key=lambda p: p.pn)
            if top.pn == largest and top.eliciting:
                self._rtt.update(now - top.sent_s, f.delay_s)
                # the path's own round trip: the peer's lateness (the ACK's delay) taken out
                self._path_rtt_s = min(self._path_rtt_s, now - f.delay_s - top.sent_s)
        self._pto_count = 0
        for p in sorted(newly, key=lambda p: p.pn):
            self._on_packet_acked(p, now)
        if len(newly) >= FIRST_FLIGHT_TRAIN_PACKETS and self.rate.first_flight:
            self._one_ack_flight(newly, now, f.delay_s)
        self._detect_lost(now)
        self._probe_share(f.loss, largest)
        self._repace()

    def _one_ack_flight(self, newly: list[_Sent], now: float, delay_s: float) -> None:
        """A start-up flight acknowledged whole by one ACK (a receiver that read it in one
        batch): no train to time, but its last packet reached the peer later than an
        unqueued one would by the time the bottleneck took to pass the flight, so
        ``bytes / (RTT of its last − the least RTT, both less their ACK's delay)`` is the
        path's rate
        (more queueing of others' traffic reads it lower). In the lab a gateway waiting
        for a core did this to 1–6 of 8 new sessions, which then grew their window as a
        slow start does: 2.6–3.0 × the floor instead of 1.8 ×."""
        first_s = min(p.sent_s for p in newly)
        spread = now - delay_s - first_s - self._path_rtt_s
        if spread < TRAIN_MIN_SPREAD_S:
            return
        nbytes = sum(p.size for p in newly)
        sample = RateSample(
            nbytes / spread, now - first_s, app_limited=False, train=True, ack_delay_s=delay_s
        )
        self.rate.on_sample(sample, now)

    def _repace(self) -> None:
        """The next pacing slot at the rate as it is now, if that rate is at least twice
        the one the slot was set at (an estimate that jumped, not a gain cycle's step): a
        new session's first ACKs come while it paces at its initial window per RTT (one
        datagram per ≈ 3 ms on a 200 ms path); the train's rate comes a few ACKs later,
        and the slot taken at the old rate cost each first request ≈ 2 ms (relay_sim
        --cold)."""
        start_s, size, rate = self._paced_from
        if size and (now_rate := self.rate.pacing_rate_bytes_per_s) >= 2 * rate:
            self._next_send_s = min(self._next_send_s, start_s + size / now_rate)

    def _probe_share(self, reported: float, largest: int) -> None:
        """The peer's loss report less its share of lost path MTU probes (:mod:`.pmtu`)."""
        if self._pmtu.max_bytes > self._pmtu.base_bytes:
            self.peer_loss = self._pmtu.peer_loss(reported, largest)

    def _on_packet_acked(self, p: _Sent, now: float) -> None:
        if p.eliciting:
            self._in_flight -= p.size
        if self._probe_pns and p.pn in self._probe_pns:
            self._probe_resolved(p)
        if self._pmtu.max_bytes > self._pmtu.base_bytes:
            self._pmtu.on_acked(p.pn, p.size, now)
            self.rate.mss = self._pmtu.datagram_bytes
        for sid, start, end, fin in p.streams:
            stream = self._streams.get(sid)
            if stream is not None:
                stream.send.on_acked(start, end, fin)
                self._maybe_forget(stream)
        self._delivered += p.size
        self._delivered_s = now
        if p.eliciting:
            rate, queued, train = self._delivery_rate(p, now)
            delay = now - self._ack_recv_s
            sample = RateSample(rate, now - p.sent_s, p.app_limited, queued, train, delay)
            self.rate.on_sample(sample, now)
            # a gap filled late (rebuilt by FEC, or reordered) was dropped on the way; an
            # app-limited packet is start-up's to judge early only if it carried a bulk
            # stream's bytes (a gateway fed 64 kB at a time): a request's answer is no
            # flight to judge so (the numbers of its repairs and ACKs read as gaps, and at
            # 14 % random loss 15 warm requests in 100 took 2-4 x the floor)
            ctl = self.rate
            startup_bulk = (
                p.app_limited and ctl.police.early and ctl.startup and self._carries_bulk(p)
            )
            ctl.on_resolved(
                p.pn, p.size, p.sent_s, p.pn < self._acked_before, p.app_limited, startup_bulk
            )
        self._first_sent_s = p.sent_s
        if p.delivered >= self._round_delivered:
            self._round_delivered = self._delivered
            self.rate.on_round_end(
                self._pn,
                self._delivered,
                now,
                # written bytes wait unsent (a 25 MB window misread at start-up reads as
                # app-limited while the pacer holds a download back) ...
                backlogged=self._queued > 0,
                # ... and a download's queue on the way back delays this direction's ACKs
                reverse_bulk=self._receiving_bulk(),
            )
            if self.prior is not None:
                self._check_prior(now)
            self._train, self._train_moved = (now, 0, p.sent_s, 0, now, self._ack_recv_s), False
        if self._in_flight <= 0:
            self._train = None

    def _delivery_rate(self, p: _Sent, now: float) -> tuple[float, bool, bool]:
        """BBR's sample, or the ACK train's rate since the round began if higher.

        BBR measures from the last ACK before ``p`` was sent, so a burst sent from
        idle measures at most burst/RTT; the ACK train of that burst shows the
        bottleneck itself (packet dispersion), bounded by how fast it was sent.
        The flag says the train arrived clearly slower than it was sent: the
        path queued it, so its rate is the bottleneck's (packet-pair probing).
        Packets acknowledged by the train's first ACK do not count: they arrived
        before its clock started (counting them overstated a short train by ≈ 12 %);
        nor do packets sent before the train's first one and acknowledged late
        (recovered by FEC or retransmission): they would read as a burst.
        """
        interval = max(now - p.delivered_s, p.sent_s - p.first_sent_s)
        rate = (self._delivered - p.delivered) / interval if interval > 0 else 0.0
        if self._train is None:
            self._train = (now, 0, p.sent_s, 0, now, self._ack_recv_s)
            return rate, False, False
        start_s, nbytes, start_sent_s, acks, last_s, start_recv_s = self._train
        if (
            not nbytes
            and not self._train_moved
            and now > start_s
            and (
                p.sent_s - start_sent_s > TRAIN_SEND_GAP_RTT * (self._rtt.min_s or 0.0)
                or any(start_sent_s <= t < p.sent_s for t in self._idle_times)
            )
        ):
            # The train's first packet left long before the next one acknowledged, or the
            # sender ran out of data between them: the two were not one flight, so the ACKs
            # from here time the later flight, from here. In the lab a forward check's RESET, sent a
            # round trip before the request and answered during it, began the train: the
            # request's first flight was timed from the RESET's sending (≈ 1 MB/s), the path
            # never measured, and the rest of the request grew its window as a slow start.
            self._train, self._train_moved = (now, 0, p.sent_s, 0, now, self._ack_recv_s), True
            return rate, False, False
        if now <= start_s or p.sent_s < start_sent_s or p.pn < self._acked_before:
            # acked with the train's first ACK, an older packet acked late, or a gap a
            # previous ACK left and this one fills (rebuilt by FEC, or reordered): its
            # ACK time is its recovery's, not its arrival's
            return rate, False, False
        nbytes += p.size
        acks += now > last_s
        self._train = (start_s, nbytes, start_sent_s, acks, now, start_recv_s)
        if p.pn != self._ack_largest:
            # The ACK's time is its largest packet's arrival (and the reader's delay after
            # it); the others of the frame arrived earlier. A reader that acknowledges a
            # batch at once made each of them read as held up: timed by the largest only.
            return rate, False, False
        sent_dt = p.sent_s - start_sent_s
        recv_dt = self._ack_recv_s - start_recv_s
        # the longest of the ACKs' spacing here, the sending's and the arrivals' at the peer
        # (its stamps): ACKs bunched on the way back read no faster than the path delivered
        dt = max(now - start_s, sent_dt, recv_dt)
        queued = train = False
        long_enough = nbytes >= TRAIN_MIN_PACKETS * self._pmtu.datagram_bytes
        timed = acks >= TRAIN_MIN_ACKS and now - start_s >= TRAIN_MIN_SPREAD_S
        if not timed and self.rate.first_flight and nbytes >= FIRST_FLIGHT_TRAIN_BYTES_MIN:
            return self._first_flight_rate(rate, nbytes, sent_dt, start_recv_s)
        if long_enough and timed and dt > 0:
            rate = max(rate, nbytes / dt)
            train = True
            # Queued at the bottleneck only if the peer's arrival times spread too: a
            # receiver that stalled (descheduled, reading a batch) spreads its ACKs alone.
            spread = TRAIN_QUEUED * sent_dt
            queued = now - start_s >= spread and recv_dt >= spread
            if (
                not queued
                and nbytes >= KEPT_MIN_PACKETS * self._pmtu.datagram_bytes
                and 0 < recv_dt <= KEPT_SLACK * sent_dt
            ):
                self._kept_bytes_per_s = max(self._kept_bytes_per_s, nbytes / sent_dt)
        return rate, queued, train

    def _first_flight_rate(
        self, rate: float, nbytes: int, sent_dt: float, start_recv_s: float
    ) -> tuple[float, bool, bool]:
        """A start-up flight (a new session's first) acknowledged in too few ACKs to time (a
        receiver that read it in one or two batches), timed by when it reached the peer:
        each ACK's arrival less its reported delay is its largest packet's kernel stamp
        there. Its rate is at most the slower of the sending and the arrivals (a lower
        bound of the path, as an ACK train's), and the bottleneck's (queued) if the
        arrivals spread more than the sending did. In the lab a gateway waiting for a core
        read the 64-datagram first flight in one batch, sent one ACK, and the request grew
        its window as a slow start does: 2.6–2.8 × the floor instead of 1.8 ×."""
        recv_dt = self._ack_recv_s - start_recv_s
        if recv_dt < TRAIN_MIN_SPREAD_S:
            return rate, False, False
        queued = recv_dt >= TRAIN_QUEUED * sent_dt
        return max(rate, nbytes / max(recv_dt, sent_dt)), queued, True

    _FRAME_HANDLERS: ClassVar[dict[type, Any]] = {}  # filled below the class

    # ------------------------------------------------------------------ loss

    def _loss_delay_s(self) -> float:
        return TIME_THRESHOLD * max(self._rtt.srtt_s, self._rtt.latest_s)

    def _detect_lost(self, now: float) -> None:
        """RFC 9002 §6.1, with FEC-protected packets given until their block's repairs pass."""
        delay = self._loss_delay_s()
        self._loss_time = None
        lost: list[_Sent] = []
        for pn, p in self._sent.items():
            if pn >= self._largest_acked:
                break
            if p.protect_until is None:
                lost_at, by_count = p.sent_s + delay, self._largest_acked - pn >= PACKET_THRESHOLD
            else:  # the receiver holds the block's repairs and still lacks it: FEC fell short
                lost_at = self._protected_lost_at(p, delay)
                by_count = self._largest_acked >= p.protect_until
            if by_count or lost_at <= now + _EPS_S:
                lost.append(p)
            elif self._loss_time is None or lost_at < self._loss_time:
                self._loss_time = lost_at
        for p in lost:
            self._on_packet_lost(p)

    def _protected_lost_at(self, p: _Sent, delay: float) -> float:
        """When an unacknowledged FEC-protected packet counts as lost.

        Its block's last repair should have been acknowledged a time threshold
        after it left (tail protection: the last repair itself may be the one
        lost, and no later packet then shows it); the RFC 9002 rule, doubled,
        bounds the wait while the repairs have not all left.
        """
        lost_at = p.sent_s + 2 * delay
        if p.repairs_done_s is not None:
            lost_at = min(lost_at, p.repairs_done_s + delay + self.config.max_ack_delay_s)
        return lost_at

    def _on_packet_lost(self, p: _Sent) -> None:
        del self._sent[p.pn]
        # its number stays in _sent_pns (no shift of the list per loss) until the list is
        # mostly such stale numbers: then it is rebuilt from the dict's keys, in pn order
        self._sent_stale += 1
        if self._sent_stale > SENT_STALE_MIN and 2 * self._sent_stale > len(self._sent_pns):
            self._sent_pns = list(self._sent)
            self._sent_stale = 0
        if self._pmtu.max_bytes > self._pmtu.base_bytes and self._pmtu.on_lost(
            p.pn, p.size, p.sent_s
        ):
            self._in_flight -= p.size  # a path MTU probe: neither a data loss nor congestion
            self.rate.mss = self._pmtu.datagram_bytes
            return
        self.stats.packets_lost += 1
        if self._probe_pns and p.pn in self._probe_pns:
            self._probe_resolved(p)
        if self.prior is not None and self.prior_state == "in use":
            if self.prior.loss_changed(self.stats.packets_lost, self.stats.packets_sent):
                self._drop_prior("more loss than remembered")
        if p.eliciting:
            self._in_flight -= p.size
            self.rate.on_resolved(p.pn, p.size, p.sent_s, True, p.app_limited)
        for sid, start, end, fin in p.streams:
            stream = self._streams.get(sid)
            if stream is not None:
                stream.send.on_lost(start, end, fin)
                self._reclassify(stream)
                self.stats.retransmitted_bytes += end - start
        for frame in p.control:
            self._requeue(frame)

    def _requeue(self, frame: Frame) -> None:
        if isinstance(frame, MaxData):
            if not any(isinstance(c, MaxData) for c in self._control):
                self._control.append(MaxData(self._local_max_data))
        elif isinstance(frame, MaxStreamData):
            stream = self._streams.get(frame.stream_id)
            if stream is not None:
                self._control.append(MaxStreamData(frame.stream_id, stream.recv.limit))
        elif isinstance(frame, Reset | Close):
            self._control.append(frame)

    def _on_pto(self, now: float) -> None:
        """No acknowledgement for a probe timeout: everything sent before it is presumed lost."""
        self._pto_count += 1
        cutoff = now - self._rtt.pto_s(self.config.max_ack_delay_s)
        for p in [p for p in self._sent.values() if p.eliciting and p.sent_s <= cutoff + _EPS_S]:
            self._on_packet_lost(p)
        if not self._sendable_stream():
            self._control.append(Ping())

    def _pto_at(self) -> float | None:
        if self._in_flight <= 0 or self._last_eliciting_s is None:
            return None
        backoff = min(self._rtt.pto_s(self.config.max_ack_delay_s) * 2**self._pto_count, PTO_MAX_S)
        return self._last_eliciting_s + backoff

    # ------------------------------------------------------------------ timers

    def get_timer(self) -> float | None:
        """The next deadline: an ACK, a loss, a probe, pacing, a hello, keep-alive or idle.

        Called after every event (the simulator polls it several times per datagram):
        each candidate is O(1) (the streams' readiness is kept in sets, not scanned), and
        the earliest is taken without building a list.
        """
        if self.state is State.CLOSED:
            return None
        at = _earlier(self._hello_at, self._ack_at if self._ack_needed else None)
        at = _earlier(at, self._loss_time)
        at = _earlier(at, self._pto_at())
        last_recv_s = self._last_recv_s
        if last_recv_s is not None:
            at = _earlier(at, last_recv_s + self.config.idle_timeout_s)
            at = _earlier(at, self._dead_at() if self._silent_since is None else self._grace_at())
        if self.state is State.ESTABLISHED:
            # Control frames (RESET, MAX_DATA, PING, ...) wait only for the pacer.
            if self._repairs or self._control or (self._sendable_stream() and self._cwnd_room()):
                at = _earlier(at, self._next_send_s)
            if self._fec.open:
                at = _earlier(at, self._block_deadline())
            if self._open_probe_left and self._open_probe_ready():
                at = _earlier(at, self._open_probe_at)  # its start, or the rest of its train
            if self.is_client and self._last_eliciting_s is not None and not self._in_flight:
                at = _earlier(at, self._last_eliciting_s + self.config.keepalive_s)
            probe = self._probe
            if probe is not None and (
                probe.tries >= PATH_CHALLENGES or self._challenge_fits(probe)
            ):
                at = _earlier(at, probe.next_at)  # the next challenge, or giving up
        return at

    def _dead_at(self) -> float | None:
        """When unanswered data means the peer is gone: silence measured in probe timeouts.

        The peer has said nothing since our oldest unacknowledged packet left, for
        ``dead_peer_s`` and for ``DEAD_PEER_PTOS`` probe timeouts (RFC 9002 §6.2.1,
        rttvar included, so a lossy, jittery path gets longer), at most
        ``DEAD_PEER_MAX_FACTOR × dead_peer_s`` (a dead peer is still noticed). A lossy path
        keeps answering: every datagram that arrives restarts the count, and a
        silence that long spans several probes (this end's PTOs; the client's
        watchdog probes every 0.25 s), all of whose answers would have to be lost —
        at 14 % loss each way that is < 0.3 % (was ~26 % for a 1 s rule, two probes).

        Only while streams are open, counted from when the first of them sent data: an
        idle session's keep-alive PINGs back off and span only three probes in 1.8 s
        (at 14 % loss each way the rule ended 2 of 20 idle sessions within 300 s); the
        idle timeout bounds an idle session, and an old PING left unanswered does not
        condemn the next stream at once.
        """
        dead = self.config.dead_peer_s
        if not self._streams:
            self._active_s = None
        if dead is None or not self._sent or self._last_recv_s is None or self._active_s is None:
            return None
        oldest_s = max(next(iter(self._sent.values())).sent_s, self._active_s)
        probes_s = DEAD_PEER_PTOS * self._rtt.pto_s(self.config.max_ack_delay_s)
        silence_s = max(dead, min(probes_s, DEAD_PEER_MAX_FACTOR * dead))
        return max(self._last_recv_s, oldest_s) + silence_s

    def _grace_at(self) -> float | None:
        """When a silent session ends: its grace since the last datagram, or the proof of
        :meth:`superseded`, whichever comes first."""
        grace = self.config.silent_grace_s
        end = None if grace is None or self._last_recv_s is None else self._last_recv_s + grace
        if self._superseded_at is not None:
            end = self._superseded_at if end is None else min(end, self._superseded_at)
        return end

    def handle_timer(self, now: float) -> None:
        """Act on whatever deadline has passed (sending happens in :meth:`datagrams_to_send`)."""
        if self.state is State.CLOSED:
            return
        if (
            self._last_recv_s is not None
            and now + _EPS_S >= self._last_recv_s + self.config.idle_timeout_s
        ):
            self._terminate(0, f"no datagram from the peer for {self.config.idle_timeout_s:g} s")
            return
        if self._silent_since is not None:
            grace_at = self._grace_at()
            if grace_at is not None and now + _EPS_S >= grace_at:
                silence_s = now - (self._last_recv_s or now)
                why = " after a new session reached it" if self._superseded_at is not None else ""
                self._terminate(0, f"the peer did not answer for {silence_s:.2g} s{why}")
                return
        elif (dead_at := self._dead_at()) is not None and now + _EPS_S >= dead_at:
            oldest_s = max(next(iter(self._sent.values())).sent_s, self._active_s or 0.0)
            silence_s = now - max(self._last_recv_s or 0.0, oldest_s)
            if self.config.silent_grace_s is None:
                self._terminate(0, f"the peer did not answer for {silence_s:.2g} s")
                return
            self._silent_since = now
            self._events.append(PeerSilent(silence_s))
        if self._loss_time is not None and now + _EPS_S >= self._loss_time:
            self._detect_lost(now)
        pto = self._pto_at()
        if pto is not None and now + _EPS_S >= pto:
            self._on_pto(now)
        probe = self._probe
        if probe is not None and probe.tries >= PATH_CHALLENGES and now + _EPS_S >= probe.next_at:
            self._probe = None  # never answered: the validated address stays
            self.stats.path_probes_failed += 1
        keepalive = self._last_eliciting_s
        if self.is_client and self.established and keepalive is not None and not self._in_flight:
            if now + _EPS_S >= keepalive + self.config.keepalive_s:
                self._control.append(Ping())

    # ------------------------------------------------------------------ sending

    @property
    def _credit(self) -> int:
        return self._peer_max_data - self._sent_new

    def _sendable_stream(self) -> bool:
        """Whether any stream has a frame to send (``has_data`` of any stream), in O(1)."""
        return bool(self._ready_unmetered) or (bool(self._ready_new) and self._credit > 0)

    def _queued_bytes(self) -> int:
        """Bytes written and never sent, all streams (``end − next_offset`` summed)."""
        return self._queued

    def _cwnd_room(self) -> bool:
        # path MTU probes and the opening rate probe in flight take no room: stream data
        # never waits for their fate
        in_flight = self._in_flight - self._pmtu.flying_bytes - self._probe_flying
        return in_flight + self._pmtu.datagram_bytes <= self.rate.cwnd_bytes

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Addr]]:
        """Every datagram due now: handshake, acknowledgements, repairs, paced stream data."""
        if self.state is State.CLOSED:
            return []
        out = self._handshake_datagrams(now)
        if not self.established:
            return out
        min_rtt = self._rtt.min_s
        cut = min_rtt is None or min_rtt >= BURST_CALL_MIN_RTT_S
        while (datagram := self._next_packet(now)) is not None:
            out.append((datagram, self.peer_addr))
            if cut and len(out) % BURST_CALL_PACKETS == 0 and self._request_burst():
                break  # the rest is due now (get_timer): these leave while it is sealed
        if self._probe is not None:
            out += self._path_challenges(now)
        self._pacer_bound = bool(self._repairs) or (self._sendable_stream() and self._cwnd_room())
        if self._closing and not self._control:
            self._terminate(0, "closed by us")
        return out

    def _handshake_datagrams(self, now: float) -> list[tuple[bytes, Addr]]:
        if (
            self.state is State.HELLO_SENT
            and self._hello_at is not None
            and now + _EPS_S >= self._hello_at
        ):
            self._hello_at = now + self._hello_retry_s
            self._hello_retry_s = min(2 * self._hello_retry_s, HELLO_RETRY_MAX_S)
            self._hello_sent_s = now
            return [(self._hello_bytes(now), self.peer_addr)]
        if self._welcome_due:
            self._welcome_due = False
            return [(self._welcome_bytes(), self.peer_addr)]
        return []

    def _next_packet(self, now: float) -> bytes | None:
        paced = now + _EPS_S >= self._next_send_s
        # a path MTU probe goes between FEC blocks (a block's packet numbers are consecutive),
        # and a search's probe not ahead of a request's data (while the sender is idle or
        # sends bulk only); a black hole's confirmation goes at once: the data waits on it
        pmtu = self._pmtu
        if pmtu.max_bytes > pmtu.base_bytes and paced and not self._repairs and not self._fec.open:
            if (size := pmtu.due(now, self._pn)) is not None:
                if pmtu.black_hole_suspected or not self._request_waiting():
                    return self._pmtu_probe(size, now)
        if self._repairs:
            if paced:
                repair = self._repairs.popleft()
                return self._emit([*self._ack_frames(now, 2), repair], now, eliciting=True)
            if self._ack_needed and self._ack_at is not None and now + _EPS_S >= self._ack_at:
                return self._emit(self._ack_frames(now, 32), now, eliciting=False)
            return None
        frames: list[Frame] = []
        budget = self._pmtu.datagram_bytes - wire.DATA_HEADER_BYTES - wire.TAG_BYTES
        control_ok = paced or not self._control
        if control_ok and self._control:
            frames += self._control[:8]
            del self._control[:8]
            budget -= sum(len(wire.encode_frame(f)) for f in frames)
        records: list[tuple[int, int, int, bool]] = []
        stream_bytes = bytearray()  # STREAM frames, encoded as they are taken (no objects)
        if paced and self._cwnd_room():
            # room for the ACK this packet will carry (at most 12 ranges): a datagram never
            # exceeds the size, or a path with Don't Fragment set would drop it
            ranges = min(len(self._replay.seen), 12) if self._ack_needed else 0
            self._stream_frames(
                budget - max(60, ACK_HEAD_BYTES + 16 * ranges), records, stream_bytes
            )
        if frames or records:
            frames = self._ack_frames(now, 12 if records else 32) + frames
            return self._emit(frames, now, eliciting=True, records=records, tail=stream_bytes)
        if self._ack_needed and self._ack_at is not None and now + _EPS_S >= self._ack_at:
            return self._emit(self._ack_frames(now, 32), now, eliciting=False)
        datagram = self._close_block(now, paced)
        if datagram is None and self._open_probe_left:
            return self._open_probe(now, paced)
        return datagram

    def _open_probe(self, now: float, paced: bool) -> bytes | None:
        """The next datagram of the session's opening rate probe, if it may go now: the
        sender idle (its FEC block closed, its repairs sent) and nothing measured yet. A
        train of full-size PINGs, outside FEC: what its ACKs time is the path's rate
        (:meth:`_delivery_rate`), which the first request is then paced at. Given up for
        good once anything has measured the path (a start rate, a remembered one, a
        request's own first flight): the probe is for the session that knows nothing."""
        if not self.rate.unmeasured:
            self._open_probe_left = 0
            return None
        if not self._open_probe_ready() or now + _EPS_S < self._open_probe_at or not paced:
            return None
        self._open_probe_left -= 1
        datagram = self._padded_ping(self._pmtu.datagram_bytes, now)
        # sent to fill the path, not for want of data: a queued train of it measured the
        # bottleneck (as a request's own first flight's does)
        self._sent[self._pn - 1].app_limited = False
        self._probe_pns.add(self._pn - 1)
        self._probe_flying += len(datagram)
        return datagram

    def _open_probe_ready(self) -> bool:
        """The opening probe may go (when due): nothing measured, nothing else to send
        (data waiting for window room is its own train), the FEC block closed."""
        return (
            self.rate.unmeasured
            and not self._fec.open
            and not self._repairs
            and not self._sendable_stream()
        )

    def _probe_resolved(self, p: _Sent) -> None:
        """An opening probe's datagram acknowledged or lost: its bytes leave the flight."""
        self._probe_pns.discard(p.pn)
        self._probe_flying -= p.size

    def _carries_bulk(self, p: _Sent) -> bool:
        """Packet ``p`` carried bytes of a stream past the bulk mark."""
        mark = self.config.bulk_bytes
        return any(start >= mark for _sid, start, _end, _fin in p.streams)

    def _request_burst(self) -> bool:
        """What is being sent is a request's (a stream not yet bulk), or the unpaced first
        flight whose ACK train times the path: returned a few datagrams per call."""
        return self.rate.unmeasured or self._request_waiting()

    def _request_waiting(self) -> bool:
        """Whether a stream not (yet) bulk has a frame to send (asked when a probe is due, and
        every ``BURST_CALL_PACKETS`` datagrams of one call)."""
        sids = self._ready_unmetered
        if self._credit > 0:
            sids = sids | self._ready_new
        return any(not self._streams[sid].send.bulk for sid in sids)

    def _pmtu_probe(self, size: int, now: float) -> bytes:
        """A PING padded to ``size`` bytes: outside FEC, its loss is no data loss (:mod:`.pmtu`)."""
        datagram = self._padded_ping(size, now)
        self._pmtu.on_sent(self._pn - 1, len(datagram))
        return datagram

    def _padded_ping(self, size: int, now: float) -> bytes:
        """A PING padded to ``size`` bytes, in no FEC block (lost by the RFC rule)."""
        pad = bytearray(size - wire.DATA_HEADER_BYTES - wire.TAG_BYTES - 1)  # PADDING to the end
        datagram = self._emit([Ping()], now, eliciting=True, tail=pad, probe=True)
        self._sent[self._pn - 1].protect_until = None
        return datagram

    def _close_block(self, now: float, paced: bool) -> bytes | None:
        """Nothing to send now: end the FEC block if the sender is idle or the block is old."""
        idle = not self._sendable_stream()
        if idle:  # what is in flight now was sent for want of data (the opening probe was not)
            self._app_limited_until = self._delivered + self._in_flight - self._probe_flying
            if self._sending:
                self._sending = False
                self._idle_times.append(now)
        if not self._fec.open or not (idle or now + _EPS_S >= self._block_deadline()):
            return None
        small = idle and self._burst_blocks == 0 and self._fec.size <= SMALL_WRITE_PACKETS
        self._small_write = small and self._fec.protected
        self._queue_repairs()
        self._small_write = False
        if idle:
            self._burst_blocks = 0
        return self._next_packet(now) if self._repairs else None

    def _block_deadline(self) -> float:
        """An open FEC block closes this long after its first packet (§12.3.3: bounded wait)."""
        first = self._sent.get(self._fec.first_pn)
        start = first.sent_s if first is not None else self._fec.opened_s
        return start + max(FEC_BLOCK_AGE_MIN_S, FEC_BLOCK_AGE_RTT * self._rtt.srtt_s)

    def _queue_repairs(self) -> None:
        loss = self.peer_loss
        if self._largest_acked < LOSS_WINDOW_PACKETS + LOSS_SLACK_PACKETS:
            # the peer has judged no window of this direction yet (its early estimate is
            # from a handful of packets, or none: a new session's first answer): what the
            # other direction loses is the prior (§12.3.3: they may differ, but a path
            # that drops one way seldom carries the other clean), or the configured prior
            loss = max(loss, self._loss_meter.loss, self._initial_loss)
        police = self.rate.police
        hold_loss = police.hold_loss
        if hold_loss is not None:  # policed: the loss the hold sees, not its overdrive's
            loss = min(loss, hold_loss)
        elif police.suspect or (police.early and loss >= EARLY_LOSS):
            # the first rounds lose most of what they send (a policer's answer to start-up,
            # or a queue's overflow): repairs would be dropped the same, and those queued
            # went out in the hold after it (626–810 per lab run, a third of a second)
            loss = 0.0
        margin = (loss * (1 - loss) / 512) ** 0.5 if loss > 0 else 0.0
        first, k, protected = self._fec.first_pn, self._fec.size, self._fec.protected
        repairs = self._fec.close(loss + margin, self._block_target())
        self._block_small = False
        if protected and loss > 0:  # a block of the burst, repaired or not (bulk: none)
            self._burst_blocks += 1
        if not repairs:
            # Only this block's packets carry the open-block mark (every ack-eliciting
            # packet but a repair joins the block, and none is sent while repairs wait):
            # look them up, rather than scan every packet in flight per block.
            for pn in range(first, first + k):
                p = self._sent.get(pn)
                if p is not None and p.protect_until == _OPEN_BLOCK:
                    p.protect_until = None
            return
        self._repairs.extend(repairs)

    def _block_target(self) -> float:
        """A block's success target such that all blocks of the burst meet ``fec_target``.

        A request of ``n`` blocks succeeds with ``target`` when each block does with
        ``1 − (1 − target)/n`` (union bound, §12.3.3); ``n`` counts the blocks the
        burst has closed, this one and those its queued bytes will fill. A burst
        beyond :data:`FEC_BURST_BLOCKS_MAX` blocks is bulk: it has no request
        deadline, so each block gets ``fec_bulk_target`` and a loss beyond its
        repairs costs one retransmission inside the (larger) window instead of
        repair bytes on every block — unless the block carries a non-bulk stream's
        data (a request beside the bulk flow keeps its protection). A bulk block with
        less than a bandwidth-delay product queued behind it is the burst's tail for
        now: a retransmission there would add a round trip to the burst's end, so it
        gets :data:`FEC_BULK_TAIL_TARGET`. A small write the sender idles after gets
        ``1 − SMALL_WRITE_RESIDUAL`` (latency-bound: see the constant).
        """
        c = self.config
        if self._small_write:
            return max(c.fec_target, 1 - SMALL_WRITE_RESIDUAL)
        block_bytes = c.fec_max_k * (self._pmtu.datagram_bytes - PACKET_OVERHEAD_BYTES)
        queued = self._queued_bytes()
        blocks = self._burst_blocks + 1 + -(-queued // block_bytes)
        if blocks > FEC_BURST_BLOCKS_MAX and not self._block_small:
            bdp = self.rate.btl_bw_bytes_per_s * (self.rate.min_rtt_s or 0.0)
            if queued < bdp:
                return max(c.fec_bulk_target, FEC_BULK_TAIL_TARGET)
            return c.fec_bulk_target
        return 1 - (1 - c.fec_target) / blocks

    def _on_last_repair(self, frame: Repair, pn: int, now: float) -> None:
        """The block's last repair left: its packets are lost once that one is acknowledged."""
        for data_pn in range(frame.first_pn, frame.first_pn + frame.k):
            p = self._sent.get(data_pn)
            if p is not None:
                p.protect_until, p.repairs_done_s = pn, now

    def _ack_frames(self, now: float, max_ranges: int) -> list[Frame]:
        if not self._ack_needed and not self._replay.seen:
            return []
        if not self._ack_needed:
            return []
        self._ack_needed, self._ack_at, self._ack_count = False, None, 0
        self._ack_prompt, self._ack_sent_s = False, now
        ranges = self._replay.seen.blocks(max_ranges)
        delay = max(now - self._largest_recv_s, 0.0)
        return [Ack(ranges, delay, self._loss_meter.loss)]

    def _stream_frames(
        self, budget: int, records: list[tuple[int, int, int, bool]], out: bytearray
    ) -> None:
        """Fill a packet, most urgent stream first (priority, small before bulk, bulk in turns).

        Each STREAM frame's bytes are appended to ``out`` and its range to ``records``."""
        credit = self._credit
        sids = self._ready_unmetered | self._ready_new if credit > 0 else self._ready_unmetered
        ready = [self._streams[sid] for sid in sids]
        ready.sort(key=_send_order)  # a total order (stream id last): the sets' order is moot
        overhead = wire.stream_frame_overhead()
        # A window-filling bulk flight past start-up takes late ACKs (fewer to send and
        # read); start-up and bursts that fit the window keep the ACK clock they time.
        later = not self.rate.startup and not self.rate.app_limited
        for stream in ready:
            send = stream.send
            while budget > overhead and send.has_data(credit):
                offset, data, fin, new = send.next_frame(budget - overhead, credit)
                if not data and not fin:
                    break
                wire.append_stream_frame(
                    out, stream.stream_id, offset, data, fin, send.priority, later
                )
                send.turn = self._pn
                if not send.bulk:
                    self._block_small = True
                records.append((stream.stream_id, offset, offset + len(data), fin))
                budget -= overhead + len(data)
                credit -= new
                self._sent_new += new
                self._queued -= new
                self.stats.stream_bytes_sent += len(data)
            self._reclassify(stream)
            if budget <= overhead:
                break

    def _emit(
        self,
        frames: list[Frame],
        now: float,
        *,
        eliciting: bool,
        records: list[tuple[int, int, int, bool]] | None = None,
        tail: bytearray | None = None,
        probe: bool = False,
    ) -> bytes:
        """Seal, record for loss recovery and FEC, and advance the pacer.

        The payload is ``frames`` encoded, then ``tail`` (STREAM frames already encoded)."""
        assert self._send_keys is not None
        pn = self._pn
        self._pn += 1
        tokens = self._send_keys.tokens  # its token, inline (per packet: no call)
        listed = tokens.listed if pn >> 4 == tokens.block else tokens.load(pn >> 4)
        header = _DATA_HEADER.pack(_DATA, self.connection_id, pn, listed[pn & 15])
        payload = bytearray()
        repair: Repair | None = None
        for f in frames:
            payload += wire.encode_frame(f)
            if repair is None and isinstance(f, Repair):
                repair = f
        if tail is not None:
            payload += tail
        datagram = header + self._send_keys.seal(pn, header, bytes(payload))
        size = len(datagram)
        self.stats.packets_sent += 1
        self.stats.bytes_sent += size
        if eliciting:
            self._record(pn, now, size, frames, records or [], repair)
        if repair is not None:
            self.stats.repair_packets_sent += 1
            self.stats.repair_bytes_sent += size
            if repair.index == repair.k + repair.r - 1:
                self._on_last_repair(repair, pn, now)
        elif not self._repairs and not probe:  # a block's packets are consecutive
            self._fec.add(pn, datagram, protect=bool(records), now=now)
            if self._fec.full:
                self._queue_repairs()
        return datagram

    def _record(
        self,
        pn: int,
        now: float,
        size: int,
        frames: list[Frame],
        records: list[tuple[int, int, int, bool]],
        repair: Repair | None,
    ) -> None:
        if self._in_flight <= 0:
            self._first_sent_s = self._delivered_s = now
        self._sending = True
        control: list[Frame] = [f for f in frames if isinstance(f, _RETRANSMITTED)]
        self._sent_pns.append(pn)  # numbers only grow: the list stays sorted
        self._sent[pn] = _Sent(
            pn,
            now,
            size,
            True,
            records,
            control,
            self._delivered,
            self._delivered_s,
            self._first_sent_s,
            # app-limited also when nothing else waits to be sent (a lone MAX_DATA after a
            # reply): its ACK measures one small packet per RTT, not the path (BBR's rule)
            self._app_limited_until > self._delivered or not self._sendable_stream(),
            None if repair is not None else _OPEN_BLOCK,
        )
        self._in_flight += size
        self._last_eliciting_s = now
        if records and self._active_s is None:
            self._active_s = now  # streams are sending: the dead-peer rule watches from here
        ctl = self.rate
        ctl.app_limited = self._queued + self._in_flight <= ctl.cwnd_bytes
        rate = ctl.pacing_rate_bytes_per_s
        slack_s = max(self.config.pacing_quantum_s, BURST_PACKETS * size / rate)
        if self._pacer_bound:  # the timer fired late: what the pacer allowed meanwhile goes now
            slack_s = max(slack_s, min(now - self._next_send_s, LATE_WAKE_CREDIT_S))
        start = max(self._next_send_s, now - slack_s)
        self._next_send_s = start + size / rate
        self._paced_from = (start, size, rate)


def hello_sent_s(data: bytes) -> float | None:
    """The Unix time a HELLO says it was sent, None if it has none (or is no HELLO's
    size). Not yet authenticated: read before the AEAD check so that a gateway can refuse
    stale or replayed HELLOs cheaply; a changed time then fails that check."""
    if len(data) != wire.HELLO_BYTES:
        return None
    (sent_ns,) = _HELLO_TIME.unpack_from(data, _HELLO_TIME_AT)
    return sent_ns / 1e9 if sent_ns else None


def hello_admit_tag(data: bytes) -> bytes | None:
    """A HELLO's admission tag (:func:`~tierwise.proto.relay.crypto.admission_tag`), None
    if it is no HELLO of this version. Not authenticated (the AEAD check is): a gateway
    compares it with the tags of the windows near its clock before that check."""
    if len(data) != wire.HELLO_BYTES or data[wire.HELLO_VERSION_AT] != wire.HELLO_VERSION:
        return None
    return data[wire.HELLO_ADMIT_AT : wire.HELLO_ADMIT_AT + ADMIT_TAG_BYTES]


def _earlier(a: float | None, b: float | None) -> float | None:
    """The earlier of two deadlines, ``None`` meaning none."""
    if a is None:
        return b
    if b is None or a <= b:
        return a
    return b


def _send_order(stream: _Stream) -> tuple[int, bool, int, int]:
    """Priority first, small streams before bulk ones (§12.3.4); bulk streams take turns.

    Below the bulk mark the stream that has sent least goes first: ordered by stream
    id, a new stream's first bytes (the gateway's status byte) waited behind older
    streams that kept data queued until each had sent ``BULK_BYTES``.
    """
    send = stream.send
    bulk = send.bulk
    return send.priority, bulk, send.turn if bulk else send.next_offset, stream.stream_id


RelayConnection._FRAME_HANDLERS = {
    StreamFrame: RelayConnection._on_stream_frame,
    Ack: RelayConnection._on_ack,
    Reset: RelayConnection._on_reset,
    MaxData: RelayConnection._on_max_data,
    MaxStreamData: RelayConnection._on_max_stream_data,
    Close: RelayConnection._on_close,
    PathChallenge: RelayConnection._on_path_challenge,
    PathResponse: RelayConnection._on_path_response,
    Ping: lambda self, frame, now: None,
}
