"""Predict a request's whole-task time on each site with the planner's model, and choose.

One model, not a second: the site's decode-step and prefill bounds come from
:func:`tierwise.plan.resolve.resolve_site` (catalog hardware × model, §12.1.5), and
the request's time from :func:`tierwise.plan.options.evaluate_option` — the same
``prepare + upload + propagation + model + download`` (and handshake/recovery terms
where the site's path physics asks for them) that ``tierwise plan`` prints. What
changes per request is the input: the request's own bytes and tokens, and the live
estimates (RTT, rates, queueing, calibration factors) in place of the priors.

The choice is :func:`tierwise.plan.choice.choose` (objective, deadline, residency),
with the probability constraint judged from the estimates' uncertainty and
hysteresis so that near-equal sites do not flap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tierwise.plan.choice import choose, chosen
from tierwise.plan.options import Option, evaluate_option
from tierwise.plan.resolve import SiteCosts, resolve_site
from tierwise.route.config import RouteConfig, RouteSite
from tierwise.route.estimate import Adaptive, LinearFit, normal_cdf
from tierwise.route.slots import SlotLearner, SlotQueue
from tierwise.scenario.schema import Decision, ModelWork, Scenario, Task

__all__ = ["Prediction", "RequestShape", "SiteModel", "pick", "site_model"]

PREFILL_REFERENCE_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 256
SMALL_BYTES = 16_000  # below this an upload's time is lost in the RTT; above it, rate counts
ANSWER_HEAD_BYTES = 400  # an answer's status line, headers and JSON frame around its tokens


@dataclass(frozen=True)
class RequestShape:
    """What the gateway knows of a request before sending it."""

    path: str
    bytes_up: int
    prompt_tokens: int
    output_tokens: int
    output_learned: bool
    stream: bool
    deadline_s: float | None
    residency: str
    include_usage: bool = False  # a stream whose client asked for a closing usage chunk
    weights: dict[str, float] | None = None  # objective = "pareto": the request's weights
    task: str | None = None  # its task type (a site's task_quality)


@dataclass
class SiteModel:
    """A site: its bounds from the catalog and its live estimates."""

    site: RouteSite
    costs: SiteCosts  # resolved once; per request only the times change
    step_bound_s: float
    prefill_bound_s: float  # per prompt token
    rtt_s: Adaptive
    up_rate: Adaptive
    down_rate: Adaptive
    queue_s: Adaptive
    prefill_factor: Adaptive
    decode_factor: Adaptive
    down_bytes_per_token: Adaptive  # a whole answer's bytes per output token
    # A stream's: each token its own server-sent event (~150–250 B of JSON), a whole
    # answer a few bytes of text — two quantities, not one noisy one.
    stream_bytes_per_token: Adaptive = field(default_factory=lambda: Adaptive(200.0))
    error_rel: Adaptive = field(default_factory=lambda: Adaptive(0.2))
    # random loss each way (the path's, not congestion): the site's priors, then what a
    # relay client measures on the path (tierwise.route.relaypath); a direct route's TCP
    # pays recovery for it in the planner's model, a relay route's FEC repairs it
    loss_up: Adaptive = field(default_factory=lambda: Adaptive(0.0))
    loss_down: Adaptive = field(default_factory=lambda: Adaptive(0.0))
    failure_p: float = 0.0
    # The server's time learned from the gateway's own clock (a site that sends no
    # Server-Timing, such as llama.cpp): see ``service_features``.
    service: LinearFit | None = None
    slots: SlotQueue | None = None  # the line at a site whose slots are known
    slot_learner: SlotLearner | None = None  # a site without ``slots``: learned from streams
    # The site's own count of a prompt's tokens from the gateway's estimate (characters
    # / 4): its tokenizer and chat template, learned from the usage of whole answers.
    prompt_map: LinearFit = field(default_factory=lambda: prompt_token_map())
    # The planner's inputs built for the last request, reused while they still hold:
    # the site with the live estimates, the task, the scenario (pydantic copies cost
    # more than the evaluation itself, and between two samples they do not change).
    _memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def planner_inputs(self, req: RequestShape, bytes_down: float) -> Scenario:
        """The scenario ``evaluate_option`` reads for ``req``: this site with its live
        estimates in place of the priors, the request's bytes and deadline as the task.

        Each answer moves an estimate, so the site and the scenario are made again for
        most requests: as shallow copies (:func:`_evolve_model`), not pydantic's
        ``model_copy``, which cost a prediction more than evaluating it."""
        memo = self._memo
        key = (
            self.rtt_s.value,
            self.up_rate.value,
            self.down_rate.value,
            _loss(self.loss_up.value),
            _loss(self.loss_down.value),
        )
        if memo.get("site_key") != key:
            relay = {"recovery": "fec", "connection": None} if self.site.via == "relay" else {}
            memo["site"] = _evolve_model(
                self.site,
                rtt=key[0],
                uplink=max(key[1], 1.0),
                downlink=max(key[2], 1.0),
                loss=key[3],
                loss_down=key[4],
                **relay,
            )
            memo["site_key"], memo["scenario"] = key, None
        task_key = (req.bytes_up, bytes_down, req.deadline_s)
        if memo.get("task_key") != task_key:
            memo["task"] = _evolve_model(
                _TASK, upload=float(req.bytes_up), download=bytes_down, deadline=req.deadline_s
            )
            memo["task_key"], memo["scenario"] = task_key, None
        if memo.get("scenario") is None:
            memo["scenario"] = _evolve_model(_SCENARIO, task=memo["task"], site=[memo["site"]])
        return memo["scenario"]

    def answer_bytes(self, output_tokens: int, stream: bool) -> float:
        """An answer's expected size in bytes: headers and framing, and per output token
        what this site's answers of the same kind (stream or whole) carried."""
        per_token = self.stream_bytes_per_token if stream else self.down_bytes_per_token
        return ANSWER_HEAD_BYTES + output_tokens * per_token.value

    def estimates(self) -> dict[str, Any]:
        """The live estimates with their uncertainty and the filter each uses (for logs)."""
        names = (
            "rtt_s",
            "up_rate",
            "down_rate",
            "queue_s",
            "prefill_factor",
            "decode_factor",
            "loss_up",
            "loss_down",
        )
        out: dict[str, Any] = {}
        for name in names:
            a: Adaptive = getattr(self, name)
            out[name] = {"value": a.value, "sd": a.sd, "filter": a.chosen, "n": a.samples}
        return out

    def service_fit(self) -> dict[str, Any] | None:
        """The learned service model (for logs), or None before its first sample."""
        if self.service is None or not self.service.n:
            return None
        f = self.service
        return {"theta": f.theta, "paces": f.paces, "n": f.n, "features": SERVICE_FEATURES}

    def slots_said(self) -> dict[str, Any] | None:
        """The site's slots and where they come from (for logs), or None (not known)."""
        if self.slots is None:
            return None
        how = "config" if self.slot_learner is None else "learned from streams"
        return {"value": self.slots.slots, "from": how}

    def prompt_tokens(self, estimated: int) -> int:
        """The site's count of a prompt the gateway estimated at ``estimated`` tokens:
        the learned map once an answer's ``usage`` has told it, else the estimate."""
        if not self.prompt_map.n:
            return estimated
        return max(round(self.prompt_map.predict(prompt_map_features(estimated))), 1)

    def heard_from(self) -> bool:
        """Whether any answer of this site's server has been learned (here, or at another
        replica of the fleet): until then its server time is the config's prior."""
        return (
            self.error_rel.updates > 0
            or self.learned_service()
            or self.decode_factor.updates > 0
            or self.queue_s.updates > 0
        )

    def learned_service(self) -> bool:
        """Whether the server's time comes from :attr:`service` (it has samples)."""
        return self.service is not None and self.service.n > 0

    def service_s(self, prompt_tokens: int, output_tokens: int) -> tuple[float, float]:
        """Time to first token and the decode after it, from :attr:`service`."""
        assert self.service is not None
        first, rest = service_features(prompt_tokens, output_tokens)
        return max(self.service.predict(first), 0.0), max(self.service.predict(rest), 0.0)


