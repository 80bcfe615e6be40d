"""Merging the fleet's observations: any order, any duplicates, one router's estimate."""

from __future__ import annotations

import copy
import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.catalog import load_catalog
from tierwise.route.config import RouteSite
from tierwise.route.fleet import CHECK_EVERY, Fleet, Obs, SiteLog, apply, decode, encode
from tierwise.route.learn import Timing
from tierwise.route.predict import RequestShape, SiteModel, site_model

CATALOG = load_catalog()


def _resolved() -> SiteModel:
    site = RouteSite(
        name="edge", tier="edge", url="http://127.0.0.1:1", decode_step="15 ms",
        prefill_per_token="0 s", rtt="10 ms", uplink="80 Mbit/s", downlink="1 Gbit/s",
    )  # fmt: skip
    return site_model(site, CATALOG, "test")


MODEL = _resolved()


def model() -> SiteModel:
    """A fresh copy of one site's model at its priors."""
    return copy.deepcopy(MODEL)


def observations(n: int, seed: int, replicas: int = 3) -> list[Obs]:
    """A run of varied requests at one site, spread over ``replicas`` (some with server
    timing, some without; a step change half-way; a timed-out upload; a probe)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        slow = 3.0 if i > n // 2 else 1.0
        big = rng.random() < 0.3
        shape = RequestShape("/v1/chat/completions", 400_000 if big else 900, rng.randint(20, 400),
                             30, False, rng.random() < 0.5, None, "any")  # fmt: skip
        up_s = shape.bytes_up / 10e6
        decode_s = 29 * 0.015 * slow
        t = Timing(connect_s=0.01 if rng.random() < 0.2 else None, headers_s=0.02 + up_s,
                   first_token_s=0.03 + up_s, last_token_s=0.03 + up_s + decode_s,
                   end_s=0.04 + up_s + decode_s, tokens_out=30, bytes_down=2000)  # fmt: skip
        if rng.random() < 0.5:
            t.server = {"queue": rng.random() * 0.01, "prefill": 0.001,
                        "decode": 29 * 0.015 * slow}  # fmt: skip
        kind, data = "learn", {"shape": shape, "timing": t}
        if i % 17 == 5:
            kind, data = "timeout", {"shape": shape, "elapsed_s": 0.5}
        elif i % 11 == 3:
            kind, data = "sample", {"name": "rtt_s", "value": 0.01 * (1 + rng.random() * 0.1)}
        out.append(
            Obs(1000.0 + i * 0.01, f"r{i % replicas}", i // replicas + 1, "edge", kind, data)
        )
    return out


def estimates(m: SiteModel) -> dict:
    out = m.estimates()
    assert m.service is not None
    out["service"] = (m.service.theta, m.service.paces, m.service.n)
    return out


def one_router(obs: list[Obs]) -> dict:
    """What one router that saw every request, in time order, holds."""
    m = model()
    for o in sorted(obs, key=lambda o: o.key):
        apply(m, o)
    return estimates(m)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 120),
    order=st.randoms(use_true_random=False),
    dup_share=st.floats(0, 0.5),
)
def test_merge_is_order_independent_and_idempotent(seed, n, order, dup_share) -> None:
    """Observations merged in any order and batches, some of them twice, leave exactly
    the estimates of one router that applied them in time order."""
    obs = observations(n, seed)
    shuffled = obs + [o for o in obs if order.random() < dup_share]
    order.shuffle(shuffled)
    log = SiteLog(model())
    while shuffled:  # in batches of any size (one read of the stream each)
        k = order.randint(1, 8)
        log.add_many(shuffled[:k])
        shuffled = shuffled[k:]
    assert estimates(log.model) == one_router(obs)


def test_in_order_arrivals_need_no_replay() -> None:
    """The common case (observations arrive in time order) applies each once."""
    log = SiteLog(model())
    for o in observations(100, 1):
        assert log.add(o)
    assert log.replays == 0 and len(log.checkpoints) == 100 // CHECK_EVERY


def test_history_is_bounded_and_too_late_is_dropped() -> None:
    """Past its history a log forgets the oldest; one older than all it keeps is dropped
    (counted) rather than applied out of place."""
    obs = observations(200, 2)
    log = SiteLog(model(), history=64)
    for o in obs[1:]:
        log.add(o)
    assert len(log.keys) <= 64 and len(log.obs) == len(log.keys)
    assert not log.add(obs[0]) and log.late == 1


def test_three_replicas_converge_through_the_wire_format() -> None:
    """Three fleets, each observing its share and receiving the others' as encoded
    entries in a different order, end with the same estimates as one router."""
    obs = observations(90, 3)
    fleets = {f"r{i}": Fleet(f"r{i}", {"edge": model()}) for i in range(3)}
    wire = [encode(o) for o in obs]
    rng = random.Random(4)
    for fleet in fleets.values():
        entries = wire[:]
        rng.shuffle(entries)
        for e in entries:
            o = decode(e)
            assert o is not None
            fleet.merge(o)
    want = one_router(obs)
    for fleet in fleets.values():
        assert estimates(fleet.logs["edge"].model) == want


def test_garbage_entries_decode_to_none() -> None:
    """What another program writes to the stream is skipped, never raised."""
    good = encode(observations(1, 5)[0])
    assert decode(good) is not None
    for bad in ({}, {**good, "ts": "nan"}, {**good, "kind": "rm -rf"}, {**good, "data": "[1"},
                {**good, "data": "[]"}, {**good, "seq": "x"},
                {**good, "data": '{"shape": {"nope": 1}}'},
                {**good, "kind": "sample", "data": '{"name": "rtt_s", "value": NaN}'},
                {**good, "data": "{" + " " * 20_000 + "}"}):  # fmt: skip
        assert decode(bad) is None


def test_nonsense_measurements_change_nothing() -> None:
    """A negative, huge or non-numeric sample, or one naming a local or unknown estimate,
    decodes but moves no estimate."""
    log = SiteLog(model())
    before = estimates(log.model)
    for i, (name, value) in enumerate([("rtt_s", -1.0), ("rtt_s", 1e300), ("rtt_s", "1"),
                                        ("error_rel", 0.5), ("theta", 1.0)]):  # fmt: skip
        raw = {"ts": str(1.0 + i), "replica": "x", "seq": str(i + 1), "site": "edge",
               "kind": "sample", "data": json.dumps({"name": name, "value": value})}  # fmt: skip
        obs = decode(raw)
        assert obs is not None
        log.add(obs)
    assert estimates(log.model) == before
