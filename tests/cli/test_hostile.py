"""Classes of hostile or mistaken input, each member one line and exit 2 (or a result).

Each test takes a whole class (booleans where numbers go, percentages where fractions
go, units a user never means, unwritable output, inputs that never end) and runs
several members of it through every file kind or option that could receive it. The
runs are real ``tierwise`` processes, two at a time (tests/cli/batch.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.batch import Done, call, cli_calls
from tests.cli.test_errors import assert_one_line_error
from tierwise.scenario.loader import bundled_example

EXAMPLES = Path(str(bundled_example("deployment"))).parent
SCENARIO = (EXAMPLES / "deployment.toml").read_text("utf-8")
SIM = (EXAMPLES / "sim-photo.toml").read_text("utf-8")
ROUTE = (EXAMPLES / "route.toml").read_text("utf-8")
QUANT = '[quant.odd]\nname = "odd"\nblock_values = 32\nblock_bytes = 18\n'


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, f"the bundled file no longer contains {old!r}"
    return text.replace(old, new, 1)


# (label, command with {f} for the file, file text, key path the error must name)
def _number_places(value: str) -> list[tuple[str, list[str], str, str]]:
    """Every kind of file (and --set) with ``value`` in one of its number fields."""
    return [
        ("scenario int", ["plan", "{f}"], _edit(SCENARIO, "rounds = 20", f"rounds = {value}"),
         "task.rounds"),
        ("scenario float", ["plan", "{f}"],
         _edit(SCENARIO, "decode_slowdown = 1.0", f"decode_slowdown = {value}"),
         "site.cloud.decode_slowdown"),
        ("--set", ["plan", "{f}", "--set", f"site.cloud.loss={value}"], SCENARIO,
         "site.cloud.loss"),
        ("--set in a table", ["plan", "{f}", "--set", f"decision.weights.time={value}"],
         SCENARIO, "decision.weights.time"),
        ("sim file", ["sim", "{f}"], _edit(SIM, "seed = 1", f"seed = {value}"), "run.seed"),
        ("route config", ["route", "decisions", "--config", "{f}"],
         _edit(ROUTE, "hysteresis = 0.1", f"hysteresis = {value}"), "decision.hysteresis"),
        ("catalog file", ["catalog", "--catalog", "{f}"],
         _edit(QUANT, "block_values = 32", f"block_values = {value}"), "block_values"),
    ]  # fmt: skip


BOOLEANS = ["true", "false"]
SLIPS = {'"14%"': "0.14", '"3.6 %"': "0.036", '"1,000"': "1000"}


def _place_calls(value: str, place: int) -> dict[str, object]:
    _, args, text, _ = _number_places(value)[place]
    return {"": call(*[a.replace("{f}", "{dir}/in.toml") for a in args], files={"in.toml": text})}


PLACES = range(len(_number_places("1")))


@pytest.mark.parametrize("place", PLACES, ids=[p[0] for p in _number_places("1")])
@pytest.mark.parametrize("value", BOOLEANS)
@cli_calls(_place_calls)
def test_a_boolean_where_a_number_goes_is_refused(
    value: str, place: int, cli_runs: dict[str, Done]
) -> None:
    """true/false in any number field of any file kind: its key path, never 1 or 0."""
    key = _number_places(value)[place][3]
    assert_one_line_error(cli_runs[""].run, key, f"got {value}", "boolean")


@pytest.mark.parametrize("place", PLACES, ids=[p[0] for p in _number_places("1")])
@pytest.mark.parametrize("value", list(SLIPS))
@cli_calls(_place_calls)
def test_a_percentage_or_a_comma_in_a_number_is_refused_with_the_meant_number(
    value: str, place: int, cli_runs: dict[str, Done]
) -> None:
    """'14%', '3.6 %', '1,000' in any number field: refused, naming what to write instead."""
    key = _number_places(value)[place][3]
    assert_one_line_error(cli_runs[""].run, key, f"write {SLIPS[value]}")


UNIT_SLIPS = {
    "millihertz": (["calc", "pcm-rate", "--sample-rate", "24 mHz"], ["'24 MHz'", "never meant"]),
    "megametres": (["calc", "propagation", "--distance", "10 Mm"], ["'10 mm'", "never meant"]),
    "milli-FLOP": (["calc", "encoder-placement", "--encode-flops", "1.31 mFLOP"], ["'1.31 MFLOP'"]),
    "thousands in --set": (
        ["plan", "--set", "task.upload=1,000 MB"],
        ["task.upload", "'1000 MB'", "comma"],
    ),
    "space in --set": (["plan", "--set", "task.upload=1 000 MB"], ["'1000 MB'", "space"]),
    "percent as a rate": (["plan", "--set", "site.cloud.uplink=14 %"], ["percentage"]),
}


@pytest.mark.parametrize("name", list(UNIT_SLIPS))
@cli_calls(lambda name: {"": call(*UNIT_SLIPS[name][0])})
def test_unit_spellings_never_meant_are_refused_with_the_fix(
    name: str, cli_runs: dict[str, Done]
) -> None:
    """mHz, Mm, mFLOP, '1,000 MB', '14 %' on the command line: one line with the fix."""
    assert_one_line_error(cli_runs[""].run, *UNIT_SLIPS[name][1])


# Options that take a fraction or a count, given a percentage, a comma or a boolean. Every
# value here fails before any work starts (a lab command never reaches its lab).
OPTION_SLIPS = {
    "lab --loss": (["lab", "request", "--loss", "14%"], ["'--loss'", "write 0.14 for 14 %"]),
    "lab --loss-up=": (["lab", "up", "--loss-up=3.6 %"], ["'--loss-up'", "write 0.036"]),
    "lab throughput list": (["lab", "throughput", "--loss", "0,14%"], ["write 0.14"]),
    "model-server rate": (["lab", "model-server", "--error-rate", "5%"], ["write 0.05"]),
    "relay --fec-target": (
        ["relay", "gateway", "--check", "--fec-target", "99.9%"], ["--fec-target", "write 0.999"]
    ),
    "relay int true": (["relay", "gateway", "--check", "--max-sessions", "true"], ["'true'"]),
    "calc float": (["calc", "mathis", "--loss", "14%"], ["--loss", "write 0.14"]),
    "calc decimal comma": (["calc", "mathis", "--loss", "0,14"], ["--loss", "0.14"]),
    "sim --runs comma": (["sim", "--runs", "1,000"], ["'--runs'", "write 1000"]),
    "sweep --workers": (["sweep", "x.toml", "--vary", "task.rounds=1,2", "--workers", "50%"],
                        ["'--workers'", "percentage"]),
}  # fmt: skip


@pytest.mark.parametrize("name", list(OPTION_SLIPS))
@cli_calls(lambda name: {"": call(*OPTION_SLIPS[name][0])})
def test_a_percentage_comma_or_boolean_option_value_names_the_number_meant(
    name: str, cli_runs: dict[str, Done]
) -> None:
    """Every command's number options: '14%' says 'write 0.14', not 'not a valid float'."""
    assert_one_line_error(cli_runs[""].run, *OPTION_SLIPS[name][1])


