"""The session's tunables from the relay TOML file's ``[session]`` table and flags."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.relay.test_cli import CLI, curl, free_port, wait_port
from tierwise.errors import ScenarioError
from tierwise.proto.relay.wire import HEADER_BYTES, TAG_BYTES
from tierwise.relay.tuning import FLAGS, SESSION_KEYS, session_settings


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "relay.key"
    subprocess.run([*CLI, "relay", "keygen", "--out", str(path)], check=True)
    return path


def test_file_values_in_their_unit_or_with_a_unit_and_flags_win() -> None:
    table = {
        "idle_timeout_s": 60,
        "keepalive_s": "500 ms",
        "stream_window_bytes": "4 MiB",
        "session_window_bytes": 10_000_000,
        "initial_rate_bytes_per_s": "80 Mbit/s",
        "fec_target": 0.99,
        "fec_code": "cauchy",
        "rotate_packets": 4096,
    }
    got = session_settings(table, "relay.toml", "client", {"fec_target": "0.95"})
    assert got == {
        "idle_timeout_s": 60.0, "keepalive_s": 0.5, "stream_window_bytes": 4 << 20,
        "session_window_bytes": 10_000_000, "initial_rate_bytes_per_s": 10e6,
        "fec_target": 0.95, "fec_code": "cauchy", "rotate_packets": 4096,
    }  # fmt: skip
    assert session_settings(None, "x", "gateway") == {}
    assert set(FLAGS) <= set(SESSION_KEYS)


@pytest.mark.parametrize(
    ("table", "side", "message"),
    [
        ({"fec_targt": 0.9}, "client", "session.fec_targt: unknown key (did you mean 'fec_target'"),
        ({"dead_peer_s": 2}, "gateway", "session.dead_peer_s: unknown key (a client-only key)"),
        ({"fec_target": 1.0}, "client", "session.fec_target: 1.0 is out of range"),
        ({"fec_target": "high"}, "client", "session.fec_target: expected a number"),
        ({"stream_window_bytes": 1000}, "client", "expected 65,536 bytes to 1,073,741,824 bytes"),
        ({"stream_window_bytes": "16 parsecs"}, "client", "unknown unit 'parsecs'"),
        ({"idle_timeout_s": "5 MB"}, "client", "is not a time"),
        ({"max_datagram_bytes": 1400.5}, "gateway", "expected an integer from 200 to 65,000"),
        ({"max_datagram_bytes": 65_001}, "gateway", "65001 is out of range: expected 200 to"),
        ({"max_datagram_bytes": True}, "gateway", "expected an integer"),
        ({"fec_code": "raptor"}, "gateway", "expected one of zfec, cauchy"),
        ({"keepalive_s": 20}, "gateway", "must be below idle_timeout_s (12 s)"),
    ],
)
def test_bad_values_name_file_key_value_and_expectation(
    table: dict, side: str, message: str
) -> None:
    with pytest.raises(ScenarioError) as info:
        session_settings(table, "relay.toml", side)
    assert str(info.value).startswith("relay.toml: session."), info.value
    assert message in str(info.value), info.value


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "relay", *args], capture_output=True, text=True, timeout=30)


def test_check_shows_every_effective_value(key: Path, tmp_path: Path) -> None:
    """--check prints the whole session as it will run: defaults, the file, the flags."""
    conf = tmp_path / "gw.toml"
    conf.write_text(
        'key_file = "relay.key"\nallow = ["127.0.0.1:9"]\n'
        '[session]\nfec_target = 0.99\nbulk_bytes = "256 kB"\n'
    )
    out = run_cli("gateway", "--config", str(conf), "--check", "--stream-window", "2MiB")
    assert out.returncode == 0, out.stderr
    session = json.loads(out.stdout)["session"]
    assert set(session) == {k for k, t in SESSION_KEYS.items() if t.side != "client"} | {
        "max_streams"
    }
    assert session["fec_target"] == 0.99 and session["bulk_bytes"] == 256_000
    assert session["stream_window_bytes"] == 2 << 20 and session["idle_timeout_s"] == 12.0
    assert session["session_window_bytes"] == 32 << 20  # a default
    client = run_cli("client", "--gateway", "127.0.0.1:9", "--key-file", str(key), "--check",
                     "--idle-timeout", "1 min", "--initial-rate", "100 Mbit/s")  # fmt: skip
    session = json.loads(client.stdout)["session"]
    assert session["idle_timeout_s"] == 60.0 and session["dead_peer_s"] == 1.0
    assert session["silent_grace_s"] == 15.0  # the client's default, not null
    assert session["initial_rate_bytes_per_s"] == 12.5e6


@pytest.mark.parametrize(
    ("text", "flags", "needle"),
    [
        ("[session]\nwindow = 3\n", (), "gw.toml: session.window: unknown key"),
        ("[session]\nack_every = 0\n", (), "gw.toml: session.ack_every: 0 is out of range"),
        ("session = 3\n", (), "gw.toml: session: expected a table"),
        ("", ("--fec-target", "2"), "command line: --fec-target: 2.0 is out of range"),
        ("", ("--stream-window", "30"), "--stream-window: '30' has no unit"),
        ("", ("--idle-timeout", "3s"), "keepalive_s (5 s) must be below idle_timeout_s (3 s)"),
        ("", ("--max-datagram", "65001"), "--max-datagram: 65001 is out of range: expected"),
        ("[session]\nmax_datagram_bytes = 70000\n", (), "datagram_bytes: 70000 is out of range"),
    ],
)
def test_bad_session_settings_are_one_line_exit_2(
    key: Path, tmp_path: Path, text: str, flags: tuple[str, ...], needle: str
) -> None:
    conf = tmp_path / "gw.toml"
    conf.write_text('key_file = "relay.key"\nallow = ["127.0.0.1:9"]\n' + text)
    out = run_cli("gateway", "--config", str(conf), "--check", *flags)
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr.count("\n") == 1 and needle in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def _start(tmp_path: Path, name: str, *args: str) -> subprocess.Popen:
    log = (tmp_path / f"{name}.log").open("w")
    return subprocess.Popen([*CLI, "relay", *args], stderr=log, text=True)


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl (Debian: curl)")
def test_toml_settings_reach_the_running_sessions(
    key: Path, tmp_path: Path, http_server: int
) -> None:
    """Each end's [session] table governs its running session: the datagrams each end
    sends are no larger than its own max_datagram_bytes (counted by the client's
    session), a shared rotate_packets of 64 carries a transfer across many key epochs,
    and `relay stats --json` shows the values in force."""
    gport, sport = free_port(socket.SOCK_DGRAM), free_port()
    (tmp_path / "gw.toml").write_text(
        f'listen = "127.0.0.1:{gport}"\nallow = ["127.0.0.1:{http_server}"]\n'
        'key_file = "relay.key"\n[session]\nmax_datagram_bytes = 500\nrotate_packets = 64\n'
    )
    (tmp_path / "cl.toml").write_text(
        f'gateway = "127.0.0.1:{gport}"\nsocks = "127.0.0.1:{sport}"\nkey_file = "relay.key"\n'
        "[session]\nmax_datagram_bytes = 300\nrotate_packets = 64\nfec_target = 0.95\n"
        'stream_window_bytes = "2 MiB"\ndead_peer_s = "2 s"\n'
    )
    procs = [_start(tmp_path, "gw", "gateway", "--config", str(tmp_path / "gw.toml"))]
    try:
        procs.append(_start(tmp_path, "cl", "client", "--config", str(tmp_path / "cl.toml")))
        wait_port(sport, 20)
        body = tmp_path / "up.bin"
        body.write_bytes(bytes(range(256)) * 800)  # 204,800 B up
        posted = subprocess.run(
            ["curl", "-sS", "--max-time", "20", "--socks5-hostname", f"127.0.0.1:{sport}",
             "--data-binary", f"@{body}", f"http://127.0.0.1:{http_server}/"],
            capture_output=True, check=False,
        )  # fmt: skip
        assert posted.stdout.startswith(b"204800 "), posted
        got = curl(sport, f"http://127.0.0.1:{http_server}/300000").stdout
        assert got == bytes(i % 251 for i in range(300_000))
        out = run_cli("stats", "--client", f"127.0.0.1:{sport}", "--json")
        stats = json.loads(out.stdout)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    session = stats["session"]
    assert session["max_datagram_bytes"] == 300 and session["rotate_packets"] == 64
    assert session["fec_target"] == 0.95 and session["stream_window_bytes"] == 2 << 20
    assert session["dead_peer_s"] == 2.0 and session["idle_timeout_s"] == 30.0
    # each end's datagrams: a data packet is at most max_datagram_bytes, a repair ≤ 52 more
    assert stats["packets_sent"] > 300 and stats["packets_received"] > 600
    assert stats["bytes_sent"] / stats["packets_sent"] <= 300 + 52
    assert 300 + 52 < stats["bytes_received"] / stats["packets_received"] <= 500 + 52
    assert stats["packets_sent"] > 10 * 64  # well past ten key epochs each way
    assert HEADER_BYTES + TAG_BYTES < 300


def test_a_rotation_mismatch_fails_the_handshake_like_a_wrong_key(
    key: Path, tmp_path: Path
) -> None:
    """Ends with different rotate_packets could never talk past the first rotation: the
    client is told at once (exit 2, one line), not after a session that goes silent."""
    gport = free_port(socket.SOCK_DGRAM)
    (tmp_path / "gw.toml").write_text("[session]\nrotate_packets = 1024\n")
    gw = _start(tmp_path, "gw", "gateway", "--config", str(tmp_path / "gw.toml"), "--listen",
                f"127.0.0.1:{gport}", "--allow", "127.0.0.1:9", "--key-file", str(key))  # fmt: skip
    try:
        out = subprocess.run(
            [*CLI, "relay", "client", "--gateway", f"127.0.0.1:{gport}", "--key-file", str(key),
             "--socks", f"127.0.0.1:{free_port()}", "--connect-timeout", "2 s"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
    finally:
        gw.kill()
        gw.wait()
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "rotate_packets" in out.stderr and "same key" in out.stderr


def test_the_readme_lists_every_session_key() -> None:
    """The README's [session] table names every key, its flag and its default."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for key, tunable in SESSION_KEYS.items():
        flag = f" (`{FLAGS[key]}`)" if key in FLAGS else ""
        assert f"| `{key}`{flag} | " in readme, key
        assert f" | {tunable.default} | " in readme, key
