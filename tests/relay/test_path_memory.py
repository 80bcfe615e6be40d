"""Path memory's state file: written 0600, aged, bounded, and ignored (with a warning)
when corrupted, from another version or accessible by others."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.proto.relay.prior import PRIOR_RATE_SHARE, PathPrior
from tierwise.relay.pathmemory import (
    FORMAT,
    MAX_AGE_S,
    VERSION,
    PathMemory,
    default_path,
    state_dir,
)

NOW = 1_800_000_000.0  # a Unix time
# what a session on a 200 ms, 333 Mbit/s path with 3.6 % loss leaves (path_estimate())
MEASURED = {
    "min_rtt_s": 0.2,
    "rate_out_bytes_per_s": 40e6,
    "loss_out": 0.036,
    "loss_in": 0.03,
    "datagram_bytes": 1350,
    "packets_sent": 2000,
    "packets_received": 900,
}


def _memory(tmp_path: Path, side: str = "client") -> PathMemory:
    return PathMemory(tmp_path / "state" / "tierwise" / f"relay-{side}-paths.json", side)


def _saved(tmp_path: Path, peer: str = "gw.example:7443", at: float = NOW) -> PathMemory:
    memory = _memory(tmp_path)
    assert memory.remember(peer, MEASURED, at)
    assert memory.save(at)
    return memory


def test_a_session_s_measurements_are_written_0600_and_recalled(tmp_path: Path) -> None:
    """Written whole with mode 0600 in a 0700 directory, read back as the same prior."""
    memory = _saved(tmp_path)
    mode = stat.S_IMODE(memory.path.stat().st_mode)
    assert mode == 0o600
    assert stat.S_IMODE(memory.path.parent.stat().st_mode) == 0o700
    data = json.loads(memory.path.read_text())
    assert data["format"] == FORMAT and data["version"] == VERSION and data["side"] == "client"
    again = _memory(tmp_path).load()
    assert again.warnings == []
    prior = again.recall("gw.example:7443", NOW + 60)
    assert prior == PathPrior(min_rtt_s=0.2, rate_bytes_per_s=40e6, loss=0.036, datagram_bytes=1350)
    assert prior.start_rate_bytes_per_s == PRIOR_RATE_SHARE * 40e6
    assert again.recall("other:7443", NOW) is None
    assert not list(memory.path.parent.glob(".*"))  # no staged file left behind


def test_a_file_others_could_read_is_ignored_and_rewritten_0600(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Mode 0644: ignored with one warning naming the file and its mode; saved as 0600."""
    memory = _saved(tmp_path)
    os.chmod(memory.path, 0o644)
    with caplog.at_level(logging.WARNING, "tierwise.relay.pathmemory"):
        again = _memory(tmp_path).load()
    assert again.records == {}
    assert "accessible by others (mode 0644)" in caplog.text and str(memory.path) in caplog.text
    again.remember("gw.example:7443", MEASURED, NOW)
    again.save(NOW)
    assert stat.S_IMODE(memory.path.stat().st_mode) == 0o600


def test_memory_ages_out(tmp_path: Path) -> None:
    """A record older than MAX_AGE_S (an hour, tcp_metrics') is not used and goes at the
    next save; one dated far in the future (a clock that jumped back) is not used either."""
    memory = _saved(tmp_path, at=NOW)
    assert memory.recall("gw.example:7443", NOW + MAX_AGE_S - 1) is not None
    assert memory.recall("gw.example:7443", NOW + MAX_AGE_S + 1) is None
    assert memory.recall("gw.example:7443", NOW - 3600) is None
    memory.remember("new:1", MEASURED, NOW + MAX_AGE_S + 1)
    memory.save(NOW + MAX_AGE_S + 1)
    assert set(json.loads(memory.path.read_text())["paths"]) == {"new:1"}


