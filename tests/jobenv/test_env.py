"""The pieces every backend shares: the environment in front, the prefix layout, the image tag, the probe
of a python that is not ours, and the distribution a missing module names."""
import os
import subprocess
import sys

from chaosbench.cluster.jobenv import env, probe
from chaosbench.cluster.jobenv.image import tag_for
from chaosbench.cluster.jobenv.names import distribution_for
from chaosbench.diagnosis import diagnose


def test_the_prefix_goes_first_on_pythonpath_and_path():
    got = env.job_env({"PYTHONPATH": "/a", "PATH": "/bin"}, "/p", path="/usr/bin:/bin")
    assert got["PYTHONPATH"] == "/p/site:/a" and got["PATH"] == "/p/bin:/usr/bin:/bin"
    assert env.job_env({}, "/p") == {"PYTHONPATH": "/p/site"}   # docker: the image carries its PATH


def test_the_site_link_points_at_pips_prefix_layout(tmp_path):
    (tmp_path / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    subprocess.run(["sh", "-c", env.link_site(str(tmp_path))], check=True)
    assert os.readlink(tmp_path / "site") == "lib/python3.11/site-packages" and (tmp_path / "bin").is_dir()


def test_the_install_never_reaches_an_index_nor_the_venv():
    argv = env.install_argv("/opt/venv/bin/python", "http://h:1/", "/opt/jobenv", "/r.txt", "h")
    for flag in ("--no-index", "--no-deps", "--ignore-installed"):
        assert flag in argv
    assert argv[argv.index("--prefix") + 1] == "/opt/jobenv"


def test_the_tag_follows_the_node_image_and_the_list():
    a = tag_for("sha256:1", ["omegaconf>=2.3"])
    assert a.startswith("chaosbench/job:") and a == tag_for("sha256:1", ["omegaconf>=2.3"])
    assert a != tag_for("sha256:2", ["omegaconf>=2.3"]) and a != tag_for("sha256:1", ["omegaconf>=2.4"])


def test_the_probe_runs_on_a_bare_python_and_reports_versions_and_gaps():
    src = probe.source(["PyYAML>=5", "chaosbench-surely-not-installed"])
    out = subprocess.run([sys.executable, "-I", "-c", src], capture_output=True, text=True, check=True).stdout
    assert probe.missing(out) == ["chaosbench-surely-not-installed"]
    assert [v.split("==")[0] for v in probe.versions(out)] == ["pyyaml"]
    assert probe.missing("python3: not found") is None   # not the probe's output: nothing claimed


def test_a_missing_module_names_its_distribution():
    assert distribution_for("yaml") == "pyyaml" and distribution_for("omegaconf.errors") == "omegaconf"
    assert distribution_for("google.protobuf") == "protobuf"


def test_what_to_fix_names_trainer_requirements_for_a_missing_module(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "node-0.log").write_text(
        "[default0]:Traceback (most recent call last):\n"
        "[default0]:ModuleNotFoundError: No module named 'yaml'\n")
    d = diagnose(tmp_path)
    first = d.findings[0]
    assert first.rule == "job_package_missing" and first.severity == "cause"
    assert "trainer: {requirements: [\"pyyaml\"]}" in first.fix and first.evidence[0].source == "logs/node-0.log:2"
    assert d.first_line().startswith("The job imports 'yaml'")
