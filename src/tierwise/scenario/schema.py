"""The scenario schema as pydantic models; quantities become SI floats.

Every key is listed in docs/scenario.md, generated from these models
(``python -m tierwise.report.scenario_docs``): a string under a field is its description.

Kind-specific rules (what a request, a stream or a loop needs) are checked in
model validators; they raise :class:`ErrorAt` so that the error names the exact key.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from tierwise.errors import shown
from tierwise.schemakeys import NoBooleanNumbers
from tierwise.units import Energy, FlopRate, Flops, Power, Rate, Size, Time

MAX_MSS_BYTES = 65_535  # an IPv4 packet's total-length field bounds a segment
Price = Annotated[float, Field(ge=0)]  # a price or a weight: a plain non-negative number
MAX_WEIGHT = 1e6  # a weight compares ratios of metrics: beyond a million, one metric decides
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT)]


class ErrorAt(ValueError):
    """A model validator's error about ``key``, a path below the model it validates.

    The loader appends ``key`` to pydantic's location, so a rule checked on the
    whole ``[task]`` still names ``task.period`` rather than ``task``.
    """

    def __init__(self, key: tuple[str | int, ...], message: str):
        super().__init__(message)
        self.key = key


class _Strict(NoBooleanNumbers):
    # defer_build: a nested model compiles its validator only if used on its own, not at
    # import as well as inside the enclosing model (start-up, docs/benchmarks.md)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class ModelWork(_Strict):
    """``[task.model]``: compute derived from a catalog model on each site's hardware."""

    model: str
    """Catalog model id (`tierwise catalog` lists them)."""
    weights: str = "bf16"
    """Weight format id from the catalog's quant table (bf16, q4_0, ...)."""
    context: int = Field(0, ge=0)
    """Tokens held in the KV cache while decoding."""
    decode_tokens: int = Field(0, ge=0, description="tokens generated per round / request")
    prefill_tokens: int = Field(0, ge=0, description="once, when a site takes the session over")


class Compute(_Strict):
    """``[task.compute]``: model work given directly (overrides ``[task.model]``)."""

    time: Time | None = None
    """Model time per round or request, measured."""
    flops: Flops | None = None
    """Model work per round or request; time = flops / the site's dense_bf16."""

    @model_validator(mode="after")
    def _one(self) -> Compute:
        if (self.time is None) == (self.flops is None):
            raise ValueError("give exactly one of time or flops")
        return self


class Compress(_Strict):
    """``[task.compress]``: shrink the upload on the client first."""

    ratio: float = Field(gt=0, le=1, description="compressed size / original size")
    time: Time = 0.0
    """Client time spent compressing, per round."""
    rounds: int | None = Field(None, ge=1, description="rounds needed when compressed (loop)")


class Disconnect(_Strict):
    """``[task.disconnect]``: one disconnect on every remote site's link."""

    after_round: int = Field(ge=1)
    """The link drops after this round."""
    reconnect: Time
    """Time to reconnect."""
    progress: Literal["kept", "lost"] = "kept"
    """Whether work done before the drop is kept or redone."""


