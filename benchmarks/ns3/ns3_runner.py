"""Run the ns-3 validation peer from Python (benchmarks and validation only).

Nothing in the ``tierwise`` package imports this module: it lives beside the
C++ program in ``benchmarks/ns3`` and is loaded by tests and benchmarks that
cross-check ``tierwise.sim`` against ns-3 3.37.  When ns-3 or a compiler is
missing, :func:`available` returns False and callers skip.

    import sys; sys.path.insert(0, "benchmarks/ns3")
    from ns3_runner import available, run_ns3
    if available():
        r = run_ns3("newreno", 0.0)
        r["completion_s"], r["completion_from_first_data_s"], r["wall_s"], r["events"]

Build: ``run.sh build`` compiles ``tierwise_ns3.cc`` once into
``benchmarks/ns3/build/tierwise_ns3-<hash of source+flags>`` (or
``$TIERWISE_NS3_BUILD_DIR``); later calls reuse the binary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["Ns3Error", "Ns3Unavailable", "available", "binary_path", "run_ns3", "run_ns3_flows"]

HERE = Path(__file__).resolve().parent
RUN_SH = HERE / "run.sh"
SOURCE = HERE / "tierwise_ns3.cc"
MODULES = (
    "ns3-core",
    "ns3-network",
    "ns3-internet",
    "ns3-point-to-point",
    "ns3-applications",
    "ns3-traffic-control",
)
_CC_NAMES = {"newreno": "NewReno", "reno": "NewReno", "cubic": "Cubic", "bbr": "Bbr"}

_binary: Path | None = None


class Ns3Unavailable(RuntimeError):
    """ns-3 3.37 (libns3-dev), pkg-config or a C++ compiler is missing."""


class Ns3Error(RuntimeError):
    """The ns-3 program failed or printed no JSON."""


def available() -> bool:
    """True when ns-3's headers, pkg-config modules, g++ and bash are present.

    Cheap (no compilation) and never raises.
    """
    try:
        if os.environ.get("TIERWISE_NO_NS3"):
            return False
        cxx = os.environ.get("CXX", "g++")
        if not (shutil.which(cxx) and shutil.which("pkg-config") and shutil.which("bash")):
            return False
        if not SOURCE.is_file() or not RUN_SH.is_file():
            return False
        r = subprocess.run(
            ["pkg-config", "--exists", *MODULES],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
        return r.returncode == 0
    except Exception:
        return False


def binary_path(rebuild: bool = False) -> Path:
    """Build (once per source/flags hash) and return the program's path."""
    global _binary
    if _binary is not None and _binary.exists() and not rebuild:
        return _binary
    if not available():
        raise Ns3Unavailable(
            "ns-3 not available: apt-get update && apt-get install -y libns3-dev g++ pkg-config"
        )
    r = subprocess.run(
        ["bash", str(RUN_SH), "build"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if r.returncode != 0:
        raise Ns3Error(f"building the ns-3 program failed:\n{r.stderr[-4000:]}")
    path = Path(r.stdout.strip().splitlines()[-1])
    if not path.exists():
        raise Ns3Error(f"run.sh build printed {path}, which does not exist")
    _binary = path
    return path


def _cc_name(cc: str) -> str:
    return _CC_NAMES.get(cc.lower(), cc)


def run_ns3(
    cc: str,
    loss: float,
    seed: int = 1,
    size_bytes: int = 30_000_000,
    *,
    mode: str = "bulk",
    rate: str = "20Mbps",
    rate_down: str | None = None,
    delay_ms: float = 50.0,
    segment: int = 1168,
    initial_cwnd: int = 10,
    del_ack_count: int = 1,
    queue_packets: int = 100_000,
    recovery: str = "prr",
    sack: bool = True,
    timestamps: bool = True,
    pad_bytes: int = 0,
    resp_bytes: int = 5_000_000,
    proc_s: float = 0.3,
    instrument: bool = True,
    trace_file: str | os.PathLike[str] | None = None,
    extra_args: list[str] | tuple[str, ...] = (),
    timeout: float = 1800.0,
) -> dict[str, Any]:
    """Run one ns-3 scenario and return its JSON summary as a dict.

    ``cc``: "newreno" | "cubic" | "bbr" (any case) or any ns-3 TypeId such as
    "ns3::TcpVegas".  ``loss``: packet error rate applied on the receiver's
    (node 1's) device, i.e. to data packets node0 -> node1 (ACKs are not lost).
    ``seed`` is ns-3's RngRun.  Defaults are the issue-4 scenario: 20 Mbit/s
    each way, 50 ms one-way delay, 30,000,000 bytes, 1168-byte segments,
    IW 10, an ACK per packet, a 100,000-packet DropTail queue per direction.

    ``mode="reqresp"``: upload ``size_bytes``, server waits ``proc_s`` after
    the last byte, then sends ``resp_bytes`` back on the same connection
    (set ``rate_down="100Mbps"`` for the reference's §12.3.2 case).

    Keys of the result include: completed, completion_s (from the SYN),
    completion_from_first_data_s, syn_time_s, first_data_time_s, bytes,
    retransmissions, error_model_drops, queue_drops_fwd, timeouts,
    fast_recoveries, max_cwnd_bytes, wire_bytes_fwd/rev,
    data_packet_wire_bytes, ack_wire_bytes, events, wall_s (Simulator::Run
    only) and wall_total_s (whole process: setup + run + teardown); plus
    wall_process_s measured here around the subprocess.  With
    ``instrument=False`` the per-packet parsing is skipped (retransmissions
    and packet sizes are None) for the cheapest wall time.
    """
    import time

    if not 0.0 <= loss < 1.0:
        raise ValueError(f"loss must be in [0, 1), got {loss}")
    bin_path = binary_path()
    args = [
        str(bin_path),
        f"--mode={mode}",
        f"--cc={_cc_name(cc)}",
        f"--loss={float(loss)!r}",
        f"--seed={int(seed)}",
        f"--size={int(size_bytes)}",
        f"--resp={int(resp_bytes)}",
        f"--proc={float(proc_s)!r}",
        f"--rate={rate}",
        f"--delayMs={float(delay_ms)!r}",
        f"--segment={int(segment)}",
        f"--iw={int(initial_cwnd)}",
        f"--delAck={int(del_ack_count)}",
        f"--queue={int(queue_packets)}",
        f"--recovery={recovery}",
        f"--sack={int(bool(sack))}",
        f"--timestamps={int(bool(timestamps))}",
        f"--padBytes={int(pad_bytes)}",
        f"--instrument={int(bool(instrument))}",
    ]
    if rate_down is not None:
        args.append(f"--rateDown={rate_down}")
    if trace_file is not None:
        args.append(f"--traceFile={os.fspath(trace_file)}")
    args.extend(extra_args)
    t0 = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        raise Ns3Error(
            f"ns-3 exited {r.returncode} without JSON; args={args[1:]}\n{r.stderr[-4000:]}"
        )
    out: dict[str, Any] = json.loads(line)
    out["wall_process_s"] = wall
    out["returncode"] = r.returncode
    return out


def run_ns3_flows(
    flows: list[tuple[str, float, float]],
    *,
    rate: str = "20Mbps",
    delay_ms: float = 50.0,
    queue_packets: int = 205,
    segment: int = 1168,
    initial_cwnd: int = 10,
    seed: int = 1,
    hystart: bool = True,
    trace_file: str | os.PathLike[str] | None = None,
    timeout: float = 1800.0,
) -> dict[str, Any]:
    """Competing bulk flows ``(cc, start_s, duration_s)`` over one bottleneck (a dumbbell:
    one sender node per flow); per-flow delivered bytes and goodput, wall times.

    ``hystart`` is TcpCubic's HyStart (ns-3's default on; tierwise's CUBIC has none);
    ``trace_file`` receives every 100 ms one CSV row per flow (delivered bytes, cwnd,
    bytes in flight, pacing rate, last RTT, congestion state, bottleneck queue)."""
    import time

    spec = ",".join(f"{_cc_name(cc)}:{start!r}:{duration!r}" for cc, start, duration in flows)
    args = [
        str(binary_path()),
        "--mode=flows",
        f"--flows={spec}",
        f"--rate={rate}",
        f"--delayMs={float(delay_ms)!r}",
        f"--queue={int(queue_packets)}",
        f"--segment={int(segment)}",
        f"--iw={int(initial_cwnd)}",
        f"--seed={int(seed)}",
        f"--hystart={int(hystart)}",
    ]
    if trace_file is not None:
        args.append(f"--traceFile={os.fspath(trace_file)}")
    t0 = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None or r.returncode != 0:
        raise Ns3Error(f"ns-3 flows exited {r.returncode}; args={args[1:]}\n{r.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(line)
    out["wall_process_s"] = wall
    return out


if __name__ == "__main__":  # tiny manual check: python benchmarks/ns3/ns3_runner.py
    import sys

    if not available():
        print("ns-3 not available", file=sys.stderr)
        sys.exit(0)
    cc = sys.argv[1] if len(sys.argv) > 1 else "newreno"
    loss = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    print(json.dumps(run_ns3(cc, loss)))
