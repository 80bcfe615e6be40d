"""The public API: ``tierwise.__all__`` is pinned, and every name in it is importable."""

from __future__ import annotations

import importlib

import pytest

import tierwise

# The lead owns this list: change it only when the public API changes on purpose.
EXPECTED = [
    "Catalog",
    "CatalogError",
    "LabError",
    "ModelError",
    "Option",
    "Plan",
    "ProtocolError",
    "Scenario",
    "ScenarioError",
    "SimulationError",
    "TierwiseError",
    "UnitError",
    "bundled_example",
    "device",
    "format_quantity",
    "load_catalog",
    "load_scenario",
    "loop",
    "model",
    "parse_quantity",
    "parse_scenario",
    "path",
    "plan",
    "plan_file",
    "request",
    "reuse",
    "split",
    "stream",
    "sweep",
]

pytestmark = pytest.mark.skipif(
    not hasattr(tierwise, "__all__"), reason="tierwise.__all__ is not defined yet"
)


def test_all_is_pinned() -> None:
    """tierwise.__all__ lists exactly the expected names, once each."""
    assert sorted(tierwise.__all__) == sorted(EXPECTED)
    assert len(set(tierwise.__all__)) == len(tierwise.__all__)


@pytest.mark.parametrize("name", EXPECTED)
def test_name_is_importable(name: str) -> None:
    """`from tierwise import NAME` works for every exported name."""
    module = importlib.import_module("tierwise")
    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from tierwise import {name}", namespace)
    assert namespace[name] is getattr(tierwise, name)


def test_star_import() -> None:
    """`from tierwise import *` gives exactly __all__ (no private or stray names)."""
    namespace: dict[str, object] = {}
    exec("from tierwise import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(EXPECTED)


def test_package_pickles_by_name() -> None:
    """The lazy package pickles by reference (Dask ships functions that use it)."""
    import pickle

    import tierwise

    assert pickle.loads(pickle.dumps(tierwise)) is tierwise
    cloudpickle = pytest.importorskip("cloudpickle")

    def uses_the_package() -> str:
        return tierwise.__version__

    assert cloudpickle.loads(cloudpickle.dumps(uses_the_package))() == tierwise.__version__
