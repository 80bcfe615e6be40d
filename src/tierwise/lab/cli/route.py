"""``tierwise lab route``: routing strategies compared through world changes.

In network namespaces by default (root, :mod:`tierwise.lab.world.namespaces`), or on
loopback with ``--loopback`` (:mod:`tierwise.lab.world.loopback`); the figures are
printed, ``--json`` writes them and ``--plot`` draws the runs
(:mod:`tierwise.lab.views.route`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tierwise.errors import LabError, ScenarioError
from tierwise.lab.world.common import STRATEGIES
from tierwise.outfile import write_text

__all__ = ["lab_route_command"]


def lab_route_command(
    requests: Annotated[
        int, typer.Option("--requests", help="Requests in the mix.", min=20, max=400)
    ] = 40,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the recorded mix.")] = 1,
    strategies: Annotated[
        str, typer.Option("--strategies", help="Comma-separated: " + ",".join(STRATEGIES))
    ] = ",".join(STRATEGIES),
    loopback: Annotated[
        bool,
        typer.Option(
            "--loopback",
            help="No root: sites on loopback with emulated delays in the servers, "
            "not kernel TCP over emulated paths in namespaces.",
        ),
    ] = False,
    plot_to: Annotated[
        Path | None, typer.Option("--plot", help="Write PNG and SVG here (path without suffix).")
    ] = None,
    json_to: Annotated[
        Path | None, typer.Option("--json", help="Write the per-strategy figures here.")
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="The edge's server: the stand-in, or llama.cpp's server on a random model "
            "(llama.cpp; needs llama-cpp-python[server] and gguf; namespaces only).",
        ),
    ] = "stand-in",
    engine_size: Annotated[
        str,
        typer.Option(
            "--engine-size", help="The random model's size with --engine llama.cpp: tiny, small."
        ),
    ] = "tiny",
    relay_path: Annotated[
        bool,
        typer.Option(
            "--relay-path",
            help="Instead: one cloud site reached directly and through the relay "
            '(via = ["direct", "relay"]), over a path with 14 % loss each way and over a '
            "clean one, against the measured oracle (namespaces).",
        ),
    ] = False,
    replicas: Annotated[
        int,
        typer.Option(
            "--replicas",
            help="Also run this many gateways behind HAProxy (round-robin), once sharing "
            "state through Redis and once learning alone, beside one gateway that sees "
            "every request (loopback; needs redis-server and haproxy).",
            min=1,
            max=8,
        ),
    ] = 1,
) -> None:
    """Compare routing strategies through world changes: a client and three model servers
    in network namespaces behind emulated paths (root), or on loopback (``--loopback``)."""
    chosen = [s.strip() for s in strategies.split(",") if s.strip()]
    for s in chosen:
        if s not in STRATEGIES:
            raise ScenarioError(
                f"unknown strategy {s!r}; known: {', '.join(STRATEGIES)}", source="--strategies"
            )
    if engine not in ("stand-in", "llama.cpp"):
        raise ScenarioError(f"expected stand-in or llama.cpp, got {engine!r}", source="--engine")
    if engine_size not in ("tiny", "small"):
        raise ScenarioError(f"expected tiny or small, got {engine_size!r}", source="--engine-size")
    if engine == "llama.cpp":
        from tierwise.lab.world.engine import engine_unavailable_reason

        if loopback:
            raise ScenarioError("a real engine runs in namespaces only", source="--loopback")
        if (reason := engine_unavailable_reason()) is not None:
            raise LabError(reason)
    if json_to is not None and not _dir_exists(json_to):
        raise ScenarioError("no such directory for the figures", source=f"--json {json_to}")
    if relay_path:
        _relay_path(requests, seed, loopback, json_to)
        return
    if replicas > 1 and loopback:
        _fleet(requests, seed, replicas, json_to)
        return
    if replicas > 1 and (reason := _fleet_missing()) is not None:
        raise LabError(reason)
    if loopback:
        from tierwise.lab.world.loopback import report, run_world

        runs, bodies = run_world(requests, seed, chosen)
        figures = report(runs, bodies)
        if json_to is not None:
            write_text(json_to, json.dumps(figures, indent=1) + "\n")
        if plot_to is not None:
            from tierwise.lab.views.route import plot_loopback

            plot_loopback(runs, bodies, plot_to)
            print(f"wrote {plot_to}.png and .svg")
        return
    from tierwise.lab.bench import netns
    from tierwise.lab.world.namespaces import ns_report, run_ns_world

    if (reason := netns.lab_unavailable_reason()) is not None:
        raise LabError(f"{reason} (or run on loopback: --loopback)")
    size = engine_size if engine == "llama.cpp" else None
    if replicas > 1 and "predictive" not in chosen:
        chosen.insert(0, "predictive")  # the one router the fleet is compared with
    runs, bodies, fits = run_ns_world(requests, seed, chosen, size, replicas)
    figures = ns_report(runs, bodies, fits)
    if replicas > 1:
        from tierwise.lab.world.fleet import fleet_ratios

        figures = {"runs": figures, "ratios": fleet_ratios(figures)}
    if json_to is not None:
        write_text(json_to, json.dumps(figures, indent=1) + "\n")
    if plot_to is not None:
        from tierwise.lab.views.route import plot_namespaces

        plot_namespaces(runs, plot_to)
        print(f"wrote {plot_to}.png and .svg")


def _relay_path(requests: int, seed: int, loopback: bool, json_to: Path | None) -> None:
    from tierwise.lab.bench import netns
    from tierwise.lab.world.relaypath import relay_path_report, run_relay_path

    if loopback:
        raise ScenarioError("the relay's path runs in namespaces only", source="--relay-path")
    if (reason := netns.lab_unavailable_reason()) is not None:
        raise LabError(reason)
    figures = run_relay_path(requests, seed)
    relay_path_report(figures)
    if json_to is not None:
        write_text(json_to, json.dumps(figures, indent=1) + "\n")


def _fleet_missing() -> str | None:
    from tierwise.lab.world.fleet import missing

    return missing("redis-server", "haproxy")


def _fleet(requests: int, seed: int, replicas: int, json_to: Path | None) -> None:
    """The fleet's run on loopback: one router, ``replicas`` sharing, ``replicas`` alone."""
    from tierwise.lab.world.fleet import fleet_report, run_fleet_world

    if (reason := _fleet_missing()) is not None:
        raise LabError(reason)
    runs, bodies = run_fleet_world(requests, seed, replicas)
    figures = fleet_report(runs, bodies)
    if json_to is not None:
        write_text(json_to, json.dumps(figures, indent=1) + "\n")


def _dir_exists(file: Path) -> bool:
    """Whether ``file``'s directory exists (checked before a run of minutes, not after)."""
    try:
        return file.resolve().parent.is_dir()
    except (OSError, ValueError):
        return False
