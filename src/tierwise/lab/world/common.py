"""What both runs of the route world share: the gateway's command, the mix, its config.

:func:`workload` is the recorded mix (text prompts and image uploads),
:func:`route_toml` a gateway's ``route.toml`` for a strategy, :func:`scratch_dir` the
scratch space of a run; :data:`STRATEGIES` the strategies compared.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CLI", "MBIT", "OUT_TOKENS", "STRATEGIES", "route_toml", "scratch_dir", "workload"]

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]
MBIT = 1e6 / 8
OUT_TOKENS = 30
STRATEGIES = ("predictive", "static", "lowest-latency")


def workload(
    n: int,
    seed: int,
    image_bytes: tuple[int, int] = (250_000, 1_000_000),
    image_share: float = 0.3,
) -> list[dict]:
    """A recorded mix: short text prompts, and a share with an image (base64: 4/3 the bytes)."""
    import base64
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        content: list[dict] = [{"type": "text", "text": "describe " * rng.randint(5, 50)}]
        if rng.random() < image_share:
            raw = rng.randbytes(rng.randint(*image_bytes))
            url = "data:image/png;base64," + base64.b64encode(raw).decode()
            content.append({"type": "image_url", "image_url": {"url": url}})
        out.append({"messages": [{"role": "user", "content": content}], "max_tokens": OUT_TOKENS})
    return out


def route_toml(
    sites: dict[str, tuple],
    urls: dict[str, str],
    port: int,
    log: Path,
    strategy: str,
    slots: dict[str, int] | None = None,
) -> str:
    """The gateway's ``route.toml``: the sites' true values as priors, and the strategy;
    ``slots`` for a site whose server runs that many requests at once (a real engine)."""
    lines = [
        f'[decision]\nstrategy = "{strategy}"\ndeadline = "30 s"\n',
        f'[gateway]\nport = {port}\ndecisions_log = "{log}"\nprobe_interval = "1 s"\n',
    ]
    for name, (tier, rtt, up, step) in sites.items():
        lines.append(
            f'[[site]]\nname = "{name}"\ntier = "{tier}"\nurl = "{urls[name]}"\n'
            f'decode_step = "{step} s"\nprefill_per_token = "0 s"\nrtt = "{rtt} s"\n'
            + (f'uplink = "{up * 8 / 1e6} Mbit/s"\ndownlink = "1 Gbit/s"\n' if up else "")
            + (f"slots = {slots[name]}\n" if slots and name in slots else "")
        )
    return "\n".join(lines)


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A ``tierwise-lab-route-*`` directory for the gateways' configs and decisions logs,
    removed on every exit — normal, error, Ctrl-C or SIGTERM (which the CLI raises as an
    interrupt). What the user asked to keep (``--json``, ``--plot``) is written elsewhere,
    after the records have been read."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tierwise-lab-route-") as name:
        yield Path(name)
