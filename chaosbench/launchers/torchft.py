"""torchft: one replica group per node, each under its own single-node torchrun; the groups keep a quorum
through torchft's Lighthouse (a service beside etcd, the proxy and S3: chaosbench/services/lighthouse.py).

Survivors never restart: a lost group drops out of the quorum once its heartbeats stop (the Lighthouse's
heartbeat timeout, 5 s), the others reconfigure their process group in place and go on; a group that
comes back asks for a quorum at step 0 and heals from a live peer's state (HTTP, no checkpoint read).
So there is no cross-node rendezvous: `r.endpoint` is the Lighthouse's host:port (the backends pass it).

The log adapter reads torchft's own lines, which its Manager writes in the workers (Rust and Python
loggers, stderr) and turns them into agent events: `quorum_change` (quorum id, replica groups in it,
the group's step), `heal_start` (the step healed to, the peer) and `heal_done`.
"""
from __future__ import annotations

import re

from chaosbench.launchers.base import Launcher, LogAdapter, Rendezvous

VERSION = "0.2.0"   # torchft on PyPI (cp311 manylinux wheel with the Rust Lighthouse and Manager), 2026-11-28

# the Rust manager's line for every quorum it gets (each step); a new quorum_id is a membership change
QUORUM = re.compile(r"got lighthouse quorum .*?quorum_id: (\d+), participants: \[(.*)")
MEMBER = re.compile(r"QuorumMember \{ replica_id: \"([^\"]*)\".*?step: (\d+)")
HEAL = re.compile(r"healing required, fetching checkpoint metadata from recover_src_manager_address='([^']*)' "
                  r"max_step=(\d+)")
HEALED = "Loaded state dict."
FETCHED = re.compile(r"fetching checkpoint from \S+ took ([0-9.]+)s")   # the HTTP transport's own timing


class TorchftAdapter(LogAdapter):
    """torch elastic's agent lines (each group's own torchrun) plus torchft's quorum and heal lines."""

    def __init__(self) -> None:
        super().__init__()
        self.quorum_id: int | None = None
        self.fetch_s: float | None = None

    def extra(self, text: str) -> list[tuple[str, dict]]:
        return self.worker_line(text)

    def worker_line(self, text: str) -> list[tuple[str, dict]]:
        """torchft's lines, wherever they come from (a worker's own output under --tee, or unprefixed)."""
        q = QUORUM.search(text)
        if q:
            qid = int(q.group(1))
            if qid == self.quorum_id:
                return []
            self.quorum_id = qid
            members = MEMBER.findall(q.group(2))
            return [("quorum_change", {"quorum_id": qid, "replicas": len(members),
                                       "members": sorted(m[0].split(":")[0] for m in members),
                                       "ids": sorted(m[0] for m in members),   # a restarted group has a new id
                                       "max_step": max((int(m[1]) for m in members), default=0)})]
        h = HEAL.search(text)
        if h:
            return [("heal_start", {"step": int(h.group(2)), "peer": h.group(1)})]
        f = FETCHED.search(text)
        if f:
            self.fetch_s = round(float(f.group(1)), 4)
            return []
        if HEALED in text:   # the lines arrive together: the peer's own fetch time is the heal's measure
            fields, self.fetch_s = ({"fetch_s": self.fetch_s} if self.fetch_s is not None else {}), None
            return [("heal_done", fields)]
        return []


class Torchft(Launcher):
    name = "torchft"
    package = "torchft"
    requirements = (f"torchft=={VERSION}",)
    needs_user_code = True   # the Manager, its DDP and optimizer wrappers go in the training loop
    trainer_module = "trainer.torchft_train"   # the reference trainer in torchft's idiom

    def argv(self, r: Rendezvous) -> list[str]:
        # one group per node: a single-node torchrun whose store the Manager joins (MASTER_ADDR/PORT)
        return [r.python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                f"--nproc-per-node={r.nproc}", f"--max-restarts={r.max_restarts}", "--monitor-interval=0.1"]

    def env(self, r: Rendezvous) -> dict[str, str]:
        return {"TORCHFT_LIGHTHOUSE": f"http://{r.endpoint}",
                "REPLICA_GROUP_ID": str(r.node_rank),          # what torchft's examples name their groups by
                "NUM_REPLICA_GROUPS": str(r.max_nodes),
                # the Manager is a client of torchrun's own store (is_master=False): it must be shared
                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}

    def adapter(self) -> LogAdapter:
        return TorchftAdapter()


LAUNCHER = Torchft()
