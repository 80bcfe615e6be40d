"""Path memory: what each session learned of its path, kept for the next one.

A new session that knows its path starts at the path's rate with FEC for its loss
(:mod:`tierwise.proto.relay.prior`); one that does not pays about two round trips.
The client keeps one record per gateway (``HOST:PORT``), the gateway one per client
address, each for the direction that end sends in: minimum RTT, highest recent
delivery rate, loss each way, datagram size, and when. Like Linux's TCP metrics
cache (``tcp_metrics``, whose entries expire after an hour: ``TCP_METRICS_TIMEOUT``)
a record older than ``MAX_AGE_S`` is not used and goes at the next save.

The file is JSON in the user's state directory (``$XDG_STATE_HOME/tierwise``, else
``~/.local/state/tierwise``; :func:`state_dir`), written whole or not at all (a
rename) with mode 0600 in a 0700 directory: it names the hosts this user talks to.
It is bounded (``MAX_PATHS`` records, the oldest go; a file above ``MAX_FILE_BYTES``
is not read) and versioned (``VERSION``). A file that cannot be read, is not JSON,
is another version's, is accessible by others or holds a malformed record is
ignored (that record, or the whole file) with one warning naming the file and what
was wrong; the next save replaces it. Memory is an optimisation: it never stops a
relay from starting.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tierwise.errors import TierwiseError
from tierwise.proto.relay.prior import PRIOR_RATE_SHARE, PathPrior
from tierwise.proto.relay.rate import INITIAL_CWND_PACKETS

__all__ = [
    "FORMAT",
    "MAX_AGE_S",
    "MAX_PATHS",
    "SAVE_EVERY_S",
    "VERSION",
    "PathMemory",
    "default_path",
    "state_dir",
]

log = logging.getLogger("tierwise.relay.pathmemory")
FORMAT = "tierwise relay path memory"
VERSION = 1
MAX_AGE_S = 3600.0  # Linux's TCP_METRICS_TIMEOUT: a path an hour unused may have changed
MAX_PATHS = 256  # records kept (the oldest go): a gateway's busiest clients, a client's gateways
MAX_FILE_BYTES = 1 << 20  # 256 records are ≈ 60 kB; a larger file is not ours
FUTURE_SLACK_S = 60.0  # a record dated later than now by more is a clock that jumped
SAVE_EVERY_S = 30.0  # a running end writes at most this often (and when it stops)
MIN_PACKETS = 32  # a session that sent fewer measured nothing worth keeping
_FIELDS = {  # a record's numbers: (lowest, highest); "at" is checked against the clock
    "min_rtt_s": (1e-6, 60.0),
    "rate_out_bytes_per_s": (0.0, 1e11),
    "loss_out": (0.0, 1.0),
    "loss_in": (0.0, 1.0),
    "datagram_bytes": (200, 65_000),
    "at": (0.0, 1e11),
}


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/tierwise`` (an absolute one; XDG Base Directory spec), else
    ``~/.local/state/tierwise``."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME", "")
    if not base or not os.path.isabs(base):  # the spec: a relative value is ignored
        base = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(base) / "tierwise"


def default_path(side: str, env: Mapping[str, str] | None = None) -> Path:
    """The state file of a client or a gateway."""
    return state_dir(env) / f"relay-{side}-paths.json"


class PathMemory:
    """The records of one end (``side``: "client" or "gateway"), loaded from ``path``."""

    def __init__(
        self,
        path: Path,
        side: str,
        *,
        max_age_s: float = MAX_AGE_S,
        max_paths: int = MAX_PATHS,
    ) -> None:
        self.path, self.side = Path(path), side
        self.max_age_s, self.max_paths = max_age_s, max_paths
        self.records: dict[str, dict[str, float]] = {}
        self.warnings: list[str] = []  # what load() found wrong (each also logged)

    # ------------------------------------------------------------------ reading
    def load(self) -> PathMemory:
        """Read the file (a missing one is an empty memory); every problem is a warning."""
        self.records = {}
        try:
            data = self._read()
        except _Unusable as exc:
            self._warn(f"{exc}: ignored, replaced at the next save")
            return self
        if data is None:
            return self
        for peer, record in data.items():
            checked = _checked(record)
            if isinstance(checked, str):
                self._warn(f"record {peer!r}: {checked}: ignored")
                continue
            self.records[peer] = checked
        return self

    def _read(self) -> dict[str, Any] | None:
        try:
            st = self.path.lstat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _Unusable(f"cannot read it: {exc.strerror or exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise _Unusable("not a regular file")
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise _Unusable(f"accessible by others (mode {stat.S_IMODE(st.st_mode):04o})")
        if st.st_size > MAX_FILE_BYTES:
            raise _Unusable(f"{st.st_size:,} bytes, more than {MAX_FILE_BYTES:,}")
        from tierwise.tomlfile import read_json

        try:
            data = read_json(self.path)
        except TierwiseError as exc:
            raise _Unusable(str(exc).removeprefix(f"{self.path}: ")) from None
        version = data.get("version")
        if data.get("format") != FORMAT or not isinstance(version, int):
            raise _Unusable("not a path memory file (no format and version)")
        if version != VERSION:
            raise _Unusable(f"version {version}, this tierwise reads version {VERSION}")
        if data.get("side") != self.side:
            raise _Unusable(f"a {data.get('side')!r} memory, not a {self.side!r} one")
        paths = data.get("paths")
        if not isinstance(paths, dict):
            raise _Unusable("'paths' is not an object")
        return paths

    def _warn(self, what: str) -> None:
        message = f"path memory {self.path}: {what}"
        self.warnings.append(message)
        log.warning("%s", message)

    # ------------------------------------------------------------------ using
    def recall(self, peer: str, now_wall_s: float) -> PathPrior | None:
        """The prior a new session to ``peer`` starts from; None: unknown, aged or unmeasured."""
        record = self.records.get(peer)
        if record is None or not self._fresh(record, now_wall_s):
            return None
        rate, rtt = record["rate_out_bytes_per_s"], record["min_rtt_s"]
        if rate <= 0:
            return None
        # never below a new session's own start (32 datagrams per round trip): a record of
        # small flights under-measures the path, and would slow its start, not speed it
        cold = INITIAL_CWND_PACKETS * record["datagram_bytes"] / rtt / PRIOR_RATE_SHARE
        return PathPrior(
            min_rtt_s=rtt,
            rate_bytes_per_s=min(max(rate, cold), 1e11),
            loss=min(max(record["loss_out"], record["loss_in"]), 0.5),
            datagram_bytes=int(record["datagram_bytes"]),
        )

    def _fresh(self, record: Mapping[str, float], now_wall_s: float) -> bool:
        age = now_wall_s - record["at"]
        return -FUTURE_SLACK_S <= age <= self.max_age_s

    def remember(self, peer: str, estimate: Mapping[str, float], now_wall_s: float) -> bool:
        """Fold in what a session measured (``RelayConnection.path_estimate()``); whether a
        record changed. A session too short to have measured anything changes nothing. A
        rate lower than a fresh record's replaces it only if its flights were at least a
        new session's first window (32 datagrams in a round trip) and found the bottleneck
        (``rate_is_path``: start-up over): smaller flights measure the application, and
        flights paced at the remembered rate measure that rate, not the path. A flight the
        peer took in at its pace (``rate_kept_bytes_per_s``) raises the record to that pace
        even when its ACK trains, timed late by a busy host, read below it: a record too
        low grows by the pace's 1.25 × per session, and one grown past the path is lowered
        by the next session's queued train."""
        rtt = float(estimate.get("min_rtt_s", 0.0))
        if estimate.get("packets_sent", 0) < MIN_PACKETS or not 0 < rtt <= 60:
            return False
        old = self.records.get(peer)
        rate = float(estimate.get("rate_out_bytes_per_s", 0.0))
        # a paced flight the peer took in at its pace: the path carries at least that pace
        # (a record too low grows from sessions paced above it, ACKs timed late or not)
        rate = max(rate, float(estimate.get("rate_kept_bytes_per_s", 0.0)))
        datagram = int(estimate.get("datagram_bytes", 1350))
        if old is not None and self._fresh(old, now_wall_s) and rate < old["rate_out_bytes_per_s"]:
            # a session that never found the bottleneck (its flights paced at the remembered
            # rate measure that rate, or less) says nothing of a slower path: keep the record's
            small = rate * rtt < INITIAL_CWND_PACKETS * datagram
            if small or not estimate.get("rate_is_path", 1):
                rate = old["rate_out_bytes_per_s"]
        self.records[peer] = {
            "min_rtt_s": rtt,
            "rate_out_bytes_per_s": rate,
            "loss_out": min(max(float(estimate.get("loss_out", 0.0)), 0.0), 1.0),
            "loss_in": min(max(float(estimate.get("loss_in", 0.0)), 0.0), 1.0),
            "datagram_bytes": datagram,
            "at": now_wall_s,
        }
        return True

    # ------------------------------------------------------------------ writing
    def save(self, now_wall_s: float) -> bool:
        """Write the fresh records (at most ``max_paths``, newest first) whole, mode 0600;
        a failure is a warning (memory never stops the relay). Whether it was written."""
        fresh = sorted(
            ((p, r) for p, r in self.records.items() if self._fresh(r, now_wall_s)),
            key=lambda item: -item[1]["at"],
        )[: self.max_paths]
        self.records = dict(fresh)
        body = {"format": FORMAT, "version": VERSION, "side": self.side, "paths": self.records}
        text = json.dumps(body, indent=1, sort_keys=True) + "\n"
        try:
            _write_private(self.path, text)
        except OSError as exc:
            log.warning("path memory %s: cannot write it: %s", self.path, exc.strerror or exc)
            return False
        return True


class _Unusable(Exception):
    """The file as a whole cannot be used (the reason is the message)."""


def _checked(record: Any) -> dict[str, float] | str:
    """A record with every field a finite number in range, or what is wrong with it."""
    if not isinstance(record, dict):
        return "not an object"
    out: dict[str, float] = {}
    for key, (low, high) in _FIELDS.items():
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{key} missing or not a number"
        if not (math.isfinite(value) and low <= value <= high):
            return f"{key} = {value!r} outside [{low:g}, {high:g}]"
        out[key] = value
    return out


def _write_private(path: Path, text: str) -> None:
    """``text`` into ``path`` by a rename (whole or not at all), mode 0600, in a directory
    created 0700 (XDG: "should be ... only accessible by the user")."""
    from tierwise.outfile import staged

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with staged(path) as tmp:
        os.chmod(tmp, 0o600)
        tmp.write_text(text, encoding="utf-8")
