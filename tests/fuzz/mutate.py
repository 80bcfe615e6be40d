"""A seeded mutator over the bundled TOML files: each case is reproducible from its index.

A case is a command (``plan``, ``sim``, ``catalog``), the mutated file's bytes and any
``--set`` arguments. Mutations aim at the classes of fault seen before: numbers at the
edge of floating point, quantities in odd spellings or with arithmetic, wrong types,
missing and misspelt keys, non-UTF-8 bytes, deep nesting and truncation.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources

NUMBERS = [
    "0", "-1", "1", "-0", "0.5", "1e308", "-1e308", "1e-308", "5e-324", "1e400", "1e-400",
    "nan", "inf", "-inf", "9" * 40, "9" * 5000, "2147483648", "9223372036854775808",
    "1_000_000_000", "1000000000", "1e30", "0x7fffffff",
]  # fmt: skip
QUANTITIES = [
    "1e-308 Mbit/s", "5e-324 B", "1e308 s", "1e308 B", "1e400 ms", "10**400 ms", "9**9**9 MB",
    "50 mbps", "3 mB", "1 KB", "2 Kbps", "20 Mbps", "20 Mb/s", "1 Gbps", "0 s", "0 B",
    "0 Mbit/s", "-1 s", "nan s", "inf MB", "1e-12 s", "1e15 B", "1e18 B", "1e9 s", "1 h",
    "3 parsecs", "", " ", "MB", "1", "1" * 30_000 + " B", "0.000001 ms", "1e-9 W", "1 TFLOP/s",
    "1e30 FLOP", "100 GB", "1 TB", "1 bit/s", "1e-3 B",
    "5 mHz", "10 Mm", "1 mFLOP", "1,000 MB", "1 000 MB", "14 %", "1,5 s",
]  # fmt: skip
VALUES = [
    "true", "[]", "[1, 2]", '["a", "b"]', "{}", '{ a = 1 }', '"x"', '"' + "y" * 5000 + '"',
    "1979-05-27", '""', "[[1], [2]]", '["1 s", "2 s", "3 s"]', "[490, 0]", '["0 J", "0 J"]',
    "false", '"14%"', '"3.6 %"', '"1,000"', "[true, false]",
]  # fmt: skip
SET_VALUES = [*QUANTITIES, *NUMBERS, *VALUES, "1" * 5000, "[" * 3000 + "]" * 3000]

GENTLE_POWERS = (-6, -3, -1, 1, 2, 3, 6)

_ASSIGN = re.compile(r'^(\s*)([A-Za-z0-9_."-]+)(\s*=\s*)(.+?)\s*$')


@dataclass
class Case:
    index: int
    command: str  # plan | sim | catalog
    origin: str  # the bundled file mutated
    data: bytes
    sets: list[str] = field(default_factory=list)
    plot: bool = False
    mutations: list[str] = field(default_factory=list)

    def args(self, path: str, plot_dir: str) -> list[str]:
        if self.command == "catalog":
            return ["catalog", "--catalog", path, "--json"]
        args = [self.command, path, "--json"]
        if self.command == "sim":
            # The default budget (5,000,000 packets: minutes, with a progress bar) is
            # tested in tests/sim/test_run_bounds.py; a case must end within its time
            # limit, so the fuzz runs sims on a budget of seconds and meets the refusal.
            args += ["--max-packets", "100000"]
        for item in self.sets:
            args += ["--set", item]
        if self.plot:
            args += ["--plot", plot_dir]
        return args


def corpus() -> list[tuple[str, str, str]]:
    """(command, origin, text) for every bundled example, sim file and catalog file."""
    found = []
    examples = resources.files("tierwise.examples")
    for item in sorted(examples.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".toml"):
            text = item.read_text(encoding="utf-8")
            command = "sim" if item.name.startswith("sim-") else "plan"
            found.append((command, item.name, text))
    data = resources.files("tierwise.catalog").joinpath("data")
    for item in sorted(data.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".toml"):
            found.append(("catalog", item.name, item.read_text(encoding="utf-8")))
    return found


def _assignments(lines: list[str]) -> list[int]:
    return [
        i
        for i, line in enumerate(lines)
        if _ASSIGN.match(line) and not line.lstrip().startswith("#")
    ]


def _set_value(rng: random.Random, lines: list[str], value: str) -> str:
    spots = _assignments(lines)
    if not spots:
        return "none"
    i = rng.choice(spots)
    m = _ASSIGN.match(lines[i])
    assert m is not None
    lines[i] = f"{m[1]}{m[2]}{m[3]}{value}"
    return f"{m[2]} = {value[:40]}"


def _number(rng: random.Random, lines: list[str]) -> str:
    spots = [i for i in _assignments(lines) if re.search(r"=\s*-?[\d.]+\s*$", lines[i])]
    if not spots:
        return _set_value(rng, lines, rng.choice(NUMBERS))
    i = rng.choice(spots)
    new = rng.choice(NUMBERS)
    lines[i] = re.sub(r"=\s*-?[\d.]+\s*$", f"= {new}", lines[i])
    return f"number {lines[i][:50]}"


def _quantity(rng: random.Random, lines: list[str]) -> str:
    spots = [i for i in _assignments(lines) if re.search(r'"[-\d.e]+ ?[A-Za-zµ/]+"', lines[i])]
    if not spots:
        return _set_value(rng, lines, f'"{rng.choice(QUANTITIES)}"')
    i = rng.choice(spots)
    new = rng.choice(QUANTITIES)
    lines[i] = re.sub(r'"[-\d.e]+ ?[A-Za-zµ/]+"', f'"{new}"', lines[i], count=1)
    return f"quantity {lines[i][:50]}"


def _scale(rng: random.Random, lines: list[str], powers: tuple[int, ...] = ()) -> str:
    """Multiply one quantity's number by a power of ten (a plausible but extreme input)."""
    spots = [i for i in _assignments(lines) if re.search(r'"([\d.]+)( ?[A-Za-zµ/]+)"', lines[i])]
    if not spots:
        return "none"
    i = rng.choice(spots)
    power = rng.choice(powers or (-300, -30, -12, -6, -3, -1, 1, 2, 3, 6, 9, 12, 30, 300))
    lines[i] = re.sub(
        r'"([\d.]+)( ?[A-Za-zµ/]+)"', lambda m: f'"{m[1]}e{power}{m[2]}"', lines[i], count=1
    )
    return f"scale {lines[i][:50]}"


