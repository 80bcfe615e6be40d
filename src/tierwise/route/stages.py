"""Six-stage decomposition of one request's client-visible time (reference 2's live loop).

The client-visible time ``client_s`` runs from the moment the gateway took the request
to the moment the answer's last byte was handed to the client's connection. It is split
into six terms, each the sum of named parts, and a residual:

=================  ===========================================================================
term               parts (seconds)
=================  ===========================================================================
network            ``up``: connect, the request's bytes and the RTT to the answer's headers
                   (minus the server's own time); ``down``: the answer's bytes after them
serialization      ``request``: building the upstream request
scheduling         ``gateway``: predict and choose; ``line``: the gateway's line for the site;
                   ``engine``: the server's queue (``Server-Timing``); ``failover``: attempts
                   at other sites before the one that answered
compute            ``prefill`` and ``decode`` (the server's ``Server-Timing``, a stream's token
                   times); ``unsplit``: the server's whole time when it reports none
deserialization    ``request``: parsing the client's JSON; ``response``: scanning the stream's
                   events or reading the answer's usage
io_wait            ``client_body``: waiting for the client's body; ``client_send``: handing the
                   answer to the client's connection
=================  ===========================================================================

``residual_s = client_s − Σ terms``: what no clock covered (the gateway's own overhead
between marks, a server's timing that disagrees with the gateway's clock). It is shown
as such, never folded into a term, so ``Σ terms + residual == client_s`` holds in every
record. Parts are intervals between the gateway's own clock readings (``measured``);
where a site reports no server timing, the time to the headers is split between network
and server by the live estimates (RTT, uplink rate), and those parts are listed under
``estimated``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TERMS", "Marks", "Work", "decompose"]

TERMS = ("network", "serialization", "scheduling", "compute", "deserialization", "io_wait")


@dataclass
class Marks:
    """The gateway's clock readings for one request (``time.perf_counter`` seconds)."""

    arrived: float
    read_s: float = 0.0  # the client's body read
    parse_s: float = 0.0  # its JSON parsed and checked
    decided: float = 0.0  # prediction and choice done
    decide_s: float = 0.0


@dataclass
class Work:
    """Gateway work done while relaying an answer, split at the first and last token."""

    deser_s: float = 0.0
    send_s: float = 0.0
    at_first: tuple[float, float] = (0.0, 0.0)
    at_last: tuple[float, float] = (0.0, 0.0)
    usage_s: float = 0.0  # parsing a whole answer's usage


def _add(parts: dict[str, float], key: str, value: float) -> None:
    if value:
        parts[key] = parts.get(key, 0.0) + value


def decompose(
    client_s: float,
    marks: Marks,
    sent_at: float | None = None,
    timing: Any = None,
    *,
    stream: bool = False,
    retried: bool = False,
    network_estimate_s: float = 0.0,
    work: Work | None = None,
) -> dict[str, Any]:
    """The terms of ``client_s`` (see the module docstring), given the marks of the
    gateway, the answering attempt's send time and :class:`~tierwise.route.learn.Timing`
    (None when no site answered), its relay work and the network's estimated share of
    the time to the headers (used only when the site sent no ``Server-Timing``)."""
    parts: dict[str, float] = {}
    estimated: list[str] = []
    _add(parts, "io_wait.client_body", marks.read_s)
    _add(parts, "deserialization.request", marks.parse_s)
    _add(parts, "scheduling.gateway", marks.decide_s)
    if timing is None or sent_at is None:  # no site answered: all went on attempts
        _add(parts, "scheduling.failover", marks.arrived + client_s - marks.decided)
    else:
        queued_s = timing.queued_s or 0.0
        _add(parts, "scheduling.line", queued_s)
        if retried:
            _add(parts, "scheduling.failover", sent_at - marks.decided - queued_s)
        _attempt_parts(parts, estimated, timing, stream, network_estimate_s, work or Work())
        end = sent_at + timing.end_s
        tail_s = marks.arrived + client_s - end
        if not stream and work is not None:
            _add(parts, "deserialization.response", work.usage_s)
            _add(parts, "io_wait.client_send", tail_s - work.usage_s)
    terms = {t: 0.0 for t in TERMS}
    for key, value in parts.items():
        terms[key.split(".")[0]] += value
    return {
        "client_s": client_s,
        "terms_s": terms,
        "parts_s": parts,
        "residual_s": client_s - sum(terms.values()),
        "estimated": estimated,
    }


def _attempt_parts(
    parts: dict[str, float],
    estimated: list[str],
    t: Any,
    stream: bool,
    network_estimate_s: float,
    w: Work,
) -> None:
    """The answering attempt's parts, from its send to the end of its answer."""
    srv = t.server
    _add(parts, "serialization.request", t.build_s)
    to_headers_s = t.headers_s - t.build_s
    if srv:
        server_s = srv.get("queue", 0.0) + srv.get("prefill", 0.0)
        _add(parts, "scheduling.engine", srv.get("queue", 0.0))
        _add(parts, "compute.prefill", srv.get("prefill", 0.0))
        if not stream:
            server_s += srv.get("decode", 0.0)
            _add(parts, "compute.decode", srv.get("decode", 0.0))
        _add(parts, "network.up", to_headers_s - server_s)
    else:
        net_s = min(max(network_estimate_s, 0.0), max(to_headers_s, 0.0))
        _add(parts, "network.up", net_s)
        _add(parts, "compute.unsplit", to_headers_s - net_s)
        estimated += ["network.up", "compute.unsplit"]
    if not stream or t.first_token_s is None or t.last_token_s is None:
        _add(parts, "network.down", t.end_s - t.headers_s - w.deser_s - w.send_s)
        _add(parts, "deserialization.response", w.deser_s)
        _add(parts, "io_wait.client_send", w.send_s)
        return
    first_d, first_s = w.at_first
    last_d, last_s = w.at_last
    wait_first = t.first_token_s - t.headers_s - first_d - first_s
    _add(parts, "network.down" if srv.get("prefill") is not None else "compute.prefill", wait_first)
    _add(parts, "compute.decode", t.last_token_s - t.first_token_s - (last_d - first_d)
         - (last_s - first_s))  # fmt: skip
    _add(parts, "network.down", t.end_s - t.last_token_s - (w.deser_s - last_d)
         - (w.send_s - last_s))  # fmt: skip
    _add(parts, "deserialization.response", w.deser_s)
    _add(parts, "io_wait.client_send", w.send_s)
