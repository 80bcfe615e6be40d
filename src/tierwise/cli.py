"""The ``tierwise`` command line (typer).

Any :class:`~tierwise.errors.TierwiseError` becomes one line on stderr and exit
status 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tierwise.console import WholeConsole, WholeStdout
from tierwise.errors import ScenarioError, TierwiseError, number_slip, shown
from tierwise.lab.cli.app import lab_app  # light: experiment, service and path load per command
from tierwise.relay.cli import relay_app  # light: the relay loads per command
from tierwise.route.cli import route_app  # light: the gateway loads when it runs


def _value_hint(param: Any, ctx: Any) -> str:
    """What a parameter's help shows after its name: its metavar if it has one, a path as
    ``PATH``, a choice's choices as ``a|b``, a flag nothing, and any other option's value
    by the option's name (``--uplink UPLINK``, argparse's rule), never typer's ``<bool>``,
    ``<str>`` or ``<list[str]>`` placeholders."""
    if param.metavar is not None:
        return str(param.metavar)
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    desc = param.type_descriptor
    if desc.is_path:
        return "PATH"
    if desc.is_choice:
        return typer.core._TyperParameter.display_type(param, ctx).strip("<>")
    if isinstance(param, typer.core.TyperArgument):
        return ""  # the argument's own name stands beside it
    flag = max(param.opts, key=len).lstrip("-")
    return flag.replace("-", "_").upper()


# One rule for every command's help, the lab's, relay's and route's included.
typer.core.TyperOption.display_type_rich = _value_hint  # type: ignore[method-assign]
typer.core.TyperArgument.display_type_rich = _value_hint  # type: ignore[method-assign]

app = typer.Typer(
    help="Decide where an AI task runs — device, edge or cloud — by the time the whole task takes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(lab_app, name="lab")
app.add_typer(route_app, name="route")
app.add_typer(relay_app, name="relay")
out = WholeConsole()

CatalogOpt = Annotated[
    list[Path] | None,
    typer.Option("--catalog", help="Extra catalog TOML (repeatable); overrides bundled ids."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (SI units) instead of a table.")]


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def calc(ctx: typer.Context, name: Annotated[str | None, typer.Argument()] = None) -> None:
    """Evaluate one closed-form model: tierwise calc NAME --param value ... [--json]."""
    from tierwise.calc import REGISTRY
    from tierwise.report.calc_view import calc_help, calc_list, render_calc

    args = list(ctx.args)
    if name in (None, "--help", "-h"):
        calc_list(out, REGISTRY)
        return
    if name not in REGISTRY:
        raise ScenarioError(
            f"unknown model {name!r}; `tierwise calc --help` lists: {', '.join(sorted(REGISTRY))}",
            source="calc",
        )
    entry = REGISTRY[name]
    if "--help" in args or "-h" in args:
        calc_help(out, entry)
        return
    as_json = "--json" in args
    raw = _pairs([a for a in args if a != "--json"])
    render_calc(out, entry, entry.run(raw), as_json=as_json)


def _pairs(args: list[str]) -> dict[str, str]:
    raw: dict[str, str] = {}
    i = 0
    while i < len(args):
        flag = args[i]
        if not flag.startswith("--"):
            raise ScenarioError(f"expected --name value, got {shown(flag)}", source="calc")
        key, eq, value = flag[2:].partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise ScenarioError(f"{flag} needs a value", source="calc")
            value = args[i + 1]
            i += 1
        raw[key.replace("-", "_")] = value
        i += 1
    return raw


@app.command()
def plan(
    file: Annotated[
        Path | None, typer.Argument(help="Scenario TOML; omit for the §12.5 example.")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a key: --set site.cloud.uplink='3.5 Mbit/s'."),
    ] = None,
    extra: CatalogOpt = None,
    as_json: JsonOpt = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Also save figures (PNG and SVG) in this folder.")
    ] = None,
    example: Annotated[
        str | None,
        typer.Option("--example", help="Plan a bundled example by name instead of a FILE."),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option("--baseline", help="Report each option's saving against this site."),
    ] = None,
    objective: Annotated[
        str | None,
        typer.Option("--objective", help="energy, time, cost or pareto (decision.objective)."),
    ] = None,
    page: Annotated[
        Path | None, typer.Option("--html", help="Also write an interactive page (HTML).")
    ] = None,
) -> None:
    """Evaluate a scenario on every site and choose where it runs."""
    from tierwise.plan.planner import plan_file
    from tierwise.report.jsonout import dumps
    from tierwise.report.plan_view import render_plan
    from tierwise.scenario.loader import bundled_example

    if example is not None and file is not None:
        raise ScenarioError("give a FILE or --example, not both", source="command line")
    bundled = file is None and example is None
    file = bundled_example("deployment" if example is None else example) if file is None else file
    overrides = [  # an empty --objective '' is refused like any other value, not ignored
        *([f"decision.objective={objective}"] if objective is not None else []),
        *(set_ or []),
        *([f"decision.baseline={baseline}"] if baseline is not None else []),
    ]
    with _threshold_bar() as step:  # fails before anything is printed
        result = plan_file(file, overrides, extra or [], progress=step)
    _warn(result.warnings)
    saved = []
    if page is not None:
        from tierwise.report.html import plan_page

        _write_text(page, plan_page(result))
        saved.append(page)
    if plot is not None:
        from tierwise.report.figures import plan_figures

        try:
            saved += plan_figures(result, plot)
        except OSError as exc:
            raise ScenarioError(
                f"cannot write figures to {plot}: {exc.strerror or exc}", source="--plot"
            ) from exc
    if as_json:
        print(dumps(result.to_dict()))
        return
    if bundled:
        out.print(
            f"[dim]No file given: planning the bundled §12.5 deployment example "
            f"({escape(str(file))}).[/]",
            soft_wrap=True,
        )
    if saved:
        out.print(f"[dim]figures: {escape(', '.join(str(p) for p in saved))}[/]")
    render_plan(out, result)


PLAN_BAR_SITES = 100  # fewer sites: the threshold search takes well under a second


@contextlib.contextmanager
def _threshold_bar() -> Iterator[Callable[[int, int], None]]:
    """A transient bar on stderr for a threshold search over ``PLAN_BAR_SITES`` or more.

    Only on a terminal: elsewhere rich cannot redraw and would leave a blank line.
    """
    started: list[Any] = []  # [Progress, task id] once started
    console = Console(stderr=True)

    def step(done: int, total: int) -> None:
        if total < PLAN_BAR_SITES or not console.is_terminal:
            return
        if not started:
            from rich.progress import Progress

            bar = Progress(console=console, transient=True)
            bar.start()
            started.extend([bar, bar.add_task(f"thresholds of {total:,} sites", total=total)])
        started[0].update(started[1], completed=done)

    try:
        yield step
    finally:
        if started:
            started[0].stop()


catalog_app = typer.Typer(
    help="List the hardware, models and quantisation formats known, with each fact's source.",
    invoke_without_command=True,
)
app.add_typer(catalog_app, name="catalog")


def _warn(lines: list[str] | tuple[str, ...]) -> None:
    for line in lines:
        Console(stderr=True).print(f"[yellow]warning:[/] {escape(line)}", soft_wrap=True)


@catalog_app.callback()
def catalog(ctx: typer.Context, extra: CatalogOpt = None, as_json: JsonOpt = False) -> None:
    """List the hardware, models and quantisation formats known, with each fact's source."""
    if ctx.invoked_subcommand is not None:
        return
    from tierwise.catalog import load_catalog
    from tierwise.model.derive import complete_catalog
    from tierwise.report.catalog_view import render_catalog

    cat = complete_catalog(load_catalog(extra or []))
    render_catalog(out, cat, as_json=as_json)
    _warn(cat.warnings)


