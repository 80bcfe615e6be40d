"""One way to make and save a figure: PNG and SVG, written whole, pyplot never touched.

Every figure of the project — a plan's breakdown, a lab timeline, the route world's
per-request times — is a :class:`matplotlib.figure.Figure` with an Agg canvas of its
own (:func:`new_figure`), so drawing selects no global backend and leaves nothing
registered with pyplot. :func:`save_figure` writes ``<folder>/<name>.png`` and
``.svg`` through :func:`tierwise.outfile.staged` (a failure leaves no half a file),
with a fixed SVG id salt and no creation date, so an unchanged figure re-saves
identically.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from tierwise.outfile import staged

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["DPI", "FORMATS", "new_figure", "save_figure"]

FORMATS = ("png", "svg")
DPI = 150  # PNG resolution; SVG is resolution-free


def new_figure(width_in: float, height_in: float, *, layout: str | None = "constrained") -> Figure:
    """A figure ``width_in`` × ``height_in`` inches on its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, folder: str | Path, name: str, *, dpi: int = DPI) -> list[Path]:
    """Write ``fig`` as ``folder/<name>.png`` and ``.svg``; the paths written.

    ``name`` is made safe for a file name (runs of other characters become ``_``);
    ``folder`` is created when missing.
    """
    import matplotlib

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    paths = [folder / f"{stem}.{fmt}" for fmt in FORMATS]
    with matplotlib.rc_context({"svg.hashsalt": "tierwise"}):
        for path in paths:
            with staged(path) as partial:  # a figure that fails leaves no half a PNG
                metadata = {"Date": None} if path.suffix == ".svg" else {}
                fig.savefig(partial, dpi=dpi, metadata=metadata)
    return paths
