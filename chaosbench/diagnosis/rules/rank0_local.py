"""Saving from global rank 0 only to node-local storage: every checkpoint lives on one node, so losing
that node loses them all and the other nodes never have one to restore from."""
from __future__ import annotations

from ..model import Evidence, Finding
from ..record import RunRecord
from ._ckpt import held, looked_at, nodes_of, rank0_node


def check(rec: RunRecord) -> list[Finding]:
    nodes = nodes_of(rec)
    r0 = rank0_node(rec)
    if len(nodes) < 2 or r0 is None:
        return []
    seen = [(name, inv) for name, inv in [*rec.inventories.items(), ("after the run", rec.checkpoints)] if inv]
    looked = [(name, inv, held(inv)) for name, inv in seen if held(inv)]
    if not looked:
        return []                                      # no checkpoint seen anywhere: nothing to say
    for _, inv, by_node in looked:
        if set(by_node) != {r0} or len(looked_at(inv, nodes)) < 2:
            return []                                  # another node held one too (or none other was seen)
    name, inv, by_node = looked[0]
    tiers = sorted({f.get("tier") for f in by_node[r0]})
    return [Finding(
        rule="rank0_only_local_save",
        title=f"Only global rank 0 saves, and to node-local storage ({'/'.join(tiers)} of {r0}): in every inventory "
              f"the checkpoints were on {r0} alone, so losing {r0} loses them all and the other nodes have none.",
        fix="save from local rank 0 of every node (`if int(os.environ['LOCAL_RANK']) == 0:`) into "
            "$CHAOSBENCH_CHECKPOINT_DIR, or write rank 0's checkpoint to shared storage / S3",
        effect="a node loss (of any node) leaves a checkpoint on every survivor",
        evidence=[Evidence(text=f"checkpoint files {('at ' + name) if name != 'after the run' else name}: "
                                f"{len(by_node[r0])} on {r0}, none on {', '.join(n for n in nodes if n != r0)}",
                           source=(rec.inventory_source(name) if name != "after the run"
                                   else "checkpoints.json"), ts=inv.get("taken_at")),
                  Evidence(text=f"global rank 0 ran on {r0}", source="events/")],
        severity="warning")]