@catalog_app.command("add-model")
def catalog_add_model(
    config: Annotated[Path, typer.Argument(help="A Hugging Face config.json.")],
    model_id: Annotated[str, typer.Option("--id", help="The new model's catalog id.")],
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Append the entry to this catalog TOML.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Derive a model's catalog numbers from its config.json and print (or append) its entry."""
    from tierwise.catalog import load_catalog
    from tierwise.report.architecture_view import model_entry
    from tierwise.report.jsonout import dumps

    text, summary = model_entry(model_id, config, load_catalog(), catalog_file=out_file)
    if out_file is not None:
        _append_entry(out_file, model_id, text)
    if as_json:
        print(dumps({"id": model_id, **summary}))
    else:
        print(text, end="")  # TOML to keep or pipe: never wrapped at the screen's width


def _append_entry(path: Path, model_id: str, text: str) -> None:

    from tierwise.tomlfile import parse_toml, read_text

    old = read_text(path) if path.exists() else ""
    model = parse_toml(old, str(path)).get("model", {})
    if isinstance(model, dict) and model_id in model:
        raise ScenarioError(f"model.{model_id} already exists", source=str(path))
    from tierwise.outfile import write_text

    try:  # the whole catalog rewritten and renamed over the old one: never half an entry
        write_text(path, old + ("\n" if old and not old.endswith("\n\n") else "") + text)
    except OSError as exc:
        raise ScenarioError(f"cannot write: {exc.strerror}", source=str(path)) from exc


@app.command()
def reproduce(
    section: Annotated[
        str | None, typer.Option("--section", help="Only this section: 12.3, 12.5.2, 12-10.")
    ] = None,
    as_json: JsonOpt = False,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Also write a self-contained HTML report.")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Also redraw the chapter's figures here.")
    ] = None,
    live: Annotated[
        bool, typer.Option("--lab", help="Add §12.3.5's measured rows from a live lab run (root).")
    ] = False,
) -> None:
    """Recompute every number of the chapter that follows from its inputs, and compare."""
    from rich.progress import Progress

    from tierwise.report.jsonout import dumps
    from tierwise.reproduce import render
    from tierwise.reproduce.run import all_cases, matches_section, run_cases, unreproducible

    known = section is None or (
        section.strip() != "" and any(matches_section(c.section, section) for c in all_cases())
    )
    if not known:
        raise ScenarioError(f"no printed numbers in section {section!r}", source="--section")
    err = Console(stderr=True)  # a bar only on a terminal: elsewhere it leaves a blank line
    with Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("recomputing the chapter", total=None)
        results = run_cases(
            section, lambda done, total: bar.update(task, completed=done, total=total)
        )
    if live:
        from tierwise.reproduce.live import LIVE_SECTION, live_results

        if matches_section(LIVE_SECTION, section):
            with Progress(console=Console(stderr=True), transient=True) as bar:
                bar.add_task("running §12.3.5 on the lab (real kernel TCP)", total=None)
                results += live_results()
    skipped = list(unreproducible(section))
    _reproduce_files(results, skipped, html_out, plot)
    if as_json:
        print(dumps(render.to_dict(results, skipped)))
    else:
        render.render_table(out, results, skipped)
    if not all(r.agrees for r in results):
        raise typer.Exit(1)


