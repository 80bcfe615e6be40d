"""The OpenAI-compatible model server: API shape, timing from the catalog, injected faults."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.conftest import run_cli
from tests.modelserver import model_server
from tierwise.errors import ScenarioError
from tierwise.lab.world.model_server import Behaviour, catalog_step_s, prompt_tokens

HI = [{"role": "user", "content": "hi"}]  # OpenAI refuses an empty messages array


def test_catalog_step_is_the_bandwidth_bound() -> None:
    """qwen3-8b q4_0 on an RTX 4090: (W + KV) / B_mem, a few ms; prefill from the BF16 peak."""
    step_s, prefill_s = catalog_step_s("rtx-4090", "qwen3-8b", "q4_0", 4096)
    assert 0.002 < step_s < 0.01
    assert 0 < prefill_s < 0.001
    slow_s, _ = catalog_step_s("phone-lpddr5x", "qwen3-8b", "q4_0", 4096)
    assert slow_s > 5 * step_s


def test_prompt_tokens_counts_text_and_images() -> None:
    """Four characters a token, a fixed count per image part."""
    assert prompt_tokens({"prompt": "abcdefgh"}) == 2
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "abcd"}, image]}]}
    assert prompt_tokens(body) == 1 + 256


def test_behaviour_update_rejects_bad_fields() -> None:
    """Unknown fields, wrong types and negative values are errors naming the field."""
    b = Behaviour()
    b.update({"slowdown": 3, "down": True})
    assert b.slowdown == 3.0 and b.down
    for bad in ({"nope": 1}, {"down": 1}, {"slowdown": -1}, {"error_rate": "x"}):
        with pytest.raises(ScenarioError):
            b.update(bad)


def test_unknown_hardware_is_one_line_exit_2() -> None:
    """A bad catalog id is a one-line error, not a traceback."""
    run = run_cli("lab", "model-server", "--hardware", "nope")
    assert run.code == 2 and run.stderr.count("\n") == 1 and "nope" in run.stderr


@pytest.mark.slow
def test_server_answers_streams_and_injects_faults() -> None:
    """Chat and completions, SSE with usage, decode time ∝ tokens, 5xx and down at run time."""
    with model_server("--decode-step", "10 ms", "--prefill-per-token", "0 s") as url:
        models = httpx.get(url + "/v1/models").json()
        assert models["data"][0]["id"] == "qwen3-8b"
        t0 = time.perf_counter()
        r = httpx.post(url + "/v1/chat/completions", json={"messages": HI, "max_tokens": 20})
        took_s = time.perf_counter() - t0
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 20
        assert 0.2 <= took_s < 10.0  # 20 × 10 ms at least; the upper bound is a hang guard
        assert "decode;dur=200" in r.headers["server-timing"]
        body = {"prompt": "hi", "max_tokens": 3, "stream": True}
        body["stream_options"] = {"include_usage": True}
        lines = httpx.post(url + "/v1/completions", json=body).text.split("\n\n")
        events = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
        assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == "w0 w1 w2 "
        assert events[-1]["usage"]["completion_tokens"] == 3 and lines[-2] == "data: [DONE]"
        httpx.post(url + "/admin/behaviour", json={"error_rate": 1.0})
        assert httpx.post(url + "/v1/completions", json={"prompt": "x"}).status_code == 500
        httpx.post(url + "/admin/behaviour", json={"error_rate": 0.0, "down": True})
        assert httpx.post(url + "/v1/completions", json={"prompt": "x"}).status_code == 503
        bad = httpx.post(url + "/admin/behaviour", json={"slots": "many"})
        assert bad.status_code == 400 and "slots" in bad.json()["error"]["message"]


def test_a_stream_takes_its_decode_steps_below_the_timer_grain() -> None:
    """Sub-millisecond decode steps (a small engine measured by --like: 0.35 ms) pace a
    stream as they pace a whole answer. uvicorn runs uvloop, which rounds every sleep to
    whole ms: a sleep per token streamed 200 such tokens in about 1 ms."""
    n, step_s = 200, 0.0003
    with model_server("--decode-step", "0.3 ms", "--prefill-per-token", "0 s") as url:
        body = {"messages": HI, "max_tokens": n, "stream": True}
        with httpx.Client(timeout=30) as client:
            client.post(url + "/v1/chat/completions", json={"messages": HI, "max_tokens": 1})
            t0 = time.perf_counter()
            text = client.post(url + "/v1/chat/completions", json=body).text
            took_s = time.perf_counter() - t0
    assert text.count('"content"') == n
    # n - 1 steps between the tokens; the last sleep may be rounded down by half a ms
    assert took_s >= (n - 1) * step_s - 0.001, took_s
    assert took_s < 10.0  # a hang guard