@pytest.mark.parametrize(
    ("content", "warning"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"hello": 1}', "not a path memory file"),
        (json.dumps({"format": FORMAT, "version": VERSION + 1, "side": "client", "paths": {}}),
         f"version {VERSION + 1}, this tierwise reads version {VERSION}"),
        (json.dumps({"format": FORMAT, "version": VERSION, "side": "gateway", "paths": {}}),
         "a 'gateway' memory, not a 'client' one"),
        (json.dumps({"format": FORMAT, "version": VERSION, "side": "client", "paths": []}),
         "'paths' is not an object"),
        (b"\xff\xfe garbage", "UTF-8"),
    ],
)  # fmt: skip
def test_an_unusable_file_is_ignored_with_one_warning_and_replaced(
    tmp_path: Path, content: str | bytes, warning: str
) -> None:
    """Corrupted, another version's, another side's: one warning, an empty memory, and the
    next save writes a good file over it (memory never stops a relay from starting)."""
    memory = _memory(tmp_path)
    memory.path.parent.mkdir(parents=True)
    data = content.encode() if isinstance(content, str) else content
    fd = os.open(memory.path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, data)
    os.close(fd)
    memory.load()
    assert memory.records == {}
    assert len(memory.warnings) == 1 and warning in memory.warnings[0], memory.warnings
    assert str(memory.path) in memory.warnings[0]
    memory.remember("gw:1", MEASURED, NOW)
    memory.save(NOW)
    assert _memory(tmp_path).load().recall("gw:1", NOW) is not None


def test_a_malformed_record_is_dropped_and_the_others_kept(tmp_path: Path) -> None:
    """One bad record (a string, a NaN, a negative RTT) is named and skipped."""
    memory = _saved(tmp_path)
    data = json.loads(memory.path.read_text())
    good = data["paths"]["gw.example:7443"]
    data["paths"]["bad:1"] = {**good, "min_rtt_s": -1}
    data["paths"]["bad:2"] = {**good, "loss_out": "high"}
    data["paths"]["bad:3"] = "fast"
    data["paths"]["bad:4"] = {**good, "at": float("nan")}
    memory.path.write_text(json.dumps(data))
    again = _memory(tmp_path).load()
    assert set(again.records) == {"gw.example:7443"}
    assert len(again.warnings) == 4
    assert any("'bad:1'" in w and "min_rtt_s = -1" in w for w in again.warnings)


def test_a_directory_or_fifo_in_its_place_is_ignored(tmp_path: Path) -> None:
    """Not a regular file: a warning, never a hang (a FIFO) or a crash (a directory)."""
    memory = _memory(tmp_path)
    memory.path.parent.mkdir(parents=True)
    os.mkfifo(memory.path, 0o600)
    memory.load()
    assert memory.records == {} and "not a regular file" in memory.warnings[0]


def test_memory_is_bounded(tmp_path: Path) -> None:
    """At most max_paths records are written: the newest."""
    memory = PathMemory(tmp_path / "m.json", "gateway", max_paths=3)
    for i in range(5):
        memory.remember(f"10.0.0.{i}", MEASURED, NOW + i)
    memory.save(NOW + 5)
    assert set(json.loads(memory.path.read_text())["paths"]) == {"10.0.0.2", "10.0.0.3", "10.0.0.4"}


def test_small_flights_keep_the_remembered_rate(tmp_path: Path) -> None:
    """A session that sent only small replies, or whose flights never found the bottleneck
    (paced at the remembered rate, still in start-up), measured no lower rate: a fresh
    record keeps its own; one that found the path lowers it; a too-short one changes
    nothing."""
    memory = _saved(tmp_path)
    small = {**MEASURED, "rate_out_bytes_per_s": 20_000.0, "loss_out": 0.1}
    assert memory.remember("gw.example:7443", small, NOW + 10)
    record = memory.records["gw.example:7443"]
    assert record["rate_out_bytes_per_s"] == 40e6 and record["loss_out"] == 0.1
    assert not memory.remember("gw.example:7443", {**MEASURED, "packets_sent": 3}, NOW + 20)
    paced = {**MEASURED, "rate_out_bytes_per_s": 10e6, "rate_is_path": 0}  # still in start-up
    memory.remember("gw.example:7443", paced, NOW + 25)
    assert memory.records["gw.example:7443"]["rate_out_bytes_per_s"] == 40e6
    kept = {**paced, "rate_kept_bytes_per_s": 50e6}  # ... but delivered at its 1.25 × pace
    memory.remember("gw.example:7443", kept, NOW + 27)
    assert memory.records["gw.example:7443"]["rate_out_bytes_per_s"] == 50e6
    slower = {**MEASURED, "rate_out_bytes_per_s": 10e6, "rate_is_path": 1}  # found the path
    memory.remember("gw.example:7443", slower, NOW + 30)
    assert memory.records["gw.example:7443"]["rate_out_bytes_per_s"] == 10e6
    unmeasured = _memory(tmp_path)
    unmeasured.remember("new:1", {**MEASURED, "rate_out_bytes_per_s": 0.0}, NOW)
    assert unmeasured.recall("new:1", NOW) is None  # no rate known: a new session's start


