"""`tierwise relay client|gateway` edges a hostile or careless operator hits: secrets
others can read, forwards open to the network, IPv4 addresses in disguise."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Run, run_cli

KEY_HEX = "ab" * 32


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "relay.key"
    path.write_text(KEY_HEX + "\n")
    path.chmod(0o600)
    return path


def client_check(key: Path, *args: str) -> Run:
    """``relay client --check`` against a gateway it never asks (--check opens no socket)."""
    return run_cli(
        "relay", "client", "--check", "--gateway", "127.0.0.1:7443", "--key-file", str(key), *args
    )


def one_line(out: Run, *needles: str) -> None:
    """Exit 2, nothing on stdout, one stderr line holding every needle, no traceback."""
    assert out.code == 2 and out.stdout == "", (out.code, out.stdout, out.stderr)
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    for needle in needles:
        assert needle in out.stderr, (needle, out.stderr)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o610])
def test_a_password_file_others_may_touch_is_refused_like_a_key(
    key: Path, tmp_path: Path, mode: int
) -> None:
    """A --password-file readable (or writable) by group or others: one line naming the
    file, its mode and `chmod 600`, exit 2, as for the key file (OpenSSH's rule)."""
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    pw.chmod(mode)
    one_line(
        client_check(key, "--user", "u", "--password-file", str(pw)),
        str(pw), "password file", f"mode {mode:04o}", f"chmod 600 {pw}",
    )  # fmt: skip
    config = tmp_path / "relay.toml"  # the same file named by the config's password_file
    config.write_text('gateway = "127.0.0.1:7443"\nuser = "u"\npassword_file = "pw"\n')
    one_line(
        run_cli("relay", "client", "--check", "--config", str(config), "--key-file", str(key)),
        str(pw), f"mode {mode:04o}", "chmod 600",
    )  # fmt: skip


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_private_password_file_is_read(key: Path, tmp_path: Path, mode: int) -> None:
    """0600 and 0400 pass; the user shows in --check, the password never does."""
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    pw.chmod(mode)
    out = client_check(key, "--user", "u", "--password-file", str(pw), "--socks", "0.0.0.0:1")
    assert out.code == 0, out.stderr
    assert '"user": "u"' in out.stdout and "secret" not in out.stdout


def test_a_bad_user_is_named_before_the_password_file_is_judged(key: Path, tmp_path: Path) -> None:
    """A 256-byte user with a 0644 password file: the line names --user, the first fault."""
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    pw.chmod(0o644)
    one_line(client_check(key, "--user", "u" * 256, "--password-file", str(pw)), "--user")


@pytest.mark.parametrize(
    ("secret", "instead"), [("password", "password_file"), ("key", "key_file")]
)
def test_a_secret_written_into_the_config_is_refused_with_the_file_key_to_use(
    key: Path, tmp_path: Path, secret: str, instead: str
) -> None:
    """`password = "…"` (or `key = "…"`) in the TOML: one line saying where a secret goes."""
    config = tmp_path / "relay.toml"
    config.write_text(f'gateway = "127.0.0.1:7443"\n{secret} = "hunter2"\n')
    out = run_cli("relay", "client", "--check", "--config", str(config), "--key-file", str(key))
    one_line(out, f"{config}: {secret}:", instead, "chmod 600")
    assert "hunter2" not in out.stderr


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_config_others_may_write_is_refused(key: Path, tmp_path: Path, mode: int) -> None:
    """A TOML file group or others can write chooses the key and the destinations: one
    line naming it, its mode and `chmod go-w` (OpenSSH's rule for its config); 0644 is
    fine (the file holds no secret: those are refused in it)."""
    config = tmp_path / "relay.toml"
    config.write_text('gateway = "127.0.0.1:7443"\n')
    cmd = ("relay", "client", "--check", "--config", str(config), "--key-file", str(key))
    config.chmod(mode)
    one_line(run_cli(*cmd), str(config), f"mode {mode:04o}", f"chmod go-w {config}")
    config.chmod(0o644)
    assert run_cli(*cmd).code == 0


@pytest.mark.parametrize(
    "listen",
    ["0.0.0.0:8000", "[::]:8000", "192.0.2.1:8000", "[2001:db8::1]:8000",
     "nonexistent.invalid:8000"],
)  # fmt: skip
def test_a_forward_beyond_loopback_needs_an_explicit_opt_in(key: Path, listen: str) -> None:
    """--forward on a non-loopback address (IPv4, IPv6, or a name that does not resolve to
    loopback only) is an open forward: refused with one line naming the opt-in."""
    one_line(
        client_check(key, "--forward", f"{listen}=10.0.0.5:80"),
        "--forward", listen, "10.0.0.5:80", "--public-forward",
    )  # fmt: skip
    out = client_check(key, "--forward", f"{listen}=10.0.0.5:80", "--public-forward")
    assert out.code == 0, out.stderr
    assert '"public_forward": true' in out.stdout


@pytest.mark.parametrize(
    "listen", ["127.0.0.1:8000", "127.0.0.2:8000", "[::1]:8000", "localhost:8000"]
)
def test_a_loopback_forward_needs_no_opt_in(key: Path, listen: str) -> None:
    """Loopback listeners (IPv4 127/8, IPv6 ::1, a name resolving to them) stay the default."""
    out = client_check(key, "--forward", f"{listen}=10.0.0.5:80")
    assert out.code == 0, out.stderr
    assert '"public_forward": false' in out.stdout


def test_the_config_file_opt_in_is_checked_and_named(key: Path, tmp_path: Path) -> None:
    """In the TOML: a public forward is refused naming the file and its `forward` key;
    `public_forward = true` opts in; a non-boolean is one line naming the key."""
    config = tmp_path / "relay.toml"
    base = 'gateway = "127.0.0.1:7443"\nforward = ["0.0.0.0:8000=10.0.0.5:80"]\n'
    cmd = ("relay", "client", "--check", "--config", str(config), "--key-file", str(key))
    config.write_text(base)
    one_line(run_cli(*cmd), f"{config}: forward:", "public_forward = true")
    config.write_text(base + 'public_forward = "yes"\n')
    one_line(run_cli(*cmd), f"{config}: public_forward:", "true or false")
    config.write_text(base + "public_forward = true\n")
    out = run_cli(*cmd)
    assert out.code == 0 and '"public_forward": true' in out.stdout, out.stderr


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--allow", "0x0:80"), ("--allow", "0x7f.1:80"), ("--allow", "10.1:80"),
     ("--listen", "0x0:7443")],
)  # fmt: skip
def test_an_ipv4_address_spelled_as_a_name_is_refused(key: Path, flag: str, value: str) -> None:
    """`0x0` passed as a host name, and the resolver turns it into 0.0.0.0: `--allow 0x0:80`
    opened this host's port 80 past the any-address check. Refused, naming the dotted quad."""
    args = {"--allow": ("--allow", value), "--listen": ("--allow", "127.0.0.1:9", flag, value)}
    out = run_cli("relay", "gateway", "--check", "--key-file", str(key), *args[flag])
    one_line(out, flag, socket.inet_ntoa(socket.inet_aton(value.rpartition(":")[0])))


