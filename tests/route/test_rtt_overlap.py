"""What a burst teaches: its samples, timed behind both event loops, must not price the
lone requests after it (a `tierwise route` process, a real stand-in on loopback)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.modelserver import model_server
from tests.route.routeproc import free_port, route_process
from tierwise.catalog import load_catalog
from tierwise.route.config import load_route
from tierwise.route.learn import Timing, learn
from tierwise.route.predict import RequestShape, site_model

CHAT = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 1}
STREAM = {"prompt": "hi", "max_tokens": 8, "stream": True}
BURST = 150  # requests at once, half of them streams: on 2 cores the loops' turns cost
# tens of ms each, in connects, times to headers and token paces
FACTOR = 1.5  # a lone request's prediction within 1.5× of its time (2-12× before the fix)


def _config(tmp: Path, site_url: str) -> Path:
    path = tmp / "route.toml"
    path.write_text(
        f'[gateway]\nport = {free_port()}\ndecisions_log = "{tmp}/d.jsonl"\n'
        'probe_interval = "1 h"\n'
        f'[[site]]\nname = "edge"\ntier = "edge"\nurl = "{site_url}"\ndecode_step = "10 ms"\n'
        'uplink = "1 Gbit/s"\ndownlink = "1 Gbit/s"\n',
        encoding="utf-8",
    )
    return path


async def _burst(url: str) -> None:
    limits = httpx.Limits(max_connections=BURST + 10)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def one(i: int) -> bool:
            if i % 2:
                return (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
            async with client.stream("POST", "/v1/completions", json=STREAM) as r:
                data = b"".join([c async for c in r.aiter_raw()])
            return r.status_code == 200 and data.endswith(b"data: [DONE]\n\n")

        assert all(await asyncio.gather(*(one(i) for i in range(BURST))))


@pytest.mark.slow
def test_a_burst_does_not_price_the_lone_requests_after_it(tmp_path: Path) -> None:
    """After a burst of 150 requests at once (half streams), a lone 1-token request to a
    loopback stand-in is predicted within 1.5× of its time; the RTT stays a loopback one
    (< 5 ms) and the decode step the stand-in's 10 ms (factor 0.7–1.3)."""
    args = ("--decode-step", "10 ms", "--slots", "1000", "--prefill-per-token", "0 s")
    with model_server(*args) as site, route_process(_config(tmp_path, site)) as (url, _):
        with httpx.Client(base_url=url, timeout=30) as c:
            for _ in range(10):
                assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
            asyncio.run(_burst(url))
            for _ in range(3):
                assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    log = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    after = log[-3:]
    assert all(r["stages"]["overlap"] == 0 for r in after)
    first = after[0]  # predicted with everything the burst taught
    predicted, measured = first["predicted"]["edge"]["time_s"], first["actual_s"]
    assert predicted / measured < FACTOR, (predicted, measured, first["estimates"])
    assert first["estimates"]["edge"]["rtt_s"]["value"] < 0.005
    assert 0.7 < first["estimates"]["edge"]["decode_factor"]["value"] < 1.3
    assert max(r["stages"]["overlap"] for r in log) > 0  # the burst did overlap


def test_an_overlapped_sample_only_bounds_the_rtt_and_pace() -> None:
    """A sample beside other attempts lowers the RTT to it but never raises it, and a
    stream's pace beside others is no sample; a lone one moves either, either way; the
    server's own decode time always counts."""
    cfg = load_route(Path(__file__).parents[2] / "src/tierwise/examples/route.toml")
    m = site_model(cfg.site_named("cloud"), load_catalog(), "test")
    req = RequestShape("/v1/chat/completions", 2000, 500, 64, False, False, None, "any")
    srv = {"queue": 0.002, "prefill": 0.01, "decode": 0.1}
    prior = m.rtt_s.value

    def sample(network_s: float, overlap: int) -> None:
        t = Timing(headers_s=network_s + 0.112, end_s=network_s + 0.113, tokens_out=64)
        t.server, t.overlap = srv, overlap
        learn(m, req, t)

    for _ in range(5):
        sample(prior * 10, overlap=20)
    assert m.rtt_s.value == prior
    sample(prior / 2, overlap=20)
    assert m.rtt_s.value == pytest.approx(prior / 2)
    for _ in range(5):
        sample(prior * 2, overlap=0)
    assert m.rtt_s.value > prior
    pace = m.decode_factor.value
    streamed = RequestShape("/v1/chat/completions", 2000, 500, 64, True, False, None, "any")
    slow = Timing(headers_s=0.2, first_token_s=0.3, last_token_s=0.3 + 63 * 3 * m.step_bound_s,
                  end_s=1.0, tokens_out=64, overlap=20)  # fmt: skip
    fast = Timing(headers_s=0.2, first_token_s=0.3, last_token_s=0.3001, end_s=0.31,
                  tokens_out=64, overlap=20)  # fmt: skip
    for t in (slow, fast):  # a busy loop stretches a stream's tokens, or bunches them
        learn(m, streamed, t)
        assert m.decode_factor.value == pace
    for _ in range(5):  # the server's own figure: no loop in it
        t = Timing(headers_s=0.4, end_s=0.5, tokens_out=64, overlap=20)
        t.server = {"decode": 64 * 3 * m.step_bound_s}
        learn(m, req, t)
    assert m.decode_factor.value > pace
