"""A fleet's shared learning: every replica's observations merged into one estimate.

Each replica of ``tierwise route`` learns from its own requests (:mod:`tierwise.route.learn`).
Behind a load balancer each sees a share of them; this module makes every replica hold
what one router that saw *all* of them would hold. An estimator here is a sequential
filter (EWMA, Kalman, an online linear fit with outlier guards): its state depends on the
order of its samples, so sums of sufficient statistics would not reproduce it. Instead
the replicas merge their *observation logs*:

- an observation (:class:`Obs`) is what :func:`~tierwise.route.learn.learn` and its
  siblings take — the request's shape and its timing, a timed-out upload, a probe's
  RTT — stamped with its wall-clock time, the replica that made it and that replica's
  sequence number; ``(ts, replica, seq)`` is its key and orders all observations;
- each replica keeps, per site, the last :data:`HISTORY` observations in key order
  (:class:`SiteLog`) with a checkpoint of the estimators every :data:`CHECK_EVERY`; one
  that arrives in order is applied at once, one that arrives late is inserted and the
  estimators are rebuilt from the checkpoint before it — so the result is the same for
  any arrival order, and a duplicate (same key) is ignored;
- an observation older than everything kept (a replica cut off for longer than the
  history) is dropped and counted: it can no longer be put in its place.

Nothing here does I/O; :mod:`tierwise.route.fleetlink` carries the observations
through Redis.
"""

from __future__ import annotations

import bisect
import collections
import copy
import dataclasses
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from tierwise.route.estimate import Adaptive, LinearFit
from tierwise.route.learn import Timing, learn, learn_timeout
from tierwise.route.predict import RequestShape, SiteModel

__all__ = ["HISTORY", "Fleet", "Obs", "SiteLog", "apply", "apply_kind", "decode", "encode"]

HISTORY = 2048  # observations kept per site (the estimators' memory is far shorter)
CHECK_EVERY = 16  # a checkpoint of the estimators every this many observations
LOCAL_ONLY = frozenset({"error_rel"})  # judged against this replica's own predictions
KINDS = ("learn", "timeout", "bound", "sample")
MAX_DATA = 16_384  # characters of one observation's data (a real one is under 1 kB)


@dataclass(frozen=True)
class Obs:
    """One observation of one site; ``key`` orders and identifies it fleet-wide."""

    ts: float  # wall clock when it was observed (the request's end)
    replica: str
    seq: int
    site: str
    kind: str  # learn (shape, timing) | timeout (shape, elapsed_s) | bound | sample
    data: dict[str, Any] = field(hash=False, compare=False)

    @property
    def key(self) -> tuple[float, str, int]:
        return (self.ts, self.replica, self.seq)


def apply(m: SiteModel, obs: Obs) -> None:
    """Feed one observation to ``m``'s estimators, as the gateway does with its own."""
    apply_kind(m, obs.kind, obs.data)


def apply_kind(m: SiteModel, kind: str, d: dict[str, Any]) -> None:
    """Learn what an observation of ``kind`` with data ``d`` tells about site ``m``."""
    if kind == "learn":
        learn(m, d["shape"], d["timing"])
    elif kind == "timeout":
        learn_timeout(m, d["shape"], d["elapsed_s"])
    elif kind in ("bound", "sample"):
        value = d["value"]
        if not isinstance(value, int | float) or not 0 <= value < 1e15:
            raise ValueError(f"not a measurement: {value!r}")
        est = _estimator(m, d["name"])
        est.at_most(value) if kind == "bound" else est.update(value)


def _estimator(m: SiteModel, name: str) -> Adaptive:
    est = getattr(m, name, None)
    if not isinstance(est, Adaptive) or name in LOCAL_ONLY:
        raise ValueError(f"no shared estimate {name!r}")
    return est


_ATOMS = (float, int, str, bool, type(None))


