"""objective = "pareto": time, energy, cost and quality; the planner's rule; headers; the log."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.modelserver import model_servers
from tests.route.test_gateway import served
from tierwise.catalog import load_catalog
from tierwise.errors import ScenarioError
from tierwise.plan.choice import choose
from tierwise.route.config import RouteConfig, load_route
from tierwise.route.gateway import Router
from tierwise.route.pareto import choose_pareto, parse_task, parse_weights, request_cost
from tierwise.route.predict import RequestShape, predict, site_model

EXAMPLE = Path(__file__).parents[2] / "src/tierwise/examples/route.toml"
# the device a 0.6B, the edge an 8B q4, the cloud an 8B BF16 (relative benchmark scores)
QUALITY = {"device": 0.55, "edge": 0.9, "cloud": 1.0}


def _models(quality: dict[str, float] | None = None, prices: bool = True):
    cfg = load_route(EXAMPLE)
    sites = []
    for s in cfg.site:
        update: dict = {"quality": (quality or {}).get(s.name, 1.0)}
        if prices and s.name == "cloud":
            update["cost_per_token"] = (1e-6, 4e-6)  # an API's price per token
        sites.append(s.model_copy(update=update))
    cat = load_catalog()
    return {s.name: site_model(s, cat, "test") for s in sites}


def _shape(deadline: float | None = None, bytes_up: int = 2000) -> RequestShape:
    return RequestShape("/v1/chat/completions", bytes_up, 500, 64, False, False, deadline, "any")


@pytest.mark.parametrize("weights", [{}, {"time": 5.0}, {"energy": 3.0, "cost": 0.0},
                                     {"cost": 10.0}, {"time": 0.0, "energy": 1.0}])  # fmt: skip
@pytest.mark.parametrize("bytes_up", [2000, 4_000_000])
def test_equal_quality_is_the_planners_pareto_choice(weights, bytes_up) -> None:
    """With every site's quality equal, the route's choice and front are what the
    planner's ``objective = "pareto"`` rule (``tierwise plan --objective pareto``'s
    ``choose``) gives on the same options."""
    models = _models()
    req = _shape(bytes_up=bytes_up)
    preds = [predict(m, req) for m in models.values()]
    site, _, log = choose_pareto(preds, models, req, weights)
    options = []
    for p in preds:
        o = p.option
        o.extra["cost"] = request_cost(models[p.site], req, p.expected_s)
        options.append(o)
    planned, reason, _ = choose(options, "pareto", weights)
    assert site == planned
    assert log["front"] == [o.site for o in options if o.extra["pareto"]]
    assert "Pareto front" in reason


SCENARIO = """[task]
kind = "request"
upload = "{up} B"
download = "{down} B"

[task.model]
model = "qwen3-8b"
weights = "q4_0"
context = 4096
decode_tokens = {out}
prefill_tokens = {prompt}

[decision]
objective = "pareto"
weights = {{ {weights} }}
"""


@pytest.mark.parametrize(("weights", "bytes_up"), [({}, 2000), ({"energy": 50.0}, 2000),
                                                   ({"time": 5.0}, 4_000_000)])  # fmt: skip
def test_same_choice_as_tierwise_plan_objective_pareto(tmp_path: Path, weights, bytes_up) -> None:
    """`tierwise plan --objective pareto` on a scenario of the route's sites (the example
    route.toml, at their priors) and the request's task gives the same times, front and
    choice as the router's pareto choice for that request."""
    from tests.conftest import run_cli

    models = _models(prices=False)
    req = _shape(bytes_up=bytes_up)
    preds = [predict(m, req) for m in models.values()]
    site, _, log = choose_pareto(preds, models, req, weights)
    down = 400 + req.output_tokens * 8  # the bytes per token prior of every site
    text = SCENARIO.format(up=bytes_up, down=down, out=req.output_tokens,
                           prompt=req.prompt_tokens,
                           weights=", ".join(f"{k} = {v}" for k, v in weights.items()))  # fmt: skip
    units = {"name": "", "tier": "", "hardware": "", "region": "", "uplink": " B/s",
             "downlink": " B/s", "rtt": " s"}  # fmt: skip
    for s in load_route(EXAMPLE).site:
        text += "\n[[site]]\n" + "".join(
            f'{k} = "{getattr(s, k)}{unit}"\n'
            for k, unit in units.items() if getattr(s, k, None) is not None
        )  # fmt: skip
        if s.energy_per_token is not None:
            low, high = s.energy_per_token
            text += f'energy_per_token = ["{low} J", "{high} J"]\n'
        if s.hardware == "phone-lpddr5x":  # no BF16 peak: the router learns its prefill
            text += 'prefill = "0 s"\n'
    scenario = tmp_path / "same.toml"
    scenario.write_text(text, encoding="utf-8")
    run = run_cli("plan", str(scenario), "--objective", "pareto", "--json")
    assert run.code == 0, run.stderr
    planned = run.json()
    assert planned["choice"] == site
    times = {o["site"]: o["time_s"] for o in planned["options"]}
    assert times == pytest.approx({p.site: p.option.time_s for p in preds}, rel=1e-9)
    assert f"({', '.join(log['front'])})" in planned["reason"]


