"""A receiver that reads in batches and pays CPU per datagram, as the lab's relay client does.

The simulator hands each datagram to the connection at its own arrival time and lets
the receiver acknowledge at once; a real relay process wakes, reads up to 64 datagrams
the socket holds (each with its kernel arrival time), spends its CPU on them, then
sends one batch of ACKs. At 14 % loss that made start-up end in its second round at
0.8 MB/s on a 25 MB/s path (docs/validation.md, "The simulated relay against the relay
in the lab"): a packet rebuilt by FEC is acknowledged when its block's repairs arrive,
and timed as part of an ACK train it made the train read as "queued by the bottleneck".
Synthetic time throughout.
"""

from __future__ import annotations

from tierwise.proto.relay import RelayConnection
from tierwise.sim.relay import Net, OneWayPath, batched_download, payload

RATE = 25e6  # bytes/s: 200 Mbit/s each way
COST_S = 150e-6  # the client's CPU per datagram read (pure Python at 14 % loss, lab: 150–190 µs)


def download(
    size: int,
    loss: float,
    *,
    cost_s: float = COST_S,
    seed: int = 23,
    bound_s: float = 60.0,
    stall: tuple[int, float] | None = None,
) -> tuple[float, list[tuple[float, float]], RelayConnection]:
    """Move ``size`` bytes gateway → client over a 200 ms path with ``loss`` on the
    download; the client reads in batches of 64 at ``cost_s`` per datagram
    (:func:`tierwise.sim.relay.batched_download`).

    ``stall = (n, seconds)``: every ``n``-th wake-up comes that much late. Returns the
    transfer's seconds, the gateway's (time, estimate) where start-up ended and the
    gateway's connection."""
    up = OneWayPath(rate_bytes_per_s=RATE, queue_s=1.5e6 / RATE)
    down = OneWayPath(rate_bytes_per_s=RATE, queue_s=1.5e6 / RATE, loss=loss)
    net = Net(up, down, seed=seed)
    net.run(5, lambda: net.client.established)
    sid = net.client.open_stream(priority=5)
    net.client.send(sid, b"GET", end_stream=True)
    net.run(net.now + 2, lambda: sid in net.finished["gateway"])
    net.run(net.now + 0.3)
    r = batched_download(
        net, sid, payload("bulk", size), cost_s=cost_s, bound_s=bound_s, stall=stall
    )
    assert r.complete and r.received == size
    ended = [] if r.startup_end is None else [r.startup_end]
    return r.seconds, ended, net.gateway


def test_startup_is_not_ended_by_a_gap_that_fec_filled_late() -> None:
    """At 14 % loss through a batching reader, start-up runs until the reader is the
    limit (≈ 64 datagrams per 9.6 ms ≈ 8.9 MB/s here), not to its second round.

    The old train rule counted a packet rebuilt from a later block's repairs in the
    ACK train that began before it: sent early, acknowledged late, so the train read
    "queued" and start-up ended at 0.8 MB/s (3 MB then took 3.6 s, now 1.4 s)."""
    elapsed, ended, _ = download(3_000_000, 0.14)
    for at, estimate in ended:
        assert estimate > 4e6, f"start-up ended at {at:.2f} s at {estimate / 1e6:.2f} MB/s"
    assert elapsed < 2.0


def test_a_reader_that_keeps_up_still_times_the_first_train() -> None:
    """Without the reader's cost (ACKs as the datagrams arrive), start-up still ends on
    the first flight's train at the path's rate, as in the simulator's bulk runs."""
    _, ended, gateway = download(3_000_000, 0.14, cost_s=0.0)
    at, estimate = ended[0]
    assert at < 0.5 and 0.8 * RATE < estimate < 1.25 * RATE
    assert gateway.rate.startup_exit == "queued train"  # what the trace's startup_end says


def test_a_reader_that_stalls_does_not_end_startup() -> None:
    """A reader left waiting for a core (every 16th wake-up 20 ms late) acknowledges a
    whole batch at once: each packet of the batch but the newest arrived earlier than
    the ACK says, and timed by its own sending time each read as held up by a queue.
    The old rule ended start-up there at 0.8 MB/s on the 25 MB/s path (3 MB in 3.7 s);
    an ACK now times the train by its largest packet only, whose arrival it reports."""
    elapsed, ended, _ = download(3_000_000, 0.14, stall=(16, 0.020))
    for at, estimate in ended:
        assert estimate > 4e6, f"start-up ended at {at:.2f} s at {estimate / 1e6:.2f} MB/s"
    assert elapsed < 2.5
