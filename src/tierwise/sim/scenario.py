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
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tierwise.errors import ScenarioError, shown
from tierwise.schemakeys import keys_at, unknown_key
from tierwise.tomlfile import read_toml
from tierwise.units import Rate, Size, Time

__all__ = ["SIM_EXAMPLES", "SimFile", "load_sim", "sim_example"]

SIM_EXAMPLES = ("sim-photo",)


def sim_example(name: str = "sim-photo") -> Path:
    """Path of a bundled sim file (``sim-photo`` is the §12.3.2 request)."""
    from importlib import resources

    if name not in SIM_EXAMPLES:
        raise ScenarioError(
            f"no bundled sim example {shown(name)}; known: {', '.join(SIM_EXAMPLES)}"
        )
    return Path(str(resources.files("tierwise.examples").joinpath(f"{name}.toml")))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GeLoss(_Strict):
    p_gb: float = Field(ge=0, le=1)
    p_bg: float = Field(ge=0, le=1)
    loss_good: float = Field(0.0, ge=0, lt=1)
    loss_bad: float = Field(1.0, ge=0, le=1)


class PathSection(_Strict):
    uplink: Rate
    downlink: Rate
    rtt: Time
    loss_up: float | GeLoss = 0.0
    loss_down: float | GeLoss = 0.0
    queue: Size | None = None
    queue_packets: int | None = Field(None, ge=1)

    @field_validator("loss_up", "loss_down")
    @classmethod
    def _loss(cls, v: float | GeLoss) -> float | GeLoss:
        if isinstance(v, float) and not 0 <= v < 1:
            raise ValueError(f"loss must lie in [0, 1), got {v}")
        return v


class TcpSection(_Strict):
    cc: str = "newreno"
    mss: Size = 1448.0
    header: Size = 52.0
    ack: Size = 52.0
    initial_window: int = Field(10, ge=1)
    ack_every: int = Field(1, ge=1)
    ack_delay: Time = 0.0
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
        from tierwise.proto.congestion import CONTROLLERS

        if v not in CONTROLLERS:
            raise ValueError(
                f"unknown congestion controller {shown(v)}; known: {', '.join(sorted(CONTROLLERS))}"
            )
        return v

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
    upload: Size = 0.0
    download: Size = 0.0
    processing: Time = 0.0


class FecWorkload(_Strict):
    """The request sent as FEC symbols (§12.3.3); ``tcp.mss`` is the symbol size."""

    kind: Literal["fec-request"]
    upload: Size
    download: Size = 0.0
    processing: Time = 0.0
    target: float = Field(0.999, gt=0, lt=1)
    reply: Literal["fec", "tcp"] = "fec"


class StreamWorkload(_Strict):
    """Audio chunks captured every period, processed, sent, played (§12.1.2)."""

    kind: Literal["stream"]
    chunks: int = Field(ge=1)
    period: Time
    chunk_bytes: Size
    compute: Time
    buffer: Time = 0.0
    transport: Literal["datagram", "tcp"] = "datagram"
    propagation_overrides: dict[str, Time] = Field(default_factory=dict)

    @field_validator("propagation_overrides")
    @classmethod
    def _indices(cls, v: dict[str, float]) -> dict[str, float]:
        for key in v:
            if not key.isdigit():
                raise ValueError(f"propagation_overrides keys are chunk indices, got {shown(key)}")
        return v


class StreamWrite(_Strict):
    stream: str
    bytes: Size
    at: Time = 0.0
    priority: int = 0


class StreamsWorkload(_Strict):
    """Several streams over one connection: scheduling and delivery order (§12.3.4)."""

    kind: Literal["streams"]
    writes: list[StreamWrite] = Field(min_length=1)
    policy: Literal["fifo", "priority"] = "fifo"
    delivery: Literal["connection", "stream"] = "connection"


class RoundsWorkload(_Strict):
    """Agent rounds on one kept connection (§12.1.3)."""

    kind: Literal["rounds"]
    rounds: int = Field(ge=1)
    upload: Size
    download: Size = 0.0
    client: Time = 0.0
    model: Time = 0.0
    idle_restart: bool = False


class WirelessWorkload(_Strict):
    """An upload across a shared 802.11 medium where data and ACKs take turns (§12.4.1)."""

    kind: Literal["wireless"]
    upload: Size
    data_rate: Rate = 6_750_000.0
    ack_rate: Rate = 750_000.0
    wired_one_way: Time = 0.0


MAX_SEED = 2**63 - 1


class RunSection(_Strict):
    seed: int = Field(0, ge=0, le=MAX_SEED)
    runs: int = Field(1, ge=1, le=100_000)
    until: Time = 3600.0


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
    tcp: TcpSection = TcpSection()
    workload: Workload = Field(discriminator="kind")
    run: RunSection = RunSection()

    @model_validator(mode="before")
    @classmethod
    def _default_kind(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(data.get("workload"), dict):
            data = {**data, "workload": {"kind": "request", **data["workload"]}}
        return data


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
        elif "input" in err and err["type"] != "missing":
            msg = f"{msg} (got {shown(err['input'])})"
        raise ScenarioError(msg, source=source, path=loc or None) from None
