"""Fixtures of the CLI tests: their declared runs, two real processes at a time."""

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
    for item in selected:
        try:
            calls.extend(calls_of(item).values())
        except Exception:
            continue
    batch = Batch(calls, tmp_path_factory.mktemp("cli"))
    yield batch
    batch.close()


@pytest.fixture
def cli_runs(request: pytest.FixtureRequest, cli_batch: Batch) -> dict[str, Done]:
    """This test's finished runs by label (it waits only for its own)."""
    return {label: cli_batch.result(c) for label, c in calls_of(request.node).items()}
