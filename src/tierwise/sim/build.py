"""Optional: compile the simulator's and the relay's hot path with mypyc, in place.

The simulator's (proto.tcp, congestion, rangeset, sim.engine/link/transport) and the
relay's sans-IO connection (proto.relay.*, which both ``tierwise relay`` and the
simulator's relay flows run); one build covers both::

    python -m tierwise.sim.build            # needs mypy (pip install mypy) and a C compiler
    python -m tierwise.sim.build --clean    # back to pure Python
    python -m tierwise.sim.build --status
    python -m tierwise.sim.build --opt-level 0   # a quick build (the C compiler's -O0)

Nothing requires the build: without it (or with ``TIERWISE_PURE_PYTHON=1``, or once
a compiled module's source changes) the same modules run as plain Python, with the
same results. The extension modules land beside their sources, and mypyc's shared
library beside the ``tierwise`` package; :mod:`tierwise._native` decides at import.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from tierwise import _native

__all__ = ["GROUP", "OPT_LEVELS", "active", "build", "clean", "compiler_missing", "main", "status"]

GROUP = "tierwise_native"  # mypyc's shared library: tierwise_native__mypyc.*.so
OPT_LEVELS = ("0", "1", "2", "3")  # the C compiler's -O level mypyc passes (3 by default)

_SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
paths, tmp = sys.argv[1:-1], sys.argv[-1]
setup(
    name="tierwise-native",
    ext_modules=mypycify(paths, group_name={group!r}, target_dir=tmp, opt_level={opt!r}),
    script_args=["build_ext", "--inplace", "--build-temp", tmp, "--build-lib", tmp],
)
"""


def compiler_missing() -> str | None:
    """Why the build cannot run here (no mypyc, no C compiler), or None."""
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return "mypyc is not installed (pip install 'mypy>=1.13')"
    if not (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")):
        return "no C compiler found (cc, gcc, or $CC)"
    return None


def _built_files() -> list[str]:
    root = os.path.dirname(os.path.dirname(_native.MANIFEST))
    found = glob.glob(os.path.join(root, f"{GROUP}__mypyc*.so"))
    for module in _native.HOT_MODULES:
        stem = _native.source_path(module)[: -len(".py")]
        found += glob.glob(stem + ".*.so") + glob.glob(stem + ".*.pyd")
    return found


def clean() -> int:
    """Remove the extension modules and the manifest; the number of files removed."""
    files = _built_files()
    if os.path.exists(_native.MANIFEST):
        files.append(_native.MANIFEST)
    for path in files:
        os.remove(path)
    return len(files)


def build(*, quiet: bool = True, opt_level: str = "3") -> None:
    """Compile the hot modules in place and record their sources in the manifest.

    ``opt_level`` is the C compiler's optimisation level: ``"3"`` for speed (the
    default); ``"0"`` compiles several times faster and gives the same results, which
    is what the test of the build uses.
    """
    if opt_level not in OPT_LEVELS:
        raise ValueError(f"opt_level {opt_level!r}: expected one of {', '.join(OPT_LEVELS)}")
    reason = compiler_missing()
    if reason is not None:
        raise RuntimeError(reason)
    clean()  # never leave half of an old build beside a new one
    root = os.path.dirname(os.path.dirname(_native.MANIFEST))
    paths = [os.path.relpath(_native.source_path(m), root) for m in _native.HOT_MODULES]
    with tempfile.TemporaryDirectory(prefix="tierwise-build-") as tmp:
        setup = _SETUP.format(group=GROUP, opt=opt_level)
        cmd = [sys.executable, "-c", setup, *paths, tmp]
        env = {**os.environ, "MYPY_CACHE_DIR": os.path.join(tmp, "mypy")}  # not 13 MB in root
        out = subprocess.run(cmd, cwd=root, env=env, capture_output=quiet, text=True, check=False)
    if out.returncode != 0:
        tail = (out.stderr or out.stdout or "").strip().splitlines()[-3:] if quiet else []
        clean()
        raise RuntimeError("mypyc build failed: " + " | ".join(tail))
    _native.write_manifest()


def active() -> bool:
    """Whether the hot path (the simulator's and the relay's) runs compiled in this process."""
    import tierwise.proto.relay.connection as relay
    import tierwise.proto.tcp as tcp

    return not any((m.__file__ or "").endswith(".py") for m in (tcp, relay))


def status() -> str:
    """Which hot path runs: compiled, or pure Python and why."""
    if not os.path.exists(_native.MANIFEST):
        return "pure Python (not built)"
    if _native._wants_pure():
        return f"pure Python ({_native.ENV} is set; a build is present)"
    changed = _native.stale()
    if changed:
        return f"pure Python (stale build: {', '.join(changed)} changed; rebuild)"
    return "compiled (mypyc)"


def main(argv: list[str] | None = None) -> int:
    """The command line: build, ``--clean`` or ``--status``."""
    ap = argparse.ArgumentParser(prog="python -m tierwise.sim.build", description=__doc__)
    ap.add_argument("--clean", action="store_true", help="remove the compiled modules")
    ap.add_argument("--status", action="store_true", help="say which path runs")
    ap.add_argument("--verbose", action="store_true", help="show the compiler's output")
    ap.add_argument(
        "--opt-level",
        choices=OPT_LEVELS,
        default="3",
        help="the C compiler's -O level (default 3; 0 builds faster, runs slower)",
    )
    args = ap.parse_args(argv)
    if args.status:
        print(status())
        return 0
    if args.clean:
        print(f"removed {clean()} file(s); the simulator and the relay run pure Python")
        return 0
    try:
        build(quiet=not args.verbose, opt_level=args.opt_level)
    except RuntimeError as exc:
        print(f"tierwise.sim.build: {exc}", file=sys.stderr)
        return 2
    print(f"compiled {len(_native.HOT_MODULES)} modules with mypyc: {status()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
