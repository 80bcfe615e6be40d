"""A sweep's rows as Arrow tables: one row per grid point and site, written in chunks.

Columns: ``point``, one column per varied key (SI values, or the text for a
non-numeric key), ``site``, ``time_s``, ``time_p99_s``, ``energy_j`` (the upper end
of a per-token range), ``energy_low_j``, where the time goes (``prepare_s``,
``client_s``, ``model_s``, ``upload_s``, ``download_s``, ``propagation_s`` and
``other_s``: handshakes, recovery, a simulated network), ``feasible``, ``meets_deadline`` (null
without a deadline), ``cost`` (0 without prices), ``pareto`` (on the time–energy–cost
front), ``chosen``. The schema metadata carries the tierwise version,
the scenario's SHA-256, the command and the axes, so a result can be reproduced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tierwise.errors import ScenarioError
from tierwise.outfile import partial_path, target_of
from tierwise.plan.sweep import PARTS, Block, SweepRun

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = [
    "block_table",
    "metadata",
    "open_sweep",
    "require",
    "sweep",
    "tables",
    "task_points",
    "write_tables",
]


def metadata(run: SweepRun, command: str) -> dict[str, str]:
    """What reproduces the sweep: version, scenario hash, command, axes and notes."""
    from importlib.metadata import version

    axes = [{"key": a.key, "spec": a.spec, "values": len(a.texts)} for a in run.axes]
    return {
        "tierwise_version": version("tierwise"),
        "scenario_sha256": hashlib.sha256(run.base.digest).hexdigest(),
        "scenario": run.base.source,
        "set": json.dumps(list(run.base.overrides)),
        "command": command,
        "axes": json.dumps(axes),
        "sites": json.dumps(run.sites()),
        "notes": json.dumps(run.notes),
        "dictionary": json.dumps(["site", *(a.key for a in run.axes)]),
    }


def block_table(run: SweepRun, block: Block, sites: list[str]) -> pa.Table:
    """One Arrow table for ``block``: rows point-major, sites in scenario order."""
    import pyarrow as pa

    n_sites, m = block.time_s.shape
    flat = lambda a: np.ascontiguousarray(a.T).reshape(-1)  # noqa: E731
    index = np.unravel_index(block.points, run.shape) if run.axes else ()
    columns: dict[str, Any] = {"point": np.repeat(block.points.astype(np.int64), n_sites)}
    for k, axis in enumerate(run.axes):
        values = axis.array()[index[k]]
        columns[axis.key] = np.repeat(values if axis.numeric else values.astype(str), n_sites)
    codes = np.tile(np.arange(n_sites, dtype=np.int32), m)
    columns["site"] = pa.DictionaryArray.from_arrays(codes, pa.array(sites))
    for name in ("time_s", "time_p99_s", "energy_j", "energy_low_j"):
        columns[name] = flat(getattr(block, name))
    columns["feasible"] = flat(block.feasible)
    meets = flat(block.meets_deadline)
    columns["meets_deadline"] = pa.array(meets == 1, mask=np.isnan(meets))
    for part in PARTS:
        columns[f"{part}_s"] = flat(block.parts[part])
    columns["other_s"] = columns["time_s"] - sum(columns[f"{p}_s"] for p in PARTS)
    columns["cost"] = flat(block.cost)
    columns["pareto"] = flat(block.pareto)
    columns["chosen"] = flat(block.chosen)
    names = list(columns)
    arrays = [c if isinstance(c, pa.Array) else pa.array(c) for c in columns.values()]
    return pa.Table.from_arrays(arrays, names=names)


def require(*modules: str) -> None:
    """Fail with the install command when the optional ``sweep`` extra is missing."""
    import importlib.util

    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise ScenarioError(
                f"tierwise sweep needs {module}: pip install 'tierwise[sweep]'", source="sweep"
            )


def tables(run: SweepRun, progress: bool = False) -> Iterator[pa.Table]:
    """The sweep's tables chunk by chunk, with a rich progress bar on stderr if asked."""
    require("pyarrow")
    sites = run.sites()
    if not progress:
        for block in run.blocks():
            yield block_table(run, block, sites)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    console = Console(stderr=True)
    if not (console.is_terminal or console.is_jupyter):  # a pipe or file: no bar, no blank line
        for block in run.blocks():
            yield block_table(run, block, sites)
        return
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("sweep points", total=run.size)
        for block in run.blocks(lambda n: bar.advance(task, n)):
            yield block_table(run, block, sites)


