"""Real process trees on the local backend (15-30 s each alone): a job that cannot save crash-loops; the
run's stop reason, diagnosis.json, CLI summary and report name the node, its repeated error and the fix.
The stuck window is wide: in a loaded CI run two nodes had not made their first step after 40 s
(torch imported on a slow machine next to the other test worker); the runs end sooner by themselves."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
JOBS = Path(__file__).parent / "jobs"
ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, args: list[str]) -> tuple[subprocess.CompletedProcess, Path]:
    sc = tmp_path / "s.yaml"
    sc.write_text(f"""name: diag_e2e
cluster: {{nodes: 2, elastic: {{min_nodes: 2, max_nodes: 2, max_restarts: 1}}, rendezvous: etcd-v3,
          rdzv_timeouts: {{keep_alive_interval: 1, keep_alive_max_attempt: 3, last_call_timeout: 1}}}}
trainer:
  workdir: {JOBS}
  script: job.py
  args: {json.dumps(args)}
  progress: {{regex: 'step (?P<step>\\d+) loss'}}
expect: {{reaches_step: 12}}
run: {{timeout_s: 150, stuck_after_s: 90}}
""")
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "run", str(sc), "--backend", "local",
                        "--report-dir", str(tmp_path / "reports")], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    (run_dir,) = [d for d in (tmp_path / "reports").iterdir() if d.is_dir()]
    return r, run_dir


def test_a_save_into_a_missing_directory_is_named_first_with_its_node_and_fix(tmp_path):
    r, run_dir = _run(tmp_path, ["--steps", "12", "--every", "3", "--step-time", "0.05", "--save-to", "ckpt-subdir"])
    stop = json.loads((run_dir / "harness.json").read_text())["stop_reason"]
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    assert "root cause: node-" in stop and "RuntimeError: Parent directory" in stop, stop
    diag = json.loads((run_dir / "diagnosis.json").read_text())
    assert diag["findings"][0]["rule"] == "checkpoint_dir_missing", diag["findings"]
    assert "to fix" in r.stdout and "os.makedirs" in r.stdout, r.stdout[-2000:]
    html = (run_dir / "report.html").read_text()
    assert html.index('id="what-to-fix"') < html.index('id="run"')


def test_the_checkpoint_dir_is_there_when_the_job_starts(tmp_path):
    # job.py saves straight into $CHAOSBENCH_CHECKPOINT_DIR without creating it
    r, run_dir = _run(tmp_path, ["--steps", "12", "--every", "3", "--step-time", "0.05"])
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert not [f for f in json.loads((run_dir / "diagnosis.json").read_text())["findings"]
                if f["severity"] == "cause"]