def _value(rng: random.Random, lines: list[str]) -> str:
    return _set_value(rng, lines, rng.choice(VALUES))


def _delete_line(rng: random.Random, lines: list[str]) -> str:
    if lines:
        i = rng.randrange(len(lines))
        return f"delete {lines.pop(i)[:40]}"
    return "none"


def _duplicate_line(rng: random.Random, lines: list[str]) -> str:
    if lines:
        i = rng.randrange(len(lines))
        lines.insert(rng.randrange(len(lines) + 1), lines[i])
        return f"duplicate {lines[i][:40]}"
    return "none"


def _misspell(rng: random.Random, lines: list[str]) -> str:
    spots = _assignments(lines)
    if not spots:
        return "none"
    i = rng.choice(spots)
    m = _ASSIGN.match(lines[i])
    assert m is not None
    key = m[2]
    j = rng.randrange(len(key))
    key = key[:j] + key[j + 1 :] if len(key) > 1 else key + "x"
    lines[i] = f"{m[1]}{key}{m[3]}{m[4]}"
    return f"misspell {key}"


def _deep(rng: random.Random, lines: list[str]) -> str:
    n = rng.choice([20, 100, 1000, 5000])
    form = rng.randrange(3)
    if form == 0:
        lines.append("deep = " + "[" * n + "]" * n)
    elif form == 1:
        lines.append("[" + ".".join(f"k{i}" for i in range(n)) + "]")
        lines.append("x = 1")
    else:
        lines.append("deep = " + "{ a = " * min(n, 2000) + "1" + " }" * min(n, 2000))
    return f"deep {form} {n}"


def _table_type(rng: random.Random, lines: list[str]) -> str:
    headers = [i for i, line in enumerate(lines) if line.startswith("[")]
    if not headers:
        return "none"
    i = rng.choice(headers)
    name = lines[i].strip("[] ")
    lines[i] = ""
    value = rng.choice(["5", "[]", '"x"'])
    lines.insert(0, f"{name.split('.')[0]} = {value}")
    return f"not a table {name}"


