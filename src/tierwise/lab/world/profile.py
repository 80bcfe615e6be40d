"""An engine's timing, measured from outside, so the stand-in can serve like it.

``tierwise lab model-server --like URL`` asks an OpenAI-compatible engine (llama.cpp,
vLLM, another stand-in) a few small questions over loopback and fits what a request
costs there, in the stand-in's own terms (its prompt-token estimate, chars / 4):

- ``T(n, 1) = overhead + prefill·n + step`` from non-streamed requests with one output
  token at several prompt lengths (least squares of ``T`` on ``n``);
- ``step`` from the same prompt with 1 and ``DECODE_PROBE_TOKENS`` output tokens, divided
  by the output tokens the engine reports in ``usage`` (a random model may stop early);
- ``slots`` from ``CONCURRENT`` identical requests sent at once: an engine that serves
  one at a time takes about ``CONCURRENT`` times one request's time for all of them.

The result is a :class:`Profile` (JSON, versioned, written with ``--profile-out`` and read
back with ``--profile``) that becomes the stand-in's :class:`Behaviour`.
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tierwise.errors import ScenarioError
from tierwise.lab.world.model_server import Behaviour, prompt_tokens

__all__ = ["PROFILE_VERSION", "Profile", "measure", "read_profile", "write_profile"]

PROFILE_VERSION = 1
PROMPT_WORDS = (4, 64, 256, 768)  # "hello " × k: prompts of about 6 to 1,150 stand-in tokens
DECODE_PROBE_TOKENS = 33
BURSTS = 3  # slots: bursts of CONCURRENT requests, the least makespan kept
CONCURRENT = 4
REPEATS = 3  # each timing is the median of this many requests
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Profile:
    """What one request costs at the engine measured, as the stand-in's parameters."""

    source: str
    overhead_s: float
    prefill_s_per_token: float
    decode_step_s: float
    slots: int
    measured_at: float = field(default_factory=time.time)
    version: int = PROFILE_VERSION
    samples: list[dict[str, float]] = field(default_factory=list)

    def behaviour(self) -> Behaviour:
        """The stand-in's behaviour that serves like the measured engine."""
        return Behaviour(
            decode_step_s=self.decode_step_s,
            prefill_s_per_token=self.prefill_s_per_token,
            overhead_s=self.overhead_s,
            slots=self.slots,
        )


def measure(url: str, model: str | None = None) -> Profile:
    """Measure the engine at ``url`` (a base URL such as ``http://127.0.0.1:8080``)."""
    import httpx

    with httpx.Client(base_url=url.rstrip("/"), timeout=TIMEOUT_S) as client:
        ask = _Asker(client, model)
        ask.timed(PROMPT_WORDS[0], 1)  # warm: the first request loads caches
        samples = []
        for words in PROMPT_WORDS:
            try:
                n, t = ask.timed(words, 1)
            except TooLong:  # past the engine's context: the shorter prompts must do
                break
            samples.append({"prompt_tokens": n, "time_s": t})
        if len(samples) < 2:
            raise ScenarioError(
                "the engine's context holds fewer than two of the probe prompts", source="--like"
            )
        overhead_s, prefill_s = _line(
            [s["prompt_tokens"] for s in samples], [s["time_s"] for s in samples]
        )
        _, one_s, _ = ask.timed_output(PROMPT_WORDS[0], 1)
        _, many_s, produced = ask.timed_output(PROMPT_WORDS[0], DECODE_PROBE_TOKENS)
        step_s = max(0.0, many_s - one_s) / max(1, produced - 1)
        slots = ask.slots(PROMPT_WORDS[1], 8)
    return Profile(
        source=url,
        overhead_s=max(0.0, overhead_s - step_s),  # T(n, 1) holds one decode step
        prefill_s_per_token=max(0.0, prefill_s),
        decode_step_s=step_s,
        slots=slots,
        samples=samples,
    )


class TooLong(Exception):
    """The engine refused a prompt longer than its context (HTTP 400)."""


