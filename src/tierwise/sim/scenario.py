"""The ``tierwise sim`` file: a path, a transport and a workload, validated like scenarios.

```toml
[path]
uplink = "20 Mbit/s"
downlink = "100 Mbit/s"
rtt = "100 ms"
loss_up = 0.0              # or { p_gb = 0.01, p_bg = 0.3, loss_bad = 0.5 } (Gilbert–Elliott)
loss_down = 0.0
queue = "10 MB"            # drop-tail per direction (bytes); omit for unbounded

[tcp]
cc = "newreno"             # slowstart | newreno | cubic | bbr
mss = "1168 B"             # payload per segment
header = "60 B"
ack = "92 B"
initial_window = 10
ack_every = 1
ack_delay = "0 ms"

[workload]
kind = "request"
upload = "30 MB"
download = "5 MB"
processing = "0.3 s"

[run]
seed = 1
runs = 1
```

Competing flows replace ``[workload]`` with ``[[flow]]`` tables sharing the path's
uplink as one bottleneck (at most 1,024 of them)::

```toml
[[flow]]
cc = "cubic"               # this flow's controller (TCP only)
start = "0 s"
duration = "30 s"          # or size = "10 MB"
transport = "tcp"          # or "relay": the relay's own session (§12.3.5)
```

A request workload may set ``transport = "relay"`` to carry it over a relay session
instead of TCP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from tierwise.errors import ScenarioError, shown
from tierwise.schemakeys import NoBooleanNumbers, keys_at, unknown_key
from tierwise.tomlfile import read_toml
from tierwise.units import Rate, Size, Time

__all__ = ["MAX_FLOWS", "SIM_EXAMPLES", "FlowTable", "SimFile", "load_sim", "sim_example"]

SIM_EXAMPLES = ("sim-photo", "sim-flows")
MAX_FLOWS = 1024


def sim_example(name: str = "sim-photo") -> Path:
    """Path of a bundled sim file (``sim-photo`` is the §12.3.2 request)."""
    from importlib import resources

    if name not in SIM_EXAMPLES:
        raise ScenarioError(
            f"no bundled sim example {shown(name)}; known: {', '.join(SIM_EXAMPLES)}"
        )
    return Path(str(resources.files("tierwise.examples").joinpath(f"{name}.toml")))


class _Strict(NoBooleanNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GeLoss(_Strict):
    p_gb: float = Field(ge=0, le=1)
    """Probability per packet of moving from the good to the bad state."""
    p_bg: float = Field(ge=0, le=1)
    """Probability per packet of moving from the bad to the good state."""
    loss_good: float = Field(0.0, ge=0, lt=1)
    """Loss probability in the good state."""
    loss_bad: float = Field(1.0, ge=0, le=1)
    """Loss probability in the bad state."""


class PathSection(_Strict):
    uplink: Rate
    """Client-to-server bottleneck rate."""
    downlink: Rate
    """Server-to-client bottleneck rate."""
    rtt: Time
    """Round-trip propagation delay."""
    loss_up: float | GeLoss = 0.0
    """Random loss on the uplink: a probability or a Gilbert-Elliott table."""
    loss_down: float | GeLoss = 0.0
    """Random loss on the downlink: a probability or a Gilbert-Elliott table."""
    queue: Size | None = None
    """Drop-tail queue per direction in bytes; omit for unbounded."""
    queue_packets: int | None = Field(None, ge=1)
    """Drop-tail queue per direction in packets."""

    @field_validator("loss_up", "loss_down")
    @classmethod
    def _loss(cls, v: float | GeLoss) -> float | GeLoss:
        if isinstance(v, float) and not 0 <= v < 1:
            raise ValueError(f"loss must lie in [0, 1), got {v}")
        return v


class TcpSection(_Strict):
    cc: str = "newreno"
    """Congestion controller: slowstart, newreno, cubic, cubic-hystart, bbr, bbr-linux, bbr-v1."""
    mss: Size = 1448.0
    """Payload bytes per segment (1 B to 65,535 B)."""
    header: Size = 52.0
    """Header bytes per data segment on the wire."""
    ack: Size = 52.0
    """Bytes per ACK on the wire."""
    initial_window: int = Field(10, ge=1)
    """Initial congestion window in segments."""
    ack_every: int = Field(1, ge=1)
    """Send an ACK every this many segments."""
    ack_delay: Time = 0.0
    """Delayed-ACK timer."""
    handshake: str | None = Field(
        None, description="tcp+tls1.3 | tcp+tls1.2 | quic | quic-0rtt; omit for an open connection"
    )
    syn_window: Size | None = Field(
        None,
        description="with a handshake: the peer's unscaled SYN window capping the first "
        "flight (at most 65,535 B); omit to leave it out",
    )

    @field_validator("handshake")
    @classmethod
    def _handshake(cls, v: str | None) -> str | None:
        from tierwise.model.transport import HANDSHAKE_RTTS

        if v is not None and v not in HANDSHAKE_RTTS:
            raise ValueError(f"unknown handshake {shown(v)}; known: {', '.join(HANDSHAKE_RTTS)}")
        return v

    @field_validator("syn_window")
    @classmethod
    def _syn_window(cls, v: float | None) -> float | None:
        if v is not None and not 1 <= v <= 65_535:
            raise ValueError(
                f"syn_window must lie in [1 B, 65,535 B] (an unscaled TCP window field), "
                f"got {v:g} B"
            )
        return v

    @field_validator("cc")
    @classmethod
    def _cc(cls, v: str) -> str:
        return _known_cc(v)

    @model_validator(mode="after")
    def _sizes(self) -> TcpSection:
        if not 1 <= self.mss <= 65_535:
            raise ValueError(f"mss must lie in [1 B, 65,535 B] (one IP packet), got {self.mss:g} B")
        if self.ack_every > 1 and self.ack_delay == 0:
            raise ValueError("ack_every > 1 needs ack_delay (else the last segment waits forever)")
        return self


class WorkloadSection(_Strict):
    """Request/response over the TCP-like connection (§12.3.2)."""

    kind: Literal["request"] = "request"
    """request: upload, process, download."""
    upload: Size = 0.0
    """Bytes sent to the server."""
    download: Size = 0.0
    """Bytes of the reply."""
    processing: Time = 0.0
    """Server time between the last upload byte and the reply."""
    transport: Literal["tcp", "relay"] = "tcp"
    """tcp (the [tcp] section) or relay: the relay's own session, its rate control and FEC."""


