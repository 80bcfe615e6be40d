"""Network addresses, one rule each: reading ``host:port``, showing it, and loopback.

- :func:`parse_address` reads ``host:port`` or ``[v6]:port`` as the command line and
  config files give it (a DNS name or an IP literal, the port 1–65535 in ASCII digits);
  :func:`parse_destination` also refuses the any-address, which only a listener can use.
- :func:`format_address` shows an address the way those functions read it:
  ``127.0.0.1:8080``, ``[::1]:8080``.
- :func:`is_loopback` says whether a host is this machine's loopback and nothing else.

The loopback rule. An IP literal is loopback if it lies in 127.0.0.0/8, is ``::1``, or
is an IPv4-mapped IPv6 address of 127.0.0.0/8 (``::ffff:127.0.0.1``: a dual-stack socket
shows IPv4 peers so); an IPv6 zone (``::1%lo``) does not change the answer. A name,
``localhost`` included, is resolved as a listener resolves it (``getaddrinfo``, passive,
every family) and is loopback only if it resolves and *every* address it resolves to is
loopback: a listener on a name binds all of them, so one public address among its
loopback ones would make it listen publicly. ``localhost`` is loopback wherever
``/etc/hosts`` says so (everywhere sane); a name that does not resolve (``localhost.``
on glibc) is not known to be loopback, and ``[::1]`` is an address's spelling, not a
host. Only a name costs a lookup; an IP literal never does.
"""

from __future__ import annotations

import ipaddress
import re
import socket

from tierwise.errors import ScenarioError, shown

__all__ = [
    "format_address",
    "is_ip",
    "is_loopback",
    "is_port",
    "parse_address",
    "parse_destination",
]

_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def parse_address(text: str, flag: str, source: str | None = None) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``; the host an IP literal or a DNS name, the port
    1–65535 in ASCII digits. ``flag`` (and ``source``, a file) name where it came from."""
    host, sep, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    if not sep or not host or not is_port(port):
        raise ScenarioError(
            f"expected HOST:PORT with a port from 1 to 65535, got {shown(text)}",
            source=source, path=flag,
        )  # fmt: skip
    numeric = _numeric_ipv4(host)
    if numeric is not None and numeric != host:
        raise ScenarioError(
            f"{shown(host)} is read as the IPv4 address {numeric} (a hex, octal or "
            f"shortened spelling); write {numeric}",
            source=source, path=flag,
        )  # fmt: skip
    if not _valid_host(host, bracketed):
        raise ScenarioError(
            f"{shown(host)} is neither an IP address nor a host name "
            "(IPv6 goes in brackets: [::1]:8000)",
            source=source, path=flag,
        )  # fmt: skip
    return host, int(port)


def parse_destination(text: str, flag: str, source: str | None = None) -> tuple[str, int]:
    """:func:`parse_address` for an address to connect to: never 0.0.0.0 or ``[::]``, which
    mean "any address" only to a listener; as a destination Linux takes them for this
    host, so ``--allow 0.0.0.0:80`` would open this host's port 80 to every client, not
    "any host on port 80"."""
    host, port = parse_address(text, flag, source)
    if is_ip(host) and ipaddress.ip_address(host).is_unspecified:
        raise ScenarioError(
            f"{shown(text)} is the any-address, which only a listener can use; "
            "name the host to connect to",
            source=source, path=flag,
        )  # fmt: skip
    return host, port


def format_address(addr: tuple[str, int] | tuple[str, int, int, int]) -> str:
    """``host:port``, an IPv6 host in brackets (``[::1]:7443``), as :func:`parse_address`
    reads it; a socket address's flow info and scope id (IPv6) are left out."""
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_port(text: str) -> bool:
    """1–65535 written in ASCII digits (``int()`` also reads "８０" and " 80")."""
    return text.isascii() and text.isdigit() and len(text) <= 5 and 0 < int(text) < 65536


def is_ip(host: str) -> bool:
    """Whether ``host`` is an IP literal (no brackets), not a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """Whether ``host`` is loopback and nothing else, by the rule of the module docstring:
    an IP literal by its address (127/8, ``::1``, ``::ffff:127.x.y.z``), a name by every
    address it resolves to."""
    literal = _loopback_literal(host)
    if literal is not None:
        return literal
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError):  # ValueError: a NUL in the name
        return False
    return bool(infos) and all(_loopback_literal(str(info[4][0])) for info in infos)


def _loopback_literal(text: str) -> bool | None:
    """Whether the IP literal ``text`` is loopback; None if it is not an IP literal."""
    try:
        ip = ipaddress.ip_address(text)  # an IPv6 zone (``::1%lo``) is read and kept apart
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _numeric_ipv4(host: str) -> str | None:
    """The dotted quad the C resolver reads in ``host`` (``inet_aton`` takes ``0x0``,
    ``0x0a000001`` and ``10.1`` as addresses), or None for a real name. Such a spelling
    passes as a name, so every check of an address (the any-address as a destination,
    loopback for a listener) would judge a name the resolver turns into 0.0.0.0."""
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except (OSError, UnicodeError, ValueError):
        return None


def _valid_host(host: str, bracketed: bool) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None:
        return bracketed == (ip.version == 6)
    if bracketed or len(host) > 253 or host.replace(".", "").isdigit():
        return False
    return all(_LABEL.fullmatch(label) for label in host.rstrip(".").split("."))
