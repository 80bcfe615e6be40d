"""Evaluate the whole task on one site: time, breakdown, energy (closed form).

One evaluator per task kind, chosen by a dispatch table. Every evaluator takes
an optional ``uplink`` override (a constant or one rate per round) so that the
planner can search thresholds and the Monte Carlo can vary the path.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierwise.errors import ModelError, ScenarioError
from tierwise.model import loop, request, stream, transport
from tierwise.plan import network as net
from tierwise.plan.resolve import SiteCosts
from tierwise.scenario.schema import Scenario, Site, Task

__all__ = ["LoopTerms", "Option", "evaluate_option", "loop_terms"]


@dataclass
class Option:
    """The whole task on one site."""

    site: str
    tier: str
    feasible: bool
    reasons: list[str]
    time_s: float
    meets_deadline: bool | None
    energy_j: float | list[float] | None
    breakdown_s: dict[str, float]
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def energy_key(self) -> float:
        """Energy used for ranking: the upper end of a range; unknown ranks last."""
        if self.energy_j is None:
            return float("inf")
        return max(self.energy_j) if isinstance(self.energy_j, list) else self.energy_j

    def to_dict(self) -> dict[str, Any]:
        out = {
            "site": self.site,
            "tier": self.tier,
            "feasible": self.feasible,
            "reasons": self.reasons,
            "time_s": self.time_s,
            "meets_deadline": self.meets_deadline,
            "energy_j": self.energy_j,
            "breakdown_s": self.breakdown_s,
        }
        out.update(self.extra)
        if self.notes:
            out["notes"] = self.notes
        return out


def _uplink(site: Site, override: Any, n: int, source: str, needed: bool) -> np.ndarray:
    """Per-round uplink rates (bytes/s): a list's ``n`` rates, or one rate for every round."""
    value = override if override is not None else site.uplink
    if value is None:
        if needed:
            raise ScenarioError(
                "a remote site needs an uplink to upload the task's input",
                source=source,
                path=f"site.{site.name}.uplink",
            )
        return np.full(1, np.inf)
    rates = np.asarray(value, dtype=float)
    if rates.ndim == 0:
        return np.full(1, float(rates))
    if rates.size != n:
        raise ScenarioError(
            f"has {rates.size} per-round rates but the task runs {n} rounds",
            source=source,
            path=f"site.{site.name}.uplink",
        )
    return rates


def _uplink_rate(site: Site, override: Any, source: str, needed: bool) -> float:
    """One task's uplink rate (bytes/s): :func:`_uplink` for one round, without arrays.

    A request on the route gateway's path asks this for one scalar per site; building
    arrays for it cost ~25 µs a site. A per-round list (or any non-scalar) still goes
    through :func:`_uplink`, which checks its size and says what is wrong."""
    value = override if override is not None else site.uplink
    if isinstance(value, float | int):
        return float(value)
    return float(_uplink(site, override, 1, source, needed)[0])


def _down_s(site: Site, size: float, source: str) -> float:
    if size == 0 or not site.remote:
        return 0.0
    if site.downlink is None:
        raise ScenarioError(
            "a remote site needs a downlink to return the task's output",
            source=source,
            path=f"site.{site.name}.downlink",
        )
    return float(request.transfer_s(size, site.downlink))


def _energy(costs: SiteCosts, busy_s: float, tokens: float) -> float | list[float] | None:
    if costs.energy_per_token_j is not None and tokens > 0:
        lo, hi = costs.energy_per_token_j
        return [lo * tokens, hi * tokens]
    if costs.power_w is not None:
        return costs.power_w * busy_s
    return None


# ----------------------------------------------------------------------------- loop