class FecWorkload(_Strict):
    """The request sent as FEC symbols (§12.3.3); ``tcp.mss`` is the symbol size."""

    kind: Literal["fec-request"]
    """fec-request: the request sent as FEC symbols."""
    upload: Size
    """Bytes sent to the server."""
    download: Size = 0.0
    """Bytes of the reply."""
    processing: Time = 0.0
    """Server time before the reply."""
    target: float = Field(0.999, gt=0, lt=1)
    """Probability each block decodes."""
    reply: Literal["fec", "tcp"] = "fec"
    """Reply sent as FEC symbols or over TCP."""


class StreamWorkload(_Strict):
    """Audio chunks captured every period, processed, sent, played (§12.1.2)."""

    kind: Literal["stream"]
    """stream: chunks captured every period."""
    chunks: int = Field(ge=1)
    """Number of chunks."""
    period: Time
    """Capture period per chunk."""
    chunk_bytes: Size
    """Bytes per chunk."""
    compute: Time
    """Model time per chunk."""
    buffer: Time = 0.0
    """Playout buffer before the first chunk plays."""
    transport: Literal["datagram", "tcp"] = "datagram"
    """Datagrams (no retransmission) or a TCP connection."""
    propagation_overrides: dict[str, Time] = Field(default_factory=dict)
    """One-way delay for particular chunks, by chunk index."""

    @field_validator("propagation_overrides")
    @classmethod
    def _indices(cls, v: dict[str, float]) -> dict[str, float]:
        for key in v:
            if not key.isdigit():
                raise ValueError(f"propagation_overrides keys are chunk indices, got {shown(key)}")
        return v


class StreamWrite(_Strict):
    stream: str
    """Stream name."""
    bytes: Size
    """Bytes written."""
    at: Time = 0.0
    """When the write happens."""
    priority: int = 0
    """With policy = "priority": higher goes first."""


class StreamsWorkload(_Strict):
    """Several streams over one connection: scheduling and delivery order (§12.3.4)."""

    kind: Literal["streams"]
    """streams: several streams over one connection."""
    writes: list[StreamWrite] = Field(min_length=1)
    """The writes, in order."""
    policy: Literal["fifo", "priority"] = "fifo"
    """Send scheduling across streams."""
    delivery: Literal["connection", "stream"] = "connection"
    """Deliver in connection order (head-of-line blocking) or per stream."""


class RoundsWorkload(_Strict):
    """Agent rounds on one kept connection (§12.1.3)."""

    kind: Literal["rounds"]
    """rounds: agent rounds on one kept connection."""
    rounds: int = Field(ge=1)
    """Number of rounds."""
    upload: Size
    """Bytes uploaded per round."""
    download: Size = 0.0
    """Bytes downloaded per round."""
    client: Time = 0.0
    """Client time per round."""
    model: Time = 0.0
    """Server model time per round."""
    idle_restart: bool = False
    """Restart slow start after an idle period."""


