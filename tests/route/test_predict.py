"""Prediction with the planner's model, the choice, hysteresis, residency and probability."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tierwise.catalog import load_catalog
from tierwise.model import device, request
from tierwise.route.config import load_route
from tierwise.route.learn import Timing, learn, parse_server_timing
from tierwise.route.predict import Reason, RequestShape, pick, predict, site_model

EXAMPLE = Path(__file__).parents[2] / "src/tierwise/examples/route.toml"


@pytest.fixture(scope="module")
def setup():
    cfg = load_route(EXAMPLE)
    cat = load_catalog()
    return cfg, {s.name: site_model(s, cat, "test") for s in cfg.site}


def shape(bytes_up: int = 2000, out: int = 64, deadline: float | None = 10.0, residency="any"):
    return RequestShape(
        "/v1/chat/completions", bytes_up, 500, out, False, False, deadline, residency
    )


def test_prediction_is_the_planner_sum(setup) -> None:
    """Cloud: upload S/B + RTT + prefill + G × step bound + download, as §12.1.1 adds them."""
    cfg, models = setup
    m = models["cloud"]
    p = predict(m, shape(4_000_000))
    step = m.step_bound_s
    expected = float(
        request.transfer_s(4_000_000, cfg.site_named("cloud").uplink)
        + 0.08
        + device.decode_time_s(64, step)
        + 500 * m.prefill_bound_s
    )
    assert p.option.time_s == pytest.approx(expected, rel=0.01)
    assert p.option.breakdown_s["upload"] == pytest.approx(4_000_000 / 2.5e6)


def test_big_upload_moves_the_choice_to_the_edge(setup) -> None:
    """A text prompt goes to the cloud's fast GPU; a 4 MB image to the edge's faster uplink."""
    cfg, models = setup
    small = [predict(m, shape()) for m in models.values()]
    big = [predict(m, shape(4_000_000)) for m in models.values()]
    assert pick(small, cfg, shape(), None)[0][0] == "cloud"
    assert pick(big, cfg, shape(4_000_000), None)[0][0] == "edge"


def test_hysteresis_keeps_a_near_equal_previous_choice(setup) -> None:
    """5 % worse, the previous site stays; 50 % worse, the better site takes over."""
    cfg, models = setup
    req = shape(deadline=None)
    edge, cloud = predict(models["edge"], req), predict(models["cloud"], req)
    edge.expected_s, cloud.expected_s = 1.0, 1.05
    assert pick([edge, cloud], cfg, req, None)[0][0] == "edge"
    order, reason = pick([edge, cloud], cfg, req, "cloud")
    assert order == ["cloud", "edge"] and "hysteresis" in reason
    cloud.expected_s = 1.5
    assert pick([edge, cloud], cfg, req, "cloud")[0] == ["edge", "cloud"]


def test_the_reason_is_the_planners_sentence_composed_when_read(setup) -> None:
    """pick leaves the one-line reason to be composed when the log is written: it names
    the choice, and a prefix (the static strategy's) goes in front of it."""
    from dataclasses import replace

    from tierwise.plan.choice import choose

    cfg, models = setup
    req = shape(deadline=None)
    preds = [predict(m, req) for m in models.values()]
    order, reason = pick(preds, cfg, req, None)
    assert isinstance(reason, Reason) and str(reason).startswith(order[0])
    assert str(reason) == choose(reason.options, cfg.decision.objective)[1]
    assert str(replace(reason, prefix="static: ")) == "static: " + str(reason)


def test_residency_device_keeps_the_input_home(setup) -> None:
    """residency = device leaves only the device site."""
    cfg, models = setup
    req = shape(residency="device")
    order, _ = pick([predict(m, req) for m in models.values()], cfg, req, None)
    assert order == ["device"]


def test_probability_uses_the_uncertainty(setup) -> None:
    """A deadline just above the prediction is met at P ≈ ½, not at 0.99."""
    cfg, models = setup
    p = predict(models["cloud"], shape(deadline=None))
    req = shape(deadline=p.option.time_s * 1.01)
    q = predict(models["cloud"], req)
    assert 0.4 < q.p_meet < 0.7
    strict = cfg.model_copy(
        update={"decision": cfg.decision.model_copy(update={"probability": 0.99})}
    )
    order, _ = pick([q], strict, req, None)
    assert order == ["cloud"]  # best effort: still tried, but the reason says so


def test_learning_from_probes_moves_the_prediction() -> None:
    """Measured stages replace the priors: RTT from small requests, rate from large ones."""
    cfg = load_route(EXAMPLE)
    m = site_model(cfg.site_named("cloud"), load_catalog(), "test")
    srv = parse_server_timing("queue;dur=2, prefill;dur=10, decode;dur=100")
    assert srv == {"queue": 0.002, "prefill": 0.01, "decode": 0.1}
    for _ in range(5):
        learn(m, shape(), Timing(headers_s=0.2 + 0.112, end_s=0.313, tokens_out=64, server=srv))
    assert m.rtt_s.value == pytest.approx(0.2, rel=0.05)
    for _ in range(5):
        t = Timing(headers_s=0.2 + 1.0 + 0.112, end_s=1.313, tokens_out=64, server=srv)
        learn(m, shape(1_000_000), t)
    assert m.up_rate.value == pytest.approx(1e6, rel=0.1)
    assert m.decode_factor.value == pytest.approx(0.1 / 64 / m.step_bound_s, rel=0.05)


def test_timed_out_upload_bounds_the_rate() -> None:
    """A 1 MB upload that timed out after 1.3 s caps the cloud's uplink estimate."""
    from tierwise.route.learn import learn_timeout

    cfg = load_route(EXAMPLE)
    m = site_model(cfg.site_named("cloud"), load_catalog(), "test")
    learn_timeout(m, shape(1_000_000), 1.3)
    assert m.up_rate.value == pytest.approx(1e6 / (1.3 - 0.08))
    before = m.rtt_s.value
    learn_timeout(m, shape(2000), 1.3)  # a small request says nothing about the rate
    assert m.up_rate.value == pytest.approx(1e6 / (1.3 - 0.08)) and m.rtt_s.value == before


def test_streams_and_whole_answers_carry_their_own_bytes_per_token() -> None:
    """A stream sends each token as its own event (~240 B), a whole answer a few bytes
    a token: alternating the two, each kind's expected size follows its own answers, and
    no mixture of them drives an answer's expected size below its headers."""
    cfg = load_route(EXAMPLE)
    m = site_model(cfg.site_named("cloud"), load_catalog(), "test")
    whole, stream = shape(), dataclasses.replace(shape(), stream=True)
    for _ in range(15):
        learn(m, stream, Timing(headers_s=0.3, end_s=1.0, tokens_out=100, bytes_down=24_400))
        learn(m, whole, Timing(headers_s=0.3, end_s=1.0, tokens_out=100, bytes_down=700))
    assert m.answer_bytes(100, stream=True) == pytest.approx(24_400, rel=0.02)
    assert m.answer_bytes(100, stream=False) == pytest.approx(700, rel=0.02)
    assert (
        predict(m, stream).option.breakdown_s["download"]
        > predict(m, whole).option.breakdown_s["download"]
    )
