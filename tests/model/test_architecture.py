"""Model sizes and work from the architecture: the chapter's Qwen3 figures and public configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.errors import CatalogError
from tierwise.model import architecture as A

DATA = Path(__file__).parent / "data"
BUNDLED = Path(A.__file__).parents[1] / "catalog" / "data" / "architectures"
MIB = 2**20


def load(path: Path) -> A.Architecture:
    return A.from_config(json.loads(path.read_text()), where=path.name)


QWEN3_8B = load(BUNDLED / "qwen3-8b.json")
QWEN3_VL_4B = load(BUNDLED / "qwen3-vl-4b.json")


def test_qwen3_8b_parameters_are_exact() -> None:
    """§12.1.5: 8,190,735,360 parameters, 16.38 GB in BF16."""
    assert A.total_parameters(QWEN3_8B) == 8_190_735_360
    assert A.total_parameters(QWEN3_8B) * 2 / 1e9 == pytest.approx(16.38, abs=0.005)


def test_qwen3_8b_decode_step_bytes() -> None:
    """§12.1.5 note 2: 15,136,819,200 BF16 bytes per step; q4_0 (18 / 32) about 4.26 GB."""
    assert A.decode_step_bytes(QWEN3_8B) == 15_136_819_200
    assert A.decode_step_bytes(QWEN3_8B, 18 / 32) / 1e9 == pytest.approx(4.26, abs=0.005)


def test_qwen3_8b_kv_per_token_and_dtype() -> None:
    """§12.1.5: 147,456 B per token in BF16 (1,207,959,552 B at 8K); FP8 halves it."""
    assert A.kv_bytes_per_token(QWEN3_8B) == 147_456
    assert A.kv_bytes_per_token(QWEN3_8B) * 8192 == 1_207_959_552
    assert A.kv_bytes_per_token(QWEN3_8B, 1.0) == 73_728


def test_qwen3_8b_prefill_8k() -> None:
    """§12.5.1: 133.6 TFLOP of matrix work to prefill the 8K context."""
    assert A.prefill_flops(QWEN3_8B, 8192) / 1e12 == pytest.approx(133.6, abs=0.05)


def test_qwen3_8b_lora_exact_count() -> None:
    """§12.1.5: rank-16 Q/V adapter is 7,667,712 parameters, 14.6 MiB in BF16."""
    params = A.lora_adapter_parameters(QWEN3_8B, 16, ["q_proj", "v_proj"])
    assert params == 36 * 16 * ((4096 + 4096) + (4096 + 1024)) == 7_667_712
    assert A.lora_adapter_bytes(QWEN3_8B, 16, ["q_proj", "v_proj"]) / MIB == pytest.approx(
        14.6, abs=0.05
    )


def test_qwen3_vl_4b_vision_tower() -> None:
    """§12.2.2: 640×640 → 400 tokens, 8,192,000 B of features, 1.31 TFLOP to encode."""
    v = QWEN3_VL_4B.vision
    assert v is not None
    assert A.visual_tokens(v, 640, 640) == 400
    assert A.vision_feature_bytes(v, 640, 640) == 8_192_000
    assert A.encode_flops(v, 640, 640) / 1e12 == pytest.approx(1.31, abs=0.005)


def test_qwen3_vl_4b_language_kv() -> None:
    """§12.2.2: 144 KiB of KV per language-model token; 400 tokens ≈ 56.3 MiB."""
    assert A.kv_bytes_per_token(QWEN3_VL_4B) == 144 * 1024
    assert 400 * A.kv_bytes_per_token(QWEN3_VL_4B) / MIB == pytest.approx(56.3, abs=0.05)


def test_llama_31_8b_published_count() -> None:
    """Llama-3.1-8B: 8,030,261,248 parameters; GQA 8 KV heads → 128 KiB KV per token."""
    a = load(DATA / "llama-3.1-8b.json")
    assert a.head_dim == 128 and not a.qk_norm
    assert A.total_parameters(a) == 8_030_261_248
    assert A.kv_bytes_per_token(a) == 128 * 1024


def test_qwen3_30b_a3b_total_and_active() -> None:
    """Qwen3-30B-A3B card: 30.5B total, 3.3B activated, 29.9B non-embedding."""
    a = load(DATA / "qwen3-30b-a3b.json")
    assert A.total_parameters(a) / 1e9 == pytest.approx(30.5, abs=0.05)
    assert 3.3e9 <= A.active_parameters(a) < 3.4e9  # 3.353e9: the card truncates
    assert A.non_embedding_parameters(a) / 1e9 == pytest.approx(29.9, abs=0.05)
    assert A.decode_step_bytes(a) < 2 * A.active_parameters(a)


def test_mixtral_total_and_active() -> None:
    """Mixtral 8x7B (num_local_experts): 46.7B total, 12.9B used per token."""
    a = load(DATA / "mixtral-8x7b.json")
    assert a.num_experts == 8 and a.num_experts_per_tok == 2
    assert A.total_parameters(a) / 1e9 == pytest.approx(46.7, abs=0.05)
    assert A.active_parameters(a) / 1e9 == pytest.approx(12.9, abs=0.05)


def test_tied_embeddings_counted_once_and_read_whole() -> None:
    """Qwen3-0.6B card: 0.6B total, 0.44B non-embedding; the tied head is read every step."""
    a = load(DATA / "qwen3-0.6b.json")
    assert A.total_parameters(a) / 1e9 == pytest.approx(0.6, abs=0.05)
    assert A.non_embedding_parameters(a) / 1e9 == pytest.approx(0.44, abs=0.005)
    assert A.decode_step_values(a) == A.total_parameters(a)


def test_mqa_kv_is_one_head() -> None:
    """Multi-query attention (one KV head) stores 1/H of the multi-head KV."""
    cfg = json.loads((DATA / "llama-3.1-8b.json").read_text())
    mha = A.from_config({**cfg, "num_key_value_heads": 32})
    mqa = A.from_config({**cfg, "num_key_value_heads": 1})
    assert A.kv_bytes_per_token(mha) == 32 * A.kv_bytes_per_token(mqa)


def test_missing_key_names_file_and_key() -> None:
    """A config without hidden_size is a CatalogError naming where and which key."""
    with pytest.raises(CatalogError, match=r"my\.json: architecture key 'hidden_size'"):
        A.from_config({"num_hidden_layers": 2}, where="my.json")
    with pytest.raises(CatalogError, match="whole number"):
        A.from_config({**json.loads((DATA / "qwen3-0.6b.json").read_text()), "vocab_size": "x"})


def test_unknown_lora_target_lists_known() -> None:
    """An unknown LoRA module is refused with the known ones."""
    with pytest.raises(CatalogError, match="known: q_proj"):
        A.lora_adapter_parameters(QWEN3_8B, 16, ["qkv"])


@given(st.integers(1, 4096), st.integers(1, 4096))
def test_prefill_grows_superlinearly(n: int, m: int) -> None:
    """Prefill FLOPs are increasing and superadditive in the context (causal attention)."""
    f = lambda t: A.prefill_flops(QWEN3_8B, t, logits_tokens=0)  # noqa: E731
    assert f(n + m) >= f(n) + f(m)
    assert f(n + 1) > f(n)
