"""A jumbo-frame lab path (``--mtu``): the relay discovers it; Ethernet loses nothing to size."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.lab.conftest import lab
from tierwise.errors import LabError
from tierwise.lab.bench.path import PathConfig
from tierwise.lab.experiments.request import RequestExperiment
from tierwise.lab.experiments.tunnels import kcptun_args, kcptun_mtu_bytes, relay_max_datagram


def test_the_transports_follow_the_paths_mtu() -> None:
    """9,000: the relay may send 8,876 B (a repair still fits), kcptun its cap of 1,500;
    1,500: both keep their defaults, so the issue's rows are measured as before."""
    assert relay_max_datagram(9000) == 8876 and relay_max_datagram(1500) is None
    assert kcptun_mtu_bytes(9000) == 1500 and kcptun_mtu_bytes(1500) == 1350
    args = kcptun_args(0.2, 333e6 / 8, 9000)
    assert args[args.index("--mtu") + 1] == "1500"
    with pytest.raises(LabError, match="MTU must lie in"):
        PathConfig(mtu_bytes=1279)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("throughput", "--via", "relay", "--mtu", "70000"), "--mtu: expected an integer"),
        (("request", "--via", "relay", "--mtu", "9 kB"), "--mtu: expected an integer"),
        (("throughput", "--mtu", "9000"), "--mtu: applies with --via only"),
    ],
)
def test_a_bad_mtu_is_one_line_exit_2(args: tuple[str, ...], needle: str) -> None:
    run = run_cli("lab", *args)
    assert run.code == 2 and needle in run.stderr and run.stdout == "", run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@lab
def test_a_relay_session_over_a_jumbo_path_sends_large_datagrams_byte_exact() -> None:
    """Over a 9,000-byte MTU the relay client's uploads travel in datagrams far above
    1,500 B, and every request's digest proves the bytes arrived unchanged."""
    from tierwise.lab.experiments.via import ViaExperiment, run_via_requests

    req = RequestExperiment(
        size_bytes=3_000_000, modes=("cold",), runs=2, cc="cubic", rtt_s=0.05,
        rate_bytes_per_s=200e6 / 8,
    )  # fmt: skip
    result = run_via_requests(ViaExperiment(req, ("relay",), mtu_bytes=9000))
    row = result["summary"]["relay"]
    assert row["runs"] == 2 and row["failed"] == 0, row
    up = result["emulator"]["up"]
    assert up["bytes"] / up["packets"] > 4000, up  # 1,350-byte datagrams average < 1,400
    assert result["transports"]["relay"]["settings"] == "--max-datagram 8876"
    assert result["parameters"]["mtu_bytes"] == 9000


@lab
def test_an_ethernet_path_with_a_jumbo_maximum_loses_nothing_to_size() -> None:
    """A relay told it may send 8,880 B over a 1,500-byte path: its probes above the path
    are refused (EMSGSIZE: Don't Fragment) and the requests still arrive byte-exact."""
    from tierwise.lab.bench.path import EmulatedPath
    from tierwise.lab.bench.service import ModelService, ServiceConfig
    from tierwise.lab.experiments.tunnels import open_tunnel, upload_body
    from tierwise.lab.experiments.via import _request

    body = upload_body(2_000_000, 1)
    config = PathConfig.symmetric(rtt_s=0.05, rate_bytes_per_s=100e6 / 8)
    with EmulatedPath(config) as path:
        svc_config = ServiceConfig(0.0, 1000, None, "cubic", digest=True)
        with ModelService(path.server_ns, path.server_addr, svc_config) as svc:
            target = (path.server_addr, svc.port)
            with open_tunnel("relay", path, target, 0.05, 100e6 / 8, max_datagram=8880) as t:
                for _ in range(3):
                    _request(path, t, body, None)  # raises on a wrong digest
                t.check_alive()
                logs = [Path(log).read_text() for log in t.logs.values()]
    assert not any("Traceback" in log or "ERROR" in log for log in logs), logs
    assert path.stats is not None and path.stats["up"].packets > 1000
