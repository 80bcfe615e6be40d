"""Exports that load on first use (PEP 562), one mechanism for every package.

A package lists what it exports and where each name lives; nothing is imported until a
name is first read, so ``tierwise --help`` loads no numpy, pydantic or simulator::

    __getattr__, __dir__ = lazy_exports(__name__, {"Sender": "tierwise.proto.tcp"})

A value is ``"module"`` (the attribute of that name in it) or ``("module", None)`` (the
module itself) or ``("module", "attribute")``. Once read, a name is cached in the package's
namespace, so later reads cost a dictionary lookup. An unknown name raises the
``AttributeError`` Python raises for any module.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]

Target = str | tuple[str, str | None]


def lazy_exports(
    package: str, table: Mapping[str, Target]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` that load the names of ``table`` lazily."""

    def __getattr__(name: str) -> object:
        try:
            target = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module_name, attribute = (target, name) if isinstance(target, str) else target
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        vars(sys.modules[package])[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__
