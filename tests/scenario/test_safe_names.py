"""Scenario strings that reach a path, a shell word, a docker/torchrun argument or an iptables script:
refused at load (exit 2, file:line, field, fix), and the path sink refuses on its own too."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from chaosbench.faults.registry import validate_params
from chaosbench.scenario.loader import ScenarioError, load_scenario, parse_scenario
from chaosbench.scenario.names import fault_file_name


def _refused(data: dict) -> str:
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"name": "x", **data}, "s.yaml")
    return "\n".join(err.value.problems)


def test_a_path_like_fault_id_is_refused_at_load_with_file_line_field_and_fix(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(textwrap.dedent("""\
        name: evil
        faults:
          - id: ../../outside
            at: {step: 5}
            kill_node: {node: node-1}
        expect: {reaches_step: 20}
        """))
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    msg = "\n".join(err.value.problems)
    assert f"{f}:3: faults[0].id: fault id '../../outside' is not a safe name" in msg and "A-Z a-z 0-9" in msg
    p = subprocess.run([sys.executable, "-m", "chaosbench.cli", "validate", str(f)], capture_output=True, text=True)
    assert p.returncode == 2 and "faults[0].id" in p.stdout + p.stderr


@pytest.mark.parametrize("fid", ["a/b", "..", ".hidden", "-x", "a b", "x;y", "a" * 65, "f1..2", "é"])
def test_fault_ids_that_are_not_plain_names_are_refused(fid):
    assert "faults[0].id" in _refused({"faults": [{"id": fid, "at": {"step": 3}, "kill_node": {"node": "node-1"}}],
                                       "expect": {"reaches_step": 9}})


def test_ordinary_fault_ids_still_load():
    s = parse_scenario({"name": "x", "expect": {"reaches_step": 9}, "faults": [
        {"id": "kill_n1.v2-a", "at": {"step": 3}, "kill_node": {"node": "node-1"}},
        {"at": {"after_fault": "kill_n1.v2-a"}, "kill_node": {"node": "node-1"}}]}, "s.yaml")
    assert [f.id for f in s.faults] == ["kill_n1.v2-a", "f2"]


def test_the_inventory_sink_refuses_a_path_like_fault_id_and_writes_nothing(tmp_path):
    from chaosbench.evidence.collect import inventory_at
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    cluster = SimpleNamespace(node_names=lambda: [])
    with pytest.raises(ValueError, match="cannot name a file"):
        inventory_at(cluster, run_dir, "../../escaped")   # refused before any thread starts
    assert not list(tmp_path.rglob("escaped*"))
    assert fault_file_name("f1") == "f1.json" and fault_file_name("f1#3") == "f1-3.json"
    for bad in ("a/b", "../x", "f1#../x", "f1#2#3", ""):
        with pytest.raises(ValueError):
            fault_file_name(bad)


def test_cluster_env_names_become_env_words_and_must_be_names():
    for key in ("-i", "A B", "X=Y", "1X", "A;B"):
        assert "cluster.env" in _refused({"cluster": {"env": {key: "1"}}, "expect": {"reaches_step": 9}})
    parse_scenario({"name": "x", "cluster": {"env": {"NCCL_DEBUG": "x; y 'z'"}}, "expect": {"reaches_step": 9}})


def test_rdzv_conf_keys_cannot_smuggle_other_keys():
    msg = _refused({"cluster": {"rdzv_timeouts": {"read_timeout,is_host": 1}}, "expect": {"reaches_step": 9}})
    assert "cluster.rdzv_timeouts" in msg


def test_docker_and_torchrun_words_cannot_be_options(tmp_path):
    (tmp_path / "t.py").write_text("")
    base = {"workdir": str(tmp_path), "script": "t.py"}
    assert "trainer.image" in _refused({"trainer": {**base, "image": "--privileged"}, "expect": {"reaches_step": 9}})
    assert "trainer.image" in _refused({"trainer": {**base, "image": "me/x y"}, "expect": {"reaches_step": 9}})
    assert "trainer.module" in _refused({"trainer": {"workdir": str(tmp_path), "module": "-c"},
                                         "expect": {"reaches_step": 9}})
    assert "trainer.script" in _refused({"trainer": {"workdir": str(tmp_path), "script": "--no-python"},
                                         "expect": {"reaches_step": 9}})
    assert "trainer.workdir" in _refused({"trainer": {"workdir": "/a:/etc", "script": "t.py"},
                                          "expect": {"reaches_step": 9}})
    parse_scenario({"name": "x", "trainer": {**base, "image": "registry:5000/me/train:1.2"},
                    "expect": {"reaches_step": 9}})


def test_slurm_names_and_sbatch_options():
    assert "cluster.slurm.partition" in _refused({"cluster": {"slurm": {"partition": "gpu; id"}},
                                                  "expect": {"reaches_step": 9}})
    assert "cluster.slurm.sbatch_options" in _refused({"cluster": {"slurm": {"sbatch_options": ["qos=x"]}},
                                                       "expect": {"reaches_step": 9}})
    parse_scenario({"name": "x", "cluster": {"slurm": {"partition": "gpu,cpu", "sbatch_options": ["--qos=hi"]}},
                    "expect": {"reaches_step": 9}})


def test_fault_node_names_reaching_containers_srun_and_iptables_are_harness_names_only():
    """Checked by the fault's own params too, not only by the loader's node-list check."""
    from pydantic import ValidationError
    for kind, params in (("kill_node", {"node": "node-1; reboot"}), ("pause_node", {"node": "../x"}),
                         ("partition", {"nodes": ["node-1", "a b"]}), ("partition", {"peers": ["$(id)"]}),
                         ("disconnect", {"node": "-j ACCEPT"})):
        with pytest.raises(ValidationError):
            validate_params(kind, params)
    assert validate_params("partition", {"node": "node-2", "peers": ["node-0", "etcd"]}).peers == ["node-0", "etcd"]
