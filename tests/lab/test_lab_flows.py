"""`lab flows`: competing kernel TCP flows on one emulated bottleneck.

The share arithmetic, the options and their errors run everywhere; the kernel runs
need root, ``/dev/net/tun`` and ``ip`` (``@lab``, see conftest.py).
"""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.lab.conftest import lab
from tierwise.errors import LabError
from tierwise.lab.experiments.flows import FlowsExperiment, jain_index, window_shares

# --- everywhere: shares, Jain, the experiment's checks -----------------------------------


def test_window_shares_are_each_flows_part_of_the_bytes_in_the_window() -> None:
    """Cumulative counts 0..3 s: flow 1 takes 3 of 4 bytes in 1–3 s, nothing in 0–1 s."""
    times = [0.0, 1.0, 2.0, 3.0]
    delivered = [[0, 10, 10, 11], [0, 0, 2, 3]]
    got = window_shares(times, delivered, [(0.0, 1.0), (1.0, 3.0), (0.0, 3.0)])
    assert got == [
        pytest.approx([1.0, 0.0]),
        pytest.approx([0.25, 0.75]),
        pytest.approx([11 / 14, 3 / 14]),
    ]


def test_window_shares_read_the_first_sample_at_or_after_each_end() -> None:
    """A window's ends fall on the next sample; past the last, the last one counts."""
    times = [0.0, 0.1, 0.2, 0.30000000000000004]
    delivered = [[0, 1, 2, 3], [0, 0, 0, 9]]
    assert window_shares(times, delivered, [(0.15, 0.3)]) == [pytest.approx([0.1, 0.9])]
    assert window_shares(times, delivered, [(0.0, 5.0)]) == [pytest.approx([0.25, 0.75])]
    assert window_shares(times, [[0, 0, 0, 0], [0, 0, 0, 0]], [(0.0, 0.3)]) == [[0.0, 0.0]]


def test_jain_index_is_one_for_equal_shares_and_one_over_n_for_one_taker() -> None:
    """(Σx)² / (n·Σx²)."""
    assert jain_index([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain_index([9.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain_index([3.0, 1.0]) == pytest.approx(16 / 20)


def test_the_queue_in_bytes_is_packets_times_the_wire_size() -> None:
    """615 packets of 1,222 B: the emulator's byte queue, both directions, half the RTT each."""
    exp = FlowsExperiment(queue_packets=615)
    cfg = exp.path_config()
    assert exp.queue_bytes == 615 * 1222
    assert cfg.up.queue_bytes == cfg.down.queue_bytes == 751_530
    assert cfg.up.delay_s == cfg.down.delay_s == pytest.approx(0.05)
    assert cfg.up.rate_bytes_per_s == pytest.approx(2.5e6)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"ccs": ("cubic", "vegas"), "starts_s": (0, 0)}, "unknown --cc 'vegas'"),
        ({"ccs": ("cubic", "bbr"), "starts_s": (0,)}, "1 offsets for 2 flows"),
        ({"starts_s": (0.0, 70.0)}, "start offset"),
        ({"duration_s": 601.0}, "duration"),
        ({"windows": ((30.0, 90.0),)}, "window 30–90 s"),
        ({"mss_bytes": 1400, "packet_bytes": 1222}, "cannot hold"),
    ],
)
def test_a_bad_experiment_is_refused_with_what_and_why(kwargs: dict, says: str) -> None:
    with pytest.raises(LabError, match=says):
        FlowsExperiment(**kwargs)


@pytest.mark.parametrize(
    "args",
    [
        ["--cc", "cubic,vegas"],
        ["--cc", "cubic,bbr", "--start", "0s"],
        ["--duration", "0s"],
        ["--duration", "20min"],
        ["--windows", "0-x"],
        ["--windows", "0-120", "--duration", "60s"],
        ["--rate", "fast"],
        ["--queue-packets", "0"],
    ],
)
def test_bad_flows_options_exit_2_with_one_line(args: list[str]) -> None:
    run = run_cli("lab", "flows", *args)
    assert run.code == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stdout == ""


