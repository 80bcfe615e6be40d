"""`lab model-server --like URL`: the stand-in measures an engine and serves like it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import run_cli
from tests.modelserver import model_server
from tierwise.errors import ScenarioError
from tierwise.lab.world.engine import engine_unavailable_reason, llama_server, write_tiny_gguf
from tierwise.lab.world.profile import PROFILE_VERSION, measure, read_profile, write_profile

# an "engine" with known timing: one slot, 20 ms overhead, 0.4 ms per prompt token, 6 ms a step
ENGINE = (
    "--slots", "1", "--overhead", "20 ms", "--prefill-per-token", "0.4 ms",
    "--decode-step", "6 ms",
)  # fmt: skip


def _time(url: str, words: int, max_tokens: int) -> float:
    body = {"messages": [{"role": "user", "content": "hello " * words}], "max_tokens": max_tokens}
    start = time.perf_counter()
    assert httpx.post(url + "/v1/chat/completions", json=body, timeout=30).status_code == 200
    return time.perf_counter() - start


@pytest.fixture(scope="module")
def engine_and_like(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """The known engine, and a stand-in started ``--like`` it with ``--profile-out``: its
    URLs and the profile it measured (measure() once for the module, not once a test)."""
    out = tmp_path_factory.mktemp("like") / "engine.json"
    with model_server(*ENGINE) as engine:
        with model_server("--like", engine, "--profile-out", str(out)) as like:
            yield engine, like, out


def test_measure_recovers_a_known_engine(
    engine_and_like: tuple[str, str, Path], tmp_path: Path
) -> None:
    """Overhead, prefill per token, step and slots of a stand-in with known timing, as
    measure() found them for ``--like`` (the profile ``--profile-out`` wrote)."""
    profile = read_profile(engine_and_like[2])
    assert profile.slots == 1
    assert profile.decode_step_s == pytest.approx(0.006, rel=0.35)
    assert profile.prefill_s_per_token == pytest.approx(0.0004, rel=0.25)
    assert profile.overhead_s == pytest.approx(0.020, abs=0.015)
    write_profile(profile, tmp_path / "p.json")
    assert read_profile(tmp_path / "p.json") == profile


def test_a_stand_in_like_an_engine_takes_its_time(engine_and_like: tuple[str, str, Path]) -> None:
    """Served --like the engine, a short and a long request take the engine's time."""
    engine, like, out = engine_and_like
    for words, max_tokens in ((8, 4), (400, 16)):
        want = min(_time(engine, words, max_tokens) for _ in range(3))
        got = min(_time(like, words, max_tokens) for _ in range(3))
        assert got == pytest.approx(want, rel=0.25, abs=0.01), (words, want, got)
    saved = json.loads(out.read_text())
    assert saved["version"] == PROFILE_VERSION and saved["slots"] == 1
    with model_server("--profile", str(out)) as again:
        assert httpx.get(again + "/admin/behaviour").json()["slots"] == 1


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ('{"version": 99}', "version"),
        ('{"version": 1, "overhead_s": -1}', "overhead_s"),
        (
            '{"version": 1, "overhead_s": 0, "prefill_s_per_token": 0, '
            '"decode_step_s": 0.01, "slots": true}',
            "slots",
        ),
    ],
)
def test_a_bad_profile_names_its_key(tmp_path: Path, content: str, key: str) -> None:
    """A profile of another version or with a bad value is one error naming the key."""
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ScenarioError) as err:
        read_profile(path)
    assert err.value.path == key


def test_like_and_profile_together_is_one_line() -> None:
    """--like with --profile, or --profile-out alone: one line, exit 2, nothing served."""
    for args in (["--like", "http://127.0.0.1:9", "--profile", "x.json"], ["--profile-out", "x"]):
        proc = run_cli("lab", "model-server", "--port", "0", *args)
        assert proc.code == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.skipif(
    engine_unavailable_reason() is not None, reason=str(engine_unavailable_reason())
)
def test_like_a_real_llama_cpp_engine(tmp_path: Path) -> None:
    """llama.cpp's server on the tiny model: one slot, a decode step measured, and the
    probe prompts that overflow its 2,048-token context left out instead of failing."""
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    with llama_server(model) as (engine, _):
        profile = measure(engine)
    assert profile.slots == 1
    assert 0 < profile.decode_step_s < 0.1
    assert 2 <= len(profile.samples) < 4  # the longest probe does not fit the context
