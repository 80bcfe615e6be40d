"""Resolve each site's compute costs from the task, the site and the catalog.

This is where ``[task.model]`` meets hardware: decode time from bytes read per
step and memory bandwidth (× the site's calibration slowdown), prefill from
FLOPs and the dense BF16 peak, energy from power or energy per token, and the
feasibility checks that come before any timing (residency, memory, battery).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tierwise.catalog import Catalog, Hardware, ModelSpec
from tierwise.errors import CatalogError, ScenarioError
from tierwise.model import device
from tierwise.plan.calibration import calibrated_site
from tierwise.scenario.schema import Scenario, Site, Task

__all__ = ["SiteCosts", "resolve_site"]


@dataclass(frozen=True)
class SiteCosts:
    """Everything about running the task's model on one site, SI units."""

    site: Site
    model_s: float  # per round (loop), per request, or per chunk (stream)
    prepare_s: float  # once, when the site takes over
    tokens_per_round: int
    power_w: float | None
    energy_per_token_j: tuple[float, float] | None
    prompts_per_charge: tuple[float, float] | None
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    input_tokens: int = 0  # context billed once by a per-token price (plan.cost)
    egress_bytes_per_round: float = 0.0  # what the site sends back each round

    @property
    def feasible(self) -> bool:
        return not self.reasons


def _where(site: Site, key: str) -> str:
    return f"site.{site.name}.{key}"


def _hardware(site: Site, catalog: Catalog, source: str) -> Hardware | None:
    if site.hardware is None:
        return None
    try:
        return catalog.get("hardware", site.hardware)
    except CatalogError as exc:
        raise ScenarioError(str(exc), source=source, path=_where(site, "hardware")) from None


def _pick(site_value: float | None, hw: Hardware | None, attr: str) -> float | None:
    if site_value is not None:
        return site_value
    return getattr(hw, attr) if hw is not None else None


def resolve_site(scn: Scenario, site: Site, catalog: Catalog, source: str) -> SiteCosts:
    """Compute costs and feasibility of running ``scn.task`` on ``site``."""
    task = scn.task
    hw = _hardware(site, catalog, source)
    spec = _model_spec(task, catalog, source)
    notes: list[str] = []
    site, calibration = calibrated_site(scn, site, catalog, source)
    if calibration:
        notes.append(calibration)
    model_s, tokens = _model_time(task, site, hw, spec, catalog, source, notes)
    prepare_s = _prepare_time(task, site, hw, spec, source, notes)
    ept = site.energy_per_token or (hw.energy_per_token if hw else None)
    reasons = _infeasibility(task, site, hw, spec, catalog)
    return SiteCosts(
        site=site,
        model_s=model_s,
        prepare_s=prepare_s,
        tokens_per_round=tokens,
        power_w=_pick(site.power, hw, "power"),
        energy_per_token_j=tuple(ept) if ept else None,  # type: ignore[arg-type]
        prompts_per_charge=hw.prompts_per_charge if hw else None,
        reasons=reasons,
        notes=notes,
        input_tokens=task.model.prefill_tokens if task.model else 0,
        egress_bytes_per_round=task.download if site.remote else 0.0,
    )


def _model_spec(task: Task, catalog: Catalog, source: str) -> ModelSpec | None:
    if task.model is None:
        return None
    try:
        return catalog.get("model", task.model.model)
    except CatalogError as exc:
        raise ScenarioError(str(exc), source=source, path="task.model.model") from None


def _bytes_per_value(task: Task, catalog: Catalog, source: str) -> float:
    assert task.model is not None
    try:
        return catalog.get("quant", task.model.weights).bytes_per_value
    except CatalogError as exc:
        raise ScenarioError(str(exc), source=source, path="task.model.weights") from None