def test_a_forward_target_or_gateway_in_disguise_is_refused(key: Path) -> None:
    """The same for a --forward target, a --gateway and a --socks listener."""
    one_line(client_check(key, "--forward", "127.0.0.1:8000=0x0:80"), "--forward", "0.0.0.0")
    one_line(
        run_cli("relay", "client", "--check", "--gateway", "0x0:7443", "--key-file", str(key)),
        "--gateway", "0.0.0.0",
    )  # fmt: skip
    one_line(client_check(key, "--socks", "0x7f000001:1080"), "--socks", "127.0.0.1")


@pytest.mark.parametrize("socks", ["[::]:1080", "nonexistent.invalid:1080"])
def test_socks_without_a_password_listens_on_loopback_only(key: Path, socks: str) -> None:
    """The SOCKS sibling: a name or the IPv6 any-address without --user is refused."""
    one_line(client_check(key, "--socks", socks), "--socks", "--user")


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST"])
def test_socks_on_a_name_that_is_loopback_needs_no_password(key: Path, name: str) -> None:
    """A name is resolved as the listener resolves it: `LOCALHOST` is loopback only, so no
    --user is needed (only the exact spelling `localhost` used to pass)."""
    out = client_check(key, "--socks", f"{name}:1080")
    assert out.code == 0, out.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_public_forward_runs_and_warns(key: Path) -> None:
    """With the opt-in the forward listens on 0.0.0.0, and the log says it has no
    authentication; SIGTERM drains and ends both processes cleanly (exit 0)."""
    gw_port, fwd_port = free_port(), free_port()
    cli = [sys.executable, "-c", "from tierwise.cli import main; main()", "relay"]
    gateway = subprocess.Popen(
        [*cli, "gateway", "--listen", f"127.0.0.1:{gw_port}", "--allow", "127.0.0.1:9",
         "--key-file", str(key), "--log-level", "warning"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    client = subprocess.Popen(
        [*cli, "client", "--gateway", f"127.0.0.1:{gw_port}", "--key-file", str(key),
         "--socks", f"127.0.0.1:{free_port()}", "--forward", f"0.0.0.0:{fwd_port}=127.0.0.1:9",
         "--public-forward", "--log-level", "warning", "--connect-timeout", "20 s"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert client.stderr is not None
        line = client.stderr.readline()
        assert "has no authentication" in line and f"0.0.0.0:{fwd_port}" in line, line
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listening = [laddr for laddr in _tcp_listeners() if laddr == ("0.0.0.0", fwd_port)]
            if listening:
                break
            assert client.poll() is None, client.stderr.read()
            time.sleep(0.1)
        else:
            raise AssertionError(f"nothing listens on 0.0.0.0:{fwd_port}")
    finally:
        for proc in (client, gateway):
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=20) for proc in (client, gateway)]
        errs = [proc.stderr.read() for proc in (client, gateway)]  # type: ignore[union-attr]
    assert codes == [0, 0] and not any("Traceback" in err for err in errs), (codes, errs)


def _tcp_listeners() -> list[tuple[str, int]]:
    """(address, port) of every listening IPv4 TCP socket (/proc/net/tcp, state 0A)."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A":
            hex_ip, hex_port = fields[1].split(":")
            ip = socket.inet_ntoa(bytes.fromhex(hex_ip)[::-1])
            found.append((ip, int(hex_port, 16)))
    return found
