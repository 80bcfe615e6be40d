"""Load and merge catalog files; user entries override bundled ones by id."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationError

from tierwise.errors import CatalogError, clip, did_you_mean, shown
from tierwise.schemakeys import NoBooleanNumbers, unknown_key
from tierwise.tomlfile import parse_toml, read_toml
from tierwise.units import Energy, FlopRate, Flops, Power, Rate, Size

PositiveCount = Annotated[float, Field(gt=0, le=1e12)]

_BUNDLED = ("hardware.toml", "models.toml", "quant.toml")


class _Entry(NoBooleanNumbers):
    # defer_build: a nested model compiles its validator only if used on its own, not at
    # import as well as inside the enclosing model (start-up, docs/benchmarks.md)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
    id: str
    name: str
    """Display name."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Where each fact comes from, by key."""
    origin: str = "bundled"


class Hardware(_Entry):
    """A device, workstation or accelerator; all quantities SI."""

    tier: str | None = None
    """device, edge or cloud."""
    memory_bandwidth: Rate
    """Memory bandwidth (decode is bound by it)."""
    memory: Size
    """Memory capacity."""
    memory_options: tuple[Size, ...] = ()
    """Other capacities the part is sold with."""
    memory_reserve: Size = 0.0
    """Memory kept free for the OS and other apps."""
    power: Power | None = None
    """Power while computing."""
    dense_bf16: FlopRate | None = None
    """Dense BF16 peak."""
    energy_per_token: tuple[Energy, Energy] | None = None
    """Measured energy per token, [low, high]."""
    sustained_power: Power | None = None
    """Power the device sustains without throttling."""
    peak_power: Power | None = None
    """Peak power."""
    prompts_per_charge: tuple[PositiveCount, PositiveCount] | None = None
    """Prompts one battery charge runs, [low, high]."""


class ModelSpec(_Entry):
    """A model's BF16 reference sizes and work."""

    decode_weight_bytes: Size | None = None
    """BF16 weight bytes read per decode step."""
    resident_bytes: Size | None = None
    """BF16 bytes resident in memory."""
    kv_bytes_per_token: Size | None = None
    """KV-cache bytes per token of context."""
    layers: int | None = Field(default=None, gt=0)
    """Transformer layers."""
    parameters: float | None = Field(default=None, gt=0)
    """Parameter count."""
    prefill_flops: Flops | None = None
    """FLOP of a prefill of prefill_reference_tokens tokens."""
    prefill_reference_tokens: int | None = Field(default=None, gt=0)
    """Tokens the prefill_flops figure is for."""
    visual_tokens: int | None = Field(default=None, gt=0)
    """Tokens per image."""
    feature_width: int | None = Field(default=None, gt=0)
    """Width of the features a split sends."""
    feature_groups: int | None = Field(default=None, gt=0)
    """Feature groups a split sends."""
    encode_flops: Flops | None = None
    """FLOP of the vision encoder per image."""
    # config.json keys (read from ``architecture = "path"`` or an inline table); the
    # numbers above that are missing are derived from it (tierwise.model.architecture).
    architecture: dict[str, Any] | None = None
    """config.json keys, or a path to the file; missing numbers above are derived from it."""
    image_size: tuple[int, int] | None = None
    """(height, width) in pixels that the vision tower encodes."""


class QuantFormat(_Entry):
    """A weight format: ``block_bytes`` bytes hold ``block_values`` values."""

    block_values: int = Field(gt=0)
    """Values per block."""
    block_bytes: float = Field(gt=0)
    """Bytes per block."""

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


class Catalog(NoBooleanNumbers):
    """Everything known, by section and id."""

    model_config = ConfigDict(frozen=True, defer_build=True)
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
            listed = f"known: {known}" if len(known) <= 150 else "`tierwise catalog` lists them"
            prefix = f"{where}: " if where else ""
            raise CatalogError(
                f"{prefix}unknown {section} id {shown(key)}{did_you_mean(key, table)}; {listed}"
            ) from None


def _error(message: str, source: str) -> CatalogError:
    return CatalogError(f"{source}: {message}")


def _sections(data: dict[str, Any], origin: str) -> dict[str, dict[str, Any]]:
    """The file's sections, each checked to be a known table of entries."""
    expected = ", ".join(f"[{s}.<id>]" for s in _SECTIONS)
    for section, entries in data.items():
        if section not in _SECTIONS:
            hint = did_you_mean(section, _SECTIONS)
            raise CatalogError(
                f"{origin}: unknown table {shown(section)}{hint}; expected one of {expected}"
            )
        if not isinstance(entries, dict):
            raise CatalogError(
                f"{origin}: {section}: expected tables [{section}.<id>], got {shown(entries)}"
            )
    return data


def _read_architecture(raw: dict[str, Any], where: str, base: Any) -> dict[str, Any]:
    """Replace ``architecture = "path/config.json"`` by the file's keys (relative to ``base``)."""
    ref = raw.get("architecture")
    if not isinstance(ref, str):
        return raw
    from tierwise.tomlfile import read_json

    config = read_json(
        base.joinpath(ref),
        error=lambda message, source: CatalogError(f"{where}.architecture: {ref!r}: {message}"),
    )
    return {**raw, "architecture": config}


def _build(section: str, key: str, raw: Any, origin: str, base: Any = None) -> _Entry:
    if not isinstance(raw, dict):
        raise CatalogError(f"{origin}: {clip(section + '.' + key, 100)}: expected a table")
    if section == "model" and base is not None:
        raw = _read_architecture(raw, f"{origin}: {section}.{key}", base)
    try:
        return _SECTIONS[section].model_validate({**raw, "id": key, "origin": origin})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        path = clip(".".join(str(p) for p in (section, key, *err["loc"])), 100)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required key is missing"
        elif err["type"] == "extra_forbidden":
            known = [f for f in _SECTIONS[section].model_fields if f not in ("id", "origin")]
            msg = unknown_key(err["loc"][-1], known)
        elif err["type"] != "value_error":
            msg += f", got {shown(err['input'])}"
        raise CatalogError(f"{origin}: {path}: {msg}") from exc


def load_catalog(extra: list[str | Path] | tuple[str | Path, ...] = ()) -> Catalog:
    """The bundled catalog plus each file in ``extra``, later files overriding by id."""
    merged: dict[str, dict[str, _Entry]] = {s: {} for s in _SECTIONS}
    sources: list[tuple[dict[str, Any], str, Any]] = []
    pkg = resources.files("tierwise.catalog").joinpath("data")
    for name in _BUNDLED:
        data = parse_toml(pkg.joinpath(name).read_bytes(), name, error=_error)
        sources.append((data, "bundled", pkg))
    for path in extra:
        sources.append((read_toml(path, error=_error), str(path), Path(path).parent))
    for data, origin, base in sources:
        for section, entries in _sections(data, origin).items():
            for key, raw in entries.items():
                merged[section][key] = _build(section, key, raw, origin, base)
    return Catalog(**merged)  # type: ignore[arg-type]
