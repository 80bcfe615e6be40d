"""Fill a catalog model's numbers from its architecture, and check the typed ones (§12.1.5).

A ``[model.X]`` entry may give ``architecture`` (a ``config.json`` path or an inline
table) instead of, or beside, its numbers. Missing numbers are derived; a typed
number that disagrees with the derived one by more than :data:`MISMATCH_REL` is kept
(the user's word wins) and reported as a warning naming both.
"""

from __future__ import annotations

from typing import Any

from tierwise.catalog import Catalog, ModelSpec
from tierwise.model import architecture as arch

__all__ = ["MISMATCH_REL", "PREFILL_REFERENCE_TOKENS", "complete_catalog", "derived_numbers"]

MISMATCH_REL = 0.005  # the chapter prints four significant figures; a real slip is far larger
PREFILL_REFERENCE_TOKENS = 8192  # §12.5.1: the 8K context


def derived_numbers(spec: ModelSpec) -> dict[str, Any]:
    """The catalog numbers ``spec.architecture`` implies (BF16 reference sizes, SI units)."""
    if spec.architecture is None:
        return {}
    a = arch.from_config(spec.architecture, where=f"{spec.origin}: model.{spec.id}.architecture")
    tokens = spec.prefill_reference_tokens or PREFILL_REFERENCE_TOKENS
    out: dict[str, Any] = {
        "decode_weight_bytes": arch.decode_step_bytes(a),
        "resident_bytes": arch.total_parameters(a) * arch.BF16_BYTES,
        "kv_bytes_per_token": arch.kv_bytes_per_token(a),
        "layers": a.num_hidden_layers,
        "parameters": float(arch.total_parameters(a)),
        "prefill_flops": arch.prefill_flops(a, tokens),
        "prefill_reference_tokens": tokens,
    }
    if a.vision is not None and spec.image_size is not None:
        height, width = spec.image_size
        out |= {
            "visual_tokens": arch.visual_tokens(a.vision, height, width),
            "feature_width": a.vision.out_hidden_size,
            "feature_groups": 1 + a.vision.deepstack_layers,
            "encode_flops": arch.encode_flops(a.vision, height, width),
        }
    return out


def _disagrees(typed: float, derived: float) -> bool:
    return abs(typed - derived) > MISMATCH_REL * max(abs(derived), 1e-300)


def _complete(spec: ModelSpec) -> tuple[ModelSpec, list[str]]:
    derived = derived_numbers(spec)
    fill: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in derived.items():
        typed = getattr(spec, key)
        if typed is None:
            fill[key] = value
        elif key != "prefill_reference_tokens" and _disagrees(float(typed), float(value)):
            warnings.append(
                f"{spec.origin}: model.{spec.id}.{key}: typed {typed:.6g} but the "
                f"architecture gives {value:.6g}; using the typed value"
            )
    sources = {k: "derived from the architecture" for k in fill} | spec.sources
    return spec.model_copy(update={**fill, "sources": sources}), warnings


def complete_catalog(catalog: Catalog) -> Catalog:
    """The catalog with every model's missing numbers derived; mismatches in ``warnings``."""
    models: dict[str, ModelSpec] = {}
    warnings: list[str] = list(catalog.warnings)
    for key, spec in catalog.model.items():
        models[key], found = _complete(spec)
        warnings += [w for w in found if w not in warnings]
    return catalog.model_copy(update={"model": models, "warnings": tuple(warnings)})
