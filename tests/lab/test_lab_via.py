"""`lab request --via` and `lab throughput --via`: kernel TCP, the relay and kcptun.

Parsing and the error paths run everywhere; the runs need the lab host (``@lab``) and,
for kcptun, Debian's ``kcptun`` package (skipped with the reason without it).
"""

from __future__ import annotations

import pytest
from hypothesis import given

from tests.conftest import run_cli
from tests.lab.conftest import lab, run_lab_cli
from tests.strategies import text
from tierwise.errors import ScenarioError
from tierwise.lab.experiments.request import RequestExperiment, serial_floor_s
from tierwise.lab.experiments.tunnels import (
    VIAS,
    digest_ok,
    kcptun_args,
    kcptun_unavailable_reason,
    parse_vias,
    upload_body,
)

KCPTUN_MISSING = kcptun_unavailable_reason()


def test_parse_vias_keeps_the_order_given() -> None:
    """`relay,direct` runs the relay first; spaces around names are ignored."""
    assert parse_vias("relay, direct") == ("relay", "direct")
    assert parse_vias("direct,relay,kcptun") == VIAS


@given(text(max_size=30))
def test_parse_vias_accepts_only_known_names(text: str) -> None:
    """Any other text is a ScenarioError naming --via, never another exception."""
    items = [i.strip() for i in text.split(",")]
    valid = all(i in VIAS for i in items) and len(set(items)) == len(items)
    try:
        assert parse_vias(text) == tuple(items) and valid
    except ScenarioError as exc:
        assert not valid and "--via" in str(exc)


def test_kcptun_window_covers_the_path() -> None:
    """kcptun's windows (packets of 1,350 B) cover 1.25 × the bandwidth-delay product."""
    args = kcptun_args(0.200, 333e6 / 8)
    window = int(args[args.index("--sndwnd") + 1])
    assert window * 1350 >= 1.25 * 333e6 / 8 * 0.200 * 0.99
    assert args[args.index("--rcvwnd") + 1] == str(window) and "--nocomp" in args


def test_digest_check_notices_one_changed_byte() -> None:
    """The service's SHA-256 of the upload proves the bytes arrived unchanged."""
    import hashlib

    body = upload_body(10_000, 3)
    answer = hashlib.sha256(body).digest() + bytes(968)
    assert digest_ok(body, answer)
    changed = bytearray(body)
    changed[5000] ^= 1
    assert not digest_ok(bytes(changed), answer)


def test_via_with_factor_is_refused() -> None:
    """--via compares transports; --factor varies one TCP setting: not both at once."""
    run = run_cli("lab", "request", "--via", "relay", "--factor", "initcwnd=10,40")
    assert run.code == 2 and "--factor does not apply with --via" in run.stderr


def test_size_without_via_is_refused() -> None:
    """`lab throughput --size` moves that many bytes per transport with --via only;
    without --via it used to be dropped in silence (each flow runs --duration)."""
    run = run_cli("lab", "throughput", "--size", "1MB")
    assert run.code == 2 and run.stdout == "", run.stderr
    assert "--size: applies with --via only" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _run_requests(vias: tuple[str, ...], runs: int = 2, **loss: float) -> dict:
    from tierwise.lab.experiments.via import ViaExperiment, run_via_requests

    req = RequestExperiment(modes=("cold",), runs=runs, cc="cubic", **loss)
    return run_via_requests(ViaExperiment(req, vias))


@lab
def test_relay_request_is_byte_exact_and_near_the_floor() -> None:
    """Over the relay between the namespaces: every request verified, median within 3 floors."""
    result = _run_requests(("relay",), runs=3)
    floor = serial_floor_s(RequestExperiment())
    row = result["summary"]["relay"]
    assert row["runs"] == 3 and row["failed"] == 0
    assert floor <= row["median_s"] <= 3 * floor, row
    assert result["transports"]["relay"]["address"].startswith("127.0.0.1:")
    assert not any(_alive(pid) for pid in result["transports"]["relay"]["pids"].values())


