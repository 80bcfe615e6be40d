"""Load and merge catalog files; user entries override bundled ones by id."""

from __future__ import annotations

import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tierwise.errors import CatalogError
from tierwise.units import Energy, FlopRate, Flops, Power, Rate, Size

_BUNDLED = ("hardware.toml", "models.toml", "quant.toml")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    name: str
    sources: dict[str, str] = Field(default_factory=dict)
    origin: str = "bundled"


class Hardware(_Entry):
    """A device, workstation or accelerator; all quantities SI."""

    tier: str | None = None
    memory_bandwidth: Rate
    memory: Size
    memory_options: tuple[Size, ...] = ()
    memory_reserve: Size = 0.0
    power: Power | None = None
    dense_bf16: FlopRate | None = None
    energy_per_token: tuple[Energy, Energy] | None = None
    sustained_power: Power | None = None
    peak_power: Power | None = None
    prompts_per_charge: tuple[float, float] | None = None


class ModelSpec(_Entry):
    """A model's BF16 reference sizes and work."""

    decode_weight_bytes: Size | None = None
    resident_bytes: Size | None = None
    kv_bytes_per_token: Size | None = None
    layers: int | None = Field(default=None, gt=0)
    parameters: float | None = Field(default=None, gt=0)
    prefill_flops: Flops | None = None
    prefill_reference_tokens: int | None = Field(default=None, gt=0)
    visual_tokens: int | None = Field(default=None, gt=0)
    feature_width: int | None = Field(default=None, gt=0)
    feature_groups: int | None = Field(default=None, gt=0)
    encode_flops: Flops | None = None
    # config.json keys (read from ``architecture = "path"`` or an inline table); the
    # numbers above that are missing are derived from it (tierwise.model.architecture).
    architecture: dict[str, Any] | None = None
    image_size: tuple[int, int] | None = None  # (height, width) px a vision tower encodes


class QuantFormat(_Entry):
    """A weight format: ``block_bytes`` bytes hold ``block_values`` values."""

    block_values: int = Field(gt=0)
    block_bytes: float = Field(gt=0)

    @property
    def bytes_per_value(self) -> float:
        return self.block_bytes / self.block_values

    @property
    def bits_per_value(self) -> float:
        return 8.0 * self.bytes_per_value


_SECTIONS: dict[str, type[_Entry]] = {
    "hardware": Hardware,
    "model": ModelSpec,
    "quant": QuantFormat,
}


class Catalog(BaseModel):
    """Everything known, by section and id."""

    model_config = ConfigDict(frozen=True)
    hardware: dict[str, Hardware]
    model: dict[str, ModelSpec]
    quant: dict[str, QuantFormat]
    warnings: tuple[str, ...] = ()  # typed numbers that disagree with the architecture

    def get(self, section: str, key: str, *, where: str = "") -> Any:
        """Look up ``section``/``key``; an unknown id is a CatalogError listing the known ones."""
        table: dict[str, Any] = getattr(self, section)
        try:
            return table[key]
        except KeyError:
            known = ", ".join(sorted(table))
            prefix = f"{where}: " if where else ""
            raise CatalogError(f"{prefix}unknown {section} id {key!r}; known: {known}") from None


def _read(text: str, origin: str) -> dict[str, dict[str, dict[str, Any]]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{origin}: TOML syntax error: {exc}") from exc
    unknown = set(data) - set(_SECTIONS)
    if unknown:
        raise CatalogError(
            f"{origin}: unknown table {sorted(unknown)[0]!r}; expected one of "
            f"{', '.join(f'[{s}.<id>]' for s in _SECTIONS)}"
        )
    return data


def _read_architecture(raw: dict[str, Any], where: str, base: Any) -> dict[str, Any]:
    """Replace ``architecture = "path/config.json"`` by the file's keys (relative to ``base``)."""
    ref = raw.get("architecture")
    if not isinstance(ref, str):
        return raw
    try:
        text = base.joinpath(ref).read_text(encoding="utf-8")
        config = json.loads(text)
    except OSError as exc:
        raise CatalogError(f"{where}.architecture: cannot read {ref!r}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{where}.architecture: {ref!r} is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise CatalogError(f"{where}.architecture: {ref!r} must hold a JSON object")
    return {**raw, "architecture": config}


def _build(section: str, key: str, raw: Any, origin: str, base: Any = None) -> _Entry:
    if not isinstance(raw, dict):
        raise CatalogError(f"{origin}: {section}.{key}: expected a table")
    if section == "model" and base is not None:
        raw = _read_architecture(raw, f"{origin}: {section}.{key}", base)
    try:
        return _SECTIONS[section].model_validate({**raw, "id": key, "origin": origin})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        path = ".".join(str(p) for p in (section, key, *err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required key is missing"
        elif err["type"] == "extra_forbidden":
            known = [f for f in _SECTIONS[section].model_fields if f not in ("id", "origin")]
            msg = f"unknown key (expected one of: {', '.join(known)})"
        elif err["type"] != "value_error":
            msg += f", got {err['input']!r}"
        raise CatalogError(f"{origin}: {path}: {msg}") from exc


def load_catalog(extra: list[str | Path] | tuple[str | Path, ...] = ()) -> Catalog:
    """The bundled catalog plus each file in ``extra``, later files overriding by id."""
    merged: dict[str, dict[str, _Entry]] = {s: {} for s in _SECTIONS}
    sources: list[tuple[str, str, Any]] = []
    pkg = resources.files("tierwise.catalog").joinpath("data")
    for name in _BUNDLED:
        sources.append((pkg.joinpath(name).read_text(encoding="utf-8"), "bundled", pkg))
    for path in extra:
        try:
            sources.append((Path(path).read_text(encoding="utf-8"), str(path), Path(path).parent))
        except OSError as exc:
            raise CatalogError(f"{path}: cannot read catalog file: {exc.strerror}") from exc
    for text, origin, base in sources:
        for section, entries in _read(text, origin).items():
            for key, raw in entries.items():
                merged[section][key] = _build(section, key, raw, origin, base)
    return Catalog(**merged)  # type: ignore[arg-type]
