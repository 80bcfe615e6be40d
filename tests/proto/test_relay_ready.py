"""The sender's cached state equals a scan of its streams after any sequence of operations.

``RelayConnection`` keeps which streams have something to send (two sets), the bytes
queued on all streams and the rate controller's window between the events that change
them, instead of scanning every stream on each ``get_timer`` and packet (a CPU
cut). These tests drive a pair through random opens, writes, FINs, resets, flow-control
stalls and lossy, reordering paths, and after every step compare the cached values with
the brute-force scan they replaced.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierwise.proto.relay import RelayConfig, RelayConnection
from tierwise.proto.relay.connection import State
from tierwise.sim.relay import Net, OneWayPath, payload

WINDOW = 40_000  # small windows: streams and the session run out of credit


def _scan_timer(conn: RelayConnection) -> float | None:
    """``get_timer`` as it was: a list of candidates, the streams scanned for data."""
    if conn.state is State.CLOSED:
        return None
    credit = conn._peer_max_data - conn._sent_new
    sendable = any(s.send.has_data(credit) for s in conn._streams.values())
    times = [conn._hello_at, conn._ack_at if conn._ack_needed else None, conn._loss_time]
    times.append(conn._pto_at())
    if conn._last_recv_s is not None:
        times.append(conn._last_recv_s + conn.config.idle_timeout_s)
        times.append(conn._dead_at() if conn._silent_since is None else conn._grace_at())
    if conn.state is State.ESTABLISHED:
        if conn._repairs or conn._control or (sendable and conn._cwnd_room()):
            times.append(conn._next_send_s)
        if conn._fec.open:
            times.append(conn._block_deadline())
        probe_ready = (
            conn.rate.unmeasured and not conn._fec.open and not conn._repairs and not sendable
        )
        if conn._open_probe_left and probe_ready:  # the opening rate probe (added since)
            times.append(conn._open_probe_at)
        if conn.is_client and conn._last_eliciting_s is not None and not conn._in_flight:
            times.append(conn._last_eliciting_s + conn.config.keepalive_s)
    return min((t for t in times if t is not None), default=None)


def _check(conn: RelayConnection) -> None:
    """Every cached value equals its scan."""
    streams = conn._streams.values()
    credit = conn._peer_max_data - conn._sent_new
    assert conn._ready_unmetered == {s.stream_id for s in streams if s.send.has_unmetered()}
    assert conn._ready_new == {s.stream_id for s in streams if s.send.has_new()}
    assert conn._sendable_stream() == any(s.send.has_data(credit) for s in streams)
    assert conn._queued_bytes() == sum(s.send.end - s.send.next_offset for s in streams)
    assert conn.rate.cwnd_bytes == conn.rate._window_bytes()
    assert conn.get_timer() == _scan_timer(conn)


OPS = st.one_of(
    st.tuples(st.just("open"), st.integers(0, 2), st.integers(0, 200_000), st.booleans()),
    st.tuples(st.just("write"), st.integers(0, 7), st.integers(0, 60_000), st.booleans()),
    st.tuples(st.just("answer"), st.integers(0, 7), st.integers(0, 60_000), st.booleans()),
    st.tuples(st.just("reset"), st.integers(0, 7), st.just(0), st.booleans()),
    st.tuples(st.just("run"), st.integers(1, 400), st.just(0), st.booleans()),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=1, max_size=25), loss=st.sampled_from([0.0, 0.1, 0.3]))
def test_cached_sender_state_equals_a_scan(
    ops: list[tuple[str, int, int, bool]], loss: float
) -> None:
    """Ready sets, queued bytes, window and timer match a scan after random operations."""
    config = RelayConfig(stream_window_bytes=WINDOW, session_window_bytes=2 * WINDOW)
    net = Net(
        OneWayPath(delay_s=0.01, loss=loss, reorder=0.1, rate_bytes_per_s=5e6),
        OneWayPath(delay_s=0.01, loss=loss, duplicate=0.05, rate_bytes_per_s=5e6),
        config=config,
        seed=len(ops),
    )
    net.run(2.0, lambda: net.client.established and net.gateway.established)
    for step, (op, a, size, fin) in enumerate(ops):
        client, gateway = net.client, net.gateway
        if op == "open":
            sid = client.open_stream(priority=a)
            client.send(sid, payload(f"o{step}", size), end_stream=fin)
        elif op in ("write", "reset") and client.stream_ids:
            sid = client.stream_ids[a % len(client.stream_ids)]
            stream = client._streams[sid]
            if op == "reset":
                client.reset(sid)
            elif not stream.send.fin:
                client.send(sid, payload(f"w{step}", size), end_stream=fin)
        elif op == "answer" and gateway.stream_ids:
            sid = gateway.stream_ids[a % len(gateway.stream_ids)]
            if not gateway._streams[sid].send.fin:
                gateway.send(sid, payload(f"a{step}", size), end_stream=fin)
        elif op == "run":
            net.run(net.now + a / 1000)
        _check(client)
        _check(gateway)
        net.run(net.now + 0.002)
        _check(client)
        _check(gateway)


def test_a_window_update_unblocks_a_stream_for_the_timer() -> None:
    """A stream stalled on its peer's limit is ready again once MAX_STREAM_DATA arrives."""
    config = RelayConfig(stream_window_bytes=WINDOW, session_window_bytes=4 * WINDOW)
    net = Net(OneWayPath(delay_s=0.01), OneWayPath(delay_s=0.01), config=config)
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    net.client.send(sid, payload("stall", 3 * WINDOW))
    net.run(net.now + 0.005)  # the first window is out, no credit back yet
    assert net.client._streams[sid].send.next_offset == WINDOW
    assert sid not in net.client._ready_new and not net.client._sendable_stream()
    _check(net.client)
    net.run(net.now + 1.0)  # the gateway delivers and grants more
    assert net.client._streams[sid].send.next_offset == 3 * WINDOW
    _check(net.client)
