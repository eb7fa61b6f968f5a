"""The trainer's restore claims held against what the harness saw itself.

A `checkpoint_loaded` says "tier T, step S" (or only "step S": `cb.restored(step=40)`, any tier).
Every claim is checked, with or without a tier. The harness believes it when its own inventory
taken right after the fault acted holds step S (of tier T) verified by checksum on the claiming
node (any node for a copy received from a peer, the bucket for S3). An inventory that saw S only
corrupt contradicts the claim, and so does one that looked there and found no S: what the harness
saw itself outranks the job's word, so a `checkpoint_saved` of S logged before that inventory was
taken does not rescue it (the tier was wiped). Where the inventory did not look (a tier it could
not see, no inventory), a `checkpoint_saved` of S logged before the load, or the inventory taken
after the run, backs the claim. With no inventory and no saves at all the claim cannot be checked,
which is said.
"""
from __future__ import annotations

from chaosbench.checks.history import History
from chaosbench.instrument.tiers import TIERS
from chaosbench.result import Recovery


def _where(c: dict) -> str:
    return str(c.get("node", "")).split("/")[0]


def _looked(inv: dict | None, tier: str | None, node: str, anywhere: bool) -> bool:
    """Did the inventory look, and see everything, where this claim's checkpoint would be?"""
    if inv is None:
        return False
    tiers = [tier] if tier else list(TIERS)
    for u in inv.get("unseen", []):
        if u.get("tier") in ("*", *tiers) and (anywhere or u.get("tier") == "s3" or u.get("node") in ("*", node)):
            return False
    if "looked" not in inv:   # an inventory from before `looked` was recorded: what it did not list as unseen
        return True
    looked = {tuple(str(label).split("/", 1)) for label in inv["looked"]}
    return all(any(t == want and (anywhere or want == "s3" or n == node) for n, t in looked) for want in tiers)


def contradictions(h: History, rec: Recovery) -> tuple[list[str], list[str]]:
    """(problems, unverifiable) for the recovery's claims: problems contradict the harness's
    evidence; unverifiable ones had no evidence either way."""
    inv = h.inventories.get(rec.fault_id)
    inv_at = (inv or {}).get("started_at", (inv or {}).get("taken_at", rec.injected_at))
    saves = h.of("checkpoint_saved")
    fw = next((f for f in h.faults if f.id == rec.fault_id), None)
    targets = {t.strip() for t in str(fw.target if fw else "").split(",") if t.strip()}
    problems, unknown = [], []
    for claim in rec.claims:
        tier, step, node = claim.get("tier"), claim.get("step"), claim.get("node")
        if step is None:
            continue   # the round's own problems say so
        anywhere = tier == "s3" or claim.get("source") == "peer"
        what = f"{node}/local{claim.get('local_rank', 0)} claims " + (f"{tier}@{step}" if tier else f"step {step}")
        if claim.get("live") and claim.get("source") == "peer":   # torchft: a live peer's state, no checkpoint
            if not any(e.get("node") != node and int(e.get("step", -1)) >= int(step) and e["ts"] <= claim["ts"]
                       for e in h.of("step")):
                problems.append(f"{what} from a live peer, but no other node had reported step {step} before it")
            continue

        def here(c: dict) -> bool:
            return (tier is None or c.get("tier") == tier) and c.get("step") == int(step) and \
                c.get("published", True) and (anywhere or c.get("tier") == "s3" or _where(c) == node)
        seen = [c for c in (inv or {}).get("checkpoints", []) if here(c)]
        if any(c.get("valid") is True for c in seen):
            continue
        if seen:
            why = "; ".join(f"{_where(c)}:{c['dir']} {c.get('reason')}" for c in seen[:3])
            problems.append(f"{what}, but the harness found it invalid right after {rec.fault_id} acted ({why})")
            continue
        saved = [e for e in saves if (tier is None or e.get("tier") == tier) and e.get("step") == int(step)
                 and e["ts"] <= claim["ts"] and (anywhere or e.get("node") == node)]
        where = "in the bucket" if tier == "s3" else ("on any node" if anywhere else f"on {node}")
        if _looked(inv, tier, node, anywhere):
            # saved after the inventory began, by a process the fault did not act on: it could not
            # have seen it. A worker on the fault's own node logging a save then was dying: no backing
            if any(e["ts"] > inv_at and str(e.get("node")) not in targets for e in saved):
                continue
            place = "every node's" if anywhere else f"{node}'s"
            problems.append(f"{what}, but the harness looked at {place} {tier or 'checkpoint tiers'} right after "
                            f"{rec.fault_id} acted and found no such checkpoint"
                            + (" (the job's checkpoint_saved of it, logged before, does not outweigh that)"
                               if saved else ""))
            continue
        if saved:
            continue
        final = [c for c in (h.inventory or {}).get("checkpoints", []) if here(c) and c.get("valid") is True]
        if final:
            continue
        if inv is None and not saves:
            unknown.append(f"{what}: no inventory at {rec.fault_id} and no checkpoint_saved events to check it against")
        else:
            problems.append(f"{what}, but the harness saw no such checkpoint {where} (inventory at "
                            f"{rec.fault_id}{'' if inv else ': not taken'}, after the run) and no checkpoint_saved "
                            "of it was logged before the load")
    return problems, unknown
