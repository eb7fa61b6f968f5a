"""When a run stops: a pure rule over what the runner has seen, beside the fault `Schedule`.

The runner asks `stop_reason` once per poll; nothing here reads a clock or a cluster, so each stop
condition is unit-tested with synthetic times. The endings are those of result.json (docs/result.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from chaosbench.scenario.schedule import Schedule


@dataclass(frozen=True)
class StopRule:
    started_at: float              # when training started (wall clock); the schedule counts from here
    target: int | None             # expect.reaches_step
    timeout_s: float
    stuck_after_s: float
    settle_s: float
    settled_steps: int | None = None   # expect.trains_after_settle
    final_world: int | None = None     # the world size the story ends at, when it names one

    @classmethod
    def of(cls, scenario, started_at: float) -> "StopRule":
        run, e = scenario.run, scenario.expect
        return cls(started_at, e.reaches_step, run.timeout_s, run.stuck_after_s, run.settle_s,
                   e.trains_after_settle, e.final_world())


def stop_reason(progress, schedule: Schedule, now: float, cfg: StopRule, *, reached_at: float | None = None,
                exited: str = "") -> tuple[str, str] | None:
    """(stop reason in words, ending) once the run should stop, else None.

    progress: the observer's Progress (step, last_progress_at, trainer_phases, last_fatal);
    reached_at: when the target step was first seen; exited: 'node-0 exited:1, ...' when no node
    runs any more ('' when one does, or when the runner did not look this time).
    """
    if reached_at is not None and schedule.finished and now - settled_from(schedule, cfg, reached_at) >= cfg.settle_s:
        return f"reached step {cfg.target}", "reached_step"
    settled = _settled(progress, schedule, cfg)
    if settled:
        return settled, "settled"
    if now - cfg.started_at > cfg.timeout_s:
        return f"timeout: {cfg.timeout_s:g} s elapsed (highest step {progress.step}{_waiting(progress, cfg)})", \
            "timeout"
    if now - progress.last_progress_at > cfg.stuck_after_s:
        phases = ", ".join(f"{n}: {p}" for n, p in sorted(progress.trainer_phases.items()))
        return (f"stuck: no new step for {cfg.stuck_after_s:g} s (highest step {progress.step}; "
                f"last trainer phases: {phases or 'none reported'})" + _fatal(progress)), "stuck"
    # every node gone and no fault about to bring them back (kill_all heals by restarting)
    if exited and not schedule.unhealed():
        what = ("every node exited" if cfg.target is None else
                f"every node exited after reaching step {cfg.target}" if reached_at is not None else
                f"every node exited before step {cfg.target} (highest step {progress.step})")
        # a job that ends on its own once the target is reached and every fault is done
        ending = "reached_step" if reached_at is not None and schedule.finished else \
            exit_ending(exited, cfg.target, schedule.finished)
        return f"{what}: {exited}" + _fatal(progress), ending
    return None


def settled_from(schedule: Schedule, cfg: StopRule, reached_at: float) -> float:
    """The run goes on until every planned fault fired and healed, then settles from the latest of those."""
    return max([reached_at] + [cfg.started_at + p.heal_at for p in schedule.plans
                               if p.state == "done" and p.heal_at is not None])


def faults_settled_at(schedule: Schedule, cfg: StopRule) -> float:
    """When the last planned fault was injected or healed (wall clock); training start without faults."""
    return cfg.started_at + max([0.0] + [t for p in schedule.plans for t in (p.injected_at, p.heal_at)
                                         if t is not None])


def _settled(progress, schedule: Schedule, cfg: StopRule) -> str:
    """'trained N steps ...' once every fault is done and the current stretch of steps (one world,
    no restart) trained settled_steps after the last injection or heal, at the story's final world
    size when it names one; '' until then. A restart after that point starts the count again."""
    if cfg.settled_steps is None or not schedule.finished:
        return ""
    # a cooperative fault's inject is only the command's delivery: it happened when the job said so
    from chaosbench.faults.inprocess import is_cooperative
    acted = progress.acted
    coop = [p.fault_id for p in schedule.plans if is_cooperative(p.entry.kind)]
    if any(f not in acted for f in coop):
        return ""
    stretch = progress.stretch
    if cfg.final_world is not None and stretch.world != cfg.final_world:
        return ""
    since = max([faults_settled_at(schedule, cfg)] + [acted[f] for f in coop])
    if stretch.steps_since(since) < cfg.settled_steps:
        return ""
    return (f"trained {cfg.settled_steps} steps at world size {stretch.world} after the last fault settled "
            f"(step {stretch.top})")


def exit_ending(exited: str, target: int | None, faults_done: bool) -> str:
    """Every node gone: the job ran to its end ('completed': no step target, each node exited 0,
    every fault done), else the nodes died ('nodes_exited')."""
    codes = [part.rsplit(" ", 1)[-1] for part in exited.split(", ")]
    clean = target is None and faults_done and all(c == "exited:0" for c in codes)
    return "completed" if clean else "nodes_exited"


def _waiting(progress, cfg: StopRule) -> str:
    if cfg.settled_steps is None:
        return ""
    want = "" if cfg.final_world is None else f" at world size {cfg.final_world}"
    return (f"; never trained {cfg.settled_steps} steps{want} after the last fault settled: the last stretch "
            f"of steps was at world size {progress.stretch.world}")


def _fatal(progress) -> str:
    return f"; last fatal error: {progress.last_fatal}" if progress.last_fatal else ""
