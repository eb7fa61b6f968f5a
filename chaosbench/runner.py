"""Run one scenario: validate, create the cluster, drive the fault schedule while watching the
trainers, collect the history, evaluate the checks, write reports/<run-id>/. Teardown always runs.

The verdict separates the system under test from the harness: `failed` (a check failed or could
not be evaluated: exit 1) versus `error` (the cluster or harness broke: exit 3).
"""
from __future__ import annotations

import json
import random
import secrets
import shutil
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from chaosbench.checks import evaluate
from chaosbench.checks.history import History
from chaosbench.evidence.inventory import take_inventory
from chaosbench.evidence.inventory_s3 import s3_inventory
from chaosbench.checks.summary import checkpoint_stats, goodput, timeline
from chaosbench.cluster.base import ClusterError, ClusterSpec, UnsupportedFault
from chaosbench.cluster.launch import S3_BUCKET
from chaosbench.cluster.lifecycle import teardown
from chaosbench.doctor.agent_logs import last_error
from chaosbench.faults import FaultContext, FaultLog, get_fault
from chaosbench.observer import EventTail, Progress
from chaosbench.result import (ClusterShape, FaultRecord, RunResult, ScenarioRef, write_junit)
from chaosbench.recheck import apply_fault_verdicts, verdict_of
from chaosbench.scenario import Scenario, load_scenario
from chaosbench.scenario.loader import resolve_trainer_config, resolve_workdir
from chaosbench.scenario.schedule import Schedule
from chaosbench.scenario.names import fault_file_name

EXIT = {"passed": 0, "failed": 1, "error": 3}


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


def pick_backend(requested: str) -> str:
    from chaosbench.cluster import available_backends
    why_not = available_backends()   # name -> None if usable, else the reason
    if requested != "auto":
        if why_not.get(requested, "unknown backend") is not None:
            raise UnsupportedFault(f"backend '{requested}' is not usable here: "
                                   f"{why_not.get(requested, 'unknown backend')}")
        return requested
    for name in ("docker", "local"):
        if why_not.get(name, "unknown") is None:
            return name
    raise UnsupportedFault("no cluster backend is usable here: " +
                           "; ".join(f"{k}: {v}" for k, v in why_not.items()))


def new_run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def scenario_as_yaml(s: Scenario, file_backend: str, seed: int) -> str:
    """The scenario as run, in the file format (faults as `<type>: params`)."""
    data = s.model_dump(mode="json", exclude_defaults=True)
    data["cluster"] = {**s.cluster.model_dump(mode="json"), "backend": file_backend}   # full shape, for replay
    data["seed"] = seed
    data["faults"] = []
    for f in s.faults:
        entry = {"id": f.id, "at": f.at.model_dump(exclude_defaults=True), f.kind: f.params}
        if f.duration_s is not None:
            entry["duration_s"] = f.duration_s
        if f.repeat is not None:
            entry["repeat"] = f.repeat.model_dump()
        data["faults"].append(entry)
    return yaml.safe_dump(data, sort_keys=False)


def build_spec(s: Scenario, run_id: str, run_dir: Path, scenario_path: Path | None) -> ClusterSpec:
    c, t = s.cluster, s.trainer
    cfg = t.reference_config
    if cfg:
        # inside the repository: pass it repo-relative, so a container (repo at its own path) finds it too
        resolved = resolve_trainer_config(cfg, scenario_path)
        repo = Path(__file__).resolve().parents[1]
        if resolved is not None:
            cfg = str(resolved.relative_to(repo)) if resolved.is_relative_to(repo) else str(resolved)
    job = None
    if t.script is not None:
        job = [t.script, *t.args]
    elif t.module is not None:
        job = ["-m", t.module, *t.args]
    return ClusterSpec(run_id=run_id, run_dir=run_dir, nodes=c.nodes, procs_per_node=c.procs_per_node,
                       min_nodes=c.elastic.min_nodes, max_nodes=c.elastic.max_nodes, rendezvous=c.rendezvous,
                       max_restarts=c.elastic.max_restarts, trainer_config=cfg or "",
                       trainer_overrides=dict(t.overrides), command=t.command, job_argv=job,
                       workdir=str(resolve_workdir(t.workdir, scenario_path)) if t.workdir else None,
                       trainer_image=t.image, progress_regex=t.progress.regex if t.progress else None,
                       checkpoint_tier=t.checkpoint_dir, env=dict(c.env),
                       nvme_size_mb=c.nvme_size_mb, shm_size_mb=c.shm_size_mb, persistent_nvme=c.persistent_nvme,
                       rdzv_timeouts=dict(c.rdzv_timeouts), warm_start=c.warm_start and not t.user_job)