class Chunks(_Strict):
    """``[task.chunks]`` of a request: independent chunks processed as they arrive."""

    upload: list[Size]
    """Bytes each chunk uploads."""
    download: list[Size]
    """Bytes each chunk's result downloads."""
    compute: list[Time]
    """Model time per chunk."""
    barrier: bool = False
    """Wait for every chunk before any result is returned."""

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
    """Label shown in reports."""
    kind: Literal["request", "stream", "loop"]
    """request (one upload, compute, download), stream (chunks every period) or loop (rounds)."""
    deadline: Time | None = None
    """The whole task must finish within this."""
    deadline_quantile: float | None = Field(
        None, gt=0, lt=1, description="judge the deadline at this quantile of the time (loss)"
    )
    residency: str = "any"
    """"device": the raw input may not leave the device; "any": no constraint."""
    # request and loop
    upload: Size = 0.0
    """Loop: per round; request: once."""
    download: Size = 0.0
    """Loop: per round; request: once."""
    rounds: int | None = Field(None, ge=0)
    """Loop: rounds remaining."""
    client_work: Time = 0.0
    """Loop: per-round work on the client (observe, act, UI update)."""
    model: ModelWork | None = None
    """Compute derived from a catalog model on each site's hardware."""
    compress: Compress | None = None
    """Shrink the upload on the client first."""
    disconnect: Disconnect | None = None
    """One disconnect on every remote site's link."""
    # request: a table of chunks; stream: a number of chunks
    chunks: Chunks | int | None = None
    """Request: a table of chunks; stream: the number of chunks."""
    # loop/request: [task.compute] table; stream: a time per chunk
    compute: Compute | Time | None = None
    """Request or loop: a table (time or flops); stream: model time per chunk."""
    # stream
    period: Time | None = None
    """Stream: the duration each chunk captures."""
    chunk_bytes: Size | None = None
    """Stream: bytes sent per chunk."""
    send: Time | None = None
    """Stream: time to send one chunk (instead of chunk_bytes / uplink)."""
    propagation: Time | None = None
    """Stream: one-way propagation (instead of rtt / 2)."""
    propagation_overrides: dict[str, Time] = Field(default_factory=dict)
    """Stream: one-way propagation for particular chunks, by chunk index."""
    buffer: Time = 0.0
    """Stream: playout buffer before the first chunk plays."""

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
                    f"expected a chunk index 0..{self.chunks - 1} as key, got {shown(key)}",
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
    """Unique site name (used by --set site.<name>.<key>)."""
    tier: Literal["device", "edge", "cloud"]
    """Where the site is."""
    hardware: str | None = None
    """Catalog hardware id; its bandwidth, memory and power apply."""
    region: str | None = None
    """Free text (data residency, reports)."""
    uplink: Rate | list[Rate] | None = None
    """Client-to-site rate; a list gives one rate per round."""
    downlink: Rate | None = None
    """Site-to-client rate."""
    rtt: Time = 0.0
    """Round-trip time client to site."""
    energy_per_token: tuple[Energy, Energy] | None = None
    """Measured energy per generated token, one value or [low, high]."""
    power: Power | None = None
    """Power while computing (overrides the hardware's)."""
    prefill: Time | None = None
    """Prefill time override (else prefill FLOP / dense_bf16)."""
    decode_slowdown: float = Field(1.0, gt=0, le=1000)
    """Multiplies the derived decode time (thermal, contention)."""
    # calibration (§12.5.2): a measured step instead of a factor, or another site's factor
    measured_decode: float | None = Field(
        None, description='measured decode step, "25.83 ms" or "38.7 tokens/s" (seconds)'
    )
    measured_weights: str | None = Field(None, description="format measured (default: task's)")
    measured_context: int | None = Field(None, ge=0, description="context measured at")
    slowdown_from: str | None = Field(None, description="use this other site's calibration")
    memory: Size | None = None
    """Memory capacity override."""
    memory_reserve: Size | None = None
    """Memory kept free for the OS and other apps."""
    memory_bandwidth: Rate | None = None
    """Memory bandwidth override (decode is bandwidth-bound)."""
    dense_bf16: FlopRate | None = None
    """Dense BF16 peak override (prefill is compute-bound)."""
    battery: Energy | None = None
    """Battery energy; an option that needs more is infeasible."""
    # path physics (§12.3): all optional; leaving them out keeps an open, clean path
    connection: Literal["reused", "new-per-round"] | None = None
    """reused: one connection for all rounds; new-per-round: a handshake each round."""
    handshake: str = "tcp+tls1.3"
    """tcp+tls1.3 | tcp+tls1.2 | quic | quic-0rtt."""
    initial_window: int | None = Field(None, ge=1, description="segments")
    mss: Size = 1448.0
    """Payload bytes per segment."""
    idle_restart: bool = Field(True, description="slow start again after an idle round")
    loss: float = Field(0.0, ge=0, lt=1, description="random loss, not congestion")
    loss_down: float | None = Field(None, ge=0, lt=1, description="download loss if different")
    recovery: Literal["retransmit", "fec"] = "retransmit"
    """How random loss is repaired: retransmit or forward error correction."""
    fec_target: float = Field(0.999, gt=0, lt=1)
    """With recovery = "fec": probability a block decodes."""
    # packet-level evaluation
    evaluate: Literal["model", "sim"] = "model"
    """model: closed-form times; sim: the packet simulator (slower)."""
    runs: int = Field(1, ge=1, le=10_000, description='seeds when evaluate = "sim"')
    congestion: str = Field("cubic", description='controller when evaluate = "sim"')
    # prices: plain numbers in one currency of the user's choice
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
                f"unknown congestion controller {shown(value)};"
                f" known: {', '.join(sorted(CONTROLLERS))}"
            )
        return value

    @field_validator("handshake")
    @classmethod
    def _known_handshake(cls, value: str) -> str:
        from tierwise.model.transport import HANDSHAKE_RTTS

        if value not in HANDSHAKE_RTTS:
            raise ValueError(
                f"unknown handshake {shown(value)}; known: {', '.join(HANDSHAKE_RTTS)}"
            )
        return value

    @field_validator("mss")
    @classmethod
    def _positive_mss(cls, value: float) -> float:
        if not 1 <= value <= MAX_MSS_BYTES:
            raise ValueError(f"mss must lie in [1 B, 65,535 B] (one IP packet), got {value:g} B")
        return value

    @field_validator("measured_decode", mode="before")
    @classmethod
    def _measured_step(cls, value: object) -> object:
        from tierwise.errors import UnitError
        from tierwise.model.calibrate import parse_measured_step_s

        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            return value
        try:
            return parse_measured_step_s(value)  # type: ignore[arg-type]
        except UnitError as exc:
            raise ValueError(str(exc)) from None

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
    """Among options meeting the deadline, minimise energy, time or cost, or list the
    non-dominated options (pareto)."""
    baseline: str | None = Field(None, description="site the plan reports savings against")
    weights: dict[Literal["time", "energy", "cost"], Weight] = Field(
        default_factory=dict,
        description='objective = "pareto": weight of each metric over its best value '
        "(0 to 1e6; 1 each by default; not all 0)",
    )
    probability: float | None = Field(
        None,
        gt=0,
        le=1,
        description="with [variability]: an option meets the deadline only if P(T ≤ deadline) "
        "is at least this",
    )

    @field_validator("weights")
    @classmethod
    def _some_weight(cls, value: dict[str, float]) -> dict[str, float]:
        full = {"time": 1.0, "energy": 1.0, "cost": 1.0} | value
        if not any(full.values()):
            raise ValueError("at least one of time, energy and cost needs a weight above 0")
        return value


