"""The relay as a program (§12.3.5): asyncio sockets around :mod:`tierwise.proto.relay`.

:mod:`.keys` reads and writes pre-shared keys, :mod:`.session` drives one
:class:`~tierwise.proto.relay.RelayConnection` over a UDP socket, :mod:`.gateway`
accepts sessions and connects allowed destinations, :mod:`.client` serves SOCKS5
and forwarded ports. No protocol decision is made here.
"""
