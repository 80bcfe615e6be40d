"""The chapter's printed numbers, recomputed: the table is reproduce.cases.device."""

from __future__ import annotations

import pytest

from tierwise.reproduce.cases.device import ROWS, Row


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.section} {r.what}" for r in ROWS])
def test_reference_number(row: Row) -> None:
    """The computed value matches the printed one within its rounding."""
    got = row.compute()
    if row.tol:
        assert float(got) == pytest.approx(row.expected, abs=row.tol), row.what
    else:
        assert got == row.expected, row.what
