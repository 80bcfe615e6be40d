"""The transports of ``--via`` over one lab path: kernel TCP, the tierwise relay, kcptun.

The relay's proof on real kernels (:mod:`tierwise.lab.experiments.via` runs the §12.3.5
request and a bulk transfer through them). One path comes up
(:class:`~tierwise.lab.bench.path.EmulatedPath`); the model service listens in the
server namespace; each transport is a way to reach it from the client namespace:

- ``direct``: kernel TCP, a new connection per request (cubic unless ``--cc``).
- ``relay``: ``tierwise relay client --forward`` in the client namespace and
  ``tierwise relay gateway`` in the server namespace, as separate processes (the
  program as deployed). The session is opened and warmed before the first timed
  request; every request is a new application connection to the forwarded port,
  which becomes a new stream of that session (its open rides with the first data).
- ``kcptun``: Debian's ``kcptun-client`` / ``kcptun-server`` the same way round, at the
  settings of :func:`kcptun_args` (why those: docs/benchmarks.md).

Requests alternate between the transports run by run (§12.3.5 insists on alternating).
A request's time runs from ``connect()`` on the application socket to its last
response byte; the floor is ``R + S/B + T_proc + S_resp/B`` (§12.1.1). The upload is
seeded random bytes and the service answers with their SHA-256 at the head of its
response, so every request proves byte-exact delivery.

Each helper process gets ``PR_SET_PDEATHSIG`` (SIGKILL), so it cannot outlive this
process even after ``kill -9``; normally it is stopped with SIGTERM when the block ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tierwise.errors import LabError, ScenarioError, shown
from tierwise.lab.bench import netns
from tierwise.lab.bench.path import MTU_BYTES, EmulatedPath
from tierwise.lab.bench.procs import stop

__all__ = [
    "KCPTUN_BINARIES",
    "VIAS",
    "Tunnel",
    "kcptun_args",
    "kcptun_mtu_bytes",
    "kcptun_unavailable_reason",
    "open_tunnel",
    "parse_vias",
    "process_cpu_s",
    "relay_max_datagram",
]

VIAS = ("direct", "relay", "kcptun")
KCPTUN_BINARIES = ("kcptun-client", "kcptun-server")
GATEWAY_PORT = 7443  # UDP, in the server namespace (the namespace is ours alone)
KCPTUN_PORT = 29900
LOCAL_PORTS = {"relay": 18443, "kcptun": 18900}  # on loopback in the client namespace
READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0
KCPTUN_MTU_BYTES = 1350  # kcptun's default; the emulated path's MTU is 1500
# kcp-go refuses (silently: its default stays) an --mtu above this (sess.go mtuLimit): on a
# jumbo path kcptun's datagrams stay at most 1,500 bytes of UDP payload
KCPTUN_MTU_LIMIT_BYTES = 1500
UDP_IPV4_BYTES = 28  # the lab path is IPv4
PR_SET_PDEATHSIG = 1
_CLI = "from tierwise.cli import main; main()"


def parse_vias(text: str) -> tuple[str, ...]:
    """``direct,relay[,kcptun]`` → a tuple in the given order; bad values exit 2 naming --via."""
    items = [item.strip() for item in text.split(",")]
    unknown = [item for item in items if item not in VIAS]
    if unknown or not any(items):
        what = shown(unknown[0]) if unknown else "an empty list"
        raise ScenarioError(f"unknown transport {what}; known: {', '.join(VIAS)}", source="--via")
    if len(set(items)) != len(items):
        raise ScenarioError(f"{shown(text)} names a transport twice", source="--via")
    return tuple(items)


def kcptun_unavailable_reason() -> str | None:
    """Why kcptun cannot run here (with the fix), or None."""
    missing = [b for b in KCPTUN_BINARIES if shutil.which(b) is None]
    if missing:
        return f"{' and '.join(missing)} not found: `apt-get install -y kcptun` (Debian/Ubuntu)"
    return None


def kcptun_mtu_bytes(path_mtu_bytes: int) -> int:
    """kcptun's ``--mtu`` (its UDP payload) for a path: its default on Ethernet, else the
    largest it accepts that the path carries."""
    if path_mtu_bytes == MTU_BYTES:
        return KCPTUN_MTU_BYTES
    return min(KCPTUN_MTU_LIMIT_BYTES, path_mtu_bytes - UDP_IPV4_BYTES)


def relay_max_datagram(path_mtu_bytes: int) -> int | None:
    """The relay's ``--max-datagram`` for a path: None (its default, 1,350) on Ethernet,
    else the path's UDP payload less a repair's extra bytes (9,000 → 8,876): the session
    starts at 1,350 and discovers the path's MTU up to that."""
    from tierwise.proto.relay.pmtu import REPAIR_EXTRA_BYTES

    if path_mtu_bytes == MTU_BYTES:
        return None
    return max(200, path_mtu_bytes - UDP_IPV4_BYTES - REPAIR_EXTRA_BYTES)


