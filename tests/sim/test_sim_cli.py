"""`tierwise sim` from the command line: results, traces, and one-line errors."""

from __future__ import annotations

import pytest

from tierwise.sim.scenario import sim_example

BASE = sim_example().read_text()


def test_bundled_sim_reproduces_the_reference(cli):
    """With no file, `tierwise sim --json` runs the §12.3.2 request: 14.36339008 s."""
    run = cli("sim", "--json")
    assert run.code == 0, run.stderr
    assert run.json()["time_s"] == pytest.approx(14.36339008, abs=1e-6)


def test_trace_csv(cli, tmp_path):
    """--trace writes one row per packet event with the documented columns."""
    out = tmp_path / "trace.csv"
    run = cli("sim", "--trace", str(out))
    assert run.code == 0, run.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "time_s,endpoint,event,seq,bytes,cwnd_bytes,in_flight_bytes"
    assert sum(1 for line in lines if ",send," in line) == 25_685 + 4_281


def test_runs_over_seeds(cli, tmp_path):
    """--runs simulates several seeds and reports p50 and p99."""
    f = tmp_path / "lossy.toml"
    f.write_text(
        BASE.replace('rtt = "100 ms"', 'rtt = "100 ms"\nloss_up = 0.01')
        .replace('upload = "30 MB"', 'upload = "1 MB"')
        .replace('download = "5 MB"', 'download = "10 kB"')
        .replace('cc = "slowstart"', 'cc = "newreno"')
    )
    run = cli("sim", str(f), "--runs", "5", "--json")
    assert run.code == 0, run.stderr
    data = run.json()
    assert data["runs"] == 5 and data["min_s"] <= data["p50_s"] <= data["max_s"]


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ('uplink = "20 Mbit/s"', 'uplink = "0 Mbit/s"', "path.uplink"),
        ('rtt = "100 ms"', 'rtt = "100 ms"\nloss_up = 1.0', "path.loss_up"),
        ("initial_window = 10", "initial_window = 0", "tcp.initial_window"),
        ("initial_window = 10", 'initial_window = 10\nsyn_window = "70000 B"', "tcp.syn_window"),
        ('cc = "slowstart"', 'cc = "vegas"', "tcp.cc"),
        ('mss = "1168 B"', 'mss = "1168 mB"', "tcp.mss"),
        ("[run]", "[run]\nbogus = 1", "run.bogus"),
        ('kind = "request"', 'kind = "request', "TOML syntax error"),
    ],
)
def test_bad_sim_file_exits_2(cli, tmp_path, old, new, where):
    """A malformed sim file or impossible parameter is one line and exit status 2."""
    f = tmp_path / "bad.toml"
    f.write_text(BASE.replace(old, new))
    run = cli("sim", str(f))
    assert run.code == 2
    assert where in run.stderr and str(f) in run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1


def test_gilbert_elliott_loss_and_delayed_acks(cli, tmp_path):
    """Bursty loss and ACK-every-2-or-10-ms policies run from a sim file, deterministically."""
    f = tmp_path / "ge.toml"
    f.write_text(
        BASE.replace(
            'rtt = "100 ms"',
            'rtt = "100 ms"\nloss_up = { p_gb = 0.01, p_bg = 0.25, loss_bad = 0.5 }',
        )
        .replace("initial_window = 10", 'initial_window = 10\nack_every = 2\nack_delay = "10 ms"')
        .replace('cc = "slowstart"', 'cc = "cubic"')
        .replace('upload = "30 MB"', 'upload = "2 MB"')
        .replace('download = "5 MB"', 'download = "10 kB"')
    )
    a, b = (cli("sim", str(f), "--json").json() for _ in range(2))
    up = a["first_run"]["upload"]
    assert up["link_lost"] > 0 and up["retransmissions"] >= up["link_lost"]
    assert up["acks"] < up["segments"]  # thinned feedback
    assert a["time_s"] == b["time_s"]
