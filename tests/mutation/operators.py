"""Mutation operators: each rewrites a copy of a real passing run's record into the history of a job
that did NOT survive, or whose record cannot be trusted, by breaking one run-level invariant
(docs/result.md, "Mutation suite") and nothing else. An operator is `fn(run_dir, rng) -> description`;
it raises NotApplicable when the run has no such feature (no restore in a run without faults).

`owner` says whose part of the checks must kill the mutant: "R" the record's integrity, "L" the
lineage invariants."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.mutation.record import Record
from tests.mutation.shape import (NotApplicable, incarnations, pick_steady, restarted_rounds, rounds, step_time,
                                  target_step, world_steps)


@dataclass(frozen=True)
class Operator:
    name: str
    invariant: str   # progress, liveness, completeness, numerics, consistency, evidence, integrity
    owner: str       # R or L
    fn: Callable[[Record, object], str]

    def __call__(self, run_dir: Path, rng) -> str:
        rec = Record.load(run_dir)
        what = self.fn(rec, rng)
        rec.save()
        return what


OPERATORS: dict[str, Operator] = {}


def operator(invariant: str, owner: str):
    def deco(fn):
        OPERATORS[fn.__name__] = Operator(fn.__name__, invariant, owner, fn)
        return fn
    return deco


def _loaded(rec: Record) -> list[tuple[str, dict]]:
    out = [(n, e) for n, e in rec.lines() if e.get("event") == "checkpoint_loaded"]
    if not out:
        raise NotApplicable("no checkpoint_loaded: the run never restored a checkpoint")
    return out


def _replay(rec: Record, rnd, at: float, first: int, last: int, new_process: bool, marker: str) -> float:
    """Every process of the round trains steps first..last again right after time `at` (the rest of
    the run moves later by that time); as a fresh process (restarted) when asked. Returns the time added."""
    dt = step_time(rec)
    span = 1.0 + (last - first + 1) * dt if new_process else (last - first + 1) * dt
    rec.shift_after(at, span)
    for inc in rnd:
        mine = [e for e in inc.events if e["ts"] <= at]
        later = [e for e in inc.events if e["ts"] > at]
        if not mine or not later:
            continue
        before = [e for e in mine if e.get("event") == "step"]
        tpl = before[-1] if before else inc.steps[0]   # a restore's round: like its first step
        losses = {e["step"]: e.get("loss") for e in inc.steps}
        same = (tpl.get("node"), tpl.get("local_rank"), tpl.get("pid"))   # this process's later lines, every file
        relabel = [e for _, e in rec.lines() if e["ts"] > at and (e.get("node"), e.get("local_rank"), e.get("pid")) == same]
        t0 = at + (1.0 if new_process else 0.0)
        new_ids = {}
        if new_process:
            new_ids = {"pid": int(tpl.get("pid", 0)) + 7919, "restart_count": int(tpl.get("restart_count", 0)) + 1}
            base = {k: v for k, v in tpl.items() if k not in ("step", "loss", "samples_seen", "step_time_s",
                                                              "global_batch", "accum_steps", "param_digest")}
            if tpl.get("observed"):
                rec.add(inc.file, {**base, "event": "worker_exit"}, at + 0.2)
                rec.add(inc.file, {**base, **new_ids, "event": "worker_start", "started_at": at + 0.5}, at + 0.5)
            else:
                rec.add(inc.file, {**base, **new_ids, "event": "phase", "phase": "config"}, at + 0.5)
                rec.add(inc.file, {**base, **new_ids, **marker_fields(marker, first - 1)}, at + 0.8)
                rec.add(inc.file, {**base, **new_ids, "event": "phase", "phase": "training"}, at + 0.9)
        for j, s in enumerate(range(first, last + 1), 1):
            loss = losses.get(s, tpl.get("loss"))
            line = {k: v for k, v in tpl.items() if k != "param_digest"}
            rec.add(inc.file, line, t0 + j * dt, step=s, **({"loss": loss} if loss is not None else {}), **new_ids)
        for e in relabel:
            e.update(new_ids)
    return span


def marker_fields(marker: str, step: int) -> dict:
    if marker == "fresh":
        return {"event": "checkpoint_fresh_start", "reason": "no valid checkpoint in memory, nvme, s3"}
    return {"event": "checkpoint_loaded", "tier": "memory", "step": step, "source": "local", "duration_s": 0.05,
            "checksum_ok": True}


# -- progress: the step counter goes back only by a restore, every restart explained, no gaps ----------
@operator("progress", "L")
def steps_missing(rec: Record, rng) -> str:
    """A contiguous range of steps missing from every rank, with no restore around it."""
    rnd, s, _ = pick_steady(rec, rng, min_ranks=1)
    n = rng.randint(3, 8)
    for inc in rnd:
        inc_lines = {id(e) for e in inc.events}
        rec.files[inc.file] = [x for x in rec.files[inc.file] if not (
            isinstance(x, dict) and id(x) in inc_lines and isinstance(x.get("step"), int) and s < x["step"] <= s + n)]
    return f"steps {s + 1}-{s + n} removed from every rank of a round (no restore)"


@operator("progress", "L")
def restart_from_zero_without_fault(rec: Record, rng) -> str:
    """Every rank restarts with no fault behind it and trains again from step 1."""
    rnd, s, ts = pick_steady(rec, rng, last_round=True)
    _replay(rec, rnd, ts, 1, s, new_process=True, marker="fresh")
    return f"after step {s} every rank restarts with no fault and trains 1..{s} again from a fresh start"


def _go_back(rec: Record, rng, restart: bool) -> tuple[int, int]:
    rnd, s, ts = pick_steady(rec, rng)
    back = min(s - 1, rng.randint(2, 6))
    _replay(rec, rnd, ts, s - back + 1, s, new_process=restart, marker="restore")
    return s, s - back


@operator("progress", "L")
def rollback_without_fault(rec: Record, rng) -> str:
    """Every rank restarts with no fault behind it and restores an earlier step."""
    s, back_to = _go_back(rec, rng, restart=True)
    return f"after step {s} every rank restarts with no fault, restores step {back_to} and trains on from it"


@operator("progress", "L")
def replay_without_restart(rec: Record, rng) -> str:
    """The same processes go back and train steps again: no restart, no restore."""
    s, back_to = _go_back(rec, rng, restart=False)
    return f"after step {s} the step counter goes back to {back_to + 1} in the same processes"


@operator("progress", "L")
def restore_older_than_inventory(rec: Record, rng) -> str:
    """A restore moved to a checkpoint older than any the inventory at the fault held; the steps in
    between are trained again."""
    loads = _loaded(rec)
    tier, step = loads[0][1].get("tier"), loads[0][1].get("step")
    inventoried = {int(p.split("step-")[1][:10]) for inv in rec.inventories.values() if isinstance(inv, dict)
                   for f in inv.get("files", []) for p in [str(f.get("path", ""))] if "step-" in p}
    older = min(inventoried | {step}) - rng.randint(1, 3)
    if older < 1 or not isinstance(step, int):
        raise NotApplicable(f"the restore is of step {step}: nothing older to move it to")
    at = min(e["ts"] for _, e in loads if e.get("step") == step)
    rnd = next(r for r in rounds(rec) if any(i.start <= at <= i.end for i in r))
    first = min(e["ts"] for i in rnd for e in i.steps if e["ts"] > at)
    for _, e in loads:
        if e.get("step") == step and e["ts"] <= first:
            e["step"] = older
    _replay(rec, rnd, first - 1e-3, older + 1, step, new_process=False, marker="")
    return f"the {tier} restore of step {step} becomes one of step {older}, older than the inventory; " \
           f"steps {older + 1}-{step} trained again"


# -- liveness: the longest gap between world steps is bounded everywhere -----------------------------
def _stall(rec: Record, rng, at: float) -> float:
    bound = float(_expect(rec).get("max_recovery_seconds") or 30.0)
    gap = max(60.0, 2 * bound) + rng.uniform(0, 10)
    rec.shift_after(at, gap)
    return gap


@operator("liveness", "L")
def stall_after_fault(rec: Record, rng) -> str:
    """The first world step after a fault comes on time, then the world stands still."""
    faults = rec.injections()
    if not faults:
        raise NotApplicable("no fault injected")
    f = rng.choice(faults)
    after = [w for r in rounds(rec) for w in world_steps(r) if w[1] > f["ts"]]
    if len(after) < 2:
        raise NotApplicable(f"fewer than two world steps after {f.get('id')}")
    k = min(len(after) - 2, rng.randint(0, 2))
    gap = _stall(rec, rng, after[k][1])
    return f"{gap:.0f} s without a step after world step {after[k][0]}, the {k + 1}. after fault {f.get('id')}"


@operator("liveness", "L")
def stall_in_steady_training(rec: Record, rng) -> str:
    """The world stands still in steady training, far from any fault."""
    _, s, ts = pick_steady(rec, rng)
    gap = _stall(rec, rng, ts)
    return f"{gap:.0f} s without a step after step {s} in steady training"


# -- completeness: every rank of the world reports at each world step; ranks unique and in range -------
@operator("completeness", "L")
def rank_falls_silent(rec: Record, rng) -> str:
    """One rank stops reporting while its peers go on."""
    rnd, s, ts = pick_steady(rec, rng, last_round=True, min_ranks=2)
    inc = rng.choice(rnd)
    drop = {id(e) for e in inc.events if e["ts"] > ts}
    for later in incarnations(rec):
        if later.file == inc.file and later.start > inc.end:
            drop |= {id(e) for e in later.events}
    rec.files[inc.file] = [x for x in rec.files[inc.file] if not (isinstance(x, dict) and id(x) in drop)]
    return f"rank {inc.rank} ({inc.file}) silent after step {s} while its peers go on"


def _two_rank_round(rec: Record, rng) -> list:
    cands = [r for r in rounds(rec) if len({i.rank for i in r}) >= 2]
    if not cands:
        raise NotApplicable("no round with two ranks")
    return rng.choice(cands)


@operator("completeness", "L")
def rank_claimed_twice(rec: Record, rng) -> str:
    """Two processes of one round claim the same rank (the other rank never reports)."""
    rnd = _two_rank_round(rec, rng)
    a, b = rng.sample([i for i in rnd if i.rank is not None], 2)
    was, rank = a.rank, b.rank
    for e in a.events:
        e["rank"] = rank
    return f"rank {was} ({a.file}) reports as rank {rank} too"


@operator("completeness", "L")
def rank_beyond_world(rec: Record, rng) -> str:
    """A process claims a rank outside its world."""
    rnd = _two_rank_round(rec, rng)
    inc = rng.choice(rnd)
    new = int(inc.world_size or len(rnd)) + rng.randint(0, 3)
    old = inc.rank
    for e in inc.events:
        e["rank"] = new
    return f"rank {old} ({inc.file}) reports as rank {new} of a world of {inc.world_size}"


@operator("completeness", "L")
def world_size_overclaimed(rec: Record, rng) -> str:
    """The processes of a round claim a bigger world than the ranks that report (one, or all of them)."""
    rnd = rng.choice(rounds(rec))
    who = rnd if rng.random() < 0.5 else [rng.choice(rnd)]
    extra = rng.randint(1, 2)
    for inc in who:
        for e in inc.events:
            if isinstance(e.get("world_size"), int):
                e["world_size"] += extra
    return f"{len(who)} of {len(rnd)} processes of a round claim world size +{extra}"


# -- numerics: loss finite everywhere; continuity after each restore ----------------------------------
@operator("numerics", "L")
def loss_not_finite(rec: Record, rng) -> str:
    """A loss that is NaN or infinite (after a restart where the run has one)."""
    late = [e for r in restarted_rounds(rec) for i in r for e in i.steps if e.get("loss") is not None]
    steps = late or [e for _, e in rec.lines() if e.get("event") == "step" and e.get("loss") is not None]
    if not steps:
        raise NotApplicable("no step reports a loss")
    e = rng.choice(steps)
    value = rng.choice([math.nan, math.inf, -math.inf])
    e["loss"] = value
    return f"loss {value} at step {e['step']} of rank {e.get('rank')}"


@operator("numerics", "L")
def loss_jumps_after_restore(rec: Record, rng) -> str:
    """From the k-th step after a restart (k > 1) the loss is a thousand times what it was."""
    later = [r for r in restarted_rounds(rec) if len(world_steps(r)) > 6]
    if not later:
        raise NotApplicable("no restart round with steps")
    rnd = rng.choice(later)
    k = rng.randint(2, 5)
    from_step = world_steps(rnd)[k - 1][0]
    hit = 0
    for inc in rnd:
        for e in inc.steps:
            if e["step"] >= from_step and isinstance(e.get("loss"), (int, float)):
                e["loss"] *= 1000.0
                hit += 1
    if not hit:
        raise NotApplicable("the restart round's steps report no loss")
    return f"loss x1000 from step {from_step}, the {k}. step after a restart"


# -- consistency: the harness's ending and highest step agree with the events -------------------------
def _harness(rec: Record) -> dict:
    if not isinstance(rec.harness, dict) or not rec.harness:
        raise NotApplicable("no harness record")
    return rec.harness


def _top_step(rec: Record) -> int:
    return max(e["step"] for _, e in rec.lines() if e.get("event") == "step" and isinstance(e.get("step"), int))


@operator("consistency", "L")
def ending_contradicts_events(rec: Record, rng) -> str:
    """The harness says the run reached a step the events never show."""
    h = _harness(rec)
    top = _top_step(rec)
    claim = top + rng.randint(20, 200)
    h["stop_reason"], h["ending"] = f"reached step {claim}", "reached_step"
    return f"harness: reached step {claim}; the events' highest step is {top}"


@operator("consistency", "L")
def lone_far_step(rec: Record, rng) -> str:
    """Training stops short of the target; one lone step line claims the target."""
    target = target_step(rec)
    if not target:
        raise NotApplicable("the scenario sets no reaches_step")
    last = rounds(rec)[-1]
    ws = world_steps(last)
    if len(ws) < 6:
        raise NotApplicable("the last round trains too few steps to cut")
    cut_step, cut_ts = ws[len(ws) // 2]
    cut_step = min(cut_step, target - 2)
    for name in rec.files:
        rec.files[name] = [x for x in rec.files[name] if not (
            isinstance(x, dict) and x.get("event") == "step" and x["ts"] > cut_ts and x["step"] > cut_step)]
    inc = rng.choice(last)
    tpl = inc.steps[-1] if inc.steps else last[0].steps[-1]
    far = rng.choice([target, target + rng.randint(1, 50)])
    top = _top_step(rec)
    rec.add(inc.file, tpl, tpl["ts"], step=far)
    return f"training stops at step {top}; one line of rank {inc.rank} says step {far}"


# -- evidence: restores backed by valid, inventoried checkpoints; replicas compared after faults -------
@operator("evidence", "L")
def checksum_not_ok(rec: Record, rng) -> str:
    """A rank's restore reports a falsy checksum_ok."""
    name, e = rng.choice(_loaded(rec))
    e["checksum_ok"] = rng.choice([False, 0, None])
    return f"checkpoint_loaded of step {e.get('step')} on {name}: checksum_ok {e['checksum_ok']!r}"


