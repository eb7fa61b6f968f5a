"""Run one scenario, top to bottom: validate -> bring the cluster up -> drive the fault schedule
while watching the trainers -> collect the evidence -> evaluate the checks -> write reports/<run-id>/.
Teardown always runs (unless --keep-cluster). Each fault action is carried out and recorded by
drive.py (FaultDriver), the cluster's up / evidence / teardown by hold.py (Hold); the verdict by the
analyse step (analyse.py) that `chaosbench recheck` runs too.

The verdict separates the system under test from the harness: `failed` (a check failed or could
not be evaluated: exit 1) versus `error` (the cluster or harness broke: exit 3).
"""
from __future__ import annotations

import json
import secrets
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from chaosbench import launchers, rundir
from chaosbench.analyse import analyse
from chaosbench.checks.history import History
from chaosbench.checks.record import SCHEMA_VERSION as RECORD_SCHEMA_VERSION
from chaosbench.checks.registry import pending_count
from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.errors import ClusterError, UnsupportedFault
from chaosbench.cluster import backend_primitives, pick_backend
from chaosbench.drive import FaultDriver, cooperative_times
from chaosbench.evidence.late_writes import LATE_DIR, set_aside
from chaosbench.faults.capabilities import missing_primitives, needs_of
from chaosbench.hold import Hold
from chaosbench.observer import EventTail, Progress
from chaosbench.observer.progress import Stretch
from chaosbench.observer.received import RECEIPTS
from chaosbench.result import ClusterShape, FaultRecord, RunResult, ScenarioRef
from chaosbench.scenario import Scenario, load_scenario
from chaosbench.scenario.cluster_spec import build_spec
from chaosbench.scenario.schedule import Schedule
from chaosbench.scenario.stop import StopRule, stop_reason

EXIT = {"passed": 0, "failed": 1, "error": 3}
STATUS_EVERY_S = 2.0   # how often the drive asks the backend whether any node still runs
ENDED_EVERY_S = 0.5    # how often it asks a fault in place whether its effect ended by itself (Fault.ended)


@dataclass
class RunOptions:
    backend: str | None = None          # overrides the scenario's cluster.backend
    seed: int | None = None             # overrides the scenario's seed
    keep_cluster: bool = False
    report_dir: Path = Path("reports")
    command: str = ""                   # the command line, recorded for replay
    on_progress: Callable[[Progress], None] | None = None
    on_message: Callable[[str], None] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    poll_s: float = 0.25
    cluster_factory: Callable[[str, ClusterSpec], object] | None = None   # default: chaosbench.cluster.create_cluster
    slurm: dict = field(default_factory=dict)   # CLI's sbatch settings, over the scenario's cluster.slurm


@dataclass
class RunOutcome:
    scenario: str
    run_dir: Path | None
    result: RunResult | None
    exit_code: int


def run_scenario(path: str | Path, opts: RunOptions | None = None) -> RunOutcome:
    """Load (may raise ScenarioError: bad input, nothing started) and run one scenario file."""
    return Runner(load_scenario(path), Path(path), opts or RunOptions()).run()


