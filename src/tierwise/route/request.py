"""What the gateway reads from a request before choosing: bytes, tokens, deadline, residency."""

from __future__ import annotations

import json
from typing import Any

from tierwise.errors import ScenarioError, UnitError
from tierwise.units import parse_quantity

__all__ = [
    "DEADLINE_HEADER",
    "RESIDENCY_HEADER",
    "SITE_HEADER",
    "body_json",
    "estimate_prompt_tokens",
    "parse_deadline",
    "requested_output_tokens",
    "strip_inline_data",
]

DEADLINE_HEADER = "x-tierwise-deadline"
RESIDENCY_HEADER = "x-tierwise-residency"
SITE_HEADER = "x-tierwise-site"  # pins a request to one site (an operator's override)
CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 256  # visual tokens per image; the prefill factor learns the rest
HEADER_BYTES = 300  # request line and headers, roughly
LEAN_BYTES = 4096  # inline data strings longer than this are not parsed


def parse_deadline(value: str | None) -> float | None:
    """Seconds from an ``x-tierwise-deadline`` value: ``"2 s"``, ``"800ms"`` or ``"1.5"`` (s).

    An unparsable, zero or negative deadline is a :class:`ScenarioError` naming the header.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_quantity(text, "time")
        except UnitError as exc:
            raise ScenarioError(str(exc), source=DEADLINE_HEADER) from None
    if not seconds > 0 or seconds == float("inf"):
        raise ScenarioError(f"must be a positive time, got {value!r}", source=DEADLINE_HEADER)
    return seconds


def body_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object; anything else is a ScenarioError.

    Inline data URLs (base64 images, megabytes) are cut to ``"data:"`` before parsing:
    the prediction needs their bytes (the body's length) and that they are there, not
    their content, and parsing them cost 10–60 ms per request. The body forwarded is
    the original.
    """
    if len(body) > LEAN_BYTES:
        body = strip_inline_data(body)
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise ScenarioError(f"request body is not JSON: {exc}", source="request") from None
    if not isinstance(data, dict):
        raise ScenarioError("request body must be a JSON object", source="request")
    return data


def strip_inline_data(body: bytes) -> bytes:
    """``body`` with each long ``"data:…"`` JSON string shortened to ``"data:"``.

    Only a string that starts a JSON string (no backslash before its quote) and holds
    no escape is cut (base64 has neither), so the result parses to the same structure.
    """
    parts, start, at = [], 0, 0
    while (i := body.find(b'"data:', at)) != -1:
        j = body.find(b'"', i + 6)
        if j == -1:
            break
        at = j + 1
        if j - i < LEAN_BYTES or body[i - 1 : i] == b"\\" or body.find(b"\\", i, j) != -1:
            continue
        parts += [body[start:i], b'"data:"']
        start = j + 1
    return b"".join([*parts, body[start:]]) if parts else body


def estimate_prompt_tokens(data: dict[str, Any]) -> int:
    """Prompt tokens: characters / 4 of every text part, plus a fixed count per image.

    Images sent inline as base64 count in the request's bytes (the upload), not here.
    """
    chars, images = 0, 0
    prompt = data.get("prompt")
    texts: list[Any] = [prompt] if isinstance(prompt, str) else list(prompt or [])
    for message in data.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        parts = [content] if isinstance(content, str) else list(content or [])
        for part in parts:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text":
                texts.append(part.get("text", ""))
            elif isinstance(part, dict) and part.get("type") in ("image_url", "input_image"):
                images += 1
    chars = sum(len(t) for t in texts if isinstance(t, str))
    return max(1, -(-chars // CHARS_PER_TOKEN)) + IMAGE_TOKENS * images


def requested_output_tokens(data: dict[str, Any]) -> int | None:
    """``max_tokens`` (or ``max_completion_tokens``) if the request caps its output."""
    for key in ("max_tokens", "max_completion_tokens"):
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