@lab
def test_direct_and_relay_alternate_with_loss_one_way() -> None:
    """With loss on the upload only, the transports alternate run by run and none fails."""
    from tierwise.lab.experiments.via import ViaExperiment, run_via_requests

    req = RequestExperiment(
        size_bytes=100_000, modes=("cold",), runs=2, cc="cubic", rtt_s=0.05, loss_up=0.05
    )
    result = run_via_requests(ViaExperiment(req, ("direct", "relay")))
    assert [s["via"] for s in result["samples"]] == ["direct", "relay"] * 2
    assert all(s["time_s"] is not None for s in result["samples"]), result["samples"]
    assert result["emulator"]["up"]["lost"] > 0 and result["emulator"]["down"]["lost"] == 0


@lab
def test_requests_on_remembered_sessions_and_beside_bulk() -> None:
    """Each request on a relay session started for it, from the memory a warm-up session
    left (its ends restarted every time); then requests beside a bulk download on one
    session. Every request verified; the bulk moved while each request ran."""
    from tierwise.lab.experiments.via import ViaExperiment, run_via_requests

    req = RequestExperiment(size_bytes=100_000, modes=("cold",), runs=2, cc="cubic", rtt_s=0.05)
    result = run_via_requests(ViaExperiment(req, ("relay",), sessions="remembered"))
    assert result["parameters"]["sessions"] == "remembered"
    assert all(s["time_s"] is not None for s in result["samples"]), result["samples"]
    beside = run_via_requests(ViaExperiment(req, ("direct", "relay"), beside_bulk_bytes=50_000_000))
    assert all(s["time_s"] is not None for s in beside["samples"]), beside["samples"]
    assert all(s["bulk_bytes_during"] > 0 for s in beside["samples"]), beside["samples"]


@lab
@pytest.mark.skipif(KCPTUN_MISSING is not None, reason=KCPTUN_MISSING or "")
def test_kcptun_request_runs_and_its_processes_stop() -> None:
    """kcptun's client and server carry the request and are gone after the run."""
    from tierwise.lab.bench.path import EmulatedPath, PathConfig
    from tierwise.lab.experiments.tunnels import open_tunnel

    result = _run_requests(("kcptun",))
    floor = serial_floor_s(RequestExperiment())
    assert result["summary"]["kcptun"]["failed"] == 0
    assert floor <= result["summary"]["kcptun"]["median_s"] <= 3 * floor
    with EmulatedPath(PathConfig.symmetric(rtt_s=0.01)) as path:
        with open_tunnel("kcptun", path, (path.server_addr, 9), 0.01, 1e6) as tunnel:
            pids = [p.pid for p in tunnel.processes.values()]
            assert all(_alive(pid) for pid in pids)
    assert not any(_alive(pid) for pid in pids)


@lab
def test_bulk_over_the_relay_counts_cpu_per_gb() -> None:
    """A 2 MB bulk through the relay completes (and says so); both ends' CPU per GB is positive."""
    from tierwise.lab.experiments.via import ViaBulk, run_via_bulk

    exp = ViaBulk(("relay",), (0.0,), 2_000_000, 60.0, 0.05, 100e6 / 8)
    record = run_via_bulk(exp)
    (row,) = record["rows"]
    assert record["emulator"]["0"]["down"]["packets"] > 0  # the path's counters, per level
    assert row["complete"] and row["received_bytes"] == 2_000_000 and row["ended"] == "size"
    assert row["cpu_s_per_gb"]["client"] > 0 and row["cpu_s_per_gb"]["server"] > 0
    assert 0 < row["goodput_over_rate"] <= 1.0


@lab
def test_missing_kcptun_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Without kcptun on PATH, --via kcptun exits 2 naming the package, before any path."""
    import shutil

    for tool in ("ip", "ss", "sysctl"):
        found = shutil.which(tool)
        if found is not None:
            (tmp_path / tool).symlink_to(found)
    run = run_lab_cli("lab", "request", "--via", "kcptun", "--runs", "1", PATH=str(tmp_path))
    assert run.code == 2 and "apt-get install -y kcptun" in run.stderr, run.stderr
    assert run.stdout == "" and len(run.stderr.strip().splitlines()) == 1
