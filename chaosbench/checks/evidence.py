"""The trainer's restore claims held against what the harness saw itself.

A `checkpoint_loaded` says "tier T, step S". The harness believes it when its own inventory taken
right after the fault acted holds step S of tier T, verified by checksum, on the claiming node (any
node for a copy received from a peer, the bucket for S3), or else when the trainer logged a
`checkpoint_saved` of T@S before the load. An inventory that saw T@S only corrupt contradicts the
claim. With no inventory and no saves at all the claim cannot be checked, which is said.
"""
from __future__ import annotations

from chaosbench.checks.history import History
from chaosbench.result import Recovery


def _where(c: dict) -> str:
    return str(c.get("node", "")).split("/")[0]


def contradictions(h: History, rec: Recovery) -> tuple[list[str], list[str]]:
    """(problems, unverifiable) for the recovery's claims: problems contradict the harness's
    evidence; unverifiable ones had no evidence either way."""
    inv = h.inventories.get(rec.fault_id)
    saves = h.of("checkpoint_saved")
    problems, unknown = [], []
    for claim in rec.claims:
        tier, step, node = claim.get("tier"), claim.get("step"), claim.get("node")
        if tier is None or step is None:
            continue   # the round's own problems say so
        anywhere = tier == "s3" or claim.get("source") == "peer"
        what = f"{node}/local{claim.get('local_rank', 0)} claims {tier}@{step}"

        def here(c: dict) -> bool:
            return c.get("tier") == tier and c.get("step") == int(step) and c.get("published", True) and \
                (anywhere or _where(c) == node)
        seen = [c for c in (inv or {}).get("checkpoints", []) if here(c)]
        if any(c.get("valid") is True for c in seen):
            continue
        if seen:
            why = "; ".join(f"{_where(c)}:{c['dir']} {c.get('reason')}" for c in seen[:3])
            problems.append(f"{what}, but the harness found it invalid right after {rec.fault_id} acted ({why})")
            continue
        saved = [e for e in saves if e.get("tier") == tier and e.get("step") == int(step)
                 and e["ts"] <= claim["ts"] and (anywhere or e.get("node") == node)]
        if saved:
            continue
        final = [c for c in (h.inventory or {}).get("checkpoints", []) if here(c) and c.get("valid") is True]
        if final:
            continue
        if inv is None and not saves:
            unknown.append(f"{what}: no inventory at {rec.fault_id} and no checkpoint_saved events to check it against")
        else:
            where = "in the bucket" if tier == "s3" else ("on any node" if anywhere else f"on {node}")
            problems.append(f"{what}, but the harness saw no such checkpoint {where} (inventory at "
                            f"{rec.fault_id}{'' if inv else ': not taken'}, after the run) and no checkpoint_saved "
                            "of it was logged before the load")
    return problems, unknown
