"""Read a scenario file, apply ``--set`` overrides, validate, and explain errors.

Every failure becomes one :class:`~tierwise.errors.ScenarioError` naming the file,
the key path and what was expected.
"""

from __future__ import annotations

import copy
import tomllib
import typing
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tierwise.errors import ScenarioError, clip, shown
from tierwise.scenario import schema
from tierwise.scenario.schema import ErrorAt, Scenario, Site
from tierwise.schemakeys import keys_at, table_type, unknown_key
from tierwise.tomlfile import check_depth, parse_toml, read_toml

__all__ = [
    "BUNDLED_EXAMPLES",
    "apply_set",
    "bundled_example",
    "load_scenario",
    "parse_scenario",
    "validate",
]

BUNDLED_EXAMPLES = (
    "deployment",
    "speech-request",
    "photo-retouch",
    "photo-chunks",
    "voice-stream",
    "screenshot-agent",
)


def bundled_example(name: str = "deployment") -> Path:
    """Path of a bundled example scenario (``deployment`` is the §12.5 case)."""
    if name not in BUNDLED_EXAMPLES:
        raise ScenarioError(
            f"no bundled example {shown(name)}; known: {', '.join(BUNDLED_EXAMPLES)}"
        )
    return Path(str(resources.files("tierwise.examples").joinpath(f"{name}.toml")))


def load_scenario(path: str | Path, overrides: Iterable[str] = ()) -> Scenario:
    """Read ``path``, apply ``key.path=value`` overrides and validate."""
    return _with_overrides(read_toml(path), str(path), overrides)


def parse_scenario(
    text: str, *, source: str = "<string>", overrides: Iterable[str] = ()
) -> Scenario:
    """Parse TOML text into a validated :class:`Scenario`."""
    return _with_overrides(parse_toml(text, source), source, overrides)


def _with_overrides(data: dict[str, Any], source: str, overrides: Iterable[str]) -> Scenario:
    overrides = list(overrides)
    for item in overrides:
        data = apply_set(data, item, source=source)
    return validate(data, source, overrides)


def validate(
    data: dict[str, Any],
    source: str,
    overrides: Iterable[str] = (),
    schema_model: type[BaseModel] = Scenario,
) -> Any:
    """Validate parsed TOML; the first error names its key path (and the --set that gave it).

    ``schema_model`` lets a file in the scenario language with more keys (``route.toml``)
    share these messages.
    """
    check_depth(data, source)
    try:
        return schema_model.model_validate(data)
    except RecursionError:
        raise ScenarioError("tables nested too deep to validate", source=source) from None
    except ValidationError as exc:
        err = _most_telling(exc.errors(include_url=False), data)
        loc = tuple(err["loc"])
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, ErrorAt):
            loc += cause.key
        path = _key_path(data, loc)
        message = _explain(err, loc) + _from_set(path, overrides)
        raise ScenarioError(message, source=source, path=path or None) from None


# Tags pydantic puts in an error's location for the member of a union it tried.
_MEMBER_TAGS = {"int", "float", "str", "bool", "list", "dict", "tuple", "none"} | {
    name
    for name, obj in vars(schema).items()
    if isinstance(obj, type) and issubclass(obj, BaseModel)
}


def _keys(data: Any, loc: tuple[Any, ...]) -> list[Any]:
    """The items of ``loc`` that are keys or indices, without union member tags."""
    keys: list[Any] = []
    node = data
    for item in loc:
        present = isinstance(node, dict | list) and _has(node, item)
        if not present and isinstance(item, str) and ("[" in item or item in _MEMBER_TAGS):
            continue
        keys.append(item)
        node = node[item] if present else None
    return keys


def _most_telling(errors: list[dict[str, Any]], data: Any) -> dict[str, Any]:
    """The first error, or for a union (``uplink``: a rate or a list) the member's that fits.

    Every member of a union reports an error; the one that reaches deepest into the
    value, and is not merely "wrong shape", is the one the user needs to see.
    """
    first = errors[0]
    n = len(_keys(data, first["loc"]))
    prefix = tuple(_keys(data, first["loc"])[: n - 1] if n else ())
    same = [e for e in errors if tuple(_keys(data, e["loc"])[: len(prefix)]) == prefix]

    def rank(err: dict[str, Any]) -> tuple[int, bool]:
        return (-len(_keys(data, err["loc"])), str(err["type"]).endswith("_type"))

    return min(same, key=rank)


def _from_set(path: str, overrides: Iterable[str]) -> str:
    """Say which ``--set`` gave the value at ``path``, if one did (the last one wins)."""
    for item in reversed(list(overrides)):
        key = item.partition("=")[0].strip()
        if path == key or path.startswith((key + ".", key + "[")):
            return f" (from --set {clip(item, 60)})"
    return ""


def _key_path(data: dict[str, Any], loc: tuple[Any, ...]) -> str:
    """``site.cloud.uplink[1]`` for pydantic's ``("site", 2, "uplink", 1)``."""
    parts: list[str] = []
    node: Any = data
    for item in _keys(data, loc):
        if isinstance(item, int) and parts == ["site"] and isinstance(node, list):
            entry = node[item] if item < len(node) else {}
            name = entry.get("name") if isinstance(entry, dict) else None
            parts[-1:] = ["site", clip(str(name))] if name else [f"site[{item}]"]
            node = entry
            continue
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(clip(str(item)))
        node = node[item] if isinstance(node, dict | list) and _has(node, item) else None
    return ".".join(parts)