def _reproduce_files(results, skipped, html_out: Path | None, plot: Path | None) -> None:
    from tierwise.outfile import write_text
    from tierwise.reproduce import render

    try:
        if html_out is not None:
            write_text(html_out, render.render_html(results, skipped))
        if plot is not None:
            render.chapter_figures(plot)
    except OSError as exc:
        where = "--html" if html_out is not None and not plot else "--plot/--html"
        raise ScenarioError(f"cannot write: {exc.strerror or exc}", source=where) from exc


def _fail(message: str) -> NoReturn:
    """Print ``message`` as one line on stderr (no markup, no wrapping) and exit 2."""
    text = " ".join(message.splitlines())  # one line whatever the message holds
    try:
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True
        )
    except (OSError, ValueError):  # stderr full or closed: the status still says it
        pass
    sys.exit(2)


def _option_slip(exc: Exception, args: list[str]) -> str | None:
    """'--loss 14%' or '--max-sessions true': click's 'not a valid number', said with the
    number meant ('write 0.14 for 14 %'), for every int and float option of every command."""
    param = getattr(exc, "param", None)
    for opt in getattr(param, "opts", None) or ():
        for i, arg in enumerate(args):
            if arg == opt and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(opt + "="):
                value = arg[len(opt) + 1 :]
            else:
                continue
            if value.strip().lower() in ("true", "false"):
                return f"Invalid value for '{opt}': expected a number, got {value.strip()!r}"
            slip = number_slip(value)
            if slip is not None:
                return f"Invalid value for '{opt}': {slip}"
    return None


