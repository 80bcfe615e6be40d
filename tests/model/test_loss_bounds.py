"""The loss models' work is bounded: huge FEC blocks are refused, big ones stay in memory."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

from tierwise.errors import ModelError
from tierwise.model import loss


def test_hopeless_fec_block_is_refused_at_once(cli):
    """1 GB at 99.999 % loss: one line naming the limit, not a 539 GiB allocation."""
    start = time.perf_counter()
    r = cli("calc", "fec", "--loss", "0.99999", "--size", "1 GB")
    assert time.perf_counter() - start < 30
    assert r.code == 2 and len(r.stderr.splitlines()) == 1
    assert "5,000,000 symbols" in r.stderr and "Traceback" not in r.stderr


def test_oversized_block_is_a_model_error():
    """A caller's own repair count cannot push a block past the symbol limit."""
    with pytest.raises(ModelError, match="limit"):
        loss.fec_rounds_pmf(loss.MAX_FEC_SYMBOLS, 10, 0.1)


def test_rounds_distribution_in_blocks_matches_at_once(monkeypatch):
    """The blockwise rounds CDF equals the one-matrix CDF."""
    whole = loss.fec_rounds_pmf(2000, 150, 0.07)
    monkeypatch.setattr(loss, "_CHUNK_TERMS", 5000)
    assert np.allclose(loss.fec_rounds_pmf(2000, 150, 0.07), whole, rtol=1e-12, atol=1e-15)


def test_large_block_stays_in_bounded_memory():
    """150,000 data symbols at 50 % loss: the rounds CDF never builds its full matrix."""
    tracemalloc.start()
    assert loss.fec_expected_rounds(150_000, 150_000, 0.5) >= 1.0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 100e6  # the whole (rounds × deficits) matrix alone is ~160 MB