@dataclass(frozen=True)
class LoopTerms:
    """A loop on one site, reduced to what varies per round."""

    rounds: int
    fixed_round_s: float  # client + model + rtt + download + codec
    upload_bytes: float  # per round, after compression
    uplinks: np.ndarray  # per round, or one for all rounds; bytes/s (inf: nothing to upload)
    rtt_s: float
    prepare_s: float

    @property
    def uniform(self) -> bool:
        """Every round has the same uplink (then no per-round array exists)."""
        return self.uplinks.size == 1

    def uplink_of(self, i: int) -> float:
        """Round ``i``'s uplink, bytes/s."""
        return float(self.uplinks[0 if self.uniform else i])


def loop_terms(task: Task, costs: SiteCosts, source: str, uplink: Any = None) -> LoopTerms:
    site = costs.site
    comp = task.compress
    n = comp.rounds if comp and comp.rounds else task.rounds
    assert n is not None
    if not site.remote:
        return LoopTerms(
            n, task.client_work + costs.model_s, 0.0, np.full(1, np.inf), 0.0, costs.prepare_s
        )
    size = task.upload * (comp.ratio if comp else 1.0)
    codec = comp.time if comp else 0.0
    rates = _uplink(site, uplink, n, source, needed=size > 0)
    fixed = task.client_work + costs.model_s + site.rtt + _down_s(site, task.download, source)
    return LoopTerms(n, fixed + codec, size, rates, site.rtt, costs.prepare_s)


def _loop(scn: Scenario, costs: SiteCosts, source: str, uplink: Any) -> Option:
    """Closed form of a loop; rounds with one uplink are summed as ``N·t``, so the
    work does not grow with the number of rounds."""
    task, site = scn.task, costs.site
    terms = loop_terms(task, costs, source, uplink)
    n = terms.rounds
    if terms.uniform:  # T = N·t (§12.1.3): Python floats, no array
        round_upload_s = request.transfer_s(terms.upload_bytes, terms.uplink_of(0))
        round_s = terms.fixed_round_s + round_upload_s
        upload_s, all_rounds_s = n * round_upload_s, float(loop.loop_time_s(n, round_s))
        rounds_s = np.full(1, round_s if n else 0.0)
    else:  # a rate per round: T = Σ t_i
        upload = request.transfer_s(terms.upload_bytes, terms.uplinks)
        rounds_s = terms.fixed_round_s + upload
        upload_s, all_rounds_s = float(upload.sum()), float(rounds_s.sum())
    recovery, redo = _disconnect(task, site, terms, rounds_s, source)
    comp = task.compress if site.remote else None
    breakdown = {
        "prepare": terms.prepare_s,
        "client": n * task.client_work,
        "model": n * costs.model_s,
        "upload": upload_s,
        "download": n * _down_s(site, task.download, source) if site.remote else 0.0,
        "propagation": n * terms.rtt_s,
        "compress": n * comp.time if comp else 0.0,
        "disconnect": recovery,
    }
    time_s = terms.prepare_s + all_rounds_s + recovery
    ex = _loop_extras(task, site, terms, redo, source)
    if ex is not None:
        breakdown.update(_extra_parts(ex))
        time_s += ex.fixed_s + ex.recovery_mean_s
    executed = n + (redo.stop - redo.start)
    energy = _energy(
        costs, terms.prepare_s + executed * costs.model_s, executed * costs.tokens_per_round
    )
    extra: dict[str, Any] = {"rounds": n}
    if costs.prompts_per_charge is not None:
        lo, hi = costs.prompts_per_charge
        extra["battery_share"] = [executed / hi, executed / lo]
    return _option(scn, costs, time_s, energy, breakdown, extra, ex)


def _disconnect(
    task: Task, site: Site, terms: LoopTerms, rounds_s: np.ndarray, source: str
) -> tuple[float, range]:
    """Extra time of ``[task.disconnect]`` and the rounds it makes us run again."""
    d = task.disconnect
    if not (d and site.remote):
        return 0.0, range(0)
    if d.after_round > terms.rounds:
        raise ScenarioError(
            f"after_round = {d.after_round} exceeds the {terms.rounds} rounds run",
            source=source,
            path="task.disconnect.after_round",
        )
    redo = loop.redone_rounds(d.after_round, d.progress)
    if terms.uniform:
        extra = loop.equal_rounds_disconnect_extra_s(
            float(rounds_s[0]), d.after_round, d.reconnect, d.progress
        )
        return extra, redo
    return loop.disconnect_extra_s(rounds_s, d.after_round, d.reconnect, d.progress), redo


