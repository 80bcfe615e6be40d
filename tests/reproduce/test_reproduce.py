"""`tierwise reproduce`: the reference tables run outward, and the report built from them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tierwise.reproduce import UNREPRODUCIBLE, Case, all_cases, matches_section, run_cases
from tierwise.reproduce.run import TABLES, _run


def test_every_table_row_becomes_a_case() -> None:
    """The cases are exactly the reference tables' rows (plus the choice rows of §12.5)."""
    rows = 0
    for name in TABLES:
        module = importlib.import_module(f"tierwise.reproduce.cases.{name}")
        rows += len(getattr(module, "CASES", getattr(module, "ROWS", [])))
        rows += len(getattr(module, "CHOICES", []))
    assert len(all_cases()) == rows > 450


def test_reference_tests_import_the_package_tables() -> None:
    """Each tests/*/test_reference_*.py reads its rows from tierwise.reproduce.cases."""
    root = Path(__file__).parents[1]
    files = sorted(root.glob("*/test_reference_*.py"))
    assert len(files) == 9
    for f in files:
        assert "from tierwise.reproduce.cases." in f.read_text(), f.name


def test_agreement_rule_can_fail() -> None:
    """A wrong printed value, a missed bound or an error is a disagreement."""
    assert Case("§x", "q", 12.8, lambda: 12.84, 0.05).agrees(12.84)
    assert not Case("§x", "q", 12.8, lambda: 12.86, 0.05).agrees(12.86)
    assert not Case("§x", "q", 2.0, lambda: 1.9, op=">").agrees(1.9)
    assert Case("§x", "q", "cloud", lambda: "cloud").agrees("cloud")
    broken = _run(Case("§x", "q", 1.0, lambda: {}["k"], 0.1))
    assert not broken.agrees and "KeyError" in broken.error


def test_section_filter() -> None:
    """12.3 keeps §12.3 and §12.3.x but not §12.30; 12-10 keeps exercise 12-10 rows."""
    assert matches_section("§12.3.3", "12.3") and matches_section("§12.3", "§12.3")
    assert not matches_section("§12.30", "12.3") and not matches_section("§12.1.3", "12.3")
    assert matches_section("ex. 12-10(c)", "12-10") and not matches_section("12-1(a)", "12-10")


def test_section_12_5_2_agrees_including_the_calibration() -> None:
    """§12.5.2 reproduces in full, the measured 25.83 ms rows among them."""
    results = run_cases("12.5.2")
    assert results and all(r.agrees for r in results)
    assert any("25.83 ms" in r.case.quantity for r in results)


def test_unreproducible_have_reasons() -> None:
    """Every number listed as not reproducible says why."""
    assert all(u.reason and u.section.startswith("§") for u in UNREPRODUCIBLE)


def test_cli_json_and_html(tmp_path: Path) -> None:
    """--json reports every §12.3 case agreeing; --html writes a page with the figures."""
    page = tmp_path / "report.html"
    run = run_cli("reproduce", "--section", "12.3", "--json", "--html", str(page))
    assert run.code == 0, run.stderr
    data = run.json()
    assert data["summary"]["cases"] == data["summary"]["agree"] > 50
    assert any(u["section"] == "§12.3.5" for u in data["unreproducible"])
    text = page.read_text()
    assert "<table>" in text and "data:image/png;base64," in text


def test_cli_unknown_section() -> None:
    """A section with no numbers is one stderr line, exit 2."""
    run = run_cli("reproduce", "--section", "13.1")
    assert run.code == 2 and run.stdout == ""
    assert "13.1" in run.stderr and len(run.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_whole_chapter_agrees() -> None:
    """Every case of the chapter agrees (the reference tests, run as a reader would)."""
    bad = [r for r in run_cases() if not r.agrees]
    assert not bad, [(r.case.section, r.case.quantity, r.computed) for r in bad]
