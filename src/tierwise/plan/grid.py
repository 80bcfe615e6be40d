"""The grid of a sweep: ``--vary key.path=SPEC`` axes, checked like ``--set``.

A SPEC is a range ``a..b UNIT:N`` (``N`` evenly spaced values), ``a..b UNIT:log:N``
(geometric spacing) or a comma list ``5,10,20,40``. Every value becomes the text a
``--set`` would carry (``site.cloud.uplink=12.5 Mbit/s``) and is validated against the
scenario once, so a bad key or value fails before anything is evaluated, naming the
file, the key path and the ``--vary`` that gave it. The grid is the cartesian product.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tierwise.errors import ScenarioError, clip
from tierwise.scenario.loader import apply_set, validate
from tierwise.scenario.schema import Scenario

__all__ = ["MAX_GRID_POINTS", "Axis", "Base", "grid_size", "lookup", "parse_axes", "spec_texts"]

_RANGE = re.compile(
    r"^\s*(?P<a>[-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*\.\.\s*(?P<b>[-+]?[0-9.]+(?:[eE][-+]?\d+)?)"
    r"\s*(?P<unit>[^:]*?)\s*(?P<log>:\s*log\s*)?:\s*(?P<n>\d+)\s*$"
)
MAX_AXIS_VALUES = 1_000_000
MAX_GRID_POINTS = 10_000_000  # a vectorised sweep: ~3 s of CPU per million points × 3 sites


@dataclass(frozen=True)
class Axis:
    """One varied key: its ``--set`` texts and the validated values (SI where numeric)."""

    key: str
    spec: str
    texts: tuple[str, ...]
    values: tuple[Any, ...]

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, int | float) and not isinstance(v, bool) for v in self.values)

    def array(self) -> np.ndarray:
        """The values as a float array (numeric axes) or an object array."""
        return np.asarray(self.values, dtype=float if self.numeric else object)

    def override(self, i: int) -> str:
        return f"{self.key}={self.texts[i]}"


@dataclass(frozen=True)
class Base:
    """The scenario file's parsed TOML with the ``--set`` overrides applied."""

    source: str
    data: dict[str, Any]
    overrides: tuple[str, ...]
    digest: bytes

    @classmethod
    def load(cls, path: str | Path, overrides: Iterable[str] = ()) -> Base:
        from tierwise.tomlfile import parse_toml, read_bytes

        source = str(path)
        raw = read_bytes(path)  # the scenario's hash is of these bytes
        data = parse_toml(raw, source)
        overrides = tuple(overrides)
        for item in overrides:
            data = apply_set(data, item, source=source)
        validate(data, source, overrides)
        return cls(source, data, overrides, raw)

    def scenario(self, extra: Sequence[str] = ()) -> Scenario:
        """The scenario with ``extra`` ``--set`` texts applied on top of the base."""
        data = self.data
        for item in extra:
            data = apply_set(data, item, source=self.source)
        return validate(data, self.source, [*self.overrides, *extra])


def spec_texts(key: str, spec: str) -> list[str]:
    """The ``--set`` value texts of one SPEC (``1..100 Mbit/s:log:3`` → 1, 10, 100 Mbit/s)."""
    return _spec(key, spec)[0]


def _spec(key: str, spec: str) -> tuple[list[str], np.ndarray | None]:
    """(texts, numbers in the SPEC's unit) of a range; (texts, None) of a list."""
    m = _RANGE.match(spec)
    if m is None:
        texts = [t.strip() for t in spec.split(",")]
        if not spec.strip() or "" in texts:
            raise ScenarioError(
                f"--vary {clip(f'{key}={spec}', 60)}: expected a..b UNIT:N, a..b UNIT:log:N "
                "or a comma list",
                path=clip(key, 80),
            )
        return texts, None
    where = f"--vary {clip(f'{key}={spec}', 60)}"
    a, b = float(m["a"]), float(m["b"])
    n = int(m["n"]) if len(m["n"]) <= 9 else MAX_AXIS_VALUES + 1  # no 5,000-digit int()
    if not 1 <= n <= MAX_AXIS_VALUES:
        raise ScenarioError(f"{where}: expected 1 to 1,000,000 values", path=clip(key, 80))
    if not (math.isfinite(a) and math.isfinite(b)):
        raise ScenarioError(f"{where}: the range's ends must be finite", path=clip(key, 80))
    if m["log"]:
        if a <= 0 or b <= 0:
            raise ScenarioError(f"{where}: a log range needs a, b > 0", path=clip(key, 80))
        grid = np.geomspace(a, b, n)
    else:
        grid = np.linspace(a, b, n)
    unit = f" {m['unit']}" if m["unit"] else ""
    return [f"{_text(v)}{unit}" for v in grid], grid


