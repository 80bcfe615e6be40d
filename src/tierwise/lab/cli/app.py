"""``tierwise lab …``: the typer app and its commands, in the order ``--help`` lists them.

Each command lives in a module of its own (:mod:`.paths` for ``up`` and ``down``,
:mod:`.request`, :mod:`.throughput`, :mod:`.stream`, :mod:`.flows`, :mod:`.route`,
:mod:`.model_server`); what they share is in :mod:`.common`. Importing this module is
light: the bench, the experiments and the drawing load when a command runs.

Every command checks the host first; a :class:`LabError` (no root, no TUN) reaches
the main CLI, which prints it as one line and exits 2.
"""

from __future__ import annotations

import typer

from tierwise.lab.cli.flows import flows_command
from tierwise.lab.cli.model_server import model_server_command
from tierwise.lab.cli.paths import down, up
from tierwise.lab.cli.request import request
from tierwise.lab.cli.route import lab_route_command
from tierwise.lab.cli.stream import stream_command
from tierwise.lab.cli.throughput import throughput

__all__ = ["lab_app"]

lab_app = typer.Typer(
    help="Real kernel TCP over an emulated path between two network namespaces (needs root).",
    no_args_is_help=True,
)
lab_app.command("model-server")(model_server_command)
lab_app.command("route")(lab_route_command)
lab_app.command("flows")(flows_command)
lab_app.command("up")(up)
lab_app.command("down")(down)
lab_app.command("request")(request)
lab_app.command("throughput")(throughput)
lab_app.command("stream")(stream_command)
