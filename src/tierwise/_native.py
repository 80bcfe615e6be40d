"""The optional compiled hot path (simulator and relay), and the way back to pure Python.

``python -m tierwise.sim.build`` compiles :data:`HOT_MODULES` with mypyc into
extension modules beside their sources; Python then loads an extension before the
``.py`` of the same name. The build leaves a manifest (:data:`MANIFEST`) with each
source's size and modification time. On ``import tierwise`` this module keeps the
pure-Python path for *all* of them (the compiled modules call each other natively,
so it is all or nothing) when

- ``TIERWISE_PURE_PYTHON`` is set to anything but ``""``/``0``, or
- a source changed since the build (a stale extension must never shadow it).

With no build (no manifest) it does nothing but one ``stat``: start-up stays lean.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

__all__ = ["ENV", "HOT_MODULES", "MANIFEST", "install", "source_path", "stale", "write_manifest"]

ENV = "TIERWISE_PURE_PYTHON"
HOT_MODULES = (
    "tierwise.proto.rangeset",
    "tierwise.proto.congestion",
    "tierwise.proto.tcp",
    "tierwise.sim.engine",
    "tierwise.sim.link",
    "tierwise.sim.transport",
    "tierwise.proto.relay.events",
    "tierwise.proto.relay.wire",
    "tierwise.proto.relay.crypto",
    "tierwise.proto.relay.streams",
    "tierwise.proto.relay.meter",
    "tierwise.proto.relay.police",  # per acknowledged packet (PolicingDetector.on_resolved)
    "tierwise.proto.relay.rate",
    "tierwise.proto.relay.fec",
    "tierwise.proto.relay.connection",
)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # holds tierwise/
MANIFEST = os.path.join(_ROOT, "tierwise", "_native.manifest")


def source_path(module: str) -> str:
    """The ``.py`` file of a hot module."""
    return os.path.join(_ROOT, *module.split(".")) + ".py"


def _stamp(path: str) -> str:
    st = os.stat(path)
    return f"{st.st_size} {st.st_mtime_ns}"


def stale() -> list[str]:
    """Hot modules whose source differs from the one the build compiled."""
    with open(MANIFEST, encoding="utf-8") as f:
        built = dict(line.rstrip("\n").split(" ", 1) for line in f if " " in line)
    out = []
    for module in HOT_MODULES:
        try:
            same = built.get(module) == _stamp(source_path(module))
        except OSError:
            same = False
        if not same:
            out.append(module)
    return out


def write_manifest() -> None:
    """Record the sources the build just compiled (called by ``tierwise.sim.build``)."""
    lines = [f"{m} {_stamp(source_path(m))}\n" for m in HOT_MODULES]
    with open(MANIFEST, "w", encoding="utf-8") as f:
        f.writelines(lines)


class _PureFinder:
    """Finds the hot modules' ``.py`` sources, ahead of any extension module."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: ModuleType | None = None) -> object:
        if name not in HOT_MODULES:
            return None
        import importlib.util  # only when the finder is in use: `import tierwise` stays lean

        return importlib.util.spec_from_file_location(name, source_path(name))


def _wants_pure() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def install() -> None:
    """Keep the pure-Python hot path when asked to or when the build is stale."""
    if not os.path.exists(MANIFEST):
        return
    if _wants_pure() or stale():
        if not any(isinstance(f, _PureFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, _PureFinder())  # type: ignore[arg-type]