def _text(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 2**53 else repr(float(v))


def lookup(scn: Scenario, key: str) -> Any:
    """The validated value at ``key`` (``site.cloud.uplink`` → bytes/s)."""
    parts = key.split(".")
    node: Any = scn
    if parts[0] == "site":
        node, parts = scn.site_named(parts[1]), parts[2:]
    for part in parts:
        node = node.get(part) if isinstance(node, dict) else getattr(node, part)
    return node


def parse_axes(base: Base, vary: Iterable[str]) -> list[Axis]:
    """Check every ``key=SPEC`` against the scenario and return the axes, in order."""
    axes: list[Axis] = []
    for item in vary:
        key, eq, spec = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ScenarioError(
                f"--vary expects key.path=SPEC, got {clip(repr(item), 60)}", source=base.source
            )
        if any(a.key == key for a in axes):
            raise ScenarioError(
                f"--vary names {clip(key, 80)} twice", source=base.source, path=clip(key, 80)
            )
        texts, numbers = _spec(key, spec.strip())
        points = grid_size(axes) * len(texts)
        if points > MAX_GRID_POINTS:  # before validating a million values of a hopeless grid
            raise ScenarioError(
                f"the sweep has {points:,} grid points, over the limit of "
                f"{MAX_GRID_POINTS:,}: vary fewer values",
                source="--vary",
            )
        values = _values(base, key, spec.strip(), texts, numbers)
        axes.append(Axis(key, spec.strip(), tuple(texts), tuple(values)))
    return axes


_FULL_CHECK = 16  # ranges longer than this are checked at a sample and scaled


def _values(
    base: Base, key: str, spec: str, texts: list[str], numbers: np.ndarray | None
) -> list[Any]:
    """Validated values of every text; a long range is validated at a sample of its values
    and the rest scaled by the unit's factor (a unit is a scale: no offsets in units.txt)."""
    if numbers is None or len(texts) <= _FULL_CHECK:
        return [lookup(_checked(base, key, t, spec), key) for t in texts]
    sample = sorted({0, len(texts) - 1, *range(0, len(texts), len(texts) // 6)})
    got = {i: lookup(_checked(base, key, texts[i], spec), key) for i in sample}
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in got.values()):
        return [lookup(_checked(base, key, t, spec), key) for t in texts]
    nonzero = [i for i in sample if numbers[i] != 0]
    factor = float(got[nonzero[0]]) / numbers[nonzero[0]] if nonzero else 1.0
    if not all(math.isclose(got[i], numbers[i] * factor, rel_tol=1e-12) for i in sample):
        return [lookup(_checked(base, key, t, spec), key) for t in texts]
    if all(isinstance(v, int) for v in got.values()):
        odd = [i for i, x in enumerate(numbers) if not float(x).is_integer()]
        if odd:
            _checked(base, key, texts[odd[0]], spec)  # raises with the schema's message
        return [round(float(x * factor)) for x in numbers]
    return [float(x) for x in numbers * factor]


def _checked(base: Base, key: str, text: str, spec: str) -> Scenario:
    try:
        return base.scenario([f"{key}={text}"])
    except ScenarioError as exc:
        detail = re.sub(r" \(from --set [^)]*\)$", "", exc.detail.rstrip())
        detail = detail.removeprefix("--set ")
        given = clip(f"{key}={spec}", 60)
        raise ScenarioError(
            f"{clip(detail, 160)} (value {clip(repr(text))} from --vary {given})",
            source=base.source,
            path=exc.path or clip(key, 80),
        ) from None


def grid_size(axes: Sequence[Axis]) -> int:
    """Points in the cartesian product of ``axes``."""
    return math.prod(len(a.texts) for a in axes)
