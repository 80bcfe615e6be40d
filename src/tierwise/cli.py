"""The ``tierwise`` command line (typer).

Any :class:`~tierwise.errors.TierwiseError` becomes one line on stderr and exit
status 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import importlib
import signal
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tierwise.errors import ScenarioError, TierwiseError
from tierwise.lab.cli import lab_app  # light: experiment, service and path load per command
from tierwise.relay.cli import relay_app  # light: the relay loads per command

app = typer.Typer(
    help="Decide where an AI task runs — device, edge or cloud — by the time the whole task takes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(lab_app, name="lab")
app.add_typer(relay_app, name="relay")
out = Console()

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
            raise ScenarioError(f"expected --name value, got {flag!r}", source="calc")
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
) -> None:
    """Evaluate a scenario on every site and choose where it runs."""
    from tierwise.plan.planner import plan_file
    from tierwise.report.jsonout import dumps
    from tierwise.report.plan_view import render_plan
    from tierwise.scenario.loader import bundled_example

    if example is not None and file is not None:
        raise ScenarioError("give a FILE or --example, not both", source="command line")
    bundled = file is None and example is None
    file = bundled_example(example or "deployment") if file is None else file
    result = plan_file(file, set_ or [], extra or [])  # fails before anything is printed
    saved = []
    if plot is not None:
        from tierwise.report.figures import plan_figures

        try:
            saved = plan_figures(result, plot)
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


@app.command()
def catalog(extra: CatalogOpt = None, as_json: JsonOpt = False) -> None:
    """List the hardware, models and quantisation formats known, with each fact's source."""
    from tierwise.catalog import load_catalog
    from tierwise.report.catalog_view import render_catalog

    render_catalog(out, load_catalog(extra or []), as_json=as_json)


def _fail(message: str) -> NoReturn:
    """Print ``message`` as one line on stderr (no markup, no wrapping) and exit 2."""
    text = " ".join(message.splitlines())  # one line whatever the message holds
    Console(stderr=True).print(
        f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True
    )
    sys.exit(2)


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
    runs: Annotated[int | None, typer.Option("--runs", min=1, help="Seeds to run.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="First seed.")] = None,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Write the first run's per-packet trace (CSV).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate a transfer packet by packet (sans-IO endpoints over simulated links)."""
    from tierwise.report.jsonout import dumps
    from tierwise.report.sim_view import render_sim
    from tierwise.sim.run import run_sim_file
    from tierwise.sim.scenario import load_sim, sim_example

    if example is not None and file is not None:
        raise ScenarioError("give a FILE or --example, not both", source="command line")
    bundled = file is None and example is None
    path = file if file is not None else sim_example(example or "sim-photo")
    sf = load_sim(path)
    changes = {k: v for k, v in (("runs", runs), ("seed", seed)) if v is not None}
    if changes:
        sf = sf.model_copy(update={"run": sf.run.model_copy(update=changes)})
    result = run_sim_file(sf, trace=trace is not None, progress=not as_json)
    if trace is not None:
        try:
            result["trace"].write_csv(str(trace))
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


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every ``with``/``finally`` (a lab path's
    namespaces, its emulator) unwinds before the process exits."""


_TERMINATED: list[int] = []  # typer returns 130 for any KeyboardInterrupt; this tells them apart


def _on_sigterm(signum: int, frame: object) -> None:
    _TERMINATED.append(signum)
    raise Terminated


def _interrupted() -> NoReturn:
    """Say why we stop, on stderr, and exit 128 + the signal."""
    if _TERMINATED:
        Console(stderr=True).print("terminated")
        sys.exit(128 + signal.SIGTERM)
    Console(stderr=True).print("aborted")
    sys.exit(130)


def main() -> None:
    """Entry point: run the app, turning user errors into one line and exit 2.

    Ctrl-C exits 130 and SIGTERM 143 (128 + the signal), each after cleaning up.
    """
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(standalone_mode=False, prog_name="tierwise")
    except TierwiseError as exc:
        _fail(str(exc))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        _interrupted()
    except _click_exceptions() as exc:  # usage errors arrive here in non-standalone mode
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # the help text, as click prints it
            sys.exit(2)
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path if ctx is not None else "tierwise"
        _fail(f"{command}: {exc.format_message()} (see {command} --help)")
    if code == 130 or _TERMINATED:  # typer's answer to KeyboardInterrupt
        _interrupted()
    sys.exit(code if isinstance(code, int) else 0)
