"""The relay's parts on their own: wire format, sealing, replay window, FEC blocks (§12.3.5)."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from hypothesis import given
from hypothesis import strategies as st

from tierwise.proto.fec import repair_symbols_needed
from tierwise.proto.relay import wire
from tierwise.proto.relay.crypto import DirectionKeys, ReplayWindow, session_keys
from tierwise.proto.relay.fec import CODES, FecDecoder, FecEncoder

KEY = bytes(range(32))

frames = st.one_of(
    st.builds(wire.Ping),
    st.builds(
        wire.Ack,
        st.lists(
            st.tuples(st.integers(0, 2**40), st.integers(1, 1000)).map(
                lambda t: (t[0], t[0] + t[1])
            ),
            max_size=wire.ACK_RANGES_MAX,
        ).map(tuple),
        st.integers(0, 10**6).map(lambda us: us / 1e6),
        st.integers(0, 10**6).map(lambda ppm: ppm / 1e6),
    ),
    st.builds(
        wire.StreamFrame,
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**40),
        st.binary(max_size=1200),
        st.booleans(),
        st.integers(0, 255),
        st.booleans(),
    ),
    st.builds(
        wire.Reset, st.integers(0, 2**32 - 1), st.integers(0, 2**16 - 1), st.integers(0, 2**40)
    ),
    st.builds(wire.MaxData, st.integers(0, 2**63)),
    st.builds(wire.MaxStreamData, st.integers(0, 2**32 - 1), st.integers(0, 2**63)),
    st.builds(wire.Close, st.integers(0, 2**16 - 1)),
    st.builds(wire.PathChallenge, st.binary(min_size=8, max_size=8)),
    st.builds(wire.PathResponse, st.binary(min_size=8, max_size=8)),
)


@given(st.lists(frames, max_size=6))
def test_frames_round_trip(fs: list[wire.Frame]) -> None:
    """Every frame parses back to itself."""
    assert wire.parse_frames(b"".join(wire.encode_frame(f) for f in fs)) == fs


@given(st.lists(frames, min_size=1, max_size=4), st.data())
def test_truncated_frames_are_a_frame_error(fs: list[wire.Frame], data: st.DataObject) -> None:
    """Cutting a payload inside a frame raises FrameError, never IndexError or struct.error."""
    buf = b"".join(wire.encode_frame(f) for f in fs)
    cut = data.draw(st.integers(0, len(buf) - 1))
    try:
        parsed = wire.parse_frames(buf[:cut])
    except wire.FrameError:
        return
    assert len(parsed) < len(fs) or cut == 0 or parsed == fs[: len(parsed)]


@given(st.binary(max_size=300))
def test_garbage_never_escapes_as_another_error(buf: bytes) -> None:
    """Arbitrary bytes either parse or raise FrameError."""
    try:
        wire.parse_frames(buf)
    except wire.FrameError:
        pass


def test_sealing_round_trip_and_tamper() -> None:
    """A sealed packet opens once; a flipped bit or another packet number does not open."""
    c2s, _ = session_keys(KEY, b"a" * 32, b"b" * 32)
    peer, _ = session_keys(KEY, b"a" * 32, b"b" * 32)
    box = c2s.seal(7, b"hdr", b"payload")
    assert peer.open(7, b"hdr", box) == b"payload"
    flipped = bytes([box[0] ^ 1]) + box[1:]
    assert peer.open(7, b"hdr", flipped) is None
    assert peer.open(8, b"hdr", box) is None
    assert peer.open(7, b"hdX", box) is None


def test_keys_differ_per_session_and_direction() -> None:
    """Fresh randomness gives new keys; the two directions never share one."""
    c2s, s2c = session_keys(KEY, b"a" * 32, b"b" * 32)
    other, _ = session_keys(KEY, b"a" * 32, b"c" * 32)
    box = c2s.seal(1, b"", b"x")
    assert s2c.open(1, b"", box) is None
    assert other.open(1, b"", box) is None


def test_key_rotation_follows_the_packet_number() -> None:
    """After rotate_packets packets both sides switch keys; old epochs are forgotten."""
    tx, rx = DirectionKeys(KEY, rotate_packets=4), DirectionKeys(KEY, rotate_packets=4)
    boxes = {pn: tx.seal(pn, b"", bytes([pn])) for pn in range(0, 13)}
    assert tx.epoch == 3
    base = ChaCha20Poly1305(KEY)  # epoch 0's key: it opens epoch 0, and nothing later
    assert base.decrypt(bytes(4) + (1).to_bytes(8, "big"), boxes[1], b"") == b"\x01"
    with pytest.raises(InvalidTag):
        base.decrypt(bytes(4) + (5).to_bytes(8, "big"), boxes[5], b"")
    assert all(rx.open(pn, b"", boxes[pn]) == bytes([pn]) for pn in range(4, 13))
    assert rx.open(1, b"", boxes[1]) is None  # epoch 0 was dropped when epoch 2 began


def test_a_forged_number_ahead_does_not_move_the_keys_on() -> None:
    """A datagram of the next epoch that fails authentication leaves the epoch as it was."""
    tx, rx = DirectionKeys(KEY, rotate_packets=4), DirectionKeys(KEY, rotate_packets=4)
    boxes = {pn: tx.seal(pn, b"", bytes([pn])) for pn in range(0, 9)}
    assert rx.open(1, b"", boxes[1]) == b"\x01"
    assert rx.open(4, b"", bytes(17)) is None and rx.epoch == 0
    assert rx.open(8, b"", boxes[8]) is None  # two epochs ahead: never tried
    assert rx.open(5, b"", boxes[5]) == b"\x05" and rx.epoch == 1
    assert rx.open(2, b"", boxes[2]) == b"\x02"  # the previous epoch is still kept


def test_replay_window() -> None:
    """A packet number is accepted once; far-behind numbers are refused."""
    window = ReplayWindow(window=100)
    for pn in (5, 3, 200):
        assert window.fresh(pn)
        window.accept(pn)
    assert not window.fresh(5) and not window.fresh(3)  # seen, and now below the window
    assert not window.fresh(200) and not window.fresh(50) and not window.fresh(100)
    assert window.fresh(101) and window.fresh(150) and window.fresh(10**9)
    window.accept(150)
    assert not window.fresh(150)


@pytest.mark.parametrize("code", sorted(CODES))
def test_fec_block_recovers_lost_datagrams(code: str) -> None:
    """Any k of k + r symbols rebuild every lost datagram of a block, byte-exact."""
    enc = FecEncoder(CODES[code], max_k=20, target=0.999)
    datagrams = {pn: bytes([pn]) * (50 + 7 * pn) for pn in range(100, 120)}
    for pn, d in datagrams.items():
        enc.add(pn, d, protect=True)
    repairs = enc.close(loss=0.14)
    assert len(repairs) == repair_symbols_needed(20, 0.14 + 0.0, 0.999)
    dec = FecDecoder()
    lost = {101, 105, 106, 119}
    for pn, d in datagrams.items():
        if pn not in lost:
            dec.on_datagram(pn, d)
    got: list[bytes] = []
    for frame in repairs[: len(lost)]:
        got += dec.on_repair(frame, lambda pn: pn in datagrams and pn not in lost)
    assert sorted(got) == sorted(datagrams[pn] for pn in lost)


def test_fec_sends_nothing_without_loss_or_stream_data() -> None:
    """No measured loss, or a block of acknowledgements only: no repair symbols."""
    enc = FecEncoder(CODES["zfec"], max_k=10, target=0.999)
    enc.add(0, b"x" * 10, protect=True)
    assert enc.close(0.0) == []
    enc.add(1, b"x" * 10, protect=False)
    assert enc.close(0.14) == []


def test_fec_sizing_matches_the_chapter() -> None:
    """§12.3.3: 14 % loss over 245 symbols needs 63 repair symbols."""
    assert repair_symbols_needed(245, 0.14, 0.999) == 63


def test_rate_estimate_survives_idle_rounds() -> None:
    """An app-limited sample after many idle rounds does not replace the measured rate."""
    from tierwise.proto.relay.rate import BW_WINDOW_ROUNDS, RateController, RateSample

    rate = RateController(1350)
    rate.on_sample(RateSample(12.5e6, 0.2, app_limited=False), now=1.0)
    for _ in range(3 * BW_WINDOW_ROUNDS):
        rate.on_round_end()
    rate.on_sample(RateSample(372.0, 1.45, app_limited=True), now=30.0)  # one packet after idle
    assert rate.btl_bw_bytes_per_s == 12.5e6