class _Asker:
    """Small chat requests to one engine, timed from the request's start to its last byte."""

    def __init__(self, client: Any, model: str | None) -> None:
        self.client, self.model = client, model

    def body(self, words: int, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": "hello " * words}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        if self.model:
            body["model"] = self.model
        return body

    def once(self, words: int, max_tokens: int) -> tuple[float, int]:
        body = self.body(words, max_tokens)
        start = time.perf_counter()
        resp = self.client.post("/v1/chat/completions", json=body)
        elapsed = time.perf_counter() - start
        if resp.status_code == 400 and "context" in resp.text:
            raise TooLong(resp.text[:200])
        if resp.status_code != 200:
            raise ScenarioError(
                f"the engine answered {resp.status_code}: {resp.text[:200]}", source="--like"
            )
        usage = resp.json().get("usage") or {}
        return elapsed, int(usage.get("completion_tokens") or max_tokens)

    def timed(self, words: int, max_tokens: int) -> tuple[int, float]:
        """(the stand-in's prompt tokens, median time) of a request."""
        times = [self.once(words, max_tokens)[0] for _ in range(REPEATS)]
        return prompt_tokens(self.body(words, max_tokens)), statistics.median(times)

    def timed_output(self, words: int, max_tokens: int) -> tuple[int, float, int]:
        """(prompt tokens, median time, output tokens the engine reports) of a request."""
        runs = [self.once(words, max_tokens) for _ in range(REPEATS)]
        produced = round(statistics.median(n for _, n in runs))
        return (
            prompt_tokens(self.body(words, max_tokens)),
            statistics.median(t for t, _ in runs),
            produced,
        )

    def slots(self, words: int, max_tokens: int) -> int:
        """How many requests the engine serves at once, from ``BURSTS`` bursts of
        ``CONCURRENT``, each after a lone request.

        The least lone time and the least makespan are compared: a busy host only adds
        time to either, and a single burst against a median of lone requests read a
        one-slot engine's 12 ms requests as two slots when the host slowed the lone ones."""
        ones, makespans = [], []
        with ThreadPoolExecutor(CONCURRENT) as pool:
            for _ in range(BURSTS):
                ones.append(self.once(words, max_tokens)[0])
                start = time.perf_counter()
                list(pool.map(lambda _: self.once(words, max_tokens), range(CONCURRENT)))
                makespans.append(time.perf_counter() - start)
        return max(1, min(CONCURRENT, round(CONCURRENT * min(ones) / min(makespans))))


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope of ``ys`` on ``xs``."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def write_profile(profile: Profile, path: str | Path) -> None:
    """Write ``profile`` as JSON (whole or not at all)."""
    from tierwise.outfile import write_text

    write_text(path, json.dumps(asdict(profile), indent=2) + "\n")


_NUMBERS = ("overhead_s", "prefill_s_per_token", "decode_step_s")


def read_profile(path: str | Path) -> Profile:
    """A profile written by :func:`write_profile`; anything else is one ScenarioError."""
    from tierwise.tomlfile import read_json

    data = read_json(path)  # bounded, a FIFO waited for, one error naming the file
    if data.get("version") != PROFILE_VERSION:
        found = data.get("version")
        raise ScenarioError(
            f"expected a profile of version {PROFILE_VERSION}, got {found!r}",
            source=str(path),
            path="version",
        )
    for key in _NUMBERS:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e4:
            raise ScenarioError(f"expected seconds ≥ 0, got {value!r}", source=str(path), path=key)
    slots = data.get("slots")
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 1024:
        raise ScenarioError(f"expected 1 to 1024, got {slots!r}", source=str(path), path="slots")
    return Profile(
        source=str(data.get("source", "")),
        overhead_s=float(data["overhead_s"]),
        prefill_s_per_token=float(data["prefill_s_per_token"]),
        decode_step_s=float(data["decode_step_s"]),
        slots=slots,
        measured_at=float(data.get("measured_at") or 0.0),
        samples=list(data.get("samples") or []),
    )
