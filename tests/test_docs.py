"""The generated docs stay in step with the code."""

from __future__ import annotations

from pathlib import Path

from tierwise.calc import REGISTRY
from tierwise.calc.docs import render

ROOT = Path(__file__).resolve().parents[1]


def test_models_md_is_generated_from_the_registry():
    """docs/models.md equals `python -m tierwise.calc.docs` (regenerate it if not)."""
    assert (ROOT / "docs" / "models.md").read_text() == render(REGISTRY)


def test_every_model_has_a_formula_and_a_section():
    """Each calc entry documents its formula (docstring) and cites a section."""
    for name, entry in REGISTRY.items():
        assert entry.func.__doc__ and entry.func.__doc__.strip(), name
        assert "§" in entry.section or "exercise" in entry.section, name


def test_readme_quick_start_has_the_two_commands():
    """README's Quick start installs-and-plans, then installs test extras and runs pytest."""
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "pip install -e . && tierwise plan" in quick
    assert "pip install -e '.[test]' && pytest" in quick
    assert "pip install -e '.[test]' && pytest" in (ROOT / ".ci" / "run").read_text()


def test_scenario_md_is_generated_from_the_schema():
    """docs/scenario.md equals `python -m tierwise.report.scenario_docs` (regenerate it if not)."""
    from tierwise.report.scenario_docs import render as render_keys

    assert (ROOT / "docs" / "scenario.md").read_text(encoding="utf-8") == render_keys()


def test_scenario_md_documents_every_key():
    """Every key of the scenario, sim and catalog schemas has a row with a description."""
    text = (ROOT / "docs" / "scenario.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) > 150
    assert all(not line.endswith("|  |") for line in rows), [r for r in rows if r.endswith("|  |")]
    for key in ("`site[].uplink`", "`task.model.decode_tokens`", "`tcp.mss`", "`run.seed`"):
        assert any(line.startswith(f"| {key}") for line in rows), key
