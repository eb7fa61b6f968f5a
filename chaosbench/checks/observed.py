"""What a recovery shows from the outside when the trainer said nothing of its restore.

A job without events (docs/byo-trainer.md) has only what the node watcher saw: worker processes
starting and exiting, progress lines, and the torchrun agents' rendezvous lines. From that a
recovery still shows, conservatively (a wrong guess would pass a check):
- where training resumed, only when the progress cadence is known: every process printed every
  step (a stride of 1 between its printed steps), so the first step a restarted round printed,
  minus one, is the step it restored. With a sparser or irregular stride (a line that only looks
  like progress breaks it too) the restore is anywhere in a range: not inferred, and said why;
- a round whose first printed step is no later than the run's very first printed step started
  over: tier `none`, restored step 0, everything lost (whatever the cadence);
- a restore above the last step before the fault is impossible (negative lost work): a problem;
- when survivors noticed: a pre-fault worker that exited after the injection;
- the round's ranks and world size from the worker processes the watcher saw start and the agents'
  rendezvous lines, not from who printed (`if rank == 0: print(...)` is common).
The tier of a restore is never guessed: it stays unknown (the check says which event would tell).
"""
from __future__ import annotations

from chaosbench.checks.history import History
from chaosbench.checks.lineage import recovery_round
from chaosbench.checks.recovery import split_phases
from chaosbench.result import Recovery

INFERRED = "inferred from the first step after the restart"
NOT_INFERRED = "not inferred"


def _printed(evs: list[dict]) -> list[int]:
    return [int(e["step"]) for e in sorted(evs, key=lambda e: e["ts"]) if e.get("event") == "step"]


def cadence(h: History) -> int | None:
    """The one stride between consecutive printed steps of every process (repeats ignored), or None
    when there is none (no process printed twice) or more than one (sparse, irregular, noise)."""
    strides: set[int] = set()
    for evs in h.by_incarnation().values():
        seq = _printed(evs)
        seq = [s for i, s in enumerate(seq) if i == 0 or s != seq[i - 1]]
        strides |= {b - a for a, b in zip(seq, seq[1:])}
    return strides.pop() if len(strides) == 1 and min(strides) > 0 else None


def confirmed_steps(h: History) -> list[dict]:
    """Step events, less the node watcher's lines that only look like progress: an observed step counts
    when its process also printed the step one of its usual strides (median) before or after it; a
    trainer's own step events always count. 'step 1000' printed once by something else earns nothing."""
    out = []
    for evs in h.by_incarnation().values():
        steps = [e for e in evs if e.get("event") == "step"]
        if not any(e.get("observed") for e in steps):
            out += steps
            continue
        seq = [int(e["step"]) for e in sorted(steps, key=lambda e: e["ts"])]
        strides = sorted(b - a for a, b in zip(seq, seq[1:]) if b > a)
        if not strides:
            continue
        m, printed = strides[len(strides) // 2], set(seq)
        out += [e for e in steps if int(e["step"]) - m in printed or int(e["step"]) + m in printed]
    return sorted(out, key=lambda e: e["ts"])


def complete_from_observation(h: History, recs: list[Recovery]) -> None:
    """Fill restored_step / lost_steps / detection / ranks of recoveries whose round logged no restore."""
    if not any(e.get("observed") for e in h.events):
        return
    groups = h.by_incarnation()
    starts = h.incarnation_starts()
    stride = cadence(h)
    first_ever = [s for inc, ts in starts.items() if h.faults and ts < h.faults[0].injected_at
                  for s in _printed(groups[inc])[:1]]
    origin = min(first_ever) if first_ever else None
    for rec in recs:
        if rec.first_step_at is None:
            continue
        t0 = rec.injected_at
        nxt = [f.injected_at for f in h.faults if f.injected_at > t0]
        _, members, dead = recovery_round(h, t0, min(nxt, default=float("inf")))
        round_ = [i.key for i in members + dead]
        events = [e for inc in round_ for e in groups[inc]]
        if all(e.get("observed") for e in events):
            _ranks_from_watcher(h, rec, round_, groups)
        if rec.restored_step is None and not any(
                e.get("event") in ("checkpoint_loaded", "checkpoint_fresh_start") for e in events):
            _infer_restore(rec, round_, groups, stride, origin)
        if rec.detected_at is None:
            exits = [e["ts"] for inc, ts in starts.items() if ts < t0 for e in groups[inc]
                     if e.get("event") == "worker_exit" and t0 <= e["ts"] <= rec.rendezvous_done_at]
            if exits:
                rec.detected_at = min(exits)
        split_phases(rec)


def _infer_restore(rec: Recovery, round_, groups, stride: int | None, origin: int | None) -> None:
    firsts = [min((e for e in groups[inc] if e.get("event") == "step"), key=lambda e: e["ts"])
              for inc in round_ if any(e.get("event") == "step" for e in groups[inc])]
    if not firsts:
        return
    first = min(int(e["step"]) for e in firsts)
    resumed = {f"{e.get('node')}/rank{e.get('rank')}": int(e["step"]) - 1 for e in firsts}
    if origin is not None and first <= origin:
        rec.restored_step, rec.tier = 0, "none"   # started over: nothing was restored
        rec.source = f"{INFERRED}: the round started again at step {first}, the run's first printed step"
    elif stride == 1:
        rec.restored_step = first - 1
        rec.source = INFERRED
        if len(set(resumed.values())) > 1:   # replicas that resumed at different steps diverged
            rec.source += "; ranks disagree: " + ", ".join(f"{k} at {v}" for k, v in sorted(resumed.items()))
            rec.problems.append("ranks resumed at different steps: " + ", ".join(
                f"{k} at {v}" for k, v in sorted(resumed.items())))
    else:
        how = (f"progress is printed every {stride} steps" if stride else
               "progress lines show no steady stride between steps (sparse, irregular, or lines that only "
               "look like progress)")
        rec.source = (f"{NOT_INFERRED}: {how}, so the step restored before step {first} cannot be told; print "
                      "every step, or say it with chaosbench.instrument's restored() (docs/byo-trainer.md)")
        return
    if rec.step_before_fault is not None:
        if rec.restored_step > rec.step_before_fault:
            rec.problems.append(f"training resumed at step {rec.restored_step + 1}, above the last step before "
                                f"the fault ({rec.step_before_fault}): no such checkpoint can exist (a line that "
                                "only looks like progress?)")
        else:
            rec.lost_steps = rec.step_before_fault - rec.restored_step


def _ranks_from_watcher(h: History, rec: Recovery, round_, groups) -> None:
    """The round's worker processes, printing or not, and the world size the agents rendezvoused at."""
    def alive_at_first_step(inc) -> bool:
        exits = [e["ts"] for e in groups[inc] if e.get("event") == "worker_exit"]
        return not exits or min(exits) >= rec.first_step_at
    live = [inc for inc in round_ if alive_at_first_step(inc)]
    rec.ranks_after = len(live)
    rec.failed_restarts = sum(1 for inc in round_ if not alive_at_first_step(inc))
    rdzv = [a for a in h.agent_events if a.get("event") == "rendezvous_done" and a.get("world_size")
            and rec.injected_at <= a["ts"] <= rec.first_step_at]
    sizes = {int(a["world_size"]) for a in rdzv}
    if len(sizes) == 1 and rec.world_size_after is not None and sizes != {rec.world_size_after}:
        rec.problems.append(f"the agents rendezvoused at world size {sizes.pop()}, the workers were started "
                            f"with {rec.world_size_after}")
