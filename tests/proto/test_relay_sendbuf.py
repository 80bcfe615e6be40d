"""The relay's send buffer: what a frame carries, and the memory an acknowledged front holds."""

from __future__ import annotations

import os
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.proto.relay.streams import TRIM_BYTES, SendStream

MSS = 1352


@settings(max_examples=60, deadline=None)
@given(
    writes=st.lists(st.integers(1, 50_000), min_size=1, max_size=30),
    seed=st.integers(0, 2**32 - 1),
    lose=st.floats(0, 0.3),
)
def test_frames_carry_the_written_bytes_whatever_order_acks_and_losses_come_in(
    writes: list[int], seed: int, lose: float
) -> None:
    rng = random.Random(seed)
    data = os.urandom(sum(writes))
    s = SendStream(0, 5, 1 << 62)
    pos, pending = 0, []
    for i, n in enumerate(writes):
        s.write(data[pos : pos + n], fin=i == len(writes) - 1)
        pos += n
        while s.has_data(1 << 62):
            offset, chunk, fin, _ = s.next_frame(MSS, 1 << 62)
            assert chunk == data[offset : offset + len(chunk)]
            pending.append((offset, offset + len(chunk), fin))
        rng.shuffle(pending)
        keep = []
        for start, end, fin in pending:
            if rng.random() < lose:
                s.on_lost(start, end, fin)
            elif rng.random() < 0.7:
                s.on_acked(start, end, fin)
            else:
                keep.append((start, end, fin))
        pending = keep
        assert s.buffered_bytes == s.end - s.base
        # The acknowledged front is dropped once it outweighs what is left.
        assert len(s._buf) <= 2 * s.buffered_bytes + TRIM_BYTES + max(writes)
    for start, end, fin in pending:
        s.on_acked(start, end, fin)
    while s.has_data(1 << 62):  # what was declared lost goes again, then is acknowledged
        offset, chunk, fin, _ = s.next_frame(MSS, 1 << 62)
        assert chunk == data[offset : offset + len(chunk)]
        s.on_acked(offset, offset + len(chunk), fin)
    assert s.done and s.buffered_bytes == 0 and len(s._buf) == 0


def test_a_bulk_sender_does_not_hold_what_was_acknowledged() -> None:
    """4 MB in flight, 64 kB writes, in-order ACKs: the buffer stays near the window."""
    s = SendStream(0, 5, 1 << 62)
    block, window, acked, peak = bytes(65536), 4_000_000, 0, 0
    while s.end < 40_000_000:
        s.write(block, False)
        while s.has_new():
            s.next_frame(MSS, 1 << 62)
        while acked + MSS <= s.end - window:
            s.on_acked(acked, acked + MSS, False)
            acked += MSS
        peak = max(peak, len(s._buf))
    assert s.base == acked
    assert peak <= 2 * (window + MSS + len(block)) + TRIM_BYTES
