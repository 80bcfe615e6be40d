"""A small OpenAI-compatible model server: the stand-in for llama.cpp, vLLM or a cloud API.

``POST /v1/chat/completions`` and ``/v1/completions`` (streaming SSE and not) and
``GET /v1/models``. A request costs what §12.1.5 says a model call costs: a wait for
a free slot (queueing), a prefill proportional to the prompt's tokens, then one
decode step per output token — the step from the catalog (``(W + KV) / B_mem`` of
the hardware and model, times a measured/bound factor such as §12.5.2's 2.83×) or
given directly. The words it returns are filler; the timing is the point.

On loopback it can also stand in for the path: ``--rtt`` and ``--uplink`` make it
wait an RTT and the body's transfer time before serving (outside ``Server-Timing``,
so a gateway sees them as network). Faults for the world-change experiments are
injectable at start and at run time through ``POST /admin/behaviour`` (JSON with
any :class:`Behaviour` field): a 5xx rate, stalls (a request hangs ``stall_s``
first), a slow-down of prefill and decode, and ``down`` (every request gets 503).
``GET /admin/behaviour`` reads them.

Requests are checked as OpenAI's API checks them (:mod:`tierwise.openai_api`: the same
schema the gateway uses, the same error object — 400 naming the field) unless the
server is started lenient (``--lenient``: any JSON object passes, unknown values fall
back to defaults; never a 500 for what a client sent).

Each response carries a W3C ``Server-Timing`` header (``queue``, ``prefill`` and,
when not streaming, ``decode`` in ms), which ``tierwise route`` uses to split a
request's time into network and server parts.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from tierwise.errors import ScenarioError
from tierwise.openai_api import RequestRejected, error_body, parse_request

__all__ = [
    "Behaviour",
    "ModelServer",
    "catalog_step_s",
    "free_port",
    "prompt_tokens",
    "serve",
    "wait_ready",
]

CHARS_PER_TOKEN = 4  # a common rule of thumb for English text and BPE tokenisers
IMAGE_TOKENS = 256  # visual tokens per image (a ViT's patch grid after merging)
DEFAULT_MAX_TOKENS = 16


@dataclass
class Behaviour:
    """What one request costs and which faults are injected; mutable at run time."""

    decode_step_s: float = 0.02
    prefill_s_per_token: float = 0.0001
    overhead_s: float = 0.0
    slots: int = 4
    slowdown: float = 1.0
    error_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 0.0
    down: bool = False
    # emulated network on loopback (not in Server-Timing): RTT and uplink before serving
    rtt_s: float = 0.0
    uplink_bytes_per_s: float = 0.0  # 0: no limit

    def update(self, changes: dict[str, Any]) -> None:
        """Apply ``changes`` (field → value); an unknown field or a bad value is a ScenarioError."""
        known = {f.name: f.type for f in fields(self)}
        for key, value in changes.items():
            if key not in known:
                raise ScenarioError(f"unknown field; known: {', '.join(known)}", path=key)
            kind = {"bool": bool, "int": int}.get(str(known[key]), float)
            if isinstance(value, bool) != (kind is bool) or not isinstance(value, int | float):
                raise ScenarioError(f"expected a {kind.__name__}, got {value!r}", path=key)
            if kind is not bool and value < 0:
                raise ScenarioError(f"must not be negative, got {value!r}", path=key)
            setattr(self, key, kind(value))


def catalog_step_s(
    hardware: str, model: str, weights: str = "q4_0", context: int = 4096
) -> tuple[float, float]:
    """Decode step bound ``(W + KV) / B_mem`` and prefill time per token, from the catalog.

    §12.1.5: the step reads the weights once plus the KV cache; prefill is bound by
    the dense BF16 peak (the catalog's prefill FLOPs over its reference tokens).
    """
    from tierwise.catalog import load_catalog
    from tierwise.model import device

    cat = load_catalog()
    hw = cat.get("hardware", hardware, where="--hardware")
    spec = cat.get("model", model, where="--model")
    bpv = cat.get("quant", weights, where="--weights").bytes_per_value
    if spec.decode_weight_bytes is None or spec.kv_bytes_per_token is None:
        raise ScenarioError(f"model {model!r} has no decode sizes", source="--model")
    w = device.weight_bytes(spec.decode_weight_bytes, bpv)
    step_s = float(device.decode_step_s(w, spec.kv_bytes_per_token * context, hw.memory_bandwidth))
    prefill = 0.0
    if spec.prefill_flops and spec.prefill_reference_tokens and hw.dense_bf16:
        per_token = spec.prefill_flops / spec.prefill_reference_tokens
        prefill = float(device.compute_bound_s(per_token, hw.dense_bf16))
    return step_s, prefill


def prompt_tokens(body: dict[str, Any]) -> int:
    """Prompt tokens of a chat or completion request: text/4, plus a fixed count per image."""
    chars, images = 0, 0
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        chars += len(prompt)
    elif isinstance(prompt, list):
        chars += sum(len(p) for p in prompt if isinstance(p, str))
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text":
                    chars += len(str(part.get("text", "")))
                elif part.get("type") in ("image_url", "input_image"):
                    images += 1
    return max(1, -(-chars // CHARS_PER_TOKEN)) + IMAGE_TOKENS * images


def _words(n: int) -> list[str]:
    return [f"w{i % 100} " for i in range(n)]


class ModelServer:
    """The ASGI app (starlette) and the state behind it."""

    def __init__(
        self, model: str, behaviour: Behaviour, seed: int = 0, strict: bool = True
    ) -> None:
        import asyncio
        import random

        from starlette.applications import Starlette
        from starlette.routing import Route

        self.model = model
        self.strict = strict
        self.behaviour = behaviour
        self.rng = random.Random(seed)
        self.slots = asyncio.Semaphore(behaviour.slots)
        self.app = Starlette(
            routes=[
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/chat/completions", self.complete, methods=["POST"]),
                Route("/v1/completions", self.complete, methods=["POST"]),
                Route("/admin/behaviour", self.admin, methods=["GET", "POST"]),
                Route("/health", self.health, methods=["GET"]),
            ]
        )

    async def health(self, request):
        from starlette.responses import JSONResponse

        return JSONResponse({"ok": not self.behaviour.down}, status_code=self._up_status())

    def _up_status(self) -> int:
        return 503 if self.behaviour.down else 200

    async def models(self, request):
        from starlette.responses import JSONResponse

        if self.behaviour.down:
            return _error(503, "server is down (injected)")
        data = [{"id": self.model, "object": "model", "created": 0, "owned_by": "tierwise"}]
        return JSONResponse({"object": "list", "data": data})

    async def admin(self, request):
        from starlette.responses import JSONResponse

        if request.method == "POST":
            try:
                changes = json.loads(await request.body() or b"{}")
                if not isinstance(changes, dict):
                    raise ScenarioError("expected a JSON object of field → value")
                self.behaviour.update(changes)
            except (ValueError, ScenarioError) as exc:
                return _error(400, str(exc))
            self._resize_slots()
        return JSONResponse(asdict(self.behaviour))

    def _resize_slots(self) -> None:
        """A changed ``slots`` takes effect for requests that arrive from now on."""
        import asyncio

        if self.behaviour.slots != getattr(self, "_slots_n", None):
            self._slots_n = self.behaviour.slots
            self.slots = asyncio.Semaphore(max(1, self.behaviour.slots))

    async def complete(self, request):
        """One completion: read the upload, inject faults, wait, prefill, decode."""
        import asyncio

        body_bytes = await request.body()
        b = self.behaviour
        if b.down:
            return _error(503, "server is down (injected)")
        try:
            body = self._checked(request.url.path, body_bytes)
        except RequestRejected as exc:
            return _rejected(exc)
        net_s = b.rtt_s + (len(body_bytes) / b.uplink_bytes_per_s if b.uplink_bytes_per_s else 0)
        if net_s:
            await asyncio.sleep(net_s)
        if b.stall_rate and self.rng.random() < b.stall_rate:
            await asyncio.sleep(b.stall_s)
        if b.error_rate and self.rng.random() < b.error_rate:
            return _error(500, "internal error (injected)")
        chat = request.url.path.endswith("/chat/completions")
        n_in = prompt_tokens(body)
        n_out = _max_tokens(body)
        t0 = time.perf_counter()
        await self.slots.acquire()
        streaming = False
        try:
            timing = {"queue": time.perf_counter() - t0}
            timing["prefill"] = (b.overhead_s + n_in * b.prefill_s_per_token) * b.slowdown
            await asyncio.sleep(timing["prefill"])
            if body.get("stream"):
                streaming = True  # the stream releases the slot when it ends
                return self._stream(body, chat, n_in, n_out, timing)
            timing["decode"] = n_out * b.decode_step_s * b.slowdown
            await asyncio.sleep(timing["decode"])
        finally:
            if not streaming:
                self.slots.release()
        return self._whole(chat, n_in, n_out, timing)

    def _checked(self, path: str, body_bytes: bytes) -> dict[str, Any]:
        """The body as a dict: checked against OpenAI's schema, or (lenient) any object."""
        if self.strict:
            return parse_request(path, body_bytes)
        try:
            body = json.loads(body_bytes)
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict):
            raise RequestRejected(400, "request body must be a JSON object")
        return body

    def _whole(self, chat, n_in, n_out, timing):
        from starlette.responses import JSONResponse

        text = "".join(_words(n_out))
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        out = _envelope(chat, self.model, stream=False)
        out["choices"] = [choice]
        out["usage"] = _usage(n_in, n_out)
        return JSONResponse(out, headers={"server-timing": _server_timing(timing)})

    def _stream(self, body, chat, n_in, n_out, timing):
        from starlette.responses import StreamingResponse

        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        head = _envelope(chat, self.model, stream=True)

        import asyncio

        async def events():
            # Each token is due one step after the one before, on a deadline: a sleep of
            # its own per token drifts by the event loop's timer grain (uvloop, which
            # uvicorn picks, rounds a delay to whole ms: 0.35 ms steps took 0.005 ms,
            # 1.45 ms took 1.13), so a sleep now makes up what the last one missed.
            due = time.perf_counter()
            try:
                for i, word in enumerate(_words(n_out)):
                    if i:
                        due += self.behaviour.decode_step_s * self.behaviour.slowdown
                        await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    delta = {"content": word, **({"role": "assistant"} if i == 0 else {})}
                    part = {"index": 0, "finish_reason": None}
                    part.update({"delta": delta} if chat else {"text": word})
                    yield _sse({**head, "choices": [part]})
                last = {"index": 0, "finish_reason": "length"}
                last.update({"delta": {}} if chat else {"text": ""})
                yield _sse({**head, "choices": [last]})
                if include_usage:
                    yield _sse({**head, "choices": [], "usage": _usage(n_in, n_out)})
                yield b"data: [DONE]\n\n"
            finally:
                self.slots.release()

        headers = {"server-timing": _server_timing(timing), "cache-control": "no-cache"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


def _envelope(chat: bool, model: str, stream: bool) -> dict[str, Any]:
    import uuid

    kind = "chat.completion" if chat else "text_completion"
    return {
        "id": f"cmpl-{uuid.uuid4().hex[:12]}",
        "object": kind + (".chunk" if stream and chat else ""),
        "created": int(time.time()),
        "model": model,
    }


def _usage(n_in: int, n_out: int) -> dict[str, int]:
    return {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _server_timing(timing: dict[str, float]) -> str:
    return ", ".join(f"{k};dur={v * 1000:.3f}" for k, v in timing.items())


def _max_tokens(body: dict[str, Any]) -> int:
    """The output cap asked for; a missing or (lenient) unusable one is the default."""
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return DEFAULT_MAX_TOKENS


def _error(status: int, message: str):
    from starlette.responses import JSONResponse

    kind = "server_error" if status >= 500 else "invalid_request_error"
    return JSONResponse(error_body(message, kind), status_code=status)


def _rejected(exc: RequestRejected):
    from starlette.responses import JSONResponse

    return JSONResponse(exc.body(), status_code=exc.status)


def serve(
    host: str,
    port: int,
    model: str,
    behaviour: Behaviour,
    seed: int = 0,
    sock: Any = None,
    strict: bool = True,
) -> None:
    """Run the server until interrupted (uvicorn, one process, access log off)."""
    import uvicorn

    from tierwise.listen import listen_socket

    sock = sock or listen_socket(host, port)  # a bad port or an address in use: one line
    server = ModelServer(model, behaviour, seed, strict)
    config = uvicorn.Config(server.app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc: Any, url: str, timeout_s: float = 30.0) -> None:
    """Wait until the server at ``url`` answers ``/health`` (or ``/metrics``) or ``proc`` exits."""
    import contextlib

    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"{url}: the server exited: {err.strip()}")
        for path in ("/health", "/metrics"):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + path, timeout=1.0).status_code in (200, 503):
                    return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not start in {timeout_s:g} s")
