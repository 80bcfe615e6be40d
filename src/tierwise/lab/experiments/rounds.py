"""A cold request's upload as the server's device saw it, round by round.

:func:`cold_rounds` runs one cold request on its own path with a
:class:`~tierwise.lab.bench.capture.Capture` on the server's device and groups the
arrivals into the sender's rounds (:mod:`tierwise.lab.views.rounds` draws them): the
window per round trip that slow start doubles, or the pacing that spreads BBR's.
"""

from __future__ import annotations

from tierwise.errors import LabError
from tierwise.lab.bench.capture import Capture, rounds
from tierwise.lab.bench.path import EmulatedPath
from tierwise.lab.bench.service import ModelService, ServiceConfig, set_buffers, set_congestion
from tierwise.lab.experiments.factors import Routes
from tierwise.lab.experiments.request import (
    TUNED_BUFFER_BYTES,
    TUNED_WINDOW_SEGMENTS,
    RequestExperiment,
    TimedConnection,
    tcp_state,
)

__all__ = ["cold_rounds"]


def cold_rounds(exp: RequestExperiment, cc: str, initcwnd: int | None = None) -> dict:
    """One cold request of ``exp`` under ``cc`` on its own path, the server's device captured.

    The total time, the upload's rounds as they arrived (gaps > RTT/4 separate them
    when the round began at least RTT/2 earlier; milliseconds from ``connect()``) and the
    sender's TCP state after. ``initcwnd`` sets initcwnd (and initrwnd ≥ 300) on both
    routes and 8 MB buffers, as ``--factor initcwnd`` does, so only the sender's window
    (and the SYN-ACK's) can limit.
    """
    with EmulatedPath(exp.path_config()) as path:
        buffers = None
        if initcwnd is not None:  # as `--factor initcwnd`: the receiver's window is not the limit
            Routes(path).window(initcwnd, initrwnd=max(initcwnd, TUNED_WINDOW_SEGMENTS))
            buffers = TUNED_BUFFER_BYTES
        config = ServiceConfig(exp.processing_s, exp.response_bytes, buffers, cc)
        with ModelService(path.server_ns, path.server_addr, config) as svc:

            def client_socket():
                sock = path.socket("client")
                set_congestion(sock, cc)
                if buffers is not None:
                    set_buffers(sock, buffers)
                return sock

            conn = TimedConnection(path.server_addr, svc.port, client_socket)
            with Capture(path) as cap:
                events = conn.exchange(bytes(exp.size_bytes))
                after = tcp_state(conn.sock)
            conn.close()
    if cap.dropped:
        raise LabError(f"the capture lost {cap.dropped} packets; its rounds would be wrong")
    start = events["connect_start"]
    upload = [a for a in cap.arrivals if a.time_s < events["first_response"]]
    return {
        "cc": cc,
        "initcwnd": initcwnd,
        "time_s": events["last_response"] - start,
        "arrivals_ms": [[(a.time_s - start) * 1e3, a.payload_bytes] for a in upload],
        "rounds": [
            {
                "first_ms": (r.first_s - start) * 1e3,
                "last_ms": (r.last_s - start) * 1e3,
                "segments": r.segments,
                "bytes": r.payload_bytes,
            }
            for r in rounds(upload, gap_s=exp.rtt_s / 4, min_round_s=exp.rtt_s / 2)
        ],
        "after": after,
    }