class Distribution(_Strict):
    """A distribution of a quantity, for ``[variability]``."""

    dist: Literal["uniform", "lognormal", "normal", "choice", "exponential"]
    """The distribution's family."""
    low: str | None = None
    """uniform: lower bound (a quantity)."""
    high: str | None = None
    """uniform: upper bound (a quantity)."""
    median: str | None = None
    """lognormal: median (a quantity)."""
    sigma: float | None = Field(None, ge=0)
    """lognormal: sigma of the log."""
    mean: str | None = None
    """normal or exponential: mean (a quantity)."""
    sd: str | None = None
    """normal: standard deviation (a quantity)."""
    values: list[str] | None = None
    """choice: the values (quantities)."""
    weights: list[float] | None = None
    """choice: their weights (default equal)."""


class SiteVariability(_Strict):
    """``[variability.site.<name>]``: how one site's path varies."""

    uplink: Distribution | None = None
    """Per-round uplink distribution."""
    rtt_jitter: Distribution | None = None
    """Per-round extra RTT distribution."""
    disconnect_probability: float = Field(0.0, ge=0, lt=1, description="per round")
    reconnect: Time = 0.0
    """Time to reconnect after a disconnect."""
    progress: Literal["kept", "lost"] = "kept"
    """Whether work done before a disconnect is kept or redone."""


class Variability(_Strict):
    """``[variability]``: Monte Carlo over per-round conditions."""

    trials: int = Field(10_000, ge=1, le=10_000_000)
    """Monte Carlo trials."""
    seed: int = Field(0, ge=0, le=2**63 - 1)
    """Random seed (non-negative)."""
    site: dict[str, SiteVariability] = Field(default_factory=dict)
    """Per-site variability, by site name."""


class Scenario(_Strict):
    """A whole scenario file."""

    task: Task
    """The task: its kind, sizes and compute."""
    site: list[Site] = Field(min_length=1)
    """Where the task may run, and the path to it (at least one)."""
    decision: Decision = Decision()
    """How to choose among sites."""
    variability: Variability | None = None
    """Monte Carlo over per-round conditions (optional)."""

    @model_validator(mode="after")
    def _unique_sites(self) -> Scenario:
        seen: set[str] = set()
        for i, s in enumerate(self.site):
            if s.name in seen:
                raise ErrorAt(
                    ("site", i, "name"),
                    f"two sites are named {shown(s.name)}; names must be unique",
                )
            seen.add(s.name)
        for name in self.variability.site if self.variability else ():
            if name not in seen:
                raise ErrorAt(
                    ("variability", "site", name),
                    f"expected the name of a site ({', '.join(sorted(seen))}), got {shown(name)}",
                )
        return self

    @model_validator(mode="after")
    def _site_references(self) -> Scenario:
        """``slowdown_from`` and ``decision.baseline`` name other sites; one factor per site."""
        names = [s.name for s in self.site]
        known = f"the name of a site ({', '.join(names)})"
        for i, s in enumerate(self.site):
            if s.measured_decode is not None and s.decode_slowdown != 1.0:
                raise ErrorAt(
                    ("site", i, "measured_decode"),
                    "give measured_decode or decode_slowdown, not both",
                )
            if s.slowdown_from is None:
                continue
            if s.slowdown_from not in names or s.slowdown_from == s.name:
                raise ErrorAt(
                    ("site", i, "slowdown_from"), f"expected {known}, got {s.slowdown_from!r}"
                )
            if self.site_named(s.slowdown_from).slowdown_from is not None:
                raise ErrorAt(
                    ("site", i, "slowdown_from"),
                    f"site {s.slowdown_from!r} borrows its own factor; name the measured site",
                )
        baseline = self.decision.baseline
        if baseline is not None and baseline not in names:
            raise ErrorAt(("decision", "baseline"), f"expected {known}, got {baseline!r}")
        return self

    def site_named(self, name: str) -> Site:
        for s in self.site:
            if s.name == name:
                return s
        raise KeyError(name)