def _has(node: Any, item: Any) -> bool:
    if isinstance(node, dict):
        return item in node
    return isinstance(item, int) and item < len(node)


_MISSING = {
    ("task",): "required table [task] is missing (the task: kind, sizes, compute)",
    ("site",): "required [[site]] tables are missing (at least one site to run on)",
}


def _explain(err: dict[str, Any], loc: tuple[Any, ...]) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    given = err.get("input")
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return unknown_key(loc[-1], keys_at(Scenario, loc))
    if kind == "missing":
        return _MISSING.get(tuple(err["loc"]), "required key is missing")
    if kind in ("greater_than_equal", "greater_than", "less_than", "less_than_equal"):
        return f"{msg}, got {shown(given)}"
    if kind.endswith(("_type", "_parsing")) or kind in ("literal_error", "finite_number"):
        return f"{msg}, got {shown(given)}"
    return msg


# ---------------------------------------------------------------- --set overrides


MAX_SET_KEY = 200  # characters in a --set key path
MAX_SET_VALUE = 10_000  # characters in one --set value (a per-round uplink list fits)


def _value(text: str, item: str, source: str) -> Any:
    """A TOML value when it parses as one (10, true, ["a","b"]), otherwise the string."""
    key = item.partition("=")[0].strip()
    if len(text) > MAX_SET_VALUE:
        raise ScenarioError(
            f"--set value is {len(text):,} characters long; at most {MAX_SET_VALUE:,} are read",
            source=source,
            path=key,
        )
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:
        raise ScenarioError("--set value nests too deep", source=source, path=key) from None
    except ValueError:  # int() refuses more than 4,300 digits
        raise ScenarioError(
            "--set value has a number of more than 4,300 digits", source=source, path=key
        ) from None


def apply_set(data: dict[str, Any], item: str, *, source: str = "<scenario>") -> dict[str, Any]:
    """A copy of ``data`` with ``key.path=value`` applied, the path checked against the schema.

    ``source`` names the file being overridden, for error messages.
    """
    key, eq, raw = item.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ScenarioError(f"--set expects key.path=value, got {shown(item)}", source=source)
    if len(key) > MAX_SET_KEY:
        raise ScenarioError(
            f"--set key path {shown(key)} is {len(key):,} characters long; "
            f"no key path is longer than {MAX_SET_KEY}",
            source=source,
        )
    parts = key.split(".")
    if "" in parts:
        raise ScenarioError(
            f"--set {clip(item, 60)}: empty part in the key path", source=source, path=clip(key, 80)
        )
    out = copy.deepcopy(data)
    if parts[0] == "site":
        _set_site(out, parts, _value(raw.strip(), item, source), source)
    else:
        _check_path(Scenario, parts, source)
        _assign(out, parts, _value(raw.strip(), item, source), source)
    return out


def _set_site(data: dict[str, Any], parts: list[str], value: Any, source: str) -> None:
    key = ".".join(parts)
    if len(parts) < 3:
        raise ScenarioError("--set expects site.<name>.<key>=value", source=source, path=key)
    sites = data.get("site")
    sites = sites if isinstance(sites, list) else []
    names = [s.get("name") if isinstance(s, dict) else None for s in sites]
    if parts[1] not in names:
        raise ScenarioError(
            f"--set names site {shown(parts[1])}, which the file does not have "
            f"(expected one of: {', '.join(map(str, names)) or 'no [[site]] in the file'})",
            source=source,
            path=key,
        )
    _check_path(Site, parts[2:], source, prefix=tuple(parts[:2]))
    _assign(sites[names.index(parts[1])], parts[2:], value, source, prefix=tuple(parts[:2]))


def _check_path(
    model: type[BaseModel], parts: list[str], source: str, prefix: tuple[str, ...] = ()
) -> None:
    """Check ``parts`` against the schema (not the file); dict tables take any key."""
    key = ".".join([*prefix, *parts])
    node: Any = model
    parts = list(parts)
    while parts:
        part = parts.pop(0)
        if typing.get_origin(node) is dict:  # variability.site.<name>: any key, then the value
            node = table_type(typing.get_args(node)[1])
            continue
        fields = getattr(node, "model_fields", None)
        if fields is None:
            done = key.removesuffix("." + ".".join([part, *parts]))
            raise ScenarioError(
                f"--set goes below {done}, which is a value, not a table", source=source, path=key
            )
        if part not in fields:
            raise ScenarioError(
                f"--set names {unknown_key(part, list(fields), name_it=True)}",
                source=source,
                path=key,
            )
        node = table_type(fields[part].annotation)


def _assign(
    node: dict[str, Any], parts: list[str], value: Any, source: str, prefix: tuple[str, ...] = ()
) -> None:
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            done = ".".join([*prefix, *parts[: i + 1]])
            raise ScenarioError(
                f"--set expects {done} to be a table, but the file gives it"
                f" the value {shown(child)}",
                source=source,
                path=".".join([*prefix, *parts]),
            )
        node = child
    node[parts[-1]] = value
