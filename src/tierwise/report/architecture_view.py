"""``tierwise catalog add-model``: a catalog entry from a ``config.json``, with what it implies."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tierwise.catalog import Catalog, ModelSpec
from tierwise.errors import CatalogError
from tierwise.model import architecture as arch
from tierwise.model.derive import derived_numbers

__all__ = ["model_entry", "model_summary", "read_config"]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def read_config(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; a missing file or bad JSON is a CatalogError naming it."""
    from tierwise.tomlfile import read_json

    return read_json(path, error=lambda message, source: CatalogError(f"{source}: {message}"))


def model_summary(spec: ModelSpec, catalog: Catalog) -> dict[str, Any]:
    """Derived numbers of ``spec`` plus parameters, active parameters and bytes per format."""
    assert spec.architecture is not None
    a = arch.from_config(spec.architecture, where=str(spec.origin))
    out = derived_numbers(spec)
    out["active_parameters"] = float(arch.active_parameters(a))
    out["decode_step_bytes_by_format"] = {
        fmt: arch.decode_step_bytes(a, q.bytes_per_value) for fmt, q in catalog.quant.items()
    }
    return out


def model_entry(
    model_id: str, config_path: Path, catalog: Catalog, *, catalog_file: Path | None = None
) -> tuple[str, dict]:
    """TOML text of a ``[model.ID]`` entry for ``config_path``, and its derived summary.

    The entry names the config by its absolute path or, for an entry bound for
    ``catalog_file`` whose folder holds the config, relative to that folder (as the loader
    reads it), so that the catalog and the config move together to another machine.
    """
    if not _ID.match(model_id):
        raise CatalogError(f"--id {model_id!r}: expected letters, digits, '.', '_' or '-'")
    config = read_config(config_path)
    spec = ModelSpec(id=model_id, name=model_id, architecture=config, origin=str(config_path))
    summary = model_summary(spec, catalog)
    lines = [
        f"[model.{model_id}]",
        f'name = "{model_id}"',
        f"architecture = {json.dumps(_config_ref(config_path, catalog_file))}",
        f"# parameters {summary['parameters']:,.0f}, active {summary['active_parameters']:,.0f}",
        f"# KV {summary['kv_bytes_per_token']:,.0f} B per token (BF16), prefill "
        f"{summary['prefill_reference_tokens']} tokens {summary['prefill_flops'] / 1e12:.1f} TFLOP",
    ]
    for fmt, size in summary["decode_step_bytes_by_format"].items():
        lines.append(f"# decode step reads {size:,.0f} B in {fmt}")
    return "\n".join(lines) + "\n", summary


def _config_ref(config_path: Path, catalog_file: Path | None) -> str:
    """How an entry names its config: relative to ``catalog_file``'s folder if inside it."""
    config = config_path.resolve()
    if catalog_file is not None and config.is_relative_to(catalog_file.resolve().parent):
        return config.relative_to(catalog_file.resolve().parent).as_posix()
    return str(config)
