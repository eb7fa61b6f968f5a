"""pytest plugin: scenario files as `chaos` test items, and a fixture to run scenarios from Python.

`pytest scenarios/ -m chaos` collects each scenario YAML as one item (id = scenario name): a YAML
file in a folder named `scenarios`, one named on the command line (`pytest -m chaos my/s.yaml`), or
one matching a `chaos_scenarios` glob of the ini file (relative to the rootdir). It runs it
on $CHAOSBENCH_BACKEND (else docker when usable, else local), fails with the failing checks and
the report path, and skips with the reason when no backend is usable -- except under CI (CI=true), where
an unusable backend fails every item: a broken docker must turn CI red, not green. Reports go to
--chaos-report-dir (default: reports/). Imports stay lazy: unit-test sessions pay nothing.
"""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("chaosbench")
    group.addoption("--chaos-report-dir", default="reports", help="where chaos scenario runs write reports")
    group.addoption("--chaos-backend", default=None, help="cluster backend for chaos scenarios (docker|local)")
    parser.addini("chaos_scenarios", type="args", default=[],
                  help="globs (relative to the rootdir) of scenario files to collect besides scenarios/*.yaml")


def pytest_configure(config):
    config.addinivalue_line("markers", "chaos: end-to-end chaos scenarios on a real cluster")


_PASSED_OVER = pytest.StashKey[list]()


def pytest_collect_file(parent, file_path: Path):
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    if is_scenario_path(parent.session, file_path):
        return ScenarioFile.from_parent(parent, path=file_path)
    if any(parent.session.isinitpath(d) for d in file_path.parents):   # under a folder the user named
        parent.config.stash.setdefault(_PASSED_OVER, []).append(file_path)
    return None


def pytest_report_collectionfinish(config, items):
    """Nothing collected but YAML passed over: say how to make a scenario folder count (not a silent 0)."""
    passed_over = config.stash.get(_PASSED_OVER, [])
    if items or not passed_over:
        return None
    names = ", ".join(str(p) for p in passed_over[:3]) + (" ..." if len(passed_over) > 3 else "")
    return (f"chaosbench: {len(passed_over)} YAML file(s) not taken for scenarios ({names}): scenario files "
            "are collected from a folder named 'scenarios', when named on the command line, or by a "
            "'chaos_scenarios = <glob>' line in the pytest ini file")


def is_scenario_path(session, file_path: Path) -> bool:
    """Which YAML files are scenarios: by folder, by being named on the command line, or by the ini's globs
    (other YAML, a compose file or a trainer config, is never taken for one)."""
    if file_path.parent.name == "scenarios" or session.isinitpath(file_path):
        return True
    try:
        rel = file_path.relative_to(session.config.rootpath)
    except ValueError:
        return False
    return any(rel.match(glob) or fnmatch.fnmatch(str(rel), glob)
               for glob in session.config.getini("chaos_scenarios"))


def pick_backend(config) -> str:
    """The backend to run on, or pytest.skip (pytest.fail when CI is set) with every backend's reason."""
    from chaosbench.cluster import available_backends
    why_not = available_backends()
    wanted = config.getoption("--chaos-backend") or os.environ.get("CHAOSBENCH_BACKEND")
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    # in CI a broken docker must not turn into a quieter run on the local backend: name local to want it
    for name in ([wanted] if wanted else ["docker"] if ci else ["docker", "local"]):
        if why_not.get(name, "unknown backend") is None:
            return name
    why = "no chaos backend usable: " + "; ".join(f"{k}: {v}" for k, v in why_not.items())
    if ci:
        pytest.fail(f"{why} (CI is set: the chaos suite must run here)", pytrace=False)
    pytest.skip(why)


class ScenarioFile(pytest.File):
    def collect(self):
        from chaosbench.scenario import ScenarioError, load_scenario
        try:
            s = load_scenario(self.path)
        except ScenarioError as e:
            yield InvalidScenario.from_parent(self, name=self.path.stem, error=e)
            return
        item = ScenarioItem.from_parent(self, name=s.name)
        item.add_marker(pytest.mark.chaos)
        if s.known_issue:   # only a failed check counts as the known failure; a broken harness still fails
            item.add_marker(pytest.mark.xfail(reason=f"known issue: {s.known_issue}", raises=ChecksFailed,
                                              strict=False))
        yield item


class ScenarioFailed(Exception):
    pass


class ChecksFailed(ScenarioFailed):
    """The system under test failed a check (exit 1), as opposed to the harness breaking (exit 3)."""


class InvalidScenario(pytest.Item):
    def __init__(self, *, error, **kw):
        super().__init__(**kw)
        self.error = error
        self.add_marker(pytest.mark.chaos)

    def runtest(self):
        raise ScenarioFailed(str(self.error))

    def repr_failure(self, excinfo):
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, None, f"scenario {self.name} (invalid)"


class ScenarioItem(pytest.Item):
    def runtest(self):
        from chaosbench.runner import RunOptions, run_scenario
        from chaosbench.scenario import load_scenario
        # a Ray Train job runs on the Ray backend only (made of the docker backend's containers)
        backend = "ray" if load_scenario(self.path).cluster.backend == "ray" else pick_backend(self.config)
        report_dir = Path(self.config.getoption("--chaos-report-dir"))
        out = run_scenario(self.path, RunOptions(backend=backend, report_dir=report_dir,
                                                 command=f"pytest {self.nodeid}"))
        self.user_properties.append(("report", str(out.run_dir)))
        if out.result is not None and not out.result.error:
            # the verdict must follow from the stored record alone: judged again, it gives the same
            from chaosbench.recheck import recheck
            again = recheck(out.run_dir, write=False)
            if again.new_verdict != out.result.verdict:
                raise ScenarioFailed(f"scenario {self.name}: the stored run judged again gives {again.new_verdict}, "
                                     f"the run said {out.result.verdict} ({again.changed}); report: {out.run_dir}")
        if out.exit_code != 0:
            r = out.result
            lines = [f"scenario {self.name} {r.verdict if r else 'error'} on {backend}; report: {out.run_dir}"]
            if r is not None and r.error:
                lines.append(f"harness error: {r.error}")
            for c in (r.checks if r else []):
                if c.blocking:
                    lines.append(f"  {c.name} {c.status}: expected {c.expected}, observed {c.observed} — {c.reason}")
            raise (ChecksFailed if out.exit_code == 1 else ScenarioFailed)("\n".join(lines))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"scenario {self.name}"


@pytest.fixture
def chaos_scenario(tmp_path, request):
    """Run a scenario given as a dict (the YAML structure): returns the RunOutcome."""
    def run(data: dict, **opts):
        import yaml
        from chaosbench.runner import RunOptions, run_scenario
        path = tmp_path / f"{data.get('name', 'scenario')}.yaml"
        path.write_text(yaml.safe_dump(data))
        backend = opts.pop("backend", None) or pick_backend(request.config)
        return run_scenario(path, RunOptions(backend=backend, report_dir=opts.pop("report_dir", tmp_path / "reports"),
                                             **opts))
    return run