EMPTY_OPTIONS = {  # every option of every command: an empty value is not "absent"
    "plan --objective": ["plan", "--objective", ""],
    "plan --baseline": ["plan", "--baseline", ""],
    "plan --example": ["plan", "--example", ""],
    "plan --plot": ["plan", "--plot", ""],
    "plan --html=": ["plan", "--html="],
    "plan --set": ["plan", "--set", " "],
    "sim --example": ["sim", "--example", ""],
    "sim --trace": ["sim", "--trace", ""],
    "reproduce --section": ["reproduce", "--section", ""],
    "route decisions --since": ["route", "decisions", "--since", ""],
    "relay gateway --listen": ["relay", "gateway", "--check", "--listen", ""],
    "lab up --rtt": ["lab", "up", "--rtt", ""],
}


@pytest.mark.parametrize("name", list(EMPTY_OPTIONS))
@cli_calls(lambda name: {"": call(*EMPTY_OPTIONS[name])})
def test_an_empty_option_value_is_refused_not_taken_as_absent(
    name: str, cli_runs: dict[str, Done]
) -> None:
    """--objective '' or --plot '' is a mistake to name, not the default or the cwd."""
    option = name.split()[-1].rstrip("=")
    assert_one_line_error(cli_runs[""].run, f"'{option}'", "an empty value")


