"""The package import graph of chaosbench against the layers docs/architecture.md documents: no
arrow up, no circle, no package the table does not place (docs/architecture.md says why and how)."""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|([^|]*)\|")

Graph = dict[str, dict[str, list[str]]]   # package -> imported package -> ["file:line", ...]


def documented_layers(doc: Path = DOC) -> list[tuple[str, list[str]]]:
    """The table of docs/architecture.md, bottom to top: (layer name, its packages)."""
    rows = [ROW.match(line) for line in doc.read_text().splitlines()]
    layers = [(int(m[1]), m[2], re.findall(r"`([\w.]+)`", m[3])) for m in rows if m]
    assert [n for n, _, _ in layers] == list(range(1, len(layers) + 1)), f"{doc}: layers not numbered 1, 2, ..."
    return [(name, pkgs) for _, name, pkgs in layers]


def _package(module: str) -> str | None:
    """The first level below chaosbench ('chaosbench.cluster.docker.backend' -> 'cluster')."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "chaosbench" else None


def import_graph(root: Path) -> Graph:
    """Every import in every module under `root` (a `chaosbench` folder), those inside functions and
    relative ones included, folded to packages; imports within a package are left out."""
    graph: Graph = defaultdict(lambda: defaultdict(list))
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        here = parts[:-1] if parts[-1] == "__init__" else parts
        src = _package(".".join(here))
        if src is None:   # chaosbench/__init__.py
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:   # relative: from the module's package, up level - 1
                    pkg = here if parts[-1] == "__init__" else parts[:-1]
                    base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" for a in node.names]   # `from chaosbench import rundir`
            else:
                continue
            for dst in {_package(t) for t in targets} - {None, src}:
                graph[src][dst].append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected parts of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while not part or part[-1] != v:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def problems(graph: Graph, layers: list[tuple[str, list[str]]], packages: set[str]) -> list[str]:
    """What breaks the layering, one line each, naming where and what to do."""
    level = {pkg: i for i, (_, pkgs) in enumerate(layers) for pkg in pkgs}
    out = [f"chaosbench/{p} is in no layer: place it in the table of docs/architecture.md"
           for p in sorted(packages - level.keys())]
    out += [f"docs/architecture.md places '{p}', which is not a package of chaosbench: drop it there"
            for p in sorted(level.keys() - packages)]
    for src, dsts in sorted(graph.items()):
        for dst, where in sorted(dsts.items()):
            if src in level and dst in level and level[dst] > level[src]:
                out.append(f"upward import {src} ({layers[level[src]][0]}) -> {dst} ({layers[level[dst]][0]}) at "
                           f"{', '.join(where)}: move what both need down, never hide the import in a function")
    for part in cycles(graph):
        arrows = [f"{a} -> {b} ({graph[a][b][0]})" for a in part for b in part if b in graph.get(a, {})]
        out.append(f"import circle among {', '.join(part)}: {'; '.join(arrows)}")
    return out


def packages_of(root: Path) -> set[str]:
    return {p.stem for p in root.iterdir() if (p.suffix == ".py" and p.stem != "__init__")
            or (p.is_dir() and (p / "__init__.py").exists())}


def test_chaosbench_has_no_upward_import_and_no_circle():
    root = REPO / "chaosbench"
    graph = import_graph(root)
    assert graph["runner"] and graph["cli"], "the graph found no imports: the parser is broken"
    found = problems(graph, documented_layers(), packages_of(root))
    assert not found, "\n".join(found)


# -- the test's own parts, on synthetic graphs and source trees ------------------------------------

LAYERS = [("formats", ["result"]), ("checks", ["checks"]), ("views", ["report", "doctor"]), ("run", ["runner"])]


def _graph(*arrows: str) -> Graph:
    graph: Graph = defaultdict(lambda: defaultdict(list))
    for a in arrows:
        src, dst = a.split("->")
        graph[src][dst].append(f"chaosbench/{src}.py:1")
    return graph


def test_an_upward_import_is_named_with_its_place():
    found = problems(_graph("runner->report", "result->report"), LAYERS, {"result", "checks", "report", "doctor",
                                                                           "runner"})
    assert found == ["upward import result (formats) -> report (views) at chaosbench/result.py:1: move what both "
                     "need down, never hide the import in a function"]


def test_a_circle_within_one_layer_is_named():
    found = problems(_graph("report->doctor", "doctor->report", "runner->report"), LAYERS,
                     {"result", "checks", "report", "doctor", "runner"})
    assert len(found) == 1 and found[0].startswith("import circle among doctor, report:")


def test_a_package_no_layer_places_is_refused():
    found = problems(_graph(), LAYERS, {"result", "checks", "report", "doctor", "runner", "newthing"})
    assert found == ["chaosbench/newthing is in no layer: place it in the table of docs/architecture.md"]


@pytest.mark.parametrize("source", [
    "from chaosbench.report.render import render_run\n",
    "def f():\n    from chaosbench import report\n",           # inside a function, `from chaosbench import`
    "import chaosbench.report.render as r\n",
])
def test_an_added_upward_import_fails_however_it_is_written(tmp_path, source):
    root = tmp_path / "chaosbench"
    for pkg in ("report", "checks"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "result.py").write_text(source)
    (root / "runner.py").write_text("from chaosbench import result\n")
    (root / "checks" / "base.py").write_text("from ..result import x\n")        # relative, downward: fine
    layers = [("formats", ["result"]), ("checks", ["checks"]), ("views", ["report"]), ("run", ["runner"])]
    graph = import_graph(root)
    assert set(graph["checks"]) == {"result"} and set(graph["runner"]) == {"result"}   # each form is resolved
    found = problems(graph, layers, packages_of(root))
    assert len(found) == 1 and found[0].startswith("upward import result (formats) -> report (views) at "
                                                   "chaosbench/result.py:")


def test_the_documented_layers_are_the_ones_the_doc_shows():
    layers = documented_layers()
    assert layers[0][1][:3] == ["jsonl", "rundir", "result"] and layers[-1][1] == ["cli", "pytest_plugin"]
    placed = [p for _, pkgs in layers for p in pkgs]
    assert len(placed) == len(set(placed)), "a package placed in two layers"


def test_the_scenario_table_of_checks_and_the_registry_agree():
    """The scenario validates check names without importing the checks (scenario/check_names.py); the
    registry refuses a check that table does not hold, so the two cannot drift apart."""
    from chaosbench.checks.registry import _REGISTRY, all_checks, check
    from chaosbench.scenario.check_names import ALWAYS, OPTIONAL
    assert {d.name: d.asked_by for d in all_checks()} == {**OPTIONAL, **ALWAYS}
    assert [d.name for d in all_checks() if not d.always] == list(OPTIONAL)   # the order `valid checks:` lists
    for args, kw in ((("no_such_check",), {}), (("reaches_step", "other_key"), {}), (("fault",), {})):
        with pytest.raises(ValueError, match="scenario/check_names.py"):
            check(*args, **kw)(lambda h, e, r: None)
    assert "no_such_check" not in _REGISTRY
