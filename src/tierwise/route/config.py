"""``route.toml``: the scenario language's ``[[site]]`` plus where each site answers.

A route site is a scenario site (tier, hardware, uplink/downlink/rtt — here *priors*
that live measurements replace —, energy, region for residency) with the model it
serves (``model``, ``weights``, ``context``), its ``url``, an API key read from an
environment variable, and how it is reached (``via = "direct"`` or ``"relay"``
through the relay client at ``relay``, or ``via = ["direct", "relay"]``: both, and the
router chooses per request by predicted time — the site becomes two routes, ``NAME``
direct and ``NAME+relay``, each with its own estimates, which the relay client's
measurements of the shared path feed; :mod:`tierwise.route.relaypath`). ``[decision]``
adds the default deadline and hysteresis to the scenario's objective and probability;
``[gateway]`` is the service.
Errors are the scenario loader's: file, key path, what was expected; exit 2.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from tierwise.errors import ScenarioError
from tierwise.scenario.loader import validate
from tierwise.scenario.schema import ErrorAt, Site, Weight
from tierwise.schemakeys import NoBooleanNumbers
from tierwise.units import PositiveTime, Size, Time

__all__ = [
    "RELAY_SUFFIX",
    "Gateway",
    "RouteConfig",
    "RouteDecision",
    "RouteSite",
    "Trace",
    "load_route",
]


Quality = Annotated[float, Field(gt=0, le=1)]


Via = Literal["direct", "relay"]
RELAY_SUFFIX = "+relay"  # the relay route of a site reached both ways


class _Strict(NoBooleanNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RouteSite(Site):
    """``[[site]]`` of route.toml: a scenario site and the endpoint that serves it."""

    url: str = Field(pattern=r"^https?://", description="base URL, e.g. http://10.0.0.2:8000")
    api_key_env: str | None = Field(None, description="environment variable holding the key")
    model: str = Field("qwen3-8b", description="catalog model id the site serves")
    weights: str = "q4_0"
    context: int = Field(4096, ge=0)
    served_model: str | None = Field(None, description="model name to send, if not `model`")
    decode_step: PositiveTime | None = Field(None, description="prior step if no hardware")
    prefill_per_token: Time | None = Field(None, description="prior prefill per prompt token")
    slots: int | None = Field(
        None,
        ge=1,
        description="requests the server runs at once, the rest waiting in its line "
        "(llama.cpp's server: 1); the gateway then keeps the line itself",
    )
    quality: float = Field(
        1.0,
        gt=0,
        le=1,
        description='the answers\' quality in (0, 1] (objective = "pareto"): e.g. a benchmark '
        "score of the model the site serves over the best one's",
    )
    task_quality: dict[str, Quality] | None = Field(
        None, description="quality per task type (the request's x-tierwise-task header)"
    )
    whole_as_stream: bool = Field(
        False,
        description="ask the site for a stream even when the client wants a whole answer, "
        "and assemble it: a client that leaves then stops the site's work (llama-cpp-python "
        "cannot stop a whole answer) and every answer times its first token; the first "
        "three go whole, their usage teaching the site's prompt count, which the "
        "assembled answers' usage then estimates",
    )
    via: Via | list[Via] = Field(
        "direct",
        description='"direct", "relay", or both as a list: two routes to the site, chosen '
        "per request by predicted time",
    )
    relay: str | None = Field(None, description="relay client (SOCKS5) host:port")
    route_of: str | None = Field(
        None, description="set by the loader: the site a via route belongs to"
    )
    ca_file: str | None = Field(
        None,
        description="PEM file of the CAs an https:// site's certificate must chain to "
        "(default: the system's)",
    )

    @model_validator(mode="after")
    def _relay_address(self) -> RouteSite:
        vias = self.via if isinstance(self.via, list) else [self.via]
        if not vias or len(set(vias)) != len(vias):
            raise ErrorAt(("via",), f'expected "direct", "relay" or both once each, got {vias}')
        if "relay" in vias and not self.relay:
            raise ErrorAt(("relay",), 'via = "relay" needs relay = "<host:port of the client>"')
        if self.hardware is None and self.decode_step is None:
            raise ErrorAt(("decode_step",), "needs hardware (catalog id) or decode_step")
        return self

    def tls(self) -> ssl.SSLContext | bool:
        """How an https:// site's certificate is checked: against ``ca_file``'s CAs if
        given (a private CA, a test CA), else the system's (``True``)."""
        if self.ca_file is None:
            return True
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ScenarioError(
                f"cannot load CA file {self.ca_file!r}: {getattr(exc, 'strerror', None) or exc}",
                path=f"site.{self.name}.ca_file",
            ) from None

    def api_key(self) -> str | None:
        """The key from ``api_key_env``, or None; a named but unset variable is an error."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ScenarioError(
                f"environment variable {self.api_key_env} is not set",
                path=f"site.{self.name}.api_key_env",
            )
        return key


class RouteDecision(_Strict):
    """``[decision]``: objective and constraints applied to every request."""

    objective: Literal["time", "energy", "pareto"] = Field(
        "time",
        description='"pareto": the best weighted score among the options no other beats on '
        "time, energy, cost and quality (tierwise.route.pareto)",
    )
    weights: dict[Literal["time", "energy", "cost", "quality"], Weight] = Field(
        default_factory=dict,
        description='objective = "pareto": weight of each metric over its best value (1 each '
        "by default; a request's x-tierwise-weights header overrides)",
    )
    deadline: PositiveTime | None = Field(None, description="when the request names none")
    probability: float | None = Field(None, gt=0, lt=1, description="P(T ≤ deadline) needed")
    residency: str = Field("any", description='"any", "device" or a region')
    hysteresis: float = Field(0.1, ge=0, lt=1, description="switch only if this much better")
    hysteresis_min: Time = Field(0.005, description="... and at least this many seconds better")
    max_attempts: int = Field(3, ge=1)
    strategy: Literal["predictive", "static", "lowest-latency"] = Field(
        "predictive",
        description="predictive: live estimates; static: the priors only (the offline plan); "
        "lowest-latency: an EWMA of each site's past latency (the common router: the "
        "whole body, failover only on a connection error, a 5xx or gateway.timeout)",
    )

    @field_validator("weights")
    @classmethod
    def _some_weight(cls, value: dict[str, float]) -> dict[str, float]:
        if value and not any({"time": 1.0, "energy": 1.0, "cost": 1.0, "quality": 1.0, **value}
                             .values()):  # fmt: skip
            raise ValueError("at least one of time, energy, cost and quality needs a weight > 0")
        return value


class Gateway(_Strict):
    """``[gateway]``: where the service listens and what it keeps."""

    host: str = "127.0.0.1"
    port: int = Field(8088, ge=0, le=65535)
    default_site: str | None = Field(None, description="other paths go here (default: first)")
    decisions_log: str = Field(
        "route-decisions.jsonl",
        description="one JSON line per request; {replica} is replaced by the replica's name",
    )
    probe_interval: PositiveTime = 2.0
    bench: PositiveTime = Field(5.0, description="first time a failing site is benched")
    failures_to_bench: int = Field(3, ge=1)
    timeout: PositiveTime = Field(60.0, description="per attempt when no deadline is set")
    keys_file: str | None = Field(
        None,
        description="client keys (tierwise route keys add NAME --keys-file F): a request "
        "then needs Authorization: Bearer <key> (401 without); the file holds SHA-256 "
        "digests and names, mode 0600; read again when it changes or on SIGHUP; a relative "
        "path is beside the config file",
    )
    public_without_keys: bool = Field(
        False, description="serve beyond loopback without keys (refused unless set)"
    )
    max_body: Size = Field(32 * 2**20, description="larger request bodies get 413")
    max_header: Size = Field(
        16 * 2**10, description="request line and headers larger than this get 431"
    )
    header_timeout: PositiveTime = Field(
        10.0,
        description="a request head not complete in this time gets 408 and a close; an idle "
        "kept-alive connection is closed after it too (keep it above clients' pool expiry: "
        "httpx and the OpenAI SDK keep idle connections 5 s)",
    )
    max_json_depth: int = Field(64, ge=1, le=512, description="JSON nesting past this gets 400")
    key_rate: float = Field(50.0, gt=0, description="requests per second per key (429 past)")
    key_burst: int = Field(100, ge=1, description="requests per key at once after a quiet spell")
    key_concurrency: int = Field(64, ge=1, description="requests in flight per key (429 past)")
    state: str | None = Field(
        None,
        description="redis://HOST:PORT/DB (rediss:// for TLS): share what this replica learns "
        "with the others of a fleet, and learn what they do (tierwise.route.fleetlink)",
    )
    state_password_file: str | None = Field(
        None,
        description="the state's password, or 'USER PASSWORD' for a Redis ACL user, on its "
        "first line; mode 0600",
    )
    state_ca_file: str | None = Field(
        None, description="PEM file of the CAs a rediss:// server must chain to"
    )
    replica: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="this replica's name in the fleet (default: host name and port)",
    )

    @model_validator(mode="after")
    def _state_url(self) -> Gateway:
        if self.state is not None:
            from tierwise.route.fleetconf import check_state_url

            check_state_url(self.state)
        if self.state is None and (self.state_password_file or self.state_ca_file):
            key = "state_password_file" if self.state_password_file else "state_ca_file"
            raise ErrorAt((key,), 'needs state = "redis://HOST:PORT/DB"')
        return self


class Trace(_Strict):
    """``[trace]``: OpenTelemetry traces of the requests (:mod:`tierwise.route.otel`)."""

    otlp: str | None = Field(
        None,
        pattern=r"^https?://",
        description="OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces "
        "(Jaeger, an OpenTelemetry collector); unset: no traces, at no cost",
    )
    sample: float = Field(1.0, gt=0, le=1, description="share of new traces kept")
    service: str = Field("tierwise-route", min_length=1, description="service.name")


class RouteConfig(_Strict):
    """A whole route.toml."""

    site: list[RouteSite] = Field(min_length=1)
    decision: RouteDecision = RouteDecision()
    gateway: Gateway = Gateway()
    trace: Trace = Trace()

    @model_validator(mode="after")
    def _names(self) -> RouteConfig:
        if any(isinstance(s.via, list) for s in self.site):
            return self.model_copy(update={"site": _routes(self.site)})._check_names()
        return self._check_names()

    def _check_names(self) -> RouteConfig:
        names = [s.name for s in self.site]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ErrorAt(("site", i, "name"), f"two sites are named {name!r}")
        default = self.gateway.default_site
        if default is not None and default not in names:
            raise ErrorAt(
                ("gateway", "default_site"), f"expected one of {', '.join(names)}, got {default!r}"
            )
        return self

    def site_named(self, name: str) -> RouteSite:
        return next(s for s in self.site if s.name == name)

    def siblings(self, name: str) -> list[str]:
        """The other routes of the site route ``name`` belongs to (none if it has one)."""
        group = self.site_named(name).route_of
        if group is None:
            return []
        return [s.name for s in self.site if s.route_of == group and s.name != name]


def _routes(sites: list[RouteSite]) -> list[RouteSite]:
    """Each site reached both ways becomes two routes: ``NAME`` direct and ``NAME+relay``."""
    out = []
    for s in sites:
        vias = s.via if isinstance(s.via, list) else [s.via]
        if len(vias) == 1:
            out.append(s.model_copy(update={"via": vias[0]}))
            continue
        for via in ("direct", "relay"):
            name = s.name if via == "direct" else s.name + RELAY_SUFFIX
            out.append(s.model_copy(update={"via": via, "name": name, "route_of": s.name}))
    return out


def load_route(path: str | Path) -> RouteConfig:
    """Read and validate ``path``; every problem is one ScenarioError naming file and key."""
    from tierwise.tomlfile import read_toml

    source = str(path)
    data = read_toml(path)
    cfg = validate(data, source, schema_model=RouteConfig)
    here = Path(path).parent  # a file the config names by a relative path is beside it
    g = cfg.gateway
    files = {k: str(here / v) for k in ("keys_file", "state_password_file", "state_ca_file")
             if (v := getattr(g, k)) and not Path(v).is_absolute()}  # fmt: skip
    if files:
        cfg = cfg.model_copy(update={"gateway": g.model_copy(update=files)})
    sites = [
        s.model_copy(update={"ca_file": str(here / s.ca_file)})
        if s.ca_file and not Path(s.ca_file).is_absolute()
        else s
        for s in cfg.site
    ]
    return cfg.model_copy(update={"site": sites})
