"""A cold request's upload as the server's device saw it, round by round, and its figure.

:func:`cold_rounds` runs one cold request on its own path with a
:class:`~tierwise.lab.bench.capture.Capture` on the server's device and groups the
arrivals into the sender's rounds; :func:`rounds_figure` draws them.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tierwise.errors import LabError
from tierwise.lab.bench.capture import Capture, rounds
from tierwise.lab.bench.path import EmulatedPath
from tierwise.lab.bench.service import ModelService, ServiceConfig, set_buffers, set_congestion
from tierwise.lab.experiment import (
    TUNED_BUFFER_BYTES,
    TUNED_WINDOW_SEGMENTS,
    RequestExperiment,
    TimedConnection,
    tcp_state,
)
from tierwise.lab.factors import Routes
from tierwise.lab.timeline import save_figure

__all__ = ["cold_rounds", "rounds_figure", "save_rounds"]


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


def rounds_figure(results: list[dict], *, rtt_s: float, title: str | None = None) -> Figure:
    """Upload bytes arrived at the server against time since ``connect()``, one line per run.

    ``results`` are :func:`cold_rounds` records. Slow start shows as a staircase of
    bursts one RTT apart; BBR's pacing as sloped stretches.
    """
    fig = Figure(figsize=(9, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for res in results:
        times = [0.0] + [t for t, _ in res["arrivals_ms"]]
        total = [0.0]
        for _, n in res["arrivals_ms"]:
            total.append(total[-1] + n / 1e3)
        label = res["cc"] + (f", initcwnd {res['initcwnd']}" if res.get("initcwnd") else "")
        ax.step(times, total, where="post", lw=1.4, label=f"{label}: {res['time_s']:.3f} s")
    end = max((r["arrivals_ms"][-1][0] for r in results if r["arrivals_ms"]), default=0.0)
    k = 1
    while k * rtt_s * 1e3 <= end * 1.05:
        ax.axvline(k * rtt_s * 1e3, color="#888888", lw=0.6, ls=":", zorder=0)
        k += 1
    ax.set_xlabel(
        f"time since connect() (ms) · dotted lines: multiples of the RTT ({rtt_s * 1e3:g} ms)"
    )
    ax.set_ylabel("upload bytes arrived at the server (kB)")
    ax.set_xlim(0, end * 1.05 if end else None)
    ax.set_ylim(0, None)
    ax.legend(loc="upper left", fontsize=9, frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(title or "cold request: the upload's rounds on the wire", loc="left", fontsize=10)
    return fig


def save_rounds(
    results: list[dict], folder: Path, name: str, *, rtt_s: float, title: str | None = None
) -> list[Path]:
    """Draw :func:`rounds_figure` into ``folder/<name>.png`` and ``.svg``; the paths."""
    return save_figure(rounds_figure(results, rtt_s=rtt_s, title=title), folder, name)
