"""Every sim is bounded: run count, packet budget and --trace are checked before any work."""

from __future__ import annotations

import time

import pytest

from tierwise.errors import SimulationError
from tierwise.sim.run import MAX_PACKETS, check_budget, estimate_packets
from tierwise.sim.scenario import RunSection, load_sim, sim_example

SIM = """
[path]
uplink = "100 Mbit/s"
downlink = "100 Mbit/s"
rtt = "20 ms"
[tcp]
mss = "1000 B"
"""
ROUNDS = '[workload]\nkind = "rounds"\nrounds = 3\nupload = "10 kB"\ndownload = "2 kB"\n'


def _file(tmp_path, workload: str, run: str = "") -> str:
    f = tmp_path / "sim.toml"
    f.write_text(SIM + workload + run)
    return str(f)


def test_runs_flag_has_the_files_cap(cli):
    """--runs 1000000 is refused like run.runs = 1000000 in the file."""
    cap = next(m.le for m in RunSection.model_fields["runs"].metadata if hasattr(m, "le"))
    r = cli("sim", "--runs", str(cap + 1))
    assert r.code == 2 and "--runs" in r.stderr and len(r.stderr.splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_estimate_counts_every_packet(tmp_path):
    """Packets of a run: segments of each transfer, times rounds."""
    sf = load_sim(_file(tmp_path, ROUNDS))
    assert estimate_packets(sf) == 3 * (10 + 2 + 1)


def test_over_budget_is_refused_up_front(cli, tmp_path):
    """A 100 GB sim is refused at once with the estimate and the flag that raises the budget."""
    f = _file(tmp_path, '[workload]\nupload = "100 GB"\n')
    start = time.perf_counter()
    r = cli("sim", f)
    assert time.perf_counter() - start < 30  # it did not simulate (that takes an hour)
    assert r.code == 2 and len(r.stderr.splitlines()) == 1
    assert "100,000,001 packets" in r.stderr and "--max-packets 100000001" in r.stderr


def test_budget_counts_all_runs(tmp_path):
    """The budget is packets × runs, and a raised budget lets the same sim through."""
    sf = load_sim(_file(tmp_path, ROUNDS, "[run]\nruns = 10\n"))
    with pytest.raises(SimulationError, match="390 packets"):
        check_budget(sf, 389)
    assert check_budget(sf, 390) == 390 and 390 < MAX_PACKETS


def test_raised_budget_runs(cli, tmp_path):
    """--max-packets lets a sim over the default budget run."""
    f = _file(tmp_path, ROUNDS, "[run]\nruns = 4\n")
    assert cli("sim", f, "--max-packets", "155").code == 2
    assert cli("sim", f, "--max-packets", "156", "--json").json()["runs"] == 4


def test_trace_of_a_non_request_fails_before_simulating(cli, tmp_path):
    """--trace on a rounds workload: one line, exit 2, no file written, no traceback."""
    f = _file(tmp_path, ROUNDS)
    out = tmp_path / "t.csv"
    r = cli("sim", f, "--trace", str(out))
    assert r.code == 2 and "'rounds'" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()
    assert check_budget(load_sim(sim_example("sim-photo")), trace=True) > 0
    with pytest.raises(SimulationError, match="request"):
        check_budget(load_sim(f), trace=True)


def test_trace_into_a_missing_directory_fails_up_front(cli, tmp_path):
    """--trace into a directory that does not exist is refused before simulating."""
    r = cli("sim", "--trace", str(tmp_path / "no" / "t.csv"))
    assert r.code == 2 and "no such directory" in r.stderr
