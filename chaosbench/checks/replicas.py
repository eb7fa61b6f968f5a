"""`expect.replicas_agree`: data-parallel replicas hold the same parameters, or the job rolled back.

Reads the `param_digest` field of step events (`cb.watch(model, digest_every=K)`; the reference
trainer digests at every save step, `checkpoint.replica_digests`). Digests are compared per step
within one attempt: a rendezvous round (History.rounds), so a step replayed after a restore is
compared with its own replay, never with the attempt that diverged.

Passes when every compared step agrees, or when every divergence was followed by a restore
(`checkpoint_loaded`, all ranks one step) of a step whose digests agreed, at or before the last
agreeing step, and the run did not end diverged. A `replica_divergence` event (the trainer's own
claim) fills in a step the step events hold no digests for; where they do, the digests are trusted
and a contradicting claim is reported. A corrupt_replica fault that never fired, or that fired while
the digests of the steps after it still agree on its rank, fails: the digests then say nothing.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.detection import planned_faults
from chaosbench.checks.history import History
from chaosbench.checks.registry import check
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

NAME = "replicas_agree"
FIX = ("no step event carries param_digest: call `cb.watch(model, digest_every=10)` in your job "
       "(the reference trainer: checkpoint.replica_digests: true, its default)")


@dataclass
class Group:
    """The digests of one step in one attempt (round)."""
    round: int
    step: int
    ts: float                                        # when the first rank reported it
    digests: dict[int, str] = field(default_factory=dict)
    claimed: bool = False                            # from a replica_divergence event, not step events

    @property
    def agree(self) -> bool:
        return len(set(self.digests.values())) == 1


def digest_groups(h: History) -> list[Group]:
    """Every (round, step) with digests from two or more ranks, oldest first."""
    keys, rounds = h._incarnation_keys(), h.rounds()
    groups: dict[tuple[int, int], Group] = {}
    for e in sorted(h.of("step"), key=lambda e: e["ts"]):
        if not e.get("param_digest") or e.get("observed") or "step" not in e:
            continue
        g = groups.setdefault((rounds[keys[id(e)]], int(e["step"])),
                              Group(rounds[keys[id(e)]], int(e["step"]), e["ts"]))
        g.digests.setdefault(int(e.get("rank", -1)), str(e["param_digest"]))
    for e in h.of("replica_divergence"):   # the trainer's claim: only where the step events say nothing
        key = (rounds[keys[id(e)]], int(e.get("step", -1)))
        claim = {int(r): str(d) for r, d in (e.get("digests") or {}).items() if str(r).lstrip("-").isdigit()}
        if key not in groups and len(claim) >= 2:
            groups[key] = Group(*key, e["ts"], claim, claimed=True)
    return sorted((g for g in groups.values() if len(g.digests) >= 2), key=lambda g: g.ts)


def _who(g: Group, h: History) -> str:
    """The rank(s) that differ: the minority with 3+ ranks; with 2, both (and the one a fault targeted)."""
    counts = Counter(g.digests.values())
    top = counts.most_common()
    if len(g.digests) >= 3 and (len(top) == 1 or top[0][1] > top[1][1]):
        odd = sorted(r for r, d in g.digests.items() if d != top[0][0])
        return f"rank{'s' if len(odd) > 1 else ''} {', '.join(map(str, odd))}"
    ranks = sorted(g.digests)
    out = f"ranks {', '.join(map(str, ranks))} " + ("differ" if len(ranks) == 2 else "hold no majority digest")
    hit = [f"{w.id} (corrupt_replica) targeted {w.target}" for w in h.faults
           if w.fault == "corrupt_replica" and w.injected_at <= g.ts and w.target.removeprefix("rank ").isdigit()
           and int(w.target.removeprefix("rank ")) in g.digests]
    return out + (f"; {hit[-1]}" if hit else "")


def _restore(h: History, after: float) -> tuple[list[dict], float] | None:
    """The first restore round after `after`: its checkpoint_loaded / checkpoint_fresh_start events."""
    keys, rounds = h._incarnation_keys(), h.rounds()
    later = sorted((e for e in h.of("checkpoint_loaded", "checkpoint_fresh_start") if e["ts"] > after),
                   key=lambda e: e["ts"])
    if not later:
        return None
    r = rounds[keys[id(later[0])]]
    same = [e for e in later if rounds[keys[id(e)]] == r]
    return same, max(e["ts"] for e in same)


def _judge_restore(h: History, groups: list[Group], div: Group, last_agree: Group | None) -> tuple[str | None, str, float]:
    """(failure or None, what the restore was, when it finished)."""
    found = _restore(h, div.ts)
    if found is None:
        return "no restore followed: the run ended diverged", "", float("inf")
    loads, done = found
    steps = {0 if e["event"] == "checkpoint_fresh_start" else e.get("step") for e in loads}
    if len(steps) != 1 or None in steps:
        return (f"the restore after it loaded {sorted(map(str, steps))} on different ranks: no single agreed "
                "state", "", done)
    k = steps.pop()
    tiers = sorted({str(e.get("tier")) for e in loads if e["event"] == "checkpoint_loaded"})
    what = f"step {k} ({'/'.join(tiers) or 'fresh start'})"
    if k == 0 and not tiers:
        return None, what, done   # a fresh start: every replica starts from the same initialisation
    before = [g for g in groups if g.step == k and g.ts < div.ts]
    last = last_agree.step if last_agree else "none"
    if k >= div.step:
        return (f"it rolled back to {what}, not before the divergence (the last step whose digests agreed: "
                f"{last})", what, done)
    if not before:
        return (f"it rolled back to {what}, whose digests were never compared (none recorded there): an "
                "unverified state", what, done)
    if not before[-1].agree:
        return f"it rolled back to {what}, whose digests disagreed too ({_who(before[-1], h)})", what, done
    if last_agree is None or k > last_agree.step:
        return f"it rolled back to {what}, after the last step whose digests agreed ({last})", what, done
    return None, what, done


def _undetected(h: History, groups: list[Group]) -> str | None:
    """A corrupt_replica that fired, yet its rank's digests after it agree (same attempt, no restore)."""
    keys, rounds = h._incarnation_keys(), h.rounds()
    for w in h.faults:
        fired = h.fired(w.id) if w.fault == "corrupt_replica" else None
        if fired is None or fired.get("event") != "fault_fired" or "step" not in fired:
            continue
        rank, step, r = int(fired.get("rank", -1)), int(fired["step"]), rounds[keys[id(fired)]]
        reloaded = min((e["ts"] for e in h.of("checkpoint_loaded", "checkpoint_fresh_start") if e["ts"] > w.injected_at),
                       default=float("inf"))
        after = [g for g in groups if g.round == r and rank in g.digests and g.step > step + 1
                 and w.injected_at < g.ts < reloaded]
        if after and all(g.agree for g in after):
            return (f"{w.id} (corrupt_replica) flipped bits on rank {rank} at step {step} ({fired.get('detail', '')}), "
                    f"yet rank {rank}'s digests at steps {after[0].step}..{after[-1].step} agree with the others': "
                    f"the digests do not cover what was corrupted")
    return None