# rounds whose path state (windows) still changes before every later round repeats
# the last one; a window grows by at least a segment a round up to the BDP, so only
# absurd paths get near this
MAX_DISTINCT_ROUNDS = 1_000_000


def _loop_extras(
    task: Task, site: Site, terms: LoopTerms, redo: range, source: str
) -> net.Extras | None:
    """Handshakes, window waits and loss recovery of every executed round (§12.3).

    With one uplink for all rounds, once a round starts from the path state the
    previous one started from (or waits for no window), every later round costs the
    same: the rest are added at once.
    """
    if not site.remote or not net.has_physics(site):
        return None
    total = terms.rounds + (redo.stop - redo.start)
    ex = net.Extras(site.rtt, handshake_s=net.handshake_s(site, total))
    windows: dict[str, float | None] = {"up": None, "down": None}
    order = itertools.chain(range(terms.rounds), redo)
    done, previous = 0, None
    while done < total:
        if done > MAX_DISTINCT_ROUNDS:
            raise ModelError(
                f"the path state still changes after {MAX_DISTINCT_ROUNDS:,} rounds; "
                f"cannot sum {total:,} rounds of it"
            )
        i = next(order)
        if net.restarts_window(site):
            windows = {"up": None, "down": None}
        fresh = done == 0 or site.connection == "new-per-round"
        key = (fresh, windows["up"], windows["down"])
        up, down, windows = _round_costs(task, site, terms, i, fresh, windows)
        steady = key == previous or (done > 0 and up.window_wait_s == down.window_wait_s == 0)
        times = total - done if (terms.uniform and steady) else 1
        ex.add(up, times)
        ex.add(down, times)
        done, previous = done + times, key
    return ex


def _round_costs(
    task: Task, site: Site, terms: LoopTerms, i: int, fresh: bool, windows: dict
) -> tuple[net.TransferCost, net.TransferCost, dict]:
    """The upload's and the reply's path costs in round ``i``, and the windows after."""
    # the upload opens the round's connection when it is new: its first flight is
    # held to the SYN-ACK's window; the reply follows scaled-window ACKs
    syn = transport.SYN_WINDOW_BYTES if (fresh and net.syn_capped(site)) else None
    up = net.transfer_cost(
        site, terms.upload_bytes, terms.uplink_of(i), site.loss, windows["up"], syn
    )
    down_rate = site.downlink if site.downlink is not None else np.inf
    down = net.transfer_cost(
        site, task.download, float(down_rate), site.loss_on_download, windows["down"]
    )
    return up, down, {"up": up.final_window_bytes, "down": down.final_window_bytes}


def _extra_parts(ex: net.Extras) -> dict[str, float]:
    return {
        "handshake": ex.handshake_s,
        "window_wait": ex.window_wait_s,
        "recovery": ex.recovery_mean_s,
    }


# -------------------------------------------------------------------------- request


