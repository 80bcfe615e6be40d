"""The OpenAI request schema: what is refused, in OpenAI's words, and what passes."""

from __future__ import annotations

import json
import time

import pytest

from tierwise.openai_api import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    RequestRejected,
    json_depth,
    parse_request,
)

HI = [{"role": "user", "content": "hi"}]


def rejected(path: str, body: dict | bytes) -> RequestRejected:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(RequestRejected) as info:
        parse_request(path, raw)
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"messages": "hi"}, "messages", "invalid_type"),
        ({"messages": HI, "max_tokens": -5}, "max_tokens", "integer_below_min_value"),
        ({"messages": HI, "max_tokens": 0}, "max_tokens", "integer_below_min_value"),
        ({"messages": HI, "max_tokens": "many"}, "max_tokens", "invalid_type"),
        ({"messages": HI, "max_tokens": True}, "max_tokens", "invalid_type"),
        ({"messages": HI, "max_tokens": 5.0}, "max_tokens", "invalid_type"),
        ({"messages": HI, "max_completion_tokens": -1}, "max_completion_tokens",
         "integer_below_min_value"),
        ({}, "messages", "missing_required_parameter"),
        ({"messages": []}, "messages", "empty_array"),
        ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role", "invalid_value"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_type"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
         "messages[0].content[0].image_url.url", "missing_required_parameter"),
        ({"messages": [{"content": "x"}]}, "messages[0].role", "missing_required_parameter"),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
        ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id",
         "missing_required_parameter"),
        ({"messages": [5]}, "messages[0]", "invalid_type"),
        ({"messages": HI, "temperature": 3}, "temperature", "integer_above_max_value"),
        ({"messages": HI, "top_p": -0.5}, "top_p", "decimal_below_min_value"),
        ({"messages": HI, "n": 0}, "n", "integer_below_min_value"),
        ({"messages": HI, "stream": "yes"}, "stream", "invalid_type"),
        ({"messages": HI, "stream_options": {"include_usage": 1}},
         "stream_options.include_usage", "invalid_type"),
        ({"messages": HI, "stop": ["a"] * 5}, "stop", "array_above_max_length"),
        ({"messages": HI, "tool_choice": "maybe"}, "tool_choice", "invalid_value"),
    ],
)  # fmt: skip
def test_chat_refusals_name_the_field(body: dict, param: str, code: str) -> None:
    err = rejected(CHAT_PATH, body)
    assert (err.param, err.code) == (param, code)
    assert f"'{param}'" in err.message
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("body", "param"),
    [({}, "prompt"), ({"prompt": 5}, "prompt"), ({"prompt": "x", "max_tokens": -5}, "max_tokens"),
     ({"prompt": "x", "echo": "no"}, "echo")],
)  # fmt: skip
def test_completion_refusals(body: dict, param: str) -> None:
    assert rejected(COMPLETIONS_PATH, body).param == param


@pytest.mark.parametrize(
    "body",
    [
        {"messages": HI},
        {"messages": HI, "max_tokens": 5, "temperature": 0.7, "stream": True,
         "stream_options": {"include_usage": True}, "stop": "\n", "n": 1, "seed": 3},
        {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]},
        {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {}}]}]},
        {"messages": HI, "cache_prompt": True, "top_k": 40},  # vendor fields pass
        {"messages": [{"role": "system", "content": "be brief"}, *HI,
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": "c1", "type": "function",
                           "function": {"name": "f", "arguments": "{}"}}]},
                      {"role": "tool", "content": "42", "tool_call_id": "c1"}],
         "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
    ],
)  # fmt: skip
def test_valid_chat_bodies_pass_unchanged(body: dict) -> None:
    assert parse_request(CHAT_PATH, json.dumps(body).encode()) == body


@pytest.mark.parametrize("prompt", ["x", ["a", "b"], [1, 2, 3], [[1, 2], [3]]])
def test_prompt_forms(prompt: object) -> None:
    assert parse_request(COMPLETIONS_PATH, json.dumps({"prompt": prompt}).encode())


@pytest.mark.parametrize(
    "raw",
    [b"[" * 100_000, b"{" * 100_000, b'{"a":' * 70 + b"1" + b"}" * 70, b"\xff\xfe{}",
     b'{"messages": NaN}', b"", b"[1]", b"not json", b'{"a": 1e999999}' ],
)  # fmt: skip
def test_bodies_that_are_not_a_json_object(raw: bytes) -> None:
    t0 = time.perf_counter()
    rejected(CHAT_PATH, raw)  # a 400, quickly, whatever the body
    assert time.perf_counter() - t0 < 0.5


def test_json_depth_counts_structure_not_strings() -> None:
    assert json_depth(b'{"a": [[1]]}') == 3
    deep_string = json.dumps({"messages": [{"role": "user", "content": "[" * 500}]}).encode()
    assert json_depth(deep_string) == 3
    assert parse_request(CHAT_PATH, deep_string)
    assert json_depth(b"[" * 1000) > 64
