"""Bad input: exit status 2 and one line naming the file, the key path and what was expected.

Each case starts from the bundled §12.5 example, breaks one thing, and runs the CLI
as a user would. Nothing may reach stdout (no half-printed table or JSON) and no
traceback may reach stderr.

Each run is a real ``tierwise`` process. A test declares its runs (``@cli_calls``) and
the module runs the selected tests' calls two at a time (tests/cli/batch.py); each call
gets a folder of its own (``{dir}`` in its arguments), and the test checks its own runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli.batch import Call, Done, call, cli_calls
from tests.conftest import Run, run_cli
from tierwise.scenario.loader import bundled_example

BASE = bundled_example("deployment").read_text(encoding="utf-8")

STREAM = """\
[task]
kind = "stream"
chunks = 10
compute = "12 ms"

[[site]]
name = "phone"
tier = "device"
"""

REQUEST = """\
[task]
kind = "request"
upload = "30 MB"

[[site]]
name = "phone"
tier = "device"
"""


def edited(*edits: tuple[str, str]) -> str:
    """The bundled example with each ``(old, new)`` replaced once (old must be present)."""
    text = BASE
    for old, new in edits:
        assert old in text, f"the bundled example no longer contains {old!r}"
        text = text.replace(old, new, 1)
    return text


def before_model(table: str) -> str:
    """The bundled example with ``table`` inserted before ``[task.model]``."""
    return edited(("[task.model]", f"{table}\n\n[task.model]"))


def line_of(text: str, needle: str) -> int:
    """1-based line number of the first line containing ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@dataclass
class Case:
    """A scenario text (or None: no file written), extra CLI args, and what stderr must name.

    ``{file}`` in ``args`` and ``needles`` stands for the scenario file's path.
    """

    text: str | None
    needles: list[str]
    args: list[str] = field(default_factory=list)


SYNTAX = edited(("rounds = 20", "rounds = = 20"))

