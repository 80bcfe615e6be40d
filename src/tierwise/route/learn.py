"""Every forwarded request is a timing probe: turn its stages into estimate updates (§12.5.3).

The gateway records when the connection opened (a new TCP connect is one RTT), when
the response headers came, the first and last token of a stream and the end, plus
the server's own ``Server-Timing`` (queue, prefill, decode) when it sends one — the
project's model server does; llama.cpp and vLLM report the same in their bodies or
metrics. The network's part of the time to headers is then ``RTT + upload``: a small
request measures the RTT, a large one the uplink rate. Without server timing, queue
and prefill are learned as one lump and the decode factor from the stream's tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tierwise.route.estimate import Adaptive
from tierwise.route.predict import (
    ANSWER_HEAD_BYTES,
    SMALL_BYTES,
    RequestShape,
    SiteModel,
    prompt_map_features,
    service_features,
)

__all__ = ["Timing", "learn", "parse_server_timing"]


@dataclass
class Timing:
    """One attempt's stages, seconds from the moment it was sent."""

    connect_s: float | None = None  # a new connection's TCP connect, if one was opened
    headers_s: float = 0.0
    first_token_s: float | None = None
    last_token_s: float | None = None
    end_s: float = 0.0
    tokens_out: int = 0
    bytes_down: int = 0
    server: dict[str, float] = field(default_factory=dict)  # queue, prefill, decode (s)
    queued_s: float | None = None  # time in the gateway's line for the site, before sending
    tokens_from: str = ""  # "usage" (the server's count) or "events" (counted in the stream)
    prompt_tokens: int | None = None  # the server's count, from its usage
    events: int = 0  # SSE data events relayed
    build_s: float = 0.0  # building the upstream request, before it was sent
    # other attempts in flight at the gateway (any site) from its sending to its answer's
    # headers: their work on both ends' event loops is in its connect and header times
    overlap: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "queued_s": self.queued_s,
            "tokens_from": self.tokens_from,
            "prompt_tokens": self.prompt_tokens,
            "connect_s": self.connect_s,
            "headers_s": self.headers_s,
            "first_token_s": self.first_token_s,
            "last_token_s": self.last_token_s,
            "end_s": self.end_s,
            "tokens_out": self.tokens_out,
            "bytes_down": self.bytes_down,
            "server_s": self.server,
            "overlap": self.overlap,
        }


def parse_server_timing(value: str | None) -> dict[str, float]:
    """``queue;dur=1.5, prefill;dur=20`` (ms, W3C Server-Timing) → ``{"queue": 0.0015, ...}``."""
    out: dict[str, float] = {}
    for metric in (value or "").split(","):
        name, *params = [p.strip() for p in metric.split(";")]
        for p in params:
            key, _, number = p.partition("=")
            if key == "dur" and name:
                try:
                    out[name] = float(number) / 1000.0
                except ValueError:
                    pass
    return out


def _decode_step_s(t: Timing, stream: bool) -> tuple[float, bool] | None:
    """One decode step and whether the gateway's clock timed it: from the stream's token
    times (yes), else the server's decode time (no)."""
    if stream and t.first_token_s is not None and t.last_token_s is not None and t.tokens_out > 2:
        return (t.last_token_s - t.first_token_s) / (t.tokens_out - 1), True
    if "decode" in t.server and t.tokens_out > 0:
        return t.server["decode"] / t.tokens_out, False
    return None