def test_a_recalled_rate_is_never_below_a_new_session_s_start(tmp_path: Path) -> None:
    """32 datagrams per round trip is where a new session starts anyway: no slower."""
    memory = _memory(tmp_path)
    memory.remember("slow:1", {**MEASURED, "rate_out_bytes_per_s": 250_000.0}, NOW)
    prior = memory.recall("slow:1", NOW)
    assert prior is not None
    assert prior.start_rate_bytes_per_s == pytest.approx(32 * 1350 / 0.2)


def test_the_state_directory_follows_xdg() -> None:
    """XDG_STATE_HOME if absolute (the spec ignores a relative one), else ~/.local/state."""
    assert state_dir({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == Path("/s/tierwise")
    assert state_dir({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == Path("/h/.local/state/tierwise")
    assert state_dir({"HOME": "/h"}) == Path("/h/.local/state/tierwise")
    assert default_path("gateway", {"HOME": "/h"}).name == "relay-gateway-paths.json"


def test_an_unwritable_directory_is_a_warning_not_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A state directory that cannot be made: save() says so and the relay goes on."""
    (tmp_path / "file").write_text("")
    memory = PathMemory(tmp_path / "file" / "paths.json", "client")
    memory.remember("gw:1", MEASURED, NOW)
    with caplog.at_level(logging.WARNING, "tierwise.relay.pathmemory"):
        assert not memory.save(NOW)
    assert "cannot write it" in caplog.text


FIELD_NAMES = st.sampled_from(["min_rtt_s", "at", "loss_out"])
RECORDS = st.one_of(
    st.none(), st.floats(), st.text(max_size=4), st.dictionaries(FIELD_NAMES, st.floats())
)


@settings(max_examples=40)
@given(st.dictionaries(st.text(max_size=8), RECORDS))
def test_any_json_paths_object_loads_without_raising(paths: dict) -> None:
    """Whatever a file's records hold, load() keeps only well-formed ones and never raises."""
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "m.json"
        body = {"format": FORMAT, "version": VERSION, "side": "client", "paths": paths}
        path.write_text(json.dumps(body))
        os.chmod(path, 0o600)
        memory = PathMemory(path, "client").load()
        for peer in memory.records:
            memory.recall(peer, NOW)


def _key(tmp_path: Path) -> Path:
    path = tmp_path / "relay.key"
    path.write_text("ab" * 32 + "\n")
    path.chmod(0o600)
    return path


def test_check_shows_where_memory_lives_and_off_turns_it_off(tmp_path: Path) -> None:
    """--check: the state directory's file by default, the flag's or the file's (relative
    to the file) when given, "off" when off; an empty value is one line, exit 2."""
    from tests.conftest import run_cli

    key = _key(tmp_path)
    base = ("relay", "client", "--check", "--gateway", "127.0.0.1:7443", "--key-file", str(key))
    shown = json.loads(run_cli(*base).stdout)["path_memory"]
    assert shown.endswith("tierwise/relay-client-paths.json")
    assert json.loads(run_cli(*base, "--path-memory", "off").stdout)["path_memory"] == "off"
    config = tmp_path / "relay.toml"
    config.write_text('path_memory = "state/paths.json"\n')
    got = run_cli(*base, "--config", str(config))
    assert json.loads(got.stdout)["path_memory"] == str(tmp_path / "state" / "paths.json")
    bad = run_cli(*base, "--path-memory", "")
    assert bad.code == 2 and bad.stderr.count("\n") == 1 and "--path-memory" in bad.stderr
    gateway = run_cli("relay", "gateway", "--check", "--allow", "127.0.0.1:80", "--key-file",
                      str(key), "--path-memory", "off")  # fmt: skip
    assert json.loads(gateway.stdout)["path_memory"] == "off"
