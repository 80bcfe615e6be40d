"""A request's ACK train read by a receiver slower than the path (the lab's gateway on a
busy host): the sender's estimate must follow the path, not the reader's CPU.

The harness of ``test_relay_batched`` (a reader that wakes, takes up to 64 datagrams
with their kernel arrival times, spends CPU per datagram, then acknowledges the batch),
here for request-sized bursts on a warm session. Synthetic time throughout.
"""

from __future__ import annotations

import heapq

from tierwise.proto.relay import RelayConnection, StreamDataReceived
from tierwise.sim.relay import CLIENT, GATEWAY, Net, Path, payload

RATE = 12.5e6  # bytes/s: the lab's 100 Mbit/s each way
BATCH = 64  # datagrams per read, as relay/batchudp.py
WAKE_S = 100e-6
REQUEST = 354_640  # the §12.3.5 request


def requests(
    count: int, cost_s: float, *, size: int = REQUEST, seed: int = 5
) -> tuple[list[float], RelayConnection]:
    """``count`` bursts of ``size`` bytes gateway → client, one after the other (0.3 s
    apart), the client reading in batches at ``cost_s`` per datagram. Returns each
    burst's transfer time and the gateway's connection (its rate estimate)."""
    up = Path(rate_bytes_per_s=RATE, queue_s=1.5e6 / RATE)
    down = Path(rate_bytes_per_s=RATE, queue_s=1.5e6 / RATE)
    net = Net(up, down, seed=seed)
    net.run(5, lambda: net.client.established)
    client, gateway = net.client, net.gateway
    heap: list[tuple[float, int, str, bytes]] = []
    seq = 0
    socket: list[tuple[float, bytes]] = []
    times: list[float] = []
    t = net.now

    def push(at: float, kind: str, data: bytes = b"") -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (at, seq, kind, data))

    def gateway_sends(now: float) -> None:
        for data, _ in gateway.datagrams_to_send(now):
            for at in down.arrivals(len(data) + 28, now, net.rng):
                push(at, "down", data)

    for n in range(count):
        sid = client.open_stream(priority=5)
        client.send(sid, b"GET", end_stream=True)
        for data, _ in client.datagrams_to_send(t):
            for at in up.arrivals(len(data) + 28, t, net.rng):
                push(at, "up", data)
        got, done = 0, False
        wake: float | None = None
        busy_until = start = t

        def client_sends(now: float, sid: int = sid) -> None:
            nonlocal got, done
            for data, _ in client.datagrams_to_send(now):
                for at in up.arrivals(len(data) + 28, now, net.rng):
                    push(at, "up", data)
            while (event := client.next_event()) is not None:
                if isinstance(event, StreamDataReceived) and event.stream_id == sid:
                    got += len(event.data)
                    done = done or event.end_stream

        asked = False
        while not done and t < start + 20:
            options = [heap[0][0]] if heap else []
            if (timer := gateway.get_timer()) is not None:
                options.append(timer)
            if (timer := client.get_timer()) is not None:
                options.append(max(timer, busy_until))
            if wake is not None:
                options.append(wake)
            t = max(t, min(options))
            if heap and heap[0][0] <= t:
                at, _, kind, data = heapq.heappop(heap)
                if kind == "up":
                    gateway.receive_datagram(data, CLIENT, at)
                    while (event := gateway.next_event()) is not None:
                        if isinstance(event, StreamDataReceived) and event.end_stream:
                            asked = True
                    if asked:
                        asked = False
                        gateway.send(sid, payload(f"r{n}", size), end_stream=True)
                    gateway_sends(t)
                elif kind == "acks":
                    client_sends(t)
                    if socket and wake is None:
                        wake = t
                else:
                    socket.append((at, data))
                    if wake is None:
                        wake = max(at + WAKE_S, busy_until)
            if wake is not None and wake <= t:
                batch, socket[:] = socket[:BATCH], socket[BATCH:]
                for at, data in batch:
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
        times.append(t - start)
        t += 0.3
    return times, gateway


def test_a_slow_reader_does_not_hold_the_request_estimate_at_its_own_pace() -> None:
    """A reader that spends 200 µs per datagram takes a 1,290-byte datagram at
    ≈ 6.5 MB/s, half the 12.5 MB/s path; the sender's estimate from the requests'
    ACK trains must still reach the path (the peer's arrival stamps), so requests leave
    paced above the path's rate. Timed by when the slow reader's ACKs came back, the
    estimate stayed at the reader's pace (≈ 6 MB/s) and every request was paced
    below the path, as the lab's gateway did at load 5 (40–70 of 100 Mbit/s)."""
    _, gateway = requests(8, 200e-6)
    assert gateway.rate.btl_bw_bytes_per_s > 0.8 * RATE


def test_a_reader_that_keeps_up_gives_the_same_estimate() -> None:
    """With no cost per datagram the ACKs already follow the arrivals: the estimate is
    the path's either way, and not above it."""
    _, gateway = requests(6, 0.0)
    assert 0.8 * RATE < gateway.rate.btl_bw_bytes_per_s < 1.25 * RATE
