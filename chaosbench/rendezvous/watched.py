"""torch's dynamic rendezvous, told of deaths and state changes by etcd instead of polling for them.

After a node loss torch's handler spends almost all of the recovery waiting (measured 4.2 s of a
4.8 s recovery, docs/recovery.md): for the dead node's keep-alive to age past
``keep_alive_interval x keep_alive_max_attempt``, re-reading the state once a second, then for the
last call. With a ``Liveness`` (liveness.py) three things change, each on torch's own state machine:

1. a node whose liveness key etcd deleted is dead now: its heartbeat is backdated before torch's own
   sanitizer runs, which then removes it exactly as it removes an expired node;
2. waiting for the state (torch's 1-s poll) becomes waiting for the watch, at most 1 s and never past
   the last-call deadline, so a change or the deadline is acted on when it happens;
3. a *re*-rendezvous completes as soon as every node with a live key has joined: the last call
   exists to gather late starters, and after a failure the live nodes are known. An agent's first
   rendezvous keeps the full last call; a node still starting when the round completes joins the
   next one (one more restart), as one arriving after the last call does with torch.

torch's keep-alive stays as the fallback: with a broken watch or etcd gone, it behaves as before.
These hooks name private torch classes (``_BackendRendezvousStateHolder``,
``_DistributedRendezvousOpExecutor``); tests/rendezvous/test_liveness.py fails if torch changes them.
"""
from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    _Action, _BackendRendezvousStateHolder, _DistributedRendezvousOpExecutor, _RendezvousContext,
    _RendezvousJoinOp)

from chaosbench.rendezvous.handler import RoundStoreRendezvousHandler
from chaosbench.rendezvous.link_liveness import LinkLiveness
from chaosbench.rendezvous.liveness import Liveness

log = logging.getLogger(__name__)
_LONG_AGO = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_WAIT = 1.0         # torch's poll interval: the longest we wait without news
_MIN_READ_GAP = 0.05    # at most 20 state reads/s per agent however often others write


class LivenessStateHolder(_BackendRendezvousStateHolder):
    _liveness: Liveness
    seen_version: int = 0     # liveness version taken at the last sync
    synced_at: float = 0.0    # monotonic time of the last sync
    dropped: frozenset = frozenset()   # participants our sanitizer removed since our round completed (repr)

    def sync(self):
        version = self._liveness.version   # taken before reading: a later change wakes the waiter
        if version != self.seen_version:
            # torch serves a state read less than 1 s ago from its cache (and skips the sanitizer);
            # after news from the watch that copy is stale.
            self._last_sync_time = -1.0
        self.seen_version = version
        self.synced_at = time.monotonic()
        result = super().sync()
        self._liveness.observe(self._state)
        return result

    def _sanitize(self) -> None:
        dead = self._liveness.dead()
        if dead:
            beats = self._state.last_heartbeats
            for node in beats:
                if repr(node) in dead:
                    beats[node] = _LONG_AGO
        before = {repr(n) for n in self._state.participants}
        super()._sanitize()
        self.dropped |= before - {repr(n) for n in self._state.participants}


