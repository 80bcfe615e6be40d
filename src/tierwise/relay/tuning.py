"""The session's tunables: the ``[session]`` table of a relay TOML file and a few flags.

Each key is a field of :class:`tierwise.proto.relay.RelayConfig`, named with its
unit (``_s`` seconds, ``_bytes``, ``_bytes_per_s``). In the file a value is a
number in that unit or a string with a unit (``idle_timeout_s = "2 min"``,
``stream_window_bytes = "16 MiB"``, ``initial_rate_bytes_per_s = "100 Mbit/s"``);
a flag always takes a unit (``--idle-timeout 30s``): a unit is never guessed.
A flag wins over the file. Anything unknown, of the wrong type or out of range is
one line naming the file (or flag), the key, the value and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tierwise.errors import ScenarioError, UnitError, did_you_mean, number_slip, shown

__all__ = ["FLAGS", "SESSION_KEYS", "Tunable", "effective", "session_settings"]


@dataclass(frozen=True)
class Tunable:
    """One key: its kind, bounds (inclusive), the default shown in the docs and its meaning."""

    kind: str  # "int", "fraction", "time", "size", "rate" or "choice"
    low: float | None
    high: float | None
    default: str
    meaning: str
    side: str = "both"  # "both", "client" or "gateway"
    choices: tuple[str, ...] = ()


KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SESSION_KEYS: dict[str, Tunable] = {
    "stream_window_bytes": Tunable(
        "size", 64 * KIB, 1 * GIB, "16 MiB",
        "flow-control window of one stream: at least 2 × the path's bandwidth-delay product "
        "for one stream to fill it"),
    "session_window_bytes": Tunable(
        "size", 64 * KIB, 4 * GIB, "32 MiB",
        "flow-control window of all streams together: bounds what the peer may make this end "
        "buffer"),
    "max_datagram_bytes": Tunable(
        "int", 200, 65_000, "1350",
        "largest data datagram this end sends (a repair datagram is ≤ 96 bytes longer); lower "
        "it for a path with a small MTU. Above 1,350 the session starts at 1,350 and "
        "discovers how large the path carries (RFC 8899 probes: 8,876 uses a 9,000-byte "
        "jumbo path to the full); 65,000 keeps a repair within the largest UDP payload"),
    "fec_target": Tunable(
        "fraction", 0.5, 0.999999, "0.999",
        "probability that a request's blocks are all recovered by FEC without a "
        "retransmission round (§12.3.3); higher costs more repair bytes"),
    "fec_bulk_target": Tunable(
        "fraction", 0.0, 0.999999, "0.8",
        "the same per block of a bulk burst (> 16 blocks, no request's data, a "
        "bandwidth-delay product or more queued behind it; its last one keeps 0.99): a "
        "block FEC misses is retransmitted inside the window; lower costs less CPU and "
        "fewer repair bytes, 0 sends none (retransmission only)"),
    "fec_max_k": Tunable(
        "int", 1, 200, "64", "data datagrams per FEC block (k + repairs ≤ 256)"),
    "fec_code": Tunable(
        "choice", None, None, "zfec",
        "erasure code of the repairs this end sends (each REPAIR names its code, so the ends "
        "may differ)", choices=("zfec", "cauchy")),
    "ack_every": Tunable(
        "int", 1, 64, "2", "acknowledge at once after this many ack-eliciting datagrams"),
    "max_ack_delay_s": Tunable(
        "time", 0.0, 0.5, "5 ms", "longest an acknowledgement waits otherwise"),
    "idle_timeout_s": Tunable(
        "time", 1.0, 86400.0, "30 s (client), 12 s (gateway)",
        "end a session that heard nothing for this long"),
    "keepalive_s": Tunable(
        "time", 0.1, 3600.0, "5 s",
        "send a keepalive after this much silence; keep it below the peer's idle timeout"),
    "dead_peer_s": Tunable(
        "time", 0.1, 600.0, "1 s",
        "a session whose data goes unanswered this long (and for 6 probe timeouts, at most "
        "3 × this) is silent: new streams go to a new session at once, so a restarted "
        "gateway is noticed this fast",
        side="client"),
    "silent_grace_s": Tunable(
        "time", 0.5, 600.0, "15 s",
        "a silent session keeps its open streams this long since it last heard the gateway "
        "(a blackout), then resets them; sooner once a new session is up and the old one "
        "stays unanswered, or on ICMP port unreachable",
        side="client"),
    "rotate_packets": Tunable(
        "int", 64, 1 << 40, "16777216",
        "packets per key epoch (key rotation); must be equal at both ends (a mismatch fails "
        "the handshake, like a wrong key)"),
    "initial_rate_bytes_per_s": Tunable(
        "rate", 1e4, 1.25e10,
        "none (32 datagrams in the first round trip, or the path memory's)",
        "pacing rate of a new session before it has measured the path; set, it rules over "
        "the path memory"),
    "initial_loss": Tunable(
        "fraction", 0.0, 0.5, "0",
        "loss FEC assumes on a new session until the peer has measured this direction "
        "(about 200 datagrams): with `initial_rate_bytes_per_s`, a new session's first "
        "request then goes out whole and protected on a path known to be lossy"),
    "open_probe_packets": Tunable(
        "int", 0, 256, "32",
        "client only; datagrams of the rate probe a new session sends once it is up and "
        "idle with nothing known of the path (no start rate, no path memory): their ACKs "
        "time the path, so the first request leaves at its rate, not a round trip later; "
        "0 sends none",
        side="client"),
    "pacing_quantum_s": Tunable(
        "time", 0.0, 0.1, "1 ms", "burst the pacer allows at once"),
    "bulk_bytes": Tunable(
        "size", 1 * KIB, 1 * GIB, "1 MB",
        "bulk mark: a stream that has sent this much yields to smaller ones (§12.3.4)"),
}  # fmt: skip

# the flags an operator tunes most: the windows (sized from the path's BDP), the FEC target
# (repair overhead against waiting for a retransmission), the idle timeout, the start rate,
# the largest datagram (a jumbo-frame path between data centres)
FLAGS: dict[str, str] = {
    "stream_window_bytes": "--stream-window",
    "session_window_bytes": "--session-window",
    "fec_target": "--fec-target",
    "idle_timeout_s": "--idle-timeout",
    "initial_rate_bytes_per_s": "--initial-rate",
    "max_datagram_bytes": "--max-datagram",
}


def keys_for(side: str) -> dict[str, Tunable]:
    return {k: t for k, t in SESSION_KEYS.items() if t.side in ("both", side)}


def session_settings(
    table: Any, source: str, side: str, flags: dict[str, str | None] | None = None
) -> dict[str, Any]:
    """The ``[session]`` table (or ``None``) and the flags, checked: ``{field: value}``."""
    keys = keys_for(side)
    out: dict[str, Any] = {}
    if table is not None:
        if not isinstance(table, dict):
            raise ScenarioError(
                f"expected a table of session settings, got {shown(table)}",
                source=source, path="session",
            )  # fmt: skip
        for key, value in table.items():
            if key not in keys:
                other = " (a client-only key)" if key in SESSION_KEYS else ""
                raise ScenarioError(
                    f"unknown key{other}{did_you_mean(key, keys)}; expected one of: "
                    f"{', '.join(keys)}",
                    source=source, path=f"session.{key}",
                )  # fmt: skip
            out[key] = _value(keys[key], value, source, f"session.{key}", from_file=True)
    given = [key for key, text in (flags or {}).items() if text is not None]
    for key in given:
        out[key] = _value(keys[key], flags[key], "command line", FLAGS[key], from_file=False)  # type: ignore[index]
    _cross_check(out, side, source, "idle_timeout_s" in given)
    return out


def _value(t: Tunable, value: Any, source: str, where: str, *, from_file: bool) -> Any:
    def fail(expected: str) -> ScenarioError:
        slip = number_slip(value) if t.kind == "fraction" else None  # '99.9%', '0,999'
        message = slip or f"expected {expected}, got {shown(value)}"
        return ScenarioError(message, source=source, path=where)

    if t.kind == "choice":
        if value not in t.choices:
            raise fail(f"one of {', '.join(t.choices)}")
        return value
    if t.kind == "int":
        # ASCII digits only: int() also reads "１３５０" (full-width), which no one types on purpose
        if isinstance(value, str) and not from_file and _ascii_digits(value.strip()):
            if len(value.strip()) > 30:  # int() refuses 4,300 digits; no setting needs 30
                raise fail(f"an integer from {_span(t)}")
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise fail(f"an integer from {_span(t)}")
        number: float = value
    elif t.kind == "fraction":
        if isinstance(value, str) and not from_file:
            try:
                value = float(value)
            except ValueError:
                raise fail(f"a number in [{t.low}, {t.high}]") from None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise fail(f"a number in [{t.low}, {t.high}]")
        number = float(value)
    else:
        number = _quantity(t, value, from_file, fail, source, where)
    if not t.low <= number <= t.high:  # type: ignore[operator]
        raise ScenarioError(
            f"{shown(value)} is out of range: expected {_span(t)}", source=source, path=where
        )
    if t.kind in ("int", "size"):
        if number != int(number):
            raise fail("a whole number of bytes")
        return int(number)
    return float(number)


def _quantity(t: Tunable, value: Any, from_file: bool, fail, source: str, where: str) -> float:  # type: ignore[no-untyped-def]
    from tierwise.units import parse_quantity

    unit = {"time": "s", "size": "bytes", "rate": "bytes/s"}[t.kind]
    if from_file and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)  # a number in the key's own unit
    if not isinstance(value, str):
        raise fail(f"a number of {unit} or a string with a unit")
    try:
        return parse_quantity(value, t.kind)
    except UnitError as exc:
        raise ScenarioError(str(exc), source=source, path=where) from None


def _ascii_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _span(t: Tunable) -> str:
    unit = {"time": " s", "size": " bytes", "rate": " bytes/s"}.get(t.kind, "")
    if t.kind in ("int", "size", "rate"):
        return f"{int(t.low):,}{unit} to {int(t.high):,}{unit}"  # type: ignore[arg-type]
    return f"{t.low:g}{unit} to {t.high:g}{unit}"


def _cross_check(out: dict[str, Any], side: str, source: str, idle_flag: bool) -> None:
    keep = out.get("keepalive_s", 5.0)
    idle = out.get("idle_timeout_s", 30.0 if side == "client" else 12.0)
    if keep >= idle:
        # name what the user set: the flag if --idle-timeout brought the clash
        where = (
            {"source": "command line", "path": FLAGS["idle_timeout_s"]}
            if idle_flag
            else {"source": source, "path": "session.keepalive_s"}
        )
        raise ScenarioError(
            f"keepalive_s ({keep:g} s) must be below idle_timeout_s ({idle:g} s), or an idle "
            "session ends between keepalives",
            **where,
        )


def effective(config: Any, side: str) -> dict[str, Any]:
    """What a session on ``side`` runs with: every tunable of its :class:`RelayConfig`."""
    return {key: getattr(config, key) for key in keys_for(side)}