SCENARIO_CASES = {
    "unknown unit": Case(
        edited(('uplink = "6.4 Mbit/s"', 'uplink = "20 Mbit/q"')),
        ["site.cloud.uplink", "'20 Mbit/q'", "unknown unit", "Mbit/s"],
    ),
    "bare number for a rate": Case(
        edited(('uplink = "6.4 Mbit/s"', "uplink = 20")),
        ["site.cloud.uplink", "with a unit", "Mbit/s", "got 20"],
    ),
    "negative size": Case(
        edited(('upload = "0.8 MB"', 'upload = "-1 MB"')),
        ["task.upload", "'-1 MB'", "greater than or equal to 0"],
    ),
    "wrong dimension": Case(
        edited(('rtt = "200 ms"', 'rtt = "30 MB"')),
        ["site.cloud.rtt", "'30 MB'", "not a time", "ms"],
    ),
    "missing required key": Case(
        edited(('kind = "loop"\n', "")),
        ["task.kind", "missing"],
    ),
    "unknown key in a site": Case(
        edited(('rtt = "200 ms"', 'rtt = "200 ms"\nbandwith = "1 Gbit/s"')),
        ["site.cloud.bandwith", "unknown key"],
    ),
    "duplicate site names": Case(
        edited(('name = "workstation"', 'name = "cloud"')),
        ["site.cloud.name", "two sites are named 'cloud'", "unique"],
    ),
    "unknown hardware id": Case(
        edited(('hardware = "h100-sxm"', 'hardware = "h200-nope"')),
        ["site.cloud.hardware", "'h200-nope'", "known:", "h100-sxm"],
    ),
    "unknown model id": Case(
        edited(('model = "qwen3-8b"', 'model = "nosuch-7b"')),
        ["task.model.model", "'nosuch-7b'", "known:", "qwen3-8b"],
    ),
    "unknown weights format": Case(
        edited(('weights = "q4_0"', 'weights = "q3_weird"')),
        ["task.model.weights", "'q3_weird'", "known:", "q4_0"],
    ),
    "--set unknown path": Case(
        BASE,
        ["task.nosuch", "--set", "unknown key 'nosuch'", "docs/scenario.md"],
        ["--set", "task.nosuch=1"],
    ),
    "--set unknown site": Case(
        BASE,
        ["site.nosuch.uplink", "--set", "'nosuch'", "phone, workstation, cloud"],
        ["--set", "site.nosuch.uplink=3 Mbit/s"],
    ),
    "--set unknown key in a site": Case(
        BASE,
        ["site.cloud.bandwith", "--set", "unknown key 'bandwith'", "did you mean"],
        ["--set", "site.cloud.bandwith=3 Mbit/s"],
    ),
    "--set below a value": Case(
        BASE,
        ["task.rounds.x", "--set", "task.rounds", "not a table"],
        ["--set", "task.rounds.x=1"],
    ),
    "--set without '='": Case(
        BASE, ["--set", "key.path=value", "'task.rounds'"], ["--set", "task.rounds"]
    ),
    "--set non-integer rounds": Case(
        BASE,
        ["task.rounds", "integer", "'abc'", "from --set task.rounds=abc"],
        ["--set", "task.rounds=abc"],
    ),
    "--set bad unit": Case(
        BASE,
        ["site.cloud.rtt", "'3 parsecs'", "from --set site.cloud.rtt=3 parsecs"],
        ["--set", "site.cloud.rtt=3 parsecs"],
    ),
    "TOML syntax error": Case(
        SYNTAX, ["TOML syntax error", f"line {line_of(SYNTAX, 'rounds = = 20')}"]
    ),
    "empty file": Case("", ["task", "[task] is missing"]),
    "per-round uplink list of the wrong length": Case(
        edited(('uplink = "6.4 Mbit/s"', 'uplink = ["6 Mbit/s", "10 Mbit/s"]')),
        ["site.cloud.uplink", "2 per-round rates", "20 rounds"],
    ),
    "bad unit inside a per-round list": Case(
        edited(('uplink = "6.4 Mbit/s"', 'uplink = ["6 Mbit/s", "10 Mbit/q"]')),
        ["site.cloud.uplink[1]", "'10 Mbit/q'", "unknown unit"],
    ),
    "disconnect after_round beyond rounds": Case(
        before_model('[task.disconnect]\nafter_round = 30\nreconnect = "2 s"'),
        ["task.disconnect.after_round", "rounds = 20", "got 30"],
    ),
    "compress ratio 0": Case(
        before_model("[task.compress]\nratio = 0"),
        ["task.compress.ratio", "greater than 0", "got 0"],
    ),
    "compress ratio above 1": Case(
        before_model("[task.compress]\nratio = 1.5"),
        ["task.compress.ratio", "less than or equal to 1", "got 1.5"],
    ),
    "loop without rounds": Case(
        edited(("rounds = 20\n", "")), ["task.rounds", "a loop needs rounds"]
    ),
    "stream without period": Case(STREAM, ["task.period", "a stream needs period", "20 ms"]),
    "request without compute (brackets survive rich markup)": Case(
        REQUEST, ["task.compute", "[task.compute], [task.model] or [task.chunks]"]
    ),
    "energy range of three values": Case(
        edited(('["0.576 J", "0.756 J"]', '["1 J", "2 J", "3 J"]')),
        ["site.phone.energy_per_token", "[low, high]", "got 3 values"],
    ),
    "site table instead of an array of tables": Case(
        REQUEST.replace("[[site]]", '[task.compute]\ntime = "1 s"\n\n[site]'),
        ["site: ", "valid list"],
    ),
    # numbers at the edge of floating point, odd units, arithmetic, huge --set values
    "rate of 1e-308 Mbit/s": Case(
        edited(('uplink = "6.4 Mbit/s"', 'uplink = "1e-308 Mbit/s"')),
        ["site.cloud.uplink", "1 bit/s to 8 Pbit/s", "1.25e-303 B/s"],
    ),
    "mss of 5e-324 B": Case(
        edited(('rtt = "200 ms"', 'rtt = "200 ms"\nmss = "5e-324 B"')),
        ["site.cloud.mss", "too small"],
    ),
    "compute time of 1e308 s": Case(
        REQUEST.replace("[[site]]", '[task.compute]\ntime = "1e308 s"\n\n[[site]]'),
        ["task.compute.time", "1 ps to 1e9 s", "got 1e+308 s"],
    ),
    "10**400 ms": Case(
        edited(('rtt = "200 ms"', 'rtt = "10**400 ms"')),
        ["site.cloud.rtt", "no arithmetic"],
    ),
    "milli-bits": Case(
        edited(('uplink = "6.4 Mbit/s"', 'uplink = "50 mbps"')),
        ["site.cloud.uplink", "did you mean '50 Mbit/s'?"],
    ),
    "KB": Case(
        edited(('upload = "0.8 MB"', 'upload = "800 KB"')),
        ["task.upload", "'KB' is ambiguous", "'kB' (1000 B) or 'KiB' (1024 B)"],
    ),
    "unknown key with a near one": Case(
        edited(('rtt = "200 ms"', 'rrt = "200 ms"')),
        ["site.cloud.rrt", "did you mean 'rtt'?", "docs/scenario.md"],
    ),
    "--set quantity with arithmetic": Case(
        BASE, ["task.upload", "9**9**9 MB", "no arithmetic"], ["--set", "task.upload=9**9**9 MB"]
    ),
    "--set integer of 5000 digits": Case(
        BASE, ["task.rounds", "4,300 digits"], ["--set", "task.rounds=" + "9" * 5000]
    ),
    "--set value too long": Case(
        BASE, ["task.name", "at most 10,000"], ["--set", "task.name=" + "x" * 20_000]
    ),
    "negative Monte Carlo seed": Case(
        BASE + "\n[variability]\nseed = -1\n", ["variability.seed", "greater than or equal to 0"]
    ),
}

CATALOG_SYNTAX = '[hardware.h100-sxm\nmemory = "80 GB"\n'
CATALOG_BAD_UNIT = """\
[hardware.h100-sxm]
name = "NVIDIA H100 SXM"
memory = "80 GB"
memory_bandwidth = "3.35 TB/q"
"""
CATALOG_NEGATIVE = CATALOG_BAD_UNIT.replace("3.35 TB/q", "3.35 TB/s").replace('"80 GB"', '"-80 GB"')
CATALOG_UNKNOWN_TABLE = '[gpu.h100-sxm]\nname = "x"\n'
CATALOG_UNKNOWN_KEY = CATALOG_BAD_UNIT.replace("3.35 TB/q", "3.35 TB/s") + 'bandwith = "1"\n'

