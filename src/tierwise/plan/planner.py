"""Choose where the task runs, and find what would change the choice.

Feasibility comes first (residency, memory, battery), then the deadline, then
the objective (energy or time), ties broken by time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierwise.catalog import Catalog, load_catalog
from tierwise.model.derive import complete_catalog
from tierwise.plan.choice import choose, constrain
from tierwise.plan.compare import compare_options
from tierwise.plan.options import Option, evaluate_option
from tierwise.plan.resolve import SiteCosts, resolve_site
from tierwise.scenario.loader import load_scenario
from tierwise.scenario.schema import Scenario

__all__ = ["Plan", "choose", "plan", "plan_file"]


@dataclass
class Plan:
    scenario: Scenario
    options: list[Option]
    choice: str | None
    reason: str
    fastest: str | None
    thresholds: list[dict[str, Any]] = field(default_factory=list)
    monte_carlo: dict[str, Any] | None = None
    costs: list[SiteCosts] = field(default_factory=list, repr=False)
    source: str = "<scenario>"
    warnings: list[str] = field(default_factory=list)  # catalog numbers vs architecture
    comparison: list[dict[str, Any]] = field(default_factory=list)  # plan.compare

    def option(self, site: str) -> Option:
        """The option of the site named ``site``."""
        return next(o for o in self.options if o.site == site)

    def time_at_uplink(self, site: str, uplink_bytes_per_s: float) -> float:
        """The site's whole-task time if its uplink were a constant ``uplink_bytes_per_s``."""
        c = next(c for c in self.costs if c.site.name == site)
        return evaluate_option(self.scenario, c, self.source, uplink=uplink_bytes_per_s).time_s

    def to_dict(self) -> dict[str, Any]:
        task = self.scenario.task
        out: dict[str, Any] = {
            "task": {
                "name": task.name,
                "kind": task.kind,
                "deadline_s": task.deadline,
                "objective": self.scenario.decision.objective,
            },
            "options": [o.to_dict() for o in self.options],
            "choice": self.choice,
            "reason": self.reason,
            "fastest": self.fastest,
            "thresholds": self.thresholds,
            "comparison": self.comparison,
        }
        if self.scenario.decision.baseline is not None:
            out["baseline"] = self.scenario.decision.baseline
        if self.monte_carlo is not None:
            out["monte_carlo"] = self.monte_carlo
        if self.warnings:
            out["warnings"] = self.warnings
        return out


def evaluate_all(
    scn: Scenario, costs: list[SiteCosts], source: str, uplinks: dict[str, Any] | None = None
) -> list[Option]:
    """Every site's option, with ``uplinks`` overriding some sites' uplink."""
    uplinks = uplinks or {}
    options = []
    for c in costs:
        opt = evaluate_option(scn, c, source, uplinks.get(c.site.name))
        constrain(opt, c)
        _finite(opt)
        options.append(opt)
    return options


def _finite(option: Option) -> None:
    """A time that overflowed (or is NaN) is never a feasible answer: say so instead."""
    if option.feasible and not math.isfinite(option.time_s):
        option.feasible = False
        option.reasons.append("the time is not a finite number: the inputs overflow floating point")


def plan(
    scn: Scenario,
    catalog: Catalog | None = None,
    *,
    source: str = "<scenario>",
    thresholds: bool = True,
    monte_carlo: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> Plan:
    """Evaluate every site, choose, and (optionally) find thresholds and Monte Carlo odds.

    ``progress(done, total)`` follows the threshold search site by site.
    """
    import numpy as np

    catalog = complete_catalog(catalog or load_catalog())
    with np.errstate(all="ignore"):  # overflow becomes inf, then an infeasible option
        return _plan(scn, catalog, source, thresholds, monte_carlo, progress)


def _plan(
    scn: Scenario,
    catalog: Catalog,
    source: str,
    thresholds: bool,
    monte_carlo: bool,
    progress: Callable[[int, int], None] | None = None,
) -> Plan:
    from tierwise.plan.thresholds import find_thresholds

    costs = [resolve_site(scn, s, catalog, source) for s in scn.site]
    options = evaluate_all(scn, costs, source)
    choice, reason, fastest = choose(options, scn.decision.objective, scn.decision.weights)
    result = Plan(scn, options, choice, reason, fastest, costs=costs, source=source)
    result.warnings = list(catalog.warnings)
    result.comparison = compare_options(result, scn.decision.baseline)
    if thresholds:
        result.thresholds = find_thresholds(scn, costs, result, source, progress)
    if monte_carlo and scn.variability is not None:
        from tierwise.plan.montecarlo import monte_carlo as run_mc

        result.monte_carlo = run_mc(scn, costs, source, options)
        _apply_probability(result, scn)
        result.comparison = compare_options(result, scn.decision.baseline)
    return result


def _apply_probability(result: Plan, scn: Scenario) -> None:
    """With ``decision.probability``, an option meets the deadline only with enough odds."""
    target = scn.decision.probability
    if target is None or scn.task.deadline is None or result.monte_carlo is None:
        return
    for o in result.options:
        p = result.monte_carlo["sites"].get(o.site, {}).get("p_meet")
        if p is not None and o.meets_deadline and p < target:
            o.meets_deadline = False
            o.notes.append(f"P(T ≤ deadline) = {p:.4f} < {target:g}")
    result.choice, result.reason, result.fastest = choose(
        result.options, scn.decision.objective, scn.decision.weights
    )


def plan_file(
    path: str | Path,
    overrides: Iterable[str] = (),
    catalog_files: Iterable[str | Path] = (),
    progress: Callable[[int, int], None] | None = None,
) -> Plan:
    """Load, override and plan a scenario file (``progress``: see :func:`plan`)."""
    scn = load_scenario(path, overrides)
    return plan(scn, load_catalog(list(catalog_files)), source=str(path), progress=progress)