def kcptun_args(
    rtt_s: float, rate_bytes_per_s: float, path_mtu_bytes: int = MTU_BYTES
) -> list[str]:
    """kcptun's settings for this path (both ends use the same; docs/benchmarks.md says why).

    ``fast3`` (no delay, 10 ms interval, fast resend after 2 duplicate ACKs, no congestion
    window: loss is not taken as congestion, as §12.3.3 asks); Reed–Solomon 10 data + 3
    parity (its documented default); send and receive windows of 1.25 × the path's
    bandwidth-delay product in 1,350-byte packets (its README: the window must cover the
    BDP or it, not the path, limits); no compression (it would shrink nothing here but
    cost CPU); AES (Go's, hardware-accelerated), because the relay seals every datagram.
    On a path whose MTU is not 1,500 its ``--mtu`` follows the path, up to kcp-go's cap
    of 1,500 (:func:`kcptun_mtu_bytes`).
    """
    mtu = kcptun_mtu_bytes(path_mtu_bytes)
    window = max(128, round(1.25 * rate_bytes_per_s * rtt_s / mtu))
    return [
        "--mode", "fast3", "--datashard", "10", "--parityshard", "3",
        "--sndwnd", str(window), "--rcvwnd", str(window), "--nocomp", "--crypt", "aes",
        "--mtu", str(mtu), "--sockbuf", str(16 << 20), "--smuxver", "1",
        "--quiet",
    ]  # fmt: skip


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Tunnel:
    """A running transport: where the client namespace connects, and its processes."""

    via: str
    host: str
    port: int
    processes: dict[str, subprocess.Popen[bytes]]
    logs: dict[str, str]
    settings: list[str] = field(default_factory=list)
    # local ports of further forwards by name (the relay's: one session, several targets)
    extra_ports: dict[str, int] = field(default_factory=dict)

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of each end (``client``, ``server``)."""
        return {end: process_cpu_s(p.pid) for end, p in self.processes.items()}

    def check_alive(self) -> None:
        """Raise :class:`LabError` with the log's tail if a helper process has exited."""
        for end, proc in self.processes.items():
            if proc.poll() is not None:
                tail = _tail(self.logs[end])
                raise LabError(f"the {self.via} {end} exited ({proc.returncode}): {tail}")


def _tail(path: str, nbytes: int = 400) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - nbytes))
            return f.read().decode(errors="replace").strip().replace("\n", " | ") or "no output"
    except OSError:
        return "no log"


