"""Real HTTP clients through the relay's SOCKS5 port: httpx, requests, and `tierwise route`."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import httpx
import pytest

from tests.modelserver import model_server
from tests.relay.conftest import Stack


def test_httpx_through_socks(stack: Stack) -> None:
    """httpx (socksio) GETs by address and by name, and POSTs a 354,640-byte body."""
    with httpx.Client(proxy=f"socks5://127.0.0.1:{stack.socks_port}", timeout=20) as client:
        for host in ("127.0.0.1", "localhost"):
            got = client.get(f"http://{host}:{stack.http_port}/200000")
            assert got.content == bytes(i % 251 for i in range(200_000))
        body = bytes((7 * i) % 256 for i in range(354_640))
        posted = client.post(f"http://127.0.0.1:{stack.http_port}/", content=body)
        assert posted.text == f"354640 {hashlib.sha256(body).hexdigest()}"
        with pytest.raises(httpx.ProxyError):
            client.get("http://127.0.0.1:9/")  # not allowed: the proxy refuses it


def test_requests_through_socks(stack: Stack) -> None:
    """requests (PySocks, socks5h: the name is resolved at the gateway) fetches byte-exact."""
    import requests

    proxy = f"socks5h://127.0.0.1:{stack.socks_port}"
    got = requests.get(
        f"http://localhost:{stack.http_port}/100000",
        proxies={"http": proxy, "https": proxy},
        timeout=20,
    )
    assert got.content == bytes(i % 251 for i in range(100_000))


@pytest.mark.slow
def test_route_reaches_a_model_server_through_the_relay(stack: Stack, tmp_path: Path) -> None:
    """A route site with via = "relay" is served by a model server behind the relay gateway."""
    from tests.route.test_gateway import gateway, served, site

    with model_server("--decode-step", "1 ms", "--prefill-per-token", "0 s") as url:
        port = int(url.rsplit(":", 1)[1])
        stack.gateway._allow.add(("127.0.0.1", port))
        relayed = {**site("far", url, "1 ms"), "via": "relay",
                   "relay": f"127.0.0.1:{stack.socks_port}"}  # fmt: skip
        router, router_port = gateway([relayed], tmp_path)
        with served(router.app, router_port) as gw:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
            t0 = time.monotonic()
            got = httpx.post(gw + "/v1/chat/completions", json=body, timeout=30)
            assert got.status_code == 200, got.text
            assert got.headers["x-tierwise-site"] == "far"
            assert got.json()["choices"][0]["message"]["content"]
            assert time.monotonic() - t0 < 10
    assert stack.gateway.counters["connected"] >= 1  # it went through the relay
