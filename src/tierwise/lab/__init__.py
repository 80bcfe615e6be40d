"""Real experiments on one host: namespaces joined through a user-space path emulator.

``with Path(PathConfig.symmetric(rtt_s=0.1)) as path:`` gives two network namespaces
whose traffic crosses :mod:`tierwise.lab.emulator` (delay, rate, loss per direction).
Needs root, ``/dev/net/tun`` and iproute2's ``ip``; otherwise a :class:`LabError`
names what is missing.
"""

from tierwise.lab.emulator import Direction, GilbertElliottLoss, Shaper, schedule
from tierwise.lab.netns import cleanup_stale, lab_unavailable_reason, require_lab
from tierwise.lab.path import Ceiling, Path, PathConfig, measure_ceiling

__all__ = [
    "Ceiling",
    "Direction",
    "GilbertElliottLoss",
    "Path",
    "PathConfig",
    "Shaper",
    "cleanup_stale",
    "lab_unavailable_reason",
    "measure_ceiling",
    "require_lab",
    "schedule",
]
