"""Single-factor runs, the loss-throughput table and request timelines (§12.3.3, §12.3.5).

Parsing, the order of levels, the model columns and the plots run everywhere; the
experiments need root, ``/dev/net/tun`` and ``ip`` (``@lab``, see conftest.py).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.conftest import run_cli
from tests.lab.conftest import lab, left_behind
from tierwise.errors import ScenarioError
from tierwise.lab.experiments.factors import alternation, median_sample, parse_factor, resolve_mode
from tierwise.lab.experiments.request import RequestExperiment
from tierwise.lab.experiments.throughput import ThroughputExperiment, model_columns
from tierwise.lab.views.timeline import save_timeline

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# --- everywhere: factors ---------------------------------------------------------------


def test_initcwnd_levels_parse_to_segment_counts() -> None:
    """`initcwnd=10,40,300` → three integer levels, labels as typed."""
    factor = parse_factor("initcwnd=10,40,300")
    assert factor.name == "initcwnd"
    assert factor.levels == (10, 40, 300)
    assert factor.labels == ("10", "40", "300")


def test_cc_and_idle_levels_parse() -> None:
    """cc levels stay names; idle levels become seconds."""
    assert parse_factor("cc=cubic, bbr").levels == ("cubic", "bbr")
    idle = parse_factor("idle=0s,3s,500ms")
    assert idle.levels == pytest.approx((0.0, 3.0, 0.5))
    assert idle.labels == ("0s", "3s", "500ms")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("rwnd=10,20", "unknown factor 'rwnd'"),
        ("initcwnd", "NAME=LEVEL"),
        ("initcwnd=10", "at least two"),
        ("initcwnd=10,ten", "segment counts"),
        ("initcwnd=0,10", "segment counts"),
        ("initcwnd=10,10", "repeated"),
        ("cc=cubic,vegas", "unknown congestion control 'vegas'"),
        ("idle=0s,3", "not a time"),
        ("idle=0s,-3s", "idle"),
        ("idle=0s,2h", "idle levels must lie"),
    ],
)
def test_bad_factors_are_scenario_errors(text: str, needle: str) -> None:
    with pytest.raises(ScenarioError, match="--factor") as info:
        parse_factor(text)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "args",
    [
        ["--factor", "rwnd=10,20"],
        ["--factor", "initcwnd=10,abc"],
        ["--factor", "cc=cubic,vegas"],
        ["--factor", "idle=0s,soon"],
        ["--factor", "idle=0s,3s", "--modes", "cold"],
        ["--factor", "initcwnd=10,300", "--modes", "cold,warm"],
        ["--factor", "cc=cubic,bbr", "--cc", "reno"],
    ],
)
def test_bad_factor_options_exit_2_with_one_line(args: list[str]) -> None:
    """Checked before anything needs root: one line on stderr, exit 2, nothing on stdout."""
    run = run_cli("lab", "request", *args)
    assert run.code == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "--factor" in run.stderr or "--modes" in run.stderr or "--cc" in run.stderr
    assert run.stdout == ""


def test_modes_default_per_factor() -> None:
    assert resolve_mode(parse_factor("initcwnd=10,300"), None) == "cold"
    assert resolve_mode(parse_factor("cc=cubic,bbr"), None) == "cold"
    assert resolve_mode(parse_factor("idle=0s,3s"), None) == "warm"
    assert resolve_mode(parse_factor("cc=cubic,bbr"), ("warm",)) == "warm"


def test_levels_are_rotated_run_by_run() -> None:
    """A Latin square: every run has each level once, every position holds each level equally."""
    order = alternation(3, 6)
    assert order[:3] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    assert order[3:] == order[:3]
    for run in order:
        assert sorted(run) == [0, 1, 2]
    for position in range(3):
        column = [run[position] for run in order]
        assert sorted(column) == [0, 0, 1, 1, 2, 2]
    assert alternation(2, 4) == [[0, 1], [1, 0], [0, 1], [1, 0]]


def test_median_sample_is_the_middle_one() -> None:
    samples = [{"time_s": t, "run": i} for i, t in enumerate([0.9, 0.3, 0.5, 0.7])]
    assert median_sample(samples)["time_s"] == 0.5  # lower middle of an even count
    assert median_sample(samples[:3])["time_s"] == 0.5


# --- everywhere: the throughput table's model columns ------------------------------------


def test_model_columns_for_the_chapter_path() -> None:
    """200 ms, 100 Mbit/s, MSS 1,448 B: Mathis and (1 − p)·B as §12.3.3 computes them."""
    at_14 = model_columns(0.14, 0.2, 12.5e6)
    assert at_14["mathis_c1_bytes_per_s"] * 8e-6 == pytest.approx(0.155, abs=0.001)
    assert at_14["mathis_c131_bytes_per_s"] == pytest.approx(1.31 * 1448 / 0.2 / 0.14**0.5)
    assert at_14["ideal_bytes_per_s"] == pytest.approx(0.86 * 12.5e6)
    at_1 = model_columns(0.01, 0.2, 12.5e6)
    assert at_1["mathis_c1_bytes_per_s"] == pytest.approx(1448 / 0.2 / 0.1)
    clean = model_columns(0.0, 0.2, 12.5e6)
    assert clean["mathis_c1_bytes_per_s"] is None  # the bound says nothing at p = 0
    assert clean["ideal_bytes_per_s"] == pytest.approx(12.5e6)
    assert clean["payload_ceiling_bytes_per_s"] == pytest.approx(12.5e6 * 1448 / 1500)


@pytest.mark.parametrize(
    "args",
    [
        ["--loss", "0,1.5"],
        ["--loss", "0,lots"],
        ["--cc", "reno,vegas"],
        ["--duration", "5"],
        ["--duration", "0s"],
    ],
)
def test_bad_throughput_options_exit_2_with_one_line(args: list[str]) -> None:
    run = run_cli("lab", "throughput", *args)
    assert run.code == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stdout == ""


# --- everywhere: timelines -------------------------------------------------------------

SYNTHETIC = {
    "mode": "cold",
    "run": 3,
    "time_s": 1.248,
    "events_s": {
        "connect_start": 10.0,
        "connect_end": 10.2005,
        "first_sent": 10.2006,
        "last_sent": 10.215,
        "first_response": 11.2,
        "last_response": 11.248,
    },
}


def test_timeline_writes_a_valid_png_and_svg(tmp_path) -> None:
    paths = save_timeline(SYNTHETIC, tmp_path / "plots", "timeline-cold", rtt_s=0.2)
    png, svg = paths
    assert png.suffix == ".png" and svg.suffix == ".svg"
    assert png.read_bytes()[:8] == PNG_MAGIC
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    text = svg.read_text()
    assert "TCP handshake" in text and "last response byte" in text


def test_timeline_of_a_kept_connection_has_no_handshake_lane(tmp_path) -> None:
    warm = {
        "mode": "warm-tuned",
        "run": 0,
        "time_s": 0.26,
        "events_s": {
            "first_sent": 5.0,
            "last_sent": 5.03,
            "first_response": 5.259,
            "last_response": 5.26,
        },
    }
    _, svg = save_timeline(warm, tmp_path, "w", rtt_s=0.2)
    assert "TCP handshake" not in svg.read_text()


# --- root: real kernel TCP -------------------------------------------------------------


@lab
def test_initcwnd_300_saves_at_least_two_rtts_on_a_cold_request() -> None:
    """200 ms, 100 Mbit/s, 354,640 B cold: IW 10 needs 5 rounds, IW 300 at most 2 (SYN window)."""
    from tierwise.lab.experiments.factors import run_factor

    exp = RequestExperiment(runs=3, cc="cubic", modes=("cold",))
    factor = parse_factor("initcwnd=10,300")
    result = run_factor(exp, factor, "cold")
    s = result["summary"]
    assert s["10"]["median_s"] - s["300"]["median_s"] >= 2 * exp.rtt_s
    # the SYN-ACK's unscaled 65,535 B cap the first flight: one RTT more than IW alone says
    assert s["300"]["syn_window_capped"]
    for level in ("10", "300"):  # no faster than the rounds allow, no round more (load
        # only adds time; the distance to the closed form is benchmarks' and validation.md's)
        closed_s = s[level]["closed_form_s"]
        assert 0.95 * closed_s <= s[level]["median_s"] < closed_s + exp.rtt_s, s[level]
    assert result["order"] == [["10", "300"], ["300", "10"], ["10", "300"]]
    assert [x["level"] for x in result["samples"][:4]] == ["10", "300", "300", "10"]
    assert result["server_cc_seen"] == ["cubic"]
    assert left_behind().empty


@lab
def test_reno_at_one_percent_loss_is_below_the_link_and_near_mathis() -> None:
    """Sanity: 1 % download loss, reno, 3 s: below the link rate, above a tenth of Mathis."""
    from tierwise.lab.experiments.throughput import run_throughput

    exp = ThroughputExperiment(losses=(0.01,), ccs=("reno",), duration_s=3.0)
    result = run_throughput(exp)
    (row,) = result["rows"]
    assert row["cc_seen"] == "reno"
    assert exp.duration_s <= row["duration_s"] < exp.duration_s + 5.0  # bounded in time
    assert row["goodput_bytes_per_s"] < exp.rate_bytes_per_s
    assert row["goodput_bytes_per_s"] > 0.1 * row["mathis_c1_bytes_per_s"]
    assert result["emulator"]["0.01"]["down"]["lost"] > 0
    assert result["emulator"]["0.01"]["up"]["lost"] == 0  # loss on the download only
    assert left_behind().empty


def test_idle_is_counted_from_the_last_segment_on_the_wire() -> None:
    """The upload's last segment left ~R + T_proc before the reply's first byte arrived."""
    from tierwise.lab.experiments.factors import _idle_on_the_wire

    exp = RequestExperiment()  # R = 0.2 s, T_proc = 0.03 s
    previous = {"first_sent": 0.0, "last_sent": 0.01, "first_response": 1.2, "last_response": 1.25}
    now = {"first_sent": 1.26, "last_sent": 1.27, "first_response": 1.5, "last_response": 1.52}
    assert _idle_on_the_wire(previous, now, exp) == pytest.approx(1.26 - (1.2 - 0.23))
    assert _idle_on_the_wire(None, now, exp) is None
    assert _idle_on_the_wire(previous, {**now, "connect_start": 1.0}, exp) is None
