"""`tierwise relay` as processes: keygen, gateway, client, stats, restart and SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "relay", *args], stderr=subprocess.PIPE, text=True)


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def ready_line(proc: subprocess.Popen, needle: str, timeout_s: float = 20) -> float:
    """Wait for ``needle`` on the process's stderr; the time it appeared."""
    deadline = time.monotonic() + timeout_s
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if needle in line:
            return time.monotonic()
        assert line or proc.poll() is None, "the process ended"
    raise AssertionError(f"no {needle!r} within {timeout_s} s")


def curl(socks: int, url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["curl", "-sS", "--max-time", "10", "--socks5-hostname", f"127.0.0.1:{socks}", url],
        capture_output=True,
        check=False,
    )


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "relay.key"
    subprocess.run([*CLI, "relay", "keygen", "--out", str(path)], check=True)
    return path


def test_keygen_writes_a_private_key(key: Path) -> None:
    """keygen --out creates a 0600 file of 64 hex digits."""
    assert key.stat().st_mode & 0o777 == 0o600
    assert len(bytes.fromhex(key.read_text().strip())) == 32


def test_keygen_redirected_to_a_file_makes_it_private(tmp_path: Path) -> None:
    """`tierwise relay keygen > relay.key` (the issue's own command): the shell creates the
    file with the umask's 0644, keygen makes it 0600, and the gateway accepts it."""
    path = tmp_path / "relay.key"
    with path.open("w") as out:  # what the shell's `>` does
        path.chmod(0o644)
        subprocess.run([*CLI, "relay", "keygen"], stdout=out, check=True)
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(bytes.fromhex(path.read_text().strip())) == 32
    check = subprocess.run(
        [*CLI, "relay", "gateway", "--allow", "127.0.0.1:9", "--key-file", str(path), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    piped = subprocess.run([*CLI, "relay", "keygen"], capture_output=True, text=True, check=True)
    assert len(bytes.fromhex(piped.stdout.strip())) == 32


def test_key_readable_by_others_is_refused(key: Path) -> None:
    """A 0644 key file is one line on stderr and exit 2."""
    key.chmod(0o644)
    out = subprocess.run(
        [*CLI, "relay", "gateway", "--allow", "127.0.0.1:9", "--key-file", str(key)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and "chmod 600" in out.stderr and out.stderr.count("\n") == 1


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl (Debian: curl)")
def test_gateway_restart_stats_and_sigterm(key: Path, http_server: int) -> None:
    """curl works, stats answer, a restarted gateway serves new streams in 2 s, SIGTERM exits."""
    gport, sport = free_port(socket.SOCK_DGRAM), free_port()
    allow = f"127.0.0.1:{http_server}"
    gw_args = (
        "gateway",
        "--listen",
        f"127.0.0.1:{gport}",
        "--allow",
        allow,
        "--key-file",
        str(key),
    )
    gw = start(*gw_args)
    cl = start(
        "client",
        "--gateway",
        f"127.0.0.1:{gport}",
        "--socks",
        f"127.0.0.1:{sport}",
        "--key-file",
        str(key),
    )
    try:
        wait_port(sport)
        url = f"http://127.0.0.1:{http_server}/100000"
        assert curl(sport, url).stdout == bytes(i % 251 for i in range(100_000))
        stats = subprocess.run(
            [*CLI, "relay", "stats", "--client", f"127.0.0.1:{sport}", "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        got = json.loads(stats.stdout)
        assert got["state"] == "established" and got["srtt_s"] > 0  # the measures:
        for name in ("bandwidth_bytes_per_s", "loss_in", "loss_out", "fec_overhead", "streams"):
            assert isinstance(got[name], int | float), name
        gw.kill()
        gw.wait()
        gw = start(*gw_args)
        up_s = ready_line(gw, "gateway listening")
        assert curl(sport, url).returncode == 0  # the first try: the client re-opens the session
        # 1 s to call the idle session dead + a handshake (< 2 s idle); the bound is a hang
        # guard below the gateway's 12 s idle timeout, which a stuck re-open would wait out
        assert time.monotonic() - up_s < 8.0
        cl.send_signal(signal.SIGTERM)
        assert cl.wait(10) in (0, 143)
    finally:
        for p in (gw, cl):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_config_file_gives_every_setting(key: Path, tmp_path: Path) -> None:
    """--check prints what the TOML file set (key path relative to the file); flags win."""
    (tmp_path / "relay.toml").write_text(
        'gateway = "gw.example:7443"\nkey_file = "relay.key"\nconnect_timeout = "3 s"\n'
        'forward = ["127.0.0.1:8000=10.0.0.5:8000"]\nudp_buffer = 65536\n'
    )
    out = subprocess.run(
        [*CLI, "relay", "client", "--config", str(tmp_path / "relay.toml"), "--check",
         "--socks", "[::1]:1081"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout)
    assert got["gateway"] == ["gw.example", 7443] and got["socks"] == ["::1", 1081]
    assert got["key_file"] == str(key) and got["connect_timeout_s"] == 3.0
    assert got["forward"] == [[["127.0.0.1", 8000], ["10.0.0.5", 8000]]]
    assert got["udp_buffer"] == 65536


@pytest.mark.parametrize("wrong_key", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_unanswered_gateway_is_one_line_in_bounded_time(
    key: Path, tmp_path: Path, wrong_key: bool
) -> None:
    """No gateway, or a gateway with another key: exit 2 after --connect-timeout, one line."""
    gport = free_port(socket.SOCK_DGRAM)
    gw = None
    if wrong_key:
        other = tmp_path / "other.key"
        subprocess.run([*CLI, "relay", "keygen", "--out", str(other)], check=True)
        gw = start("gateway", "--listen", f"127.0.0.1:{gport}", "--allow", "127.0.0.1:9",
                   "--key-file", str(other))  # fmt: skip
    try:
        t0 = time.monotonic()
        out = subprocess.run(
            [*CLI, "relay", "client", "--gateway", f"127.0.0.1:{gport}", "--key-file", str(key),
             "--socks", f"127.0.0.1:{free_port()}", "--connect-timeout", "1 s"],
            capture_output=True, text=True, check=False, timeout=20,
        )  # fmt: skip
        elapsed_s = time.monotonic() - t0
    finally:
        if gw is not None:
            gw.kill()
            gw.wait()
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.count("\n") == 1 and "no answer from" in out.stderr
    # --connect-timeout 1 s: it gives up on its own (the bound includes the interpreter's
    # start-up, seconds on a loaded host; the subprocess timeout is what would catch a hang)
    assert "same key" in out.stderr and elapsed_s < 20.0


def test_sigterm_with_several_sessions_exits_cleanly(key: Path) -> None:
    """A gateway holding several sessions exits 0 on SIGTERM, with no traceback."""
    import asyncio

    from tierwise.relay.client import Client

    gport = free_port(socket.SOCK_DGRAM)
    gw = start(
        "gateway",
        "--listen",
        f"127.0.0.1:{gport}",
        "--allow",
        "127.0.0.1:9",
        "--key-file",
        str(key),
    )
    try:
        ready_line(gw, "gateway listening")

        async def sessions() -> None:
            secret = bytes.fromhex(key.read_text().strip())
            clients = [Client(secret, ("127.0.0.1", gport)) for _ in range(4)]
            for client in clients:
                await client.start()
            for client in clients:
                await asyncio.wait_for(client.ready.wait(), 10)
            gw.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            for client in clients:
                client.close()

        asyncio.run(sessions())
        assert gw.wait(15) == 0
        assert gw.stderr is not None
        err = gw.stderr.read()
        assert "Traceback" not in err and "changed size" not in err, err
    finally:
        if gw.poll() is None:
            gw.kill()
            gw.wait()


def test_forward_to_a_refused_destination_is_one_line(key: Path) -> None:
    """--forward to a destination outside the gateway's --allow: exit 2, one line, at start."""
    gport = free_port(socket.SOCK_DGRAM)
    allowed, other = free_port(), free_port()
    gw = start("gateway", "--listen", f"127.0.0.1:{gport}", "--allow", f"127.0.0.1:{allowed}",
               "--key-file", str(key))  # fmt: skip
    try:
        ready_line(gw, "gateway listening")
        out = subprocess.run(
            [*CLI, "relay", "client", "--gateway", f"127.0.0.1:{gport}", "--key-file", str(key),
             "--forward", f"127.0.0.1:{free_port()}=127.0.0.1:{other}", "--log-level", "warning"],
            capture_output=True, text=True, check=False, timeout=20,
        )  # fmt: skip
    finally:
        gw.kill()
        gw.wait()
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: --forward:"), out.stderr
    assert f"127.0.0.1:{other}" in out.stderr and "--allow" in out.stderr


def run_cli(*args: str, timeout_s: float = 20, **kw) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    """``tierwise relay ARGS``; stdout and stderr captured unless ``kw`` says otherwise."""
    kw = {"stdout": subprocess.PIPE, **kw}
    return subprocess.run(
        [*CLI, "relay", *args], stderr=subprocess.PIPE, text=True, check=False,
        timeout=timeout_s, **kw,
    )  # fmt: skip


def one_line(out: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, nothing on stdout, one stderr line holding every needle."""
    assert out.returncode == 2 and out.stdout in ("", None), (out.returncode, out.stderr)
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    for needle in needles:
        assert needle in out.stderr, (needle, out.stderr)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_key_or_password_that_is_not_a_regular_file_is_one_line(
    key: Path, tmp_path: Path, kind: str
) -> None:
    """A FIFO as the key (or password) file used to block start-up until a writer came;
    a device or a directory is no key either: each is refused before it is opened."""
    path = tmp_path / "odd"
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        path.mkdir(mode=0o700)
    else:
        path = Path("/dev/null")
    base = ("--check", "--gateway", "127.0.0.1:7443")
    one_line(run_cli("client", *base, "--key-file", str(path)), str(path), "not a regular file")
    one_line(
        run_cli("client", *base, "--key-file", str(key), "--user", "u", "--password-file",
                str(path)),
        str(path), "password file", "not a regular file",
    )  # fmt: skip


@pytest.mark.parametrize("where", ["closed", "full"])
def test_output_that_cannot_be_written_is_one_line(key: Path, where: str) -> None:
    """keygen (its key would go nowhere) and --check with stdout closed or a full disk:
    exit 2 and one line, not a traceback (or exit 0 with the key lost)."""
    for args in (("keygen",), ("gateway", "--check", "--allow", "127.0.0.1:9",
                               "--key-file", str(key))):  # fmt: skip
        if where == "closed":  # `>&-`: fd 1 is not open at all
            out = run_cli(*args, stdout=None, preexec_fn=lambda: os.close(1))
        else:
            with open("/dev/full", "wb") as full:
                out = run_cli(*args, stdout=full)
        one_line(out, "cannot write the output")


def test_empty_or_file_values_are_checked_and_named_where_they_came_from(
    key: Path, tmp_path: Path
) -> None:
    """An empty flag is a value to check, not "use the default" (``--listen ''`` used to
    listen on 0.0.0.0:7443); a bad value from the file names the file and its key, not a
    flag the user never typed; a password file without a user is not silently dropped."""
    gw = ("gateway", "--check", "--allow", "127.0.0.1:9", "--key-file", str(key))
    for flag in ("--listen", "--stats", "--log-level"):
        one_line(run_cli(*gw, flag, ""), flag)
    cl = ("client", "--check", "--gateway", "127.0.0.1:7443", "--key-file", str(key))
    for flag in ("--socks", "--connect-timeout"):
        one_line(run_cli(*cl, flag, ""), flag)
    config = tmp_path / "relay.toml"
    config.write_text('gateway = "127.0.0.1:7443"\nsocks = "127.0.0.1:0"\n')
    one_line(run_cli("client", "--check", "--config", str(config), "--key-file", str(key)),
             f"{config}: socks:")  # fmt: skip
    (tmp_path / "pw").write_text("secret\n")
    one_line(run_cli(*cl, "--password-file", str(tmp_path / "pw")), "--password-file", "--user")


def test_two_listeners_on_one_port_are_refused_up_front(key: Path) -> None:
    """--forward on the --socks port (or two forwards on one port) could only fail at
    start-up after the session opened: refused by --check already, naming both."""
    cl = ("client", "--check", "--gateway", "127.0.0.1:7443", "--key-file", str(key))
    one_line(run_cli(*cl, "--forward", "127.0.0.1:1080=10.0.0.5:80"), "--forward", "--socks")
    one_line(
        run_cli(*cl, "--forward", "127.0.0.1:8000=h:80", "--forward", "0.0.0.0:8000=h:81"),
        "--forward", "0.0.0.0:8000",
    )  # fmt: skip
    ok = run_cli(*cl, "--forward", "127.0.0.1:8000=h:80", "--forward", "[::1]:8000=h:81")
    assert ok.returncode == 0, ok.stderr


def test_a_listener_in_use_fails_before_the_gateway_is_asked(key: Path) -> None:
    """The SOCKS port taken: one line naming --socks at once, not after waiting out the
    gateway (silent here: a client that asked first would wait the whole 20 s)."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        out = run_cli(
            "client", "--gateway", f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}",
            "--key-file", str(key), "--socks", f"127.0.0.1:{port}", "--connect-timeout", "20 s",
            timeout_s=40,
        )  # fmt: skip
        elapsed_s = time.monotonic() - t0
    one_line(out, "--socks", "in use")
    assert elapsed_s < 15.0  # the interpreter's start-up on a loaded host, not the 20 s wait


def test_stats_from_a_silent_endpoint_says_it_did_not_answer(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An endpoint that accepts and never answers: "did not answer", not an empty reason
    (a TimeoutError is an OSError, and was caught as one)."""
    import asyncio

    from tierwise.errors import ScenarioError
    from tierwise.relay import run

    monkeypatch.setattr(run, "FETCH_TIMEOUT_S", 0.3)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        with pytest.raises(ScenarioError, match=r"did not answer within 0\.3 s"):
            asyncio.run(run.fetch_stats(("127.0.0.1", port)))
    with pytest.raises(ScenarioError, match=r"127\.0\.0\.1:\d+: Connection refused$"):
        asyncio.run(run.fetch_stats(("127.0.0.1", free_port())))


def test_a_config_fifo_is_read_or_refused_in_bounded_time(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``--config <(…)`` (a FIFO) is read; a FIFO nothing writes to used to block start-up
    for ever, and is now one line after ``tomlfile.INPUT_WAIT_S``."""
    import threading

    from tierwise import tomlfile
    from tierwise.errors import ScenarioError
    from tierwise.relay import config

    monkeypatch.setattr(tomlfile, "INPUT_WAIT_S", 0.5)
    fifo = tmp_path / "relay.toml"
    os.mkfifo(fifo, 0o600)
    t0 = time.monotonic()
    with pytest.raises(ScenarioError, match=r"writer did not finish within 0\.5 s"):
        config._config(fifo, config.CLIENT_KEYS)
    assert time.monotonic() - t0 < 5.0

    def write() -> None:
        time.sleep(0.1)  # the reader waits for the writer, as with bash's <(…)
        with open(fifo, "w") as f:
            f.write('gateway = "127.0.0.1:7443"\n')

    writer = threading.Thread(target=write)
    writer.start()
    assert config._config(fifo, config.CLIENT_KEYS) == {"gateway": "127.0.0.1:7443"}
    writer.join()
