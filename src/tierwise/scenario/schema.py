"""The scenario contract (DESIGN.md) as pydantic models; quantities become SI floats.

Kind-specific rules (what a request, a stream or a loop needs) are checked in
model validators; they raise :class:`ErrorAt` so that the error names the exact key.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tierwise.units import Energy, FlopRate, Flops, Power, Rate, Size, Time

Price = Annotated[float, Field(ge=0)]  # a price or a weight: a plain non-negative number


class ErrorAt(ValueError):
    """A model validator's error about ``key``, a path below the model it validates.

    The loader appends ``key`` to pydantic's location, so a rule checked on the
    whole ``[task]`` still names ``task.period`` rather than ``task``.
    """

    def __init__(self, key: tuple[str | int, ...], message: str):
        super().__init__(message)
        self.key = key


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelWork(_Strict):
    """``[task.model]``: compute derived from a catalog model on each site's hardware."""

    model: str
    weights: str = "bf16"
    context: int = Field(0, ge=0)
    decode_tokens: int = Field(0, ge=0, description="tokens generated per round / request")
    prefill_tokens: int = Field(0, ge=0, description="once, when a site takes the session over")


class Compute(_Strict):
    """``[task.compute]``: model work given directly (overrides ``[task.model]``)."""

    time: Time | None = None
    flops: Flops | None = None

    @model_validator(mode="after")
    def _one(self) -> Compute:
        if (self.time is None) == (self.flops is None):
            raise ValueError("give exactly one of time or flops")
        return self


class Compress(_Strict):
    """``[task.compress]``: shrink the upload on the client first."""

    ratio: float = Field(gt=0, le=1, description="compressed size / original size")
    time: Time = 0.0
    rounds: int | None = Field(None, ge=1, description="rounds needed when compressed (loop)")


class Disconnect(_Strict):
    """``[task.disconnect]``: one disconnect on every remote site's link."""

    after_round: int = Field(ge=1)
    reconnect: Time
    progress: Literal["kept", "lost"] = "kept"


class Chunks(_Strict):
    """``[task.chunks]`` of a request: independent chunks processed as they arrive."""

    upload: list[Size]
    download: list[Size]
    compute: list[Time]
    barrier: bool = False

    @model_validator(mode="after")
    def _same_length(self) -> Chunks:
        n = {len(self.upload), len(self.download), len(self.compute)}
        if len(n) != 1 or 0 in n:
            raise ValueError(
                "upload, download and compute need one entry per chunk (same non-zero length), "
                f"got {len(self.upload)}, {len(self.download)}, {len(self.compute)}"
            )
        return self


class Task(_Strict):
    """``[task]``."""

    name: str = "task"
    kind: Literal["request", "stream", "loop"]
    deadline: Time | None = None
    deadline_quantile: float | None = Field(
        None, gt=0, lt=1, description="judge the deadline at this quantile of the time (loss)"
    )
    residency: str = "any"
    # request and loop
    upload: Size = 0.0
    download: Size = 0.0
    rounds: int | None = Field(None, ge=0)
    client_work: Time = 0.0
    model: ModelWork | None = None
    compress: Compress | None = None
    disconnect: Disconnect | None = None
    # request: a table of chunks; stream: a number of chunks
    chunks: Chunks | int | None = None
    # loop/request: [task.compute] table; stream: a time per chunk
    compute: Compute | Time | None = None
    # stream
    period: Time | None = None
    chunk_bytes: Size | None = None
    send: Time | None = None
    propagation: Time | None = None
    propagation_overrides: dict[str, Time] = Field(default_factory=dict)
    buffer: Time = 0.0

    @model_validator(mode="after")
    def _by_kind(self) -> Task:
        {"request": self._check_request, "stream": self._check_stream, "loop": self._check_loop}[
            self.kind
        ]()
        return self

    def _check_request(self) -> None:
        if isinstance(self.chunks, int):
            raise ErrorAt(("chunks",), "a request's chunks is a table [task.chunks], not a number")
        if isinstance(self.compute, float):
            raise ErrorAt(
                ("compute",), "a request's compute is a table [task.compute] (time or flops)"
            )
        if self.chunks is None and self.compute is None and self.model is None:
            raise ErrorAt(
                ("compute",), "a request needs [task.compute], [task.model] or [task.chunks]"
            )

    def _check_stream(self) -> None:
        if not isinstance(self.chunks, int) or self.chunks < 1:
            raise ErrorAt(("chunks",), "a stream needs chunks = <number of chunks ≥ 1>")
        if self.period is None or self.period <= 0:
            raise ErrorAt(("period",), "a stream needs period = <chunk duration > 0>, e.g. '20 ms'")
        if not isinstance(self.compute, float):
            raise ErrorAt(
                ("compute",), "a stream needs compute = <model time per chunk>, e.g. '12 ms'"
            )
        for key in self.propagation_overrides:
            if not key.isdigit() or int(key) >= self.chunks:
                raise ErrorAt(
                    ("propagation_overrides", key),
                    f"expected a chunk index 0..{self.chunks - 1} as key, got {key!r}",
                )

    def _check_loop(self) -> None:
        if self.rounds is None:
            raise ErrorAt(("rounds",), "a loop needs rounds = <rounds remaining>")
        if isinstance(self.compute, float):
            raise ErrorAt(("compute",), "a loop takes a table [task.compute] (time or flops)")
        if self.chunks is not None:
            raise ErrorAt(("chunks",), "a loop takes no chunks")
        if self.compute is None and self.model is None:
            raise ErrorAt(("compute",), "a loop needs [task.compute] or [task.model]")
        if self.disconnect and self.disconnect.after_round > self.rounds:
            raise ErrorAt(
                ("disconnect", "after_round"),
                f"expected at most rounds = {self.rounds}, got {self.disconnect.after_round}",
            )


