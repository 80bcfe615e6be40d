"""The erasure code: GF(2^8)/GF(2^16) arithmetic and Cauchy Reed–Solomon (§12.3.3).

Every decode is checked byte for byte against the data that was encoded.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.errors import LocalProtocolError
from tierwise.model.loss import fec_repair_symbols
from tierwise.proto.fec import CauchyCode, partition_blocks, repair_symbols_needed
from tierwise.proto.gf256 import GF256, GaloisField, field


def _block(rng: np.random.Generator, k: int, length: int) -> np.ndarray:
    return rng.integers(0, 256, (k, length), dtype=np.uint8)


def _received(data: np.ndarray, repair: np.ndarray, keep: list[int]) -> dict[int, bytes]:
    k = data.shape[0]
    return {i: (data[i] if i < k else repair[i - k]).tobytes() for i in keep}


# ------------------------------------------------------------------------ fields


@pytest.mark.parametrize("bits", [8, 16])
def test_every_nonzero_element_has_an_inverse(bits):
    """a · a⁻¹ = 1 for every non-zero element of GF(2^8) and GF(2^16)."""
    f = field(bits)
    a = np.arange(1, f.order)
    assert np.all(f.mul(a, f.inv(a)) == 1)
    assert np.all(f.div(a, a) == 1)


@pytest.mark.parametrize("bits", [8, 16])
def test_field_axioms_on_random_elements(bits):
    """Multiplication commutes, associates, distributes over XOR; zero annihilates."""
    f = field(bits)
    a, b, c = np.random.default_rng(bits).integers(0, f.order, (3, 5000))
    assert np.array_equal(f.mul(a, b), f.mul(b, a))
    assert np.array_equal(f.mul(f.mul(a, b), c), f.mul(a, f.mul(b, c)))
    assert np.array_equal(f.mul(a, b ^ c), f.mul(a, b) ^ f.mul(a, c))
    assert not f.mul(a, 0).any()
    assert np.array_equal(f.mul(a, 1), a)


def test_gf256_reduces_by_its_polynomial():
    """x · x^7 = x^8 = x^4 + x^3 + x^2 + 1 (0x1D) under 0x11D, as in zfec."""
    assert int(GF256.mul(2, 0x80)) == 0x1D
    assert int(GF256.mul(0x1D, GF256.inv(0x1D))) == 1


def test_non_primitive_polynomial_is_refused():
    """x^8 + 1 is not primitive: the tables cannot be built."""
    with pytest.raises(LocalProtocolError, match="not primitive"):
        GaloisField(8, 0x101)


def test_division_by_zero_is_an_error():
    """1/0 has no value in a field."""
    with pytest.raises(ZeroDivisionError):
        GF256.inv(0)


@pytest.mark.parametrize("bits", [8, 16])
def test_matrix_inverse_round_trip(bits):
    """A random matrix times its inverse is the identity."""
    f = field(bits)
    rng = np.random.default_rng(3)
    a = rng.integers(0, f.order, (40, 40)).astype(f.dtype)
    identity = np.eye(40, dtype=f.dtype)
    assert np.array_equal(f.matmul(a, f.inverse(a)), identity)
    assert np.array_equal(f.matmul(f.inverse(a), a), identity)


def test_singular_matrix_is_an_error():
    """Two equal rows: no inverse, and the error says so."""
    a = np.array([[1, 2], [1, 2]], dtype=np.uint8)
    with pytest.raises(LocalProtocolError, match="singular"):
        GF256.inverse(a)


# -------------------------------------------------------------------------- code


def test_every_erasure_pattern_decodes_small_block():
    """k = 4, r = 3: each of the C(7, 4) = 35 choices of 4 symbols gives the data back."""
    rng = np.random.default_rng(1)
    code = CauchyCode(4)
    data = _block(rng, 4, 33)
    repair = code.encode(data, range(4, 7))
    patterns = list(itertools.combinations(range(7), 4))
    assert len(patterns) == 35
    for keep in patterns:
        assert np.array_equal(code.decode(_received(data, repair, list(keep))), data)


def test_random_erasures_up_to_r_gf256():
    """k = 200, r = 56 fills GF(2^8); any r erasures (data or repair) decode exactly."""
    rng = np.random.default_rng(2)
    code = CauchyCode(200, 256)
    data = _block(rng, 200, 64)
    repair = code.encode(data, range(200, 256))
    for erased in (0, 1, 17, 56):
        for _ in range(3):
            keep = sorted(rng.permutation(256)[erased:].tolist())
            assert np.array_equal(code.decode(_received(data, repair, keep)), data)


def test_repair_only_decodes():
    """With all k data symbols lost, k repair symbols alone recover them."""
    rng = np.random.default_rng(4)
    code = CauchyCode(8)
    data = _block(rng, 8, 10)
    repair = code.encode(data, range(8, 16))
    assert np.array_equal(code.decode(_received(data, repair, list(range(8, 16)))), data)


def test_encode_is_systematic_and_linear():
    """Repair of a XOR b is repair(a) XOR repair(b); data symbols go out unchanged."""
    rng = np.random.default_rng(5)
    code = CauchyCode(6)
    a, b = _block(rng, 6, 12), _block(rng, 6, 12)
    idx = range(6, 10)
    assert np.array_equal(code.encode(a ^ b, idx), code.encode(a, idx) ^ code.encode(b, idx))
    assert np.array_equal(code.decode(_received(a, code.encode(a, idx), list(range(6)))), a)


def test_symbols_may_be_arrays_or_bytes():
    """encode takes a list of bytes as well as a k × L array; decode takes arrays too."""
    rng = np.random.default_rng(6)
    code = CauchyCode(3)
    data = _block(rng, 3, 5)
    repair = code.encode([row.tobytes() for row in data], [3, 4])
    assert np.array_equal(repair, code.encode(data, [3, 4]))
    got = code.decode({0: data[0], 3: repair[0], 4: repair[1]})
    assert np.array_equal(got, data)


def test_section_12_3_3_block_in_gf65536_is_fast():
    """245 data + 63 repair symbols of 1,448 B (§12.3.3): encode + decode well under 1 s."""
    rng = np.random.default_rng(7)
    code = CauchyCode(245, 1 << 16)
    assert code.field.bits == 16
    data = _block(rng, 245, 1448)
    start = time.perf_counter()
    repair = code.encode(data, range(245, 308))
    keep = sorted(rng.permutation(308)[63:].tolist())  # 63 erasures, most of them data
    decoded = code.decode(_received(data, repair, keep))
    elapsed = time.perf_counter() - start
    assert np.array_equal(decoded, data)
    assert sum(i < 245 for i in set(range(308)) - set(keep)) > 40
    assert elapsed < 0.8, f"encode + decode took {elapsed:.2f} s"


def test_fewer_than_k_symbols_is_a_clear_error():
    """k − 1 symbols cannot decode; the error names k and the count held."""
    code = CauchyCode(5)
    with pytest.raises(LocalProtocolError, match=r"k=5 needs 5 distinct symbols.*got 4"):
        code.decode({i: b"abcd" for i in range(4)})


def test_bad_indices_and_lengths_are_errors():
    """Repair indices below k or past the field, and unequal lengths, are refused."""
    code = CauchyCode(3)
    data = np.zeros((3, 4), dtype=np.uint8)
    with pytest.raises(LocalProtocolError, match="repair indices"):
        code.encode(data, [2])
    with pytest.raises(LocalProtocolError, match="repair indices"):
        code.encode(data, [256])
    with pytest.raises(LocalProtocolError, match="same length"):
        code.decode({0: b"abcd", 1: b"abc", 2: b"abcd"})
    with pytest.raises(LocalProtocolError, match="even length"):
        CauchyCode(3, 1 << 16).encode(np.zeros((3, 5), dtype=np.uint8), [3])
    with pytest.raises(LocalProtocolError):
        CauchyCode(0)


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(1, 12),
    r=st.integers(0, 8),
    length=st.integers(0, 40),
    wide=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_k_of_k_plus_r_decode(k, r, length, wide, seed):
    """Property: for random data, any k of the k + r symbols decode to the same bytes."""
    rng = np.random.default_rng(seed)
    length += length % 2 if wide else 0
    code = CauchyCode(k, 1 << 16 if wide else 256)
    data = _block(rng, k, length)
    repair = code.encode(data, range(k, k + r))
    keep = sorted(rng.permutation(k + r)[:k].tolist())
    assert np.array_equal(code.decode(_received(data, repair, keep)), data)


# ---------------------------------------------------------------- block planning


def test_partition_blocks_rfc5052():
    """As few blocks as fit, sizes within one of each other, larger first."""
    assert partition_blocks(245, 245) == [245]
    assert partition_blocks(300, 245) == [150, 150]
    assert partition_blocks(11, 4) == [4, 4, 3]
    assert partition_blocks(0, 4) == []
    for n, m in [(1000, 7), (57, 57), (58, 57)]:
        sizes = partition_blocks(n, m)
        assert sum(sizes) == n and max(sizes) <= m and max(sizes) - min(sizes) <= 1


def test_repair_count_of_section_12_3_3():
    """245 data symbols, target 0.999: 63 repair at 14 % loss, 20 at 3.6 % (§12.3.3)."""
    assert repair_symbols_needed(245, 0.14, 0.999) == 63
    assert repair_symbols_needed(245, 0.036, 0.999) == 20
    assert repair_symbols_needed(245, 0.0, 0.999) == 0


@pytest.mark.parametrize("k", [1, 10, 50, 245, 1000])
@pytest.mark.parametrize("loss", [0.001, 0.036, 0.14, 0.3, 0.5])
@pytest.mark.parametrize("target", [0.5, 0.99, 0.999, 0.999999])
def test_repair_count_matches_the_model(k, loss, target):
    """proto's own sum (proto may not import model) agrees with model.loss.fec_repair_symbols."""
    assert repair_symbols_needed(k, loss, target) == fec_repair_symbols(k, loss, target)
