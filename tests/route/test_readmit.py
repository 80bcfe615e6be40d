"""A benched site that comes back is probed quickly and used again within 2 s."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.modelserver import model_server
from tests.route.test_gateway import gateway, served, site

pytestmark = pytest.mark.slow

FAST = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")


def test_restarted_site_is_used_again_within_2_s(tmp_path: Path) -> None:
    """Down, it is benched for 30 s; back up, a quick probe re-admits it in under 2 s."""
    with model_server(*FAST) as fast, model_server("--decode-step", "5 ms") as slow:
        sites = [site("fast", fast, "1 ms"), site("slow", slow, "5 ms")]
        more = {"bench": "30 s", "failures_to_bench": 1}
        router, port = gateway(sites, tmp_path, probe_interval="30 s", **more)
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=60) as c:
            assert c.post("/v1/chat/completions", json=body).headers["x-tierwise-site"] == "fast"
            httpx.post(fast + "/admin/behaviour", json={"down": True})
            assert c.post("/v1/chat/completions", json=body).headers["x-tierwise-site"] == "slow"
            assert 'tierwise_route_benched{site="fast"} 1.0' in c.get("/metrics").text
            time.sleep(2.0)  # down for a while: its probes fail and back off
            assert c.post("/v1/chat/completions", json=body).headers["x-tierwise-site"] == "slow"
            httpx.post(fast + "/admin/behaviour", json={"down": False})
            back = time.monotonic()
            chosen = "slow"
            while chosen != "fast" and time.monotonic() - back < 10.0:
                time.sleep(0.05)
                chosen = c.post("/v1/chat/completions", json=body).headers["x-tierwise-site"]
            readmitted_s = time.monotonic() - back
    assert chosen == "fast" and readmitted_s < 2.0, f"re-admitted after {readmitted_s:.2f} s"