def learn(m: SiteModel, req: RequestShape, t: Timing) -> None:
    """Update ``m``'s estimates from one successful attempt."""
    srv = t.server
    if t.prompt_tokens is not None and t.prompt_tokens > 0:  # the site's own count
        m.prompt_map.update(prompt_map_features(req.prompt_tokens), t.prompt_tokens)
    server_s = srv.get("queue", 0.0) + srv.get("prefill", 0.0)
    if not req.stream:
        server_s += srv.get("decode", 0.0)
    if srv:
        m.queue_s.update(srv.get("queue", 0.0))
        bound_s = (t.prompt_tokens or m.prompt_tokens(req.prompt_tokens)) * m.prefill_bound_s
        if bound_s > 1e-4 and "prefill" in srv:
            m.prefill_factor.update(srv["prefill"] / bound_s)
    step = _decode_step_s(t, req.stream)
    if step is not None and m.step_bound_s > 0:
        step_s, our_clock = step
        _sample(m.decode_factor, step_s / m.step_bound_s, t.overlap if our_clock else 0, False)
    if t.tokens_out > 0:
        per_token = m.stream_bytes_per_token if req.stream else m.down_bytes_per_token
        per_token.update(max(t.bytes_down - ANSWER_HEAD_BYTES, 0) / t.tokens_out)
    if not srv:
        learn_service(m, req, t)
    if not m.site.remote:
        return
    if t.connect_s is not None:
        _sample(m.rtt_s, t.connect_s, t.overlap)
    if not srv:  # no server timing: the server's time is learned from the gateway's clock
        return
    network_s = t.headers_s - (t.connect_s or 0.0) - server_s
    if req.bytes_up < SMALL_BYTES:
        _sample(m.rtt_s, max(network_s, 0.0), t.overlap)
    elif network_s - m.rtt_s.value > 0.25 * network_s:
        m.up_rate.update(req.bytes_up / (network_s - m.rtt_s.value))
    download_s = t.end_s - t.headers_s
    if not req.stream and t.bytes_down >= SMALL_BYTES and download_s > 0:
        m.down_rate.update(t.bytes_down / download_s)


def _sample(est: Adaptive, value: float, overlap: int, bound: bool = True) -> None:
    """A sample timed by the gateway's clock — a connect, the time to headers less the
    server's own, a stream's pace. Alone, it measures the path and the site. Beside other
    attempts it also holds the time both event loops spent on them: 200 streams at once
    on loopback timed connects of 45 ms, RTTs of ~100 ms and a 10 ms step at 23 ms, and
    the next lone request was priced at 2–8× its time. So an overlapped time (``bound``:
    a wait that the loops can only lengthen) is an upper bound — the quantity is at most
    it, TCP's and BBR's min-RTT reasoning — never a rise; an overlapped pace is no sample
    at all (a late loop also bunches tokens: paces near 0 were read in the same burst).
    ``overlap``: the other attempts in flight beside it (0 for the server's own figures)."""
    if overlap == 0:
        est.update(value)
    elif bound and value < est.value:
        est.at_most(value)


def learn_service(m: SiteModel, req: RequestShape, t: Timing) -> None:
    """The server's own time, from a site that sends no ``Server-Timing`` (llama.cpp).

    Service begins when the request reaches the server (after the RTT and the upload;
    at a site whose line the gateway keeps, the request is sent only once it has a
    slot, and every stage is timed from then). From there a stream's first event is
    the time to first token and its last event the decode of the rest; a whole answer
    is both together (the output tokens from its ``usage``). Each is one observation
    of the site's linear service model (:func:`~tierwise.route.predict.service_features`).
    """
    if m.service is None:
        return
    lead_s = 0.0
    if m.site.remote:
        lead_s = m.rtt_s.value + req.bytes_up / max(m.up_rate.value, 1.0)
    start_s = lead_s
    n = t.prompt_tokens or m.prompt_tokens(req.prompt_tokens)  # the site's count if it said
    if req.stream:
        if t.first_token_s is None:
            return
        k = max(t.tokens_out, 1)
        first, rest = service_features(n, k)
        m.service.update(first, t.first_token_s - start_s)
        if k >= 2 and t.last_token_s is not None:
            m.service.update(rest, t.last_token_s - t.first_token_s)
        return
    if t.tokens_out <= 0:
        return
    first, rest = service_features(n, t.tokens_out)
    down_s = (
        max(t.bytes_down - ANSWER_HEAD_BYTES, 0) / max(m.down_rate.value, 1.0)
        if m.site.remote
        else 0.0
    )
    whole = [a + b for a, b in zip(first, rest, strict=True)]
    m.service.update(whole, t.end_s - start_s - down_s)


def learn_timeout(m: SiteModel, req: RequestShape, elapsed_s: float) -> None:
    """A large upload that timed out bounds the uplink rate: at most ``bytes / (t − RTT)``.

    Without this the gateway would keep trying a site whose uplink collapsed (80 → 3
    Mbit/s), failing over each time and never measuring the new rate. An estimate
    above the bound is moved down to it (a censored observation, not a noisy sample).
    """
    if m.site.remote and req.bytes_up >= SMALL_BYTES:
        m.up_rate.at_most(req.bytes_up / max(elapsed_s - m.rtt_s.value, 1e-3))