def _model_time(task, site, hw, spec, catalog, source, notes) -> tuple[float, int]:
    """Model time per round/request/chunk, and tokens generated per round."""
    compute = task.compute
    if isinstance(compute, float):  # stream: a time per chunk
        return compute, 0
    tokens = task.model.decode_tokens if task.model else 0
    if compute is not None and compute.time is not None:
        return compute.time, tokens
    if compute is not None and compute.flops is not None:
        peak = _need(
            _pick(site.dense_bf16, hw, "dense_bf16"),
            site,
            "dense_bf16",
            hw,
            "a dense BF16 peak to turn task.compute.flops into time",
            source,
        )
        return float(device.compute_bound_s(compute.flops, peak)), tokens
    if task.model is None or spec is None:
        return 0.0, 0  # chunked requests carry their own compute
    return _decode_time(task, site, hw, spec, catalog, source, notes), tokens


def _decode_time(task, site, hw, spec, catalog, source, notes) -> float:
    bandwidth = _need(
        _pick(site.memory_bandwidth, hw, "memory_bandwidth"),
        site,
        "memory_bandwidth",
        hw,
        "memory bandwidth to derive decode time",
        source,
    )
    if spec.decode_weight_bytes is None or spec.kv_bytes_per_token is None:
        raise ScenarioError(
            f"model {spec.id!r} lacks decode_weight_bytes or kv_bytes_per_token",
            source=source,
            path="task.model.model",
        )
    weights = device.weight_bytes(spec.decode_weight_bytes, _bytes_per_value(task, catalog, source))
    kv = spec.kv_bytes_per_token * task.model.context
    step = float(device.decode_step_s(weights, kv, bandwidth))
    if site.decode_slowdown != 1.0 and site.measured_decode is None and not site.slowdown_from:
        notes.append(f"decode × {site.decode_slowdown:g} (measured / bound)")
    return task.model.decode_tokens * step * site.decode_slowdown


def _prepare_time(task, site, hw, spec, source, notes) -> float:
    if site.prefill is not None:
        return site.prefill
    if task.model is None or task.model.prefill_tokens == 0 or spec is None:
        return 0.0
    if spec.prefill_flops is None or spec.prefill_reference_tokens is None:
        raise ScenarioError(
            f"model {spec.id!r} has no prefill_flops; set site.{site.name}.prefill",
            source=source,
            path="task.model.prefill_tokens",
        )
    peak = _need(
        _pick(site.dense_bf16, hw, "dense_bf16"),
        site,
        "dense_bf16",
        hw,
        'a dense BF16 peak to derive the prefill time (or set prefill = "0 s")',
        source,
    )
    flops = spec.prefill_flops * task.model.prefill_tokens / spec.prefill_reference_tokens
    return float(device.compute_bound_s(flops, peak))


def _need(value, site: Site, key: str, hw: Hardware | None, why: str, source: str) -> float:
    if value is None:
        what = f"hardware {hw.id!r} has none" if hw else "no hardware is given"
        raise ScenarioError(
            f"needs {why}: {what}; set site.{site.name}.{key}",
            source=source,
            path=_where(site, key),
        )
    return value


def _infeasibility(task: Task, site: Site, hw, spec, catalog) -> list[str]:
    reasons: list[str] = []
    if site.remote and task.residency != "any":
        if task.residency == "device":
            reasons.append("residency = device: the raw input may not leave the device")
        elif site.region != task.residency:
            where = f"region {site.region}" if site.region else "no region given"
            reasons.append(f"residency = {task.residency}: site has {where}")
    if spec is not None and task.model is not None:
        reasons += _memory_reasons(task, site, hw, spec, catalog)
    return reasons


def _memory_reasons(task, site, hw, spec, catalog) -> list[str]:
    memory = _pick(site.memory, hw, "memory")
    reserve = _pick(site.memory_reserve, hw, "memory_reserve") or 0.0
    if memory is None or spec.resident_bytes is None or spec.kv_bytes_per_token is None:
        return []
    bpv = catalog.get("quant", task.model.weights).bytes_per_value
    resident = float(device.weight_bytes(spec.resident_bytes, bpv))
    need = resident + spec.kv_bytes_per_token * task.model.context
    if need <= memory - reserve:
        return []
    return [
        f"memory: weights + KV need {need / 1e9:.2f} GB, "
        f"{(memory - reserve) / 1e9:.2f} GB available after the reserve"
    ]