def clone(value: Any) -> Any:
    """A deep copy of an estimator (dataclasses of numbers, lists and dicts), several
    times faster than :func:`copy.deepcopy` (no memo: estimators share no parts)."""
    if isinstance(value, _ATOMS):
        return value
    if isinstance(value, list):
        return [v if isinstance(v, _ATOMS) else clone(v) for v in value]
    if isinstance(value, collections.deque):
        return collections.deque(
            (v if isinstance(v, _ATOMS) else clone(v) for v in value), value.maxlen
        )
    if isinstance(value, dict):
        return {k: v if isinstance(v, _ATOMS) else clone(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = copy.copy(value)
        for k, v in vars(value).items():
            if not isinstance(v, _ATOMS):
                setattr(out, k, clone(v))
        return out
    return copy.deepcopy(value)


def estimator_names(m: SiteModel) -> tuple[str, ...]:
    """The estimators observations move (every Adaptive and LinearFit of the model but
    those judged locally): what a checkpoint holds."""
    return tuple(
        sorted(
            name
            for name, v in vars(m).items()
            if isinstance(v, Adaptive | LinearFit) and name not in LOCAL_ONLY
        )
    )


class SiteLog:
    """One site's observations in key order, with checkpoints (see the module docstring)."""

    def __init__(self, model: SiteModel, history: int = HISTORY) -> None:
        self.model = model
        self.history = max(history, 2 * CHECK_EVERY)
        self.names = estimator_names(model)
        self.keys: list[tuple[float, str, int]] = []
        self.obs: dict[tuple[float, str, int], Obs] = {}
        # checkpoints[i]: the estimators after the first (i + 1) × CHECK_EVERY observations
        self.base = self._state()  # before the first kept observation
        self.checkpoints: list[dict[str, Any]] = []
        self.late = 0  # dropped: older than everything kept
        self.replays = 0  # rebuilds from a checkpoint (an observation out of order)

    def _state(self) -> dict[str, Any]:
        return {name: clone(getattr(self.model, name)) for name in self.names}

    def _restore(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self.model, name, clone(value))

    def add(self, obs: Obs) -> bool:
        """Merge ``obs``; False if it was already here or is too late to place."""
        return bool(self.add_many([obs]))

    def add_many(self, batch: list[Obs]) -> list[Obs]:
        """Merge several observations; the ones added (not duplicates, not too late).

        All are inserted first and the estimators rebuilt once, from the checkpoint
        before the earliest of them — a batch that interleaves with what is here (a
        replica catching up after an outage) costs one replay, not one per observation."""
        added: list[Obs] = []
        applied = len(self.keys)  # keys[:first] stay applied as they are
        first: int | None = None
        for obs in sorted(batch, key=lambda o: o.key):
            key = obs.key
            if key in self.obs:
                continue
            if self.keys and key < self.keys[0] and len(self.keys) >= self.history - CHECK_EVERY:
                self.late += 1
                continue
            at = bisect.bisect(self.keys, key)
            self.keys.insert(at, key)
            self.obs[key] = obs
            added.append(obs)
            first = at if first is None else min(first, at)
        if first is None:
            return added
        if first >= applied:  # all after what was here: the common case, applied in turn
            for i in range(first, len(self.keys)):
                self._apply_at(i)
        else:
            self._replay_from(first)
        while len(self.keys) > self.history:
            self._trim()
        return added

    def _apply_at(self, i: int) -> None:
        try:
            apply(self.model, self.obs[self.keys[i]])
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            pass  # a malformed observation (another version's) changes nothing
        if (i + 1) % CHECK_EVERY == 0:
            del self.checkpoints[(i + 1) // CHECK_EVERY - 1 :]
            self.checkpoints.append(self._state())

    def _replay_from(self, at: int) -> None:
        """Rebuild the estimators from the last checkpoint at or before index ``at``."""
        self.replays += 1
        k = at // CHECK_EVERY  # checkpoints 0..k-1 cover observations before ``at``
        del self.checkpoints[k:]
        self._restore(self.checkpoints[-1] if self.checkpoints else self.base)
        for i in range(k * CHECK_EVERY, len(self.keys)):
            self._apply_at(i)

    def _trim(self) -> None:
        """Forget the oldest CHECK_EVERY observations (past the history)."""
        self.base = self.checkpoints.pop(0)
        for key in self.keys[:CHECK_EVERY]:
            del self.obs[key]
        del self.keys[:CHECK_EVERY]

    def own(self, replica: str) -> list[Obs]:
        """This replica's observations still kept (republished to a Redis that lost them)."""
        return [o for k, o in self.obs.items() if k[1] == replica]


class Fleet:
    """The replica's side of the shared state: its name, its sequence, one log per site."""

    def __init__(self, replica: str, models: dict[str, SiteModel], history: int = HISTORY):
        self.replica = replica
        self.logs = {name: SiteLog(m, history) for name, m in models.items()}
        self._seq = itertools.count(1)
        self.received = 0  # others' observations merged
        self.duplicates = 0

    def observe(self, site: str, kind: str, **data: Any) -> Obs:
        """Record (and apply) one of this replica's own observations; the caller publishes it."""
        obs = Obs(time.time(), self.replica, next(self._seq), site, kind, data)
        self.logs[site].add(obs)
        return obs

    def merge(self, obs: Obs) -> bool:
        """Merge an observation from the fleet (maybe one's own, replayed back)."""
        return bool(self.merge_many([obs]))

    def merge_many(self, batch: list[Obs]) -> list[Obs]:
        """Merge observations from the fleet, one rebuild per site at most; those added."""
        by_site: dict[str, list[Obs]] = {}
        for obs in batch:
            if obs.site in self.logs and obs.kind in KINDS:
                by_site.setdefault(obs.site, []).append(obs)
        added: list[Obs] = []
        for site, group in by_site.items():
            added += self.logs[site].add_many(group)
        self.received += sum(o.replica != self.replica for o in added)
        self.duplicates += len(batch) - len(added)
        return added

    def resume_seq(self, seq: int) -> None:
        """Carry on numbering after ``seq`` (a restarted replica's own earlier observations
        found in the fleet's state): a new observation never reuses an old key."""
        current = next(self._seq)
        self._seq = itertools.count(max(current, seq + 1))

    def own(self) -> list[Obs]:
        return sorted((o for log in self.logs.values() for o in log.own(self.replica)),
                      key=lambda o: o.key)  # fmt: skip


# ---------------------------------------------------------------- the wire format


def encode(obs: Obs) -> dict[str, str]:
    """A stream entry's fields (strings): the key, the site, the kind, the data as JSON."""
    import json

    d: dict[str, Any] = {}
    for k, v in obs.data.items():
        d[k] = dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v
    return {
        "ts": repr(obs.ts),
        "replica": obs.replica,
        "seq": str(obs.seq),
        "site": obs.site,
        "kind": obs.kind,
        "data": json.dumps(d, separators=(",", ":")),
    }


_SHAPE = {f.name for f in dataclasses.fields(RequestShape)}
_TIMING = {f.name for f in dataclasses.fields(Timing)}


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is no measurement")


def decode(fields: dict[str, str]) -> Obs | None:
    """An entry back to an observation; None for anything malformed (never an exception:
    what another version or a stranger wrote must not stop the reader)."""
    import json
    import math

    try:
        ts = float(fields["ts"])
        kind = fields["kind"]
        if not math.isfinite(ts) or kind not in KINDS:
            return None
        text = fields["data"]
        if len(text) > MAX_DATA:
            return None
        raw = json.loads(text, parse_constant=_no_constant)  # no NaN or Infinity
        if not isinstance(raw, dict):
            return None
        data: dict[str, Any] = dict(raw)
        if "shape" in raw:
            data["shape"] = RequestShape(**{k: v for k, v in raw["shape"].items() if k in _SHAPE})
        if "timing" in raw:
            data["timing"] = Timing(**{k: v for k, v in raw["timing"].items() if k in _TIMING})
        return Obs(ts, str(fields["replica"]), int(fields["seq"]), str(fields["site"]), kind, data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