CATALOG_CASES = {
    "syntax error": (CATALOG_SYNTAX, ["TOML syntax error", "line 1"]),
    "bad unit": (
        CATALOG_BAD_UNIT,
        ["hardware.h100-sxm.memory_bandwidth", "'3.35 TB/q'", "unknown unit"],
    ),
    "negative size": (CATALOG_NEGATIVE, ["hardware.h100-sxm.memory", "'-80 GB'"]),
    "unknown table": (CATALOG_UNKNOWN_TABLE, ["'gpu'", "[hardware.<id>]"]),
    "unknown key": (CATALOG_UNKNOWN_KEY, ["hardware.h100-sxm.bandwith", "unknown key", "memory"]),
}


FILE_ERRORS = [
    (b"rtt = 1\n\xff\xfe", ["not UTF-8", "0xff at offset 8 (line 2)"]),
    (BASE.encode("latin-1", "replace").replace(b"\xc2", b"") + b"# caf\xe9\n", ["not UTF-8"]),
    (("x = " + "[" * 3000 + "]" * 3000).encode(), ["nested deeper than 16"]),
    (("[" + ".".join(f"k{i}" for i in range(1000)) + "]\n").encode(), ["nested deeper"]),
]
FILE_COMMANDS = {"plan": ("plan",), "sim": ("sim",), "catalog": ("catalog", "--catalog")}


def _file_error_calls() -> dict[str, Call]:
    return {
        f"{i} {name}": call(*command, "{dir}/bad.toml", files={"bad.toml": data})
        for i, (data, _) in enumerate(FILE_ERRORS)
        for name, command in FILE_COMMANDS.items()
    }


@cli_calls(_file_error_calls)
def test_file_errors_are_one_line(cli_runs: dict[str, Done]) -> None:
    """Non-UTF-8 bytes, deep nesting and a 1,000-part header are one line naming the file."""
    assert len(cli_runs) == len(FILE_ERRORS) * len(FILE_COMMANDS)
    for label, done in cli_runs.items():
        needles = FILE_ERRORS[int(label.split()[0])][1]
        assert_one_line_error(done.run, str(done.dir / "bad.toml"), *needles)


@cli_calls(
    lambda: {
        "bom": call(
            "plan", "{dir}/bom.toml", "--json", files={"bom.toml": b"\xef\xbb\xbf" + BASE.encode()}
        ),
        "example": call("plan", "--example", "deployment", "--json"),
    }
)
def test_bom_is_accepted(cli_runs: dict[str, Done]) -> None:
    """A scenario saved with a UTF-8 byte-order mark plans like one without."""
    run = cli_runs["bom"].run
    assert run.code == 0, run.stderr
    assert run.json()["options"] == cli_runs["example"].run.json()["options"]


SIM = Path(str(bundled_example("deployment"))).with_name("sim-photo.toml").read_text("utf-8")


@pytest.mark.parametrize(
    ("args", "text", "needles"),
    [
        (["--seed", "-1"], SIM, ["--seed", "greater than or equal to 0"]),
        ([], SIM.replace("seed = 1", "seed = -1"), ["run.seed", "greater than or equal to 0"]),
        ([], SIM.replace('mss = "1168 B"', 'mss = "5e-324 B"'), ["tcp.mss", "too small"]),
        ([], SIM.replace('uplink = "20 Mbit/s"', 'uplink = "1e-308 Mbit/s"'), ["path.uplink"]),
        ([], SIM.replace("[run]", "[run]\nsed = 1"), ["run.sed", "did you mean 'seed'?"]),
    ],
    ids=["--seed -1", "seed = -1", "mss 5e-324 B", "rate 1e-308 Mbit/s", "did you mean"],
)
@cli_calls(
    lambda args, text, **_: {"": call("sim", "{dir}/sim.toml", *args, files={"sim.toml": text})}
)
def test_bad_sim_input(
    args: list[str], text: str, needles: list[str], cli_runs: dict[str, Done]
) -> None:
    """Negative seeds, absurd magnitudes and misspelt keys in a sim file are one line, exit 2."""
    assert_one_line_error(cli_runs[""].run, *needles)


FLOWS = Path(str(bundled_example("deployment"))).with_name("sim-flows.toml").read_text("utf-8")
_FIRST_FLOW = 'cc = "cubic"\nstart = "0 s"\nduration = "20 s"'


