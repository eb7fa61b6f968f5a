"""The top-level CLI reaches doctor, export and report (their own tests cover their logic)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, env=None):
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "chaosbench.cli", *args], cwd=ROOT, env=e,
                          capture_output=True, text=True, timeout=120)


def test_doctor_env_without_launcher_variables_fails_with_a_fix():
    p = cli("doctor", "--env", "--no-versions", "--json")
    assert p.returncode == 1, p.stderr
    checks = json.loads(p.stdout)["checks"]
    launcher = [c for c in checks if c["status"] == "FAIL"]
    assert launcher and any("torchrun" in (c.get("fix") or "") for c in launcher), launcher


def test_export_k8s_writes_manifests(tmp_path):
    p = cli("export", "k8s", "scenarios/node_loss.yaml", "-o", str(tmp_path))
    assert p.returncode == 0, p.stderr
    names = sorted(f.name for f in tmp_path.iterdir())
    assert any("job" in n for n in names) and any("service" in n for n in names), names


def test_report_on_a_broken_result_is_bad_input(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "result.json").write_text("{not json")
    p = cli("report", str(tmp_path / "run"))
    assert p.returncode == 2
    assert "result.json" in p.stderr


def test_doctor_bad_input_is_a_usage_error_even_with_json():
    for args in (["--json", "--bogus"], ["--wait", "abc"], ["--env", "--scenario", "scenarios/node_loss.yaml"]):
        p = cli("doctor", *args)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stdout == "" and "doctor -h" in p.stderr, (args, p.stdout, p.stderr)


def test_doctor_help_names_every_flag_and_the_stuck_timeout_it_uses():
    from chaosbench.doctor.diagnose import DEFAULT_TIMEOUT_S
    p = cli("doctor", "-h", env={"COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    for flag in ("--scenario", "--env", "--run", "--json", "--config", "--rdzv-backend", "--rdzv-endpoint", "--etcd",
                 "--run-id", "--wait", "--gpu", "--no-versions", "--timeout", "--nodes"):
        assert flag in p.stdout, flag
    assert f"(default {DEFAULT_TIMEOUT_S:.0f})" in p.stdout   # the help's number is the one diagnose_run uses


def test_doctor_stored_run_and_missing_run_dir():
    p = cli("doctor", "--run", "tests/diagnosis/data/node_loss_plain", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["phase"] == "training"
    p = cli("doctor", "--run", "tests/diagnosis/data/no_such_run")
    assert p.returncode == 2 and "run directory not found" in p.stderr


def test_doctor_and_export_run_in_process_with_their_exit_codes(tmp_path, capsys):
    from chaosbench.doctor import main as doctor_main
    from chaosbench.export import main as export_main
    assert doctor_main(["--nodes", "x"]) == 2
    assert export_main(["k8s", "scenarios/node_loss.yaml", "-o", str(tmp_path / "k8s")]) == 0
    assert export_main(["k8s"]) == 2 and export_main([]) == 2
    capsys.readouterr()