def _claimed_twice(h: History) -> str | None:
    """Digests are keyed by rank: two processes of one round claiming a rank would hide one's digest."""
    keys, rounds = h._incarnation_keys(), h.rounds()
    who: dict[tuple, set] = {}
    for e in h.of("step"):
        if e.get("param_digest") and not e.get("observed"):
            inc = keys[id(e)]
            who.setdefault((rounds[inc], int(e.get("rank", -1))), set()).add(inc)
    for (r, rank), incs in sorted(who.items()):
        if len(incs) > 1:
            return (f"rank {rank} digested by {len(incs)} processes in round {r} ("
                    + ", ".join(f"{n}/local{lr} pid {p}" for n, lr, p, _ in sorted(incs)) + "): their digests "
                    "cannot be told apart, so a divergence between them would not show")
    return None


def _uncovered(h: History, groups: list[Group]) -> str | None:
    """Every fault injected while digests were being compared needs a comparison after the training
    that followed it resumed: digests that stop at a fault say nothing about the state after it."""
    if not groups:
        return None
    restores = sorted(e["ts"] for e in h.of("checkpoint_loaded", "checkpoint_fresh_start"))
    for f in h.faults:
        if f.injected_at < groups[0].ts:
            continue   # before any digest: nothing was being compared yet
        resumed = [e["ts"] for e in h.of("step") if e["ts"] > f.injected_at]
        if not any(g.ts > f.injected_at for g in groups):
            return (f"no digests were compared after {f.id} ({f.fault}) acted (last compared step {groups[-1].step}"
                    + (", though training went on" if resumed else "") + ")")
        # a restore after the fault starts a new state: the replicas must be compared again after it,
        # by digests the steps carry (a divergence claim before the restore says nothing of the state after)
        last = max((t for t in restores if f.injected_at < t), default=None)
        if last is not None and not any(g.ts > last and not g.claimed for g in groups):
            return (f"no digests were compared after the restore that followed {f.id} ({f.fault}) (last compared "
                    f"step {groups[-1].step}" + (", though training went on" if any(t > last for t in resumed) else "")
                    + "): the restored replicas were never shown to agree")
    return None