@pytest.mark.parametrize(
    ("args", "text", "needles"),
    [
        ([], FLOWS.replace(_FIRST_FLOW, 'cc = "cubic"\nstart = "0 s"'), ["flow.0", "size and"]),
        ([], FLOWS.replace(_FIRST_FLOW, _FIRST_FLOW + '\nsize = "1 MB"'), ["flow.0", "exactly"]),
        ([], FLOWS.replace('cc = "bbr"', 'cc = "reno2"'), ["flow.2.cc", "unknown congestion"]),
        ([], FLOWS.replace('cc = "bbr"', 'transport = "quic"'), ["flow.2.transport", "relay"]),
        ([], FLOWS.replace('cc = "bbr"', 'cc = "bbr"\ntransport = "relay"'), ["omit cc"]),
        ([], FLOWS.replace('start = "5 s"', 'start = "-5 s"'), ["flow.2.start"]),
        ([], FLOWS.replace('duration = "15 s"', 'duration = "0 s"'), ["flow.2", "> 0"]),
        ([], FLOWS.replace("seed = 1", 'seed = 1\nuntil = "10 s"'), ["flow.0", "run.until"]),
        ([], FLOWS.replace('duration = "15 s"', 'duratoin = "15 s"'), ["did you mean"]),
        ([], FLOWS + "\n[[flow]]\nsize = '1 MB'\n" * 1025, ["flow", "1024"]),
        ([], FLOWS + '[workload]\nupload = "1 MB"\n', ["not both"]),
        ([], FLOWS.replace("[[flow]]", "[[flw]]"), ["did you mean 'flow'?"]),
        (
            [],
            FLOWS.replace('duration = "15 s"', 'duration = "1e8 s"').replace(
                "seed = 1", 'seed = 1\nuntil = "1e9 s"'
            ),
            ["packets", "--max-packets"],
        ),
        (["--trace", "t.csv"], FLOWS, ["--trace", "flows"]),
        (["--plot", "figs"], SIM, ["--plot", "[[flow]]"]),
        (
            ["--trace", "t.csv"],
            SIM.replace("[workload]", '[workload]\ntransport = "relay"'),
            ["relay"],
        ),
    ],
    ids=[
        "neither size nor duration",
        "both size and duration",
        "unknown cc",
        "unknown transport",
        "relay with cc",
        "negative start",
        "zero duration",
        "flow past run.until",
        "misspelt key",
        "too many flows",
        "workload and flows",
        "misspelt table",
        "unbounded duration",
        "trace of flows",
        "plot of a request",
        "trace of a relay request",
    ],
)
@cli_calls(
    lambda args, text, **_: {"": call("sim", "{dir}/flows.toml", *args, files={"flows.toml": text})}
)
def test_bad_flow_input(
    args: list[str], text: str, needles: list[str], cli_runs: dict[str, Done]
) -> None:
    """Hostile [[flow]] tables and relay transports: one line naming file and key, exit 2."""
    assert_one_line_error(cli_runs[""].run, *needles)


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("hardware = 5\n", ["hardware: expected tables [hardware.<id>]", "got 5"]),
        ('[hardwre.x]\nname = "x"\n', ["did you mean 'hardware'?"]),
        (
            CATALOG_BAD_UNIT.replace("3.35 TB/q", "3.35 TB/s") + "prompts_per_charge = [490, 0]\n",
            ["hardware.h100-sxm.prompts_per_charge.1", "greater than 0"],
        ),
    ],
    ids=["section not a table", "misspelt section", "zero prompts per charge"],
)
@cli_calls(
    lambda text, **_: {"": call("catalog", "--catalog", "{dir}/cat.toml", files={"cat.toml": text})}
)
def test_bad_catalog_shapes(text: str, needles: list[str], cli_runs: dict[str, Done]) -> None:
    """A catalog section that is not a table, or a zero count, is one line, not a traceback."""
    done = cli_runs[""]
    assert_one_line_error(done.run, str(done.dir / "cat.toml"), *needles)


def assert_one_line_error(run: Run, *needles: str) -> str:
    """Exit 2, empty stdout, no traceback, one non-empty line on stderr naming every needle."""
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stdout == "", f"something was printed before the error: {run.stdout!r}"
    lines = run.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{run.stderr}"
    message = lines[0]
    assert message.startswith("error: "), message
    for needle in needles:
        assert needle in message, f"{needle!r} missing from: {message}"
    return message


def case_call(case: Case, *extra: str) -> Call:
    """``plan {dir}/scenario.toml ARGS`` with the case's text (no file if it has none)."""
    path = "{dir}/scenario.toml"
    files = {} if case.text is None else {"scenario.toml": case.text}
    args = [a.replace("{file}", path) for a in case.args]
    return call("plan", path, *args, *extra, files=files)


def case_needles(case: Case, done: Done) -> list[str]:
    """The file's path and the case's needles, ``{file}`` replaced by the path."""
    path = str(done.dir / "scenario.toml")
    return [path, *(n.replace("{file}", path) for n in case.needles)]


@pytest.mark.parametrize("case", SCENARIO_CASES.values(), ids=SCENARIO_CASES.keys())
@cli_calls(lambda case: {"": case_call(case)})
def test_bad_scenario(case: Case, cli_runs: dict[str, Done]) -> None:
    """Each bad scenario or --set names the file, the key path and what was expected."""
    assert_one_line_error(cli_runs[""].run, *case_needles(case, cli_runs[""]))


