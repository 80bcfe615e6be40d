"""Writing a sweep's rows: all of them or none."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tierwise.errors import ScenarioError


def test_a_sweep_that_fails_half_way_leaves_no_partial_file(tmp_path):
    """Rows are staged beside the targets and renamed only when all are in: a failure after
    the first chunk leaves neither a Parquet/CSV with part of the rows nor a staging file,
    and an existing file of the target's name is untouched."""
    import pyarrow as pa

    from tierwise.plan.sweep_table import write_tables

    out, csv = tmp_path / "s.parquet", tmp_path / "s.csv"
    out.write_text("earlier\n")

    def chunks():
        yield pa.table({"point": [0, 1], "time_s": [0.5, 0.6]})
        raise ScenarioError("the cluster went away", source="--scheduler")

    with pytest.raises(ScenarioError, match="went away"):
        write_tables(chunks(), {}, out, csv)
    assert out.read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.parquet"]
    rows = write_tables(iter([pa.table({"point": [0], "time_s": [0.5]})]), {}, out, csv)
    assert rows == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv", "s.parquet"]
    assert pq.read_table(out).num_rows == 1
