"""The peer jobs (tests/peerjobs.py): results by test, errors raised in the test, the order."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.peerjobs import QUIET_SAFE, PeerJobs, peer_job, quiet_safe

TESTS = Path(__file__).resolve().parent


def _item(nodeid: str, fn=None, params: dict | None = None):
    """Enough of a pytest item for PeerJobs: a node id, a marker, parametrize values."""
    marker = None if fn is None else SimpleNamespace(args=(fn,))
    return SimpleNamespace(
        nodeid=nodeid,
        get_closest_marker=lambda name: marker if name == "peer_job" else None,
        callspec=SimpleNamespace(params=params or {}),
    )


def test_a_job_runs_in_another_thread_with_its_params_and_a_fresh_workdir() -> None:
    seen = {}

    def job(workdir: Path, cc: str) -> str:
        seen["thread"] = threading.current_thread().name
        seen["workdir"] = workdir
        (workdir / "f").write_text(cc)
        return cc * 2

    jobs = PeerJobs()
    item = _item("t::a[x]", job, {"cc": "ab", "other": 1})
    try:
        jobs.start(item)
        assert jobs.result(item)[0] == "abab"
        assert seen["thread"].startswith("peer-job") and (seen["workdir"] / "f").exists()
        jobs.forget(item)
        assert not seen["workdir"].exists()
    finally:
        jobs.close()


def test_a_job_that_raises_raises_in_its_test_and_one_never_started_runs_when_asked() -> None:
    def boom(workdir: Path) -> None:
        raise RuntimeError("ns-3 exited 1")

    jobs = PeerJobs()
    try:
        with pytest.raises(RuntimeError, match="ns-3 exited 1"):
            jobs.result(_item("t::b", boom))
        assert jobs.result(_item("t::c", lambda workdir: 7))[0] == 7
        assert PeerJobs.job_of(_item("t::d")) is None
    finally:
        jobs.close()


def test_only_in_process_directories_count_as_quiet() -> None:
    assert quiet_safe(SimpleNamespace(path=TESTS / "sim" / "test_engine.py"), TESTS)
    assert quiet_safe(SimpleNamespace(path=TESTS / "test_units.py"), TESTS)
    for noisy in ("lab", "relay", "route", "proto", "plan", "cli", "fuzz"):
        assert noisy not in QUIET_SAFE
        assert not quiet_safe(SimpleNamespace(path=TESTS / noisy / "test_x.py"), TESTS)


@peer_job(lambda workdir: "peer")
def test_this_session_runs_peer_job_tests_last_after_the_quiet_directories(
    request: pytest.FixtureRequest, peer
) -> None:
    """This test is a peer job: in this session it runs among the last, and every test
    outside QUIET_SAFE directories ran before the first quiet one."""
    assert peer() == "peer"
    items = request.session.items
    is_job = [PeerJobs.job_of(item) is not None for item in items]
    first_job = is_job.index(True)
    assert all(is_job[first_job:])
    quiet = [quiet_safe(item, TESTS) for item in items[:first_job]]
    if True in quiet:
        assert all(quiet[quiet.index(True) :])
