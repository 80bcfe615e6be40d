"""The namespace route lab: live retuning, a shared client namespace, the oracle's fits.

The pure parts (the emulator's control lines, the fits, the follow count) run
everywhere; the paths and the whole `tierwise lab route` need root and are marked
``@lab`` (they skip with the reason elsewhere).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fuzz.test_fuzz_cli import run_forked
from tests.lab.conftest import lab
from tierwise.lab import Direction, EmulatedPath, PathConfig, Shaper
from tierwise.lab.bench import netns
from tierwise.lab.bench.emulator import ORPHANED, STOP, Control
from tierwise.lab.world.namespaces import NS_SITES, fit_line, ns_follow, oracle_site, state_key

MBIT = 1e6 / 8


def test_control_lines_retune_and_stop() -> None:
    """A JSON line retunes a direction (split across reads too); `stop` ends; EOF orphans."""
    up, down = Shaper(Direction()), Shaper(Direction(delay_s=0.01))
    control = Control({"a_to_b": up, "b_to_a": down})
    line = json.dumps({"a_to_b": Direction(rate_bytes_per_s=1000.0).to_dict()}).encode()
    assert control.feed(line[:7]) is None and up.direction.rate_bytes_per_s is None
    assert control.feed(line[7:] + b"\n") is None
    assert up.direction.rate_bytes_per_s == 1000.0 and down.direction.delay_s == 0.01
    assert control.feed(b"stop\n") == STOP
    assert Control({}).feed(b"") == ORPHANED
    assert Control({}).feed(b"stop") is None  # a partial word waits for its newline ...
    stopping = Control({})
    stopping.feed(b"stop")
    assert stopping.feed(b"") == STOP  # ... or for the pipe to close after it


def test_retune_keeps_the_backlog() -> None:
    """Packets admitted before a retune keep their times; later ones meet the new rate."""
    shaper = Shaper(Direction(rate_bytes_per_s=1000.0))
    first = shaper.admit(0.0, 1000)
    shaper.retune(Direction(rate_bytes_per_s=100.0))
    assert first == pytest.approx(1.0)
    assert shaper.admit(0.0, 100) == pytest.approx(2.0)  # behind the backlog, at 100 B/s


def test_fit_line_and_oracle_choice() -> None:
    """The fits are least squares; the oracle takes the fastest site in the world's state."""
    assert fit_line([(0, 1.0), (10, 2.0), (20, 3.0)]) == pytest.approx((1.0, 0.1))
    assert fit_line([(5, 2.0), (5, 4.0)]) == pytest.approx((3.0, 0.0))
    w = {"cloud_up_bytes_per_s": 80 * MBIT, "edge_up": True, "device_slowdown": 1.0}
    fits = {state_key(n, w): (0.1 * i, 1e-7 * (3 - i)) for i, n in enumerate(NS_SITES)}
    assert oracle_site(w, 100, fits) == "device"
    assert oracle_site(w, 10_000_000, fits) == "cloud"
    fits[state_key("cloud", {**w, "cloud_up_bytes_per_s": 3 * MBIT})] = (0.2, 1e-5)
    slow = {**w, "cloud_up_bytes_per_s": 3 * MBIT, "edge_up": False}
    assert oracle_site(slow, 10_000_000, fits) == "device"


def test_follow_counts_requests_and_seconds_after_each_change() -> None:
    """After a change in the recorded world: requests and seconds until the oracle's choice."""
    base = {"cloud_up_bytes_per_s": 1.0, "edge_up": True, "device_slowdown": 1.0}
    recs = [{"world": base, "order": ["cloud"], "total_s": 0.5} for _ in range(6)]
    for r in recs[3:]:
        r["world"] = {**base, "edge_up": False}
    recs[3]["order"] = ["edge"]
    best = ["cloud"] * 6
    assert ns_follow(recs, best) == [(2, 0.5)]


def test_without_root_it_says_so_and_names_loopback(tmp_path: Path) -> None:
    """Not root: one line naming what is missing and the loopback alternative, exit 2."""
    outcome = run_forked(["lab", "route", "--requests", "20"], tmp_path, as_user=True)
    assert outcome.code == 2 and outcome.stderr.count("\n") == 1
    assert "root" in outcome.stderr and "--loopback" in outcome.stderr


@lab
def test_one_client_namespace_reaches_servers_on_retunable_paths() -> None:
    """Two paths share a client namespace; a live retune slows one path and not the other."""
    with netns.owned("rt") as client_ns:
        fast = PathConfig.symmetric(rate_bytes_per_s=40 * MBIT)
        with (
            EmulatedPath(fast, index=1, client_ns=client_ns) as a,
            EmulatedPath(fast, index=2, client_ns=client_ns) as b,
        ):
            before = [_upload_s(p, 200_000) for p in (a, b)]
            a.retune(up=Direction(rate_bytes_per_s=4 * MBIT))
            after = [_upload_s(p, 200_000) for p in (a, b)]
        assert client_ns in netns.list_namespaces()
    # 200 kB at 4 Mbit/s takes 0.4 s at least (the retuned capacity, not a ratio of two
    # loaded measurements); the other path still moves it well under that (0.04 s + RTT)
    assert after[0] >= 200_000 / (4 * MBIT), (before, after)
    assert after[1] < 200_000 / (4 * MBIT), (before, after)
    assert not any(n.startswith(netns.namespace_name("rt")) for n in netns.list_namespaces())


def _upload_s(path: EmulatedPath, size: int) -> float:
    """Seconds to move ``size`` bytes client → server over kernel TCP and hear back."""
    server, client = path.socket("server"), path.socket("client")
    with server, client:
        server.bind((path.server_addr, 0))
        server.listen(1)
        got = []

        def sink() -> None:
            conn, _ = server.accept()
            with conn:
                n = 0
                while n < size and (chunk := conn.recv(65536)):
                    n += len(chunk)
                conn.sendall(b"k")
            got.append(n)

        thread = threading.Thread(target=sink, daemon=True)
        thread.start()
        client.connect(server.getsockname())
        t0 = time.perf_counter()
        client.sendall(bytes(size))
        assert client.recv(1) == b"k"
        elapsed = time.perf_counter() - t0
        thread.join(5)
    assert got == [size]
    return elapsed


@lab
def test_lab_route_in_namespaces_end_to_end(tmp_path: Path) -> None:
    """The whole run, small: predictive and the measured oracle, no failed request.

    The edge is llama.cpp's server on the tiny random model (``--engine llama.cpp``), in
    its namespace behind its emulated path, wherever that engine can be had; elsewhere
    the stand-in serves it. One run for both: each costs about 30 s of the suite."""
    from tierwise.lab.world.engine import engine_unavailable_reason

    engine = [] if engine_unavailable_reason() is not None else ["--engine", "llama.cpp"]
    out = tmp_path / "figures.json"
    run = run_cli("lab", "route", "--requests", "20", "--strategies", "predictive",
                  *engine, "--json", str(out))  # fmt: skip
    assert run.code == 0, run.stderr
    figures = json.loads(out.read_text())
    assert set(figures) == {"predictive", "oracle"}
    assert figures["predictive"]["failed"] == 0 and figures["oracle"]["failed"] == 0
    assert figures["oracle"]["vs_oracle"] == pytest.approx(1.0)
    assert figures["predictive"]["median_error"] < 0.5
