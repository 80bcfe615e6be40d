"""A site reached directly and through the relay: two routes, chosen by predicted time.

The relay client's own measurements (``GET /stats`` on its SOCKS port) feed the loss
each way into both routes: the planner then charges the direct route's TCP its
recovery and the relay route's FEC nothing but repairs.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from tests.relay.conftest import relay_pair
from tierwise.catalog import load_catalog
from tierwise.errors import ScenarioError
from tierwise.route.config import RELAY_SUFFIX, load_route
from tierwise.route.predict import RequestShape, predict, site_model
from tierwise.route.relaypath import fetch_relay_path, parse_relay_path

EXAMPLE = Path(__file__).parents[2] / "src/tierwise/examples/route.toml"
BOTH = 'region = "eu"\nvia = ["direct", "relay"]\nrelay = "127.0.0.1:1080"'


def _config(tmp_path: Path, change: tuple[str, str] = ('region = "eu"', BOTH)) -> Path:
    path = tmp_path / "route.toml"
    path.write_text(EXAMPLE.read_text().replace(*change))
    return path


def test_a_site_reached_both_ways_is_two_routes(tmp_path: Path) -> None:
    """via = ["direct", "relay"]: NAME direct and NAME+relay, siblings of one site."""
    cfg = load_route(_config(tmp_path))
    names = [s.name for s in cfg.site]
    assert names == ["device", "edge", "cloud", "cloud" + RELAY_SUFFIX]
    direct, relay = cfg.site_named("cloud"), cfg.site_named("cloud+relay")
    assert (direct.via, relay.via) == ("direct", "relay")
    assert direct.route_of == relay.route_of == "cloud"
    assert cfg.siblings("cloud+relay") == ["cloud"] and cfg.siblings("edge") == []
    assert relay.rtt == direct.rtt and relay.url == direct.url


@pytest.mark.parametrize(
    ("via", "where", "says"),
    [
        ('via = []\nrelay = "127.0.0.1:1080"', "site.cloud.via", "once each"),
        ('via = ["relay", "relay"]\nrelay = "127.0.0.1:1080"', "site.cloud.via", "once each"),
        ('via = ["direct", "relay"]', "site.cloud.relay", "needs relay"),
        ('via = ["direct", "ship"]', "site.cloud.via[1]", "'direct' or 'relay'"),
    ],
)
def test_a_bad_via_names_the_key(tmp_path: Path, via: str, where: str, says: str) -> None:
    """An empty, repeated or unknown via, or relay missing: one error naming the key."""
    path = _config(tmp_path, ('region = "eu"', f'region = "eu"\n{via}'))
    with pytest.raises(ScenarioError) as err:
        load_route(path)
    assert err.value.path == where and says in str(err.value), str(err.value)


def _routes(tmp_path: Path, rtt: str = "200 ms"):  # type: ignore[no-untyped-def]
    path = _config(tmp_path)
    path.write_text(path.read_text().replace('rtt = "80 ms"', f'rtt = "{rtt}"'))
    cfg = load_route(path)
    cat = load_catalog()
    return {n: site_model(cfg.site_named(n), cat, "test") for n in ("cloud", "cloud+relay")}


SHAPE = RequestShape(
    path="/v1/chat/completions",
    bytes_up=354_640,
    prompt_tokens=200,
    output_tokens=64,
    output_learned=False,
    stream=False,
    deadline_s=None,
    residency="any",
)


def _fed(models, loss: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    for m in models.values():
        for _ in range(5):
            m.loss_up.update(loss)
            m.loss_down.update(loss)
    return {name: predict(m, SHAPE).option.time_s for name, m in models.items()}


def test_a_lossy_long_path_predicts_the_relay_faster(tmp_path: Path) -> None:
    """14 % loss each way at 200 ms: direct TCP pays loss recovery, the relay's FEC not."""
    times = _fed(_routes(tmp_path), 0.14)
    assert times["cloud+relay"] < 0.9 * times["cloud"], times


def test_a_clean_path_predicts_a_tie(tmp_path: Path) -> None:
    """No loss: both routes cross the same path; their predictions agree within 5 %."""
    times = _fed(_routes(tmp_path), 0.0)
    assert times["cloud+relay"] == pytest.approx(times["cloud"], rel=0.05), times


def test_a_stats_answer_gives_the_path() -> None:
    """The client's snapshot keys become the path's numbers; up is the client's out."""
    path = parse_relay_path(
        {
            "state": "established",
            "srtt_s": 0.21,
            "min_rtt_s": 0.2,
            "bandwidth_bytes_per_s": 4e6,
            "delivery_in_bytes_per_s": 9e6,
            "loss_out": 0.03,
            "loss_in": 0.14,
        }
    )
    assert path is not None
    assert (path.rtt_s, path.loss_up, path.loss_down) == (0.2, 0.03, 0.14)
    assert (path.up_rate_bytes_per_s, path.down_rate_bytes_per_s) == (4e6, 9e6)
    assert path.samples() == {"loss_up": 0.03, "loss_down": 0.14}  # rates: not the path's


@pytest.mark.parametrize(
    "data",
    [
        {"state": "hello sent", "srtt_s": 0.1},
        {"role": "gateway", "state": "established"},
        ["not", "a", "dict"],
        None,
    ],
)
def test_no_session_or_no_client_gives_nothing(data: object) -> None:
    """Before the session is up, or from a gateway's stats, there is no path to read."""
    assert parse_relay_path(data) is None


def test_a_running_relay_client_answers_with_its_path() -> None:
    """A real relay pair on loopback: the router reads the client's RTT and loss over its
    SOCKS port; a port with nothing listening gives None, never an exception."""

    async def scenario() -> tuple[object, object]:
        async with relay_pair(set()) as (_gateway, client, socks_port):
            for _ in range(100):
                if client.session is not None and client.session.conn.established:
                    break
                await asyncio.sleep(0.02)
            path = await fetch_relay_path("127.0.0.1", socks_port)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            free = s.getsockname()[1]
        return path, await fetch_relay_path("127.0.0.1", free)

    path, nothing = asyncio.run(scenario())
    assert path is not None and nothing is None
    assert path.rtt_s is not None and 0 < path.rtt_s < 1.0  # type: ignore[attr-defined]
    assert path.loss_up == path.loss_down == 0.0  # type: ignore[attr-defined]


def test_the_lab_worlds_config_is_two_routes(tmp_path: Path) -> None:
    """`lab route --relay-path` writes a config the router loads as cloud and cloud+relay,
    with the path's priors and no loss prior (the relay's stats must teach it)."""
    from tierwise.lab.world.relaypath import RTT_S, SOCKS, route_toml

    path = tmp_path / "route.toml"
    path.write_text(route_toml("http://10.77.1.2:8000", tmp_path / "log.jsonl", "predictive"))
    cfg = load_route(path)
    assert [(s.name, s.via, s.relay) for s in cfg.site] == [
        ("cloud", "direct", SOCKS),
        ("cloud+relay", "relay", SOCKS),
    ]
    assert all(s.rtt == RTT_S and s.loss == 0.0 for s in cfg.site)


def test_relay_path_on_loopback_is_one_line() -> None:
    """--relay-path needs namespaces: with --loopback it is one line naming the option."""
    from tests.conftest import run_cli

    run = run_cli("lab", "route", "--relay-path", "--loopback")
    assert run.code == 2 and "--relay-path" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
