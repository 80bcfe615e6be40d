"""[[flow]] tables in sim files, relay flows next to TCP ones, and their figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tierwise.sim.run import estimate_packets, run_sim_file
from tierwise.sim.scenario import SimFile, load_sim, sim_example

PATH = {"uplink": "20 Mbit/s", "downlink": "20 Mbit/s", "rtt": "100 ms", "queue_packets": 205}
TCP = {"mss": "1168 B", "header": "54 B", "ack": "54 B"}


def _sim(flows: list[dict], **run) -> SimFile:
    return SimFile.model_validate({"path": PATH, "tcp": TCP, "flow": flows, "run": run})


def test_bundled_flows_example_loads_with_its_flows():
    """The bundled sim-flows file has two CUBIC flows and a BBR flow joining at 5 s."""
    sf = load_sim(sim_example("sim-flows"))
    assert [f.cc for f in sf.flow] == ["cubic", "cubic", "bbr"]
    assert sf.workload is None and sf.flow[2].start == 5.0


def test_a_relay_flow_and_a_tcp_flow_both_deliver_their_bytes():
    """A sized relay flow and a sized CUBIC flow over one bottleneck both finish, in full."""
    flows = [{"cc": "cubic", "size": "1 MB"}, {"transport": "relay", "size": "1 MB"}]
    out = run_sim_file(_sim(flows, seed=3))["first_run"]
    tcp, relay = out["flows"]
    assert tcp["transport"] == "tcp" and relay["transport"] == "relay"
    for f in (tcp, relay):
        assert f["delivered_bytes"] == 1_000_000
        assert f["completion_s"] > 0.1  # at least a round trip: nothing is free
        assert 0 <= f["queue_p50_s"] <= f["queue_p99_s"] <= 205 * 1222 / 2.5e6 + 1e-9
    assert tcp["share"] + relay["share"] == pytest.approx(1.0)


def test_flows_are_deterministic_per_seed_and_the_seed_matters():
    """The same seed gives identical per-flow rows; another seed over a lossy path differs."""
    flows = [{"cc": "cubic", "size": "600 kB"}, {"transport": "relay", "size": "600 kB"}]
    lossy = {**PATH, "loss_up": 0.01}

    def rows(seed: int) -> list[dict]:
        sf = SimFile.model_validate(
            {"path": lossy, "tcp": TCP, "flow": flows, "run": {"seed": seed}}
        )
        return run_sim_file(sf)["first_run"]["flows"]

    first = rows(5)
    assert rows(5) == first
    assert rows(6) != first


def test_a_relay_request_delivers_upload_and_reply_deterministically():
    """transport = "relay" on a request: the reply arrives after upload and processing."""
    sf = SimFile.model_validate(
        {
            "path": {**PATH, "loss_up": 0.02},
            "tcp": TCP,
            "workload": {
                "upload": "500 kB",
                "download": "200 kB",
                "processing": "0.3 s",
                "transport": "relay",
            },
            "run": {"seed": 2},
        }
    )
    one, two = run_sim_file(sf), run_sim_file(sf)
    first = one["first_run"]
    assert one["transport"] == "relay" and first == two["first_run"]
    assert first["time_s"] >= first["upload_done_s"] + 0.3 + 0.1 - 1e-9
    assert first["wire_bytes_up"] > 500_000 and first["wire_bytes_down"] > 200_000


def test_the_packet_estimate_bounds_what_duration_flows_send():
    """Duration flows never move more data packets than the budget check estimated."""
    sf = _sim(
        [{"cc": "cubic", "duration": "3 s"}, {"cc": "bbr", "start": "1 s", "duration": "2 s"}]
    )
    out = run_sim_file(sf)["first_run"]
    assert 0.8 * estimate_packets(sf) < out["data_packets"] <= estimate_packets(sf)


def test_sim_cli_reports_flows_as_json_and_text_and_plots(tmp_path: Path):
    """`tierwise sim FILE --json --plot DIR` gives per-flow rows, Jain's index and two figures."""
    text = sim_example("sim-flows").read_text("utf-8").replace('"20 s"', '"4 s"')
    text = text.replace('"15 s"', '"2 s"').replace('"5 s"', '"2 s"')
    path = tmp_path / "flows.toml"
    path.write_text(text, encoding="utf-8")
    run = run_cli("sim", str(path), "--json", "--plot", str(tmp_path / "figs"))
    assert run.code == 0, run.stderr
    result = run.json()
    rows = result["first_run"]["flows"]
    assert [r["cc"] for r in rows] == ["cubic", "cubic", "bbr"]
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert 1 / 3 <= result["jain_index"] <= 1.0
    assert "series" not in result["first_run"]
    for suffix in ("png", "svg"):
        assert (tmp_path / "figs" / f"flows.{suffix}").stat().st_size > 1000
    text_run = run_cli("sim", str(path))
    assert text_run.code == 0 and "Jain's fairness index" in text_run.stdout
