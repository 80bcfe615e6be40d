"""Six-stage decomposition: the terms plus the residual are the client-visible time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.modelserver import model_servers
from tests.route.test_gateway import gateway, served, site
from tierwise.route.learn import Timing
from tierwise.route.stages import TERMS, Marks, Work, decompose

RTT_S = 0.02
STEP_S = 0.002
PREFILL_PER_TOKEN_S = 0.0001


def _sums(d: dict) -> None:
    """Σ terms + residual == client time, and each term is the sum of its parts."""
    terms, parts = d["terms_s"], d["parts_s"]
    assert set(terms) == set(TERMS)
    assert math.isclose(sum(terms.values()) + d["residual_s"], d["client_s"], abs_tol=1e-9)
    for t in TERMS:
        mine = sum(v for k, v in parts.items() if k.split(".")[0] == t)
        assert math.isclose(terms[t], mine, abs_tol=1e-12)


@pytest.mark.slow
def test_every_real_record_adds_up(tmp_path: Path) -> None:
    """Over real records (whole and streamed answers, a failover, no site at all), the
    terms and the residual add up to the client-visible time; the emulated RTT shows as
    network, the server's prefill and decode as compute, the failed site as failover."""
    args = ("--decode-step", f"{STEP_S * 1e3} ms", "--prefill-per-token",
            f"{PREFILL_PER_TOKEN_S * 1e3} ms", "--rtt", f"{RTT_S * 1e3:.0f} ms")  # fmt: skip
    # b three times slower: the failing site is the one tried first (two equal sites
    # were a coin toss after each answer's learning, and the failover did not happen)
    slow = (*args[:1], f"{3 * STEP_S * 1e3} ms", *args[2:])
    with model_servers(args, slow) as (a, b):
        sites = [site("a", a, "2 ms"), site("b", b, "6 ms")]
        router, port = gateway(sites, tmp_path, probe_interval="1 h")
        chat = {"messages": [{"role": "user", "content": "hi " * 200}], "max_tokens": 20}
        streamed = {**chat, "stream": True, "stream_options": {"include_usage": True}}
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=60) as c:
            for body in (chat, streamed, chat, streamed):
                assert c.post("/v1/chat/completions", json=body).status_code == 200
            first = c.post("/v1/chat/completions", json=chat).headers["x-tierwise-site"]
            httpx.post({"a": a, "b": b}[first] + "/admin/behaviour", json={"error_rate": 1.0})
            over = c.post("/v1/chat/completions", json=chat)
            assert over.status_code == 200 and over.headers["x-tierwise-site"] != first
            for url in (a, b):
                httpx.post(url + "/admin/behaviour", json={"down": True})
            assert c.post("/v1/chat/completions", json=chat).status_code == 503
            metrics = c.get("/metrics").text
    records = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert len(records) == 7
    for r in records:
        d = r["decomposition"]
        _sums(d)
        assert abs(d["residual_s"]) <= 0.25 * d["client_s"] + 0.02, d
        if r["outcome"] != "ok":
            continue
        assert d["estimated"] == []  # the model server sends Server-Timing: all measured
        parts, server = d["parts_s"], r["stages"]["server_s"]
        assert parts["network.up"] >= RTT_S * 0.9  # the emulated RTT is network
        assert parts["compute.prefill"] == pytest.approx(server["prefill"])
        assert parts["deserialization.request"] > 0 and parts["scheduling.gateway"] > 0
        if r["stream"]:  # 19 decode steps paced by the server, seen at the gateway
            assert parts["compute.decode"] >= 19 * STEP_S * 0.9
    assert records[5]["decomposition"]["parts_s"]["scheduling.failover"] > 0
    lost = records[6]["decomposition"]
    assert lost["parts_s"]["scheduling.failover"] > 0.5 * lost["client_s"]
    compute = sum(r["decomposition"]["terms_s"]["compute"] for r in records[:6])
    line = next(ln for ln in metrics.splitlines()
                if ln.startswith("tierwise_route_stage_seconds_total") and "compute" in ln
                and 'site="b"' in ln)  # fmt: skip
    by_b = sum(r["decomposition"]["terms_s"]["compute"] for r in records[:6] if r["chosen"] == "b")
    assert float(line.split()[-1]) == pytest.approx(by_b) and compute > 0
    shown = run_cli("route", "decisions", "--log", str(tmp_path / "d.jsonl"), "--json")
    assert [r["decomposition"] for r in json.loads(shown.stdout)] == [
        r["decomposition"] for r in records
    ]
    table = run_cli("route", "decisions", "--log", str(tmp_path / "d.jsonl"))
    assert table.code == 0 and "resid ms" in table.stdout and "sched ms" in table.stdout


def test_no_server_timing_is_split_by_estimate() -> None:
    """A site without Server-Timing: the time to headers is split by the estimated
    network share, and both parts say they are estimated."""
    marks = Marks(arrived=100.0, read_s=0.001, parse_s=0.0005, decided=100.003, decide_s=0.0015)
    t = Timing(headers_s=0.5, end_s=0.6, build_s=0.0001)
    d = decompose(0.7, marks, sent_at=100.004, timing=t, network_estimate_s=0.05, work=Work())
    _sums(d)
    assert d["parts_s"]["network.up"] == 0.05
    assert d["parts_s"]["compute.unsplit"] == pytest.approx(0.5 - 0.0001 - 0.05)
    assert set(d["estimated"]) == {"network.up", "compute.unsplit"}
    assert d["parts_s"]["io_wait.client_send"] == pytest.approx(0.7 - 0.604)


_s = st.floats(0, 2, allow_nan=False)


@settings(max_examples=200)
@given(
    client=_s, read=_s, parse=_s, decide=_s, gap=_s, queued=_s, headers=_s, first=_s,
    decode=_s, tail=_s, deser=_s, send=_s, stream=st.booleans(), retried=st.booleans(),
    timed=st.booleans(), answered=st.booleans(),
)  # fmt: skip
def test_terms_and_residual_always_add_up(**v) -> None:
    """Whatever the clocks read (even inconsistent ones), Σ terms + residual == client."""
    marks = Marks(0.0, v["read"], v["parse"], v["read"] + v["parse"] + v["decide"], v["decide"])
    t = Timing(headers_s=v["headers"], end_s=v["headers"] + v["first"] + v["decode"] + v["tail"],
               queued_s=v["queued"], build_s=v["parse"] / 10)  # fmt: skip
    if v["stream"]:
        t.first_token_s, t.last_token_s = v["headers"] + v["first"], t.end_s - v["tail"]
    if v["timed"]:
        t.server = {"queue": v["queued"] / 2, "prefill": v["first"], "decode": v["decode"]}
    w = Work(deser_s=v["deser"], send_s=v["send"], at_first=(0.0, 0.0), at_last=(v["deser"], 0))
    sent = marks.decided + v["gap"]
    if v["answered"]:
        d = decompose(v["client"], marks, sent, t, stream=v["stream"], retried=v["retried"],
                      network_estimate_s=v["gap"], work=w)  # fmt: skip
    else:
        d = decompose(v["client"], marks)
    _sums(d)