SERVICE_FEATURES = ["1", "n/1e3", "(n/1e3)^2", "(k-1)/1e2", "(k-1)/1e2*(n+k/2)/1e3"]


def prompt_token_map() -> LinearFit:
    """A site's tokens as ``a + b·estimate`` (b per thousand): llama.cpp's chat template
    adds a fixed count per request, its vocabulary a ratio (2.5× for the random model's
    byte-level one). A tokenizer does not drift: no forgetting, no paces."""
    return LinearFit(theta=[0.0, 1000.0], prior_sd=[50.0, 1000.0], rel_noise=0.02,
                     abs_noise=2.0, forget=0.0)  # fmt: skip


def prompt_map_features(estimated: int) -> list[float]:
    return [1.0, estimated / 1e3]


def service_features(prompt_tokens: int, output_tokens: int) -> tuple[list[float], list[float]]:
    """The features of the server's time for ``n`` prompt and ``k`` output tokens, split
    into the time to first token (a fixed cost, prefill linear in ``n`` and attention's
    ``n²``) and the ``k − 1`` decode steps after it (each reading the weights, and a KV
    cache that grows with the context ``n + k/2``). The sum of both is the whole."""
    a = prompt_tokens / 1e3
    b = max(output_tokens - 1, 0) / 1e2
    c = (prompt_tokens + output_tokens / 2) / 1e3
    return [1.0, a, a * a, 0.0, 0.0], [0.0, 0.0, 0.0, b, b * c]