def _click_exceptions() -> tuple[type[Exception], ...]:
    """Click's exception root, and typer's vendored copy of it where typer has one."""
    found = []
    for module in ("click.exceptions", "typer._click.exceptions"):
        try:
            found.append(importlib.import_module(module).ClickException)
        except (ImportError, AttributeError):
            pass
    return tuple(found)


@app.command()
def sim(
    file: Annotated[
        Path | None, typer.Argument(help="Sim TOML; omit for the §12.3.2 request.")
    ] = None,
    example: Annotated[str | None, typer.Option("--example", help="A bundled sim file.")] = None,
    runs: Annotated[
        int | None,
        # the sim file's own cap on run.runs (sim/scenario.py), kept in step by a test
        typer.Option("--runs", min=1, max=100_000, help="Seeds to run (at most 100,000)."),
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, max=2**63 - 1, help="First seed (≥ 0).")
    ] = None,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Write the first run's per-packet trace (CSV).")
    ] = None,
    max_packets: Annotated[
        int,
        typer.Option(
            "--max-packets",
            min=1,
            help="Work budget: refuse a sim over this many data packets in all runs.",
        ),
    ] = 5_000_000,
    as_json: JsonOpt = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Also save figures (PNG and SVG) here: [[flow]] files."),
    ] = None,
) -> None:
    """Simulate a transfer packet by packet (sans-IO endpoints over simulated links)."""
    from tierwise.report.jsonout import dumps
    from tierwise.report.sim_view import render_sim
    from tierwise.sim.run import run_sim_file
    from tierwise.sim.scenario import load_sim, sim_example

    if example is not None and file is not None:
        raise ScenarioError("give a FILE or --example, not both", source="command line")
    bundled = file is None and example is None
    path = file if file is not None else sim_example("sim-photo" if example is None else example)
    sf = load_sim(path)
    changes = {k: v for k, v in (("runs", runs), ("seed", seed)) if v is not None}
    if changes:
        sf = sf.model_copy(update={"run": sf.run.model_copy(update=changes)})
    if trace is not None and not trace.resolve().parent.is_dir():
        raise ScenarioError("no such directory for the trace", source=str(trace))
    if plot is not None and sf.workload is not None:
        raise ScenarioError(
            "--plot draws competing flows; this sim file has a [workload], not [[flow]] tables",
            source="--plot",
        )
    result = run_sim_file(
        sf,
        trace=trace is not None,
        progress=not as_json,
        max_packets=max_packets,
        series=plot is not None,
    )
    saved = _sim_plot(result, plot) if plot is not None else []
    if trace is not None:
        from tierwise.outfile import staged

        try:
            with staged(trace) as partial:
                result["trace"].write_csv(str(partial))
        except OSError as exc:
            raise ScenarioError(
                f"cannot write the trace: {exc.strerror or exc}", source=str(trace)
            ) from exc
    result.pop("trace")
    if as_json:
        print(dumps(result))
        return
    if bundled:
        out.print(
            f"[dim]No file given: simulating the bundled §12.3.2 request ({escape(str(path))}).[/]",
            soft_wrap=True,
        )
    render_sim(out, result, str(trace) if trace else None)
    for path in saved:
        out.print(f"[dim]figure: {escape(str(path))}[/]", soft_wrap=True)