@operator("evidence", "L")
def restore_of_invalid_checkpoint(rec: Record, rng) -> str:
    """The job calls a checkpoint invalid, then restores it."""
    name, e = rng.choice(_loaded(rec))
    common = {k: v for k, v in e.items() if k not in ("source", "duration_s", "checksum_ok", "checksum", "bytes")}
    rec.add(name, common, e["ts"] - 0.005, event="checkpoint_invalid", error="checksum mismatch (crc32)")
    return f"checkpoint_invalid for {e.get('tier')}@{e.get('step')} on {name}, then loaded"


@operator("evidence", "L")
def digests_stop_after_restore(rec: Record, rng) -> str:
    """The ranks' parameter digests stop after the first restart: replicas never compared again
    (a failure only where the scenario asks `replicas_agree`)."""
    if not _expect(rec).get("replicas_agree"):
        raise NotApplicable("the scenario does not ask replicas_agree")
    later = restarted_rounds(rec)
    if not later:
        raise NotApplicable("no restart")
    t = min(i.start for i in later[0])
    hit = 0
    for _, e in rec.lines():
        if e["ts"] >= t and "param_digest" in e:
            del e["param_digest"]
            hit += 1
    if not hit:
        raise NotApplicable("no parameter digests after the restart")
    return f"{hit} parameter digests after the first restart removed"