def site_model(site: RouteSite, catalog: Any, source: str) -> SiteModel:
    """Resolve ``site``'s bounds with the planner and seed its estimates with the priors."""
    bound = site.model_copy(update={"decode_slowdown": 1.0, "prefill": None})
    task = Task(
        kind="request",
        model=ModelWork(
            model=site.model,
            weights=site.weights,
            context=site.context,
            decode_tokens=1,
            prefill_tokens=PREFILL_REFERENCE_TOKENS if _has_peak(site, catalog) else 0,
        ),
    )
    if site.hardware is None:
        costs = SiteCosts(bound, 0.0, 0.0, 1, site.power, site.energy_per_token, None)
    else:
        scn = Scenario.model_construct(task=task, site=[bound], decision=Decision())
        costs = resolve_site(scn, bound, catalog, source)
    step_s = site.decode_step or costs.model_s
    prefill_s = site.prefill_per_token
    if prefill_s is None:
        prefill_s = costs.prepare_s / PREFILL_REFERENCE_TOKENS
    remote = site.remote
    step_prior = step_s * site.decode_slowdown
    service = LinearFit(
        theta=[0.0, prefill_s * 1e3, 0.0, step_prior * 1e2, 0.0],
        prior_sd=[0.05, max(prefill_s * 1e3, 1e-3), max(prefill_s * 1e3, 1e-3),
                  step_prior * 1e2, step_prior * 1e2],
        # A server on a shared host is 15-30 % off from one request to the next (the same
        # request repeated: docs/validation.md). Told 5 % and given fast paces, the fit took
        # each slow or fast burst as the server's new speed and mispredicted the next
        # burst the other way (40-80 %); told 15 %, without paces, it averages them.
        rel_noise=0.15,
        pace_alpha=0.0,
        groups=[0, 0, 0, 1, 1],  # prefill and decode (paces, if any, of their own)
    )  # fmt: skip
    return SiteModel(
        site=site,
        costs=costs,
        step_bound_s=step_s,
        prefill_bound_s=prefill_s,
        rtt_s=Adaptive(site.rtt if remote else 0.0),
        up_rate=Adaptive(site.uplink if isinstance(site.uplink, float) else 1e9),
        down_rate=Adaptive(site.downlink or 1e9),
        queue_s=Adaptive(site.prefill or 0.0),
        prefill_factor=Adaptive(1.0),
        decode_factor=Adaptive(site.decode_slowdown),
        down_bytes_per_token=Adaptive(8.0),
        service=service,
        slots=SlotQueue(site.slots) if site.slots else None,
        slot_learner=None if site.slots else SlotLearner(),
        loss_up=Adaptive(site.loss),
        loss_down=Adaptive(site.loss_on_download),
    )


