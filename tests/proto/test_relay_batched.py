"""A receiver that reads in batches and pays CPU per datagram, as the lab's relay client does.

The simulator hands each datagram to the connection at its own arrival time and lets
the receiver acknowledge at once; a real relay process wakes, reads up to 64 datagrams
the socket holds (each with its kernel arrival time), spends its CPU on them, then
sends one batch of ACKs. At 14 % loss that made start-up end in its second round at
0.8 MB/s on a 25 MB/s path (docs/validation.md, relaybulk14): a packet rebuilt by FEC
is acknowledged when its block's repairs arrive, and timed as part of an ACK train it
made the train read as "queued by the bottleneck". Synthetic time throughout.
"""

from __future__ import annotations

import heapq

from tierwise.proto.relay import RelayConnection, StreamDataReceived
from tierwise.sim.relay import CLIENT, GATEWAY, Net, Path, payload

RATE = 25e6  # bytes/s: 200 Mbit/s each way
BATCH = 64  # datagrams per read, as relay/batchudp.py
COST_S = 150e-6  # the client's CPU per datagram read (pure Python at 14 % loss, lab: 150–190 µs)
WAKE_S = 100e-6  # from a datagram's arrival to the reader's wake-up


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
    download; the client reads in batches of ``BATCH`` at ``cost_s`` per datagram.

    ``stall = (n, seconds)``: every ``n``-th wake-up comes that much late (a reader the
    host's scheduler left waiting for a core). Returns the transfer's seconds, the
    gateway's (time, estimate) where start-up ended and the gateway's connection."""
    up = Path(rate_bytes_per_s=RATE, queue_s=1.5e6 / RATE)
    down = Path(rate_bytes_per_s=RATE, queue_s=1.5e6 / RATE, loss=loss)
    net = Net(up, down, seed=seed)
    net.run(5, lambda: net.client.established)
    client, gateway = net.client, net.gateway
    sid = client.open_stream(priority=5)
    client.send(sid, b"GET", end_stream=True)
    net.run(net.now + 2, lambda: sid in net.finished["gateway"])
    net.run(net.now + 0.3)
    start = t = net.now
    gateway.send(sid, payload("bulk", size), end_stream=True)

    heap: list[tuple[float, int, str, bytes]] = []
    seq = 0
    socket: list[tuple[float, bytes]] = []  # the client's receive buffer
    wake: float | None = None
    busy_until = t
    got, done = 0, False
    ended: list[tuple[float, float]] = []
    wakes = 0

    def push(at: float, kind: str, data: bytes = b"") -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (at, seq, kind, data))

    def gateway_sends(now: float) -> None:
        for data, _ in gateway.datagrams_to_send(now):
            for at in down.arrivals(len(data) + 28, now, net.rng):
                push(at, "down", data)
        if gateway.rate.startup is False and not ended:
            ended.append((now - start, gateway.rate.btl_bw_bytes_per_s))

    def client_sends(now: float) -> None:
        nonlocal got, done
        for data, _ in client.datagrams_to_send(now):
            for at in up.arrivals(len(data) + 28, now, net.rng):
                push(at, "up", data)
        while (event := client.next_event()) is not None:
            if isinstance(event, StreamDataReceived) and event.stream_id == sid:
                got += len(event.data)
                done = done or event.end_stream

    gateway_sends(t)
    while not done and t < start + bound_s:
        times = [heap[0][0]] if heap else []
        if (timer := gateway.get_timer()) is not None:
            times.append(timer)
        if (timer := client.get_timer()) is not None:
            times.append(max(timer, busy_until))
        if wake is not None:
            times.append(wake)
        t = max(t, min(times))
        if heap and heap[0][0] <= t:
            at, _, kind, data = heapq.heappop(heap)
            if kind == "up":
                gateway.receive_datagram(data, CLIENT, at)
                gateway_sends(t)
            elif kind == "acks":  # the batch is processed: its ACKs leave
                client_sends(t)
                if socket and wake is None:
                    wake = t
            else:
                socket.append((at, data))
                if wake is None:
                    wakes += 1
                    late = stall[1] if stall is not None and wakes % stall[0] == 0 else 0.0
                    wake = max(at + WAKE_S + late, busy_until)
        if wake is not None and wake <= t:
            batch, socket[:] = socket[:BATCH], socket[BATCH:]
            for at, data in batch:  # each with its kernel arrival time
                client.receive_datagram(data, GATEWAY, at)
            busy_until, wake = t + cost_s * len(batch), None
            push(busy_until, "acks")
        if (timer := gateway.get_timer()) is not None and timer <= t:
            gateway.handle_timer(t)
            gateway_sends(t)
        if (timer := client.get_timer()) is not None and timer <= t and busy_until <= t:
            client.handle_timer(t)
            client_sends(t)
    assert done and got == size
    return t - start, ended, gateway


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
