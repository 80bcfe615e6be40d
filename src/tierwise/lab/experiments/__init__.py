"""Experiments on the bench: what runs over an emulated path, and what it is compared with.

:mod:`.request` times the §12.3.5 request in its modes (cold, warm, warm-tuned) beside
the closed form and the simulator; :mod:`.factors` changes one factor at a time;
:mod:`.throughput` measures bulk goodput under loss; :mod:`.flows` runs competing
flows on one bottleneck; :mod:`.tunnels` brings the relay and kcptun up over a path and
:mod:`.via` runs the request and a bulk transfer through them; :mod:`.rounds` captures
a cold request's upload round by round. They import the bench, never the route world,
the views or the CLI.
"""