@operator("evidence", "L")
def restore_without_inventory(rec: Record, rng) -> str:
    """The inventory taken at the fault before a restore is gone."""
    _, e = _loaded(rec)[0]
    before = [n for n, inv in rec.inventories.items() if isinstance(inv, dict)
              and inv.get("taken_at", 0) <= e["ts"]]
    if not before:
        raise NotApplicable("no inventory before the restore")
    name = rng.choice(before)
    # (an inventory merely begun after a fast restore still backs it when it holds the checkpoint)
    rec.delete(f"inventories/{name}")
    rec.inventories.pop(name)
    return f"inventories/{name} (before the restore of step {e.get('step')}) removed"


# -- integrity: every part present and parsable, nothing silently dropped ------------------------------
@operator("integrity", "R")
def garbled_line(rec: Record, rng) -> str:
    """A line in the middle of an events file does not parse (not the torn last line)."""
    keen = ("fatal", "checkpoint_loaded", "worker_exit", "fault_fired", "checkpoint_invalid")
    cands = [(n, i) for n, lines in rec.files.items() if n.startswith("events-")
             for i, x in enumerate(lines[:-1]) if isinstance(x, dict) and i > 0]
    if not cands:
        raise NotApplicable("no events file with a middle line")
    best = [(n, i) for n, i in cands if rec.files[n][i].get("event") in keen]
    name, i = rng.choice(best or cands)
    text = json.dumps({k: v for k, v in rec.files[name][i].items() if not k.startswith("\x00")})
    was = rec.files[name][i].get("event")
    rec.files[name][i] = rng.choice([text[: len(text) // 2], text.replace('"', "", 3), "\x00" * 16 + text[3:]])
    return f"{name} line {i + 1} ({was}) garbled"


def _remove(rec: Record, part: str, why_absent: str) -> str:
    if not (rec.dir / part).exists():
        raise NotApplicable(why_absent)
    rec.delete(part)
    if part == "harness.json":
        rec.harness = None
    return f"{part} removed"


@operator("integrity", "R")
def fault_log_missing(rec: Record, rng) -> str:
    """The scenario injects faults; the fault log is gone."""
    if not _scenario(rec).get("faults"):
        raise NotApplicable("the scenario injects no fault")
    return _remove(rec, "faults.jsonl", "no faults.jsonl")


@operator("integrity", "R")
def harness_record_missing(rec: Record, rng) -> str:
    """harness.json is gone, or empty."""
    if rng.random() < 0.5:
        return _remove(rec, "harness.json", "no harness.json")
    rec.harness = rng.choice([{}, None])
    (rec.dir / "harness.json").write_text("{}" if rec.harness == {} else "")
    return "harness.json emptied"


@operator("integrity", "R")
def events_file_missing(rec: Record, rng) -> str:
    """One worker's events file is gone."""
    names = [n for n in rec.files if n.startswith("events-")]
    if len(names) < 2:
        raise NotApplicable("fewer than two events files")
    return _remove(rec, f"events/{rng.choice(names)}", "")


@operator("integrity", "R")
def exits_missing(rec: Record, rng) -> str:
    """exits.json (how every process and container ended) is gone."""
    return _remove(rec, "exits.json", "no exits.json")


@operator("integrity", "R")
def events_after_stop(rec: Record, rng) -> str:
    """A worker goes on training well after the harness stopped the run."""
    stop = _harness(rec).get("stopped_at")
    if not isinstance(stop, (int, float)):
        raise NotApplicable("the harness record has no stopped_at")
    inc = rng.choice([i for i in incarnations(rec) if i.steps])
    tpl = inc.steps[-1]
    at = stop + rng.uniform(20, 60)
    n = rng.randint(1, 5)
    for j in range(n):
        rec.add(inc.file, tpl, at + j * step_time(rec), step=tpl["step"] + 1 + j)
    return f"{n} steps of {inc.file} {at - stop:.0f} s after the harness stopped"


@operator("integrity", "R")
def foreign_run_id(rec: Record, rng) -> str:
    """Lines in the middle of a worker's file carry another run's id."""
    name = rng.choice([n for n in rec.files if n.startswith("events-")])
    lines = [x for x in rec.files[name] if isinstance(x, dict) and x.get("run_id")]
    if len(lines) < 4:
        raise NotApplicable(f"{name} has no run ids to change")
    i = rng.randint(1, len(lines) - 3)
    n = rng.randint(1, min(10, len(lines) - 2 - i))
    for e in lines[i:i + n]:
        e["run_id"] = "another_run-20260101-000000-dead"
    return f"{n} lines of {name} carry another run's id"


@operator("integrity", "R")
def receipts_missing(rec: Record, rng) -> str:
    """received.jsonl is gone: the clock skew of every node is unknown."""
    return _remove(rec, "received.jsonl", "the run has no receipts (recorded before they existed)")


def _scenario(rec: Record) -> dict:
    import yaml
    return yaml.safe_load((rec.dir / "scenario.yaml").read_text()) or {}


def _expect(rec: Record) -> dict:
    return _scenario(rec).get("expect") or {}


# -- quorum (torchft): survivors never restart, the quorum grows back, the returning group heals ----------
def _quorum(rec: Record) -> dict[str, list[dict]]:
    """agent file -> its quorum_change lines; NotApplicable for a run that keeps no quorum."""
    out = {n: [x for x in lines if isinstance(x, dict) and x.get("event") == "quorum_change"]
           for n, lines in rec.files.items() if n.startswith("agent-")}
    if not any(out.values()):
        raise NotApplicable("no quorum_change: the run keeps no torchft quorum")
    return out


def _drop(rec: Record, name: str, doomed: list[dict]) -> None:
    ids = {id(x) for x in doomed}
    rec.files[name] = [x for x in rec.files[name] if not (isinstance(x, dict) and id(x) in ids)]


@operator("quorum", "L")
def survivor_restarts(rec: Record, rng) -> str:
    """A worker on a node no fault touched becomes a new process midway (a survivor restarted)."""
    _quorum(rec)
    hit = {str((f.get("params") or {}).get("node") or f.get("target")) for f in rec.injections()}
    cands = [i for i in incarnations(rec) if i.events and str(i.events[0].get("node")) not in hit and len(i.steps) > 10]
    if not cands:
        raise NotApplicable("no survivor with steps")
    inc = rng.choice(cands)
    cut = inc.steps[rng.randint(3, len(inc.steps) - 3)]["ts"]
    for e in inc.events:
        if e["ts"] >= cut:
            e["pid"] = int(e.get("pid", 0)) + 100_000
    return f"{inc.file}'s process is another one from {cut:.1f}"


@operator("quorum", "L")
def quorum_never_grows_back(rec: Record, rng) -> str:
    """After the quorum shrank, it never regains the lost group (the returning group never rejoined)."""
    for name, lines in _quorum(rec).items():
        full = max(int(x.get("replicas", 0)) for x in lines) if lines else 0
        shrunk = next((x["ts"] for x in lines if int(x.get("replicas", 0)) < full), None)
        if shrunk is not None:
            _drop(rec, name, [x for x in lines if x["ts"] > shrunk and int(x.get("replicas", 0)) == full])
    return "every quorum_change back to full size after the first shrink is gone"


@operator("quorum", "L")
def heal_never_done(rec: Record, rng) -> str:
    """The returning group started to heal from its peer but never finished (no heal_done)."""
    _quorum(rec)
    done = [(n, x) for n, lines in rec.files.items() if n.startswith("agent-")
            for x in lines if isinstance(x, dict) and x.get("event") == "heal_done"]
    if not done:
        raise NotApplicable("no heal_done")
    for name in {n for n, _ in done}:
        _drop(rec, name, [x for n, x in done if n == name])
    return f"{len(done)} heal_done line(s) gone"


@operator("quorum", "L")
def heal_behind_world(rec: Record, rng) -> str:
    """The returning group takes up a stale state: from its heal on it trains k steps behind the world the survivors
    had reached (its steps, its restore and its heal renumbered k lower). No survivor restarts, the quorum grows back
    and a heal completes; only the lost work counted on the world's step at the heal tells it."""
    _quorum(rec)
    faults = rec.injections()
    hit = {str((f.get("params") or {}).get("node") or f.get("target")) for f in faults}
    first_fault = min((f["ts"] for f in faults), default=float("inf"))
    back = [i for i in incarnations(rec) if i.steps and str(i.events[0].get("node")) in hit and i.start > first_fault]
    if not back:
        raise NotApplicable("no group came back after a fault")
    inc = back[0]
    k = rng.randint(5, max(5, min(50, inc.steps[0]["step"] - 1)))
    for e in inc.events:
        if e.get("event") in ("step", "checkpoint_loaded") and isinstance(e.get("step"), int):
            e["step"] -= k
    node = str(inc.events[0].get("node"))
    for name, lines in rec.files.items():
        for x in lines:
            if name.startswith("agent-") and isinstance(x, dict) and x.get("event") == "heal_start" \
                    and x.get("node") == node and x["ts"] >= inc.start and isinstance(x.get("step"), int):
                x["step"] -= k
    return f"{inc.file} trains {k} steps behind the world from its heal on (steps from {inc.steps[0]['step']})"
