"""§12.1.5, §12.2.2, §12.5.1: the model figures the chapter types, out of the published configs."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from tierwise.model import architecture as arch
from tierwise.reproduce._case import Case

MIB = 2.0**20
TB = 1e12


@cache
def _load(name: str) -> arch.Architecture:
    path = resources.files("tierwise.catalog").joinpath("data", "architectures", f"{name}.json")
    return arch.from_config(json.loads(path.read_text(encoding="utf-8")), where=name)


def _qwen() -> arch.Architecture:
    return _load("qwen3-8b")


def _vision() -> arch.VisionTower:
    tower = _load("qwen3-vl-4b").vision
    assert tower is not None
    return tower


CASES = [
    Case(
        "§12.1.5",
        "Qwen3-8B parameters from its config",
        8_190_735_360,
        lambda: arch.total_parameters(_qwen()),
        op="=",
    ),
    Case(
        "§12.1.5",
        "BF16 bytes read per decode step (note 2), from the config",
        15_136_819_200,
        lambda: arch.decode_step_bytes(_qwen()),
        op="=",
    ),
    Case(
        "§12.1.5",
        "KV bytes per token, from the config (GQA, 8 KV heads)",
        147_456,
        lambda: arch.kv_bytes_per_token(_qwen()),
        op="=",
    ),
    Case(
        "§12.5.1",
        "TFLOP to prefill the 8K context, from the config",
        133.6,
        lambda: arch.prefill_flops(_qwen(), 8192) / TB,
        tol=0.05,
    ),
    Case(
        "§12.1.5",
        "rank-16 Q/V LoRA adapter, MiB, from the config (7,667,712 parameters)",
        14.6,
        lambda: arch.lora_adapter_bytes(_qwen(), 16, ["q_proj", "v_proj"]) / MIB,
        tol=0.05,
    ),
    Case(
        "§12.2.2",
        "Qwen3-VL-4B: visual tokens for 640×640, from the config",
        400,
        lambda: arch.visual_tokens(_vision(), 640, 640),
        op="=",
    ),
    Case(
        "§12.2.2",
        "Qwen3-VL-4B: feature bytes (4 groups × 2560 BF16), from the config",
        8_192_000,
        lambda: arch.vision_feature_bytes(_vision(), 640, 640),
        op="=",
    ),
    Case(
        "§12.2.2",
        "Qwen3-VL-4B: TFLOP to encode one image, from the config",
        1.31,
        lambda: arch.encode_flops(_vision(), 640, 640) / TB,
        tol=0.005,
    ),
    Case(
        "§12.2.2",
        "Qwen3-VL-4B: KV KiB per language-model token, from the config",
        144,
        lambda: arch.kv_bytes_per_token(_load("qwen3-vl-4b")) / 1024,
        op="=",
    ),
]
