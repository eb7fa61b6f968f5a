"""Where each backend implements each primitive (Cluster.implementations, `python -m chaosbench.cluster.where`),
and the shape of cluster/: contracts hold no code, errors.py is a leaf, no import circle."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from chaosbench.cluster.base import Cluster, fault_primitives
from chaosbench.cluster.docker.backend import DockerCluster
from chaosbench.cluster.errors import UnsupportedFault
from chaosbench.cluster.local.backend import LocalCluster
from chaosbench.cluster.slurm.backend import SlurmCluster

CLUSTER = Path(__file__).resolve().parents[2] / "chaosbench" / "cluster"


def test_a_backend_s_own_primitive_is_named_by_its_file_and_method():
    assert DockerCluster.implementations()["kill_node"].startswith("chaosbench/cluster/docker/backend.py:")
    assert DockerCluster.implementations()["kill_node"].endswith(" DockerCluster.kill_node")
    assert LocalCluster.implementations()["kill_node"].endswith(" LocalCluster.kill_node")
    assert SlurmCluster.implementations()["kill_node"].startswith("chaosbench/cluster/slurm/backend.py:")


def test_a_shared_primitive_is_named_with_the_hooks_it_runs_on():
    where = DockerCluster.implementations()["freeze_worker"]
    assert where.startswith("chaosbench/cluster/primitives/workers.py:")
    assert " via chaosbench/cluster/docker/backend.py:" in where and where.endswith("DockerCluster._run_in_node")


def test_what_a_backend_lacks_is_none_and_raises_with_why():
    assert LocalCluster.implementations()["break_name"] is None
    assert "break_name" not in LocalCluster.implemented_faults()
    with pytest.raises(UnsupportedFault, match="'local' does not support break_name: .*host's resolver"):
        LocalCluster.__new__(LocalCluster).break_name("node-0", "node-0", "nxdomain")


def test_implemented_faults_is_what_implementations_names():
    for cls in (DockerCluster, LocalCluster, SlurmCluster):
        assert cls.implemented_faults() == {p for p, w in cls.implementations().items() if w}
    assert set(DockerCluster.implementations()) == set(fault_primitives())


def test_every_primitive_is_declared_in_its_family_module_not_in_base():
    for name in fault_primitives():
        module = getattr(Cluster, name).__module__
        assert module.startswith("chaosbench.cluster.primitives."), (name, module)


def test_a_backend_primitive_s_contract_holds_no_code():
    """A contract each backend implements is a signature and a docstring: nothing that could pass for an
    implementation of it (an `unsupported` raise included; the decorator raises)."""
    found = 0
    for path in (CLUSTER / "primitives").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    "backend_primitive" in ast.unparse(d) for d in node.decorator_list):
                found += 1
                assert len(node.body) == 1 and isinstance(node.body[0], ast.Expr) and \
                    isinstance(node.body[0].value, ast.Constant), f"{path.name}:{node.lineno} {node.name}"
    assert found >= 10


def test_the_where_command_answers_one_primitive():
    out = subprocess.run([sys.executable, "-m", "chaosbench.cluster.where", "docker", "kill_node"],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["docker", "kill_node", *DockerCluster.implementations()["kill_node"].split()]
    bad = subprocess.run([sys.executable, "-m", "chaosbench.cluster.where", "docker", "kill_nod"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown primitive 'kill_nod'" in bad.stderr


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The chaosbench.cluster modules a file imports, at any depth (lazy imports count): `from a import b`
    is module a.b where that is one, else a."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chaosbench.cluster"):
            out |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out & modules


def test_no_import_circle_inside_cluster_and_errors_is_a_leaf():
    modules = {}
    for path in CLUSTER.rglob("*.py"):
        parts = path.relative_to(CLUSTER.parents[1]).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {m: _imports(p, set(modules)) - {m} for m, p in modules.items()}
    assert graph["chaosbench.cluster.errors"] == set()
    done: set[str] = set()

    def visit(m, path):
        for d in graph[m] - done:
            assert d not in path, " -> ".join([*path, d])
            visit(d, [*path, d])
        done.add(m)
    for m in graph:
        visit(m, [m])
