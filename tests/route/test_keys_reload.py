"""Client keys reload without a restart: the keys file's change, or SIGHUP."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.modelserver import model_servers
from tests.route.routeproc import free_port, route_process, route_toml
from tierwise.openai_api import RequestRejected
from tierwise.route.config import Gateway
from tierwise.route.edge import Gate
from tierwise.route.keys import add_key

HI = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _status(gw: str, key: str) -> int:
    return httpx.post(gw + "/v1/chat/completions", json=HI, timeout=10,
                      headers={"authorization": f"Bearer {key}"}).status_code  # fmt: skip


def _until(gw: str, key: str, want: int, within_s: float = 5.0) -> float:
    """Seconds until ``key`` gets ``want`` (an AssertionError after ``within_s``)."""
    t0 = time.monotonic()
    while (got := _status(gw, key)) != want:
        assert time.monotonic() - t0 < within_s, f"still {got}, not {want}"
        time.sleep(0.1)
    return time.monotonic() - t0


def test_a_changed_keys_file_counts_without_a_restart(tmp_path: Path) -> None:
    """A key added to the file is let in, a key removed refused, within the check period
    (one stat a second); a broken file keeps the keys in force and says so once; SIGHUP
    reloads at once."""
    keys = tmp_path / "keys.toml"
    alice = add_key(keys, "alice")
    with model_servers(("--decode-step", "1 ms")) as (site,):
        port = free_port()
        config = route_toml(tmp_path, site, port, gateway=f'keys_file = "{keys}"')
        with route_process(config) as (gw, proc):
            assert _status(gw, alice) == 200
            bob = add_key(keys, "bob")  # appended while the gateway runs
            assert _until(gw, bob, 200) < 3.0
            kept = keys.read_text()
            without_alice = kept.split("[[client]]")
            keys.write_text(without_alice[0] + "[[client]]" + without_alice[2])
            assert _until(gw, alice, 401) < 3.0 and _status(gw, bob) == 200
            keys.write_text(kept + "\n[[client]]\nname = 'x'\n")  # no sha256: does not load
            time.sleep(1.3)
            assert _status(gw, bob) == 200 and _status(gw, alice) == 401  # old keys kept
            keys.write_text(kept)
            os.utime(keys, ns=(1, 1))  # the stamp still differs (size); and SIGHUP asks now
            proc.send_signal(signal.SIGHUP)
            assert _until(gw, alice, 200, within_s=0.5) < 0.5  # no wait for the period
            assert proc.poll() is None  # SIGHUP did not end it
            proc.terminate()
            proc.wait(10)
            err = proc.stderr.read().decode() if proc.stderr else ""
    assert err.count("keys file not reloaded") == 1 and "client[2].sha256" in err


def test_gate_reload_keeps_requests_in_flight(tmp_path: Path) -> None:
    """A client's new limits apply at once; what it has in flight still counts."""
    keys = tmp_path / "keys.toml"
    key = add_key(keys, "alice", concurrency=2)
    gate = Gate(Gateway(keys_file=str(keys)))
    scope = {"headers": [(b"authorization", f"Bearer {key}".encode())]}
    client = gate.admit(scope)
    assert client is not None and gate.buckets["alice"].concurrency == 2
    text = keys.read_text().replace("concurrency = 2", "concurrency = 1")
    keys.write_text(text)
    gate.reload_asked = True
    with pytest.raises(RequestRejected) as refused:
        gate.admit(scope)
    assert refused.value.status == 429
    gate.release(client)
    assert gate.admit(scope) is not None