MAX_LOSS = 0.5  # beyond this a loss estimate is a broken path, not random loss


def _evolve_model(model: Any, **changes: Any) -> Any:
    """A shallow copy of pydantic model ``model`` with ``changes`` (field values, not
    validated: ours, already of their type) — what ``model.model_copy(update=changes)``
    makes, without its per-copy dictionary copies of extras and private attributes."""
    new = object.__new__(type(model))
    object.__setattr__(new, "__dict__", {**model.__dict__, **changes})
    object.__setattr__(
        new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | changes.keys()
    )
    object.__setattr__(new, "__pydantic_extra__", model.__pydantic_extra__)
    object.__setattr__(new, "__pydantic_private__", model.__pydantic_private__)
    return new


def _loss(value: float) -> float:
    """A loss estimate as the planner takes it: in [0, MAX_LOSS], to 0.1 % (a memo key)."""
    return round(min(max(value, 0.0), MAX_LOSS), 3)


def _has_peak(site: RouteSite, catalog: Any) -> bool:
    """Whether a prefill bound can be derived (a dense BF16 peak); else it is learned."""
    if site.dense_bf16 is not None:
        return True
    hw = catalog.hardware.get(site.hardware) if site.hardware else None
    return hw is not None and hw.dense_bf16 is not None


# Built once: per request only a few fields change (model_copy is ~10× cheaper than
# model_construct, which re-derives every default).
_TASK = Task.model_construct(kind="request")
_SCENARIO = Scenario.model_construct(task=_TASK, site=[], decision=Decision())


@dataclass
class Prediction:
    """One site's predicted whole-task time for one request."""

    site: str
    option: Option
    sigma_s: float
    expected_s: float  # time_s with the retry cost of a failed attempt
    p_meet: float | None
    stages_s: dict[str, float] = field(default_factory=dict)  # queue, first token, decode

    def to_dict(self) -> dict[str, Any]:
        o = self.option
        return {
            "time_s": o.time_s,
            "sigma_s": self.sigma_s,
            "expected_s": self.expected_s,
            "p_meet": self.p_meet,
            "feasible": o.feasible,
            "reasons": o.reasons,
            "energy_j": o.energy_j,
            "breakdown_s": o.breakdown_s,
            "stages_s": self.stages_s,
        }


def predict(
    m: SiteModel, req: RequestShape, benched: bool = False, now: float | None = None
) -> Prediction:
    """Whole-task time of ``req`` on ``m``'s site with the live estimates (§12.1, §12.5.3).

    A site whose server time is learned from the gateway's clock (:attr:`SiteModel.service`)
    is predicted from that fit; a site whose line the gateway keeps (``slots``) waits
    what the line ahead still needs at ``now`` (monotonic clock)."""
    s = m.site
    n_out = req.output_tokens
    bytes_down = m.answer_bytes(n_out, req.stream)
    scn = m.planner_inputs(req, bytes_down)
    n_in = m.prompt_tokens(req.prompt_tokens)
    if m.learned_service():
        prefill_s, decode_s = m.service_s(n_in, n_out)
    else:
        prefill_s = n_in * m.prefill_bound_s * m.prefill_factor.value
        decode_s = n_out * m.step_bound_s * m.decode_factor.value
    queue_s = m.queue_s.value
    if m.slots is not None:
        queue_s = m.slots.wait_s(now) if now is not None else 0.0
    elif m.learned_service():
        queue_s = 0.0  # folded into the fit: no server timing ever split it out
    reasons = _reasons(s, req, benched)
    costs = _evolve(
        m.costs,
        site=scn.site[0],
        model_s=decode_s,
        prepare_s=queue_s + prefill_s,
        tokens_per_round=n_out,
        reasons=reasons,
    )
    option = evaluate_option(scn, costs, "route")
    sigma = _sigma(m, req, option, prefill_s, decode_s)
    p_meet = None
    if req.deadline_s is not None:
        p_meet = normal_cdf((req.deadline_s - option.time_s) / max(sigma, 1e-9))
    expected = option.time_s * (1.0 + m.failure_p)
    stages = {"queue": queue_s, "first_token": prefill_s, "decode": decode_s}
    return Prediction(s.name, option, sigma, expected, p_meet, stages)


