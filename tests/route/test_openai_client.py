"""The official ``openai`` client through the gateway (keys on) to the stand-in, and to the
stand-in directly: answers, streams, usage and errors as the client expects them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.modelserver import model_server, model_servers
from tests.route.routeproc import free_port, route_process, route_toml
from tierwise.route.keys import add_key

pytestmark = pytest.mark.slow

MODEL = "qwen3-8b"
HI = [{"role": "user", "content": "hi"}]
FAST = ("--decode-step", "1 ms", "--prefill-per-token", "0 s")


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL of a keyed gateway in front of a strict stand-in, a client key)."""
    tmp = tmp_path_factory.mktemp("client")
    key = add_key(tmp / "keys.toml", "sdk")
    with model_server(*FAST) as site:
        config = route_toml(tmp, site, free_port(), f'keys_file = "{tmp}/keys.toml"')
        with route_process(config) as (url, _):
            yield url + "/v1", key


def test_sync_client_chat_and_completions(keyed) -> None:
    base, key = keyed
    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
    chat = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=3)
    assert chat.choices[0].message.content == "w0 w1 w2 " and chat.usage.completion_tokens == 3
    text = client.completions.create(model=MODEL, prompt="hello", max_tokens=2)
    assert text.choices[0].text == "w0 w1 " and text.usage.completion_tokens == 2
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=HI, max_tokens=1)
    assert raw.headers["x-tierwise-site"] == "edge"
    assert [m.id for m in client.models.list()] == [MODEL]  # passthrough, with the key


def test_sync_client_streams(keyed) -> None:
    base, key = keyed
    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=4, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "w0 w1 w2 w3 " and chunks[-1].usage.completion_tokens == 4
    words = client.completions.create(model=MODEL, prompt="x", max_tokens=2, stream=True)
    assert "".join(c.choices[0].text for c in words if c.choices) == "w0 w1 "


def test_async_client_concurrent_and_streaming(keyed) -> None:
    base, key = keyed

    async def run() -> tuple[list[str], str]:
        async with openai.AsyncOpenAI(base_url=base, api_key=key, max_retries=0) as client:
            answers = await asyncio.gather(
                *(
                    client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
                    for _ in range(8)
                )
            )
            stream = await client.chat.completions.create(
                model=MODEL, messages=HI, max_tokens=3, stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        return [a.choices[0].message.content for a in answers], text

    contents, streamed = asyncio.run(run())
    assert contents == ["w0 w1 "] * 8 and streamed == "w0 w1 w2 "


def test_errors_are_the_clients_exceptions(keyed) -> None:
    base, key = keyed
    wrong = openai.OpenAI(base_url=base, api_key="tw-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as auth:
        wrong.chat.completions.create(model=MODEL, messages=HI, max_tokens=1)
    assert auth.value.status_code == 401 and auth.value.code == "invalid_api_key"
    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=-5)
    assert bad.value.param == "max_tokens" and bad.value.code == "integer_below_min_value"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[], max_tokens=1)
    assert bad.value.param == "messages"
    with pytest.raises(openai.NotFoundError):
        client.get("/nowhere", cast_to=object)  # base URL + /nowhere: not under /v1/ twice


def test_the_stand_in_is_as_strict_as_openai_unless_lenient(tmp_path: Path) -> None:
    """Straight to ``tierwise lab model-server``: OpenAI's 400s by default, in its shape;
    ``--lenient`` takes what OpenAI refuses (and still never answers 500 for it)."""
    with model_servers(FAST, (*FAST, "--lenient")) as (strict, lenient):
        client = openai.OpenAI(base_url=strict + "/v1", api_key="x", max_retries=0)
        for bad in ({"max_tokens": -5}, {"max_tokens": "many"}, {"messages": "hi"}):
            with pytest.raises(openai.BadRequestError) as err:
                client.chat.completions.create(**{"model": MODEL, "messages": HI, **bad})
            assert err.value.param in ("max_tokens", "messages")
        easy = openai.OpenAI(base_url=lenient + "/v1", api_key="x", max_retries=0)
        got = easy.chat.completions.with_raw_response.create(
            model=MODEL, messages="hi", max_tokens="many"
        )
        assert got.status_code == 200
        assert got.parse().usage.completion_tokens == 16  # the default cap
