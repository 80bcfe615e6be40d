"""What the gateway learns and builds for an engine, without one: the site's prompt-token
count from ``usage``, and a whole answer put together from a stream's events."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tierwise.catalog import load_catalog
from tierwise.route.config import load_route
from tierwise.route.learn import Timing, learn
from tierwise.route.predict import RequestShape, site_model
from tierwise.route.sse import SseScan, wants_whole_as_stream, whole_answer

EXAMPLE = Path(__file__).parents[2] / "src/tierwise/examples/route.toml"
SITE = load_route(EXAMPLE).site_named("cloud")
CATALOG = load_catalog()


def shape(estimated: int) -> RequestShape:
    return RequestShape("/v1/chat/completions", 2000, estimated, 16, False, False, None, "any")


@settings(max_examples=40, deadline=None)
@given(
    st.floats(1.0, 4.0),  # the site's tokens per estimated token
    st.integers(0, 60),  # its chat template's tokens
    st.lists(st.integers(2, 2000), min_size=3, max_size=8),
)
def test_a_sites_prompt_count_is_learned_from_usage(ratio, overhead, estimates) -> None:
    """After a few whole answers of different lengths whose usage gives the site's count,
    the gateway's estimate maps to it within a few tokens over the lengths seen;
    before any, the estimate is used as it is."""
    assume(max(estimates) >= 4 * min(estimates) and max(estimates) >= 50)
    m = site_model(SITE, CATALOG, "test")
    assert m.prompt_tokens(7) == 7
    for est in estimates:
        truth = round(ratio * est + overhead)
        learn(m, shape(est), Timing(end_s=0.5, tokens_out=16, prompt_tokens=truth))
    low, high = min(estimates), max(estimates)
    for est in (low, (low + high) // 2, high):  # within 2 % + 2 (what an observation may be off)
        truth = ratio * est + overhead
        assert abs(m.prompt_tokens(est) - truth) <= 3 + 0.02 * truth


def events(pieces: list[str], chat: bool) -> bytes:
    out = []
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        choice = {"index": 0, "finish_reason": "length" if last else None}
        if chat:
            choice["delta"] = {"content": piece}
        else:
            choice["text"] = piece
        obj = {"id": "x1", "object": "chunk", "created": 7, "model": "tiny", "choices": [choice]}
        out.append(b"data: " + json.dumps(obj).encode() + b"\n\n")
    return b"".join(out) + b"data: [DONE]\n\n"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=20),
    st.booleans(),
    st.integers(1, 50),
)
def test_a_whole_answer_is_its_stream_put_together(pieces, chat, cut) -> None:
    """Whatever the chunks' boundaries, the whole answer carries every piece in order,
    the last finish reason, the stream's id and model, and the usage given."""
    raw = events(pieces, chat)
    scan = SseScan().keep()
    for at in range(0, len(raw), cut):
        scan.feed(raw[at : at + cut])
    usage = {"prompt_tokens": 3, "completion_tokens": scan.tokens, "total_tokens": 3 + scan.tokens}
    answer = whole_answer(scan, chat, usage)
    choice = answer["choices"][0]
    text = choice["message"]["content"] if chat else choice["text"]
    assert text == "".join(pieces) and scan.tokens == len(pieces)
    assert choice["finish_reason"] == "length" and answer["usage"] == usage
    assert answer["object"] == ("chat.completion" if chat else "text_completion")
    assert (answer["id"], answer["model"], answer["created"]) == ("x1", "tiny", 7)


def test_only_plain_whole_requests_are_asked_as_streams() -> None:
    plain = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert wants_whole_as_stream(plain)
    assert not wants_whole_as_stream({**plain, "stream": True})
    assert not wants_whole_as_stream({**plain, "n": 2})
    assert not wants_whole_as_stream({**plain, "logprobs": True})
    assert not wants_whole_as_stream({**plain, "tools": [{"type": "function"}]})
