"""A user's Ray Train loop that never calls ray.train.get_checkpoint(), run as a new user would: the
example copied out of the checkout, its scenario run on the containerised Ray cluster. The run fails
and the diagnosis names the missing call first (the Ray node-loss pass is scenarios/ray_node_loss.yaml,
collected by the chaos suite itself)."""
import shutil
from pathlib import Path

import pytest

from chaosbench import diagnosis
from chaosbench.cluster import available_backends
from chaosbench.runner import RunOptions, run_scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ray_train"


@pytest.mark.chaos
def test_a_loop_that_ignores_get_checkpoint_fails_with_that_cause_first(tmp_path):
    why = available_backends()["ray"]
    if why:
        pytest.skip(f"backend ray: {why}")
    shutil.copytree(EXAMPLE, tmp_path / "ray_train")
    out = run_scenario(tmp_path / "ray_train" / "no_resume.yaml",
                       RunOptions(backend="ray", report_dir=tmp_path / "reports"))
    assert out.exit_code == 1, (out.result.error if out.result else None, out.run_dir)
    causes = [f for f in diagnosis.load(out.run_dir)["findings"] if f["severity"] == "cause"]
    assert causes and causes[0]["rule"] == "ray_ignores_get_checkpoint", (causes, out.run_dir)
    assert "get_checkpoint()" in causes[0]["fix"]
