"""Walk a pydantic schema by key path: the keys a table takes, the tables a key holds.

Used by the loaders (an unknown key's did-you-mean names the nearest key of *that*
table) and by the generator of ``docs/scenario.md``. :class:`NoBooleanNumbers`, the
base of every schema, keeps pydantic from reading ``true`` as 1 and ``"14%"`` as
nothing useful in any number field.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic_core import core_schema

from tierwise.errors import did_you_mean, number_slip, shown

__all__ = [
    "KEYS_DOC",
    "NoBooleanNumbers",
    "is_model",
    "keys_at",
    "members",
    "plain_number",
    "table_type",
    "tag",
    "unknown_key",
]

KEYS_DOC = "docs/scenario.md"


def is_model(node: Any) -> bool:
    """Whether ``node`` is a pydantic model class (a table)."""
    return isinstance(node, type) and issubclass(node, BaseModel)


def table_type(annotation: Any) -> Any:
    """The BaseModel (or dict / list of them) inside ``Compress | None``, else the annotation."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner = table_type(arg)
            if is_model(inner) or typing.get_origin(inner) in (dict, list):
                return inner
    if origin is typing.Annotated:
        return table_type(typing.get_args(annotation)[0])
    return annotation


def members(annotation: Any) -> list[Any]:
    """The tables a field may hold: each model of a union, or the one table type."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return members(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        found = [m for arg in typing.get_args(annotation) for m in members(arg)]
        return [m for m in found if is_model(m) or typing.get_origin(m) in (dict, list)]
    return [annotation]


def tag(model: Any) -> str | None:
    """The ``kind`` a member of a tagged union is chosen by, if it has one."""
    kind = model.model_fields.get("kind") if is_model(model) else None
    args = typing.get_args(kind.annotation) if kind is not None else ()
    return args[0] if len(args) == 1 else None


def _step(node: Any, item: Any) -> list[Any]:
    origin = typing.get_origin(node)
    if origin is list and isinstance(item, int):
        return members(typing.get_args(node)[0])
    if origin is dict:
        return members(typing.get_args(node)[1])
    if is_model(node) and item in node.model_fields:
        return members(node.model_fields[item].annotation)
    return []


def keys_at(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the table at ``loc`` (a pydantic error location, key included) accepts."""
    nodes: list[Any] = [root]
    for item in loc[:-1]:
        stepped = [n for node in nodes for n in _step(node, item)]
        if stepped:
            nodes = stepped
        else:  # a union member's tag in the location: 'Compute', 'stream'
            nodes = [n for n in nodes if item in (getattr(n, "__name__", None), tag(n))] or nodes
    keys = [k for node in nodes if is_model(node) for k in node.model_fields]
    return list(dict.fromkeys(keys))


def unknown_key(word: object, keys: list[str], *, name_it: bool = False) -> str:
    """'unknown key (did you mean 'rtt'?)' and the keys, or where they are listed if many."""
    listed = ", ".join(keys)
    where = f"expected one of: {listed}" if len(listed) <= 80 else f"{KEYS_DOC} lists every key"
    named = f" {shown(word)}" if name_it else ""
    return f"unknown key{named}{did_you_mean(word, keys)}; {where}"


def plain_number(value: Any) -> Any:
    """``value`` unless it is a boolean or a misspelt number (pydantic reads ``true`` as 1).

    Runs before every int and float of a :class:`NoBooleanNumbers` schema, so a TOML
    ``rounds = true`` or ``ratio = "14%"`` is an error at its own key path.
    """
    if isinstance(value, bool):
        return _refuse(f"expected a number, got {str(value).lower()} (a boolean is not 1 or 0)")
    slip = number_slip(value)
    return value if slip is None else _refuse(slip)


def _refuse(message: str) -> Any:
    raise ValueError(message)


def _guard_numbers(node: Any) -> None:
    """Put :func:`plain_number` before every int and float schema under ``node`` (in place)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            function = node.get("function")
            if isinstance(function, dict) and function.get("function") is plain_number:
                continue  # a nested model's schema, already guarded
            if node.get("type") in ("int", "float"):
                inner = dict(node)
                node.clear()
                node.update(core_schema.no_info_before_validator_function(plain_number, inner))
                continue
            stack.extend(node.values())


class NoBooleanNumbers(BaseModel):
    """Base of every schema: a number field refuses booleans, percentages and commas.

    Pydantic's lax mode reads ``true`` as 1 and ``false`` as 0, so ``decode_slowdown =
    true`` would plan with 1.0 and ``loss = false`` with 0; this refuses them, with the
    key path, in every int and float however deep (a list, a dict, a union member).
    """

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[BaseModel], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        schema = handler(source)
        _guard_numbers(schema)
        return schema