@pytest.mark.parametrize(
    "name", ["unknown unit", "--set unknown site", "TOML syntax error", "unknown hardware id"]
)
@cli_calls(lambda name: {"": case_call(SCENARIO_CASES[name], "--json")})
def test_bad_scenario_with_json_prints_nothing_on_stdout(
    name: str, cli_runs: dict[str, Done]
) -> None:
    """With --json, bad input still gives one line on stderr and no JSON at all."""
    assert_one_line_error(cli_runs[""].run, *case_needles(SCENARIO_CASES[name], cli_runs[""]))


@cli_calls(lambda: {"": call("plan", "{dir}/nope.toml")})
def test_missing_file(cli_runs: dict[str, Done]) -> None:
    """A file that does not exist is named, with what went wrong."""
    done = cli_runs[""]
    assert_one_line_error(done.run, str(done.dir / "nope.toml"), "file not found")


@cli_calls(lambda: {"": call("plan", "{dir}")})
def test_directory_as_file(cli_runs: dict[str, Done]) -> None:
    """A directory given as the scenario file is refused by name."""
    done = cli_runs[""]
    assert_one_line_error(done.run, str(done.dir), "cannot read")


JSON_OR_NOT = {"table": (), "json": ("--json",)}


@cli_calls(
    lambda: {
        k: call("plan", "--set", "site.nosuch.uplink=1 Mbit/s", *extra)
        for k, extra in JSON_OR_NOT.items()
    }
)
def test_set_error_without_file_names_the_bundled_example(cli_runs: dict[str, Done]) -> None:
    """With no FILE, a bad --set names the bundled example it was applied to, and prints nothing."""
    example = str(bundled_example("deployment"))
    assert cli_runs.keys() == JSON_OR_NOT.keys()
    for done in cli_runs.values():
        assert_one_line_error(done.run, example, "site.nosuch.uplink")


@cli_calls(
    lambda: {
        k: call("plan", "--plot", "{dir}/a-file/figures", *extra, files={"a-file": ""})
        for k, extra in JSON_OR_NOT.items()
    }
)
def test_unwritable_plot_folder(cli_runs: dict[str, Done]) -> None:
    """--plot into a path that cannot be a folder is named, with the reason."""
    assert cli_runs.keys() == JSON_OR_NOT.keys()
    for done in cli_runs.values():
        folder = str(done.dir / "a-file" / "figures")
        assert_one_line_error(done.run, "--plot", folder, "Not a directory")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["calc", "nosuch"], ["calc", "unknown model 'nosuch'", "request"]),
        (["calc", "request", "--nosuch", "3"], ["calc", "--nosuch", "'request'", "--uplink"]),
        (["calc", "request", "--uplink", "20 Mbit/q"], ["--uplink", "'20 Mbit/q'", "Mbit/s"]),
        (["calc", "request", "--json", "--uplink", "20 Mbit/q"], ["--uplink", "'20 Mbit/q'"]),
        (["calc", "request", "--uplink"], ["--uplink", "needs a value"]),
    ],
    ids=["unknown model", "unknown param", "bad unit", "bad unit --json", "flag without value"],
)
@cli_calls(lambda args, **_: {"": call(*args)})
def test_bad_calc(args: list[str], needles: list[str], cli_runs: dict[str, Done]) -> None:
    """calc names the model or the parameter and what it expected."""
    assert_one_line_error(cli_runs[""].run, *needles)


@pytest.mark.parametrize("command", ["plan", "catalog"])
@pytest.mark.parametrize(("text", "needles"), CATALOG_CASES.values(), ids=CATALOG_CASES.keys())
@cli_calls(
    lambda command, text, **_: {
        k: call(
            command, "--catalog", "{dir}/my-catalog.toml", *extra, files={"my-catalog.toml": text}
        )
        for k, extra in JSON_OR_NOT.items()
    }
)
def test_bad_catalog(
    command: str, text: str, needles: list[str], cli_runs: dict[str, Done]
) -> None:
    """A bad --catalog file is named with the key path, for plan and for catalog (and --json)."""
    assert cli_runs.keys() == JSON_OR_NOT.keys()
    for done in cli_runs.values():
        assert_one_line_error(done.run, str(done.dir / "my-catalog.toml"), *needles)


@cli_calls(lambda: {"": call("catalog", "--catalog", "{dir}/nope.toml")})
def test_missing_catalog_file(cli_runs: dict[str, Done]) -> None:
    """A --catalog file that does not exist is named."""
    done = cli_runs[""]
    assert_one_line_error(done.run, str(done.dir / "nope.toml"), "cannot read")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["plan", "--nosuch"], ["tierwise plan", "--nosuch", "--help"]),
        (["plan", "a.toml", "b.toml"], ["tierwise plan", "b.toml"]),
        (["nosuchcommand"], ["tierwise", "'nosuchcommand'"]),
        (["plan", "--set"], ["--set", "requires an argument"]),
    ],
    ids=["unknown option", "extra argument", "unknown command", "option without value"],
)
@cli_calls(lambda args, **_: {"": call(*args)})
def test_usage_errors_are_one_line(
    args: list[str], needles: list[str], cli_runs: dict[str, Done]
) -> None:
    """Command-line usage errors follow the same rule: one line, status 2, no traceback."""
    assert_one_line_error(cli_runs[""].run, *needles)


