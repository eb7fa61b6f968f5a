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