def _sim_plot(result: dict[str, Any], folder: Path) -> list[Path]:
    """Save a flows run's figures in ``folder`` and drop the time series from the result."""
    from tierwise.report.sim_figures import sim_figures

    try:
        saved = sim_figures(result, folder)
    except OSError as exc:
        raise ScenarioError(
            f"cannot write figures to {folder}: {exc.strerror or exc}", source="--plot"
        ) from exc
    result["first_run"].pop("series", None)
    return saved


MAX_WORKERS = 64  # local Dask worker processes: more only queue for the same cores


@app.command()
def sweep(
    file: Annotated[Path, typer.Argument(help="Scenario TOML.")],
    vary: Annotated[
        list[str],
        typer.Option(
            "--vary",
            help="Vary a key: --vary site.cloud.uplink='1..100 Mbit/s:log:60', "
            "--vary site.cloud.rtt='20..300 ms:40', --vary task.rounds=5,10,20,40.",
        ),
    ],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a key at every point.")
    ] = None,
    extra: CatalogOpt = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write one row per point and site (Parquet).")
    ] = None,
    csv: Annotated[Path | None, typer.Option("--csv", help="Also write the rows as CSV.")] = None,
    runs: Annotated[
        int | None,
        # the schema's cap on a site's runs (scenario/schema.py)
        typer.Option("--runs", min=1, max=10_000, help='Seeds per point of each "sim" site.'),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", help="Dask scheduler for simulated points (tcp://host:8786)."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", min=1, max=MAX_WORKERS, help="Local Dask workers (default: cores)."
        ),
    ] = None,
    # the defaults are tierwise.plan.distributed's CONNECT_TIMEOUT_S and WORKER_WAIT_S
    connect_timeout: Annotated[
        float | None,
        typer.Option(
            "--connect-timeout",
            min=0.1,
            max=3600.0,
            help="Seconds a --scheduler has to answer (default 5).",
        ),
    ] = None,
    worker_timeout: Annotated[
        float | None,
        typer.Option(
            "--worker-timeout",
            min=0.1,
            max=3600.0,
            help="Seconds to wait for a worker to join a --scheduler that has none (default 10).",
        ),
    ] = None,
    page: Annotated[
        Path | None, typer.Option("--html", help="Write the interactive page (one HTML file).")
    ] = None,
    map_keys: Annotated[
        str | None,
        typer.Option("--map", help="The page's choice map axes: two varied keys, KEY,KEY."),
    ] = None,
) -> None:
    """Plan a scenario over a grid of overrides: where does each site win?"""
    import contextlib

    from tierwise.plan.distributed import dask_client, needs_dask
    from tierwise.plan.grid import Base
    from tierwise.plan.sweep_table import open_sweep, task_points

    keys = [k.strip() for k in map_keys.split(",")] if map_keys is not None else None
    if scheduler is not None and workers is not None:
        raise ScenarioError(
            "sizes a local cluster; --scheduler names an existing one: give one of them",
            source="--workers",
        )
    for option, value in (
        ("--connect-timeout", connect_timeout),
        ("--worker-timeout", worker_timeout),
    ):
        if value is not None and scheduler is None:
            raise ScenarioError(
                "applies to an existing cluster only: give --scheduler too", source=option
            )
    for path, option, suffixes in (
        (out_file, "--out", (".parquet", ".pq")),
        (csv, "--csv", (".csv",)),
        (page, "--html", (".html", ".htm")),
    ):
        _check_output(path, option, suffixes)
    set_ = list(set_ or [])
    sims: list[str] = []
    if runs is not None:
        sims = [s.name for s in Base.load(file, set_).scenario().site if s.evaluate == "sim"]
        set_ += [f"site.{name}.runs={runs}" for name in sims]
    run = open_sweep(file, vary, set_, extra or [])  # every value checked first
    if runs is not None and not sims:
        run.notes.append('--runs has no effect: no site has evaluate = "sim"')
    if page is not None:
        from tierwise.report.html import map_axes

        map_axes(run, keys)
    elif keys is not None:
        raise ScenarioError("it chooses the page's map axes: give --html too", source="--map")
    use_dask = scheduler is not None or needs_dask(run.base.scenario())
    given = {"connect_timeout_s": connect_timeout, "worker_wait_s": worker_timeout}
    waits = {name: value for name, value in given.items() if value is not None}
    client_cm = dask_client(scheduler, workers, **waits) if use_dask else contextlib.nullcontext()
    with client_cm as client:
        run.client = client
        if client is not None:
            run.point_chunk = task_points(run, client)
        _sweep_out(run, out_file, csv, page, keys)


