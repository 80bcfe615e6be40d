"""What a relayed completion stream says, read on the way through (the bytes are not changed).

The gateway passes a site's Server-Sent Events to the client byte for byte; beside
that it reads each ``data:`` event to time the stream by its tokens — an event that
carries text (``choices[].text`` or ``choices[].delta.content``) is one token, a role
or a closing event is none —, to take the server's ``usage`` when it sends one, and
to find ``data: [DONE]``, before which a usage chunk is added for a client that asked
for one (``stream_options.include_usage``) when the server sent none (llama.cpp's
server does not).
"""

from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["SseScan", "usage_chunk", "wants_whole_as_stream", "whole_answer"]

DONE = b"data: [DONE]"


class SseScan:
    """Feed it the stream's chunks in order; it counts tokens and keeps the usage."""

    def __init__(self) -> None:
        self.buffer = b""
        self.tokens = 0
        self.events = 0
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.head: dict[str, Any] = {}  # id, object, created, model of the last event
        self.kept: list[dict[str, Any]] | None = None  # every event, if asked (keep())

    def keep(self) -> SseScan:
        """Keep every event's JSON too (to assemble a whole answer: :func:`whole_answer`)."""
        self.kept = []
        return self

    def feed(self, chunk: bytes) -> int:
        """Read ``chunk``; return how many tokens its complete events carried."""
        data = self.buffer + chunk
        end = data.rfind(b"\n")
        if end < 0:
            self.buffer = data
            return 0
        self.buffer = data[end + 1 :]
        tokens = 0
        for line in data[: end + 1].splitlines():
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            try:
                obj = json.loads(payload)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            self.events += 1
            tokens += _tokens(obj)
            if self.kept is not None:
                self.kept.append(obj)
            if isinstance(obj.get("usage"), dict):
                self.usage = obj["usage"]
            self.head = {k: obj[k] for k in ("id", "object", "created", "model") if k in obj}
        self.tokens += tokens
        return tokens


def _tokens(obj: dict[str, Any]) -> int:
    n = 0
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(text, str) and text:
            n += 1
    return n


def usage_chunk(scan: SseScan, prompt_tokens: int) -> tuple[bytes, dict[str, int]]:
    """The closing usage event the gateway adds (its counts, and the event's bytes):
    completion tokens as counted in the stream, prompt tokens as the gateway estimated
    them (the server did not say)."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": scan.tokens,
        "total_tokens": prompt_tokens + scan.tokens,
    }
    head = {"id": "", "object": "chat.completion.chunk", "created": int(time.time()), "model": ""}
    head.update(scan.head)
    event = {**head, "choices": [], "usage": usage}
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n", usage


def wants_whole_as_stream(data: dict[str, Any]) -> bool:
    """Whether a whole-answer request can be asked of a site as a stream and assembled
    (:func:`whole_answer`): one choice of plain text — no tools, function calls or
    log-probabilities, whose streamed pieces are not put back together here."""
    if data.get("stream") or data.get("n") not in (None, 1):
        return False
    return not any(data.get(k) for k in ("tools", "functions", "logprobs", "top_logprobs"))


def whole_answer(scan: SseScan, chat: bool, usage: dict[str, int]) -> dict[str, Any]:
    """The whole answer that a stream's events (``scan.keep()``) add up to, in OpenAI's
    shape: ``chat.completion`` (the deltas' content) or ``text_completion`` (the texts),
    the last ``finish_reason``, and ``usage``."""
    text: list[str] = []
    finish = None
    head = {"id": "", "created": int(time.time()), "model": ""} | dict(scan.head)
    for obj in scan.kept or ():
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if isinstance(piece, str):
                text.append(piece)
            finish = choice.get("finish_reason") or finish
    if chat:
        message = {"role": "assistant", "content": "".join(text)}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        head["object"] = "chat.completion"
    else:
        choice = {"index": 0, "text": "".join(text), "logprobs": None, "finish_reason": finish}
        head["object"] = "text_completion"
    return {**head, "choices": [choice], "usage": usage}
