"""A decoder transformer from its architecture: sizes and work (§12.1.5, §12.2.2, §12.5.1).

The catalog's model numbers (bytes read per decode step, KV bytes per token,
prefill FLOPs, a vision tower's encode FLOPs, a LoRA adapter's size) all follow
from a Hugging Face ``config.json``. Counting, for ``L`` layers of width ``h``,
``H`` query heads and ``H_kv`` KV heads of ``d`` values, FFN width ``f`` and a
vocabulary ``V``:

- attention ``h·H·d + 2·h·H_kv·d + H·d·h`` (Q, K, V, O; biases where the family has them);
- a gated MLP ``3·h·f``; a mixture of ``E`` experts ``E·3·h·f_e + h·E`` (router),
  of which ``k`` experts are active per token;
- RMSNorms ``2h`` per layer (plus ``2d`` for Qwen3's Q/K norms) and ``h`` at the end;
- embeddings ``V·h``, twice unless tied.

Qwen3-8B comes to 8,190,735,360 parameters. One decode step (batch 1) reads every
active weight except the embedding table, of which it looks up one row; with
tied embeddings the table is the output head and is read whole. KV per token is
``2·L·H_kv·d`` values; prefill of ``n`` tokens is ``2·N_matmul·n`` plus causal
attention ``2·L·n²·H·d`` plus the output head for the last token.

Pure functions over plain numbers; reading ``config.json`` files is the catalog's job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tierwise.errors import CatalogError

__all__ = [
    "LORA_TARGETS",
    "Architecture",
    "VisionTower",
    "active_parameters",
    "decode_step_bytes",
    "decode_step_values",
    "encode_flops",
    "from_config",
    "kv_bytes_per_token",
    "lora_adapter_bytes",
    "lora_adapter_parameters",
    "non_embedding_parameters",
    "prefill_flops",
    "total_parameters",
    "vision_feature_bytes",
    "visual_tokens",
]

BF16_BYTES = 2.0
# Families whose Q, K, V projections carry a bias (Qwen2 and Qwen2.5 configs do not say so).
_QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})
# Families with RMSNorm on each head's queries and keys (Qwen3 modelling code).
_QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe", "qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe"})
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class VisionTower:
    """A ViT encoder with patch merging (Qwen2.5-VL / Qwen3-VL ``vision_config``)."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    spatial_merge_size: int = 2
    temporal_patch_size: int = 2
    in_channels: int = 3
    out_hidden_size: int = 0
    deepstack_layers: int = 0  # DeepStack feature groups beside the final projection


@dataclass(frozen=True)
class Architecture:
    """The fields of a decoder transformer's ``config.json`` that decide its size."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    qkv_bias: bool = False
    qk_norm: bool = False
    vision: VisionTower | None = None

    @property
    def attention_width(self) -> int:
        """``H·d``: the width of the concatenated query heads."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """``H_kv·d``: the width of K (and of V); smaller than ``H·d`` under GQA/MQA."""
        return self.num_key_value_heads * self.head_dim


# --- parsing --------------------------------------------------------------------------------


def _int(cfg: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise CatalogError(f"{where}: architecture key {key!r} is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CatalogError(
            f"{where}: architecture key {key!r}: expected a whole number ≥ 0, got {value!r}"
        )
    return value


def _table(value: Any, key: str, where: str) -> Mapping[str, Any]:
    """A nested config (``text_config``, ``vision_config``): an object, or absent."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CatalogError(
            f"{where}: architecture key {key!r}: expected an object, got {value!r}"[:200]
        )
    return value