def _check_output(path: Path | None, option: str, suffixes: tuple[str, ...]) -> None:
    """Refuse, before any work, an output with the wrong suffix or in no writable directory."""
    if path is None:
        return
    if path.suffix.lower() not in suffixes:
        raise ScenarioError(
            f"expected a file name ending {' or '.join(suffixes)}, got {str(path)[-80:]!r}",
            source=option,
        )
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK) or path.is_dir():
        where = str(path)[-80:]
        raise ScenarioError(f"cannot write {where!r}: no writable directory", source=option)


def _sweep_out(
    run: Any,
    out_file: Path | None,
    csv: Path | None,
    page: Path | None,
    keys: list[str] | None = None,
) -> None:
    """Stream the sweep's rows to the files asked for, then print the summary."""
    from tierwise.plan.sweep_table import metadata, require, tables, write_tables

    # before any point runs: the files and the page need the `sweep` extra
    require("pyarrow", *(("pandas", "plotly") if page is not None else ()))
    from tierwise.report.html import MAX_PAGE_POINTS, sweep_page
    from tierwise.report.sweep_view import SweepTally, render_sweep

    tally = SweepTally()
    kept: list[Any] = []
    if page is not None and run.size > MAX_PAGE_POINTS:
        sweep_page(None, run)  # refuses, before any work, with the limit

    def counted() -> Any:
        for table in tables(run, progress=True):
            tally.add(table)
            if page is not None:
                kept.append(table)
            yield table

    import shlex

    meta = metadata(run, shlex.join(["tierwise", *sys.argv[1:]]))  # pastes back into a shell
    write_tables(counted(), meta, out_file, csv)
    if page is not None:
        import pyarrow as pa

        _write_text(
            page, sweep_page(pa.concat_tables(kept).to_pandas(), run, keys=keys, progress=True)
        )
    written = [str(p) for p in (out_file, csv, page) if p is not None]
    render_sweep(out, tally, run.notes, written)


def _write_text(path: Path, text: str) -> None:
    from tierwise.outfile import write_text

    try:
        write_text(path, text)
    except OSError as exc:
        raise ScenarioError(f"cannot write: {exc.strerror or exc}", source=str(path)) from exc


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every ``with``/``finally`` (a lab path's
    namespaces, its emulator) unwinds before the process exits."""


_TERMINATED: list[int] = []  # typer returns 130 for any KeyboardInterrupt; this tells them apart


def _on_sigterm(signum: int, frame: object) -> None:
    if _TERMINATED:  # a second SIGTERM while the first unwinds: already on the way out
        return
    _TERMINATED.append(signum)
    raise Terminated


def _on_unraisable(unraisable: Any) -> None:
    """A signal's exception raised inside a finaliser or a weakref callback (an import's
    module lock has one) is lost there: the interpreter prints it as "ignored" and carries
    on. Send the signal again a moment later, from a thread, so that it is raised where it
    unwinds the program (sent from here, its handler would run at once and be lost again;
    so would one that waited here for a thread to start)."""
    exc = unraisable.exc_value
    if not isinstance(exc, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)
        return
    import _thread

    signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
    _TERMINATED.clear()
    _thread.start_new_thread(_signal_later, (signum,))


def _signal_later(signum: int) -> None:
    import time

    time.sleep(0.005)
    os.kill(os.getpid(), signum)


def install_signals() -> None:
    """SIGTERM unwinds like Ctrl-C; neither is lost in a finaliser or weakref callback."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    sys.unraisablehook = _on_unraisable


