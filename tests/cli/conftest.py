"""Fixtures of the CLI tests: their declared runs, two real processes at a time (each
test function's first run a new interpreter, the others forked from a warm one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cli.batch import Batch, Call, Done, calls_of


@pytest.fixture(scope="module")
def cli_batch(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Batch]:
    """Every selected test's declared calls in this module, started in collection order."""
    module = request.module
    selected = [i for i in request.session.items if getattr(i, "module", None) is module]
    calls: list[Call] = []
    fresh: set[Call] = set()  # each test function's first call: a new interpreter
    functions: set[str] = set()
    for item in selected:
        try:
            item_calls = list(calls_of(item).values())
        except Exception:
            continue
        name = getattr(item, "originalname", item.name)
        if item_calls and name not in functions:
            functions.add(name)
            fresh.add(item_calls[0])
        calls.extend(item_calls)
    batch = Batch(calls, tmp_path_factory.mktemp("cli"), frozenset(fresh))
    yield batch
    batch.close()


@pytest.fixture
def cli_runs(request: pytest.FixtureRequest, cli_batch: Batch) -> dict[str, Done]:
    """This test's finished runs by label (it waits only for its own)."""
    return {label: cli_batch.result(c) for label, c in calls_of(request.node).items()}