# Weighted towards mutations that keep a file valid but extreme, so that most cases
# reach the planner or the simulator; structural breakage is rarer but always present.
TEXT_MUTATIONS: list[tuple[Callable[[random.Random, list[str]], str], int]] = [
    (_scale, 6), (_number, 4), (_quantity, 4), (_value, 2), (_delete_line, 2),
    (_misspell, 1), (_duplicate_line, 1), (_deep, 1), (_table_type, 1),
]  # fmt: skip


def _mutation(rng: random.Random) -> Callable[[random.Random, list[str]], str]:
    functions, weights = zip(*TEXT_MUTATIONS, strict=True)
    return rng.choices(functions, weights)[0]


def _bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    form = rng.randrange(5)
    at = rng.randrange(len(data) + 1)
    if form == 0:
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        return data[:at] + junk + data[at:], "random bytes"
    if form == 1:
        return data.replace(b"e", b"\xe9", 1), "latin-1"
    if form == 2:
        return b"\xef\xbb\xbf" + data, "bom"
    if form == 3:
        return data[:at], "truncate"
    return data[:at] + b"\xff" + data[at:], "0xff"


def _plots(command: str, origin: str) -> bool:
    """Whether this case's command takes --plot (plan, and sim on a [[flow]] file)."""
    return command == "plan" or origin == "sim-flows.toml"


def make_case(index: int, seed: int = 0) -> Case:
    """The case numbered ``index`` (a function of ``seed`` and ``index`` only)."""
    rng = random.Random(f"{seed}:{index}")
    files = corpus()
    command, origin, text = files[index % len(files)]
    lines = text.splitlines()
    case = Case(index, command, origin, b"")
    if rng.random() < 0.4:  # valid but extreme: reaches the planner's and simulator's arithmetic
        for _ in range(rng.choice([1, 2])):
            case.mutations.append(_scale(rng, lines, GENTLE_POWERS))
        case.data = ("\n".join(lines) + "\n").encode("utf-8")
        case.plot = _plots(command, origin) and rng.random() < 0.05
        return case
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        case.mutations.append(_mutation(rng)(rng, lines))
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if rng.random() < 0.08:
        data, what = _bytes(rng, data)
        case.mutations.append(what)
    if command == "plan" and rng.random() < 0.25:
        case.sets = [_set_item(rng, text)]
    case.plot = _plots(command, origin) and rng.random() < 0.05
    case.data = data
    return case


def _set_item(rng: random.Random, text: str) -> str:
    """A ``--set`` of a key the original file has (or a made-up one) to an odd value."""
    keys, table = [], ""
    for line in text.splitlines():
        if line.startswith("["):
            table = line.strip("[] ")
        elif table != "site" and (m := _ASSIGN.match(line)) and table:
            keys.append(f"{table}.{m[2]}")
    for block in re.split(r"^\[\[site\]\]\s*$", text, flags=re.M)[1:]:
        body = block.split("\n[")[0]
        name = re.search(r'^name\s*=\s*"([^"]+)"', body, re.M)
        if name:
            keys += [f"site.{name[1]}.{k}" for k in re.findall(r"^([a-z_]+)\s*=", body, re.M)]
    key = rng.choice(keys) if keys and rng.random() < 0.9 else "task.nosuch"
    return f"{key}={rng.choice(SET_VALUES)}"


# ------------------------------------------------------------------ tierwise calc


LIST_VALUES = [
    "1 s, 1e400 s", "[" * 3000 + "]" * 3000, "[1, [2]]", ", , ,", ",".join(["1 s"] * 2000),
    "0 J, 0 J", "490, 0", "nan, inf", "9" * 5000 + " s",
]  # fmt: skip


def _calc_pool(rng: random.Random, kind: str) -> list[str]:
    """Hostile values for a parameter of ``kind``; now and then of another kind altogether."""
    if rng.random() < 0.15:
        return [*QUANTITIES, *NUMBERS, *VALUES]
    if kind.startswith("list:"):
        return [*LIST_VALUES, *VALUES, *QUANTITIES]
    if kind in ("int", "float"):
        return NUMBERS
    if kind in ("str", "bool"):
        return [*VALUES, *NUMBERS]
    return [*QUANTITIES, *NUMBERS[:4]]


