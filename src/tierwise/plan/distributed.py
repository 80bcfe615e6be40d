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

from tierwise.errors import ScenarioError

__all__ = ["CONNECT_TIMEOUT_S", "dask_client"]

CONNECT_TIMEOUT_S = 5  # a scheduler that does not answer within this is unreachable


@contextlib.contextmanager
def dask_client(
    address: str | None = None, workers: int | None = None, processes: bool = True
) -> Iterator[Any]:
    """A ``distributed.Client``: to ``address``, or to a new local cluster of ``workers``."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ScenarioError(
            "simulated sweeps need dask.distributed: pip install 'tierwise[sweep]'",
            source="--scheduler",
        ) from None
    if address is not None:
        try:
            client = Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise ScenarioError(
                f"cannot reach the Dask scheduler at {address}: {exc}", source="--scheduler"
            ) from None
        with client:
            yield client
        return
    import dask

    # the workers' statistical profiler samples every 10 ms (CPU in proportion to wall
    # time) for a dashboard that is not started: nothing would read it
    with warnings.catch_warnings(), dask.config.set({"distributed.worker.profile.enabled": False}):
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


def needs_dask(scn: Any) -> bool:
    """Whether a scenario's points are simulated or run a Monte Carlo (worth a cluster)."""
    return scn.variability is not None or any(s.remote and s.evaluate == "sim" for s in scn.site)
