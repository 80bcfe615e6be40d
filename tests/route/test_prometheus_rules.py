"""The shipped Prometheus rules: promtool accepts them, a real Prometheus evaluates them
over a real gateway and a real relay scraped on loopback."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import httpx
import pytest

from tests.modelserver import free_port, model_servers
from tests.relay.conftest import Stack, http_server, stack, udp_echo  # noqa: F401 (fixtures)
from tests.relay.test_gateway_stats import fetch_through_relay, stats_port  # noqa: F401
from tests.route.test_gateway import gateway, served, site
from tierwise.lab.bench.procs import stop

RULES = Path(str(files("tierwise.examples") / "prometheus" / "tierwise-rules.yml"))
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def _needs(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} not installed (Debian: apt-get install prometheus)")
    return path


def test_promtool_accepts_the_rules() -> None:
    """`promtool check rules` passes the shipped file, with route and relay groups."""
    out = subprocess.run([_needs("promtool"), "check", "rules", str(RULES)],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout
    text = RULES.read_text()
    for name in ("tierwise-route", "tierwise-relay", "loss_ratio", "fec_overhead_ratio",
                 "prediction_error_ratio", "p95_1m", "error_ratio"):  # fmt: skip
        assert name in text


@contextlib.contextmanager
def prometheus(tmp: Path, targets: dict[str, int]) -> Iterator[str]:
    """A real Prometheus on a free loopback port, scraping ``targets`` every second and
    evaluating the shipped rules every second; yields its URL."""
    binary = _needs("prometheus")
    jobs = "".join(
        f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        for job, port in targets.items()
    )
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {RULES}\nscrape_configs:\n{jobs}",
        encoding="utf-8",
    )
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _until(lambda: _ready(url), "prometheus ready")
        yield url
    finally:
        stop(proc)


def _ready(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url + "/-/ready", timeout=2).status_code == 200
    return False


def _query(url: str, expr: str) -> dict[str, float]:
    """An instant query's result: the value per series, keyed by its labels' text."""
    got = httpx.get(url + "/api/v1/query", params={"query": expr}, timeout=5).json()
    assert got["status"] == "success", got
    return {
        ",".join(f"{k}={v}" for k, v in sorted(r["metric"].items()) if k != "__name__"): float(
            r["value"][1]
        )
        for r in got["data"]["result"]
    }


def _until(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.slow
def test_rules_evaluate_over_a_scraped_gateway_and_relay(
    tmp_path: Path,
    stack: Stack,  # noqa: F811
    stats_port: int,  # noqa: F811
) -> None:
    """Every attempt at a failing site fails: its error ratio is 1, the other's 0;
    relay traffic gives the loss and FEC overhead ratios a value."""
    args = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")
    with model_servers(args, args) as (good, bad):
        sites = [site("bad", bad, "1 ms"), site("good", good, "2 ms")]
        router, port = gateway(sites, tmp_path, probe_interval="1 h", failures_to_bench=99)
        httpx.post(bad + "/admin/behaviour", json={"error_rate": 1.0})
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=30) as c:

            def requests() -> None:  # pinned: one fails at the bad site, one answers at the good
                for name, status in (("bad", 503), ("good", 200)):
                    pin = {"x-tierwise-site": name}
                    got = c.post("/v1/chat/completions", json=CHAT, headers=pin)
                    assert got.status_code == status

            requests()
            fetch_through_relay(stack, 50_000)
            with prometheus(tmp_path, {"route": port, "relay": stats_port}) as prom:
                scraped = 'up{job=~"route|relay"} == 1'
                _until(lambda: len(_query(prom, scraped)) == 2, "both targets scraped")
                time.sleep(1.2)  # a scrape with the first counts, then more to count
                requests()
                fetch_through_relay(stack, 200_000)
                errors = "site:tierwise_route_error_ratio:rate1m"
                _until(lambda: _query(prom, errors).get("site=bad", 0) > 0, "error ratio")
                ratio = _query(prom, errors)
                shares = "site_stage:tierwise_route_stage_seconds:share1m"
                _until(lambda: _query(prom, shares), "stage shares")
                share = _query(prom, shares)
                fec = "instance:tierwise_relay_fec_overhead_ratio:rate1m"
                _until(lambda: _query(prom, fec), "relay FEC overhead")
                loss = _query(prom, "instance:tierwise_relay_loss_ratio:rate1m")
                alerts = httpx.get(prom + "/api/v1/rules", timeout=5).json()
    assert ratio["site=bad"] == pytest.approx(1.0) and ratio["site=good"] == 0.0
    assert 0.0 <= next(iter(loss.values())) <= 1.0
    good = {k: v for k, v in share.items() if "site=good" in k}
    assert good["site=good,stage=compute"] > 0 and sum(good.values()) == pytest.approx(1.0)
    groups = {g["name"]: g for g in alerts["data"]["groups"]}
    route_rules = {r["name"]: r for r in groups["tierwise-route"]["rules"]}
    assert route_rules["TierwiseRouteSiteErrors"]["state"] in ("pending", "firing")
    assert all(r["health"] == "ok" for g in groups.values() for r in g["rules"])