def make_calc_case(index: int, seed: int = 0) -> list[str]:
    """``tierwise calc NAME --param=hostile … --json``: every entry in turn, 1–3 params changed."""
    from tierwise.calc import REGISTRY

    rng = random.Random(f"calc:{seed}:{index}")
    entry = REGISTRY[sorted(REGISTRY)[index % len(REGISTRY)]]
    chosen = rng.sample(entry.params, min(len(entry.params), rng.choice([1, 1, 2, 3])))
    return [
        "calc",
        entry.name,
        *(f"{p.flag}={rng.choice(_calc_pool(rng, p.kind))}" for p in chosen),
        "--json",
    ]


# ------------------------------------------------------------------ tierwise lab request

LAB_OPTIONS = {
    "--size": "size", "--response": "size", "--proc": "time", "--rtt": "time",
    "--rate": "rate", "--runs": "int", "--seed": "int", "--loss-up": "float",
    "--loss-down": "float", "--factor": "factor", "--modes": "str",
    "--loss": "float", "--via": "via",
}  # fmt: skip
FACTOR_VALUES = ["initcwnd=10,", "idle=0s,", "cc=cubic,", "initcwnd=", "nosuch=1,"]
VIA_VALUES = ["direct", "relay", "direct,relay,kcptun", "relay,", ",", "relay,relay", "tcp"]
# `lab throughput --via`: bulk through the transports
VIA_BULK_OPTIONS = {
    "--via": "via", "--size": "size", "--duration": "time", "--loss": "str",
    "--cc": "str", "--rate": "rate", "--rtt": "time",
}  # fmt: skip


def make_lab_case(index: int, seed: int = 0) -> list[str]:
    """``tierwise lab request`` (or ``lab throughput --via``) with 1–2 hostile option values
    (run as a non-root user)."""
    rng = random.Random(f"lab:{seed}:{index}")
    bulk = index % 4 == 3  # every fourth case: `lab throughput --via`
    options = VIA_BULK_OPTIONS if bulk else LAB_OPTIONS
    args = ["lab", "throughput", f"--via={rng.choice(VIA_VALUES)}"] if bulk else ["lab", "request"]
    for flag in rng.sample(sorted(options), rng.choice([1, 1, 2])):
        kind = options[flag]
        value = rng.choice(_calc_pool(rng, kind if kind not in ("factor", "via") else "str"))
        if kind == "factor":
            value = rng.choice(FACTOR_VALUES) + value
        elif kind == "via":
            value = rng.choice([*VIA_VALUES, rng.choice(VIA_VALUES) + value])
        elif kind in ("size",) and rng.random() < 0.3:
            value = rng.choice(NUMBERS)  # a bare byte count
        args.append(f"{flag}={value}")
    return args


# ------------------------------------------------------------------ tierwise sweep

SWEEP_KEYS = [
    "site.cloud.uplink", "site.cloud.rtt", "site.workstation.downlink", "task.rounds",
    "task.deadline", "task.upload", "task.client_work", "site.workstation.decode_slowdown",
    "decision.objective", "decision.weights.time", "site.cloud.loss", "site.nosuch.rtt",
    "task.roundz", "site.cloud", "", "site.cloud.uplink.x",
]  # fmt: skip
SWEEP_SPECS = [
    "1..100 Mbit/s:log:7", "20..300 ms:5", "5,10,20", "0..0.2:3", "1..2 s:0", "1..2 s:-1",
    "1..2 s", "..:3", "1..2:log:3", "0..10 Mbit/s:log:3", "-5..5 ms:3", "nan..1 s:2",
    "1e308..1e309 ms:3", "1..2 ms:" + "9" * 5000, "1..2 ms:99999", "1..2 parsec:3", ",", "a,b",
    "energy,time,cost,pareto", "1e-300..1e-299 s:2", "1,2,,3", "1 Mbit/s" * 500, "[1, 2]",
    "1..2 ms:2000000", "0..1e6:4",
]  # fmt: skip
# No --scheduler here: a forked child inherits the parent's Dask event-loop threads
# (another test's cluster) and can hang in them; tests/cli/test_errors.py runs the
# hostile scheduler addresses in fresh processes instead.
SWEEP_OPTIONS = {
    "--workers": ["0", "-1", "65", "1e9", "x", "2"],
    "--runs": ["0", "10001", "nan", "3"],
    "--map": ["task.rounds", "a,b", ",", "task.rounds,task.rounds", "x" * 3000],
    "--set": ["task.rounds=0", "decision.weights.time=1e7", "task.deadline=1e400 s", "x"],
    "--out": ["s.csv", "{dir}/no/such/s.parquet", "{dir}", "{dir}/s.pq"],
    "--csv": ["s.parquet", "{dir}/s.csv"],
    "--html": ["s.png", "{dir}/p.html"],
}


