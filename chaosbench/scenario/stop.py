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

    @classmethod
    def of(cls, scenario, started_at: float) -> "StopRule":
        run = scenario.run
        return cls(started_at, scenario.expect.reaches_step, run.timeout_s, run.stuck_after_s, run.settle_s)


def stop_reason(progress, schedule: Schedule, now: float, cfg: StopRule, *, reached_at: float | None = None,
                exited: str = "") -> tuple[str, str] | None:
    """(stop reason in words, ending) once the run should stop, else None.

    progress: the observer's Progress (step, last_progress_at, trainer_phases, last_fatal);
    reached_at: when the target step was first seen; exited: 'node-0 exited:1, ...' when no node
    runs any more ('' when one does, or when the runner did not look this time).
    """
    if reached_at is not None and schedule.finished and now - settled_from(schedule, cfg, reached_at) >= cfg.settle_s:
        return f"reached step {cfg.target}", "reached_step"
    if now - cfg.started_at > cfg.timeout_s:
        return f"timeout: {cfg.timeout_s:g} s elapsed (highest step {progress.step})", "timeout"
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


def exit_ending(exited: str, target: int | None, faults_done: bool) -> str:
    """Every node gone: the job ran to its end ('completed': no step target, each node exited 0,
    every fault done), else the nodes died ('nodes_exited')."""
    codes = [part.rsplit(" ", 1)[-1] for part in exited.split(", ")]
    clean = target is None and faults_done and all(c == "exited:0" for c in codes)
    return "completed" if clean else "nodes_exited"


def _fatal(progress) -> str:
    return f"; last fatal error: {progress.last_fatal}" if progress.last_fatal else ""
