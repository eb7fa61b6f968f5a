"""CheckpointManager: the one object the trainer talks to.

    mgr = CheckpointManager(cfg, node=..., rank=..., local_rank=..., world_size=...,
                            local_world_size=..., run_id=..., emit=emit)
    state = mgr.restore()            # collective: all ranks call; state dict or None (fresh start)
    mgr.maybe_save(step, state_fn)   # after each optimizer step; pays only for a CPU copy
    mgr.close()                      # flush background writes

Who writes: local rank 0 of each node writes the node's memory and nvme tiers (node-local
directories shared by the node's ranks); global rank 0 uploads to S3. Model state is replicated
across data-parallel ranks, so one copy per node (and one in S3) is enough.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Callable

from . import agreement, fmt
from .config import LOCAL_TIERS, TIERS, CheckpointConfig
from .errors import CheckpointCorrupt, CheckpointError, CheckpointLoadError, CheckpointSaveError
from .local_store import LocalStore
from .snapshot import BufferPool, Snapshot
from .writer import TierWriter

log = logging.getLogger(__name__)


class CheckpointManager:
    def __init__(self, cfg: dict | CheckpointConfig | None, node: str | None = None, rank: int = 0,
                 local_rank: int = 0, world_size: int = 1, local_world_size: int = 1,
                 run_id: str = "", emit: Callable[[str, dict], None] | None = None):
        self.cfg = cfg if isinstance(cfg, CheckpointConfig) else CheckpointConfig.from_dict(cfg)
        self.node = node or socket.gethostname()
        self.rank, self.local_rank = rank, local_rank
        self.world_size, self.local_world_size = world_size, local_world_size
        self.run_id = run_id or ""
        self._emit_fn = emit
        self._emit_lock = threading.Lock()
        self.last_restore: dict | None = None

        self.stores = {
            "memory": LocalStore("memory", self.cfg.resolved_memory_dir(self.run_id, self.node),
                                 keep_last=self.cfg.max_snapshots, fsync=False,
                                 max_bytes=int(self.cfg.max_memory_mb * 2**20)),
            "nvme": LocalStore("nvme", self.cfg.resolved_nvme_dir(self.run_id, self.node),
                               keep_last=self.cfg.keep_last, fsync=True),
        }
        if self.cfg.s3.enabled:
            from .s3_store import S3Store
            self.stores["s3"] = S3Store(self.cfg.s3, self.run_id)

        self._pool = BufferPool(int(self.cfg.max_memory_mb * 2**20))
        self.writers: dict[str, TierWriter] = {}
        for tier in TIERS:
            if tier in self.stores and self.cfg.interval(tier) > 0 and self._writes(tier):
                self.writers[tier] = TierWriter(
                    tier, lambda snap, attempt, t=tier: self._write(t, snap, attempt), self._on_skip,
                    retry_failed=(tier == "s3"), retry_backoff_s=self.cfg.s3.retry_backoff_s)
        if local_rank == 0:
            for tier in LOCAL_TIERS:
                self.stores[tier].cleanup_temp()

    def _writes(self, tier: str) -> bool:
        return self.rank == 0 if tier == "s3" else self.local_rank == 0

    # ------------------------------------------------------------------ saving
    def maybe_save(self, step: int, state_fn: Callable[[], dict]) -> None:
        """Called after every optimizer step. `state_fn` is called only when a save is due on a
        writing rank, so it must not run collectives."""
        due = [t for t, w in self.writers.items() if step % self.cfg.interval(t) == 0]
        if not due:
            return
        snap = Snapshot.take(step, state_fn, self._pool, self.cfg.checksum)
        for tier in due:
            self.writers[tier].submit(snap)

    def save_on_stop(self, step: int, state_fn: Callable[[], dict], timeout: float | None = None) -> list[str]:
        """The process is about to stop: save `step` to the `save_on_stop` tiers this rank writes
        (unless maybe_save already did at this step) and wait for them and any save in flight.
        Returns the tiers whose writers finished in time (checkpoint_saved or checkpoint_failed says
        how); bounded by `stop_save_timeout_s`."""
        timeout = self.cfg.stop_save_timeout_s if timeout is None else timeout
        tiers = [t for t in self.cfg.save_on_stop if t in self.writers]
        fresh = [t for t in tiers if step % self.cfg.interval(t)]
        if fresh:
            snap = Snapshot.take(step, state_fn, self._pool, self.cfg.checksum)
            for tier in fresh:
                self.writers[tier].submit(snap)
        deadline = time.monotonic() + timeout
        return [t for t in tiers if self.writers[t].wait_idle(max(0.0, deadline - time.monotonic()))]

    def save(self, state: dict, step: int | None = None, tier: str | list[str] = "nvme") -> dict[str, str]:
        """Synchronous save of `state` to the given tier(s); raises CheckpointSaveError."""
        step = int(state["step"] if step is None else step)
        tiers = [tier] if isinstance(tier, str) else list(tier)
        snap = Snapshot.take(step, lambda: state, algo=self.cfg.checksum)
        out = {}
        for t in tiers:
            if t not in self.stores:
                raise CheckpointSaveError(t, f"tier {t!r} is not configured (valid: {', '.join(self.stores)})")
            out[t] = self._write(t, snap, 0, raise_errors=True)
        return out

    def _write(self, tier: str, snap: Snapshot, attempt: int, raise_errors: bool = False):
        t0 = time.perf_counter()

        def published(where: str) -> None:   # the moment it is in place, not after retention (local_store.PUBLISHING)
            fields = {"tier": tier, "step": snap.step, "bytes": len(data), "stall_s": round(snap.stall_s, 6),
                      "total_s": round(snap.stall_s + time.perf_counter() - t0, 6), "path": where,
                      "checksum": digest}
            if attempt:
                fields.update(caught_up=True, attempt=attempt)
            self._emit("checkpoint_saved", fields)
        try:
            data, digest = snap.encoded()
            manifest = fmt.make_manifest(snap.step, data, digest, tier=tier, run_id=self.run_id,
                                         node=self.node, rank=self.rank, world_size=self.world_size)
            where = self.stores[tier].save(snap.step, data, manifest, on_published=published)
        except Exception as e:
            err = e if isinstance(e, CheckpointSaveError) else CheckpointSaveError(tier, f"{type(e).__name__}: {e}")
            log.warning("checkpoint save failed (training continues): %s", err)
            self._emit("checkpoint_failed", {"tier": tier, "step": snap.step, "error": str(err),
                                             "attempt": attempt})
            if raise_errors:
                raise err from e
            return False
        return where if raise_errors else True

    def _on_skip(self, tier: str, snap: Snapshot, reason: str) -> None:
        log.info("%s checkpoint of step %s skipped: %s", tier, snap.step, reason)
        self._emit("checkpoint_skipped", {"tier": tier, "step": snap.step, "reason": reason})

    # ------------------------------------------------------------------ loading
    def _newest_valid(self, tier: str, above: int = -1, skip=frozenset()):
        """(step, bytes, manifest) of the newest checkpoint that verifies; invalid ones are
        reported and skipped. Only steps > `above` and not in `skip` are considered."""
        store = self.stores[tier]
        try:
            refs = store.list()
        except Exception as e:  # e.g. S3 unreachable: that tier simply offers nothing now
            log.warning("cannot list %s checkpoints, skipping the tier: %s", tier, e)
            return None
        for ref in refs:
            if ref.step <= above or ref.step in skip:
                continue
            try:
                data, manifest = store.read(ref)
                return ref.step, data, manifest
            except CheckpointCorrupt as e:
                log.warning("rejecting checkpoint: %s", e)
                self._emit("checkpoint_invalid", {"tier": tier, "step": ref.step, "error": str(e)})
            except Exception as e:
                self._emit("checkpoint_invalid", {"tier": tier, "step": ref.step,
                                                  "error": f"unreadable: {type(e).__name__}: {e}"})
        return None

    def restore(self) -> dict | None:
        """Collective: every rank calls. Returns the agreed state (or None: fresh start).

        Every rank verifies the bytes it ends up with against the chosen checksum and the ranks
        agree on the outcome: if any rank's copy does not match, all of them reject that
        checkpoint together (checkpoint_invalid) and fall back to the next one, instead of one
        rank raising while the others wait out the process-group timeout."""
        t0 = time.perf_counter()
        rejected: dict[str, set[int]] = {t: set() for t in TIERS}
        while True:
            choice, local = self._agree_on_choice(rejected)
            if choice is None:
                reason = "no valid checkpoint in " + ", ".join(self.stores)
                if any(rejected.values()):
                    reason += " (rejected after transfer: " + ", ".join(
                        f"{t}@{s}" for t, steps in rejected.items() for s in sorted(steps)) + ")"
                log.info("fresh start: %s", reason)
                self._emit("checkpoint_fresh_start", {"reason": reason})
                return None
            data, source, digest, ok_here = self._fetch(choice, local)
            bad = [r for r, ok in enumerate(agreement.gather(ok_here)) if not ok]
            if not bad:
                break
            error = (f"step {choice.step} ({choice.tier}) from rank {choice.src} does not match its checksum "
                     f"{choice.checksum[:20]} on rank(s) {', '.join(map(str, bad))}; every rank falls back")
            log.warning("rejecting checkpoint: %s", error)
            self._emit("checkpoint_invalid", {"tier": choice.tier, "step": choice.step, "error": error})
            rejected[choice.tier].add(choice.step)
        state = fmt.deserialize(data, self.cfg.trusted_source)
        duration = time.perf_counter() - t0
        rank = agreement.rank_and_world()[0]
        self.last_restore = {"tier": choice.tier, "step": choice.step, "source": source,
                             "src_rank": choice.src if source == "peer" else rank, "bytes": len(data)}
        self._emit("checkpoint_loaded", {"tier": choice.tier, "step": choice.step, "source": source,
                                         "duration_s": round(duration, 6), "checksum_ok": ok_here,
                                         "checksum": digest, "bytes": len(data)})
        if source == "peer" and "memory" in self.writers:
            # the node now holds the agreed state too, so a later worker restart here restores locally
            self.writers["memory"].submit(Snapshot.from_bytes(choice.step, data, choice.checksum))
        return state

    def _agree_on_choice(self, rejected: dict[str, set[int]]):
        """(choice, local candidates): the newest checkpoint any rank holds, the same on every rank."""
        rank, _ = agreement.rank_and_world()
        local = {}
        mem = self._newest_valid("memory", skip=rejected["memory"])
        if mem:
            local["memory"] = mem
        nv = self._newest_valid("nvme", above=mem[0] if mem else -1, skip=rejected["nvme"])  # older nvme never wins
        if nv:
            local["nvme"] = nv
        summary = {t: {"step": s, "bytes": len(d), "checksum": m["checksum"]} for t, (s, d, m) in local.items()}
        choice = agreement.choose(agreement.gather(summary))
        if "s3" in self.stores:
            # rank 0 looks in S3 only for something newer than what the nodes hold (usually nothing,
            # which costs one listing); the answer goes to every rank
            found = None
            if rank == 0:
                found = self._newest_valid("s3", above=choice.step if choice else -1, skip=rejected["s3"])
                if found:
                    local["s3"] = found
            info = agreement.broadcast_object(
                {"step": found[0], "bytes": len(found[1]), "checksum": found[2]["checksum"]} if found else None, src=0)
            if info:
                choice = agreement.Choice("s3", info["step"], [0], info["bytes"], info["checksum"])
        return choice, local

    def _fetch(self, choice, local) -> tuple[bytes | None, str, str | None, bool]:
        """(data, source, digest, matches) on this rank: its own copy, or the holder's by broadcast."""
        rank, world = agreement.rank_and_world()
        source = "local"
        data = local[choice.tier][1] if rank in choice.holders else None
        if agreement.active() and len(choice.holders) < world:
            got = agreement.broadcast_bytes(data, choice.size, choice.src)
            if data is None:
                data, source = got, "peer"
        digest = fmt.checksum(data, choice.checksum.split(":", 1)[0]) if data is not None else None
        return data, source, digest, digest == choice.checksum

    def check_replicas(self, states: dict) -> None:
        """Collective, after the restored state was applied: every rank's model and optimizer
        state must be identical (data-parallel replicas). On a mismatch every rank emits
        checkpoint_invalid and raises together, naming the ranks that differ from rank 0."""
        digests = agreement.gather(agreement.replica_digest(states))
        differ = [r for r, d in enumerate(digests) if d != digests[0]]
        if not differ:
            return
        restored = self.last_restore or {}
        error = (f"restored {', '.join(states)} state differs across ranks after loading step "
                 f"{restored.get('step')} ({restored.get('tier')}): rank(s) {', '.join(map(str, differ))} "
                 f"disagree with rank 0 ({digests[0]} vs {digests[differ[0]]})")
        self._emit("checkpoint_invalid", {"tier": restored.get("tier"), "step": restored.get("step"), "error": error})
        raise CheckpointLoadError(error)

    # ------------------------------------------------------------------ lifecycle
    def close(self, timeout: float = 120.0) -> bool:
        deadline = time.monotonic() + timeout
        ok = True
        for tier, w in self.writers.items():
            if not w.close(max(0.0, deadline - time.monotonic())):
                log.warning("%s checkpoint writer still busy after %.0f s; abandoning it", tier, timeout)
                ok = False
        return ok

    def _emit(self, event: str, fields: dict) -> None:
        if self._emit_fn is None:
            return
        with self._emit_lock:
            try:
                self._emit_fn(event, fields)
            except Exception:
                log.exception("emitting %s failed", event)

