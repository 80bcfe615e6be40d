"""Client keys: the keys file, ``route keys add``, 401/429 at the gateway, names in logs."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.conftest import run_cli
from tests.route.routeproc import free_port, route_toml
from tests.route.test_gateway import gateway, served, site
from tierwise.errors import ScenarioError
from tierwise.route.config import Gateway
from tierwise.route.edge import check_exposure
from tierwise.route.keys import KeyRing, add_key, digest, load_keys

HI = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_keys_add_prints_the_key_once_and_stores_its_digest(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    run = run_cli("route", "keys", "add", "alice", "--keys-file", str(path), "--rate", "2")
    assert run.code == 0, run.stderr
    key = run.stdout.strip()
    assert key.startswith("tw-") and len(key) == 46
    text = path.read_text()
    assert key not in text and digest(key).hex() in text and "rate = 2.0" in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = run_cli("route", "keys", "add", "alice", "--keys-file", str(path))
    assert again.code == 2 and "already named 'alice'" in again.stderr
    bob = add_key(path, "bob", concurrency=3)
    clients = load_keys(path)
    assert {c.name for c in clients.values()} == {"alice", "bob"}
    assert clients[digest(bob)].concurrency == 3 and clients[digest(key)].rate == 2.0
    bad = run_cli("route", "keys", "add", "no spaces", "--keys-file", str(path))
    assert bad.code == 2 and "client name" in bad.stderr


def test_a_keys_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    add_key(path, "alice")
    os.chmod(path, 0o640)
    with pytest.raises(ScenarioError, match="chmod 600"):
        load_keys(path)
    os.chmod(path, 0o600)
    path.write_text(path.read_text() + '\n[[client]]\nname = "x"\nsha256 = "zz"\n')
    with pytest.raises(ScenarioError, match="client"):
        load_keys(path)


def test_key_ring_finds_by_digest_only_a_bearer_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    key = add_key(path, "alice")
    ring = KeyRing(load_keys(path))
    assert ring.find(f"Bearer {key}".encode()).name == "alice"
    assert ring.find(f"bearer {key}".encode()).name == "alice"
    assert ring.find(key.encode()) is None
    assert ring.find(f"Bearer {key}x".encode()) is None
    assert ring.find(b"Bearer ") is None and ring.find(None) is None


def test_beyond_loopback_without_keys_refuses_to_start(tmp_path: Path) -> None:
    check_exposure(Gateway(host="127.0.0.1"))
    check_exposure(Gateway(host="::1"))
    with pytest.raises(ScenarioError, match="beyond loopback"):
        check_exposure(Gateway(host="0.0.0.0"))
    check_exposure(Gateway(host="0.0.0.0"), public_flag=True)
    check_exposure(Gateway(host="0.0.0.0", public_without_keys=True))
    check_exposure(Gateway(host="0.0.0.0", keys_file=str(tmp_path / "k")))
    config = route_toml(tmp_path, "http://127.0.0.1:9", free_port(), 'host = "0.0.0.0"')
    run = run_cli("route", "--config", str(config))
    assert run.code == 2 and "gateway.host" in run.stderr and "--public-without-keys" in run.stderr


@pytest.mark.slow
def test_the_gateway_wants_a_key_and_counts_by_name(tmp_path: Path) -> None:
    """No key or a wrong one: 401 in OpenAI's shape. A right key: the request is served,
    the site sees its own key (never the client's) and the log and metrics carry the
    client's name. Over its rate or concurrency: 429 with Retry-After."""
    keys = tmp_path / "keys.toml"
    alice = add_key(keys, "alice")
    slow = add_key(keys, "slow", rate=1.0, burst=2)
    single = add_key(keys, "single", concurrency=1)
    seen: list[str | None] = []

    async def complete(request):
        seen.append(request.headers.get("authorization"))
        body = await request.json()
        if body.get("stream"):

            async def events():
                await asyncio.sleep(1.0)
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        return JSONResponse({"choices": [], "usage": usage})

    async def models(request):
        return JSONResponse({"data": []})

    upstream = Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"]),
                                 Route("/v1/models", models)])  # fmt: skip
    os.environ["TIERWISE_TEST_SITE_KEY"] = "site-secret"
    with served(upstream, free_port()) as url:
        edge = {**site("edge", url, "1 ms"), "api_key_env": "TIERWISE_TEST_SITE_KEY"}
        router, port = gateway([edge], tmp_path, keys_file=str(keys), probe_interval="1 h")
        with served(router.app, port) as gw:
            none = httpx.post(gw + "/v1/chat/completions", json=HI)
            wrong = httpx.post(gw + "/v1/chat/completions", json=HI,
                               headers={"authorization": "Bearer tw-nope"})  # fmt: skip
            for r in (none, wrong):
                assert r.status_code == 401
                assert r.json()["error"]["type"] == "authentication_error"
            assert httpx.get(gw + "/v1/models").status_code == 401  # passthrough too
            ok = httpx.post(gw + "/v1/chat/completions", json=HI,
                            headers={"authorization": f"Bearer {alice}"})  # fmt: skip
            assert ok.status_code == 200
            assert seen == ["Bearer site-secret"]
            models = httpx.get(gw + "/v1/models", headers={"authorization": f"Bearer {alice}"})
            assert models.status_code == 200
            s = {"authorization": f"Bearer {slow}"}
            codes = [httpx.post(gw + "/v1/chat/completions", json=HI, headers=s)
                     for _ in range(4)]  # fmt: skip
            assert [c.status_code for c in codes[:2]] == [200, 200]
            limited = codes[-1]
            assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
            assert limited.json()["error"]["code"] == "rate_limit_exceeded"

            async def two_at_once() -> list[int]:
                h = {"authorization": f"Bearer {single}"}
                async with httpx.AsyncClient(base_url=gw, headers=h, timeout=10) as c:
                    first = asyncio.create_task(
                        c.post("/v1/chat/completions", json={**HI, "stream": True})
                    )
                    await asyncio.sleep(0.3)
                    second = await c.post("/v1/chat/completions", json=HI)
                    return [(await first).status_code, second.status_code]

            assert asyncio.run(two_at_once()) == [200, 429]
            metrics = httpx.get(gw + "/metrics").text  # open: the gateway is on loopback
    records = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert {r["client"] for r in records} == {"alice", "slow", "single"}
    assert 'tierwise_route_client_requests_total{client="alice"} 2.0' in metrics
    assert 'tierwise_route_rejected_total{code="invalid_api_key",status="401"} 3.0' in metrics


def test_metrics_need_a_key_beyond_loopback(tmp_path: Path) -> None:
    """/metrics is open on a loopback gateway (keys or not) and on one without keys;
    a keyed gateway beyond loopback asks a key for it like for any path."""
    from tierwise.route.edge import Gate

    keys = tmp_path / "keys.toml"
    add_key(keys, "scraper")
    assert Gate(Gateway(host="127.0.0.1", keys_file=str(keys))).metrics_open
    assert Gate(Gateway(host="0.0.0.0", public_without_keys=True)).metrics_open
    assert not Gate(Gateway(host="0.0.0.0", keys_file=str(keys))).metrics_open
