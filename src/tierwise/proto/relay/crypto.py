"""Sealing the relay's datagrams: key schedule, AEAD, replay window (§12.3.5).

A 256-bit pre-shared key (PSK) never touches the wire. The handshake key seals
HELLO and WELCOME; each side's fresh 32-byte random makes the session keys new
for every session (RFC 5869 HKDF-SHA256)::

    handshake = HKDF(PSK, salt="", info="tierwise relay v1 handshake")
    key[dir, 0] = HKDF(PSK, salt=client random ‖ gateway random, info="… c2s" | "… s2c")
    key[dir, e+1] = HKDF(key[dir, e], info="tierwise relay v1 key update")
    token key[dir] = HKDF(key[dir, 0], info="tierwise relay v2 pn tokens")
    token[dir, pn] = BLAKE2b-512(token key[dir], ⌊pn / 16⌋ as u64)[4·(pn mod 16) …][:4]
    admission = HKDF(PSK, salt="", info="tierwise relay v1 admission")
    tag[w, 0] = HMAC-SHA256(admission, w as u64)[:8]   (w = ⌊Unix time / ADMIT_WINDOW_S⌋)
    tag[w, s] = HMAC-SHA256(admission, w as u64 ‖ s as u8)[:8]   (slot s = 1 … ADMIT_SLOTS − 1)

ChaCha20-Poly1305 (RFC 8439) with a 96-bit nonce = 0⁴ ‖ packet number (u64):
each direction has its own key and packet numbers only grow, so no nonce is
ever used twice under one key. Epoch ``e = pn // rotate_packets`` picks the
key, so both sides rotate at the same packet without signalling; keys older
than one epoch are forgotten. :class:`ReplayWindow` rejects a packet number
seen before or older than the window. A datagram that fails any check is
dropped without an answer (no oracle, no amplification).

Each DATA packet carries its packet number's *token* (:class:`PacketTokens`, 4 bytes,
version 2 of the wire): one keyed hash gives the tokens of 16 consecutive numbers, so
it costs the sender a hash every 16 packets. It is no MAC (the AEAD is) but a value an
on-path observer learns only once the packet is sent: a receiver's kernel socket filter,
which can compare bytes but not compute a hash, lists the tokens of the numbers it will
accept next, and drops forgeries that copy the session id and the coming numbers off
the path without a token (odds 2^-32 a datagram) before they queue.

A HELLO also carries an *admission tag*, ``tag[w, s]`` of the window its send time falls
in and a slot its client picks at random for each HELLO: a value that only holders of
the PSK can compute and that anything — the gateway's kernel socket filter included,
which can compare bytes but not compute a MAC — can check against the few tags of the
windows near its clock (:func:`admission_tags`). It is not a MAC of the HELLO (the AEAD
is): one tag serves every HELLO of its window and slot, so an on-path observer can copy
it; an off-path flooder cannot make one. The slots let a gateway strike a copied tag
from its list (a tag seen in failed HELLOs) and still admit the window's other HELLOs:
a client whose HELLO drew a struck slot draws another with its next HELLO. Slot 0 is
the tag of a HELLO from before the slots (one per window), so either client is admitted.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tierwise.errors import LocalProtocolError
from tierwise.proto.rangeset import RangeSet

__all__ = [
    "ADMIT_SLOTS",
    "ADMIT_TAG_BYTES",
    "ADMIT_WINDOW_S",
    "KEY_BYTES",
    "PN_TOKEN_BLOCK",
    "DirectionKeys",
    "PacketTokens",
    "ReplayWindow",
    "admission_key",
    "admission_tag",
    "admission_tags",
    "handshake_aead",
    "random_bytes",
    "session_keys",
]

KEY_BYTES = 32
ROTATE_PACKETS = 1 << 24  # far below ChaCha20-Poly1305's usage limit (RFC 9001 §6.6: 2^62)
REPLAY_WINDOW_PACKETS = 1 << 12  # reordering plus an FEC block, with room to spare
_NONCE = struct.Struct(">4xQ")
_KEY_UPDATE = b"tierwise relay v1 key update"
ADMIT_TAG_BYTES = 8  # two 32-bit words for a classic BPF compare; 2^-64 for a guess
# A tag's window. The gateway accepts the windows its clock tolerance covers, so this sets
# how many tags it lists (2 × 120 s / 30 s + 1 = 9), not how long a tag is good for.
ADMIT_WINDOW_S = 30.0
# Tags per window: a copied tag struck from the gateway's list shuts out a client's HELLO
# with odds 1 in ADMIT_SLOTS (it draws again with its next); the gateway's kernel lists
# 9 windows × 16 = 144 tags, 720 instructions (kfilter: five a tag).
ADMIT_SLOTS = 16
_WINDOW = struct.Struct(">Q")
PN_TOKEN_BLOCK = 16  # tokens of one BLAKE2b-512 digest: 64 bytes, 4 a packet number
_TOKEN_INFO = b"tierwise relay v2 pn tokens"


def random_bytes(n: int) -> bytes:
    """Fresh randomness from the operating system."""
    return os.urandom(n)


def _hkdf(ikm: bytes, salt: bytes | None, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=info).derive(ikm)


def check_key(psk: bytes) -> bytes:
    """The PSK if it is 32 bytes, else a :class:`LocalProtocolError`."""
    if len(psk) != KEY_BYTES:
        raise LocalProtocolError(f"the relay key must be {KEY_BYTES} bytes, got {len(psk)}")
    return psk


def handshake_aead(psk: bytes, rotate_packets: int = ROTATE_PACKETS) -> ChaCha20Poly1305:
    """The AEAD that seals HELLO and WELCOME.

    It binds the key-rotation interval, which both ends must share (a packet's epoch is
    ``pn // rotate_packets``): ends that differ fail the handshake as with a wrong key,
    instead of a session that goes silent at the first rotation.
    """
    info = b"tierwise relay v1 handshake"
    if rotate_packets != ROTATE_PACKETS:
        info += b" rotate %d" % rotate_packets
    return ChaCha20Poly1305(_hkdf(check_key(psk), None, info))


def session_keys(
    psk: bytes, client_random: bytes, gateway_random: bytes, rotate_packets: int = ROTATE_PACKETS
) -> tuple[DirectionKeys, DirectionKeys]:
    """``(client→gateway, gateway→client)`` keys of one session."""
    salt = client_random + gateway_random
    c2s = _hkdf(check_key(psk), salt, b"tierwise relay v1 c2s")
    s2c = _hkdf(psk, salt, b"tierwise relay v1 s2c")
    return DirectionKeys(c2s, rotate_packets), DirectionKeys(s2c, rotate_packets)


def admission_key(psk: bytes) -> bytes:
    """The key of the HELLOs' admission tags (never the PSK itself)."""
    return _hkdf(check_key(psk), None, b"tierwise relay v1 admission")


def admission_tag(key: bytes, wall_s: float, slot: int = 0) -> bytes:
    """The admission tag of the window ``wall_s`` (Unix time) falls in and of ``slot``
    (``key``: :func:`admission_key`; slot 0: the tag from before the slots)."""
    if not 0 <= slot < ADMIT_SLOTS:
        raise LocalProtocolError(f"admission slot {slot} is outside 0 … {ADMIT_SLOTS - 1}")
    message = _WINDOW.pack(max(0, math.floor(wall_s / ADMIT_WINDOW_S)))
    if slot:
        message += bytes([slot])
    return hmac.digest(key, message, hashlib.sha256)[:ADMIT_TAG_BYTES]


def admission_tags(
    key: bytes, wall_s: float, skew_s: float, slots: int = ADMIT_SLOTS
) -> list[bytes]:
    """The tags of every window that meets ``[wall_s - skew_s, wall_s + skew_s]``, each
    slot's: what a HELLO sent by a client whose clock is within ``skew_s`` of ``wall_s``
    carries."""
    first = math.floor((wall_s - skew_s) / ADMIT_WINDOW_S)
    last = math.floor((wall_s + skew_s) / ADMIT_WINDOW_S)
    return [
        admission_tag(key, w * ADMIT_WINDOW_S, slot)
        for w in range(first, last + 1)
        for slot in range(slots)
    ]


class PacketTokens:
    """The packet-number tokens of one direction (see the module): 4 bytes a number, 16
    numbers a BLAKE2b call; the last block's digest is kept (packets come in order)."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self.block = -1  # the block of 16 numbers whose tokens ``listed`` holds
        self.listed: list[bytes] = []

    def _hash(self, block: int) -> bytes:
        return hashlib.blake2b(_WINDOW.pack(block), key=self._key, digest_size=64).digest()

    def load(self, block: int) -> list[bytes]:
        """The tokens of numbers ``16 × block …``, kept as ``listed`` (a hot path reads
        ``listed[pn & 15]`` while ``block == pn >> 4``, without a call)."""
        digest = self._hash(block)
        self.block, self.listed = block, [digest[i : i + 4] for i in range(0, 64, 4)]
        return self.listed

    def token(self, pn: int) -> bytes:
        """The 4-byte token of packet number ``pn``."""
        if pn >> 4 != self.block:
            self.load(pn >> 4)
        return self.listed[pn & 15]

    def tokens(self, first: int, count: int) -> bytes:
        """The tokens of ``first … first + count − 1``, 4 bytes each, concatenated."""
        if count <= 0:
            return b""
        start, stop = first >> 4, (first + count - 1) >> 4
        raw = b"".join(self._hash(b) for b in range(start, stop + 1))
        at = (first & 15) << 2
        return raw[at : at + 4 * count]


class DirectionKeys:
    """The key chain of one direction; ``seal``/``open`` choose the epoch from the pn.
    ``tokens``: its packet numbers' tokens (from the epoch-0 key, for the session)."""

    def __init__(self, key: bytes, rotate_packets: int = ROTATE_PACKETS) -> None:
        if rotate_packets < 1:
            raise LocalProtocolError(f"rotate_packets must be ≥ 1, got {rotate_packets}")
        self.tokens = PacketTokens(_hkdf(key, None, _TOKEN_INFO))
        self.rotate_packets = rotate_packets
        self._epoch, self._key = 0, key
        self._aeads: dict[int, ChaCha20Poly1305] = {0: ChaCha20Poly1305(key)}
        self._pending: tuple[int, bytes, ChaCha20Poly1305] | None = None  # next epoch's

    @property
    def epoch(self) -> int:
        return self._epoch

    def _aead(self, pn: int) -> ChaCha20Poly1305 | None:
        epoch = pn // self.rotate_packets
        while self._epoch < epoch:
            pending = self._pending
            if pending is not None and pending[0] == self._epoch + 1:
                self._key, aead = pending[1], pending[2]
            else:
                self._key = _hkdf(self._key, None, _KEY_UPDATE)
                aead = ChaCha20Poly1305(self._key)
            self._epoch += 1
            self._aeads[self._epoch] = aead
            self._aeads.pop(self._epoch - 2, None)
        return self._aeads.get(epoch)

    def seal(self, pn: int, header: bytes, plaintext: bytes) -> bytes:
        aead = self._aead(pn)
        if aead is None:
            raise LocalProtocolError(f"packet number {pn} belongs to a forgotten key epoch")
        return aead.encrypt(_NONCE.pack(pn), plaintext, header)

    def open(self, pn: int, header: bytes, ciphertext: bytes) -> bytes | None:
        """The plaintext, or ``None`` if the datagram is not authentic.

        A datagram of the next epoch is tried with that epoch's key, but only an
        authentic one moves the chain on (and forgets the epoch before): a forged
        number ahead must not make the receiver drop the key in use.
        """
        epoch = pn // self.rotate_packets
        if epoch > self._epoch + 1:
            return None  # never derive keys far ahead for an unauthenticated number
        aead = self._aeads.get(epoch) if epoch <= self._epoch else self._next_aead()
        if aead is None:
            return None
        try:
            plaintext = aead.decrypt(_NONCE.pack(pn), ciphertext, header)
        except InvalidTag:
            return None
        if epoch > self._epoch:
            self._aead(pn)
        return plaintext

    def _next_aead(self) -> ChaCha20Poly1305:
        """The next epoch's AEAD, derived once and kept until the chain moves on."""
        if self._pending is None or self._pending[0] != self._epoch + 1:
            key = _hkdf(self._key, None, _KEY_UPDATE)
            self._pending = (self._epoch + 1, key, ChaCha20Poly1305(key))
        return self._pending[2]


class ReplayWindow:
    """Packet numbers seen, within ``window`` of the largest (RFC 4303 §3.4.3's window)."""

    def __init__(self, window: int = REPLAY_WINDOW_PACKETS) -> None:
        self.window = window
        self.largest = -1
        self.seen = RangeSet()

    def fresh(self, pn: int) -> bool:
        """Whether ``pn`` is new and inside the window (check before accepting)."""
        return pn > self.largest - self.window and not self.seen.contains(pn)

    def accept(self, pn: int) -> None:
        self.seen.add(pn, pn + 1)
        if pn > self.largest:
            self.largest = pn
            if len(self.seen) > 256 or (self.seen.first_start() or 0) < pn - self.window:
                self.seen.subtract_below(pn - self.window)
