"""Silent-corruption guard: data-parallel replicas must stay bit-identical.

At every step where some tier saves (checkpoint.replica_digests), each rank digests its parameters
with the digest a user's job emits (`cb.digest`), the ranks exchange digests, and a mismatch stops
the job *before* that step is saved: torchrun restarts it from the last checkpoint, and every
checkpoint was saved at a step whose digests agreed. The digest rides on the step event
(`param_digest`), so chaosbench's `replicas_agree` check compares the ranks itself.
"""
from __future__ import annotations

from trainer.checkpoint import agreement
from trainer.checkpoint.config import TIERS
from trainer.errors import ReplicaDivergenceError


def digest_due(ckpt_cfg, step: int) -> bool:
    """Same answer on every rank (it decides whether a collective runs)."""
    if not ckpt_cfg.replica_digests:
        return False
    return any((n := ckpt_cfg.interval(t)) > 0 and step % n == 0 for t in TIERS)


def verify(step: int, digest: str, emit) -> None:
    """Collective: raise ReplicaDivergenceError (after a `replica_divergence` event) when any rank's
    digest differs from the others."""
    digests = agreement.gather(digest)
    if len(set(digests)) == 1:
        return
    by_rank = {str(r): d for r, d in enumerate(digests)}
    counts = {d: digests.count(d) for d in digests}
    odd = [r for r, d in enumerate(digests) if counts[d] < max(counts.values())] or list(range(len(digests)))
    emit("replica_divergence", {"step": step, "digests": by_rank, "ranks": odd})
    raise ReplicaDivergenceError(f"replicas diverged at step {step}: rank(s) {', '.join(map(str, odd))} hold "
                                 f"different parameters (digests {by_rank}); restarting from the last checkpoint, "
                                 f"whose digests agreed")