VALID_AXES = {
    "site.cloud.uplink": ["1..100 Mbit/s:log:7", "1e-3..1e3 Mbit/s:log:5", "6.4 Mbit/s,1 Gbit/s"],
    "site.cloud.rtt": ["20..300 ms:5", "0..1e4 s:3", "1 ps,1 s"],
    "task.rounds": ["5,10,20", "1..1000000:4", "1"],
    "task.deadline": ["1 ps,45 s,1e9 s", "1..100 s:log:4"],
    "task.upload": ["0 B,0.8 MB,1 TB", "1..1e12 B:log:4"],
    "site.workstation.decode_slowdown": ["1,3", "1..100:3"],
    "decision.objective": ["energy,time,cost,pareto"],
    "decision.weights.time": ["0,1,1e6", "0..10:3"],
    "site.cloud.loss": ["0,0.01"],
}


def make_sweep_case(index: int, seed: int = 0) -> list[str]:
    """``tierwise sweep`` of the bundled §12.5 example: valid but extreme axes (half the
    cases reach the planner and write rows), with hostile ``--vary`` specs and options.

    ``{dir}`` stands for the case's working directory; a ``--out`` there is always given
    so that a run that succeeds leaves rows to check.
    """
    rng = random.Random(f"sweep:{seed}:{index}")
    path = str(resources.files("tierwise.examples").joinpath("deployment.toml"))
    args = ["sweep", path]
    for key in rng.sample(sorted(VALID_AXES), rng.choice([1, 2, 3])):
        args += ["--vary", f"{key}={rng.choice(VALID_AXES[key])}"]
    if rng.random() < 0.5:
        args += ["--vary", f"{rng.choice(SWEEP_KEYS)}={rng.choice(SWEEP_SPECS)}"]
    for option in rng.sample(sorted(SWEEP_OPTIONS), rng.choice([0, 0, 1, 2])):
        args += [option, rng.choice(SWEEP_OPTIONS[option])]
    if "--out" not in args:
        args += ["--out", "{dir}/rows.parquet"]
    return args


RELAY_BASE = {
    "gateway": {"listen": '"127.0.0.1:7443"', "allow": '["127.0.0.1:8000", "[::1]:8000"]',
                "max_sessions": "64", "max_streams": "1024", "log_level": '"info"'},
    "client": {"gateway": '"gw.example:7443"', "socks": '"127.0.0.1:1080"',
               "forward": '["127.0.0.1:8000=10.0.0.5:8000"]', "connect_timeout": '"10 s"',
               "udp_buffer": "1048576", "log_level": '"info"', "public_forward": "false"},
}  # fmt: skip
RELAY_ADDRESSES = [
    '"127.0.0.1:0"', '"[::1]:70000"', '"::1:80"', '"300.1.1.1:80"', '"a..b:80"', '":80"',
    '"h:"', '"h:-1"', '"h:0x50"', '"' + "a" * 300 + ':80"', '"[fe80::1%eth0]:80"', '"h:８０"',
    '["1.2.3.4:80"]', '["=", "a=b"]', '["1.2.3.4:80=h:1"]', '"0x0:80"', '"0x7f.1:80"',
    '["0.0.0.0:8000=h:1"]', '["[::]:8000=h:1"]', '["0x0a000001:8000=h:1"]',
]  # fmt: skip

RELAY_GENTLE = [
    '"[::1]:7443"', '"localhost:1"', '"a-b.example.:65535"', "1", "4096", "65536", '"0.1 s"',
    '"300 s"', '"1 min"', '"debug"', '["[::1]:1=[::1]:2"]', "[]", "1024", "true",
]  # fmt: skip


