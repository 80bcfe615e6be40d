"""``tierwise lab model-server``: start the OpenAI-compatible stand-in for a model site.

Options are checked here (bad input: one line, exit 2) before the socket is bound;
:mod:`tierwise.lab.world.model_server` serves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tierwise.errors import ScenarioError

__all__ = ["model_server_command"]


def _time_opt(value: str | None, option: str) -> float | None:
    from tierwise.units import parse_quantity

    if value is None:
        return None
    seconds = parse_quantity(value, "time")
    if seconds < 0:
        raise ScenarioError(f"{value!r} must not be negative", source=option)
    return seconds


def _rate_opt(value: str | None, option: str) -> float:
    from tierwise.units import parse_quantity

    if value is None:
        return 0.0
    rate = parse_quantity(value, "rate")
    if rate <= 0:
        raise ScenarioError(f"{value!r} must be positive", source=option)
    return rate


def _fraction(value: float, option: str) -> float:
    if not 0.0 <= value <= 1.0:
        raise ScenarioError(f"expected a probability in [0, 1], got {value}", source=option)
    return value


def _like(
    behaviour: Any, like: str | None, profile: Path | None, out: Path | None, model: str
) -> Any:
    """``behaviour`` with the timing of a measured engine (``--like``) or of a profile file
    (``--profile``); the faults and emulated network given on the command line stay."""
    if like is not None and profile is not None:
        raise ScenarioError("give --like URL or --profile FILE, not both", source="--profile")
    if out is not None and like is None:
        raise ScenarioError("needs --like URL to measure", source="--profile-out")
    if like is None and profile is None:
        return behaviour
    import dataclasses

    from tierwise.lab.world.profile import measure, read_profile, write_profile

    if like is not None:
        if not like.startswith(("http://", "https://")):
            raise ScenarioError(f"expected an http(s) URL, got {like!r}", source="--like")
        measured = measure(like)
        if out is not None:
            write_profile(measured, out)
    else:
        assert profile is not None
        measured = read_profile(profile)
    timing = measured.behaviour()
    return dataclasses.replace(
        behaviour,
        decode_step_s=timing.decode_step_s,
        prefill_s_per_token=timing.prefill_s_per_token,
        overhead_s=timing.overhead_s,
        slots=timing.slots,
    )


def model_server_command(
    port: Annotated[int, typer.Option("--port", help="TCP port (0: any free port).")] = 8001,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    model: Annotated[str, typer.Option("--model", help="Catalog model id.")] = "qwen3-8b",
    hardware: Annotated[
        str | None, typer.Option("--hardware", help="Catalog hardware id for the step bound.")
    ] = None,
    weights: Annotated[str, typer.Option("--weights", help="Quantisation id.")] = "q4_0",
    context: Annotated[int, typer.Option("--context", help="Context tokens (KV read).")] = 4096,
    factor: Annotated[
        float, typer.Option("--factor", help="Measured/bound decode factor (§12.5.2: 2.83).")
    ] = 1.0,
    decode_step: Annotated[
        str | None, typer.Option("--decode-step", help="Decode step, e.g. '20 ms' (no catalog).")
    ] = None,
    prefill_per_token: Annotated[
        str | None, typer.Option("--prefill-per-token", help="Prefill per prompt token.")
    ] = None,
    overhead: Annotated[str, typer.Option("--overhead", help="Fixed time per request.")] = "0 s",
    slots: Annotated[int, typer.Option("--slots", help="Requests served at once.", min=1)] = 4,
    error_rate: Annotated[float, typer.Option("--error-rate", help="Share answered 500.")] = 0.0,
    stall_rate: Annotated[float, typer.Option("--stall-rate", help="Share that stall.")] = 0.0,
    stall: Annotated[str, typer.Option("--stall", help="How long a stall lasts.")] = "10 s",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fault draws.")] = 0,
    rtt: Annotated[str, typer.Option("--rtt", help="Emulated RTT added per request.")] = "0 s",
    uplink: Annotated[
        str | None, typer.Option("--uplink", help="Emulated uplink for the request body.")
    ] = None,
    lenient: Annotated[
        bool,
        typer.Option(
            "--lenient", help="Take any JSON object (default: OpenAI's schema, 400 otherwise)."
        ),
    ] = False,
    like: Annotated[
        str | None,
        typer.Option(
            "--like",
            help="Measure the engine at this URL (time to first token against prompt "
            "length, time per output token, slots) and serve like it.",
        ),
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option("--profile", help="Serve like a profile that --profile-out wrote."),
    ] = None,
    profile_out: Annotated[
        Path | None,
        typer.Option("--profile-out", help="With --like: also write the measured profile here."),
    ] = None,
) -> None:
    """An OpenAI-compatible model server with catalog timing and injectable faults (loopback)."""
    from tierwise.lab.world.model_server import Behaviour, catalog_step_s, serve

    step_s, prefill_s = 0.02, 0.0001
    if hardware is not None:
        step_s, prefill_s = catalog_step_s(hardware, model, weights, context)
        step_s *= factor
    step_s = _time_opt(decode_step, "--decode-step") or step_s
    given_prefill = _time_opt(prefill_per_token, "--prefill-per-token")
    behaviour = Behaviour(
        decode_step_s=step_s,
        prefill_s_per_token=prefill_s if given_prefill is None else given_prefill,
        overhead_s=_time_opt(overhead, "--overhead") or 0.0,
        slots=slots,
        error_rate=_fraction(error_rate, "--error-rate"),
        stall_rate=_fraction(stall_rate, "--stall-rate"),
        stall_s=_time_opt(stall, "--stall") or 0.0,
        rtt_s=_time_opt(rtt, "--rtt") or 0.0,
        uplink_bytes_per_s=_rate_opt(uplink, "--uplink"),
    )
    from tierwise.listen import listen_socket

    sock = listen_socket(host, port)  # before the banner: an error prints nothing else
    behaviour = _like(behaviour, like, profile, profile_out, model)
    step_s = behaviour.decode_step_s
    print(
        f"model-server {model}: decode step {step_s * 1000:.3f} ms, prefill "
        f"{behaviour.prefill_s_per_token * 1e6:.1f} µs/token on http://{host}:{port}",
        flush=True,
    )
    serve(host, port, model, behaviour, seed, sock=sock, strict=not lenient)
