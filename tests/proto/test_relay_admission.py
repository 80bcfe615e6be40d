"""A HELLO's version byte and admission tag: what a gateway's kernel checks before its queue."""

from __future__ import annotations

import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.errors import LocalProtocolError
from tierwise.proto.relay import RelayConnection, wire
from tierwise.proto.relay.connection import hello_admit_tag
from tierwise.proto.relay.crypto import (
    ADMIT_SLOTS,
    ADMIT_TAG_BYTES,
    ADMIT_WINDOW_S,
    admission_key,
    admission_tag,
    admission_tags,
)

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))
GATEWAY = ("192.0.2.1", 4433)
WALL_S = 1_800_000_000.0


def hello_at(wall_s: float, key: bytes = KEY) -> bytes:
    client = RelayConnection(key, is_client=True)
    client.connect(GATEWAY, now=5.0, wall_s=wall_s)
    ((data, _),) = client.datagrams_to_send(5.0)
    return data


def _slot_tags(key: bytes, wall_s: float) -> list[bytes]:
    return [admission_tag(admission_key(key), wall_s, slot) for slot in range(ADMIT_SLOTS)]


def test_a_hello_carries_the_version_and_its_window_tag() -> None:
    """Version 2 and a tag of the window its send time is in (one of its slots), 8 bytes,
    key-dependent."""
    data = hello_at(WALL_S)
    assert len(data) == wire.HELLO_BYTES
    assert data[wire.HELLO_VERSION_AT] == wire.HELLO_VERSION == 2
    tag = hello_admit_tag(data)
    assert tag in _slot_tags(KEY, WALL_S) and len(tag) == ADMIT_TAG_BYTES
    assert tag not in _slot_tags(OTHER, WALL_S)
    assert tag not in _slot_tags(KEY, WALL_S + ADMIT_WINDOW_S)
    later = hello_admit_tag(hello_at(WALL_S + ADMIT_WINDOW_S / 2))
    assert later in _slot_tags(KEY, WALL_S) + _slot_tags(KEY, WALL_S + ADMIT_WINDOW_S)


def test_each_hello_draws_a_slot() -> None:
    """A client's HELLOs draw their slots at random: 64 HELLOs of one window carry more
    than one tag (a struck tag shuts out one HELLO, not the client); slot 0 is the tag of
    the one-tag-a-window HELLO before the slots."""
    key = admission_key(KEY)
    tags = {hello_admit_tag(hello_at(WALL_S)) for _ in range(64)}
    assert len(tags) > 1 and tags <= set(_slot_tags(KEY, WALL_S))
    window = int(WALL_S // ADMIT_WINDOW_S).to_bytes(8, "big")
    assert admission_tag(key, WALL_S) == hmac.digest(key, window, "sha256")[:ADMIT_TAG_BYTES]
    assert len(set(_slot_tags(KEY, WALL_S))) == ADMIT_SLOTS
    with pytest.raises(LocalProtocolError):
        admission_tag(key, WALL_S, ADMIT_SLOTS)


@given(st.floats(-120.0, 120.0))
def test_a_clock_within_the_skew_makes_an_accepted_tag(offset_s: float) -> None:
    """Every tag a client whose clock is within 120 s of the gateway's sends is listed."""
    key = admission_key(KEY)
    tags = admission_tags(key, WALL_S, skew_s=120.0)
    assert all(admission_tag(key, WALL_S + offset_s, s) in tags for s in range(ADMIT_SLOTS))
    assert len(tags) <= (2 * 120 / ADMIT_WINDOW_S + 2) * ADMIT_SLOTS
    assert admission_tag(key, WALL_S + 120.0 + ADMIT_WINDOW_S + 1) not in tags


@pytest.mark.parametrize("version", [0, 1, 3])
def test_a_gateway_drops_another_version_as_malformed(version: int) -> None:
    """A HELLO of another layout (version 0: zero padding; 1: DATA without packet-number
    tokens; 3: one from later) is dropped before its AEAD, unanswered."""
    data = bytearray(hello_at(WALL_S))
    data[wire.HELLO_VERSION_AT] = version
    gateway = RelayConnection(KEY, is_client=False)
    gateway.receive_datagram(bytes(data), ("192.0.2.9", 1), 5.0)
    assert gateway.stats.dropped_malformed == 1 and not gateway.established
    assert hello_admit_tag(bytes(data)) is None
    gateway.receive_datagram(hello_at(WALL_S), ("192.0.2.9", 1), 5.0)
    assert gateway.established