def write_tables(
    chunks: Iterable[pa.Table], meta: dict[str, str], parquet: Path | None, csv: Path | None
) -> int:
    """Stream ``chunks`` into a Parquet and/or CSV file; return the rows written.

    Rows go to hidden temporary files beside the targets, which take the targets' names
    only once every chunk is in: a sweep that fails or is interrupted half-way (a lost
    Dask scheduler, Ctrl-C, a full disk) leaves no file with part of the rows, and an
    existing file of that name untouched.
    """
    import pyarrow.parquet as pq

    writers: list[Any] = []
    staged: list[tuple[Path, Path]] = []  # (temporary, target)
    rows = 0
    option = "--out"
    done = False
    try:
        for table in chunks:
            table = table.replace_schema_metadata(meta)
            if not writers:
                if parquet is not None:
                    # dictionary pages only where values repeat (sites, grid axes)
                    repeat = [n for n in table.column_names if n in meta.get("dictionary", "")]
                    staged.append((partial_path(target_of(parquet)), target_of(parquet)))
                    writers.append(
                        pq.ParquetWriter(str(staged[-1][0]), table.schema, use_dictionary=repeat)
                    )
                if csv is not None:
                    option = "--csv"
                    staged.append((partial_path(target_of(csv)), target_of(csv)))
                    writers.append(_CsvWriter(staged[-1][0], table, meta))
                option = "--out" if parquet is not None else "--csv"
            for w in writers:
                w.write_table(
                    table if isinstance(w, pq.ParquetWriter) else table.cast(_plain(table.schema))
                )
            rows += table.num_rows
        for w in writers:
            w.close()
        writers = []
        for tmp, target in staged:
            os.replace(tmp, target)
        done = True
    except OSError as exc:
        raise ScenarioError(
            f"cannot write the sweep: {exc.strerror or exc}", source=option
        ) from exc
    finally:
        for w in writers:
            with contextlib.suppress(Exception):
                w.close()
        if not done:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)
    return rows


class _CsvWriter:
    """A CSV writer whose file starts with the metadata as ``# key: value`` lines, so the
    rows carry what reproduces them (``pandas.read_csv(path, comment="#")`` skips them)."""

    KEYS = ("tierwise_version", "scenario_sha256", "scenario", "set", "command", "axes")

    def __init__(self, path: Path, table: pa.Table, meta: dict[str, str]) -> None:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        self.sink = pa.OSFile(str(path), "wb")
        for key in self.KEYS:
            line = " ".join(meta.get(key, "").split())  # one line, whatever the command held
            self.sink.write(f"# {key}: {line}\n".encode())
        self.writer = pacsv.CSVWriter(self.sink, _plain(table.schema))

    def write_table(self, table: pa.Table) -> None:
        self.writer.write_table(table)

    def close(self) -> None:
        self.writer.close()
        self.sink.close()


def _plain(schema: pa.Schema) -> pa.Schema:
    """The schema with dictionary columns as plain strings (CSV has no dictionaries)."""
    import pyarrow as pa

    fields = [
        pa.field(f.name, pa.string()) if pa.types.is_dictionary(f.type) else f for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def sweep(
    path: str | Path,
    vary: Iterable[str] | dict[str, str],
    overrides: Iterable[str] = (),
    catalog_files: Iterable[str | Path] = (),
    *,
    progress: bool = False,
    client: Any = None,
) -> pd.DataFrame:
    """Plan ``path`` over the grid ``vary`` and return one row per point and site.

    ``vary`` is ``["site.cloud.uplink=1..100 Mbit/s:log:60", ...]`` or a dict
    ``{"task.rounds": "5,10,20,40"}``. The frame's ``attrs`` hold the metadata.
    Points without a vectorised form run on ``client`` (a ``distributed.Client``)
    when one is given.
    """
    require("pandas")
    import pyarrow as pa

    run = open_sweep(path, vary, overrides, catalog_files)
    run.client = client
    if client is not None:
        run.point_chunk = task_points(run, client)
    parts = list(tables(run, progress=progress))
    frame = pa.concat_tables(parts).to_pandas() if parts else None
    assert frame is not None
    frame.attrs.update(metadata(run, f"tierwise.sweep({str(path)!r}, {list(_items(vary))!r})"))
    return frame


def _items(vary: Iterable[str] | dict[str, str]) -> list[str]:
    if isinstance(vary, dict):
        return [f"{k}={v}" for k, v in vary.items()]
    return list(vary)


def open_sweep(
    path: str | Path,
    vary: Iterable[str] | dict[str, str],
    overrides: Iterable[str] = (),
    catalog_files: Iterable[str | Path] = (),
) -> SweepRun:
    """Load, check every axis value, and return the run (nothing evaluated yet)."""
    from tierwise.catalog import load_catalog
    from tierwise.plan.grid import Base, parse_axes

    base = Base.load(path, overrides)
    axes = parse_axes(base, _items(vary))
    run = SweepRun(base, axes, load_catalog(list(catalog_files)))
    run.check_bounds()
    return run


def task_points(run: SweepRun, client: Any) -> int:
    """Points per Dask task: about four tasks per worker, at most 64 points each."""
    workers = max(1, len(client.scheduler_info().get("workers", {})))
    return max(1, min(64, run.size // (4 * workers) or 1))
