"""The layering rule of docs/design.md: lower layers never import higher ones.

Every module under ``src/tierwise`` is parsed with ``ast``; every ``tierwise``
import it makes (top level, inside functions, under ``TYPE_CHECKING``, relative)
is checked against the rank of its package. A module may import a lower rank, or
its own package; a same-rank package only where ``ALLOWED`` says so; and some
packages are restricted further to an explicit list (``ONLY``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import tierwise

SRC = Path(tierwise.__file__).parent

# Data flows one way: scenario → plan → model/sim/lab → report; cli on top.
RANKS = {
    "errors": 0,
    "units": 0,
    "tomlfile": 0,
    "schemakeys": 0,
    "listen": 0,
    "jsonvalue": 0,
    "console": 0,
    "outfile": 0,
    "_native": 0,
    "figsave": 0,
    "lazy": 0,
    "addresses": 0,
    "secretfile": 0,
    "openai_api": 0,
    "catalog": 1,
    "model": 2,
    "proto": 2,
    "scenario": 3,
    "sim": 3,
    "plan": 4,
    "lab": 4,
    "relay": 4,
    "route": 5,
    "report": 5,
    "calc": 5,
    "reproduce": 5,
    "cli": 6,
}

# Same-rank imports across packages that the design allows: every layer raises errors.
ALLOWED = {
    ("units", "errors"),
    ("tomlfile", "errors"),
    ("schemakeys", "errors"),
    ("listen", "errors"),
    ("console", "errors"),
    ("addresses", "errors"),
    ("secretfile", "errors"),
    ("openai_api", "errors"),
    ("figsave", "outfile"),
    ("reproduce", "calc"),
    ("reproduce", "report"),
}

# Packages that may import only these (besides themselves), as docs/design.md lists them:
# a formula never reads a scenario; the protocol knows nothing of sockets, clocks, units
# or scenarios; calc evaluates closed forms only: no plan, no report.
ONLY = {
    "errors": set(),
    "units": {"errors"},
    "tomlfile": {"errors"},
    "schemakeys": {"errors"},
    "listen": {"errors"},
    "jsonvalue": set(),
    "console": {"errors"},
    "outfile": set(),
    "_native": set(),
    "figsave": {"outfile"},
    "lazy": set(),
    "addresses": {"errors"},
    "secretfile": {"errors"},
    "openai_api": {"errors"},  # the OpenAI request schema: pydantic and the error root only
    "model": {"errors", "units", "catalog"},
    "proto": {"errors", "lazy"},  # lazy: the PEP 562 loader of its exports
    "calc": {"errors", "units", "catalog", "model"},
    # docs/design.md: route imports plan, model, units and the scenario language; only cli
    # imports it
    "route": {
        *("errors", "units", "catalog", "model", "scenario", "plan", "tomlfile", "listen"),
        "schemakeys",  # the base of every schema (NoBooleanNumbers)
        "console",  # what a person reads: never a cut number
        "openai_api",  # the request schema the gateway checks at its edge
        "addresses",  # is_loopback: a gateway beyond loopback needs client keys
        "secretfile",  # the keys file: regular, its owner's alone
    },
}

# Violations the lead has been told about, as "file:importer->target". Each must still
# occur (test_known_violations_still_exist), so fixing one forces its removal here.
KNOWN: set[str] = set()

EXEMPT = {"__init__", "examples"}  # tierwise/__init__.py re-exports the API; examples are data


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    importer: str  # package: "model", "cli", ...
    target: str  # full module name: "tierwise.plan.planner"

    @property
    def imported(self) -> str:
        parts = self.target.split(".")
        return parts[1] if len(parts) > 1 else "__init__"

    @property
    def key(self) -> str:
        return f"{self.path.relative_to(SRC.parent)}:{self.importer}->{self.target}"

    def __str__(self) -> str:
        rel = self.path.relative_to(SRC.parent)
        return f"{rel}:{self.line}: {self.importer} imports {self.target}"


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(path: Path) -> str:
    """``model`` for tierwise/model/x.py, ``cli`` for tierwise/cli.py, ``__init__`` for the root."""
    rel = path.relative_to(SRC)
    return (
        rel.parts[0].removesuffix(".py")
        if len(rel.parts) > 1 or rel.stem != "__init__"
        else "__init__"
    )


def resolve(node: ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Full names a ``from ... import ...`` refers to (``from . import x`` → pkg.x)."""
    if node.level:
        base = module.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    if prefix == "tierwise":  # from tierwise import model → tierwise.model
        return [f"tierwise.{alias.name}" for alias in node.names]
    return [prefix]