def _evolve(obj: Any, **changes: Any) -> Any:
    """A shallow copy of dataclass instance ``obj`` with ``changes`` — what
    ``dataclasses.replace`` does, without re-running ``__init__`` over every field
    (its fields are already checked; this runs for every site of every request)."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__, **changes)
    return new


def _reasons(s: RouteSite, req: RequestShape, benched: bool) -> list[str]:
    reasons = []
    if s.remote and req.residency == "device":
        reasons.append("residency = device: the input may not leave the device")
    elif s.remote and req.residency not in ("any", s.region):
        reasons.append(f"residency = {req.residency}: site has region {s.region}")
    if benched:
        reasons.append("benched by the circuit breaker after repeated failures")
    return reasons


def _sigma(m: SiteModel, req: RequestShape, o: Option, prefill_s: float, decode_s: float) -> float:
    """Standard deviation of the prediction: each estimate's spread through its term, plus
    the site's recent relative prediction error."""
    b = o.breakdown_s
    terms = [
        b.get("upload", 0.0) * m.up_rate.sd / max(m.up_rate.value, 1e-9),
        b.get("propagation", 0.0) and m.rtt_s.sd,
        m.queue_s.sd,
        prefill_s * m.prefill_factor.sd / max(m.prefill_factor.value, 1e-9),
        decode_s * m.decode_factor.sd / max(m.decode_factor.value, 1e-9),
        o.time_s * min(m.error_rel.value, 1.0),
    ]
    if req.output_learned:
        terms.append(decode_s * 0.3)
    return math.sqrt(sum(t * t for t in terms))


@dataclass(frozen=True, slots=True)
class Reason:
    """The one-line reason for a planner's choice, composed when it is read: the decisions
    log is written after the answer, and the sentence (durations formatted, the sites
    compared) cost a request more than the choice itself."""

    options: list[Option]
    objective: str
    prefix: str = ""

    def __str__(self) -> str:
        return self.prefix + choose(self.options, self.objective)[1]


def pick(
    preds: list[Prediction], cfg: RouteConfig, req: RequestShape, previous: str | None
) -> tuple[list[str], str | Reason]:
    """Sites in the order to try them (the choice first) and the one-line reason (``str()``
    of it: :class:`Reason` composes it only then).

    The choice is the planner's; with ``decision.probability`` a site meets the deadline
    only if P(T ≤ deadline) is high enough. The previous choice stays unless the new one
    is better by ``hysteresis`` (relative) and ``hysteresis_min`` (absolute).
    """
    d = cfg.decision
    options = []
    for p in preds:
        o = _evolve(p.option, time_s=p.expected_s)
        if req.deadline_s is not None:
            o.meets_deadline = meets(p, d, req.deadline_s)
        options.append(o)
    feasible = sorted((o for o in options if o.feasible), key=lambda o: o.time_s)
    choice = chosen(options, d.objective) or (feasible[0].site if feasible else None)
    reason: str | Reason = Reason(options, d.objective)
    by_name = {o.site: o for o in options}
    if choice and previous in by_name and previous != choice:
        prev, new = by_name[previous], by_name[choice]
        if prev.feasible and prev.meets_deadline is not False and _close(prev, new, d):
            choice, reason = previous, f"kept {previous} (within hysteresis of {new.site})"
    order = ([choice] if choice else []) + [o.site for o in feasible if o.site != choice]
    return order, reason


def meets(p: Prediction, d: Any, deadline_s: float) -> bool:
    """Whether ``p`` meets the deadline: P(T ≤ deadline) ≥ ``decision.probability`` when
    set, else its expected time within the deadline."""
    if d.probability:
        return p.p_meet is not None and p.p_meet >= d.probability
    return p.expected_s <= deadline_s


def _close(prev: Option, new: Option, d: Any) -> bool:
    if d.objective == "energy" and prev.energy_key != new.energy_key:
        return prev.energy_key <= new.energy_key * (1 + d.hysteresis)
    margin = max(new.time_s * d.hysteresis, d.hysteresis_min)
    return prev.time_s <= new.time_s + margin
