"""The chapter's printed numbers, recomputed: the table is reproduce.cases.streams_paths."""

from __future__ import annotations

import pytest

from tierwise.reproduce.cases.streams_paths import ROWS, Row


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.section} {r.what}" for r in ROWS])
def test_reference_number(row: Row):
    """Recompute one printed number and compare within its printed rounding."""
    assert row.compute() == pytest.approx(row.expected, abs=row.tolerance), row.what
