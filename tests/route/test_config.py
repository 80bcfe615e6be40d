"""route.toml: the example loads; a bad file is one line naming file and key, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tierwise.errors import ScenarioError
from tierwise.route.config import load_route

EXAMPLE = Path(__file__).parents[2] / "src/tierwise/examples/route.toml"


def test_example_loads() -> None:
    """The shipped example has a device, an edge and a cloud site."""
    cfg = load_route(EXAMPLE)
    assert [s.tier for s in cfg.site] == ["device", "edge", "cloud"]
    assert cfg.site_named("cloud").rtt == pytest.approx(0.08)
    assert cfg.decision.deadline == 10.0


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (('rtt = "80 ms"', 'rtt = "fast"'), "site.cloud.rtt"),
        (('url = "http://127.0.0.1:8003"', 'url = "ftp://x"'), "site.cloud.url"),
        (('objective = "time"', 'objective = "cost"'), "decision.objective"),
        (('default_site = "edge"', 'default_site = "moon"'), "gateway.default_site"),
        (('tier = "cloud"', 'tier = "cloud"\nvia = "relay"'), "site.cloud.relay"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, change: tuple[str, str], where: str) -> None:
    """Each mistake is a ScenarioError naming the file and the key path."""
    bad = tmp_path / "route.toml"
    bad.write_text(EXAMPLE.read_text().replace(*change))
    with pytest.raises(ScenarioError) as err:
        load_route(bad)
    assert err.value.source == str(bad) and err.value.path == where


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    """The CLI prints one line (file, key, what was expected) and exits 2."""
    bad = tmp_path / "route.toml"
    bad.write_text(EXAMPLE.read_text().replace('hardware = "rtx-4090"', 'hardware = "rtx-9999"'))
    run = run_cli("route", "--config", str(bad))
    assert run.code == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "rtx-9999" in run.stderr and "site.edge" in run.stderr
    missing = run_cli("route", "--config", str(tmp_path / "none.toml"))
    assert missing.code == 2 and "file not found" in missing.stderr


def test_strategy_is_validated(tmp_path: Path) -> None:
    """decision.strategy takes predictive, static or lowest-latency."""
    bad = tmp_path / "route.toml"
    bad.write_text(EXAMPLE.read_text().replace("[decision]", '[decision]\nstrategy = "dice"'))
    with pytest.raises(ScenarioError) as err:
        load_route(bad)
    assert err.value.path == "decision.strategy"


def test_files_the_config_names_are_read_beside_it(tmp_path: Path) -> None:
    """A relative keys_file, state password, state CA and site CA are beside the config
    file, wherever the gateway is started from; an absolute one is kept."""
    conf = tmp_path / "conf"
    conf.mkdir()
    text = EXAMPLE.read_text().replace(
        "[gateway]\n",
        '[gateway]\nkeys_file = "keys.toml"\nstate = "redis://127.0.0.1:6379/0"\n'
        'state_password_file = "redis.pass"\nstate_ca_file = "/etc/ssl/ca.pem"\n',
        1,
    )
    (conf / "route.toml").write_text(text)
    g = load_route(conf / "route.toml").gateway
    assert g.keys_file == str(conf / "keys.toml")
    assert g.state_password_file == str(conf / "redis.pass")
    assert g.state_ca_file == "/etc/ssl/ca.pem"
