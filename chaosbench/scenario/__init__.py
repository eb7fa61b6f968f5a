"""Scenario files: model, loader, and the trigger schedule."""
from chaosbench.scenario.loader import ScenarioError, find_scenarios, load_scenario, parse_scenario  # noqa: F401
from chaosbench.scenario.model import Expect, FaultEntry, Scenario, Trigger  # noqa: F401