LONGEST = SCENARIO_CASES["--set unknown path"]  # the longest message: it lists every key
NARROW = "the-longest-error-message-in-a-narrow-terminal.toml"  # a long path: > 160 columns
NARROW_ENV = {**os.environ, "COLUMNS": "40"}  # as collected (pytest adds to it in a test)


@cli_calls(
    lambda: {
        "": call(
            "plan",
            "{dir}/" + NARROW,
            *LONGEST.args,
            files={NARROW: LONGEST.text or ""},
            env=NARROW_ENV,
        )
    }
)
def test_long_message_stays_one_line_in_a_narrow_terminal(cli_runs: dict[str, Done]) -> None:
    """Rich must not wrap the error, however narrow the terminal."""
    done = cli_runs[""]
    message = assert_one_line_error(done.run, str(done.dir / NARROW))
    assert len(message) > 160


@pytest.mark.parametrize(
    "command",
    [
        ("route", "--config"),
        ("route", "replay"),
        ("catalog", "add-model"),
        ("sweep",),
        ("relay", "gateway", "--listen", "127.0.0.1:0", "--allow", "127.0.0.1:1", "--config"),
        ("relay", "client", "--gateway", "127.0.0.1:1", "--socks", "127.0.0.1:1", "--key-file"),
        (
            "relay",
            "client",
            "--gateway",
            "127.0.0.1:1",
            "--socks",
            "127.0.0.1:1",
            "--user",
            "u",
            "--password-file",
        ),
    ],
)
@cli_calls(
    lambda command: {
        "": call(
            *command,
            "{dir}/bad.bin",
            *{"add-model": ("--id", "x"), "sweep": ("--vary", "task.rounds=1,2")}.get(
                command[-1], ()
            ),
            files={"bad.bin": (b"a = \xad\xff\n", 0o600)},
        )
    }
)
def test_every_command_reads_files_through_the_bounded_reader(
    command: tuple[str, ...], cli_runs: dict[str, Done]
) -> None:
    """Non-UTF-8 bytes given to any command that reads a file: one line naming the byte."""
    run = cli_runs[""].run
    assert run.code == 2, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "not UTF-8" in run.stderr and run.stdout == ""


def test_model_server_port_errors_are_one_line() -> None:
    """A port out of range or already in use: one line, exit 2, nothing else printed."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        for port, words in ((99_999_999, "0..65535"), (busy, "in use")):
            run = run_cli("lab", "model-server", "--port", str(port))
            assert run.code == 2 and words in run.stderr, run.stderr
            assert run.stdout == "" and "Traceback" not in run.stderr


DEPLOYMENT = str(bundled_example("deployment"))
SIM_SWEEP = str(Path(__file__).parents[1] / "plan" / "data" / "sim-sweep.toml")
SWEEP_CASES = {
    "range without count": (["--vary", "site.cloud.rtt=20..300 ms"], ["site.cloud.rtt", "ms"]),
    "zero count": (["--vary", "site.cloud.rtt=20..300 ms:0"], ["1 to 1,000,000 values"]),
    "huge axis": (["--vary", "task.rounds=1..9:2000000"], ["1 to 1,000,000 values"]),
    "log through zero": (["--vary", "site.cloud.uplink=0..9 Mbit/s:log:3"], ["log range"]),
    "huge grid": (
        ["--vary", "site.cloud.uplink=1..9 Mbit/s:5000", "--vary", "site.cloud.rtt=1..2 ms:5000"],
        ["--vary", "25,000,000 grid points", "limit of 10,000,000"],
    ),
    "unknown key": (["--vary", "task.roundz=1,2"], ["task.roundz", "unknown key"]),
    "unknown site": (["--vary", "site.moon.rtt=1 ms,2 ms"], ["moon"]),
    "non-numeric": (["--vary", "task.rounds=many,few"], ["task.rounds", "'many'"]),
    "empty list item": (["--vary", "task.rounds=1,,2"], ["comma list"]),
    "no equals": (["--vary", "task.rounds"], ["key.path=SPEC"]),
    "twice": (["--vary", "task.rounds=1,2", "--vary", "task.rounds=3"], ["twice"]),
    "weight over range": (["--vary", "decision.weights.time=1,2e6"], ["decision.weights.time"]),
    "workers 0": (["--vary", "task.rounds=1,2", "--workers", "0"], ["--workers"]),
    "workers huge": (["--vary", "task.rounds=1,2", "--workers", "100000"], ["--workers", "64"]),
    "runs huge": (["--vary", "task.rounds=1,2", "--runs", "99999"], ["--runs", "10000"]),
    "out suffix": (["--vary", "task.rounds=1,2", "--out", "s.csv"], ["--out", ".parquet"]),
    "out folder": (
        ["--vary", "task.rounds=1,2", "--out", "/nonexistent/s.parquet"],
        ["--out", "no writable directory"],
    ),
    "html suffix": (["--vary", "task.rounds=1,2", "--html", "s.png"], ["--html", ".html"]),
    "map without html": (["--vary", "task.rounds=1,2", "--map", "a,b"], ["--map: ", "--html"]),
    "map unknown key": (
        "--vary|task.rounds=1,2|--vary|site.cloud.rtt=1 ms,2 ms|--html|{tmp}/p.html|--map|"
        "task.rounds,site.cloud.uplink".split("|"),
        ["--map", "two different varied keys", "task.rounds,site.cloud.uplink"],
    ),
    "workers with scheduler": (
        ["--vary", "task.rounds=1,2", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"],
        ["--workers", "--scheduler"],
    ),
    "bad scheduler address": (
        ["--vary", "task.rounds=1,2", "--scheduler", "nowhere"],
        ["--scheduler", "nowhere"],
    ),
    "connect timeout without scheduler": (
        ["--vary", "task.rounds=1,2", "--connect-timeout", "1"],
        ["--connect-timeout: ", "--scheduler"],
    ),
    "worker timeout without scheduler": (
        ["--vary", "task.rounds=1,2", "--worker-timeout", "1"],
        ["--worker-timeout: ", "--scheduler"],
    ),
    "connect timeout zero": (
        ["--vary", "task.rounds=1,2", "--scheduler", "tcp://127.0.0.1:1", "--connect-timeout", "0"],
        ["--connect-timeout", "0.1"],
    ),
    "worker timeout huge": (
        [
            "--vary",
            "task.rounds=1,2",
            "--scheduler",
            "tcp://127.0.0.1:1",
            "--worker-timeout",
            "1e9",
        ],
        ["--worker-timeout", "3600"],
    ),
}


@pytest.mark.parametrize("case", SWEEP_CASES.values(), ids=SWEEP_CASES.keys())
@cli_calls(
    lambda case: {"": call("sweep", DEPLOYMENT, *(a.replace("{tmp}", "{dir}") for a in case[0]))}
)
def test_bad_sweep(case: tuple[list[str], list[str]], cli_runs: dict[str, Done]) -> None:
    """Every sweep option refuses a hostile value with one line, exit 2, nothing written."""
    done = cli_runs[""]
    assert_one_line_error(done.run, *case[1])
    assert list(done.dir.iterdir()) == []


@cli_calls(
    lambda: {
        "": call("sweep", SIM_SWEEP, "--vary", "site.cloud.loss=0..0.1:1000", "--runs", "1000")
    }
)
def test_sweep_over_the_simulated_seed_budget(cli_runs: dict[str, Done]) -> None:
    """Points × a simulated site's runs over the budget is refused before anything runs."""
    assert_one_line_error(cli_runs[""].run, "--vary", "simulated seeds", "400,000")


