"""The router in front of a real engine: llama.cpp's server on a tiny random model.

Real processes on loopback: ``llama_cpp.server`` (one request at a time) and a
``tierwise lab model-server`` stand-in beside it, the router in this process, and the
``openai`` client in front. Each test takes a few seconds (the model is 2.7 MB).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.modelserver import model_servers
from tests.route.test_gateway import gateway, served
from tierwise.lab.world.engine import engine_unavailable_reason, llama_server, write_tiny_gguf

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        engine_unavailable_reason() is not None, reason=str(engine_unavailable_reason())
    ),
]

openai = pytest.importorskip("openai")

STAND_IN = ("--decode-step", "20 ms", "--prefill-per-token", "0.1 ms")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("engine") / "tiny.gguf", seed=1)


def sites(engine: str, stand_in: str) -> list[dict]:
    """The engine (one slot, fast priors) first in preference, the stand-in slower."""
    common = {"tier": "edge", "uplink": "1 Gbit/s", "downlink": "1 Gbit/s", "rtt": "1 ms"}
    return [
        {"name": "engine", "url": engine, "decode_step": "2 ms", "prefill_per_token": "0.1 ms",
         "slots": 1, **common},
        {"name": "stand-in", "url": stand_in, "decode_step": "20 ms", **common},
    ]  # fmt: skip


def records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]


def test_engine_answers_chat_and_completions(model_file: Path, tmp_path: Path) -> None:
    """Chat and completions, whole and streamed, through the router to the engine; usage in
    a whole answer, and in a stream when asked (added by the gateway: the engine sends
    none); the engine's service is learned and its RTT stays a connect's, not its queue."""
    with llama_server(model_file) as (engine, _), model_servers(STAND_IN) as (stand_in,):
        router, port = gateway(sites(engine, stand_in), tmp_path, probe_interval="0.1 s")
        with served(router.app, port) as gw:
            client = openai.OpenAI(base_url=gw + "/v1", api_key="unused", max_retries=0)
            messages = [{"role": "user", "content": "hello there, é ☃ engine"}]
            whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=8)
            assert whole.usage.completion_tokens == 8 and whole.choices[0].message.content
            chunks = list(
                client.chat.completions.create(
                    model="tiny", messages=messages, max_tokens=6, stream=True,
                    stream_options={"include_usage": True},
                )
            )  # fmt: skip
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert text and chunks[-1].usage.completion_tokens == 6
            # the engine's count of the same prompt (its chat template: 24 tokens for what
            # the gateway estimates at 6), learned from the whole answer's usage
            assert abs(chunks[-1].usage.prompt_tokens - whole.usage.prompt_tokens) <= 1
            done = client.completions.create(model="tiny", prompt="once upon", max_tokens=5)
            assert done.usage.completion_tokens == 5 and done.choices[0].text
            streamed = list(
                client.completions.create(model="tiny", prompt="a b c", max_tokens=7, stream=True)
            )
            assert sum(1 for c in streamed if c.choices and c.choices[0].text) == 7
            # overlapping requests: the engine serves one at a time, the router keeps its line
            threads = [
                threading.Thread(
                    target=client.chat.completions.create,
                    kwargs={"model": "tiny", "messages": messages, "max_tokens": 60},
                )
                for _ in range(3)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    log = records(tmp_path)
    assert [r["chosen"] for r in log] == ["engine"] * 7
    added = [r for r in log if "usage_added" in r]
    assert len(added) == 1 and added[0]["usage_added"]["completion_tokens"] == 6
    assert added[0]["usage_added"]["by"] == "gateway"
    assert added[0]["usage_added"]["prompt"] == "estimated"  # still not the engine's word
    assert added[0]["usage_added"]["prompt_from"] == "learned from usage"
    assert [r["stages"]["tokens_out"] for r in log[:4]] == [8, 6, 5, 7]
    assert log[1]["stages"]["tokens_from"] == "events"
    assert max(r["stages"]["queued_s"] for r in log[4:]) > 0  # someone waited in line
    assert all(set(r["predicted"]["engine"]["stages_s"]) == {"queue", "first_token", "decode"}
               for r in log)  # fmt: skip
    assert log[-1]["service_fit"]["engine"]["n"] >= 7
    assert log[-1]["estimates"]["engine"]["rtt_s"]["value"] < 0.02  # not the engine's queue


def test_client_gone_mid_stream_cancels_the_engine(model_file: Path, tmp_path: Path) -> None:
    """A client that leaves a long stream frees the engine: the next request is answered
    at once, not after the abandoned one's remaining seconds."""
    with llama_server(model_file) as (engine, _), model_servers(STAND_IN) as (stand_in,):
        router, port = gateway(sites(engine, stand_in), tmp_path)
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=60) as c:
            long = {"prompt": "tell a long story", "max_tokens": 1900, "stream": True}
            with c.stream("POST", "/v1/completions", json=long) as resp:
                assert resp.headers["x-tierwise-site"] == "engine"
                for i, _ in enumerate(resp.iter_lines()):
                    if i >= 20:
                        break
            t0 = time.perf_counter()
            pin = {"x-tierwise-site": "engine"}
            short = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4}, headers=pin)
            elapsed = time.perf_counter() - t0
    assert short.status_code == 200 and short.json()["usage"]["completion_tokens"] == 4
    assert elapsed < 1.0, f"the engine was still busy with the abandoned stream: {elapsed:.2f} s"
    log = records(tmp_path)
    assert log[0]["stream_error"] == "client disconnected"
    assert log[0]["stages"]["tokens_out"] < 1900