def _bool(cfg: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    """``true``/``false`` (a string "yes" is not read as true)."""
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CatalogError(
            f"{where}: architecture key {key!r}: expected true or false, got {value!r}"[:200]
        )
    return value


def _vision(cfg: Mapping[str, Any] | None, where: str) -> VisionTower | None:
    cfg = _table(cfg, "vision_config", where)
    if not cfg:
        return None
    w = f"{where}: vision_config"
    indexes = cfg.get("deepstack_visual_indexes", ())
    if not isinstance(indexes, list | tuple):
        raise CatalogError(
            f"{w}: 'deepstack_visual_indexes': expected a list, got {indexes!r}"[:200]
        )
    return VisionTower(
        depth=_int(cfg, "depth", w),
        hidden_size=_int(cfg, "hidden_size", w),
        intermediate_size=_int(cfg, "intermediate_size", w),
        num_heads=_int(cfg, "num_heads", w),
        patch_size=_int(cfg, "patch_size", w),
        spatial_merge_size=_int(cfg, "spatial_merge_size", w, 2),
        temporal_patch_size=_int(cfg, "temporal_patch_size", w, 2),
        in_channels=_int(cfg, "in_channels", w, 3),
        out_hidden_size=_int(cfg, "out_hidden_size", w, 0),
        deepstack_layers=len(indexes),
    )


def from_config(config: Mapping[str, Any], *, where: str = "architecture") -> Architecture:
    """An :class:`Architecture` from a Hugging Face ``config.json`` mapping.

    Multimodal configs keep the language model under ``text_config``; its keys win.
    ``head_dim`` defaults to ``hidden_size / num_attention_heads``, KV heads to the
    query heads (no GQA), experts to ``num_experts`` or ``num_local_experts``.
    """
    if not isinstance(config, Mapping):
        raise CatalogError(f"{where}: expected a table of config.json keys")
    cfg = {**config, **_table(config.get("text_config"), "text_config", where)}
    hidden = _int(cfg, "hidden_size", where)
    heads = _int(cfg, "num_attention_heads", where)
    if heads == 0:
        raise CatalogError(f"{where}: architecture key 'num_attention_heads' must be > 0")
    experts = _int(cfg, "num_experts", where, cfg.get("num_local_experts", 0))
    mtype = str(config.get("model_type", cfg.get("model_type", "")))
    return Architecture(
        hidden_size=hidden,
        num_hidden_layers=_int(cfg, "num_hidden_layers", where),
        num_attention_heads=heads,
        num_key_value_heads=_int(cfg, "num_key_value_heads", where, heads),
        head_dim=_int(cfg, "head_dim", where, hidden // heads),
        intermediate_size=_int(cfg, "intermediate_size", where),
        vocab_size=_int(cfg, "vocab_size", where),
        tie_word_embeddings=_bool(
            config, "tie_word_embeddings", where, _bool(cfg, "tie_word_embeddings", where, False)
        ),
        num_experts=experts,
        num_experts_per_tok=_int(cfg, "num_experts_per_tok", where, 0) if experts else 0,
        moe_intermediate_size=_int(cfg, "moe_intermediate_size", where, 0),
        shared_expert_intermediate_size=_int(cfg, "shared_expert_intermediate_size", where, 0),
        qkv_bias=_bool(cfg, "attention_bias", where, mtype in _QKV_BIAS_TYPES),
        qk_norm=mtype in _QK_NORM_TYPES,
        vision=_vision(config.get("vision_config"), where),
    )


# --- parameters -----------------------------------------------------------------------------


def _attention_params(a: Architecture) -> int:
    h, q, kv = a.hidden_size, a.attention_width, a.kv_width
    weights = h * q + 2 * h * kv + q * h
    bias = (q + 2 * kv) if a.qkv_bias else 0
    return weights + bias


def _expert_width(a: Architecture) -> int:
    return a.moe_intermediate_size or a.intermediate_size


def _mlp_params(a: Architecture, experts: int) -> int:
    """Gated MLP (gate, up, down) per layer with ``experts`` experts counted."""
    if not a.num_experts:
        return 3 * a.hidden_size * a.intermediate_size
    routed = experts * 3 * a.hidden_size * _expert_width(a)
    router = a.hidden_size * a.num_experts
    shared = 0
    if a.shared_expert_intermediate_size:
        shared = 3 * a.hidden_size * a.shared_expert_intermediate_size + a.hidden_size
    return routed + router + shared


def _norm_params(a: Architecture) -> int:
    return 2 * a.hidden_size + (2 * a.head_dim if a.qk_norm else 0)


def _layer_params(a: Architecture, experts: int) -> int:
    return _attention_params(a) + _mlp_params(a, experts) + _norm_params(a)


def _embedding_params(a: Architecture) -> int:
    return a.vocab_size * a.hidden_size


def non_embedding_parameters(a: Architecture) -> int:
    """Parameters outside the embedding table and the output head (all experts)."""
    return a.num_hidden_layers * _layer_params(a, a.num_experts) + a.hidden_size


def total_parameters(a: Architecture) -> int:
    """All language-model parameters: layers, final norm, embeddings (and the head if untied).

    Qwen3-8B: 8,190,735,360 (§12.1.5: 2 B each is the 16.38 GB resident).
    """
    heads = 1 if a.tie_word_embeddings else 2
    return non_embedding_parameters(a) + heads * _embedding_params(a)


def active_parameters(a: Architecture) -> int:
    """Parameters one token uses: as total, with only ``k`` of ``E`` experts per layer."""
    if not a.num_experts:
        return total_parameters(a)
    heads = 1 if a.tie_word_embeddings else 2
    layers = a.num_hidden_layers * _layer_params(a, a.num_experts_per_tok)
    return layers + a.hidden_size + heads * _embedding_params(a)


# --- decode, KV, prefill --------------------------------------------------------------------


def decode_step_values(a: Architecture) -> int:
    """Weight values one batch-1 decode step reads (§12.1.5).

    Every active weight, but of an untied embedding table only the token's row:
    Qwen3-8B reads 7,568,409,600 values, 15,136,819,200 bytes in BF16.
    """
    if a.tie_word_embeddings:
        return active_parameters(a)
    return active_parameters(a) - _embedding_params(a) + a.hidden_size


def decode_step_bytes(a: Architecture, bytes_per_value: float = BF16_BYTES) -> float:
    """Bytes of weights read per decode step in a format (q4_0: 18 / 32 bytes per value)."""
    return decode_step_values(a) * bytes_per_value


def kv_bytes_per_token(a: Architecture, bytes_per_value: float = BF16_BYTES) -> float:
    """KV cache per token ``2·L·H_kv·d × bytes`` (§12.1.5: 147,456 B for Qwen3-8B in BF16)."""
    return 2 * a.num_hidden_layers * a.kv_width * bytes_per_value


def _matmul_params(a: Architecture) -> int:
    """Active weights that multiply activations in the layers (norms excluded)."""
    per_layer = _layer_params(a, a.num_experts_per_tok or a.num_experts) - _norm_params(a)
    return a.num_hidden_layers * per_layer


def prefill_flops(a: Architecture, tokens: int, *, logits_tokens: int = 1) -> float:
    """FLOPs to prefill ``n`` tokens: ``2·N·n + 2·L·n²·H·d + 2·V·h·n_logits`` (§12.5.1).

    The causal attention term counts half of each ``n × n`` score and value product.
    Qwen3-8B at 8,192 tokens: 133.6 TFLOP.
    """
    if tokens < 0 or logits_tokens < 0:
        raise CatalogError(f"prefill tokens must be ≥ 0, got {tokens} and {logits_tokens}")
    linear = 2.0 * _matmul_params(a) * tokens
    attention = 2.0 * a.num_hidden_layers * float(tokens) ** 2 * a.attention_width
    head = 2.0 * _embedding_params(a) * logits_tokens
    return linear + attention + head


# --- vision tower ---------------------------------------------------------------------------


def _patches(v: VisionTower, height_px: int, width_px: int) -> int:
    step = v.patch_size * v.spatial_merge_size
    if height_px % step or width_px % step or height_px <= 0 or width_px <= 0:
        raise CatalogError(
            f"image {width_px}×{height_px} px: each side must be a positive multiple of "
            f"patch × merge = {step} px"
        )
    return (height_px // v.patch_size) * (width_px // v.patch_size)


def visual_tokens(v: VisionTower, height_px: int, width_px: int) -> int:
    """Tokens after patch merging (§12.2.2: 640×640 → 1,600 patches → 400 tokens)."""
    return _patches(v, height_px, width_px) // v.spatial_merge_size**2


def encode_flops(v: VisionTower, height_px: int, width_px: int) -> float:
    """Matrix FLOPs to encode one image (§12.2.2: Qwen3-VL-4B at 640×640, 1.31 TFLOP).

    Patch embedding, per block QKV + output (``4h²``) and a plain MLP (``2hf``) on
    every patch plus full attention ``4·n²·h``, then one merger per output group
    (final projection and each DeepStack group): ``m²h → m²h → h_out`` per token.
    """
    n = _patches(v, height_px, width_px)
    h = v.hidden_size
    embed = 2.0 * v.in_channels * v.temporal_patch_size * v.patch_size**2 * h * n
    block = 2.0 * (4 * h * h + 2 * h * v.intermediate_size) * n + 4.0 * n * n * h
    merged = h * v.spatial_merge_size**2
    merger = 2.0 * (merged * merged + merged * v.out_hidden_size) * (n / v.spatial_merge_size**2)
    return embed + v.depth * block + (1 + v.deepstack_layers) * merger


def vision_feature_bytes(
    v: VisionTower, height_px: int, width_px: int, bytes_per_value: float = BF16_BYTES
) -> float:
    """Bytes of the encoder's output groups (§12.2.2: 400 × 4 × 2560 × 2 = 8,192,000 B)."""
    groups = 1 + v.deepstack_layers
    return visual_tokens(v, height_px, width_px) * groups * v.out_hidden_size * bytes_per_value


# --- LoRA -----------------------------------------------------------------------------------


def _projection_shape(a: Architecture, module: str) -> tuple[int, int, int]:
    """(in, out, copies per layer) of one adaptable projection."""
    h, q, kv = a.hidden_size, a.attention_width, a.kv_width
    f = _expert_width(a) if a.num_experts else a.intermediate_size
    copies = a.num_experts or 1
    shapes = {
        "q_proj": (h, q, 1),
        "k_proj": (h, kv, 1),
        "v_proj": (h, kv, 1),
        "o_proj": (q, h, 1),
        "gate_proj": (h, f, copies),
        "up_proj": (h, f, copies),
        "down_proj": (f, h, copies),
    }
    try:
        return shapes[module]
    except KeyError:
        raise CatalogError(
            f"unknown LoRA target module {module!r}; known: {', '.join(LORA_TARGETS)}"
        ) from None


def lora_adapter_parameters(a: Architecture, rank: int, targets: Sequence[str]) -> int:
    """Parameters of a rank-``r`` LoRA adapter: ``L · Σ r·(d_in + d_out)`` over the targets.

    §12.1.5: Qwen3-8B, rank 16 on Q and V: 7,667,712 parameters (14.6 MiB in BF16).
    """
    if rank <= 0:
        raise CatalogError(f"LoRA rank must be > 0, got {rank}")
    per_layer = 0
    for module in dict.fromkeys(targets):
        d_in, d_out, copies = _projection_shape(a, module)
        per_layer += copies * rank * (d_in + d_out)
    return a.num_hidden_layers * per_layer


def lora_adapter_bytes(
    a: Architecture, rank: int, targets: Sequence[str], bytes_per_value: float = BF16_BYTES
) -> float:
    """Bytes of the adapter's weights in a format (BF16: 2 per parameter)."""
    return lora_adapter_parameters(a, rank, targets) * bytes_per_value
