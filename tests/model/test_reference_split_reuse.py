"""The chapter's printed numbers, recomputed: the table is reproduce.cases.split_reuse."""

from __future__ import annotations

import pytest

from tierwise.reproduce._case import calc_json as cli
from tierwise.reproduce.cases.split_reuse import (
    H100,
    KIB,
    QWEN,
    ROWS,
    RTX4090,
    VISION,
    Row,
)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.section} {r.what}" for r in ROWS])
def test_printed_number(row: Row) -> None:
    """The printed number follows from its inputs within its printed rounding."""
    got = float(row.compute())
    expected = float(row.printed) * row.scale
    if row.op == ">":
        assert got > expected, f"{row.how}: {got} is not above {expected}"
    elif row.op == "=":
        assert got == pytest.approx(expected, rel=1e-12, abs=0), row.how
    else:
        slack = row.tolerance * (1 + 1e-9)
        assert got == pytest.approx(expected, abs=slack), f"{row.how}: {got} vs {row.printed}"


def test_encoder_position_is_decided_by_transfer_then_by_compute():
    """12-3(b): the slow uplink makes transfer dominate; the 50 GB/s port hands it to compute."""
    assert cli("encoder-placement")["dominant"] == "transfer"
    assert cli("encoder-placement", "--uplink", "400 Gbit/s")["dominant"] == "compute"
    assert cli("encoder-placement")["local_wins"] is False


def test_catalog_matches_the_printed_inputs():
    """The catalog holds the inputs these sections print."""
    assert (VISION.visual_tokens, VISION.feature_width, VISION.feature_groups) == (400, 2560, 4)
    assert VISION.encode_flops == pytest.approx(1.31e12)
    assert VISION.kv_bytes_per_token == 144 * KIB
    assert (RTX4090.dense_bf16, H100.dense_bf16) == pytest.approx((165.2e12, 989.4e12))
    assert H100.memory == pytest.approx(80e9)
    assert QWEN.layers == 36
