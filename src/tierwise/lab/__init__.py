"""Real experiments on one host: namespaces joined through a user-space path emulator.

``with EmulatedPath(PathConfig.symmetric(rtt_s=0.1)) as path:`` gives two network namespaces
whose traffic crosses :mod:`tierwise.lab.bench.emulator` (delay, rate, loss per direction).
Needs root, ``/dev/net/tun`` and iproute2's ``ip``; otherwise a :class:`LabError`
names what is missing.

Wings, each importing only itself and those before it: :mod:`.bench` (namespaces,
emulator, path, holders, budget, service, capture), :mod:`.experiments` (request,
factors, throughput, flows, the ``--via`` transports, rounds), :mod:`.world` (the route
world and its model server), :mod:`.views` (figures) and :mod:`.cli` (``tierwise lab``).
tests/test_layers.py checks the order.
"""

from __future__ import annotations

from tierwise.lazy import lazy_exports

# Loaded on first use (PEP 562): `tierwise lab --help` needs neither numpy nor the simulator.
_LAZY = {
    "Direction": "tierwise.lab.bench.emulator",
    "GilbertElliottLoss": "tierwise.lab.bench.emulator",
    "Shaper": "tierwise.lab.bench.emulator",
    "schedule": "tierwise.lab.bench.emulator",
    "cleanup_stale": "tierwise.lab.bench.netns",
    "lab_unavailable_reason": "tierwise.lab.bench.netns",
    "require_lab": "tierwise.lab.bench.netns",
    "Ceiling": "tierwise.lab.bench.path",
    "EmulatedPath": "tierwise.lab.bench.path",
    "PathConfig": "tierwise.lab.bench.path",
    "measure_ceiling": "tierwise.lab.bench.path",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "Ceiling",
    "Direction",
    "EmulatedPath",
    "GilbertElliottLoss",
    "PathConfig",
    "Shaper",
    "cleanup_stale",
    "lab_unavailable_reason",
    "measure_ceiling",
    "require_lab",
    "schedule",
]