def unsupported_faults(s: Scenario, supported: frozenset[str]) -> list[str]:
    out = []
    for f in s.faults:
        missing = [n for n in get_fault(f.kind).needs if n not in supported]
        if missing:
            out.append(f"{f.id} ({f.kind}) needs {', '.join(missing)}")
    return out


def run_scenario(path: str | Path, opts: RunOptions | None = None) -> RunOutcome:
    """Load (may raise ScenarioError: bad input, nothing started) and run one scenario file."""
    opts = opts or RunOptions()
    scenario = load_scenario(path)
    return Runner(scenario, Path(path), opts).run()


class Runner:
    def __init__(self, scenario: Scenario, path: Path | None, opts: RunOptions):
        self.s, self.path, self.opts = scenario, path, opts
        self.seed = opts.seed if opts.seed is not None else scenario.seed
        self.run_id = new_run_id(scenario.name)
        self.run_dir = Path(opts.report_dir) / self.run_id
        e = scenario.expect
        requested = [k for k in ("recovered_from", "max_lost_steps", "max_recovery_seconds", "world_size_after",
                                 "world_sizes", "reaches_step", "no_restart", "loss_continuity",
                                 "checkpoints_valid", "no_fatal") if getattr(e, k) not in (None, False)]
        self.progress = Progress(checks_pending=len(requested) + len(e.log_regex))
        self.records: dict[str, FaultRecord] = {}
        self.harness: dict = {}
        self.cluster = None
        self._inventories: list[threading.Thread] = []

    def say(self, msg: str) -> None:
        self.progress.message = msg
        if self.opts.on_message:
            try:
                self.opts.on_message(msg)
            except Exception:   # a display problem must never break a run or skip its teardown
                pass
        self._tick()

    def _tick(self) -> None:
        if self.opts.on_progress:
            try:
                self.opts.on_progress(self.progress)
            except Exception:
                pass

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "events").mkdir(exist_ok=True)
        (self.run_dir / "logs").mkdir(exist_ok=True)
        started = time.time()
        error: str | None = None
        backend = self.opts.backend or self.s.cluster.backend
        try:
            backend = backend if self.opts.cluster_factory else pick_backend(backend)
            (self.run_dir / "scenario.yaml").write_text(scenario_as_yaml(self.s, backend, self.seed))
            self._run_cluster(backend)
        except Exception as e:   # anything but Ctrl-C: we could not run the test (exit 3), say why
            error = f"{type(e).__name__}: {e}"
            (self.run_dir / "logs" / "harness-traceback.txt").write_text(traceback.format_exc())
            self.say(f"harness error: {error}")
        except KeyboardInterrupt:
            cluster = self.cluster
            state = ("left up (--keep-cluster)" if self.opts.keep_cluster else
                     "torn down" if cluster is None or cluster.torn_down else
                     "NOT fully torn down (run `chaosbench clean`)")
            error = f"interrupted (Ctrl-C); the cluster was {state}"
            self._finish(backend, started, error)
            raise
        return self._finish(backend, started, error)

    def _run_cluster(self, backend: str) -> None:
        from chaosbench.cluster import create_cluster
        create_cluster = self.opts.cluster_factory or create_cluster
        spec = build_spec(self.s, self.run_id, self.run_dir.resolve(), self.path)
        self.progress.phase = "cluster_up"
        self.say(f"creating {backend} cluster: {self.s.cluster.nodes} node(s), run {self.run_id}")
        slurm = {**self.s.cluster.slurm.options(), **self.opts.slurm} if backend == "slurm" else {}
        cluster = self.cluster = create_cluster(backend, spec, **slurm) if slurm else create_cluster(backend, spec)
        missing = unsupported_faults(self.s, cluster.supported_faults)
        if missing:
            raise UnsupportedFault(f"backend '{backend}' cannot inject: {'; '.join(missing)}"
                                   + getattr(cluster, "refusal_hint", ""))
        try:
            cluster.up()
            # a backend that can only learn what a site permits on its nodes checks it now: allocated,
            # nothing trained yet (the Slurm backend tries iptables inside the allocation)
            probe = getattr(cluster, "probe_faults", None)
            refused = probe({n for f in self.s.faults for n in get_fault(f.kind).needs}) if probe else []
            if refused:
                raise UnsupportedFault(f"backend '{backend}' cannot inject here: {'; '.join(refused)}")
            self.say("cluster up; starting training")
            cluster.start_training()
            self.harness["training_started_at"] = time.time()
            self.progress.phase = "training"
            self._drive(cluster)
        finally:
            self.progress.phase = "collecting"
            self.say("collecting logs and events")
            interrupted = False
            try:
                self._collect(cluster)
            except KeyboardInterrupt:   # a second Ctrl-C: skip the logs, never the teardown
                interrupted = True
                self.say("interrupted while collecting: tearing down without the rest of the logs")
            if self.opts.keep_cluster:
                self.say(f"--keep-cluster: cluster left up; {_attach_hint(cluster)}")
            elif teardown(cluster):
                self.say("cluster torn down")
            else:
                self.say("teardown incomplete: the exit-time sweep retries; `chaosbench clean` removes "
                         "what is left of runs that are gone")
            if interrupted:
                raise KeyboardInterrupt

    def _drive(self, cluster) -> None:
        run = self.s.run
        tail = EventTail(cluster.events_dir)
        sched = Schedule(self.s.faults, self.seed)
        log = FaultLog(self.run_dir / "faults.jsonl")
        faults = {}
        for p in sched.plans:
            rng = random.Random(f"{self.seed}:{p.fault_id}:target")
            ctx = FaultContext(cluster=cluster, log=log, rng=rng)
            params = get_fault(p.entry.kind).Params.model_validate(p.entry.params)
            faults[p.fault_id] = get_fault(p.entry.kind)(p.fault_id, params, ctx)
            self.records[p.fault_id] = FaultRecord(id=p.fault_id, type=p.entry.kind, trigger=p.entry.at.describe(),
                                                   params=p.entry.params)
        # what was planned, so the checks can judge each fault against it (checks/faults.py)
        self.harness["faults_planned"] = [{"id": p.fault_id, "type": p.entry.kind, "trigger": p.entry.at.describe(),
                                           "healable": p.healable, "heal_after_s": p.heal_after_s}
                                          for p in sched.plans]
        t0 = self.harness["training_started_at"]
        target = self.s.expect.reaches_step
        reached_at = None
        said_waiting = False
        next_status = 0.0
        stop = ending = None
        self.progress.last_progress_at = time.time()
        while stop is None:
            now = time.time()
            rel = now - t0
            for ev in tail.poll():
                self.progress.update(ev)
                sched.observe_event(ev, ev.get("ts", now) - t0)
            for act in sched.due(rel, self.progress.step):
                self._act(act, faults[act.planned.fault_id], sched, t0)
            self.progress.faults_pending = sched.pending
            self.progress.faults_injected = sum(1 for r in self.records.values() if r.injected_at)
            self._tick()
            if target is not None and self.progress.step >= target and reached_at is None:
                reached_at = now
                self.say(f"reached step {self.progress.step}")
            # the run goes on until every planned fault fired and healed, then settles
            settled_from = max([reached_at or 0.0] + [t0 + p.heal_at for p in sched.plans
                                                      if p.state == "done" and p.heal_at is not None])
            if reached_at is not None and not sched.finished and not said_waiting:
                said_waiting = True
                self.say("faults still planned or in place: " + ", ".join(
                    f"{p.fault_id} ({p.state})" for p in sched.plans if p.state != "done") + "; the run goes on")
            if reached_at is not None and sched.finished and now - settled_from >= run.settle_s:
                stop, ending = f"reached step {target}", "reached_step"
            elif rel > run.timeout_s:
                stop, ending = f"timeout: {run.timeout_s:g} s elapsed (highest step {self.progress.step})", "timeout"
            elif now - self.progress.last_progress_at > run.stuck_after_s:
                ending = "stuck"
                phases = ", ".join(f"{n}: {p}" for n, p in sorted(self.progress.trainer_phases.items()))
                stop = (f"stuck: no new step for {run.stuck_after_s:g} s (highest step {self.progress.step}; "
                        f"last trainer phases: {phases or 'none reported'})")
                if self.progress.last_fatal:
                    stop += f"; last fatal error: {self.progress.last_fatal}"
            elif self.opts.cancel.is_set():
                raise ClusterError("cancelled (Ctrl-C or SIGTERM)")
            elif now >= next_status:
                next_status = now + 2.0
                # every node gone and no fault about to bring them back (kill_all heals by restarting)
                exited = self._exited(cluster)
                if exited and not sched.unhealed():
                    # a job that ends on its own once the target is reached and every fault is done
                    ending = "reached_step" if reached_at is not None and sched.finished else \
                        _exit_ending(exited, target, sched.finished)
                    what = "every node exited" if target is None else \
                        f"every node exited after reaching step {target}" if reached_at is not None else \
                        f"every node exited before step {target} (highest step {self.progress.step})"
                    stop = f"{what}: {exited}" + (f"; last fatal error: {self.progress.last_fatal}"
                                                  if self.progress.last_fatal else "")
            if stop is None:
                time.sleep(self.opts.poll_s)
        for ev in tail.poll():
            self.progress.update(ev)
        self.harness["stop_reason"] = stop
        self.harness["ending"] = ending
        # faults the stop cut short or never reached: the checks hold them against the expected ending
        self.harness["faults_unfinished"] = [p.fault_id for p in sched.plans if p.state != "done"]
        self.harness["stopped_at"] = time.time()
        self.say(f"stopping: {stop}")
        for p in sched.unhealed():   # leave the cluster healthy enough to collect from
            self._act_heal(p, faults[p.fault_id], sched, t0, best_effort=True)

    def _exited(self, cluster) -> str:
        """'node-0 exited:1, ...' when no node runs any more, else ''."""
        try:
            status = {n: cluster.node_status(n) for n in cluster.node_names()}
        except ClusterError:
            return ""
        if status and all(v.startswith(("exited", "absent")) for v in status.values()):
            return ", ".join(f"{n} {v}" for n, v in sorted(status.items()))
        return ""

    def _act(self, act, fault, sched, t0) -> None:
        p = act.planned
        if act.kind == "heal":
            return self._act_heal(p, fault, sched, t0)
        self.say(f"injecting {p.fault_id}: {p.entry.kind} ({p.entry.at.describe()})")
        try:
            ts = fault.inject()
        except Exception as e:
            self.records[p.fault_id].error = f"inject failed: {type(e).__name__}: {e}"
            raise ClusterError(f"fault {p.fault_id} ({p.entry.kind}) could not be injected: {e}") from e
        rec = self.records[p.fault_id]
        rec.injected_at, rec.target = ts, fault.target
        sched.mark_injected(p, ts - t0)
        self._inventory_at(self.cluster, p.fault_id)

    def _act_heal(self, p, fault, sched, t0, best_effort: bool = False) -> None:
        self.say(f"healing {p.fault_id}: {p.entry.kind}")
        try:
            ts = fault.heal()
        except Exception as e:
            self.records[p.fault_id].error = f"heal failed: {type(e).__name__}: {e}"
            if best_effort:
                return
            raise ClusterError(f"fault {p.fault_id} ({p.entry.kind}) could not be healed: {e}") from e
        now = ts if ts is not None else time.time()
        self.records[p.fault_id].healed_at = ts
        sched.mark_healed(p, now - t0)

    def _collect(self, cluster) -> None:
        if hasattr(cluster, "record"):   # backend ids for the run record (Slurm job and step ids)
            self.harness[cluster.backend] = cluster.record()
        try:
            cluster.collect()
        except Exception as e:   # keep what we have; the checks will say what is missing
            self.say(f"collect failed: {e}")
        try:
            src = Path(cluster.events_dir)
            dst = self.run_dir / "events"
            if src.is_dir() and src.resolve() != dst.resolve():
                for f in src.glob("*.jsonl"):   # trainer events and the node watcher's agent-*.jsonl
                    shutil.copy2(f, dst / f.name)
            nodes = cluster.node_names()
        except Exception as e:   # a cluster that never came up has nothing to copy
            self.say(f"events not collected: {type(e).__name__}: {e}")
            return
        self._explain_exits()
        for t in self._inventories:   # the ones taken at fault injections, still walking
            t.join(timeout=120)
        (self.run_dir / "checkpoints.json").write_text(json.dumps(inventory_of(cluster, nodes), indent=1))

    def _explain_exits(self) -> None:
        """A run that stopped with every node gone, stuck or timed out names its root cause across nodes
        (chaosbench/diagnosis): the first failure in time and its error, the node whose workers failed
        with it restart after restart; a peer's connection error that followed is a consequence, not
        the cause. Without a failure in the logs: the last exception line of the first log that has one."""
        stop = self.harness.get("stop_reason") or ""
        if not stop.startswith(("every node exited", "stuck", "timeout")):   # a crash loop may outlast the run
            return
        try:
            from chaosbench.diagnosis.record import RunRecord
            from chaosbench.diagnosis.rootcause import root_cause
            cause = root_cause(RunRecord.load(self.run_dir))
        except Exception as e:   # the verdict stands without it; say why the cause is missing
            cause = None
            self.say(f"root cause not found: {type(e).__name__}: {e}")
        if cause is not None:
            self.harness["stop_reason"] = f"{stop}; root cause: {cause.summary}"
            self.harness["root_cause"] = {"node": cause.node, "error": cause.error, "repeats": cause.repeats,
                                          "first_failure_at": cause.first_failure_at}
            return
        for log in sorted((self.run_dir / "logs").glob("node-*.log")):
            why = last_error(log)
            if why:
                self.harness["stop_reason"] = f"{stop}; last exception in {log.stem}'s log: {why}"
                return

    def _inventory_at(self, cluster, fault_id: str) -> None:
        """What the harness itself sees on the nodes right after a fault acted, taken in the
        background so the schedule (a heal due at once) is not delayed; the restore cross-check
        holds the trainer's checkpoint_loaded claims against it."""
        path = self.run_dir / "inventories" / fault_file_name(fault_id)   # refuses a path-like id

        def take():
            try:
                inv = inventory_of(cluster, cluster.node_names())
            except Exception as e:   # evidence we could not take is said, never invented
                inv = {"files": [], "checkpoints": [], "unseen": [{"node": "*", "tier": "*",
                                                                  "reason": f"{type(e).__name__}: {e}"}]}
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps({"fault_id": fault_id, **inv}, indent=1))
        t = threading.Thread(target=take, name=f"inventory-{fault_id}", daemon=True)
        t.start()
        self._inventories.append(t)

    # -- verdict and files ----------------------------------------------------------------------
    def _finish(self, backend: str, started: float, error: str | None) -> RunOutcome:
        self.progress.phase = "checks"
        if error:   # the harness broke (or Ctrl-C): whatever the run did, it ended in an error
            self.harness["ending"] = "error"
        (self.run_dir / "harness.json").write_text(json.dumps(self.harness, indent=1))
        h = History.load(self.run_dir)
        recs, checks = evaluate(h, self.s.expect)
        apply_fault_verdicts(self.records, checks)   # each fault's own verdict goes on its record too
        self.progress.checks_pending = 0
        c = self.s.cluster
        verdict = verdict_of(checks, error)   # the same judgement `chaosbench recheck` makes later
        finished = time.time()
        result = RunResult(
            run_id=self.run_id,
            scenario=ScenarioRef(name=self.s.name, file=str(self.path) if self.path else None,
                                 description=self.s.description),
            backend=backend,
            cluster=ClusterShape(nodes=c.nodes, procs_per_node=c.procs_per_node, min_nodes=c.elastic.min_nodes,
                                 max_nodes=c.elastic.max_nodes, rendezvous=c.rendezvous),
            seed=self.seed, command=self.opts.command or f"chaosbench run {self.path} --backend {backend} --seed {self.seed}",
            started_at=started, finished_at=finished, duration_s=round(finished - started, 3),
            verdict=verdict, error=error, ending=self.harness.get("ending"),
            stop_reason=self.harness.get("stop_reason"), faults=list(self.records.values()), recoveries=recs, checks=checks,
            checkpoints=checkpoint_stats(h), timeline=timeline(h), goodput=goodput(h))
        result.write(self.run_dir)
        write_junit(result, self.run_dir)
        _render_report(self.run_dir, result, self.say)
        self.progress.phase = "done"
        self._tick()
        return RunOutcome(self.s.name, self.run_dir, result, EXIT[verdict])


