"""A site's decode slowdown from a measured step, or borrowed from another site (§12.5.2).

``measured_decode`` is divided by the bandwidth bound of what was measured: the
task's model at ``measured_weights`` (default the task's format) and
``measured_context`` (default the task's context) on the site's memory bandwidth.
Experiment 8-1: 25.83 ms against 9.12 ms (BF16, 8K, 1,792 GB/s) is 2.832, which
the chapter then applies to the cloud GPU too (``slowdown_from = "workstation"``).
"""

from __future__ import annotations

from tierwise.catalog import Catalog, ModelSpec
from tierwise.errors import CatalogError, ModelError, ScenarioError
from tierwise.model import device
from tierwise.model.calibrate import slowdown_factor
from tierwise.scenario.schema import Scenario, Site

__all__ = ["calibrated_site"]


def _get(catalog: Catalog, section: str, key: str, source: str, path: str):
    try:
        return catalog.get(section, key)
    except CatalogError as exc:
        raise ScenarioError(str(exc), source=source, path=path) from None


def _bandwidth(site: Site, catalog: Catalog, source: str) -> float:
    if site.memory_bandwidth is not None:
        return site.memory_bandwidth
    if site.hardware is not None:
        hw = _get(catalog, "hardware", site.hardware, source, f"site.{site.name}.hardware")
        return hw.memory_bandwidth
    raise ScenarioError(
        "measured_decode needs a memory bandwidth to compare with: set hardware or "
        "memory_bandwidth",
        source=source,
        path=f"site.{site.name}.measured_decode",
    )


def _measured_factor(scn: Scenario, site: Site, catalog: Catalog, source: str) -> tuple[float, str]:
    where = f"site.{site.name}.measured_decode"
    task = scn.task.model
    if task is None:
        raise ScenarioError("measured_decode needs [task.model]", source=source, path=where)
    spec: ModelSpec = _get(catalog, "model", task.model, source, "task.model.model")
    if spec.decode_weight_bytes is None or spec.kv_bytes_per_token is None:
        raise ScenarioError(
            f"model {spec.id!r} lacks decode_weight_bytes or kv_bytes_per_token",
            source=source,
            path=where,
        )
    fmt = site.measured_weights or task.weights
    quant = _get(catalog, "quant", fmt, source, f"site.{site.name}.measured_weights")
    context = task.context if site.measured_context is None else site.measured_context
    weights = device.weight_bytes(spec.decode_weight_bytes, quant.bytes_per_value)
    bound_s = float(
        device.decode_step_s(
            weights, spec.kv_bytes_per_token * context, _bandwidth(site, catalog, source)
        )
    )
    assert site.measured_decode is not None
    try:
        factor = slowdown_factor(site.measured_decode, bound_s)
    except ModelError as exc:
        raise ScenarioError(str(exc), source=source, path=where) from None
    note = (
        f"decode × {factor:.4g} = {site.measured_decode * 1e3:.4g} ms measured / "
        f"{bound_s * 1e3:.4g} ms bound ({fmt}, {context} tokens)"
    )
    return factor, note


def calibrated_site(
    scn: Scenario, site: Site, catalog: Catalog, source: str
) -> tuple[Site, str | None]:
    """``site`` with ``decode_slowdown`` set from its measurement or its lender, and a note."""
    lender = scn.site_named(site.slowdown_from) if site.slowdown_from else site
    if lender.measured_decode is not None:
        factor, note = _measured_factor(scn, lender, catalog, source)
    elif lender is not site:
        factor, note = lender.decode_slowdown, f"decode × {lender.decode_slowdown:g}"
    else:
        return site, None
    if lender is not site:
        note += f", as calibrated on {lender.name}"
    return site.model_copy(update={"decode_slowdown": factor}), note