def test_engine_killed_mid_request_fails_over(model_file: Path, tmp_path: Path) -> None:
    """The engine dies while it answers: the request is answered by the stand-in within
    its deadline, and the record shows both attempts (the stand-in is faster than the
    router's prior for it says: 1,900 tokens in about 4 s)."""
    fast = ("--decode-step", "2 ms", "--prefill-per-token", "0 s")
    with llama_server(model_file) as (engine, proc), model_servers(fast) as (stand_in,):
        router, port = gateway(sites(engine, stand_in), tmp_path)
        with served(router.app, port) as gw, httpx.Client(base_url=gw, timeout=60) as c:
            warm = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
            assert warm.headers["x-tierwise-site"] == "engine"
            killer = threading.Timer(0.3, proc.kill)
            killer.start()
            t0 = time.perf_counter()
            body = {"prompt": "a long one", "max_tokens": 1900}
            got = c.post("/v1/completions", json=body, headers={"x-tierwise-deadline": "15 s"})
            elapsed = time.perf_counter() - t0
            killer.join()
    assert got.status_code == 200 and got.headers["x-tierwise-site"] == "stand-in"
    assert elapsed < 15.0
    last = records(tmp_path)[-1]
    assert [a["site"] for a in last["attempts"]] == ["engine", "stand-in"]
    assert last["attempts"][0]["outcome"].startswith("connection error")


def test_client_gone_from_a_whole_answer_cancels_the_engine(
    model_file: Path, tmp_path: Path
) -> None:
    """A client that gives up on a whole (not streamed) answer frees the engine too: with
    ``whole_as_stream`` the gateway asks llama.cpp for a stream (its whole answers run to
    the end whoever waits) and closes it when the client leaves. A whole answer asked this
    way is still a whole answer in OpenAI's shape, its usage counted and marked."""
    with llama_server(model_file) as (engine, _), model_servers(STAND_IN) as (stand_in,):
        engine_site, stand_in_site = sites(engine, stand_in)
        engine_site["whole_as_stream"] = True
        router, port = gateway([engine_site, stand_in_site], tmp_path, probe_interval="1 h")
        with served(router.app, port) as gw:
            client = openai.OpenAI(base_url=gw + "/v1", api_key="unused", max_retries=0)
            for text in ("hello there", "a longer message than that one", "hi"):
                first = [{"role": "user", "content": text}]  # whole: the usage is learned
                client.chat.completions.create(model="tiny", messages=first, max_tokens=2)
            messages = [{"role": "user", "content": "hello"}]
            whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=9)
            assert whole.object == "chat.completion" and whole.choices[0].message.content
            assert whole.usage.completion_tokens == 9 and whole.choices[0].finish_reason
            assert 20 <= whole.usage.prompt_tokens <= 28  # the engine counts 24; not 2
            text = client.completions.create(model="tiny", prompt="once", max_tokens=5)
            assert text.object == "text_completion" and text.usage.completion_tokens == 5
            long = {"prompt": "tell a long story", "max_tokens": 1900}
            with pytest.raises(httpx.ReadTimeout):  # the client gives up after 0.5 s
                httpx.post(gw + "/v1/completions", json=long, timeout=0.5)
            t0 = time.perf_counter()
            pin = {"x-tierwise-site": "engine"}
            short = httpx.post(gw + "/v1/completions", json={"prompt": "hi", "max_tokens": 4},
                               headers=pin, timeout=30)  # fmt: skip
            elapsed = time.perf_counter() - t0
    assert short.status_code == 200 and short.json()["usage"]["completion_tokens"] == 4
    assert elapsed < 2.0, f"the engine was still busy with the abandoned answer: {elapsed:.2f} s"
    log = records(tmp_path)
    assert not any("asked_as_stream" in r for r in log[:3])
    assert log[3]["asked_as_stream"] and log[3]["usage_added"]["whole_from_stream"]
    assert log[3]["usage_added"]["prompt"] == "estimated"
    assert log[3]["usage_added"]["prompt_from"] == "learned from usage"
    gone = next(r for r in log if r["prompt_tokens"] == 5 and r["output_tokens"] == 1900)
    assert gone["stream_error"] == "client disconnected"
    assert gone["stages"]["tokens_out"] < 1900
