"""What a recovery shows from the outside when the trainer said nothing of its restore.

A job without events (docs/byo-trainer.md) has only what the node watcher saw: worker processes
starting and exiting, and progress lines. From that a recovery still shows
- where training resumed: the first step a restarted round printed, minus one, is the step it
  restored (a round that starts again at step 1 started fresh: tier `none`, everything lost);
- when survivors noticed: a pre-fault worker that exited after the injection.
The tier of a restore is never guessed: it stays unknown (the check says which event would tell).
"""
from __future__ import annotations

from chaosbench.checks.history import History
from chaosbench.result import Recovery

INFERRED = "inferred from the first step after the restart"


def complete_from_observation(h: History, recs: list[Recovery]) -> None:
    """Fill restored_step / lost_steps / detection of recoveries whose round logged no restore."""
    from chaosbench.checks.recovery import _phases
    if not any(e.get("observed") for e in h.events):
        return
    groups = h.by_incarnation()
    starts = h.incarnation_starts()
    for rec in recs:
        if rec.first_step_at is None:
            continue
        t0 = rec.injected_at
        round_ = [inc for inc, ts in starts.items() if t0 <= ts <= rec.first_step_at]
        events = [e for inc in round_ for e in groups[inc]]
        if rec.restored_step is None and not any(
                e.get("event") in ("checkpoint_loaded", "checkpoint_fresh_start") for e in events):
            firsts = [min((e for e in groups[inc] if e.get("event") == "step"), key=lambda e: e["ts"])
                      for inc in round_ if any(e.get("event") == "step" for e in groups[inc])]
            if firsts:
                rec.restored_step = min(int(e["step"]) for e in firsts) - 1
                rec.source = INFERRED
                resumed = {f"{e.get('node')}/rank{e.get('rank')}": int(e["step"]) - 1 for e in firsts}
                if len(set(resumed.values())) > 1:   # replicas that resumed at different steps diverged
                    rec.source += "; ranks disagree: " + ", ".join(f"{k} at {v}" for k, v in sorted(resumed.items()))
                    rec.problems.append("ranks resumed at different steps: " + ", ".join(
                        f"{k} at {v}" for k, v in sorted(resumed.items())))
                if rec.restored_step == 0:
                    rec.tier = "none"   # started again from step 1: nothing was restored
                if rec.step_before_fault is not None:
                    rec.lost_steps = rec.step_before_fault - rec.restored_step
        if rec.detected_at is None:
            exits = [e["ts"] for inc, ts in starts.items() if ts < t0 for e in groups[inc]
                     if e.get("event") == "worker_exit" and t0 <= e["ts"] <= rec.rendezvous_done_at]
            if exits:
                rec.detected_at = min(exits)
        _phases(rec)