class WatchedOpExecutor(_DistributedRendezvousOpExecutor):
    _liveness: Liveness
    rejoining = False    # set once this agent completed a rendezvous: later ones are re-rendezvous

    def run(self, state_handler, deadline, update_deadline=None):
        def decide(ctx: _RendezvousContext, deadline: float) -> _Action:
            action = state_handler(ctx, deadline)
            while action == _Action.SYNC:
                if isinstance(state_handler, _RendezvousJoinOp) and self._all_alive_joined(ctx):
                    return _Action.MARK_RENDEZVOUS_COMPLETE
                self._wait(ctx)
                if self._liveness.poll_s < _MAX_WAIT:   # no watch to tell of changes: read afresh
                    self._state_holder._last_sync_time = -1.0
                self._state_holder.sync()
                self._state = self._state_holder.state
                ctx = _RendezvousContext(self._node, self._state, self._settings)
                action = state_handler(ctx, deadline)
            return action

        super().run(decide, deadline, update_deadline)

    def _wait(self, ctx: _RendezvousContext) -> None:
        holder: LivenessStateHolder = self._state_holder  # type: ignore[assignment]
        timeout = self._liveness.poll_s
        if ctx.state.deadline is not None:   # wake at the last-call deadline, not up to 1 s after it
            until = (ctx.state.deadline - datetime.now(timezone.utc)).total_seconds()
            timeout = min(timeout, max(until, 0.0) + 0.01)
        self._liveness.wait_for_change(holder.seen_version, timeout)
        gap = _MIN_READ_GAP - (time.monotonic() - holder.synced_at)
        if gap > 0:
            time.sleep(gap)

    def _all_alive_joined(self, ctx: _RendezvousContext) -> bool:
        state, settings = ctx.state, ctx.settings
        if not self.rejoining or state.complete or state.deadline is None:
            return False
        if ctx.node not in state.participants or not settings.min_nodes <= len(state.participants) <= settings.max_nodes:
            return False
        alive = self._liveness.alive()
        if alive is None or repr(ctx.node) not in alive:      # the watch is not to be trusted now
            return False
        return alive <= {repr(node) for node in state.participants}


class LivenessRendezvousHandler(RoundStoreRendezvousHandler):
    _liveness: Liveness
    _reported: frozenset = frozenset()

    def num_nodes_waiting(self) -> int:
        """torchrun's agent asks this every monitor interval and restarts its workers when it is > 0.
        A participant of our round that liveness knows dead counts: the workers are stopped at once,
        instead of hanging in a collective with a frozen peer until the trainer's health check fires.
        That includes one our own sync already dropped: any sync (the keep-alive thread's, every
        keep_alive_interval) backdates a dead node and torch's sanitizer removes it from the state's
        participants; a check against those alone found nobody gone while our workers still waited
        for it (a fresh-clone CI run: both survivors stuck until the run's 60-s stuck window)."""
        dead = self._liveness.dead()
        holder: LivenessStateHolder = self._state_holder  # type: ignore[assignment]
        members = frozenset(repr(n) for n in holder.state.participants) | holder.dropped
        gone = members & dead if dead else frozenset()
        if gone:
            if gone != self._reported:
                log.info("liveness: %s of this round %s dead; restarting the worker group",
                         ", ".join(sorted(gone)), "is" if len(gone) == 1 else "are")
                self._reported = gone
            return len(gone)
        return super().num_nodes_waiting()

    def next_rendezvous(self):
        info = super().next_rendezvous()
        self._state_holder.dropped = frozenset()   # type: ignore[attr-defined]  (a new round: new members)
        self._op_executor.rejoining = True   # type: ignore[attr-defined]
        return info

    def shutdown(self) -> bool:
        try:
            return super().shutdown()
        finally:
            self._liveness.stop()


def with_liveness(handler: RoundStoreRendezvousHandler, liveness: Liveness | LinkLiveness) -> LivenessRendezvousHandler:
    """Hook `liveness` into the handler torch's create_handler built (same state, methods differ)."""
    holder, executor = handler._state_holder, handler._op_executor
    if type(holder) is not _BackendRendezvousStateHolder or type(executor) is not _DistributedRendezvousOpExecutor:
        raise TypeError(f"torch's rendezvous handler changed ({type(holder).__name__}, "
                        f"{type(executor).__name__}); run with --rdzv-conf liveness_ttl=0")
    holder.__class__ = LivenessStateHolder
    holder._liveness = liveness
    executor.__class__ = WatchedOpExecutor
    executor._liveness = liveness
    handler.__class__ = LivenessRendezvousHandler
    handler._liveness = liveness
    liveness.start()
    return handler  # type: ignore[return-value]