def _interrupted() -> NoReturn:
    """Say why we stop, on stderr, and exit 128 + the signal."""
    if _TERMINATED:
        Console(stderr=True).print("terminated")
        sys.exit(128 + signal.SIGTERM)
    Console(stderr=True).print("aborted")
    sys.exit(130)


def main() -> None:
    """Entry point: run the app, turning user errors into one line and exit 2.

    A report's output is held in memory and written whole when the command has
    finished (tierwise.console): an error drops it, an unwritable stdout is one line.
    Ctrl-C exits 130 and SIGTERM 143 (128 + the signal), each after cleaning up.
    """
    install_signals()
    whole = None if _writes_live(sys.argv[1:]) else WholeStdout.install()
    try:
        _run()
    except SystemExit as exc:
        if whole is not None:
            _finish(whole, exc.code)
        raise
    finally:
        if whole is not None and sys.stdout is whole:  # an exception that is a bug
            whole.discard()


def _finish(whole: WholeStdout, code: Any) -> None:
    """Write the held output if the command finished (0, or 1: reproduce disagrees)."""
    if code not in (0, 1, None):
        whole.discard()  # an error or an interrupt: nothing half-printed
        return
    try:
        whole.write_whole()
    except TierwiseError as exc:
        _fail(str(exc))


def _command() -> Any:
    """The app as click runs it, every option refusing an empty value (``--plot ''``
    planned into the current folder, ``--objective ''`` chose the default)."""
    command = typer.main.get_command(app)
    _refuse_empty_values(command)
    return command


def _refuse_empty_values(command: Any) -> None:
    for param in command.params:
        if param.param_type_name == "option":
            param.process_value = _nonempty(param.process_value)
    for sub in getattr(command, "commands", {}).values():
        _refuse_empty_values(sub)


def _nonempty(process: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def checked(ctx: Any, value: Any) -> Any:
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            raise typer.BadParameter("an empty value: give one, or leave the option out")
        return process(ctx, value)

    return checked


def _write_now() -> None:
    """Write what stdout holds now (help that goes with exit status 2)."""
    if isinstance(sys.stdout, WholeStdout):
        try:
            sys.stdout.write_whole()
        except TierwiseError as exc:
            _fail(str(exc))


def _writes_live(args: list[str]) -> bool:
    """Servers print a banner and then a log as they run: their stdout is not held."""
    if "--help" in args or len(args) < 1:
        return False
    group, command = args[0], (args[1] if len(args) > 1 else "")
    if group == "relay":
        return command in ("gateway", "client")
    if group == "lab":
        return command == "model-server"
    return group == "route" and not {"decisions", "replay"} & set(args[1:])


def _run() -> NoReturn:
    """The app, its errors as one line: always ends in ``sys.exit``."""
    try:
        code = _command()(standalone_mode=False, prog_name="tierwise")
    except TierwiseError as exc:
        _fail(str(exc))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        _interrupted()
    except _click_exceptions() as exc:  # usage errors arrive here in non-standalone mode
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # the help text, as click prints it, kept although the status is 2
            _write_now()
            sys.exit(2)
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path if ctx is not None else "tierwise"
        why = _option_slip(exc, sys.argv[1:]) or exc.format_message()
        _fail(f"{command}: {why} (see {command} --help)")
    if code == 130 or _TERMINATED:  # typer's answer to KeyboardInterrupt
        _interrupted()
    sys.exit(code if isinstance(code, int) else 0)
