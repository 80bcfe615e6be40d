"""The relay's receive side of a stream: ``take`` (the in-order fast path) hands over what
``receive`` then ``pop_ready`` would, frame by frame, and refuses what they refuse."""

from __future__ import annotations

import os
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.proto.relay.streams import RecvStream


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(1, 20_000),
    cuts=st.lists(st.integers(1, 3_000), min_size=1, max_size=20),
    seed=st.integers(0, 2**32 - 1),
    shuffle=st.floats(0, 1),
    dup=st.floats(0, 0.5),
    window=st.integers(1, 30_000),
)
def test_take_hands_over_what_receive_then_pop_ready_would(
    size: int, cuts: list[int], seed: int, shuffle: float, dup: float, window: int
) -> None:
    rng = random.Random(seed)
    data = os.urandom(size)
    frames, pos, i = [], 0, 0
    while pos < size:
        n = cuts[i % len(cuts)]
        frames.append((pos, data[pos : pos + n], pos + n >= size))
        pos += n
        i += 1
    # copies that overlap what came before (a retransmission cut differently)
    for _ in range(int(dup * len(frames))):
        start = rng.randrange(size)
        end = min(size, start + rng.randrange(1, 3_000))
        frames.insert(rng.randrange(len(frames) + 1), (start, data[start:end], end == size))
    if shuffle > 0.5:
        rng.shuffle(frames)
    fast, slow = RecvStream(1, window), RecvStream(1, window)
    got_fast, got_slow = bytearray(), bytearray()
    for offset, chunk, fin in frames:
        ready = fast.take(offset, chunk, fin)
        ok = slow.receive(offset, chunk, fin)
        assert (ready is not None) == ok
        if ok:
            got_slow += slow.pop_ready()
            assert ready is not None
            got_fast += ready
        assert got_fast == got_slow
        assert (fast.delivered, fast.highest, fast.finished) == (
            slow.delivered,
            slow.highest,
            slow.finished,
        )
    assert bytes(got_fast) == data[: len(got_fast)]


def test_an_in_order_frame_is_handed_over_whole_and_the_final_size_still_binds() -> None:
    s = RecvStream(1, 1 << 20)
    assert s.take(0, b"abc", False) == b"abc"
    assert s.take(1, b"bcde", False) == b"de"  # the part already delivered is not again
    assert s.take(2, b"c", False) == b""
    assert s.take(5, b"f", True) == b"f" and s.finished
    assert s.take(6, b"g", False) is None  # past the final size
    assert RecvStream(1, 4).take(0, b"abcde", False) is None  # past the window
