"""Packet faults on a node's links: loss, rate, delay, jitter, duplicate, corrupt, reorder, scoped to the
data plane (the other trainers), the control plane (the rendezvous endpoint, etcd, S3) or one peer. The
fault record says which mechanism carried each effect: iptables `statistic` for loss, an htb class for
rate, netem for the rest where the kernel has sch_netem, else the in-node NFQUEUE handler
(cluster/node/scripts.py, cluster/node/nfqueue.py). Delay and the rest act on what the node sends (egress,
as netem does): a round trip to a target is longer by one delay; loss drops both ways."""
from __future__ import annotations

import time
from typing import Literal

from pydantic import Field, model_validator

from chaosbench.cluster.primitives.links import NETEM_FIELDS
from chaosbench.faults.base import NODE_NAME, Fault, FaultParams
from chaosbench.faults.registry import register

Pct = Field(None, ge=0, le=100)
MAX_DELAY_MS = 10_000   # the handler holds every delayed packet in the node's kernel queue: bound the hold


class PacketParams(FaultParams):
    node: str = Field("random", pattern=NODE_NAME)
    to: Literal["data", "rendezvous", "etcd", "s3", "all"] = "data"   # data: the other trainer nodes only
    peer: str | None = Field(None, pattern=r"^node-[0-9]{1,5}$")      # one node's link instead of `to`
    loss_pct: float | None = Field(None, ge=0, le=100, examples=[2.0])
    rate_kbit: float | None = Field(None, gt=0, le=400_000_000)
    delay_ms: float | None = Field(None, ge=0, le=MAX_DELAY_MS, examples=[50.0])
    jitter_ms: float | None = Field(None, ge=0, le=MAX_DELAY_MS)
    duplicate_pct: float | None = Pct
    corrupt_pct: float | None = Pct
    reorder_pct: float | None = Pct
    # jitter without reordering: a packet also waits for the one sent before it (a congested switch's
    # queue); netem's default, and ours, delays each packet independently, so jitter reorders a flow
    keep_order: bool = False

    @model_validator(mode="after")
    def _an_effect(self):
        if not any(getattr(self, k) for k in ("loss_pct", "rate_kbit", *NETEM_FIELDS)):
            raise ValueError("give at least one effect: loss_pct, rate_kbit, delay_ms, jitter_ms, duplicate_pct, "
                             "corrupt_pct or reorder_pct (a packet fault that changes nothing proves nothing)")
        if self.reorder_pct and not self.delay_ms:
            raise ValueError("reorder_pct needs delay_ms: netem reorders by sending some packets ahead of the delayed rest")
        if (self.jitter_ms or 0) > (self.delay_ms or 0):
            raise ValueError(f"jitter_ms {self.jitter_ms} > delay_ms {self.delay_ms or 0}: a packet cannot leave before "
                             "it was sent, so the spread would not be +-jitter_ms; give delay_ms >= jitter_ms")
        if self.keep_order and self.reorder_pct:
            raise ValueError("keep_order and reorder_pct contradict each other: reorder_pct sends some packets "
                             "ahead of the rest; drop one of them")
        if self.peer is not None and self.peer == self.node:
            raise ValueError(f"peer {self.peer} is the node itself: name another node")
        return self

    @property
    def netem(self) -> bool:
        return any(getattr(self, k) for k in NETEM_FIELDS)


@register
class PacketFault(Fault):
    name = "packet_fault"
    help = ("lossy / slow link from a node to its peers (to: data|rendezvous|etcd|s3|all, or one peer): loss by "
            "iptables statistic, rate by htb; delay/jitter/duplicate/corrupt/reorder by netem, or by an in-node "
            "NFQUEUE handler where the kernel has no sch_netem")
    Params = PacketParams

    @classmethod
    def needs_for(cls, params: PacketParams) -> frozenset[str]:
        return frozenset({"netem_link" if params.netem else "degrade_link", "restore_link"})

    def _inject(self):
        self.node = self.pick_node(self.p.node)
        self.target = self.node + (f"->{self.p.peer}" if self.p.peer else f"->{self.p.to}")
        spec = self.p.model_dump(exclude={"node"})
        do = self.cluster.netem_link if self.p.netem else self.cluster.degrade_link
        self.applied = do(self.node, spec) or {}

    def inject(self) -> float:
        """The record's params carry what the node used: {'mechanism': {effect: mechanism}, 'targets': [...],
        'tcp_congestion_control': the node's, where it could be read}."""
        started = time.time()
        self._inject()
        self.injected = True
        return self.ctx.log.record(self.id, self.name, "inject", self.target,
                                   {**self.p.model_dump(), **self.applied}, started)

    def heal(self) -> float | None:
        """As Fault.heal; the record's params carry `tcp`: what the node's TCP counted from the injection
        to the heal (segments sent and retransmitted, reordering seen, spurious retransmits; None: unread)."""
        if not self.injected:
            return None
        started = time.time()
        seen = self.cluster.restore_link(self.node) or {}
        self.injected = False
        return self.ctx.log.record(self.id, self.name, "heal", self.target, {**self.p.model_dump(), **seen}, started)
