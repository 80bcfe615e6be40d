"""The gateway's Prometheus metrics (``/metrics``), in a registry of its own."""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["Metrics"]

TIME_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
DECIDE_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01)
ERROR_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2)
STALENESS_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """Counters, gauges and histograms of requests, predictions and estimates."""

    def __init__(self, replica: str | None = None) -> None:
        self.replica = replica  # every sample carries replica="…" when set (a fleet)
        # each labelled child looked up once (``labels()`` takes a lock and checks its
        # values every call); as many as sites × (outcomes, quantities, stages) at most
        self._children: dict[tuple[Any, ...], Any] = {}
        r = self.registry = CollectorRegistry()
        p = "tierwise_route_"
        self.requests = Counter(
            p + "requests", "Attempts by site and outcome", ["site", "outcome"], registry=r
        )
        self.failovers = Counter(
            p + "failovers", "Attempts that failed over to another site", registry=r
        )
        self.no_site = Counter(p + "no_site", "Requests no site could answer", registry=r)
        self.internal_errors = Counter(
            p + "internal_errors",
            "Requests answered 500 for a fault inside the gateway (its traceback on stderr)",
            registry=r,
        )
        self.resent = Counter(
            p + "upstream_resent",
            "Requests sent again on a new connection: a reused one closed before any answer",
            ["site"],
            registry=r,
        )
        self.probes = Counter(p + "probes", "Light probes that succeeded", ["site"], registry=r)
        self.seconds = Histogram(
            p + "request_seconds",
            "Whole-task time at the chosen site",
            ["site"],
            buckets=TIME_BUCKETS_S,
            registry=r,
        )
        self.decide = Histogram(
            p + "decide_seconds", "Time to predict and choose", buckets=DECIDE_BUCKETS_S, registry=r
        )
        self.error = Histogram(
            p + "prediction_error_ratio",
            "|actual − predicted| / actual",
            ["site"],
            buckets=ERROR_BUCKETS,
            registry=r,
        )
        self.predicted = Gauge(
            p + "predicted_seconds", "Last prediction for the chosen site", ["site"], registry=r
        )
        self.estimate = Gauge(
            p + "estimate", "Live estimate (SI units)", ["site", "quantity"], registry=r
        )
        self.benched = Gauge(
            p + "benched", "1 while the circuit breaker benches the site", ["site"], registry=r
        )
        self.stage = Counter(
            p + "stage_seconds",
            "Client-visible time by stage (network, serialization, scheduling, compute, "
            "deserialization, io_wait, residual), summed over answered requests",
            ["site", "stage"],
            registry=r,
        )
        self.fleet_up = Gauge(p + "fleet_up", "1 while the fleet's state is reachable", registry=r)
        self.fleet_observations = Counter(
            p + "fleet_observations",
            "Observations published, received from others, dropped (outbox full), malformed",
            ["what"],
            registry=r,
        )
        self.fleet_staleness = Histogram(
            p + "fleet_staleness_seconds",
            "From another replica's observation to its merge here",
            buckets=STALENESS_BUCKETS_S,
            registry=r,
        )
        self.fleet_inflight = Gauge(
            p + "fleet_inflight", "Requests the other replicas have in flight", ["site"], registry=r
        )

    def observe(
        self, site: str, record: dict[str, Any], pred: Any, model: Any, breaker: Any
    ) -> None:
        """Account one answered request (the site's estimates: the record's, if it has
        them, else the model's)."""
        child = self._child
        child(self.requests, site, record["outcome"].split()[0]).inc()
        actual = record["actual_s"]
        child(self.seconds, site).observe(actual)
        child(self.predicted, site).set(pred.option.time_s)
        if actual > 0:
            child(self.error, site).observe(abs(actual - pred.option.time_s) / actual)
        estimates = record.get("estimates", {}).get(site) or model.estimates()
        for name, est in estimates.items():
            child(self.estimate, site, name).set(est["value"])
        d = record.get("decomposition")
        if d:
            for term, value in d["terms_s"].items():
                if value > 0:
                    child(self.stage, site, term).inc(value)
            if d["residual_s"] > 0:  # a counter only grows: a negative residual is not summed
                child(self.stage, site, "residual").inc(d["residual_s"])

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once."""
        key = (metric, *labels)
        if (found := self._children.get(key)) is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def render(self) -> tuple[bytes, str]:
        """The text exposition format and its content type."""
        if self.replica is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        return generate_latest(_Labelled(self.registry, self.replica)), CONTENT_TYPE_LATEST


class _Labelled:
    """A registry's metrics with ``replica="…"`` added to every sample (one replica of a
    fleet: Prometheus scraping them all keeps them apart without relabelling rules)."""

    def __init__(self, registry: CollectorRegistry, replica: str) -> None:
        self.registry, self.replica = registry, replica

    def collect(self):
        for family in self.registry.collect():
            family.samples = [
                s._replace(labels={**s.labels, "replica": self.replica}) for s in family.samples
            ]
            yield family