# Every command that reads a user's file, with {f} for the file.
READERS = {
    "plan": ["plan", "{f}"],
    "plan --catalog": ["plan", "--catalog", "{f}"],
    "sim": ["sim", "{f}"],
    "sweep": ["sweep", "{f}", "--vary", "task.rounds=1,2"],
    "catalog": ["catalog", "--catalog", "{f}"],
    "catalog add-model": ["catalog", "add-model", "{f}", "--id", "x"],
    "route replay": ["route", "replay", "{f}"],
    "route decisions": ["route", "decisions", "--log", "{f}"],
    "route config": ["route", "decisions", "--config", "{f}"],
}
ODD_FILES = {  # a path (or file bytes) and what the error names
    "directory": ("{dir}", ["directory"]),
    "endless device": ("/dev/zero", ["larger than 10 MB"]),
    "binary garbage": (bytes(range(256)) * 8, ["not UTF-8"]),
    "invalid UTF-8": (b'name = "caf\xe9"\n', ["not UTF-8", "line 1"]),
    "missing": ("{dir}/nope", ["not found"]),
}


def _odd_calls(reader: str, odd: str) -> dict[str, object]:
    where, _ = ODD_FILES[odd]
    files = {"in.bin": where} if isinstance(where, bytes) else {}
    path = "{dir}/in.bin" if files else where
    return {"": call(*[a.replace("{f}", path) for a in READERS[reader]], files=files)}


@pytest.mark.parametrize("odd", list(ODD_FILES))
@pytest.mark.parametrize("reader", list(READERS))
@cli_calls(_odd_calls)
def test_every_reader_refuses_odd_files_in_one_line(
    reader: str, odd: str, cli_runs: dict[str, Done]
) -> None:
    """Directories, /dev/zero, binary garbage, bad UTF-8, no file: one line, any reader."""
    assert_one_line_error(cli_runs[""].run, *ODD_FILES[odd][1])


@pytest.fixture(scope="module")
def fifo_runs(tmp_path_factory: pytest.TempPathFactory):
    """Every reader started at once on a FIFO of its own that nothing writes to.

    Each run waits out tomlfile.INPUT_WAIT_S (5 s) with nothing to do, so they wait side
    by side (one thread and one real ``tierwise`` process each): about 6 s for all,
    not 5 s each. A test then takes its own reader's run and how long it took."""
    import os
    import time
    from concurrent.futures import ThreadPoolExecutor

    from tests.conftest import run_cli

    def one(reader: str):
        fifo = tmp_path_factory.mktemp("fifo") / "in.toml"
        os.mkfifo(fifo)
        started = time.monotonic()
        run = run_cli(*[a.replace("{f}", str(fifo)) for a in READERS[reader]])
        return run, time.monotonic() - started

    pool = ThreadPoolExecutor(max_workers=len(READERS))
    futures = {reader: pool.submit(one, reader) for reader in READERS}
    yield futures
    pool.shutdown(wait=True)


@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_gives_up_on_a_fifo_nothing_writes_to(reader: str, fifo_runs) -> None:
    """mkfifo f; tierwise plan f: one line after about 5 s, never a hang."""
    run, took_s = fifo_runs[reader].result()
    assert took_s < 30
    assert_one_line_error(run, "did not finish within 5 s")


# ------------------------------------------------------------ output that cannot be written

REPORTS = {  # commands whose whole output is a report on stdout
    "plan": ["plan"],
    "plan --json": ["plan", "--json"],
    "sim": ["sim"],
    "catalog": ["catalog"],
    "calc": ["calc"],
    "reproduce": ["reproduce", "--section", "12.3.2"],
    "--help": ["plan", "--help"],
    "relay keygen": ["relay", "keygen"],
}


