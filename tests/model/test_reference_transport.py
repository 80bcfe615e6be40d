"""The chapter's printed numbers, recomputed: the table is reproduce.cases.transport."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tierwise.cli import app
from tierwise.errors import ModelError
from tierwise.reproduce.cases.transport import ROWS, Row


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.section} {r.what}" for r in ROWS])
def test_reference_number(row: Row):
    """Recompute one printed number and compare within its printed rounding."""
    assert row.compute() == pytest.approx(row.expected, abs=row.tolerance), row.what


def test_cli_unknown_handshake_is_a_model_error():
    """`tierwise calc handshake --protocol sctp` fails with the known names, not a traceback."""
    result = CliRunner().invoke(app, ["calc", "handshake", "--protocol", "sctp", "--json"])
    assert isinstance(result.exception, ModelError)
    assert "tcp+tls1.3, tcp+tls1.2, quic, quic-0rtt" in str(result.exception)