def _spawn(
    namespace: str, argv: list[str], log: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``argv`` in ``namespace``, output to ``log``; it dies with this process."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            netns.exec_argv(namespace, argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env={**os.environ, **(env or {})},
            preexec_fn=_die_with_parent,  # prctl only: no locks are taken in the child
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    stop(proc, STOP_TIMEOUT_S)


@contextlib.contextmanager
def open_tunnel(
    via: str,
    path: EmulatedPath,
    target: tuple[str, int],
    rtt_s: float,
    rate_bytes_per_s: float,
    *,
    max_datagram: int | None = None,
    memory_dir: str | None = None,
    extra: dict[str, tuple[str, int]] | None = None,
) -> Iterator[Tunnel]:
    """Start ``via``'s two ends around ``path`` (``direct`` starts nothing); stop them after.

    The relay's ``--max-datagram`` and kcptun's ``--mtu`` follow the path's MTU
    (:func:`relay_max_datagram`, :func:`kcptun_mtu_bytes`); ``max_datagram``
    overrides the relay's. The relay's ends keep their path memory in ``memory_dir``
    (what an earlier tunnel there measured is where a new one starts), else in the
    tunnel's own directory: a path never seen. ``extra``: further targets by name that
    the same session carries (the relay only; direct connects to them as they are)."""
    if via == "direct":
        yield Tunnel(via, *target, {}, {}, extra_ports={k: a[1] for k, a in (extra or {}).items()})
        return
    if extra and via != "relay":
        raise LabError(f"{via} forwards one target per session; further ones need the relay")
    with tempfile.TemporaryDirectory(prefix="tw-via-") as work:
        procs: dict[str, subprocess.Popen[bytes]] = {}
        logs = {end: os.path.join(work, f"{end}.log") for end in ("client", "server")}
        tunnel = Tunnel(via, "127.0.0.1", LOCAL_PORTS[via], procs, logs)
        try:
            if via == "relay":
                _start_relay(path, target, work, tunnel, max_datagram, memory_dir or work, extra)
            else:
                _start_kcptun(path, target, rtt_s, rate_bytes_per_s, tunnel)
            _wait_listening(path, tunnel)
            yield tunnel
        finally:
            for proc in procs.values():
                _stop(proc)


def _start_relay(
    path: EmulatedPath,
    target: tuple[str, int],
    work: str,
    tunnel: Tunnel,
    max_datagram: int | None = None,
    memory_dir: str | None = None,
    extra: dict[str, tuple[str, int]] | None = None,
) -> None:
    key = os.path.join(work, "relay.key")
    memory = memory_dir or work
    forwards, allows = [], []
    for i, (name, addr) in enumerate(sorted((extra or {}).items())):
        tunnel.extra_ports[name] = LOCAL_PORTS["relay"] + 1 + i
        forwards += ["--forward", f"{tunnel.host}:{tunnel.extra_ports[name]}={addr[0]}:{addr[1]}"]
        allows += ["--allow", f"{addr[0]}:{addr[1]}"]
    cli = [sys.executable, "-c", _CLI, "relay"]
    made = subprocess.run([*cli, "keygen", "--out", key], capture_output=True, text=True)
    if made.returncode != 0:
        raise LabError(f"relay keygen failed: {made.stderr.strip()}")
    gateway = f"{path.server_addr}:{GATEWAY_PORT}"
    dest = f"{target[0]}:{target[1]}"
    datagram = relay_max_datagram(path.config.mtu_bytes) if max_datagram is None else max_datagram
    size = [] if datagram is None else ["--max-datagram", str(datagram)]
    if size:
        tunnel.settings = size
    tunnel.processes["server"] = _spawn(
        path.server_ns,
        [*cli, "gateway", "--listen", gateway, "--allow", dest, *allows, "--key-file", key,
         "--log-level", "warning", "--path-memory", os.path.join(memory, "gateway-paths.json"),
         *size],
        tunnel.logs["server"],
    )  # fmt: skip
    tunnel.processes["client"] = _spawn(
        path.client_ns,
        [*cli, "client", "--gateway", gateway, "--key-file", key,
         "--forward", f"{tunnel.host}:{tunnel.port}={dest}", *forwards, "--log-level", "warning",
         "--path-memory", os.path.join(memory, "client-paths.json"), *size],
        tunnel.logs["client"],
    )  # fmt: skip


def _start_kcptun(
    path: EmulatedPath, target: tuple[str, int], rtt_s: float, rate: float, tunnel: Tunnel
) -> None:
    reason = kcptun_unavailable_reason()
    if reason is not None:
        raise LabError(reason)
    env = {"KCPTUN_KEY": os.urandom(16).hex()}  # in the environment, not on a command line
    settings = tunnel.settings = kcptun_args(rtt_s, rate, path.config.mtu_bytes)
    server = f"{path.server_addr}:{KCPTUN_PORT}"
    tunnel.processes["server"] = _spawn(
        path.server_ns,
        ["kcptun-server", "-l", server, "-t", f"{target[0]}:{target[1]}", *settings],
        tunnel.logs["server"],
        env,
    )
    tunnel.processes["client"] = _spawn(
        path.client_ns,
        ["kcptun-client", "-l", f"{tunnel.host}:{tunnel.port}", "-r", server, *settings],
        tunnel.logs["client"],
        env,
    )


def _wait_listening(path: EmulatedPath, tunnel: Tunnel) -> None:
    """Until the client end listens on its local port.

    Asked of ``ss`` in the client namespace, not by connecting: a probe connection
    would open a stream through the tunnel to the service and load it with a transfer.
    """
    deadline = time.monotonic() + READY_TIMEOUT_S
    argv = netns.exec_argv(path.client_ns, ["ss", "-Hltn", f"sport = :{tunnel.port}"])
    while True:
        tunnel.check_alive()
        try:
            listening = subprocess.run(argv, capture_output=True, text=True, timeout=5).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LabError(f"`{' '.join(argv)}` failed: {exc}") from exc
        if listening.strip():
            return
        if time.monotonic() > deadline:
            raise LabError(f"the {tunnel.via} client did not listen within {READY_TIMEOUT_S:g} s")
        time.sleep(0.1)


# --- the request ---------------------------------------------------------------------


def upload_body(size_bytes: int, seed: int) -> bytes:
    """Seeded random bytes: incompressible, and a changed byte changes the digest."""
    import numpy as np

    return np.random.default_rng(seed).bytes(size_bytes)


def digest_ok(body: bytes, response: bytes) -> bool:
    """The service's answer starts with the SHA-256 of the upload it received."""
    digest = hashlib.sha256(body).digest()
    return response[: len(digest)] == digest[: len(response)]


def retry_until(action: Callable[[], object], timeout_s: float, what: str) -> None:
    """Call ``action`` until it returns without an ``OSError`` or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            action()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise LabError(f"{what} failed for {timeout_s:g} s: {exc}") from exc
            time.sleep(0.2)


def tunnel_record(tunnel: Tunnel) -> dict:
    """What the JSON record says about a transport's ends."""
    pids = {end: proc.pid for end, proc in tunnel.processes.items()}
    record: dict = {"address": f"{tunnel.host}:{tunnel.port}", "pids": pids}
    record["log_tails"] = {end: _tail(log, 2000) for end, log in tunnel.logs.items()}
    if tunnel.settings:
        record["settings"] = " ".join(tunnel.settings)
    return record
