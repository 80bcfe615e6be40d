"""Dask for point-by-point sweeps: a local cluster by default, or an existing scheduler.

Simulated sites (``evaluate = "sim"``) are timed packet by packet, which is pure
Python: the points run as Dask tasks in worker *processes* so that they use every
core, or on a remote ``dask.distributed`` cluster given by its scheduler address.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from tierwise.errors import ScenarioError, first_line, shown

__all__ = ["CONNECT_TIMEOUT_S", "LOCAL_CLUSTER_CONFIG", "WORKER_WAIT_S", "dask_client"]

# a scheduler that does not answer within this is unreachable (`sweep --connect-timeout`)
CONNECT_TIMEOUT_S = 5.0
# The local cluster shares this machine's cores with the points it runs, so the timers
# Dask keeps for long-lived clusters and dashboards are slowed down or off: measured on
# 2 workers, the processes' CPU while idle fell from 0.11 to 0.02 cores and the client
# process's CPU during a sweep from 0.2 s to 0.1 s (docs/benchmarks.md).
LOCAL_CLUSTER_CONFIG: dict[str, object] = {
    # the statistical profiler samples every 10 ms for a dashboard that is not started
    "distributed.worker.profile.enabled": False,
    # the event-loop health tick (20 ms) and the system monitor (500 ms) feed only
    # warnings and dashboard plots
    "distributed.admin.tick.interval": "500ms",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
    # the tasks are few, equal and queued on the scheduler: nothing to steal or replicate
    "distributed.scheduler.work-stealing": False,
    "distributed.scheduler.active-memory-manager.start": False,
}
# a scheduler with no worker after this long cannot run the sweep (`sweep --worker-timeout`)
WORKER_WAIT_S = 10.0


@contextlib.contextmanager
def dask_client(
    address: str | None = None,
    workers: int | None = None,
    processes: bool = True,
    *,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    worker_wait_s: float = WORKER_WAIT_S,
) -> Iterator[Any]:
    """A ``distributed.Client``: to ``address``, or to a new local cluster of ``workers``.

    ``address`` must answer Dask's handshake within ``connect_timeout_s`` and have a
    worker within ``worker_wait_s``; neither applies to a local cluster.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ScenarioError(
            "simulated sweeps need dask.distributed: pip install 'tierwise[sweep]'",
            source="--scheduler",
        ) from None
    _quiet()
    if address is not None:
        _probe(address, connect_timeout_s)
        try:
            client = Client(address, timeout=f"{connect_timeout_s}s")
        except (Exception, MemoryError) as exc:
            raise ScenarioError(
                f"cannot reach the Dask scheduler at {shown(address)}: {first_line(exc)}",
                source="--scheduler",
            ) from None
        with client:
            try:  # a scheduler without workers would hold every task, and the sweep, forever
                client.wait_for_workers(1, timeout=worker_wait_s)
            except (TimeoutError, OSError):
                raise ScenarioError(
                    f"the Dask scheduler at {shown(address)} has no workers (none joined "
                    f"within {worker_wait_s:g} s; start some with: dask worker {address})",
                    source="--scheduler",
                ) from None
            yield client
        return
    import dask

    with warnings.catch_warnings(), dask.config.set(LOCAL_CLUSTER_CONFIG):
        # the scheduler's HTTP routes move off a busy :8787 on their own; no dashboard is
        # started, so the warning says nothing the user can act on
        warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
            silence_logs=50,
        )
    with cluster, Client(cluster) as client:
        yield client


def _quiet() -> None:
    """Keep ``distributed``'s own log lines (reconnect attempts, closing comms) off the
    terminal: what goes wrong reaches the user as one line from tierwise."""
    import logging

    names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] == "distributed"]
    for name in ["distributed", *names]:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _probe(address: str, timeout_s: float) -> None:
    """Check ``address`` is a Dask scheduler: a ``tcp://HOST:PORT`` that finishes Dask's
    handshake within the timeout.

    ``distributed`` bounds the TCP connect but not the handshake that follows: a peer
    that accepts and then says nothing (an HTTP server waiting for a request line, a
    dashboard port, a proxy) keeps ``Client(address)`` waiting forever, and one that
    answers with other bytes makes it read them as a frame length (a multi-exabyte
    allocation). Both become one line here, before any client is made.
    """
    import asyncio

    from distributed.comm import connect
    from distributed.comm.addressing import parse_address, parse_host_port

    def refuse(why: str) -> ScenarioError:
        return ScenarioError(f"{shown(address)}: {why}", source="--scheduler")

    try:
        protocol, location = parse_address(address)
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise refuse(f"expected tcp://HOST:PORT ({first_line(exc)})") from None
    if protocol != "tcp":
        raise refuse(f"only tcp:// scheduler addresses are supported, not {protocol}://")
    if not host or not 1 <= int(port) <= 65535:
        raise refuse("expected tcp://HOST:PORT with a host and a port in 1–65535")

    async def handshake() -> None:
        comm = await connect(address, timeout=timeout_s)
        await comm.close()

    try:
        asyncio.run(asyncio.wait_for(handshake(), timeout_s + 1))
    except (OSError, ValueError) as exc:  # refused, unresolvable, timed out connecting
        if str(exc):
            raise refuse(f"cannot reach the Dask scheduler: {first_line(exc)}") from None
        raise refuse(
            f"connected, but no Dask scheduler answered within {timeout_s:g} s "
            "(a scheduler listens on port 8786; 8787 is its dashboard)"
        ) from None
    except (Exception, MemoryError):
        raise refuse(
            "connected, but what answered is not a Dask scheduler "
            "(a scheduler listens on port 8786; 8787 is its dashboard)"
        ) from None


def needs_dask(scn: Any) -> bool:
    """Whether a scenario's points are simulated or run a Monte Carlo (worth a cluster)."""
    return scn.variability is not None or any(s.remote and s.evaluate == "sim" for s in scn.site)
