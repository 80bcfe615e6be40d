"""`tierwise lab route` with hostile option values, run as a non-root user: exit 2, one line.

Registered here rather than in test_fuzz_cli.py so the lab's route command has its own
seeded cases; the forked runner and the contract checks are test_fuzz_cli's.
"""

from __future__ import annotations

import random
from pathlib import Path

from tests.fuzz.mutate import NUMBERS, VALUES, _calc_pool
from tests.fuzz.test_fuzz_cli import LAB_CASES, SEED, Forked, case_dirs, problems, run_forked_many

ROUTE_OPTIONS = {
    "--requests": "int", "--seed": "int", "--strategies": "str",
    "--plot": "path", "--json": "path",
}  # fmt: skip
STRATEGY_VALUES = ["predictive,", "static,lowest-latency,", ",,", "oracle,", "predictive,dice,"]


def make_route_case(index: int, seed: int = 0) -> list[str]:
    """``tierwise lab route`` with 1–2 hostile option values (never ``--loopback``)."""
    rng = random.Random(f"lab-route:{seed}:{index}")
    args = ["lab", "route"]
    for flag in rng.sample(sorted(ROUTE_OPTIONS), rng.choice([1, 1, 2])):
        kind = ROUTE_OPTIONS[flag]
        if kind == "path":
            value = rng.choice(["/nonexistent/dir/x", "", "\x00", *VALUES[:3]])
        elif kind == "str":
            value = rng.choice(STRATEGY_VALUES) + rng.choice([*VALUES, *NUMBERS])
        else:
            value = rng.choice(_calc_pool(rng, kind))
        args.append(f"{flag}={value}")
    return args


def test_fuzz_lab_route_options(tmp_path: Path) -> None:
    """Hostile values, not root: exit 2 with one short line, never a traceback or a run."""
    failures = []
    every = [make_route_case(index, SEED) for index in range(LAB_CASES)]
    dirs = case_dirs(tmp_path, LAB_CASES)
    runs = [Forked(a, d, as_user=True) for a, d in zip(every, dirs, strict=True)]
    for index, (args, outcome) in enumerate(zip(every, run_forked_many(runs), strict=True)):
        found = problems(outcome) + ([] if outcome.code == 2 else [f"exit {outcome.code}"])
        if len(outcome.stderr.splitlines()) > 1:
            found.append(f"{len(outcome.stderr.splitlines())} stderr lines")
        if found:
            failures.append(f"case {index} {[a[:60] for a in args]}: {found}")
    assert not failures, f"{len(failures)} of {LAB_CASES} broke:\n" + "\n".join(failures[:20])
