"""The pytest plugin collects scenario files as chaos items (no cluster started in these tests)."""
import pytest

pytest_plugins = ["pytester"]

SCENARIO = """\
name: {name}
trainer: {{config: null, command: [train]}}
cluster: {{nodes: 2}}
faults:
  - at: {{step: 5}}
    kill_node: {{node: node-1}}
expect: {{reaches_step: 10}}
"""


@pytest.fixture
def scen(pytester):
    d = pytester.mkdir("scenarios")
    (d / "a.yaml").write_text(SCENARIO.format(name="first_story"))
    (d / "b.yaml").write_text(SCENARIO.format(name="second_story").replace("kill_node", "kill_nod"))
    return d


def test_collects_one_chaos_item_per_scenario(pytester, scen):
    res = pytester.runpytest_inprocess("--collect-only", "-q", "-m", "chaos", str(scen))
    res.stdout.fnmatch_lines(["*scenarios/a.yaml::first_story", "*scenarios/b.yaml::b", "2 tests collected*"])


def test_invalid_scenario_fails_with_file_line_and_choices(pytester, scen):
    res = pytester.runpytest_inprocess("-q", str(scen / "b.yaml"))
    res.assert_outcomes(failed=1)
    assert "b.yaml:5: faults[0]: unknown fault type 'kill_nod' (did you mean 'kill_node'?)" in res.stdout.str()


def test_skips_with_reason_when_no_backend(pytester, scen, monkeypatch):
    monkeypatch.setenv("CHAOSBENCH_BACKEND", "no-such-backend")
    monkeypatch.delenv("CI", raising=False)
    res = pytester.runpytest_inprocess("-q", "-rs", str(scen / "a.yaml"))
    res.assert_outcomes(skipped=1)
    res.stdout.fnmatch_lines(["*no chaos backend usable: docker*local*"])


def test_fails_when_no_backend_under_ci(pytester, scen, monkeypatch):
    monkeypatch.setenv("CHAOSBENCH_BACKEND", "no-such-backend")
    monkeypatch.setenv("CI", "true")
    res = pytester.runpytest_inprocess("-q", str(scen / "a.yaml"))
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*no chaos backend usable*CI is set*"])


def test_ci_with_broken_docker_fails_rather_than_falling_back_to_local(pytester, scen, monkeypatch):
    import chaosbench.cluster as cluster
    monkeypatch.setattr(cluster, "available_backends", lambda: {"docker": "daemon not reachable", "local": None})
    monkeypatch.delenv("CHAOSBENCH_BACKEND", raising=False)
    monkeypatch.setenv("CI", "true")
    res = pytester.runpytest_inprocess("-q", str(scen / "a.yaml"))
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*docker: daemon not reachable*CI is set*"])



@pytest.mark.parametrize("exit_code,outcome", [(1, {"xfailed": 1}), (3, {"failed": 1}), (0, {"xpassed": 1})])
def test_known_issue_is_xfail_only_when_checks_fail(pytester, monkeypatch, exit_code, outcome):
    import types
    import chaosbench.pytest_plugin as plugin
    import chaosbench.runner as runner
    d = pytester.mkdir("scenarios")
    (d / "k.yaml").write_text(SCENARIO.format(name="known") + 'known_issue: "upstream hangs on rejoin"\n')
    monkeypatch.setattr(plugin, "pick_backend", lambda config: "local")
    monkeypatch.setattr(runner, "run_scenario", lambda path, opts: types.SimpleNamespace(
        exit_code=exit_code, run_dir="reports/x", result=None))
    res = pytester.runpytest_inprocess("-q", "-rxX", str(d / "k.yaml"))
    res.assert_outcomes(**outcome)
    if exit_code == 1:
        res.stdout.fnmatch_lines(["*known issue: upstream hangs on rejoin*"])


def test_a_scenario_outside_a_scenarios_folder_is_collected_when_named_or_globbed(pytester):
    d = pytester.mkdir("chaos")
    (d / "mine.yaml").write_text(SCENARIO.format(name="my_story"))
    (d / "compose.yml").write_text("services: {}\n")        # other YAML is never taken for a scenario
    res = pytester.runpytest_inprocess("--collect-only", "-q", "-m", "chaos", str(d / "mine.yaml"))
    res.stdout.fnmatch_lines(["*chaos/mine.yaml::my_story", "1 test collected*"])
    pytester.makeini("[pytest]\nchaos_scenarios = chaos/m*.yaml\n")
    res = pytester.runpytest_inprocess("--collect-only", "-q", "-m", "chaos", str(d))
    res.stdout.fnmatch_lines(["*chaos/mine.yaml::my_story", "1 test collected*"])


def test_a_folder_of_uncollected_yaml_says_how_to_collect_it_instead_of_a_silent_zero(pytester):
    d = pytester.mkdir("chaos")
    (d / "mine.yaml").write_text(SCENARIO.format(name="my_story"))
    res = pytester.runpytest_inprocess("-q", "-m", "chaos", str(d))
    res.stdout.fnmatch_lines(["*1 YAML file(s) not taken for scenarios*folder named 'scenarios'*chaos_scenarios*"])
