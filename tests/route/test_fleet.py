"""Gateway replicas sharing state through a real Redis: convergence, start-up load, bench,
in-flight, and carrying on through Redis killed, stopped, wrong, or refusing the password."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis as redis_py

from tests.modelserver import free_port, model_servers
from tests.route.test_gateway import served, site
from tierwise.catalog import load_catalog
from tierwise.lab.world.fleet import missing, redis_server
from tierwise.route.config import RouteConfig
from tierwise.route.gateway import Router
from tierwise.route.predict import site_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(missing("redis-server") is not None, reason=str(missing("redis-server"))),
]

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
FAST = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")


def replica(name: str, sites: list[dict], tmp: Path, state: str, **more) -> tuple[Router, int]:
    cfg = RouteConfig.model_validate(
        {
            "site": sites,
            "decision": {"hysteresis": 0.0},
            "gateway": {"decisions_log": str(tmp / f"{name}.jsonl"), "probe_interval": "1 h",
                        "state": state, "replica": name, "bench": "3 s", **more},
        }
    )  # fmt: skip
    return Router(cfg, [site_model(s, load_catalog(), "test") for s in cfg.site]), free_port()


@contextlib.contextmanager
def replicas(names, sites, tmp, state, **more) -> Iterator[list[tuple[Router, str]]]:
    with contextlib.ExitStack() as stack:
        out = []
        for name in names:
            router, port = replica(name, sites, tmp, state, **more)
            out.append((router, stack.enter_context(served(router.app, port))))
        yield out


def until(check: Callable[[], bool], timeout_s: float = 5.0) -> float:
    """Poll ``check`` until true; the time it took (fails after ``timeout_s``)."""
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < timeout_s, "not within the time allowed"
        time.sleep(0.005)
    return time.monotonic() - t0


def same(a: Router, b: Router, name: str) -> bool:
    ma, mb = a.models[name], b.models[name]
    return ma.estimates() == mb.estimates() and ma.service.theta == mb.service.theta


def test_replicas_converge_and_a_new_one_loads_the_state(tmp_path: Path) -> None:
    """Requests through one replica move the other's estimates to exactly its own
    (within a second); a replica started afterwards holds them before its first request."""
    with model_servers(FAST) as (url,), redis_server() as redis:
        sites = [site("edge", url, "1 ms")]
        with replicas(["a", "b"], sites, tmp_path, redis.url) as [(a, gw_a), (b, _)]:
            with httpx.Client(base_url=gw_a, timeout=30) as c:
                for _ in range(12):
                    assert c.post("/v1/chat/completions", json=BODY).status_code == 200
            until(lambda: same(a, b, "edge"), 1.0)
            assert b.fleet.received >= 12 and b.models["edge"].decode_factor.samples >= 12
            with replicas(["c"], sites, tmp_path, redis.url) as [(c_router, _)]:
                # loaded in start-up, before any traffic (its own first probe may follow)
                assert c_router.models["edge"].decode_factor.samples >= 12
                until(lambda: same(a, c_router, "edge"), 1.0)
            metrics = httpx.get(gw_a + "/metrics").text
    assert 'tierwise_route_fleet_up{replica="a"} 1.0' in metrics
    assert 'tierwise_route_requests_total{outcome="ok",replica="a",site="edge"} 12.0' in metrics


def test_a_site_benched_by_one_is_avoided_by_all(tmp_path: Path) -> None:
    """A site that fails at replica a (requests pinned to it) is benched there; b avoids
    it within a second without having sent it a single request."""
    with model_servers(FAST, FAST) as (u1, u2), redis_server() as redis:
        sites = [site("one", u1, "1 ms"), site("two", u2, "2 ms")]
        with replicas(["a", "b"], sites, tmp_path, redis.url) as [(a, gw_a), (b, gw_b)]:
            httpx.post(u1 + "/admin/behaviour", json={"error_rate": 1.0})
            with httpx.Client(timeout=30) as c:
                pin = {"x-tierwise-site": "one"}
                for _ in range(3):
                    r = c.post(gw_a + "/v1/chat/completions", json=BODY, headers=pin)
                    assert r.status_code == 503
                assert a.sites["one"].breaker.benched(time.monotonic())
                took = until(lambda: b.sites["one"].breaker.benched(time.monotonic()), 1.0)
                r = c.post(gw_b + "/v1/chat/completions", json=BODY)
        assert r.headers["x-tierwise-site"] == "two" and took < 1.0


def test_in_flight_across_the_fleet_feeds_the_queue(tmp_path: Path) -> None:
    """Requests in flight at replica a at a one-slot site are counted by b, whose
    prediction for that site then includes waiting behind them; a replica long gone,
    or garbage, is removed from the counts."""
    slow = ("--decode-step", "100 ms", "--prefill-per-token", "0 s", "--slots", "1")
    with model_servers(slow) as (url,), redis_server() as redis:
        sites = [{**site("edge", url, "100 ms"), "slots": 1}]
        ghosts = redis_py.Redis(port=redis.port)
        ghosts.hset("tierwise:route:inflight", mapping={"gone": '{"ts": 0, "sites": {"edge": 9}}',
                                                       "junk": "not json"})  # fmt: skip
        with replicas(["a", "b"], sites, tmp_path, redis.url) as [(_, gw_a), (b, _)]:
            until(lambda: set(ghosts.hkeys("tierwise:route:inflight")) == {b"a", b"b"}, 2.0)
            now = time.monotonic()
            shape_pred = b._predicted("edge", b.sites["edge"], _shape(b), now)
            post = {"json": BODY, "timeout": 30}
            url_a = gw_a + "/v1/chat/completions"
            threads = [
                threading.Thread(target=httpx.post, args=(url_a,), kwargs=post) for _ in range(3)
            ]
            for t in threads:
                t.start()
            until(lambda: b.link.others_inflight.get("edge", 0) >= 2, 2.0)
            busy = b._predicted("edge", b.sites["edge"], _shape(b), time.monotonic())
            for t in threads:
                t.join()
            assert busy.option.breakdown_s.get("backlog", 0) > 0.5
            assert busy.option.time_s > shape_pred.option.time_s + 0.5
            until(lambda: b.link.others_inflight.get("edge", 1) == 0, 2.0)


def _shape(router: Router):
    from tierwise.route.predict import RequestShape

    return RequestShape("/v1/chat/completions", 500, 10, 8, False, False, None, "any")


def test_redis_killed_stopped_and_back(tmp_path: Path, capfd) -> None:
    """SIGKILL and SIGSTOP of Redis mid-run: no request fails or waits on it, estimates
    keep moving locally, one line is logged per outage, and within 5 s of Redis
    returning both replicas are back and the other has caught up."""
    with model_servers(FAST) as (url,), redis_server() as redis:
        sites = [site("edge", url, "1 ms")]
        with replicas(["a", "b"], sites, tmp_path, redis.url) as [(a, gw_a), (b, _)]:
            c = httpx.Client(base_url=gw_a, timeout=30)
            redis.kill()
            before = a.models["edge"].decode_factor.samples
            for _ in range(8):
                assert c.post("/v1/chat/completions", json=BODY).status_code == 200
            assert a.models["edge"].decode_factor.samples >= before + 8  # learning goes on locally
            redis.start()
            back = until(lambda: a.link.up and b.link.up, 5.0)
            until(lambda: same(a, b, "edge"), 5.0 - back)  # a's kept observations republished
            redis.pause()  # connections open, nothing answers
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                assert c.post("/v1/chat/completions", json=BODY).status_code == 200
                times.append(time.perf_counter() - t0)
            assert max(times) < 0.5  # never the 1 s socket timeout of a stopped Redis
            redis.resume()
            until(lambda: a.link.up and same(a, b, "edge"), 5.0)
            c.close()
    err = capfd.readouterr().err
    assert err.count("fleet state at") >= 2 and "is back" in err
    assert err.count("unavailable") <= 6  # once per outage and replica, not per retry


def test_garbage_port_and_wrong_password(tmp_path: Path, capfd) -> None:
    """Something else on the state's port, or a Redis refusing the password: the
    gateway starts, answers every request from its own estimates, and says so once."""
    garbage = socket.socket()
    garbage.bind(("127.0.0.1", 0))
    garbage.listen()
    stop = threading.Event()

    def answer() -> None:
        garbage.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = garbage.accept()
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n<html>nope</html>")
                conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    pw = tmp_path / "redis.pass"
    pw.write_text("not-the-password\n")
    os.chmod(pw, 0o600)
    with model_servers(FAST) as (url,), redis_server(password="s3cret") as redis:
        sites = [site("edge", url, "1 ms")]
        port = garbage.getsockname()[1]
        for state, more in ((f"redis://127.0.0.1:{port}/0", {}),
                            (redis.url, {"state_password_file": str(pw)})):  # fmt: skip
            with replicas(["a"], sites, tmp_path, state, **more) as [(a, gw)]:
                for _ in range(3):
                    r = httpx.post(gw + "/v1/chat/completions", json=BODY, timeout=30)
                    assert r.status_code == 200
                time.sleep(1.0)  # a few reconnects: still one line
                assert not a.link.up and a.models["edge"].decode_factor.samples >= 3
    stop.set()
    thread.join()
    garbage.close()
    err = capfd.readouterr().err
    assert err.count("unavailable") == 2 and "refused the password" in err


def test_acl_user_over_tls(tmp_path: Path) -> None:
    """rediss:// with a private CA (trustme) and an ACL user from a 0600 file."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "k.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    pw = tmp_path / "redis.pass"
    pw.write_text("router s3cret-pass\n")
    os.chmod(pw, 0o600)
    tls = (str(cert_file), str(key_file), str(ca_file))
    with model_servers(FAST) as (url,), redis_server("s3cret-pass", "router", tls) as redis:
        more = {"state_password_file": str(pw), "state_ca_file": str(ca_file)}
        with replicas(["a", "b"], [site("edge", url, "1 ms")], tmp_path, redis.url,
                      **more) as [(a, gw), (b, _)]:  # fmt: skip
            assert httpx.post(gw + "/v1/chat/completions", json=BODY).status_code == 200
            until(lambda: a.link.up and b.link.up and same(a, b, "edge"), 3.0)