def test_quality_moves_the_choice_and_the_deadline_still_rules() -> None:
    """A quality weight sends the request to the best model; a time weight to the
    fastest; a deadline the best model cannot meet rules it out; a site worse on every
    metric is off the front."""
    models = _models(QUALITY, prices=False)
    req = _shape()
    preds = [predict(m, req) for m in models.values()]
    fastest = min(preds, key=lambda p: p.expected_s).site
    by_quality, _, log = choose_pareto(preds, models, req, {"quality": 100.0})
    assert by_quality == "cloud" and "cloud" in log["front"]
    assert log["metrics"]["device"]["quality"] == pytest.approx(1 / 0.55)
    by_time, _, _ = choose_pareto(preds, models, req, {"time": 100.0, "quality": 0.0})
    assert by_time == fastest
    cloud_s = next(p.expected_s for p in preds if p.site == "cloud")
    tight = _shape(deadline=cloud_s * 0.9)
    preds = [predict(m, tight) for m in models.values()]
    for p in preds:
        p.option.meets_deadline = p.expected_s <= tight.deadline_s
    ontime = {p.site for p in preds if p.option.meets_deadline}
    choice, _, _ = choose_pareto(preds, models, tight, {"quality": 100.0})
    assert choice != "cloud" and (choice in ontime or not ontime)
    worse = dict(QUALITY, device=0.5)
    slow = _models(worse, prices=False)
    preds = [predict(m, req) for m in slow.values()]
    edge_j = next(p for p in preds if p.site == "edge").option.energy_key
    for p in preds:  # the device: slower, worse and hungrier than the edge
        if p.site == "device":
            p.expected_s, p.option.energy_j = 1e3, 2 * edge_j
    _, _, log = choose_pareto(preds, slow, req, {})
    assert "device" not in log["front"]


def test_headers_are_checked() -> None:
    """The weights and task headers parse, or fail naming the header and the item."""
    assert parse_weights("time=1, quality=3") == {"time": 1.0, "quality": 3.0}
    assert parse_weights(None) == {} and parse_task(" code ") == "code"
    for bad, words in [("speed=1", "speed=1"), ("time", "metric=weight"),
                       ("time=-1", "from 0"), ("time=x", "'x'"),
                       ("time=0,energy=0,cost=0,quality=0", "above 0")]:  # fmt: skip
        with pytest.raises(ScenarioError, match="x-tierwise-weights") as exc:
            parse_weights(bad)
        assert words in str(exc.value)
    with pytest.raises(ScenarioError, match="x-tierwise-task"):
        parse_task("a b")
    with pytest.raises(ScenarioError, match="x-tierwise-task"):
        parse_task("x" * 65)


def test_config_quality_and_weights_are_checked() -> None:
    """quality outside (0, 1] and an all-zero [decision] weights are config errors."""
    base = {"name": "a", "tier": "edge", "url": "http://x", "decode_step": "1 ms"}
    for site, decision in [({**base, "quality": 1.5}, {}), ({**base, "quality": 0}, {}),
                           ({**base, "task_quality": {"code": 2}}, {}),
                           (base, {"weights": {"time": 0, "energy": 0, "cost": 0,
                                               "quality": 0}}),
                           (base, {"weights": {"speed": 1}})]:  # fmt: skip
        with pytest.raises(Exception, match=r"quality|weights|speed"):
            RouteConfig.model_validate({"site": [site], "decision": decision})


@pytest.mark.slow
def test_gateway_routes_by_quality_header_and_logs_the_front(tmp_path: Path) -> None:
    """Over real model servers: the default weights pick the fast small model; a request
    weighting quality goes to the better one; a task type uses its own score; the log
    names the front; a bad weights header is a 400 naming it."""
    fast = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")
    slow = ("--decode-step", "4 ms", "--prefill-per-token", "0 s")
    with model_servers(fast, slow) as (small_url, big_url):
        sites = [
            {"name": "small", "tier": "edge", "url": small_url, "decode_step": "1 ms",
             "quality": 0.5, "task_quality": {"chat": 0.98}, "rtt": "1 ms"},
            {"name": "big", "tier": "edge", "url": big_url, "decode_step": "4 ms",
             "quality": 1.0, "rtt": "1 ms"},
        ]  # fmt: skip
        cfg = RouteConfig.model_validate({
            "site": sites,
            "decision": {"objective": "pareto", "weights": {"quality": 0.5}},
            "gateway": {"decisions_log": str(tmp_path / "d.jsonl"), "probe_interval": "1 h"},
        })  # fmt: skip
        router = Router(cfg, [site_model(s, load_catalog(), "t") for s in cfg.site])
        from tests.modelserver import free_port

        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
        with served(router.app, free_port()) as gw, httpx.Client(base_url=gw, timeout=30) as c:
            url = "/v1/chat/completions"
            default = c.post(url, json=body).headers["x-tierwise-site"]
            quality = c.post(url, json=body, headers={"x-tierwise-weights": "quality=20"})
            task = c.post(url, json=body, headers={"x-tierwise-weights": "quality=20",
                                                   "x-tierwise-task": "chat"})  # fmt: skip
            bad = c.post(url, json=body, headers={"x-tierwise-weights": "speed=1"})
    assert default == "small" and quality.headers["x-tierwise-site"] == "big"
    assert task.headers["x-tierwise-site"] == "small"  # 0.98 for chat: as good, and faster
    assert bad.status_code == 400 and "x-tierwise-weights" in bad.json()["error"]["message"]
    records = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert [r["chosen"] for r in records] == ["small", "big", "small"]
    assert set(records[1]["pareto"]["front"]) == {"small", "big"}
    assert records[1]["pareto"]["weights"]["quality"] == 20.0
    assert records[0]["pareto"]["weights"]["quality"] == 0.5 and records[2]["pareto"]["task"]