def _request(scn: Scenario, costs: SiteCosts, source: str, uplink: Any) -> Option:
    task, site = scn.task, costs.site
    if task.chunks is not None:
        return _chunked(scn, costs, source, uplink)
    comp = task.compress if site.remote else None
    size = task.upload * (comp.ratio if comp else 1.0)
    up = 0.0
    if site.remote and size > 0:
        up = float(request.transfer_s(size, _uplink_rate(site, uplink, source, True)))
    breakdown = {
        "prepare": costs.prepare_s,
        "upload": up,
        "model": costs.model_s,
        "download": _down_s(site, task.download, source),
        "propagation": site.rtt if site.remote else 0.0,
        "compress": comp.time if comp else 0.0,
    }
    ex = None
    if site.remote and net.has_physics(site):
        ex = net.Extras(site.rtt, handshake_s=net.handshake_s(site, 1))
        rate = up and size / up
        syn = transport.SYN_WINDOW_BYTES if net.syn_capped(site) else None
        ex.add(net.transfer_cost(site, size, rate if up else np.inf, site.loss, None, syn))
        down_rate = site.downlink if site.downlink is not None else np.inf
        ex.add(net.transfer_cost(site, task.download, down_rate, site.loss_on_download, None))
        breakdown.update(_extra_parts(ex))
    time_s = sum(breakdown.values())
    energy = _energy(costs, costs.prepare_s + costs.model_s, costs.tokens_per_round)
    return _option(scn, costs, time_s, energy, breakdown, {}, ex)


def _chunked(scn: Scenario, costs: SiteCosts, source: str, uplink: Any) -> Option:
    task, site = scn.task, costs.site
    ch = task.chunks
    assert ch is not None and not isinstance(ch, int)
    n = len(ch.upload)
    if site.remote:
        rate = _uplink_rate(site, uplink, source, any(ch.upload))
        ups = [float(request.transfer_s(s, rate)) for s in ch.upload]
        downs = [_down_s(site, s, source) for s in ch.download]
        prop = site.rtt / 2
    else:
        ups, downs, prop = [0.0] * n, [0.0] * n, 0.0
    r = request.chunked_request(ups, ch.compute, downs, prop, barrier=ch.barrier)
    time_s = costs.prepare_s + r.time_s
    breakdown = {
        "prepare": costs.prepare_s,
        "upload": sum(ups),
        "model": sum(ch.compute),
        "download": sum(downs),
        "propagation": 2 * prop,
    }
    breakdown["overlap"] = time_s - sum(breakdown.values())
    energy = _energy(costs, costs.prepare_s + sum(ch.compute), 0)
    extra = {"chunk_complete_s": r.complete_s.tolist()}
    return _option(scn, costs, time_s, energy, breakdown, extra)


# --------------------------------------------------------------------------- stream


def _stream(scn: Scenario, costs: SiteCosts, source: str, uplink: Any) -> Option:
    task, site = scn.task, costs.site
    n = stream.chunk_count(int(task.chunks))  # type: ignore[arg-type]
    period = float(task.period)  # type: ignore[arg-type]
    send, prop = _stream_path(task, site, n, source)
    p = stream.pipeline(stream.capture_ready_s(n, period), costs.model_s, send, prop)
    play = stream.playout(p.arrive_s, period, task.buffer)
    breakdown = {
        "first_play": play.first_play_s,
        "playback": n * period,
        "stall": play.total_stall_s,
    }
    extra = {
        "first_play_s": play.first_play_s,
        "stall_s": play.total_stall_s,
        "min_buffer_s": stream.min_buffer_s(p.arrive_s, period),
        "arrive_s": p.arrive_s.tolist(),
        "play_s": play.play_s.tolist(),
    }
    energy = _energy(costs, n * costs.model_s, 0)
    return _option(scn, costs, float(play.end_s), energy, breakdown, extra)


def _stream_path(task: Task, site: Site, n: int, source: str) -> tuple[np.ndarray, np.ndarray]:
    if not site.remote:
        return np.zeros(n), np.zeros(n)
    if task.send is not None:
        send = task.send
    elif task.chunk_bytes is not None:
        send = _down_s(site, task.chunk_bytes, source)
    else:
        raise ScenarioError(
            "a remote stream needs send = <time per chunk> or chunk_bytes",
            source=source,
            path="task.send",
        )
    base = task.propagation if task.propagation is not None else site.rtt / 2
    prop = np.full(n, base)
    for key, value in task.propagation_overrides.items():
        prop[int(key)] = value
    return np.full(n, send), prop