def test_the_table_shows_each_flows_goodput_share_and_window_shares() -> None:
    """render_flows on a record: one row per flow with its Mbit/s, share and window shares."""
    from rich.console import Console

    from tierwise.lab.cli.flows import render_flows

    record = {
        "parameters": {
            "duration_s": 60.0,
            "rate_bytes_per_s": 2.5e6,
            "rtt_s": 0.1,
            "queue_packets": 615,
            "packet_bytes": 1222,
            "mss_bytes": 1168,
        },
        "kernel": "6.x",
        "flows": [
            {
                "cc": "cubic",
                "start_s": 0.0,
                "goodput_bytes_per_s": 1.5e6,
                "share": 0.625,
                "retransmitted_segments": 12,
            },
            {
                "cc": "bbr",
                "start_s": 5.0,
                "goodput_bytes_per_s": 0.9e6,
                "share": 0.375,
                "retransmitted_segments": 3,
            },
        ],
        "windows": [{"from_s": 0.0, "to_s": 30.0, "shares": [0.7, 0.3]}],
        "jain_index": 0.941,
        "emulator": {"up": {"packets": 120_000, "dropped": 321}},
    }
    console = Console(width=200, record=True)
    render_flows(console, record)
    text = console.export_text()
    assert "12.00" in text and "0.625" in text and "0.300" in text and "5 s" in text
    assert "Jain's index 0.941" in text and "321 tail drops" in text


# --- root: the kernel against tierwise.sim ------------------------------------------------

MBIT = 1e6 / 8


def _ours_bbr_share(queue: int, seconds: float, windows: list[tuple[float, float]]) -> list[float]:
    """BBR's share per window in tierwise.sim: cubic-hystart against bbr-linux, 1,168 B
    segments with 54 B of headers (the 1,222 B packets the kernel's byte queue counts)."""
    from tierwise.sim import PathSpec, TcpSpec
    from tierwise.sim.flows import FlowSpec, run_flows

    tcp = TcpSpec(mss=1168, header=54, ack_bytes=54, initial_window=10)
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1, queue_packets=queue)
    flows = [FlowSpec(cc, 0.0, duration_s=seconds) for cc in ("cubic-hystart", "bbr-linux")]
    s = run_flows(path, tcp, flows, series=True)["series"]
    return [w[1] for w in window_shares(s["time_s"], s["delivered_bytes"], windows)]


@lab
def test_kernel_bbr_takes_a_one_bdp_queue_from_cubic_as_ours_does() -> None:
    """1-BDP queue (205 × 1,222 B), 20 Mbit/s, 100 ms, 0–10 s: the kernel's BBR takes the
    larger part of the link, as tierwise.sim's does (ns-3 3.37's collapses to a few per
    cent here). Idle runs gave the kernel 0.651–0.719 against ours 0.663; the test asks
    only for the side both are on (above 0.55), because a pure-Python emulator sharing two
    cores with a loaded CI run moves the kernel's share by several points — the run-by-run
    agreement is measured by benchmarks/flows_kernel.py and recorded in docs/validation.md."""
    from tierwise.lab.experiments.flows import run_kernel_flows

    windows = [(0.0, 10.0)]
    exp = FlowsExperiment(
        ccs=("cubic", "bbr"),
        starts_s=(0.0, 0.0),
        duration_s=10.0,
        queue_packets=205,
        windows=tuple(windows),
    )
    result = run_kernel_flows(exp)
    kernel = result["windows"][0]["shares"][1]
    ours = _ours_bbr_share(205, 10.0, windows)[0]
    assert result["emulator"]["up"]["dropped"] > 0  # the queue overflowed: a real contest
    assert kernel > 0.55 and ours > 0.55, (kernel, ours)
    total = sum(f["goodput_bytes_per_s"] for f in result["flows"])
    assert total > 0.9 * 20 * MBIT * 1168 / 1220  # the two together fill the link