@pytest.mark.slow
def test_unreachable_scheduler_is_one_line_in_bounded_time() -> None:
    """A scheduler address nobody listens on: one line naming it, by the CLI's connect
    timeout (--connect-timeout; 5 s by default, test_scheduler_waits_default_to_the_
    constants), not distributed's default 30 s (the bound leaves room for a loaded host's
    interpreter start and dask import: 2 s at load 1, several times that at load 8)."""
    import socket
    import time

    with socket.socket() as s:  # a free port, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    run = run_cli(
        "sweep", DEPLOYMENT, "--vary", "task.rounds=1,2", "--scheduler", f"tcp://127.0.0.1:{port}",
        "--connect-timeout", "1",
    )  # fmt: skip
    assert_one_line_error(run, "--scheduler", f"127.0.0.1:{port}", "after 1 s")
    assert time.monotonic() - start < 28


def test_scheduler_waits_default_to_the_constants() -> None:
    """Without --connect-timeout/--worker-timeout a sweep waits CONNECT_TIMEOUT_S (5 s) for
    a scheduler and WORKER_WAIT_S (10 s) for its first worker, as its help says."""
    import inspect

    from typer.testing import CliRunner

    from tierwise.cli import app
    from tierwise.plan.distributed import CONNECT_TIMEOUT_S, WORKER_WAIT_S, dask_client

    assert (CONNECT_TIMEOUT_S, WORKER_WAIT_S) == (5, 10)
    defaults = inspect.signature(dask_client.__wrapped__).parameters
    assert defaults["connect_timeout_s"].default == CONNECT_TIMEOUT_S
    assert defaults["worker_wait_s"].default == WORKER_WAIT_S
    shown = CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"}).output
    help_text = " ".join(shown.replace("│", " ").split())
    assert f"has to answer (default {CONNECT_TIMEOUT_S:g})." in help_text
    assert f"that has none (default {WORKER_WAIT_S:g})." in help_text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("lab", "request", "--via", "direct,tcp"), "--via: unknown transport 'tcp'"),
        (("lab", "request", "--via", ","), "--via: unknown transport"),
        (("lab", "request", "--via", "relay,relay"), "names a transport twice"),
        (("lab", "request", "--via", "relay", "--modes", "cold"), "--modes does not apply"),
        (("lab", "request", "--via", "relay", "--loss", "1.5"), "--loss: loss must be in"),
        (("lab", "throughput", "--via", "kcp"), "--via: unknown transport 'kcp'"),
        (("lab", "throughput", "--via", "relay", "--size", "0"), "--size: the size must be"),
        (("lab", "throughput", "--via", "relay", "--duration", "1h"), "--duration: must lie"),
        (("lab", "throughput", "--via", "relay", "--cc", "cubic,bbr"), "--cc: with --via"),
    ],
)
@cli_calls(lambda args, **_: {"": call(*args)})
def test_lab_via_errors_are_one_line(
    args: tuple[str, ...], words: str, cli_runs: dict[str, Done]
) -> None:
    """A bad --via (or an option that clashes with it): one line naming it, exit 2."""
    run = cli_runs[""].run
    assert run.code == 2 and words in run.stderr, run.stderr
    assert run.stdout == "" and len(run.stderr.strip().splitlines()) == 1