class Runner:
    def __init__(self, scenario: Scenario, path: Path | None, opts: RunOptions):
        self.s, self.path, self.opts = scenario, path, opts
        self.seed = opts.seed if opts.seed is not None else scenario.seed
        self.run_id = f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        self.run_dir = Path(opts.report_dir) / self.run_id
        self.progress = Progress(checks_pending=pending_count(scenario.expect),
                                 stretch=Stretch() if scenario.expect.trains_after_settle else None)
        self.records: dict[str, FaultRecord] = {}
        # harness.json: what the runner planned and saw, for the checks; versioned (checks/record.py)
        self.harness: dict = {"schema_version": RECORD_SCHEMA_VERSION, "run_id": self.run_id}
        self.cluster = None
        self.walking: list[threading.Thread] = []   # inventories taken at injections, still walking

    def say(self, msg: str) -> None:
        self.progress.message = msg
        _quietly(self.opts.on_message, msg)
        self._tick()

    def _tick(self) -> None:
        _quietly(self.opts.on_progress, self.progress)

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        for d in (self.run_dir, self.run_dir / "events", self.run_dir / "logs"):
            d.mkdir(parents=True, exist_ok=True)
        started, error = time.time(), None
        backend = self.opts.backend or self.s.cluster.backend
        try:
            backend = backend if self.opts.cluster_factory else pick_backend(backend)
            (self.run_dir / "scenario.yaml").write_text(self.s.as_run_yaml(backend, self.seed))
            self._run_cluster(backend)
        except Exception as e:   # anything but Ctrl-C: we could not run the test (exit 3), say why
            error = f"{type(e).__name__}: {e}"
            (self.run_dir / "logs" / "harness-traceback.txt").write_text(traceback.format_exc())
            self.say(f"harness error: {error}")
        except KeyboardInterrupt:
            state = ("left up (--keep-cluster)" if self.opts.keep_cluster else
                     "torn down" if self.cluster is None or self.cluster.torn_down else
                     "NOT fully torn down (run `chaosbench clean`)")
            self._finish(backend, started, f"interrupted (Ctrl-C); the cluster was {state}")
            raise
        return self._finish(backend, started, error)

    def _run_cluster(self, backend: str) -> None:
        self.progress.phase = "cluster_up"
        # --backend may name one the scenario's launcher cannot run on (the loader saw cluster.backend only)
        # (a Ray Train job has no per-node launcher: the Ray backend refuses any but the default itself)
        refused = [] if backend == "ray" else launchers.get(self.s.trainer.launcher).problems(
            backend=backend, rendezvous=self.s.cluster.rendezvous)
        if refused:
            raise UnsupportedFault("; ".join(refused))
        self.say(f"creating {backend} cluster: {self.s.cluster.nodes} node(s), run {self.run_id}")
        cluster = self.cluster = self._create(backend)
        missing = missing_primitives(self.s.faults, cluster.supported_faults, cluster.unsupported_why,
                                     backend_primitives())
        if missing:   # refused before anything starts
            raise UnsupportedFault(f"backend '{backend}' cannot inject: {'; '.join(missing)}" + cluster.refusal_hint())
        with Hold(self, cluster):
            # what a site permits on its nodes is known only now: allocated, nothing trained yet
            refused = cluster.probe_faults({n for f in self.s.faults for n in needs_of(f.kind, f.params)})
            if refused:
                raise UnsupportedFault(f"backend '{backend}' cannot inject here: {'; '.join(refused)}")
            self.say("cluster up; starting training")
            cluster.start_training()
            self.harness["training_started_at"] = time.time()
            if cluster.job_packages:   # the job's own packages, as installed in its nodes (cluster/jobenv)
                self.harness["job_packages"] = cluster.job_packages
            if cluster.ready_wait:   # docker: how long the go waited for the nodes' imports
                self.harness["ready_wait"] = cluster.ready_wait
            self.progress.phase = "training"
            self._drive(cluster)

    def _create(self, backend: str):
        from chaosbench.cluster import create_cluster
        create = self.opts.cluster_factory or create_cluster
        spec = build_spec(self.s, self.run_id, self.run_dir.resolve(), self.path)
        slurm = {**self.s.cluster.slurm.options(), **self.opts.slurm} if backend == "slurm" else {}
        return create(backend, spec, **slurm) if slurm else create(backend, spec)

    def _drive(self, cluster) -> None:
        """Inject and heal as the schedule says until the stop rule says stop."""
        sched = Schedule(self.s.faults, self.seed)
        driver = FaultDriver(cluster, sched, self.run_dir, self.seed, self.harness, self.records, self.walking, self.say)
        driver.prepare()
        tail = EventTail(cluster.events_dir, receipts=self.run_dir / RECEIPTS)   # in the record on every backend
        rule = StopRule.of(self.s, self.harness["training_started_at"])
        t0, target = rule.started_at, rule.target
        reached_at, said_waiting, next_status, next_ended = None, False, 0.0, 0.0
        self.progress.last_progress_at = time.time()
        while True:
            now = time.time()
            for ev in tail.poll():
                self.progress.update(ev)
                sched.observe_event(ev, ev.get("ts", now) - t0)
            for act in sched.due(now - t0, self.progress.step):
                driver.act(act.kind, act.planned, t0)
            if now >= next_ended:
                next_ended = now + ENDED_EVERY_S
                driver.heal_ended(t0)
            self.progress.faults_pending = sched.pending
            self.progress.faults_injected = sum(1 for r in self.records.values() if r.injected_at)
            self._tick()
            if target is not None and self.progress.step >= target and reached_at is None:
                reached_at = now
                self.say(f"reached step {self.progress.step}")
            if reached_at is not None and not sched.finished and not said_waiting:
                said_waiting = True
                self.say("faults still planned or in place: " + ", ".join(
                    f"{p.fault_id} ({p.state})" for p in sched.plans if p.state != "done") + "; the run goes on")
            exited = ""
            if now >= next_status:
                next_status, exited = now + STATUS_EVERY_S, self._exited(cluster)
            stop = stop_reason(self.progress, sched, now, rule, reached_at=reached_at, exited=exited)
            if stop is not None:
                break
            if self.opts.cancel.is_set():
                raise ClusterError("cancelled (Ctrl-C or SIGTERM)")
            time.sleep(self.opts.poll_s)
        for ev in tail.poll():
            self.progress.update(ev)
        self.harness["stop_reason"], self.harness["ending"] = stop
        # faults the stop cut short or never reached: the checks hold them against the expected ending
        self.harness["faults_unfinished"] = [p.fault_id for p in sched.plans if p.state != "done"]
        self.harness["stopped_at"] = time.time()
        self.say(f"stopping: {stop[0]}")
        driver.heal_unhealed(t0)

    def _exited(self, cluster) -> str:
        """'node-0 exited:1, ...' when no node runs any more, else ''."""
        try:
            status = {n: cluster.node_status(n) for n in cluster.node_names()}
        except ClusterError:
            return ""
        if status and all(v.startswith(("exited", "absent")) for v in status.values()):
            return ", ".join(f"{n} {v}" for n, v in sorted(status.items()))
        return ""

    # -- verdict and files ----------------------------------------------------------------------
    def _finish(self, backend: str, started: float, error: str | None) -> RunOutcome:
        self.progress.phase = "checks"
        if error:   # the harness broke (or Ctrl-C): whatever the run did, it ended in an error
            self.harness["ending"] = "error"
        if "collected_sizes" in self.harness:   # lines the teardown made nodes write are not the job's
            late = set_aside(self.run_dir, self.harness["collected_sizes"])
            if late:
                self.harness["lines_after_collection"] = late
                self.say(f"{late} event/log line(s) written during teardown set aside in {LATE_DIR}/")
        rundir.write_text(self.run_dir, "harness.json", json.dumps(self.harness, indent=1))
        c = self.s.cluster

        def base(h: History) -> RunResult:   # the analyse step's History, loaded once for everything
            cooperative_times(self.records, h)
            finished = time.time()
            return RunResult(
                run_id=self.run_id,
                scenario=ScenarioRef(name=self.s.name, file=str(self.path) if self.path else None,
                                     description=self.s.description),
                backend=backend,
                cluster=ClusterShape(nodes=c.nodes, procs_per_node=c.procs_per_node, min_nodes=c.elastic.min_nodes,
                                     max_nodes=c.elastic.max_nodes, rendezvous=c.rendezvous,
                                     launcher=self.s.trainer.launcher,
                                     launcher_version=launchers.get(self.s.trainer.launcher).version()),
                seed=self.seed,
                command=self.opts.command or f"chaosbench run {self.path} --backend {backend} --seed {self.seed}",
                started_at=started, finished_at=finished, duration_s=round(finished - started, 3),
                error=error, ending=self.harness.get("ending"), stop_reason=self.harness.get("stop_reason"),
                faults=list(self.records.values()), job_packages=self.harness.get("job_packages", []))
        # the same judgement `chaosbench recheck` makes later: one analyse step (chaosbench/analyse.py)
        result = analyse(self.run_dir, self.s.expect, base, say=self.say, record_stop=True).result
        self.progress.checks_pending = 0
        self.progress.phase = "done"
        self._tick()
        return RunOutcome(self.s.name, self.run_dir, result, EXIT[result.verdict])


def _quietly(callback, arg) -> None:
    """A display problem must never break a run or skip its teardown."""
    if callback:
        try:
            callback(arg)
        except Exception:
            pass
