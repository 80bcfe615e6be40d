"""One module per fact: reading ``host:port``, showing it, and the one loopback rule."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise import addresses
from tierwise.addresses import (
    format_address,
    is_ip,
    is_loopback,
    is_port,
    parse_address,
    parse_destination,
)
from tierwise.errors import ScenarioError

PORTS = st.integers(1, 65535)


@settings(max_examples=200)
@given(st.ip_addresses(v=4), PORTS)
def test_ipv4_round_trips(ip: ipaddress.IPv4Address, port: int) -> None:
    """What format_address shows, parse_address reads back to the same address."""
    shown = format_address((str(ip), port))
    assert shown == f"{ip}:{port}"
    assert parse_address(shown, "--x") == (str(ip), port)


@settings(max_examples=200)
@given(st.ip_addresses(v=6), PORTS)
def test_ipv6_round_trips_in_brackets(ip: ipaddress.IPv6Address, port: int) -> None:
    """An IPv6 host is shown in brackets, the only spelling parse_address takes for it."""
    shown = format_address((str(ip), port))
    assert shown == f"[{ip}]:{port}"
    assert parse_address(shown, "--x") == (str(ip), port)
    with pytest.raises(ScenarioError, match="IPv6 goes in brackets"):
        parse_address(f"{ip}:{port}", "--x")


@pytest.mark.parametrize(
    ("text", "addr"),
    [
        ("example.com:443", ("example.com", 443)),
        ("localhost:1", ("localhost", 1)),
        ("a_b-c.example.:65535", ("a_b-c.example.", 65535)),
        ("[::1]:8080", ("::1", 8080)),
    ],
)
def test_names_and_literals_parse(text: str, addr: tuple[str, int]) -> None:
    assert parse_address(text, "--x") == addr
    assert parse_destination(text, "--x") == addr


def test_a_socket_address_is_shown_without_its_flow_and_scope() -> None:
    assert format_address(("::1", 7443, 0, 0)) == "[::1]:7443"
    assert format_address(("localhost", 80)) == "localhost:80"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8080", "expected HOST:PORT"),
        (":8080", "expected HOST:PORT"),
        ("host:", "expected HOST:PORT"),
        ("host:0", "expected HOST:PORT"),
        ("host:65536", "expected HOST:PORT"),
        ("host:８０", "expected HOST:PORT"),
        ("host: 80", "expected HOST:PORT"),
        ("[]:80", "expected HOST:PORT"),
        ("0x7f000001:80", "read as the IPv4 address 127.0.0.1"),
        ("10.1:80", "read as the IPv4 address 10.0.0.1"),
        ("[127.0.0.1]:80", "neither an IP address nor a host name"),
        ("[example.com]:80", "neither an IP address nor a host name"),
        ("::1:80", "neither an IP address nor a host name"),
        ("-bad.example:80", "neither an IP address nor a host name"),
        ("a b:80", "neither an IP address nor a host name"),
        ("1.2.3.4.5:80", "neither an IP address nor a host name"),
        (f"{'a' * 64}.example:80", "neither an IP address nor a host name"),
    ],
)
def test_invalid_forms_are_one_error_naming_the_flag(text: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as caught:
        parse_address(text, "--listen", "relay.toml")
    assert caught.value.source == "relay.toml" and caught.value.path == "--listen"


@pytest.mark.parametrize("text", ["0.0.0.0:80", "[::]:80"])
def test_the_any_address_is_a_listener_only(text: str) -> None:
    assert parse_address(text, "--listen")[1] == 80
    with pytest.raises(ScenarioError, match="the any-address, which only a listener can use"):
        parse_destination(text, "--allow")


def test_ports_and_literals() -> None:
    assert is_port("1") and is_port("65535") and not is_port("0") and not is_port("65536")
    assert not is_port("٨٠") and not is_port("+80") and not is_port("")
    assert is_ip("::1") and is_ip("10.0.0.1") and not is_ip("[::1]") and not is_ip("localhost")


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.255.255.254", "::1", "::ffff:127.0.0.1", "::ffff:127.1.2.3", "::1%lo"],
)
def test_loopback_literals(host: str) -> None:
    """127/8, ::1, and 127/8 mapped into IPv6 (a dual-stack socket's view of an IPv4 peer)."""
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    ["10.0.0.1", "0.0.0.0", "::", "::ffff:10.0.0.1", "::ffff:0.0.0.0", "fe80::1", "128.0.0.1"],
)
def test_other_literals_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


@settings(max_examples=200)
@given(st.ip_addresses())
def test_a_literal_is_judged_by_its_address_never_resolved(ip: ipaddress._BaseAddress) -> None:
    """Every IP literal, mapped or not, is decided without a lookup."""
    mapped = getattr(ip, "ipv4_mapped", None)
    expected = (mapped or ip).is_loopback
    assert is_loopback(str(ip)) == expected


def test_localhost_resolves_to_loopback() -> None:
    """`localhost` (any case) is loopback as the resolver maps it: on every sane host."""
    assert is_loopback("localhost") and is_loopback("LOCALHOST")


@pytest.fixture
def resolver(monkeypatch):  # type: ignore[no-untyped-def]
    """A stand-in for getaddrinfo: a name's addresses from a table, else unknown."""
    table = {
        "localhost": ["127.0.0.1", "::1"],
        "LOCALHOST.": ["127.0.0.1"],
        "lo-only.test": ["127.0.1.1"],
        "mixed.test": ["127.0.0.1", "192.0.2.1"],
        "public.test": ["192.0.2.1"],
        "mapped.test": ["::ffff:127.0.0.1"],
        "empty.test": [],
    }
    asked: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0))
            for a in table[host]
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


@pytest.mark.parametrize(
    ("name", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST.", True),  # as the resolver answers it: glibc does not know it
        ("lo-only.test", True),
        ("mapped.test", True),
        ("mixed.test", False),  # a listener on it binds the public address too
        ("public.test", False),
        ("empty.test", False),
        ("unknown.test", False),  # not known to be loopback
        ("[::1]", False),  # brackets are an address's spelling, not a host
        ("", False),
    ],
)
def test_a_name_is_loopback_only_if_every_address_is(
    resolver: list[str], name: str, loopback: bool
) -> None:
    assert is_loopback(name) is loopback
    assert resolver == [name]


def test_literals_cost_no_lookup(resolver: list[str]) -> None:
    assert is_loopback("::ffff:127.0.0.1") and not is_loopback("::ffff:10.0.0.1")
    assert resolver == []


def test_a_name_the_resolver_cannot_take_is_not_loopback() -> None:
    """A NUL or a label too long for IDNA is an error inside getaddrinfo: False, no raise."""
    assert not is_loopback("a\0b")
    assert not is_loopback("x" * 64 + ".example")
    assert addresses.is_loopback("\udcff") is False
