"""A checkpoint held only on some nodes (or only on the node that died) when a fault struck, and the
restore that followed went wrong: ranks resumed at different steps, or from nothing."""
from __future__ import annotations

from ..model import Evidence, Finding
from ..record import RunRecord
from ._ckpt import held, looked_at, newest_step, nodes_of

BAD_RESTORE = ("different steps", "fresh start", "from scratch", "started again at step 1", "all work lost")


def _bad_restore(rec: RunRecord, fault_id: str) -> str | None:
    for r in rec.recoveries:
        if r.get("fault_id") != fault_id:
            continue
        for p in r.get("problems") or []:
            if any(k in str(p) for k in BAD_RESTORE):
                return str(p)
        if r.get("tier") == "none" or (r.get("restored_step") == 0 and (r.get("step_before_fault") or 0) > 0):
            return f"training restarted from step 0 after {fault_id} (step {r.get('step_before_fault')} before it)"
    for c in rec.result.get("checks") or []:
        if isinstance(c, dict) and c.get("status") == "failed" and any(k in str(c.get("reason")) for k in BAD_RESTORE):
            return f"{c.get('name')}: {c.get('reason')}"
    return None


def check(rec: RunRecord) -> list[Finding]:
    out = []
    nodes = nodes_of(rec)
    for fid, inv in rec.inventories.items():
        by_node = held(inv)
        if not by_node or len(nodes) < 2:
            continue
        without = [n for n in looked_at(inv, nodes) if n not in by_node]
        steps = {n: newest_step(fs) for n, fs in by_node.items()}
        differ = len({s for s in steps.values()}) > 1
        if not without and not differ:
            continue
        harm = _bad_restore(rec, fid)
        if harm is None:
            continue                                 # the holders sufficed: no evidence of a cost
        fault = next((f for f in rec.faults if f.get("id") == fid), {})
        target = fault.get("target")
        holders = sorted(by_node)
        only_dead = holders == [target]
        what = ", ".join(f"{n}: {newest(by_node[n])}" for n in holders)
        title = (f"At {fid} ({fault.get('type')} {target}) the only checkpoint was on {target}, the node that died"
                 if only_dead else
                 f"At {fid} ({fault.get('type')} {target}) checkpoints were on {', '.join(holders)} only"
                 + (f"; {', '.join(without)} held none" if without else "; the nodes held different steps"))
        out.append(Finding(
            rule="checkpoint_on_some_nodes",
            title=f"{title}: {harm}.",
            fix="give every node the checkpoint it restores from: save from local rank 0 of every node (data-parallel "
                "replicas are identical) or to shared storage / S3, and have the ranks agree on one step before "
                "loading (all-reduce the newest step each rank holds; load only a step every rank has)",
            effect="every rank resumes from the same step after a node loss; at most one checkpoint interval lost",
            evidence=[Evidence(text=f"files held at {fid}: {what}" + (f"; none on {', '.join(without)}" if without else ""),
                               source=rec.inventory_source(fid), ts=inv.get("taken_at")),
                      Evidence(text=harm, source="result.json")],
            severity="cause"))
    return out


def newest(files: list[dict]) -> str:
    step = newest_step(files)
    name = max((str(f.get("path")).rsplit("/", 1)[-1] for f in files), default="?")
    return name if step is None else f"{name} (step {step})"
