"""The keep-alive race on every transport the gateway uses: HTTPS and through the relay.

A real uvicorn (on uvloop, as `uvicorn` runs by default) serves the stand-in's app over
TLS with a test CA's certificate (``trustme``) and closes a connection ``KEEP_ALIVE_S``
after its last answer. The gateway fronts it twice: directly (``https://``, the site's
``ca_file``) and through a real relay pair on loopback (SOCKS5, then TLS). Its pools are
warmed, the server's loop is stopped (SIGSTOP: late, as on a loaded host) just before its
keep-alive, requests pinned to each route are sent into the reused connections, and the
server goes on past its keep-alive: its due timers close those connections with the
requests unread. Each request is answered by the route it was pinned to (no failover, no
503), and ``/metrics`` counts the resends per route.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme
import uvicorn

from tests.relay.conftest import relay_pair
from tests.route.test_gateway import gateway, site
from tierwise.lab.world.model_server import free_port

pytestmark = pytest.mark.slow

KEEP_ALIVE_S = 3.0  # the server's keep-alive (uvicorn's default is 5 s: the same race, later)
IDLE_S = 1.5  # how long the pooled connections idle before the server is stopped
STALL_S = 2.5  # stopped this long: the keep-alive timers are due when it goes on
WAVE = 6  # requests per route and wave
HI = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
SERVER = """\
import sys, uvicorn
from tierwise.lab.world.model_server import Behaviour, ModelServer
app = ModelServer("qwen3-8b", Behaviour(decode_step_s=0.001, prefill_s_per_token=0.0)).app
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error",
            timeout_keep_alive=float(sys.argv[2]), ssl_certfile=sys.argv[3])
"""


@contextlib.contextmanager
def tls_server(tmp: Path) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """(https URL, the CA's PEM, the process) of a uvicorn serving the stand-in over TLS."""
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(tmp / "server.pem")
    ca.cert_pem.write_to_path(tmp / "ca.pem")
    port = free_port()
    args = [str(port), str(KEEP_ALIVE_S), str(tmp / "server.pem")]
    proc = subprocess.Popen([sys.executable, "-c", SERVER, *args], stderr=subprocess.PIPE)
    url = f"https://127.0.0.1:{port}"
    try:
        verify = ssl.create_default_context(cafile=str(tmp / "ca.pem"))
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, f"{url} did not start"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/v1/models", verify=verify, timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url, tmp / "ca.pem", proc
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(10)


async def wave(c: httpx.AsyncClient, routes: list[str]) -> list[httpx.Response]:
    return await asyncio.gather(
        *(
            c.post("/v1/chat/completions", json=HI, headers={"x-tierwise-site": r})
            for r in routes
            for _ in range(WAVE)
        )
    )


async def race(router, port: int, routes: list[str], pid: int) -> tuple[list, str]:
    """Serve the gateway on this loop, warm its pools, then send a wave into the race."""
    server = uvicorn.Server(uvicorn.Config(router.app, port=port, log_level="error"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not serving.done(), "the gateway did not start"
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            warm = await wave(c, routes)
            assert all(r.status_code == 200 for r in warm), [r.text for r in warm]
            await asyncio.sleep(IDLE_S)
            os.kill(pid, signal.SIGSTOP)
            try:
                sent = asyncio.ensure_future(wave(c, routes))
                await asyncio.sleep(STALL_S)
            finally:
                os.kill(pid, signal.SIGCONT)
            answers = await sent
            metrics = (await c.get("/metrics")).text
    finally:
        server.should_exit = True
        await serving
    return answers, metrics


def test_https_and_relay_sites_resend_into_a_closing_pooled_connection(tmp_path: Path) -> None:
    """No failover and no 503 from the race on either route; each route counts resends."""
    with tls_server(tmp_path) as (url, ca, proc):
        port = int(url.rsplit(":", 1)[1])
        entry = {**site("cloud", url, "1 ms", tier="cloud"), "ca_file": str(ca)}

        async def main() -> tuple[list, str]:
            async with relay_pair({("127.0.0.1", port)}) as (_gw, client, socks_port):
                for _ in range(200):
                    if client.session is not None and client.session.conn.established:
                        break
                    await asyncio.sleep(0.02)
                relayed = {**entry, "via": ["direct", "relay"], "relay": f"127.0.0.1:{socks_port}"}
                router, gw_port = gateway([relayed], tmp_path, probe_interval="1 h")
                return await race(router, gw_port, ["cloud", "cloud+relay"], proc.pid)

        answers, metrics = asyncio.run(main())
    got = [(r.status_code, r.headers.get("x-tierwise-site")) for r in answers]
    assert got == [(200, "cloud")] * WAVE + [(200, "cloud+relay")] * WAVE, [r.text for r in answers]
    counts = {
        line.split('site="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("tierwise_route_upstream_resent_total{")
    }
    assert counts.get("cloud", 0) >= 1 and counts.get("cloud+relay", 0) >= 1, counts
    assert "tierwise_route_failovers_total 0.0" in metrics
