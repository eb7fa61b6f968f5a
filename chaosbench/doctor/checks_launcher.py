"""Launcher environment: the variables torchrun gives every worker, present and consistent."""
from __future__ import annotations

import os
from pathlib import Path

from .result import CheckResult, Status
from .target import Target

REQUIRED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
TORCHRUN_HINT = ("launch through torchrun, which sets them: `torchrun --nnodes=MIN:MAX --nproc-per-node=N "
                 "--rdzv-backend=c10d --rdzv-endpoint=HOST:PORT -m trainer.train --config CONFIG`")


def _launched_by_torchrun(env: dict[str, str]) -> bool:
    if "TORCHELASTIC_RUN_ID" in env or "TORCHELASTIC_RESTART_COUNT" in env:
        return True
    try:  # the parent's command line says how we were started
        cmd = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return "torchrun" in cmd or "torch.distributed.run" in cmd


def check_launcher_env(t: Target) -> CheckResult:
    name = "launcher environment"
    env = t.env
    missing = [v for v in REQUIRED if not env.get(v)]
    if t.source == "scenario" and len(missing) == len(REQUIRED):
        return CheckResult(name, Status.SKIP, "not applicable: chaosbench starts torchrun for this scenario "
                           "(no RANK/WORLD_SIZE in this shell)")
    if missing:
        if len(missing) == len(REQUIRED) and not _launched_by_torchrun(env):
            return CheckResult(name, Status.FAIL,
                               f"Missing required environment variables: {missing}; this process was not "
                               "started by torchrun (ran with python instead of torchrun?)", TORCHRUN_HINT)
        return CheckResult(name, Status.FAIL, f"Missing required environment variables: {missing}",
                           "set them all or none (torchrun sets all five); a launcher that sets only some "
                           "is misconfigured")
    problems, ints = [], {}
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT", "LOCAL_WORLD_SIZE"):
        if var in env:
            try:
                ints[var] = int(env[var])
            except ValueError:
                problems.append(f"{var}={env[var]!r} is not an integer")
    if problems:
        return CheckResult(name, Status.FAIL, "; ".join(problems), "export integer values")
    rank, lrank, ws, port = ints["RANK"], ints["LOCAL_RANK"], ints["WORLD_SIZE"], ints["MASTER_PORT"]
    lws = ints.get("LOCAL_WORLD_SIZE", t.procs_per_node)
    if ws < 1:
        problems.append(f"WORLD_SIZE={ws} must be >= 1")
    if not 0 <= rank < max(ws, 1):
        problems.append(f"RANK={rank} outside [0, WORLD_SIZE={ws})")
    if lws and not 0 <= lrank < lws:
        problems.append(f"LOCAL_RANK={lrank} outside [0, LOCAL_WORLD_SIZE={lws})")
    if not 0 < port < 65536:
        problems.append(f"MASTER_PORT={port} is not a TCP port")
    procs = lws or t.procs_per_node
    if procs and ws % procs:
        problems.append(f"WORLD_SIZE={ws} is not a multiple of procs per node {procs}")
    if procs and t.min_nodes and t.max_nodes and not t.min_nodes * procs <= ws <= t.max_nodes * procs:
        problems.append(f"WORLD_SIZE={ws} != nodes x procs per node: expected between "
                        f"{t.min_nodes}x{procs}={t.min_nodes * procs} and {t.max_nodes}x{procs}={t.max_nodes * procs}")
    evidence = f"RANK={rank} LOCAL_RANK={lrank} WORLD_SIZE={ws} MASTER_ADDR={env['MASTER_ADDR']} MASTER_PORT={port}"
    if problems:
        return CheckResult(name, Status.FAIL, f"{evidence}: " + "; ".join(problems),
                           "launch every node with the same --nnodes and --nproc-per-node, and let torchrun "
                           "set these variables instead of exporting them by hand")
    return CheckResult(name, Status.PASS, evidence)


def check_scenario_file(t: Target) -> CheckResult:
    """The scenario engine's own validation, so the doctor and `chaosbench run` agree on what is valid."""
    name = "scenario file"
    if t.source != "scenario":
        return CheckResult(name, Status.SKIP, "no scenario given")
    try:
        from chaosbench.scenario.loader import ScenarioError, load_scenario
    except ImportError as e:
        return CheckResult(name, Status.SKIP, f"scenario engine not importable ({e}); not validated")
    try:
        s = load_scenario(t.scenario_file)
    except ScenarioError as e:
        return CheckResult(name, Status.FAIL, "; ".join(e.problems), "fix the fields named above "
                           "(`chaosbench validate FILE` shows the same)")
    return CheckResult(name, Status.PASS, f"{t.scenario_file}: valid scenario '{s.name}'")
