"""A job that resumes its step from a checkpoint but starts its data epoch over (a sampler whose
position or epoch is not restored, or set_epoch never called): it trains on data it already saw, work
lost beyond what the checkpoint interval explains. Evidence: the job's own lines printing both an
epoch and a step, where one step number appears before and after a restart in different epochs."""
from __future__ import annotations

import re

from ..model import Finding
from ..record import RunRecord

EPOCH_STEP = re.compile(r"\bepoch[\s=:]*(\d+).*?\bstep[\s=:]*(\d+)|\bstep[\s=:]*(\d+).*?\bepoch[\s=:]*(\d+)", re.I)


def check(rec: RunRecord) -> list[Finding]:
    for node in sorted(rec.logs):
        seen: dict[int, object] = {}                   # step -> (epoch, line) the first time it was printed
        prev_step = None
        for ln in rec.worker_lines(node):
            m = EPOCH_STEP.search(ln.text)
            if not m:
                continue
            epoch, step = (int(m.group(1)), int(m.group(2))) if m.group(1) else (int(m.group(4)), int(m.group(3)))
            restarted = prev_step is not None and step <= prev_step
            prev_step = step
            first = seen.get(step)
            if first is None:
                seen[step] = (epoch, ln)
                continue
            e0, ln0 = first
            if restarted and step > 1 and epoch < e0:
                return [Finding(
                    rule="epoch_restart",
                    title=f"After a restart {node}'s job resumed at step {step} but in epoch {epoch} (step {step} was in "
                          f"epoch {e0} before): the data order restarts from the epoch's beginning, so it trains on "
                          "samples it already saw and loses work beyond the checkpoint.",
                    fix="checkpoint the epoch and the position in it with the model; on restore call "
                        "`sampler.set_epoch(epoch)` (every epoch, DistributedSampler) and skip the batches already "
                        "consumed (or use a stateful dataloader, torchdata's StatefulDataLoader)",
                    effect="after a restore the job continues the same epoch at the next unseen batch",
                    evidence=[ln0.evidence(), ln.evidence()], severity="warning")]
    return []
