"""Run every preflight check against a target, in the order an engineer would debug by hand."""
from __future__ import annotations

from .checks_etcd import etcd_checks
from .checks_launcher import check_launcher_env, check_scenario_file
from .checks_network import network_checks
from .checks_s3 import s3_checks
from .checks_storage import storage_checks
from .checks_system import interface_checks, packet_check, version_checks
from .result import CheckResult, timed
from .target import Target


def run_preflight(t: Target, versions: bool = True) -> list[CheckResult]:
    results: list[CheckResult] = []
    results += timed(check_scenario_file, t)
    results += timed(check_launcher_env, t)
    results += timed(network_checks, t)
    results += timed(etcd_checks, t)
    results += timed(storage_checks, t)
    results += timed(s3_checks, t)
    results += timed(interface_checks, t)
    results += timed(packet_check, t)
    if versions:   # importing torch costs ~1 s; skippable for quick runs
        results += timed(version_checks, t)
    return results
