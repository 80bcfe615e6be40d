"""``tierwise lab up`` and ``lab down``: a path that outlives the command, and its removal.

``lab up`` must outlive the command, so it starts a detached holder process (its
own session) that owns the path — namespaces ``tw-<holder pid>-…`` and the
emulator — and writes a state file under :data:`STATE_DIR` with its identity
(:mod:`tierwise.lab.bench.holders`). ``lab down`` stops the caller's holders (SIGTERM
through a pidfd, after checking the process is that holder: the holder tears its
path down), says which paths of other users it left (``--all`` stops them too),
removes stale state files and sweeps namespaces whose owner is dead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tierwise.errors import LabError, ScenarioError
from tierwise.lab.bench.holders import HOLDER_MARK, STATE_DIR
from tierwise.lab.cli.common import (
    LossDownOpt,
    LossUpOpt,
    RateOpt,
    RttOpt,
    SeedOpt,
    check_loss,
    out,
    parse_option,
    parse_time,
)

if TYPE_CHECKING:
    from tierwise.lab.bench.holders import HolderState

__all__ = ["down", "up"]

HOLDER_READY_TIMEOUT_S = 30.0  # the rate check measures the emulator's ceiling first (~1 s)


def _path_config(rtt: str, rate: str, loss_up: float, loss_down: float, seed: int):
    from tierwise.lab.bench.emulator import Direction
    from tierwise.lab.bench.path import PathConfig

    rtt_s = parse_time(rtt, "--rtt")
    rate_bps = parse_option(rate, "rate", "--rate")
    if rate_bps <= 0:
        raise ScenarioError("the rate must be positive", source="--rate")

    def direction(loss: float, option: str) -> Direction:
        return Direction(
            delay_s=rtt_s / 2, rate_bytes_per_s=rate_bps, loss=check_loss(loss, option)
        )

    return PathConfig(
        up=direction(loss_up, "--loss-up"), down=direction(loss_down, "--loss-down"), seed=seed
    )


def up(
    rtt: RttOpt = "200ms",
    rate: RateOpt = "100Mbit/s",
    loss_up: LossUpOpt = 0.0,
    loss_down: LossDownOpt = 0.0,
    seed: SeedOpt = 0,
) -> None:
    """Bring a path up in the background; `tierwise lab down` removes it."""
    from tierwise.lab.bench.holders import read_states
    from tierwise.lab.bench.netns import require_lab

    config = _path_config(rtt, rate, loss_up, loss_down, seed)
    require_lab()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    _sweep_stale(*read_states(STATE_DIR))
    state = _start_holder(config)
    out.print(f"path up (holder pid {state['pid']}, state {state['state_file']}):")
    for side in ("client", "server"):
        out.print(
            f"  {side}: {state[side + '_addr']} in namespace {state[side + '_ns']} — "
            f"run a command there with: ip netns exec {state[side + '_ns']} COMMAND",
            soft_wrap=True,
        )
    out.print("remove it with: tierwise lab down")


def _start_holder(config) -> dict:
    from tierwise.lab.bench.holders import caller_uid

    spec = {"a": config.up.to_dict(), "b": config.down.to_dict(), "seed": config.seed}
    payload = json.dumps({**spec, "uid": caller_uid()})
    log = open(STATE_DIR / "holder.log", "ab")
    with log:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER_MARK],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,  # survives this command and its terminal
        )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(payload.encode() + b"\n")
    proc.stdin.close()
    line = _readline(proc, HOLDER_READY_TIMEOUT_S)
    proc.stdout.close()
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        raise LabError(
            f"the path did not come up: {line.decode(errors='replace').strip() or 'no answer'} "
            f"(see {STATE_DIR / 'holder.log'})"
        ) from None


def _readline(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline() if ready else b""


def down(
    every: Annotated[
        bool, typer.Option("--all", help="Also stop the paths other users brought up.")
    ] = False,
) -> None:
    """Stop the paths your `tierwise lab up` started and sweep stale state and namespaces."""
    from tierwise.lab.bench.holders import caller_uid, read_states, stop
    from tierwise.lab.bench.netns import cleanup_stale, require_lab

    require_lab()
    states, broken = read_states(STATE_DIR) if STATE_DIR.is_dir() else ([], [])
    me = caller_uid()
    others = [s for s in states if s.uid != me and not every]
    stopped, stale = [], []
    for state in states:
        if state not in others:
            (stopped if stop(state) else stale).append(state.pid)
    stale += _sweep_stale(others, broken)
    others = [s for s in others if s.pid not in stale]
    swept = cleanup_stale()
    if STATE_DIR.is_dir() and not any(STATE_DIR.glob("lab-*.json")):
        (STATE_DIR / "holder.log").unlink(missing_ok=True)
    if not (stopped or stale or swept or others):
        out.print("nothing to remove")
    for pid in stopped:
        out.print(f"stopped the path of holder {pid}")
    for pid in stale:
        out.print(f"removed the stale state of holder {pid} (that process is gone)")
    for name in swept:
        out.print(f"removed orphaned namespace {name}")
    if others:
        holders = ", ".join(f"holder {s.pid} (uid {s.uid})" for s in others)
        out.print(f"left the paths of other users: {holders}; `tierwise lab down --all` stops them")


def _sweep_stale(states: list[HolderState], broken: list[Path]) -> list[int]:
    """Remove state files whose holder is gone (or is another process now); their pids."""
    from tierwise.lab.bench.holders import is_holder

    for file in broken:
        file.unlink(missing_ok=True)
    gone = [s for s in states if not is_holder(s)]
    for s in gone:
        s.file.unlink(missing_ok=True)
    return [s.pid for s in gone]
