"""Every table a person reads keeps every number and name whole, at any width.

Each command's output at 200 columns is the reference: every word in it (a number with
its digits, a site's name, a header) must stand whole in the same output at 60, 80 and
120 columns, where a table that does not fit is drawn leaner or as one block per row.
"""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from tierwise.cli import app
from tierwise.scenario.loader import bundled_example

WIDTHS = (60, 80, 120)
BOX = re.compile(r"[─-╿]+")  # box-drawing characters: borders, not words
EXAMPLES = ["deployment", "photo-retouch", "photo-chunks", "screenshot-agent", "speech-request"]
COMMANDS = [
    *(["plan", "--example", name] for name in [*EXAMPLES, "voice-stream"]),
    ["plan", "--example", "deployment", "--set", "variability.trials=200"],
    ["catalog"],
    ["calc", "loop"],
    ["calc", "request"],
]


def words(text: str) -> set[str]:
    """The words of ``text`` with borders taken out."""
    return {w for w in BOX.sub(" ", text).split() if any(ch.isalnum() for ch in w)}


def output(args: list[str], columns: int) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_reference_sees_a_cut_word() -> None:
    """The check can fail: a cut word (rich's "workstati…") is not the word."""
    assert not {"workstation", "20.4"} <= words("│ workstati… │ 20.4… │")


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_no_number_or_name_is_cut(args: list[str]) -> None:
    """At 60, 80 and 120 columns every word of the wide output is there, whole."""
    if args[:2] == ["plan", "--example"]:
        assert bundled_example(args[2]).exists()
    wide = words(output(args, 200))
    assert wide
    for columns in WIDTHS:
        text = output(args, columns)
        assert "…" not in text, f"{columns} columns:\n{text}"
        missing = wide - words(text)
        assert not missing, f"{columns} columns lost {sorted(missing)[:12]}:\n{text}"


GATEWAY_STATS = {
    "role": "gateway",
    "sessions_open": 2,
    "sessions_listed": 2,
    "uptime_s": 3600.5,
    "totals": {"datagrams_dropped_auth": 12, "hello_refused_max_sessions": 0},
    "sessions": [
        {
            "id": f"{i:016x}",
            "peer": "[2001:db8::1234:5678]:40123" if i else "203.0.113.77:51234",
            "age_s": 1234.0,
            "srtt_s": 0.2031,
            "bandwidth_bytes_per_s": 41.6e6,
            "loss_in": 0.143,
            "loss_out": 0.036,
            "fec_overhead": 0.241,
            "datagram_bytes": 1350,
            "streams": 17,
            "bytes_received": 354_640_000,
            "bytes_sent": 1_000_000_000,
        }
        for i in range(2)
    ],
}
DECISIONS = [
    {
        "ts": 1_800_000_000 + i,
        "predicted": {s: {"time_s": 0.1234 * (i + 1) * k} for k, s in enumerate(SITES, 1)},
        "chosen": SITES[i % 3],
        "actual_s": 0.4321 + i,
        "stages": {"first_token_s": 0.0987},
        "outcome": "ok",
    }
    for i in range(3)
    for SITES in [("device-phone", "edge-workstation", "cloud-eu-west")]
]


def _relay_stats(columns: int, capsys: pytest.CaptureFixture[str]) -> str:
    from tierwise.relay.view import print_stats

    print_stats(GATEWAY_STATS, width=columns)
    return capsys.readouterr().out


def _route_decisions(columns: int, capsys: pytest.CaptureFixture[str]) -> str:
    from tierwise.route.view import render_decisions, render_replay

    render_decisions(DECISIONS)
    render_replay(
        {
            "requests": 40,
            "strategies": {
                "predictive": {"total_s": 123.456, "median_s": 0.8765, "counterfactual": 3},
                "lowest-latency": {"total_s": 287.5, "median_s": 2.345, "counterfactual": 11},
            },
        }
    )
    return capsys.readouterr().out


VIEWS = {"relay stats": _relay_stats, "route decisions": _route_decisions}
KNOWN = {"relay stats": "[2001:db8::1234:5678]:40123", "route decisions": "cloud-eu-west"}


@pytest.mark.parametrize("view", list(VIEWS))
def test_server_views_keep_every_word(
    view: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """relay stats and route decisions at 60, 80 and 120 columns: every word whole."""
    monkeypatch.setenv("COLUMNS", "200")
    wide = words(VIEWS[view](200, capsys))
    assert KNOWN[view] in wide
    for columns in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(columns))
        text = VIEWS[view](columns, capsys)
        assert "…" not in text, f"{columns} columns:\n{text}"
        missing = wide - words(text)
        assert not missing, f"{columns} columns lost {sorted(missing)[:12]}:\n{text}"