def make_relay_case(index: int, seed: int = 0) -> tuple[list[str], str]:
    """``relay gateway|client --config F --check`` with 1–2 hostile keys: args and F's text."""
    rng = random.Random(f"relay:{seed}:{index}")
    command = rng.choice(sorted(RELAY_BASE))
    cfg = dict(RELAY_BASE[command])
    for key in rng.sample(sorted(cfg), rng.choice([1, 1, 2])):
        pool = [*RELAY_ADDRESSES, *VALUES, *NUMBERS, *(f'"{q}"' for q in QUANTITIES[:30])]
        cfg[key] = rng.choice(RELAY_GENTLE if rng.random() < 0.3 else pool)
    if rng.random() < 0.2:
        cfg[rng.choice(["alow", "key", "gateway ", "max-streams"])] = '"x"'
    text = "".join(f"{k} = {v}\n" for k, v in cfg.items())
    return ["relay", command, "--check"], text


# ------------------------------------------------------------------ relay flags

# A valid command line per command, and hostile values for each flag that must be refused:
# exit 2, one stderr line naming the flag (or the file it came from), nothing on stdout.
RELAY_FLAG_BASE = {
    "gateway": ["relay", "gateway", "--check", "--allow", "127.0.0.1:9"],
    "client": ["relay", "client", "--check", "--gateway", "127.0.0.1:7443"],
}
_BAD_ADDRESSES = [
    "", ":80", "h:", "h:0", "h:65536", "h:-1", "h:+80", "h: 80", "h:８０", "h:0x50", "::1:80",
    "[127.0.0.1]:80", "[::1", "*:80", "a..b:80", "300.1.1.1:80", "h\udcff:80", "1.2.3.4:99999",
    "0x0:80", "0x7f.1:80", "10.1:80", "1.2.3.4 :80",  # IPv4 in spellings inet_aton reads
]  # fmt: skip
RELAY_BAD_FLAGS: dict[str, dict[str, list[str]]] = {
    "gateway": {
        "--listen": _BAD_ADDRESSES,
        "--allow": [*_BAD_ADDRESSES, "10.0.0.0/8:80", "h:1,h:2", "0.0.0.0:80", "[::]:80"],
        "--stats": ["", "0", "65536", "８０", "x", "h:0"],
        "--log-level": ["", "trace", "\udcff"],
        "--max-sessions": ["0", "4097", "x", "1e3"],
        "--stream-window": ["", "16", "nan MiB", "1e400 B", "99 GiB"],
        "--max-datagram": ["", "199", "1350.0", "１３５０", "65001"],
    },
    "client": {
        "--gateway": [*_BAD_ADDRESSES, "0.0.0.0:7443", "[::]:7443"],
        "--socks": [*_BAD_ADDRESSES, "0.0.0.0:1080", "[::]:1080", "nonexistent.invalid:1080"],
        "--forward": ["", "=", "127.0.0.1:8000", "127.0.0.1:8000=", "127.0.0.1:1080=h:80",
                      "127.0.0.1:8000=h:8000=1", "h:８０=h:80", "127.0.0.1:8000=0.0.0.0:80",
                      # an open forward: beyond loopback without --public-forward
                      "0.0.0.0:8000=h:80", "[::]:8000=h:80", "192.0.2.1:8000=h:80",
                      "nonexistent.invalid:8000=h:80", "127.0.0.1:8000=0x0:80"],
        "--connect-timeout": ["", "0", "0 s", "nan s", "1e400 s", "1000 s"],
        "--user": ["", "u" * 256, "b\udcffb"],
        "--fec-target": ["", "nan", "1", "0.4"],
        "--idle-timeout": ["", "1 s", "30"],
        "--udp-buffer": ["0", "1e6"],
    },
}  # fmt: skip


def make_relay_flag_case(index: int) -> tuple[list[str], str]:
    """The ``index``-th hostile relay flag (every one in turn): the args and the flag."""
    every = [
        (command, flag, value)
        for command, flags in sorted(RELAY_BAD_FLAGS.items())
        for flag, values in flags.items()
        for value in values
    ]
    command, flag, value = every[index % len(every)]
    args = [*RELAY_FLAG_BASE[command], flag, value]
    if flag == "--user":  # a user needs its password file (written by the test)
        args += ["--password-file", "{dir}/password"]
    return args, flag


def relay_flag_cases() -> int:
    return sum(len(v) for flags in RELAY_BAD_FLAGS.values() for v in flags.values())