@check(NAME, needs="events with param_digest")
def replicas_agree(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """The ranks' param_digest agree, or the job rolled back to a step where they did."""
    if not e.replicas_agree:
        return None
    expected = "every compared step agrees, or a rollback to a step that agreed"
    if not h.events:
        return not_evaluated(NAME, expected, NO_EVENTS)
    digested = [x for x in h.of("step") if x.get("param_digest") and not x.get("observed")]
    if not digested and not h.of("replica_divergence"):
        return not_evaluated(NAME, expected, FIX)
    ranks = sorted({int(x.get("rank", -1)) for x in digested})
    groups = digest_groups(h)
    if not groups:
        only = f"rank {ranks[0]} only" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}, never two at the same step"
        return not_evaluated(NAME, expected, f"digests from {only}: nothing to compare")
    for fid, kind in planned_faults(h, None):
        if kind == "corrupt_replica" and fid in h.unfired:
            return failed(NAME, expected, "fault never fired", h.never_injected(fid, kind)
                          + ": agreeing digests show nothing about a corrupted replica")
    keys, rounds = h._incarnation_keys(), h.rounds()
    if (twice := _claimed_twice(h)) is not None:
        return failed(NAME, expected, "rank claimed twice", twice)
    if (blind := _uncovered(h, groups)) is not None:
        return failed(NAME, expected, "no comparison after a fault", blind)
    claims = [c for c in h.of("replica_divergence")   # the same step of the same attempt: not its replay
              if any(g.step == c.get("step") and g.round == rounds[keys[id(c)]] and g.agree and not g.claimed
                     for g in groups)]
    note = "".join(f"; a replica_divergence event at step {c.get('step')} (rank {c.get('rank')}) claims the "
                   f"replicas differ, but the step events' digests agree there" for c in claims[:1])
    told, last_agree, i = [], None, 0
    while i < len(groups):
        g = groups[i]
        if g.agree:
            last_agree, i = g, i + 1
            continue
        why, what, done = _judge_restore(h, groups, g, last_agree)
        head = f"diverged at step {g.step} ({_who(g, h)})"
        if why is not None:
            return failed(NAME, expected, f"diverged at step {g.step}", "; ".join([*told, f"{head}; {why}"]) + note)
        i = next((j for j, x in enumerate(groups) if x.ts > done), len(groups))
        tail = [x for x in groups[i:] if x.ts > done]
        until = next((x for x in tail if not x.agree), None)
        agreed = [x for x in tail if until is None or x.ts < until.ts]
        told.append(f"{head}; rolled back to {what} whose digests agreed; "
                    + (f"agree from then to step {agreed[-1].step}" if agreed else "no digest was recorded after it"))
        last_agree = agreed[-1] if agreed else last_agree
    missed = _undetected(h, groups)
    if missed:
        return failed(NAME, expected, "corruption not seen", missed)
    steps = sorted({g.step for g in groups})
    if told:
        return passed(NAME, expected, f"{len(told)} rollback(s)", "; then ".join(told) + note)
    return passed(NAME, expected, "agree", f"the digests of ranks {', '.join(map(str, ranks))} agree at all "
                                           f"{len(groups)} compared steps ({steps[0]}..{steps[-1]}){note}")