def _exit_ending(exited: str, target: int | None, faults_done: bool) -> str:
    """Every node gone: the job ran to its end ('completed': no step target, each node exited 0,
    every fault done), else the nodes died ('nodes_exited')."""
    codes = [part.rsplit(" ", 1)[-1] for part in exited.split(", ")]
    clean = target is None and faults_done and all(c == "exited:0" for c in codes)
    return "completed" if clean else "nodes_exited"


def inventory_of(cluster, nodes: list[str]) -> dict:
    """Every node's memory and NVMe checkpoint directories plus the run's S3 bucket; what could
    not be located (a stopped container's /dev/shm, an NVMe without a host path) is listed as unseen."""
    roots, unseen = {}, {}
    for node in nodes:
        for tier, getter in (("nvme", cluster.nvme_dir), ("memory", cluster.shm_dir)):
            try:
                roots[f"{node}/{tier}"] = (tier, Path(getter(node)))
            except Exception as e:
                unseen[f"{node}/{tier}"] = (tier, f"{type(e).__name__}: {e}")
    try:
        s3 = s3_inventory(cluster.s3_endpoint, S3_BUCKET)
    except Exception as e:
        s3 = {"unseen": [{"node": "s3", "tier": "s3", "reason": f"{type(e).__name__}: {e}"}]}
    return take_inventory(roots, unseen, s3)


def _attach_hint(cluster) -> str:
    hint = getattr(cluster, "attach_hint", None)
    if callable(hint):
        return hint()
    return f"events in {cluster.events_dir}; proxy API {cluster.proxy_api}; remove with `docker compose down` " \
           f"or by killing run {cluster.spec.run_id}"


def _render_report(run_dir: Path, result: RunResult, say) -> None:
    try:
        from chaosbench.report import render_run
    except ImportError:
        result.files.pop("report", None)
        result.write(run_dir)
        return
    try:
        render_run(run_dir)
    except Exception as e:   # the run record stands without its HTML view
        say(f"report rendering failed: {type(e).__name__}: {e}")
