"""`result.json`, the run record (schema in docs/result.md). The HTML report renders from it."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from chaosbench import rundir

SCHEMA_VERSION = 1


class ScenarioRef(BaseModel):
    name: str
    file: str | None = None
    description: str = ""


class ClusterShape(BaseModel):
    nodes: int
    procs_per_node: int = 1
    min_nodes: int
    max_nodes: int
    rendezvous: str
    launcher: str = "torchrun"            # what ran the job on each node (chaosbench/launchers/)
    launcher_version: str | None = None   # its package's version as pinned (torch's for torchrun)


class FaultRecord(BaseModel):
    id: str
    type: str
    target: str = ""
    trigger: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    injected_at: float | None = None
    healed_at: float | None = None
    error: str | None = None          # the fault could not be injected/healed
    verdict: Literal["passed", "failed"] | None = None   # the `fault:<id>` check: fired and held as planned
    reason: str = ""


class Recovery(BaseModel):
    fault_id: str
    injected_at: float
    detected_at: float | None = None
    rendezvous_done_at: float | None = None
    # the launcher starting the worker group that trained (Ray Train's controller); inside the rendezvous phase
    group_restart_at: float | None = None
    restored_at: float | None = None
    first_step_at: float | None = None
    detection_s: float | None = None
    rendezvous_s: float | None = None
    restore_s: float | None = None
    first_step_s: float | None = None
    total_s: float | None = None
    tier: str | None = None
    restored_step: int | None = None
    source: str | None = None
    bytes: int | None = None
    restore_duration_s: float | None = None
    step_before_fault: int | None = None   # the last step any rank completed before the restart
    lost_steps: int | None = None
    world_size_before: int | None = None
    world_size_after: int | None = None
    ranks_after: int | None = None         # worker processes that trained in the round
    failed_restarts: int | None = None     # new worker processes that died before training resumed
    # why the round's restore is inconsistent or impossible (ranks disagree, a step above the last
    # one trained, training not resuming at the step after it); empty when it is coherent
    problems: list[str] = Field(default_factory=list)
    # each rank's checkpoint_loaded claim (node, local_rank, tier, step, source, ts), for cross-checks
    claims: list[dict[str, Any]] = Field(default_factory=list)


CheckStatus = Literal["passed", "failed", "not_evaluated"]


class CheckResult(BaseModel):
    name: str
    status: CheckStatus
    expected: Any = None
    observed: Any = None
    reason: str = ""
    optional: bool = False
    fault_id: str | None = None   # the fault a per-fault check judges (`fault:<id>`); None for run-level checks

    @property
    def blocking(self) -> bool:
        """Does this result fail the run? (not evaluated counts unless the scenario made it optional)"""
        return self.status == "failed" or (self.status == "not_evaluated" and not self.optional)


class TierStats(BaseModel):
    saves: int = 0
    failures: int = 0
    skipped: int = 0
    errors: list[str] = Field(default_factory=list)
    stall_s_median: float | None = None
    total_s_median: float | None = None
    bytes_median: int | None = None
    throughput_mb_s: float | None = None


class Timeline(BaseModel):
    steps: list[dict[str, Any]] = Field(default_factory=list)
    world_size: list[list[float]] = Field(default_factory=list)
    restarts: list[dict[str, Any]] = Field(default_factory=list)
    rendezvous: list[dict[str, Any]] = Field(default_factory=list)
    checkpoints: list[dict[str, Any]] = Field(default_factory=list)


class Goodput(BaseModel):
    baseline_steps_per_s: float | None = None
    overall_steps_per_s: float | None = None
    ratio: float | None = None


class RunResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    scenario: ScenarioRef
    backend: str
    cluster: ClusterShape
    seed: int
    command: str
    started_at: float
    finished_at: float | None = None
    duration_s: float | None = None
    verdict: Literal["passed", "failed", "error"] = "error"
    error: str | None = None
    # how the run ended (docs/result.md): reached_step, completed, stuck, timeout, nodes_exited, error;
    # None in a record written before endings were recorded. The `ending` check judges it.
    ending: str | None = None
    stop_reason: str | None = None   # the runner's words for the ending (highest step, last phases, ...)
    faults: list[FaultRecord] = Field(default_factory=list)
    recoveries: list[Recovery] = Field(default_factory=list)
    checks: list[CheckResult] = Field(default_factory=list)
    checkpoints: dict[str, TierStats] = Field(default_factory=dict)
    timeline: Timeline = Field(default_factory=Timeline)
    goodput: Goodput = Field(default_factory=Goodput)
    # the per-rank step track over the whole run (chaosbench/checks/lineage.py, docs/result.md); None in a
    # record written before it was, or while the lineage could not be built
    lineage: dict[str, Any] | None = None
    # node -> the clock skew the harness measured and corrected, only where a node went beyond the
    # threshold (observer/received.py); {}: no node did, or no receipts
    clock_skew: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # symlinks found in the run directory: parts the analyse step and the report refused to read
    links: list[str] = Field(default_factory=list)
    # name==version of the job's own packages (trainer.requirements and what they pulled in, a launcher's
    # pins) as installed in its nodes (cluster/jobenv); [] when it declared none
    job_packages: list[str] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=lambda: {"report": "report.html", "junit": "junit.xml",
                                                           "events": "events", "logs": "logs"})

    def write(self, run_dir: Path) -> Path:
        return rundir.write_text(Path(run_dir), "result.json", self.model_dump_json(indent=2))

    @classmethod
    def read(cls, run_dir: Path) -> "RunResult":
        return cls.model_validate_json(rundir.read_bytes(Path(run_dir), "result.json"))
