"""Three ``tierwise route`` processes behind Debian's HAProxy (round-robin), sharing state
through Debian's redis-server: every request answered, each replica's metrics labelled,
the three decisions logs read together; the fleet's settings checked at start (exit 2)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import httpx
import pytest

from tests.conftest import run_cli
from tests.modelserver import model_servers
from tests.route.routeproc import free_port, route_process, route_toml
from tierwise.lab.world.fleet import haproxy, missing, redis_server

FAST = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@pytest.mark.slow
@pytest.mark.skipif(
    missing("redis-server", "haproxy") is not None, reason=str(missing("redis-server", "haproxy"))
)
def test_three_replicas_behind_haproxy(tmp_path: Path) -> None:
    """Round-robin over three sharing replicas: all answered, each learns the others'
    requests, /metrics labelled, the three logs read as one (by --log or {replica})."""
    with model_servers(FAST) as (url,), redis_server() as redis, contextlib.ExitStack() as st:
        ports, logs = [], []
        for i in range(3):
            d = tmp_path / f"r{i}"
            d.mkdir()
            port = free_port()
            cfg = route_toml(d, url, port)
            logs.append(d / "d.jsonl")
            st.enter_context(route_process(cfg, "--state", redis.url, "--replica", f"r{i}"))
            ports.append(port)
        with haproxy(ports) as lb, httpx.Client(base_url=lb.url, timeout=30) as c:
            for _ in range(12):
                assert c.post("/v1/chat/completions", json=BODY).status_code == 200
        metrics = httpx.get(f"http://127.0.0.1:{ports[0]}/metrics").text
    assert 'tierwise_route_fleet_up{replica="r0"} 1.0' in metrics
    received = [
        line for line in metrics.splitlines()
        if line.startswith('tierwise_route_fleet_observations_total{replica="r0",what="received"}')
    ]  # fmt: skip
    assert received and float(received[0].split()[-1]) >= 6  # the others' requests
    args = [a for log in logs for a in ("--log", str(log))]
    out = run_cli("route", "decisions", *args, "--json")
    assert out.code == 0, out.stderr
    records = json.loads(out.stdout)
    assert len(records) == 12
    assert {r["replica"] for r in records} == {"r0", "r1", "r2"}
    assert [r["ts"] for r in records] == sorted(r["ts"] for r in records)
    table = run_cli("route", "decisions", *args)
    assert table.code == 0 and "replica" in table.stdout and "r2" in table.stdout
    for i, log in enumerate(logs):  # decisions_log = ".../route-{replica}.jsonl": all found
        (tmp_path / f"route-r{i}.jsonl").write_bytes(log.read_bytes())
    cfg = route_toml(tmp_path, url, free_port())
    cfg.write_text(cfg.read_text().replace(str(tmp_path / "d.jsonl"),
                                           str(tmp_path / "route-{replica}.jsonl")))  # fmt: skip
    out = run_cli("route", "decisions", "--config", str(cfg), "--json")
    assert out.code == 0 and len(json.loads(out.stdout)) == 12, out.stderr


def test_fleet_settings_are_checked_at_start(tmp_path: Path) -> None:
    """A state URL that is not Redis's, a password file others can read, a CA file
    without rediss://: one line naming what and where, exit 2, before serving."""
    pw = tmp_path / "redis.pass"
    pw.write_text("secret\n")
    os.chmod(pw, 0o644)
    cases = [
        ("", ("--state", "http://127.0.0.1:6379"), "--state", "redis://HOST:PORT/DB"),
        ('state = "redis://u:p@127.0.0.1:1/0"', (), "gateway.state", "state_password_file"),
        (f'state = "redis://127.0.0.1:1/0"\nstate_password_file = "{pw}"', (), str(pw),
         "chmod 600"),
        ('state_ca_file = "ca.pem"', (), "gateway.state_ca_file", "needs state"),
        ('state = "redis://127.0.0.1:1/0"\nreplica = "a b"', (), "gateway.replica", "match"),
    ]  # fmt: skip
    for gateway, args, where, says in cases:
        cfg = route_toml(tmp_path, "http://127.0.0.1:9", free_port(), gateway=gateway)
        out = run_cli("route", "--config", str(cfg), *args)
        assert out.code == 2, (gateway, out.stderr)
        assert where in out.stderr and says in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
