"""Every workload kind runs from `tierwise sim` files with the reference's inputs."""

from __future__ import annotations

import pytest

PATH = """
[path]
uplink = "{up}"
downlink = "{down}"
rtt = "{rtt}"
{extra}
[tcp]
mss = "1448 B"
{tcp}
"""


def _file(
    tmp_path,
    workload: str,
    up="333 Mbit/s",
    down="333 Mbit/s",
    rtt="200 ms",
    extra="",
    tcp="",
    run="",
):
    f = tmp_path / "sim.toml"
    f.write_text(PATH.format(up=up, down=down, rtt=rtt, extra=extra, tcp=tcp) + workload + run)
    return str(f)


def test_fec_request(cli, tmp_path):
    """§12.3.3: 354,640 B as FEC symbols over 14 % loss completes in about 241 ms."""
    f = _file(
        tmp_path,
        '[workload]\nkind = "fec-request"\nupload = "354640 B"\nprocessing = "30 ms"\n',
        extra="loss_up = 0.14",
        run="[run]\nruns = 10\n",
    )
    data = cli("sim", f, "--json").json()
    assert data["p50_s"] == pytest.approx(0.2407, abs=0.002)
    assert data["first_run"]["payload_ok"]


def test_stream_playout(cli, tmp_path):
    """§12.1.2: first play at 78 ms; one 50 ms chunk stalls playback 5 ms."""
    f = _file(
        tmp_path,
        '[workload]\nkind = "stream"\nchunks = 6\nperiod = "20 ms"\n'
        'chunk_bytes = "960 B"\ncompute = "12 ms"\nbuffer = "40 ms"\n'
        'propagation_overrides = { "2" = "50 ms" }\n',
        up="10 Mbit/s",
        down="7.68 Mbit/s",
        rtt="10 ms",
        tcp='header = "0 B"',
    )
    first = cli("sim", f, "--json").json()["first_run"]
    assert first["first_play_s"] == pytest.approx(0.078)
    assert first["stall_s"] == pytest.approx(0.005)


def test_streams_priority_and_delivery(cli, tmp_path):
    """§12.3.4 shape: with priority the later, urgent stream finishes first."""
    writes = (
        '[[workload.writes]]\nstream = "image"\nbytes = "500 kB"\npriority = 1\n'
        '[[workload.writes]]\nstream = "audio"\nbytes = "100 kB"\nat = "20 ms"\n'
        "priority = 0\n"
    )
    common = dict(up="10 Mbit/s", down="10 Mbit/s", rtt="20 ms", tcp="initial_window = 400")
    fifo = cli(
        "sim",
        _file(tmp_path, '[workload]\nkind = "streams"\npolicy = "fifo"\n' + writes, **common),
        "--json",
    ).json()["first_run"]
    prio = cli(
        "sim",
        _file(tmp_path, '[workload]\nkind = "streams"\npolicy = "priority"\n' + writes, **common),
        "--json",
    ).json()["first_run"]
    assert fifo["sent_done_s"]["audio"] > fifo["sent_done_s"]["image"]
    assert prio["sent_done_s"]["audio"] < prio["sent_done_s"]["image"]


def test_rounds(cli, tmp_path):
    """§12.1.3: 0.8 MB rounds at 6.4 Mbit/s settle at 3.5 s once the window is open."""
    f = _file(
        tmp_path,
        '[workload]\nkind = "rounds"\nrounds = 3\nupload = "0.8 MB"\n'
        'client = "0.3 s"\nmodel = "2.0 s"\n',
        up="6.4 Mbit/s",
        tcp='header = "0 B"',
    )
    rounds = cli("sim", f, "--json").json()["first_run"]["round_s"]
    assert rounds[-1] == pytest.approx(3.5, abs=1e-6)
    assert rounds[0] > rounds[-1]  # the first round pays slow start


def test_wireless(cli, tmp_path):
    """§12.4.1: data and ACK exchanges share the air; airtime matches the closed form."""
    f = _file(
        tmp_path,
        '[workload]\nkind = "wireless"\nupload = "1 MB"\n',
        tcp='header = "60 B"\nack = "92 B"',
    )
    first = cli("sim", f, "--json").json()["first_run"]
    assert first["busy_s"] == pytest.approx(first["closed_form_airtime_s"], rel=1e-9)
