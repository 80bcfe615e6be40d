"""`tierwise sweep` on the command line: files written, metadata, bad input."""

from __future__ import annotations

import hashlib
import json

import pytest

from tierwise.scenario.loader import bundled_example

pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")

DEPLOYMENT = str(bundled_example("deployment"))


def test_sweep_writes_parquet_and_csv_with_metadata(cli, tmp_path):
    """One row per point and site, in both files, with version, hash and command."""
    out, csv, page = tmp_path / "s.parquet", tmp_path / "s.csv", tmp_path / "s.html"
    r = cli(
        "sweep", DEPLOYMENT, "--vary", "site.cloud.uplink=1..100 Mbit/s:log:6",
        "--vary", "task.rounds=5,10", "--out", str(out), "--csv", str(csv), "--html", str(page),
    )  # fmt: skip
    assert r.code == 0, r.stderr
    assert "sweep of 12 points" in r.stdout
    table = pq.read_table(out)
    assert table.num_rows == 36
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    digest = hashlib.sha256(open(DEPLOYMENT, "rb").read()).hexdigest()
    assert meta["scenario_sha256"] == digest
    assert "--vary task.rounds=5,10" in meta["command"]
    assert "'site.cloud.uplink=1..100 Mbit/s:log:6'" in meta["command"]  # quoted as for a shell
    assert [a["key"] for a in json.loads(meta["axes"])] == ["site.cloud.uplink", "task.rounds"]
    head = [line for line in csv.read_text().splitlines() if line.startswith("# ")]
    assert f"# scenario_sha256: {digest}" in head
    assert any(line.startswith("# tierwise_version: ") for line in head)
    assert any(line.startswith("# command: tierwise sweep ") for line in head)
    rows = pd.read_csv(csv, comment="#")
    assert len(rows) == 36 and list(rows.columns) == table.column_names
    assert sum(table.column("chosen").to_pylist()) <= 12
    assert 'id="choice"' in page.read_text() and "Plotly" in page.read_text()


def test_plan_html_writes_a_page(cli, tmp_path):
    """`tierwise plan --html FILE` writes the one-scenario page and still prints the plan."""
    page = tmp_path / "plan.html"
    r = cli("plan", "--html", str(page))
    assert r.code == 0, r.stderr
    assert "choice: cloud" in r.stdout
    assert 'id="breakdown"' in page.read_text()


@pytest.mark.parametrize(
    ("vary", "needle"),
    [
        ("site.cloud.uplink=fast", "site.cloud.uplink"),
        ("task.roundz=1,2", "unknown key 'roundz'"),
        ("task.rounds", "key.path=SPEC"),
    ],
)
def test_bad_vary_is_one_line_and_exit_2(cli, tmp_path, vary, needle):
    """A bad --vary is one line on stderr naming the key, exit 2, and no file written."""
    out = tmp_path / "s.parquet"
    r = cli("sweep", DEPLOYMENT, "--vary", vary, "--out", str(out))
    assert r.code == 2
    assert needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr
    assert not out.exists()


def test_progress_bar_on_a_terminal(tmp_path):
    """A terminal gets a rich progress bar on stderr; a pipe gets nothing but the summary."""
    import subprocess
    import sys

    args = [sys.executable, "-c", "from tierwise.cli import main; main()", "sweep", DEPLOYMENT]
    args += ["--vary", "site.cloud.uplink=1..100 Mbit/s:log:200"]
    args += ["--vary", "task.rounds=1..250:250"]
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "120"}
    tty = subprocess.run(args, capture_output=True, text=True, env={**env, "FORCE_COLOR": "1"})
    assert tty.returncode == 0 and "sweep points" in tty.stderr and "/50000" in tty.stderr
    pipe = subprocess.run(args, capture_output=True, text=True, env=env)
    assert pipe.returncode == 0 and pipe.stderr == "" and "sweep of 50,000 points" in pipe.stdout


def test_map_flag_draws_the_chosen_axes(cli, tmp_path):
    """--map KEY,KEY puts those two keys on the page's choice map, with the planner's lines."""
    page = tmp_path / "m.html"
    r = cli(
        "sweep", DEPLOYMENT, "--vary", "task.rounds=5,20,60",
        "--vary", "site.cloud.rtt=20 ms,200 ms", "--vary", "site.cloud.uplink=1..100 Mbit/s:log:12",
        "--html", str(page), "--map", "site.cloud.rtt,site.cloud.uplink",
    )  # fmt: skip
    assert r.code == 0, r.stderr
    text = page.read_text()
    data = json.loads(
        text.split('<script id="data" type="application/json">')[1].split("</script>")[0]
    )
    assert [a["key"] for a in data["axes"]][:2] == ["site.cloud.rtt", "site.cloud.uplink"]
    assert data["lines"]["axis"] == "y" and data["lines"]["crossings"]


def test_runs_without_a_simulated_site_says_it_has_no_effect(cli):
    """--runs on a scenario with no simulated site is not silently ignored: the summary says so."""
    r = cli("sweep", DEPLOYMENT, "--vary", "task.rounds=5,10", "--runs", "50")
    assert r.code == 0, r.stderr
    assert "--runs has no effect" in r.stdout