def _run_to(args: list[str], stdout: int | None, env: dict[str, str] | None = None, close=False):
    """``tierwise ARGS`` in a new interpreter with fd 1 set to ``stdout`` (or closed)."""
    import subprocess
    import sys

    from tests.conftest import CLI_ENV, Run

    proc = subprocess.run(
        [sys.executable, "-c", "from tierwise.cli import main; main()", *args],
        stdout=stdout if not close else None,
        stderr=subprocess.PIPE,
        env={**CLI_ENV, **(env or {})},
        preexec_fn=(lambda: __import__("os").close(1)) if close else None,
        timeout=120,
    )
    return Run(proc.returncode, "", proc.stderr.decode("utf-8", "replace"))


DESTINATIONS = ["/dev/full", "closed", "broken pipe"]


@pytest.mark.slow  # 24 interpreters
@pytest.mark.parametrize("where", DESTINATIONS)
@pytest.mark.parametrize("report", list(REPORTS))
def test_an_unwritable_stdout_is_one_line_and_status_2(report: str, where: str) -> None:
    """>/dev/full, >&- and a reader gone: one line naming stdout, never a traceback."""
    import os

    args = REPORTS[report]
    if where == "/dev/full":
        with open("/dev/full", "wb") as full:
            run = _run_to(args, full.fileno())
    elif where == "closed":
        run = _run_to(args, None, close=True)
    else:
        read, write = os.pipe()
        os.close(read)  # no reader: every write is EPIPE
        try:
            run = _run_to(args, write)
        finally:
            os.close(write)
    assert_one_line_error(run, "stdout", "cannot write the output")


ENVIRONMENTS = {
    "COLUMNS=0": {"COLUMNS": "0"},
    "COLUMNS=1": {"COLUMNS": "1"},
    "COLUMNS=-5": {"COLUMNS": "-5"},
    "COLUMNS huge": {"COLUMNS": "99999999"},
    "ASCII": {"PYTHONIOENCODING": "ascii"},
    "C locale": {"LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii"},
}
TABLES = ["plan", "sim", "catalog", "reproduce", "--help"]


@pytest.mark.parametrize("env", list(ENVIRONMENTS))
@pytest.mark.parametrize("report", TABLES)
@cli_calls(lambda report, env: {"": call(*REPORTS[report], env={
    **{"COLUMNS": "160", "PATH": "/usr/bin:/bin"}, **ENVIRONMENTS[env]})})  # fmt: skip
def test_odd_terminals_still_get_the_whole_table(
    report: str, env: str, cli_runs: dict[str, Done]
) -> None:
    """COLUMNS=0 or huge, an ASCII-only locale: the report, drawable in that terminal."""
    run = cli_runs[""].run
    assert run.code in (0, 1), run.stderr  # reproduce: 1 if a number disagrees
    assert "Traceback" not in run.stderr and run.stdout
    widths = [len(line) for line in run.stdout.splitlines()]
    assert max(widths) <= 1000
    if "COLUMNS" in ENVIRONMENTS[env] and ENVIRONMENTS[env]["COLUMNS"] in ("0", "1"):
        assert max(widths) >= 40  # not one character per line
    if ENVIRONMENTS[env].get("PYTHONIOENCODING") == "ascii":
        assert run.stdout.isascii()


# ------------------------------------------------------------ output files: whole or not at all

OLD = "# the old file, which a failed write must leave as it was\n" * 100  # 5.8 kB
OUTPUTS = {  # the command, and the file it writes (in {dir})
    "plan --html": (["plan", "--html", "{dir}/out.html"], "out.html"),
    "plan --plot": (["plan", "--plot", "{dir}"], "breakdown.png"),
    "sim --trace": (["sim", "--trace", "{dir}/out.csv"], "out.csv"),
    "reproduce --html": (["reproduce", "--section", "12.3.2", "--html", "{dir}/out.html"],
                         "out.html"),
    "catalog add-model --out": (
        ["catalog", "add-model", str(EXAMPLES.parent / "catalog" / "data" / "architectures"
                                     / "qwen3-8b.json"), "--id", "q", "--out", "{dir}/c.toml"],
        "c.toml",
    ),
    "sweep --csv": (["sweep", str(EXAMPLES / "deployment.toml"), "--vary", "task.rounds=1..40:40",
                     "--csv", "{dir}/out.csv"], "out.csv"),
}  # fmt: skip
FILE_LIMIT_BYTES = len(OLD) + 100  # above the old file, below every new one