# ------------------------------------------------------------------------------ glue

_EVALUATORS = {"loop": _loop, "request": _request, "stream": _stream}


_LOSSY: list[Any] = [None, False]  # (the scenario's site list, whether any site is lossy)


def _any_lossy(scn: Scenario) -> bool:
    """Whether any site loses packets (then every option shows its tail).

    Remembered for the last site list seen: a threshold search evaluates one
    scenario thousands of times, and a scan over every site each time would make
    it quadratic in the number of sites.
    """
    if _LOSSY[0] is not scn.site:
        _LOSSY[:] = [scn.site, any(s.loss > 0 or (s.loss_down or 0) > 0 for s in scn.site)]
    return _LOSSY[1]


def _option(scn, costs, time_s, energy, breakdown, extra, ex: net.Extras | None = None) -> Option:
    deadline = scn.task.deadline
    q = scn.task.deadline_quantile
    judged = time_s
    if _any_lossy(scn):
        tail = (
            (lambda x: time_s - ex.recovery_mean_s + ex.recovery_quantile_s(x))
            if ex
            else (lambda x: time_s)
        )
        extra = {**extra, "time_p99_s": float(tail(0.99))}
        if q is not None:
            extra[f"time_q{q:g}_s"] = float(tail(q))
            judged = tail(q)
    return Option(
        site=costs.site.name,
        tier=costs.site.tier,
        feasible=costs.feasible,
        reasons=list(costs.reasons),
        time_s=float(time_s),
        meets_deadline=None if deadline is None else bool(judged <= deadline + 1e-12),
        energy_j=energy,
        breakdown_s={k: float(v) for k, v in breakdown.items()},
        extra=extra,
        notes=list(costs.notes),
    )


def evaluate_option(scn: Scenario, costs: SiteCosts, source: str, uplink: Any = None) -> Option:
    """Evaluate the scenario's task on ``costs.site`` (optionally with another uplink).

    A site with ``evaluate = "sim"`` is simulated packet by packet, except while a
    threshold search varies its uplink (that uses the closed form).
    """
    option = _EVALUATORS[scn.task.kind](scn, costs, source, uplink)
    if costs.site.evaluate == "sim" and costs.site.remote and uplink is None:
        _simulate(scn, costs, source, option)
    return option


def _simulate(scn: Scenario, costs: SiteCosts, source: str, option: Option) -> None:
    """Replace the closed-form network time with the simulator's, over ``runs`` seeds."""
    from tierwise.plan.simulated import simulate_task

    task = scn.task
    comp = task.compress
    size = task.upload * (comp.ratio if comp else 1.0)
    rounds = (comp.rounds if comp and comp.rounds else task.rounds) if task.kind == "loop" else 1
    fixed = (task.client_work if task.kind == "loop" else 0.0) + (comp.time if comp else 0.0)
    sim = simulate_task(scn, costs, source, size, rounds or 0, fixed)
    closed = option.time_s
    extra_other = option.breakdown_s.get("disconnect", 0.0)
    option.time_s = sim["time_s"] + extra_other
    option.breakdown_s = {
        k: v
        for k, v in option.breakdown_s.items()
        if k in ("prepare", "client", "model", "compress", "disconnect")
    }
    option.breakdown_s["network (simulated)"] = sim["network_s"]
    option.extra["time_p99_s"] = sim["time_p99_s"] + extra_other
    option.extra["sim_runs"] = sim["runs"]
    option.extra["closed_form_time_s"] = closed
    option.notes.append(
        f"network simulated packet by packet ({sim['runs']} run(s)); "
        f"closed form {closed:.4g} s; thresholds use the closed form"
    )
    if scn.task.deadline is not None:
        q = scn.task.deadline_quantile
        judged = option.extra["time_p99_s"] if q and q >= 0.99 else option.time_s
        option.meets_deadline = bool(judged <= scn.task.deadline + 1e-12)
