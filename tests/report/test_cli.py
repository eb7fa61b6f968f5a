import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "chaosbench.report", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_module_renders_run_and_index(passing_run):
    proc = _run(passing_run)
    assert proc.returncode == 0, proc.stderr
    assert (passing_run / "report.html").is_file() and (passing_run / "junit.xml").is_file()
    assert (passing_run.parent / "index.html").is_file()


def test_module_bad_input_exits_2_naming_the_file(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 2
    assert f"{tmp_path}/result.json: not found" in proc.stderr