@pytest.mark.slow  # six interpreters
@pytest.mark.parametrize("name", list(OUTPUTS))
def test_a_write_that_fails_half_way_leaves_the_old_file(name: str, tmp_path: Path) -> None:
    """A file-size limit hit mid-write (as a full disk would be): one line, exit 2, the old
    file as it was and no partial file beside it."""
    import resource
    import signal
    import subprocess
    import sys

    from tests.conftest import CLI_ENV, Run

    args, written = OUTPUTS[name]
    target = tmp_path / written
    target.write_text(OLD)

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it is EFBIG, not a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT_BYTES, FILE_LIMIT_BYTES))

    proc = subprocess.run(
        [sys.executable, "-c", "from tierwise.cli import main; main()",
         *[a.replace("{dir}", str(tmp_path)) for a in args]],
        # no bytecode: a .pyc cut short by the limit would be renamed into place by Python
        capture_output=True, text=True, env={**CLI_ENV, "PYTHONDONTWRITEBYTECODE": "1"},
        preexec_fn=limit, timeout=300,
    )  # fmt: skip
    assert_one_line_error(Run(proc.returncode, proc.stdout, proc.stderr), "too large")
    assert target.read_text() == OLD
    assert [p.name for p in tmp_path.iterdir()] == [written]


# ------------------------------------------------------------ JSON inputs: logs and config.json

_GOOD = {"ts": 1e9, "predicted": {"edge": {"time_s": 0.5, "feasible": True},
         "cloud": {"time_s": 0.2, "feasible": True}}, "chosen": "cloud", "actual_s": 0.3,
         "outcome": "ok", "stages": {"first_token_s": 0.1}}  # fmt: skip
BAD_RECORDS = {  # a change to a good record, and the key the error must name
    "ts a string": ({"ts": "now"}, "ts"),
    "predicted a list": ({"predicted": [1]}, "predicted"),
    "time_s a string": ({"predicted": {"edge": {"time_s": "1 s", "feasible": True}},
                         "chosen": "edge"}, "predicted.edge.time_s"),
    "feasible missing": ({"predicted": {"edge": {"time_s": 1}}, "chosen": "edge"},
                         "predicted.edge.feasible"),
    "chosen not predicted": ({"chosen": "mars"}, "chosen"),
    "actual_s missing": ({"actual_s": None}, "actual_s"),
    "actual_s a boolean": ({"actual_s": True}, "actual_s"),
    "actual_s NaN": ({"actual_s": float("nan")}, "actual_s"),
    "stages a string": ({"stages": "x"}, "stages"),
    "not an object": ([1, 2], "expected a JSON object"),
    "not JSON": ("{", "not JSON"),
}  # fmt: skip


def _log(change: object) -> str:
    import json

    if isinstance(change, str):
        bad = change
    elif isinstance(change, dict):
        bad = json.dumps({**_GOOD, **change})
    else:
        bad = json.dumps(change)
    return json.dumps(_GOOD) + "\n\n" + bad + "\n"  # the bad record is on line 3


@pytest.mark.parametrize("command", ["replay", "decisions"])
@pytest.mark.parametrize("bad", list(BAD_RECORDS))
@cli_calls(lambda command, bad: {"": call(
    "route", *(["replay", "{dir}/d.jsonl"] if command == "replay"
               else ["decisions", "--since", "1000000 h", "--log", "{dir}/d.jsonl"]),
    files={"d.jsonl": _log(BAD_RECORDS[bad][0])})})  # fmt: skip
