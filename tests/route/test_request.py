"""Reading a request: the deadline header, prompt tokens, the output cap."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import text
from tierwise.errors import ScenarioError
from tierwise.route.request import (
    IMAGE_TOKENS,
    LEAN_BYTES,
    body_json,
    estimate_prompt_tokens,
    parse_deadline,
    requested_output_tokens,
    strip_inline_data,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2 s", 2.0), ("800ms", 0.8), ("1.5", 1.5), (" 250 ms ", 0.25), ("1 min", 60.0)],
)
def test_deadline_header_parses(text: str, seconds: float) -> None:
    """Human times and bare seconds are accepted."""
    assert parse_deadline(text) == pytest.approx(seconds)


def test_absent_deadline_is_none() -> None:
    """No header (or an empty one) means the config's default applies."""
    assert parse_deadline(None) is None and parse_deadline("  ") is None


@pytest.mark.parametrize("text", ["soon", "0", "-1 s", "2 MB", "inf"])
def test_bad_deadline_names_the_header(text: str) -> None:
    """A deadline that is not a positive time is an error naming the header."""
    with pytest.raises(ScenarioError, match="x-tierwise-deadline"):
        parse_deadline(text)


def test_prompt_tokens_text_and_images() -> None:
    """Four characters a token; an image part adds its visual tokens."""
    assert estimate_prompt_tokens({"prompt": "a" * 40}) == 10
    parts = [{"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert estimate_prompt_tokens({"messages": [{"role": "user", "content": parts}]}) == 257


def test_output_cap() -> None:
    """max_tokens or max_completion_tokens caps the output; absent or bad means learned."""
    assert requested_output_tokens({"max_tokens": 64}) == 64
    assert requested_output_tokens({"max_completion_tokens": 8}) == 8
    assert requested_output_tokens({"max_tokens": True}) is None
    assert requested_output_tokens({}) is None


def test_body_must_be_a_json_object() -> None:
    """A body that is not a JSON object is a request error."""
    assert body_json(b'{"a": 1}') == {"a": 1}
    for bad in (b"[1]", b"{nope"):
        with pytest.raises(ScenarioError):
            body_json(bad)


def _cut(value: object) -> object:
    """What strip_inline_data should make of a parsed value: long data strings cut."""
    if isinstance(value, str):
        return "data:" if value.startswith("data:") and len(value) + 1 >= LEAN_BYTES else value
    if isinstance(value, list):
        return [_cut(v) for v in value]
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    return value


texts = st.one_of(
    text(max_size=30),
    st.builds(lambda t: "data:" + t, text(max_size=30)),
    st.builds(lambda n: "data:image/png;base64," + "QUJD" * n, st.integers(0, 3000)),
)
values = st.recursive(
    texts | st.integers(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(text(max_size=8), kids, max_size=4),
    max_leaves=12,
)


@given(values)
def test_strip_inline_data_keeps_the_structure(value: object) -> None:
    """Only long data strings are cut; everything else parses back the same."""
    body = json.dumps({"v": value}).encode()
    assert json.loads(strip_inline_data(body)) == {"v": _cut(value)}


def test_image_body_parses_lean_and_counts_the_image() -> None:
    """A 1 MB inline image is not parsed, but still counts as an image in the prompt."""
    url = "data:image/png;base64," + "A" * 1_000_000
    content = [{"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {"url": url}}]
    data = body_json(json.dumps({"messages": [{"role": "user", "content": content}]}).encode())
    assert data["messages"][0]["content"][1]["image_url"]["url"] == "data:"
    assert estimate_prompt_tokens(data) == 1 + IMAGE_TOKENS