class WirelessWorkload(_Strict):
    """An upload across a shared 802.11 medium where data and ACKs take turns (§12.4.1)."""

    kind: Literal["wireless"]
    """wireless: an upload across a shared 802.11 medium."""
    upload: Size
    """Bytes uploaded."""
    data_rate: Rate = 6_750_000.0
    """PHY rate of data frames."""
    ack_rate: Rate = 750_000.0
    """PHY rate of ACK frames."""
    wired_one_way: Time = 0.0
    """One-way delay of the wired part."""


MAX_SEED = 2**63 - 1


class RunSection(_Strict):
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """First seed (non-negative); run i uses seed + i."""
    runs: int = Field(1, ge=1, le=100_000)
    """Number of seeds to run."""
    until: Time = 3600.0
    """Simulated time limit per run."""


def _known_cc(v: str) -> str:
    from tierwise.proto.congestion import CONTROLLERS

    if v not in CONTROLLERS:
        raise ValueError(
            f"unknown congestion controller {shown(v)}; known: {', '.join(sorted(CONTROLLERS))}"
        )
    return v


class FlowTable(_Strict):
    """One competing flow over the shared bottleneck (the path's uplink)."""

    cc: str | None = None
    """This flow's congestion controller (TCP only); omit for tcp.cc."""
    start: Time = 0.0
    """When the flow starts writing."""
    size: Size | None = None
    """Bytes to send (give size or duration)."""
    duration: Time | None = None
    """Send as fast as the path takes for this long (give size or duration)."""
    transport: Literal["tcp", "relay"] = "tcp"
    """tcp, or relay: the relay's own session with its rate control and FEC."""

    @field_validator("cc")
    @classmethod
    def _cc(cls, v: str | None) -> str | None:
        return None if v is None else _known_cc(v)

    @model_validator(mode="after")
    def _one_of(self) -> FlowTable:
        if (self.size is None) == (self.duration is None):
            raise ValueError("a flow needs exactly one of size and duration")
        if self.duration is not None and not self.duration > 0:
            raise ValueError(f"duration must be > 0 s, got {self.duration:g} s")
        if self.transport == "relay" and self.cc is not None:
            raise ValueError("a relay flow brings its own rate control; omit cc")
        return self


Workload = (
    WorkloadSection
    | FecWorkload
    | StreamWorkload
    | StreamsWorkload
    | RoundsWorkload
    | WirelessWorkload
)


class SimFile(_Strict):
    path: PathSection
    """The network path."""
    tcp: TcpSection = TcpSection()
    """The transport."""
    workload: Workload | None = Field(None, discriminator="kind")
    """What is sent; the keys depend on kind (or give [[flow]] tables instead)."""
    flow: list[FlowTable] = Field(default_factory=list, max_length=MAX_FLOWS)
    """Competing flows sharing the uplink (at most 1,024), instead of a workload."""
    run: RunSection = RunSection()
    """Seeds and limits."""

    @model_validator(mode="before")
    @classmethod
    def _default_kind(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(data.get("workload"), dict):
            data = {**data, "workload": {"kind": "request", **data["workload"]}}
        return data

    @model_validator(mode="after")
    def _workload_or_flows(self) -> SimFile:
        if self.workload is not None and self.flow:
            raise ValueError("give a [workload] table or [[flow]] tables, not both")
        if self.workload is None and not self.flow:
            raise ValueError("missing [workload] (or [[flow]] tables for competing flows)")
        for i, f in enumerate(self.flow):
            end_s = f.start + (f.duration or 0.0)
            if end_s >= self.run.until:
                raise ValueError(
                    f"flow.{i} runs to {end_s:g} s, not before run.until = {self.run.until:g} s; "
                    f"raise run.until or end the flow sooner"
                )
        return self


def load_sim(path: str | Path) -> SimFile:
    """Read and validate a sim file; every problem is one ScenarioError with its key path."""
    source = str(path)
    data = read_toml(path)
    try:
        return SimFile.model_validate(data)
    except RecursionError:
        raise ScenarioError("tables nested too deep to validate", source=source) from None
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function", "float")))
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = unknown_key(err["loc"][-1], keys_at(SimFile, tuple(err["loc"])))
        elif "input" in err and err["type"] not in ("missing", "value_error") and err["loc"]:
            msg = f"{msg} (got {shown(err['input'])})"
        raise ScenarioError(msg, source=source, path=loc or None) from None