def imports_of(path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module = module_name(path)
    importer = package_of(path)
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            targets = resolve(node, module, path.name == "__init__.py")
        else:
            continue
        for target in targets:
            if target == "tierwise" or target.startswith("tierwise."):
                found.append(Import(path, node.lineno, importer, target))
    return found


def all_imports() -> list[Import]:
    return [imp for path in sorted(SRC.rglob("*.py")) for imp in imports_of(path)]


def violation(imp: Import) -> str | None:
    """Why ``imp`` breaks the layering, or None."""
    src, dst = imp.importer, imp.imported
    if src in EXEMPT or src == dst:
        return None
    if src not in RANKS:
        return f"package {src!r} has no rank; add it to RANKS in tests/test_layers.py"
    if dst == "__init__":
        return "imports the tierwise root, which imports every layer"
    if dst not in RANKS:
        return f"imports {dst!r}, which has no rank"
    if src in ONLY and dst not in ONLY[src]:
        return f"{src} may import only {sorted(ONLY[src]) or 'nothing of ours'}"
    if RANKS[dst] > RANKS[src]:
        return f"rank {RANKS[src]} imports higher rank {RANKS[dst]}"
    if RANKS[dst] == RANKS[src] and (src, dst) not in ALLOWED:
        return f"same rank {RANKS[src]}, different package"
    return None


def test_every_package_has_a_rank() -> None:
    """A new package must be placed in the layering before it can be checked."""
    packages = {package_of(p) for p in SRC.rglob("*.py")} - EXEMPT
    assert packages <= set(RANKS), f"no rank for: {sorted(packages - set(RANKS))}"


def test_import_walk_finds_imports() -> None:
    """The walk sees relative, function-level and `from tierwise import x` imports."""
    targets = {i.target for i in all_imports()}
    assert "tierwise.errors" in targets
    assert any(i.importer == "cli" and i.imported == "plan" for i in all_imports())
    tree = ast.parse("from . import y\nfrom ..units import Time\nfrom tierwise import model\n")
    froms = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert resolve(froms[0], "tierwise.calc.x", False) == ["tierwise.calc"]
    assert resolve(froms[1], "tierwise.calc.x", False) == ["tierwise.units"]
    assert resolve(froms[2], "tierwise.calc", True) == ["tierwise.model"]


def test_violation_rules() -> None:
    """The rule itself: down is fine, up, sideways and outside ONLY are not."""

    def check(importer: str, target: str) -> str | None:
        return violation(Import(SRC / "x.py", 1, importer, target))

    assert check("plan", "tierwise.model.device") is None
    assert check("units", "tierwise.errors") is None
    assert check("model", "tierwise.catalog") is None
    assert check("model", "tierwise.plan.planner")
    assert check("model", "tierwise.scenario.schema")
    assert check("proto", "tierwise.units")
    assert check("sim", "tierwise.scenario")
    assert check("calc", "tierwise.report.jsonout")
    assert check("report", "tierwise.calc")
    assert check("catalog", "tierwise.scenario")


def test_lower_layers_never_import_higher_ones() -> None:
    """No module imports a higher layer, a same-rank sibling, or outside its allowed list."""
    problems = [
        f"{imp}  ({why})"
        for imp in all_imports()
        if (why := violation(imp)) and imp.key not in KNOWN
    ]
    assert not problems, "layering violations:\n  " + "\n  ".join(problems)


def test_known_violations_still_exist() -> None:
    """Each tolerated violation is still real; once fixed, delete it from KNOWN."""
    current = {imp.key for imp in all_imports() if violation(imp)}
    assert KNOWN <= current, f"fixed, remove from KNOWN: {sorted(KNOWN - current)}"


# --- the lab's wings -------------------------------------------------------------------
# tierwise.lab is split into wings that depend one way: the bench (namespaces, emulator,
# path) under the experiments run on it, under the route world; views draw their
# records and the CLI sits on top. A module may import its own wing or a lower one, never
# a higher one; across wings only public names; and no import circle inside the lab.

LAB = SRC / "lab"
LAB_WINGS = {"bench": 0, "experiments": 1, "world": 2, "views": 3, "cli": 4}


def lab_modules() -> dict[str, Path]:
    """Every module of the lab by full name (tierwise.lab.bench.path → its file)."""
    return {module_name(p): p for p in sorted(LAB.rglob("*.py"))}


def lab_wing(module: str) -> str | None:
    """``bench`` for tierwise.lab.bench.path; None for tierwise.lab itself."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


@dataclass(frozen=True)
class LabImport:
    path: Path
    line: int
    importer: str  # full module name
    target: str  # full module name, a submodule where ``from pkg import mod`` names one
    names: tuple[str, ...]  # names taken from the target (empty for ``import x``)

    def __str__(self) -> str:
        rel = self.path.relative_to(SRC.parent)
        return f"{rel}:{self.line}: {self.importer} imports {self.target}"


def lab_imports_of(path: Path, modules: dict[str, Path]) -> list[LabImport]:
    """The imports of lab modules that ``path`` makes (top level, in functions, anywhere)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module = module_name(path)
    found: list[LabImport] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.append(LabImport(path, node.lineno, module, alias.name, ()))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve() gives the package or module it names
                base = resolve(node, module, path.name == "__init__.py")[0]
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:  # from tierwise.lab.bench import netns
                    found.append(LabImport(path, node.lineno, module, sub, ()))
                elif base in modules:
                    found.append(LabImport(path, node.lineno, module, base, (alias.name,)))
    return found


def all_lab_imports() -> list[LabImport]:
    modules = lab_modules()
    return [imp for path in modules.values() for imp in lab_imports_of(path, modules)]


def test_every_lab_module_is_in_a_wing() -> None:
    """Only tierwise/lab/__init__.py (the lazy public exports) stands outside the wings."""
    outside = [m for m in lab_modules() if m != "tierwise.lab" and lab_wing(m) not in LAB_WINGS]
    assert not outside, f"lab modules in no wing (add to LAB_WINGS or move): {outside}"


def test_lab_import_walk_finds_submodules() -> None:
    """``from tierwise.lab.bench import netns`` is an import of the module, not the package."""
    targets = {(i.importer, i.target) for i in all_lab_imports()}
    assert ("tierwise.lab.bench.path", "tierwise.lab.bench.netns") in targets
    assert ("tierwise.lab.cli.app", "tierwise.lab.cli.request") in targets


def test_lab_wings_depend_one_way() -> None:
    """No lab module imports a higher wing (bench ← experiments ← world ← views ← cli)."""
    problems = [
        f"{imp}  ({lab_wing(imp.importer)} may not import {lab_wing(imp.target)})"
        for imp in all_lab_imports()
        if lab_wing(imp.importer) in LAB_WINGS
        and lab_wing(imp.target) in LAB_WINGS
        and LAB_WINGS[lab_wing(imp.target)] > LAB_WINGS[lab_wing(imp.importer)]
    ]
    assert not problems, "lab wings imported upwards:\n  " + "\n  ".join(problems)


def test_lab_wings_share_only_public_names() -> None:
    """No lab module takes an underscore name from a module of another wing."""
    problems = [
        f"{imp}: {', '.join(n for n in imp.names if n.startswith('_'))}"
        for imp in all_lab_imports()
        if lab_wing(imp.importer) != lab_wing(imp.target)
        and any(n.startswith("_") for n in imp.names)
    ]
    assert not problems, "private names across lab wings:\n  " + "\n  ".join(problems)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as its nodes (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    trail: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        trail.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*trail[trail.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        trail.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_no_import_cycles_in_the_lab() -> None:
    """Lab modules import each other without a circle (function-level imports included)."""
    graph: dict[str, set[str]] = {m: set() for m in lab_modules()}
    for imp in all_lab_imports():
        if imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    cycle = find_cycle(graph)
    assert cycle is None, "import circle in the lab: " + " -> ".join(cycle or [])


def test_no_import_cycles_anywhere() -> None:
    """No module of the package imports another that imports it back, through any chain
    (imports inside functions included): the plan's choice rule, the lab's command line
    and its route world each once stood in such a circle."""
    modules = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in modules.values():
        for imp in lab_imports_of(path, modules):
            if imp.target != imp.importer:
                graph[imp.importer].add(imp.target)
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_design_document_states_the_same_ranks() -> None:
    """docs/design.md's rank table names every package at the rank RANKS gives it."""
    design = Path(__file__).resolve().parents[1] / "docs" / "design.md"
    stated: dict[str, int] = {}
    for line in design.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            for name in re.findall(r"`([\w]+)`", cells[1]):
                stated[name] = int(cells[0])
    assert stated == RANKS, {
        "missing from docs/design.md": sorted(set(RANKS) - set(stated)),
        "not in RANKS": sorted(set(stated) - set(RANKS)),
        "other rank": sorted(k for k in set(stated) & set(RANKS) if stated[k] != RANKS[k]),
    }