def test_a_bad_decisions_log_record_names_its_line_and_key(
    command: str, bad: str, cli_runs: dict[str, Done]
) -> None:
    """A wrong type, a missing field, a site never predicted: file:line and the key."""
    run = cli_runs[""].run
    assert_one_line_error(run, "d.jsonl:3", BAD_RECORDS[bad][1])


_ARCH = EXAMPLES.parent / "catalog" / "data" / "architectures" / "qwen3-8b.json"
BAD_CONFIGS = {  # a change to a good config.json, and what the error must name
    "a boolean size": ({"hidden_size": True}, "'hidden_size'"),
    "a string size": ({"intermediate_size": "14%"}, "'intermediate_size'"),
    "text_config a list": ({"text_config": [1]}, "'text_config'"),
    "vision_config a string": ({"vision_config": "x"}, "'vision_config'"),
    "tie a string": ({"tie_word_embeddings": "yes"}, "'tie_word_embeddings'"),
    "bias a string": ({"attention_bias": "no"}, "'attention_bias'"),
    "layers missing": ({"num_hidden_layers": None}, "'num_hidden_layers'"),
}


@pytest.mark.parametrize("bad", list(BAD_CONFIGS))
@cli_calls(lambda bad: {"": call("catalog", "add-model", "{dir}/config.json", "--id", "m",
    files={"config.json": __import__("json").dumps(
        {**__import__("json").loads(_ARCH.read_text()), **BAD_CONFIGS[bad][0]})})})  # fmt: skip
def test_a_bad_config_json_names_the_key(bad: str, cli_runs: dict[str, Done]) -> None:
    """config.json with wrong types or nested tables of the wrong shape: one line, its key."""
    assert_one_line_error(cli_runs[""].run, "config.json", BAD_CONFIGS[bad][1])


EDGE_NUMBERS = {  # numbers at the edge, where a number goes on the command line
    "a 5,000-digit relay setting": (
        ["relay", "gateway", "--check", "--allow", "127.0.0.1:80", "--max-datagram", "9" * 5000],
        ["--max-datagram", "an integer"],
    ),
    "a negative --since": (["route", "decisions", "--since", "-5 s"], ["--since", "back"]),
    "--seed=-1": (["sim", "--seed=-1"], ["--seed"]),
    "nan runs": (["sim", "--runs", "nan"], ["--runs"]),
    "1e309 in --set": (["plan", "--set", "task.rounds=1e309"], ["task.rounds", "finite"]),
    "9**9**9 in --set": (["plan", "--set", "task.upload=9**9**9 MB"], ["task.upload"]),
}


@pytest.mark.parametrize("name", list(EDGE_NUMBERS))
@cli_calls(lambda name: {"": call(*EDGE_NUMBERS[name][0])})
def test_edge_numbers_on_the_command_line_are_one_line(
    name: str, cli_runs: dict[str, Done]
) -> None:
    """5,000 digits, a negative look-back, nan, 1e309, 9**9**9: one line, never a traceback."""
    assert_one_line_error(cli_runs[""].run, *EDGE_NUMBERS[name][1])


NOTHING_TO_DRAW = {  # scenarios whose every stage is 0 s: figures with empty bars
    "agent, 0 rounds": _edit((EXAMPLES / "screenshot-agent.toml").read_text("utf-8"),
                             "rounds = 30", "rounds = 0"),
    "deployment, 0 rounds": _edit(SCENARIO, "rounds = 20", "rounds = 0"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(NOTHING_TO_DRAW))
@cli_calls(lambda name: {"": call("plan", "{dir}/s.toml", "--plot", "{dir}",
                                  files={"s.toml": NOTHING_TO_DRAW[name]})})  # fmt: skip
def test_a_plan_with_nothing_to_draw_still_draws(name: str, cli_runs: dict[str, Done]) -> None:
    """rounds = 0 with --plot: the figures (empty bars), not a traceback from the legend."""
    done = cli_runs[""]
    assert done.run.code == 0, done.run.stderr
    assert (done.dir / "breakdown.png").stat().st_size > 0