def test_a_replica_starting_while_redis_is_stopped(tmp_path: Path) -> None:
    """A replica started while Redis answers nothing (SIGSTOP) gives up after a socket
    timeout (1 s; the load never waits past 3 s) and serves from its priors; when Redis
    resumes it joins and catches up with what the others had learned."""
    with model_servers(FAST) as (url,), redis_server() as redis:
        sites = [site("edge", url, "1 ms")]
        with replicas(["a"], sites, tmp_path, redis.url) as [(_, gw_a)]:
            for _ in range(4):
                assert httpx.post(gw_a + "/v1/chat/completions", json=BODY).status_code == 200
            redis.pause()
            t0 = time.monotonic()
            with replicas(["b"], sites, tmp_path, redis.url) as [(b, gw_b)]:
                assert time.monotonic() - t0 < 6.0 and not b.link.up
                assert httpx.post(gw_b + "/v1/chat/completions", json=BODY).status_code == 200
                redis.resume()
                until(lambda: b.link.up and b.fleet.received >= 4, 5.0)


@pytest.mark.parametrize("how", ["fails", "swallows"])
def test_a_stop_whose_cancel_goes_astray_still_ends_the_link(
    tmp_path: Path, capfd, monkeypatch, how: str
) -> None:
    """A stop whose cancel meets a Redis call that fails as it is torn down (Python 3.11's
    TaskGroup then raises the failure alone), or one that loses the cancel: the link must
    still end at once — not carry on retrying, logging outages, and holding up the
    gateway's shutdown."""
    from tierwise.route.fleetlink import FleetLink

    running = threading.Event()
    real_client = FleetLink._client

    def client(self):
        c = real_client(self)
        real_hset = c.hset

        async def hset(*args, **kwargs):
            running.set()
            try:
                await asyncio.sleep(30)  # the stop's cancel lands here
            except asyncio.CancelledError:
                if how == "fails":
                    raise ConnectionError("connection closed under a stop") from None
            return await real_hset(*args, **kwargs)  # "swallows": on with the loop

        c.hset = hset
        return c

    monkeypatch.setattr(FleetLink, "_client", client)

    async def run(router: Router) -> None:
        await router.start()
        async with asyncio.timeout(5):
            while not running.is_set():
                await asyncio.sleep(0.01)
        await router.stop()  # a swallowed stop waits here for ever
        assert router.link._task.done()

    with model_servers(FAST) as (url,), redis_server() as redis:
        router, _ = replica("a", [site("edge", url, "1 ms")], tmp_path, redis.url)
        thread = threading.Thread(target=asyncio.run, args=(run(router),), daemon=True)
        thread.start()
        thread.join(5)
        assert not thread.is_alive(), "the link's stop did not end it"
    assert "unavailable" not in capfd.readouterr().err