class Site(_Strict):
    """``[[site]]``: where the task may run, and the path to it."""

    name: str = Field(min_length=1)
    tier: Literal["device", "edge", "cloud"]
    hardware: str | None = None
    region: str | None = None
    uplink: Rate | list[Rate] | None = None
    downlink: Rate | None = None
    rtt: Time = 0.0
    energy_per_token: tuple[Energy, Energy] | None = None
    power: Power | None = None
    prefill: Time | None = None
    decode_slowdown: float = Field(1.0, gt=0)
    memory: Size | None = None
    memory_reserve: Size | None = None
    memory_bandwidth: Rate | None = None
    dense_bf16: FlopRate | None = None
    battery: Energy | None = None
    # path physics (§12.3): all optional; leaving them out keeps an open, clean path
    connection: Literal["reused", "new-per-round"] | None = None
    handshake: str = "tcp+tls1.3"
    initial_window: int | None = Field(None, ge=1, description="segments")
    mss: Size = 1448.0
    idle_restart: bool = Field(True, description="slow start again after an idle round")
    loss: float = Field(0.0, ge=0, lt=1, description="random loss, not congestion")
    loss_down: float | None = Field(None, ge=0, lt=1, description="download loss if different")
    recovery: Literal["retransmit", "fec"] = "retransmit"
    fec_target: float = Field(0.999, gt=0, lt=1)
    # packet-level evaluation (issue: simulator)
    evaluate: Literal["model", "sim"] = "model"
    runs: int = Field(1, ge=1, le=10_000, description='seeds when evaluate = "sim"')
    congestion: str = Field("cubic", description='controller when evaluate = "sim"')
    # prices (issue 12): plain numbers in one currency of the user's choice
    cost_per_hour: float | None = Field(None, ge=0, description="rented hardware, per hour held")
    cost_per_token: tuple[Price, Price] | None = Field(
        None, description="[input, output] price per token (context once, output per round)"
    )
    egress_per_gb: float | None = Field(None, ge=0, description="per GB the site sends back")

    @field_validator("congestion")
    @classmethod
    def _known_cc(cls, value: str) -> str:
        from tierwise.proto import CONTROLLERS

        if value not in CONTROLLERS:
            raise ValueError(
                f"unknown congestion controller {value!r}; known: {', '.join(sorted(CONTROLLERS))}"
            )
        return value

    @field_validator("handshake")
    @classmethod
    def _known_handshake(cls, value: str) -> str:
        from tierwise.model.transport import HANDSHAKE_RTTS

        if value not in HANDSHAKE_RTTS:
            raise ValueError(f"unknown handshake {value!r}; known: {', '.join(HANDSHAKE_RTTS)}")
        return value

    @field_validator("mss")
    @classmethod
    def _positive_mss(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("mss must be > 0 bytes")
        return value

    @property
    def loss_on_download(self) -> float:
        return self.loss if self.loss_down is None else self.loss_down

    @field_validator("energy_per_token", mode="before")
    @classmethod
    def _range(cls, value: object) -> object:
        if isinstance(value, str):
            return [value, value]
        if isinstance(value, list | tuple) and len(value) != 2:
            raise ValueError(
                "expected one energy or a [low, high] pair such as "
                f'["0.576 J", "0.756 J"], got {len(value)} values'
            )
        return value

    @property
    def remote(self) -> bool:
        return self.tier != "device"


class Decision(_Strict):
    """``[decision]``."""

    objective: Literal["energy", "time", "cost", "pareto"] = "energy"
    weights: dict[Literal["time", "energy", "cost"], Price] = Field(
        default_factory=dict,
        description='objective = "pareto": weight of each metric over its best value (1 each)',
    )
    probability: float | None = Field(
        None,
        gt=0,
        le=1,
        description="with [variability]: an option meets the deadline only if P(T ≤ deadline) "
        "is at least this",
    )


class Distribution(_Strict):
    """A distribution of a quantity, for ``[variability]``."""

    dist: Literal["uniform", "lognormal", "normal", "choice", "exponential"]
    low: str | None = None
    high: str | None = None
    median: str | None = None
    sigma: float | None = Field(None, ge=0)
    mean: str | None = None
    sd: str | None = None
    values: list[str] | None = None
    weights: list[float] | None = None


class SiteVariability(_Strict):
    """``[variability.site.<name>]``: how one site's path varies."""

    uplink: Distribution | None = None
    rtt_jitter: Distribution | None = None
    disconnect_probability: float = Field(0.0, ge=0, lt=1, description="per round")
    reconnect: Time = 0.0
    progress: Literal["kept", "lost"] = "kept"


class Variability(_Strict):
    """``[variability]``: Monte Carlo over per-round conditions."""

    trials: int = Field(10_000, ge=1, le=10_000_000)
    seed: int = 0
    site: dict[str, SiteVariability] = Field(default_factory=dict)


class Scenario(_Strict):
    """A whole scenario file."""

    task: Task
    site: list[Site] = Field(min_length=1)
    decision: Decision = Decision()
    variability: Variability | None = None

    @model_validator(mode="after")
    def _unique_sites(self) -> Scenario:
        seen: set[str] = set()
        for i, s in enumerate(self.site):
            if s.name in seen:
                raise ErrorAt(
                    ("site", i, "name"), f"two sites are named {s.name!r}; names must be unique"
                )
            seen.add(s.name)
        for name in self.variability.site if self.variability else ():
            if name not in seen:
                raise ErrorAt(
                    ("variability", "site", name),
                    f"expected the name of a site ({', '.join(sorted(seen))}), got {name!r}",
                )
        return self

    def site_named(self, name: str) -> Site:
        for s in self.site:
            if s.name == name:
                return s
        raise KeyError(name)
