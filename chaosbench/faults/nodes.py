"""Faults on trainer nodes and their processes: kill, crash or freeze a worker, stop/restart, pause,
throttle, preempt, scale up, total failure."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from chaosbench.faults.base import Fault, FaultParams, NodeParams, start_stop
from chaosbench.faults.disks import WRITEBACK
from chaosbench.faults.registry import register


class LoseUnsynced(FaultParams):
    # power-loss semantics: the node's NVMe runs under the disk layer in writeback mode from the node's
    # start (faults/disks.py), so what was never fsynced is gone at the kill (docs/below-the-process.md)
    lose_unsynced_writes: bool = False


def lose_needs(params) -> set[str]:
    # disk_stats is built on the layer's hook: a backend that has it can run the layer
    return {"disk_stats"} if params.lose_unsynced_writes else set()


def unsynced(fault: Fault, nodes: list[str]) -> dict:
    """Before a lose_unsynced_writes kill: what each node's layer holds unsynced (lost with the kill)."""
    if not fault.p.lose_unsynced_writes:
        return {}
    pending = {n: (fault.cluster.disk_stats(n, "nvme") or {}).get("pending_bytes") for n in nodes}
    return {"mechanism": WRITEBACK, "unsynced_bytes_lost": pending}


@register
class KillNode(Fault):
    name = "kill_node"
    help = ("SIGKILL a node's whole process tree (agent + workers); with duration_s it comes back after; "
            "lose_unsynced_writes: its NVMe data never fsynced is gone too")
    needs = ("kill_node", "start_node")

    class Params(NodeParams, LoseUnsynced):
        pass

    @classmethod
    def needs_for(cls, params):
        return super().needs_for(params) | lose_needs(params)

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.lost = unsynced(self, [self.target])
        self.cluster.kill_node(self.target)

    def recorded(self, action: str) -> dict:
        return self.lost if action == "inject" else {}

    def _heal(self):
        self.cluster.start_node(self.target)


def _node(fault: Fault) -> str:
    return fault.pick_node(fault.p.node)


class WorkerParams(NodeParams):
    local_rank: int = Field(0, ge=0, le=1023)   # which worker of the node (its LOCAL_RANK)


@register
class KillWorker(Fault):
    name = "kill_worker"
    help = "crash one worker process (SIGKILL); its node and torchrun agent survive and restart it"
    healable = False
    needs = ("kill_worker",)
    Params = WorkerParams

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.cluster.kill_worker(self.target, self.p.local_rank)


FreezeWorker = register(start_stop(
    "freeze_worker", "hang one worker process (SIGSTOP, not its agent): the agent keeps heartbeating and the peers "
    "block in their next collective; healed by SIGCONT", WorkerParams, _node, inject="freeze_worker",
    heal="thaw_worker", args=lambda fault: (fault.p.local_rank,)))


@register
class ThrottleNode(Fault):
    name = "throttle_node"
    help = "a straggler: the node keeps running on a fraction of its CPU; healed by lifting the limit"
    needs = ("throttle_node", "unthrottle_node")

    class Params(NodeParams):
        # the share of its CPU the node keeps: 0.3 = a node 3.3x slower; 1 = no slowdown
        cpu_fraction: float = Field(gt=0, le=1, examples=[0.3])

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.cluster.throttle_node(self.target, self.p.cpu_fraction)

    def _heal(self):
        self.cluster.unthrottle_node(self.target)


@register
class PreemptNode(Fault):
    name = "preempt_node"
    help = ("preempt a node the way spot reclaims and maintenance do: SIGTERM to its launcher and workers, "
            "SIGKILL of what is left after grace_s; the node is gone (add_node brings a replacement)")
    healable = False
    needs = ("preempt_node",)

    class Params(NodeParams):
        grace_s: float = Field(10.0, gt=0, le=3600)   # the notice before the kill (AWS spot: 120 s, GCP: 30 s)

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.cluster.preempt_node(self.target, self.p.grace_s)


StopNode = register(start_stop("stop_node", "stop a node gracefully (SIGTERM); healed by starting it again",
                               NodeParams, _node, inject="stop_node", heal="start_node"))
PauseNode = register(start_stop("pause_node", "freeze a node (SIGSTOP / docker pause): a silent hang, healed by "
                                "unfreezing", NodeParams, _node, inject="pause_node", heal="unpause_node"))


@register
class AddNode(Fault):
    name = "add_node"
    help = ("add a trainer node (scale up); it joins at the next rendezvous. standby: it boots when "
            "training starts, outside the rendezvous at the lowest CPU weight, and joins when the fault fires "
            "(a warm replacement: one restart instead of two after a loss)")
    healable = False
    needs = ("add_node",)

    class Params(FaultParams):
        standby: bool = Field(False, description="boot the node when training starts; the fault releases it")

    @classmethod
    def needs_for(cls, params):
        return frozenset({"add_standby", "release_standby"} if params.standby else cls.needs)

    def prepare(self):
        self.standby = self.cluster.add_standby() if self.p.standby else None

    def _inject(self):
        if self.p.standby:
            self.cluster.release_standby(self.standby)
            self.target = self.standby
        else:
            self.target = self.cluster.add_node()


@register
class KillAll(Fault):
    name = "kill_all"
    help = "kill every node, optionally wipe NVMe and/or shared memory (new machines), then restart all"
    default_duration_s = 0.0
    needs = ("kill_node",)

    class Params(FaultParams):
        wipe: Literal["none", "shm", "nvme", "all"] = "shm"   # a node kill always loses its shared memory
        restart: bool = True
        lose_unsynced_writes: bool = False   # as kill_node's, on every node

    @classmethod
    def needs_for(cls, params):
        return (super().needs_for(params) | ({"wipe_node_storage"} if params.wipe != "none" else set())
                | ({"start_node"} if params.restart else set()) | lose_needs(params))

    def recorded(self, action: str) -> dict:
        return self.lost if action == "inject" else {}

    def _inject(self):
        self.nodes = sorted(self.cluster.node_names())
        self.target = ",".join(self.nodes)
        self.lost = unsynced(self, self.nodes)
        for node in self.nodes:
            self.cluster.kill_node(node)
        if self.p.wipe != "none":
            for node in self.nodes:
                self.cluster.wipe_node_storage(node, nvme=self.p.wipe in ("nvme", "all"),
                                               shm=self.p.wipe in ("shm", "all"))

    def _heal(self):
        if self.p.restart:
            self.cluster.start_nodes(self.nodes)