RELAY_GW = ("relay", "gateway", "--listen", "127.0.0.1:7443")
RELAY_CL = ("relay", "client", "--gateway", "127.0.0.1:7443")


def _relay_call(args: tuple[str, ...], config: str, key: str) -> Call:
    """The relay command with a key file as ``key`` says and the config file, if any."""
    files: dict[str, tuple[str, int]] = {}
    if key != "missing":
        files["relay.key"] = (
            "ab" * (8 if key == "short" else 32) + "\n",
            0o644 if key == "0644" else 0o600,
        )
    extra: tuple[str, ...] = ("--key-file", "{dir}/relay.key")
    if config:
        files["relay.toml"] = (config, 0o644)
        extra += ("--config", "{dir}/relay.toml")
    return call(*args, *extra, "--check", files=files)


@pytest.mark.parametrize(
    ("args", "config", "key", "needles"),
    [
        (RELAY_GW, "alow = ['127.0.0.1:80']\n", "ok", ("alow", "did you mean 'allow'")),
        (RELAY_GW, "allow = ['127.0.0.1:80']\nmax_streams = 0\n", "ok", ("max_streams", "65536")),
        (RELAY_GW, "allow = '127.0.0.1:80'\n", "ok", ("allow", "a list of strings")),
        ((*RELAY_GW, "--allow", "300.1.1.1:80"), "", "ok", ("--allow", "neither an IP")),
        ((*RELAY_GW, "--allow", "::1:80"), "", "ok", ("--allow", "brackets")),
        ((*RELAY_GW, "--allow", "h:70000"), "", "ok", ("--allow", "HOST:PORT")),
        ((*RELAY_GW, "--allow", "h:1", "--max-sessions", "0"), "", "ok", ("--max-sessions",)),
        ((*RELAY_GW, "--allow", "h:1", "--log-level", "loud"), "", "ok", ("--log-level", "loud")),
        ((*RELAY_GW, "--allow", "h:1"), "", "missing", ("relay.key", "cannot read key file")),
        ((*RELAY_GW, "--allow", "h:1"), "", "short", ("relay.key", "64 hex digits")),
        ((*RELAY_GW, "--allow", "h:1"), "", "0644", ("relay.key", "chmod 600")),
        ((*RELAY_CL, "--connect-timeout", "5"), "", "ok", ("--connect-timeout", "no unit")),
        ((*RELAY_CL, "--connect-timeout", "1 h"), "", "ok", ("--connect-timeout", "300 s")),
        ((*RELAY_CL, "--udp-buffer", "1"), "", "ok", ("--udp-buffer", "1024")),
        # a value from the file names the file and its key, not the flag
        (RELAY_CL, "forward = ['127.0.0.1:80']\n", "ok", ("relay.toml: forward:", "LISTEN=")),
        (RELAY_CL, "socks = ''\n", "ok", ("relay.toml: socks:", "HOST:PORT")),
        ((*RELAY_CL, "--socks", ""), "", "ok", ("'--socks'", "an empty value")),  # not the default
        (RELAY_CL, "gateway_addr = 'x:1'\n", "ok", ("gateway_addr", "did you mean 'gateway'")),
        ((*RELAY_CL, "--socks", "0.0.0.0:1080"), "", "ok", ("--socks", "add --user")),
    ],
)
@cli_calls(lambda args, config, key, **_: {"": _relay_call(args, config, key)})
def test_relay_option_errors(
    args, config: str, key: str, needles, cli_runs: dict[str, Done]
) -> None:
    """Relay flags and --config keys: unknown, mistyped, out of range, bad key file → one line."""
    assert_one_line_error(cli_runs[""].run, *needles)


@pytest.mark.slow
def test_scheduler_address_that_is_not_dask_is_one_line(tmp_path: Path) -> None:
    """A --scheduler address where an HTTP server answers (the dashboard's port, a proxy):
    one line naming the address, not a traceback from Dask reading HTTP as frame lengths."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"tcp://127.0.0.1:{server.server_address[1]}"
        run = run_cli(
            "sweep", SIM_SWEEP, "--vary", "site.cloud.loss=0..0.1:2", "--scheduler", address,
            "--out", str(tmp_path / "s.parquet"), "--connect-timeout", "1",
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert_one_line_error(run, "--scheduler", address, "Dask scheduler", "within 1 s")
    assert list(tmp_path.iterdir()) == []
