"""The CI template users copy: it must run the library as `pytest -m chaos` and keep the reports."""
from __future__ import annotations

from pathlib import Path

import yaml

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "chaos.yml"


def _steps(job: str) -> list[dict]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]


def test_chaos_job_runs_the_library_on_docker():
    runs = [s.get("run", "") for s in _steps("chaos")]
    pytest_runs = [r for r in runs if "pytest" in r and "-m chaos" in r]
    assert pytest_runs, "a step must run `pytest -m chaos`"
    assert "--chaos-backend docker" in pytest_runs[0]
    assert any("chaosbench.cluster.docker.images build" in r for r in runs), "images are built before the suite"


def test_reports_are_uploaded_even_when_scenarios_fail():
    uploads = [s for s in _steps("chaos") if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert len(uploads) == 1
    assert uploads[0]["if"] == "always()"
    assert uploads[0]["with"]["path"].rstrip("/") == "reports"


def test_unit_job_excludes_the_slow_markers():
    (run,) = [s["run"] for s in _steps("unit") if "pytest" in s.get("run", "")]
    for marker in ("integration", "docker", "chaos"):
        assert f"not {marker}" in run
