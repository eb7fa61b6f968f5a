"""Faults on trainer nodes: kill, crash a worker, stop/restart, freeze, scale up, total failure."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from chaosbench.faults.base import Fault, FaultParams, NodeParams
from chaosbench.faults.registry import register


@register
class KillNode(Fault):
    name = "kill_node"
    help = "SIGKILL a node's whole process tree (agent + workers); with duration_s it comes back after"
    Params = NodeParams
    needs = ("kill_node",)

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.cluster.kill_node(self.target)

    def _heal(self):
        self.cluster.start_node(self.target)


@register
class KillWorker(Fault):
    name = "kill_worker"
    help = "crash one worker process (SIGKILL); its node and torchrun agent survive and restart it"
    healable = False
    needs = ("kill_worker",)

    class Params(NodeParams):
        local_rank: int = Field(0, ge=0)

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.cluster.kill_worker(self.target, self.p.local_rank)


@register
class StopNode(Fault):
    name = "stop_node"
    help = "stop a node gracefully (SIGTERM); healed by starting it again"
    Params = NodeParams
    needs = ("stop_node", "start_node")

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.cluster.stop_node(self.target)

    def _heal(self):
        self.cluster.start_node(self.target)


@register
class PauseNode(Fault):
    name = "pause_node"
    help = "freeze a node (SIGSTOP / docker pause): a silent hang, healed by unfreezing"
    Params = NodeParams
    needs = ("pause_node", "unpause_node")

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.cluster.pause_node(self.target)

    def _heal(self):
        self.cluster.unpause_node(self.target)


@register
class AddNode(Fault):
    name = "add_node"
    help = "add a trainer node (scale up); it joins at the next rendezvous"
    healable = False
    needs = ("add_node",)

    def _inject(self):
        self.target = self.cluster.add_node()


@register
class KillAll(Fault):
    name = "kill_all"
    help = "kill every node, optionally wipe NVMe and/or shared memory (new machines), then restart all"
    default_duration_s = 0.0
    needs = ("kill_node", "start_node")

    class Params(FaultParams):
        wipe: Literal["none", "shm", "nvme", "all"] = "shm"   # a node kill always loses its shared memory
        restart: bool = True

    def _inject(self):
        self.nodes = sorted(self.cluster.node_names())
        self.target = ",".join(self.nodes)
        for node in self.nodes:
            self.cluster.kill_node(node)
        if self.p.wipe != "none":
            for node in self.nodes:
                self.cluster.wipe_node_storage(node, nvme=self.p.wipe in ("nvme", "all"),
                                               shm=self.p.wipe in ("shm", "all"))

    def _heal(self):
        if self.p.restart:
            self.cluster.start_nodes(self.nodes)
