"""Read a scenario file, apply ``--set`` overrides, validate, and explain errors.

Every failure becomes one :class:`~tierwise.errors.ScenarioError` naming the file,
the key path and what was expected.
"""

from __future__ import annotations

import copy
import tomllib
import types
import typing
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tierwise.errors import ScenarioError
from tierwise.scenario.schema import Scenario, Site

__all__ = ["BUNDLED_EXAMPLES", "apply_set", "bundled_example", "load_scenario", "parse_scenario"]

BUNDLED_EXAMPLES = (
    "deployment",
    "photo-retouch",
    "photo-chunks",
    "voice-stream",
    "screenshot-agent",
)


def bundled_example(name: str = "deployment") -> Path:
    """Path of a bundled example scenario (``deployment`` is the §12.5 case)."""
    if name not in BUNDLED_EXAMPLES:
        raise ScenarioError(f"no bundled example {name!r}; known: {', '.join(BUNDLED_EXAMPLES)}")
    return Path(str(resources.files("tierwise.examples").joinpath(f"{name}.toml")))


def load_scenario(path: str | Path, overrides: Iterable[str] = ()) -> Scenario:
    """Read ``path``, apply ``key.path=value`` overrides and validate."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError("file not found", source=source) from None
    except OSError as exc:
        raise ScenarioError(f"cannot read file: {exc.strerror}", source=source) from exc
    return parse_scenario(text, source=source, overrides=overrides)


def parse_scenario(
    text: str, *, source: str = "<string>", overrides: Iterable[str] = ()
) -> Scenario:
    """Parse TOML text into a validated :class:`Scenario`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"TOML syntax error: {exc}", source=source) from exc
    for item in overrides:
        data = apply_set(data, item)
    return validate(data, source)


def validate(data: dict[str, Any], source: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        path = _key_path(data, err["loc"])
        raise ScenarioError(_explain(err), source=source, path=path or None) from None


def _key_path(data: dict[str, Any], loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    node: Any = data
    for item in loc:
        if isinstance(item, int) and parts and parts[-1] == "site" and isinstance(node, list):
            entry = node[item] if item < len(node) else {}
            name = entry.get("name") if isinstance(entry, dict) else None
            parts.append(str(name) if name else f"[{item}]")
            node = entry
            continue
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        elif item in ("function-after", "function-before") or "[" in str(item):
            continue  # pydantic's internal union / validator labels
        else:
            parts.append(str(item))
        node = node[item] if isinstance(node, dict | list) and _has(node, item) else None
    return ".".join(parts)


def _has(node: Any, item: Any) -> bool:
    if isinstance(node, dict):
        return item in node
    return isinstance(item, int) and item < len(node)


def _explain(err: dict[str, Any]) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    given = err.get("input")
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key (not in the scenario schema; see DESIGN.md's scenario contract)"
    if kind == "missing":
        return "required key is missing"
    if kind in ("greater_than_equal", "greater_than", "less_than", "less_than_equal"):
        return f"{msg}, got {given!r}"
    if kind.endswith("_type") or kind.endswith("_parsing") or kind == "literal_error":
        return f"{msg}, got {given!r}"
    return msg


# ---------------------------------------------------------------- --set overrides


def _value(text: str) -> Any:
    """A TOML value when it parses as one (10, true, ["a","b"]), otherwise the string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_set(data: dict[str, Any], item: str) -> dict[str, Any]:
    """A copy of ``data`` with ``key.path=value`` applied, the path checked against the schema."""
    key, eq, raw = item.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ScenarioError(f"expected key.path=value, got {item!r}", source="--set")
    parts = key.split(".")
    out = copy.deepcopy(data)
    if parts[0] == "site":
        _set_site(out, parts, _value(raw.strip()), key)
    else:
        _check_path(Scenario, parts, key)
        _assign(out, parts, _value(raw.strip()), key)
    return out


def _set_site(data: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    if len(parts) < 3:
        raise ScenarioError("expected site.<name>.<key>=value", source="--set", path=key)
    sites = data.get("site")
    names = [s.get("name") for s in sites] if isinstance(sites, list) else []
    if parts[1] not in names:
        raise ScenarioError(
            f"no site named {parts[1]!r} in the file (sites: {', '.join(map(str, names))})",
            source="--set",
            path=key,
        )
    _check_path(Site, parts[2:], key)
    _assign(sites[names.index(parts[1])], parts[2:], value, key)


def _check_path(model: type[BaseModel], parts: list[str], key: str) -> None:
    node: Any = model
    for i, part in enumerate(parts):
        fields = getattr(node, "model_fields", None)
        if fields is None:
            if _is_dict(node):
                return
            done = ".".join(parts[:i])
            raise ScenarioError(f"{done} is a value, not a table", source="--set", path=key)
        if part not in fields:
            known = ", ".join(fields)
            raise ScenarioError(
                f"unknown key {part!r} (known here: {known})", source="--set", path=key
            )
        node = _table_type(fields[part].annotation)


def _is_dict(annotation: Any) -> bool:
    return typing.get_origin(annotation) is dict


def _table_type(annotation: Any) -> Any:
    """The BaseModel (or dict) inside an annotation like ``Compress | None``, else itself."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner = _table_type(arg)
            if (isinstance(inner, type) and issubclass(inner, BaseModel)) or _is_dict(inner):
                return inner
    if origin is typing.Annotated:
        return _table_type(typing.get_args(annotation)[0])
    return annotation


def _assign(node: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ScenarioError(f"{part} is not a table in the file", source="--set", path=key)
        node = child
    node[parts[-1]] = value
