"""Name faults: a rendezvous, etcd, S3 or proxy name (or any host name) stops resolving on one node.

docker: the node's own /etc/hosts and resolv.conf, edited in place and restored byte for byte at heal
(cluster/node/scripts.py BREAK_NAME / RESTORE_NAMES). local and Slurm: the nodes share the host's resolver, so the
fault is refused up front there.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from chaosbench.faults.base import NODE_NAME, Fault, FaultParams
from chaosbench.faults.registry import register

ENDPOINT_NAMES = ("rendezvous", "etcd", "s3", "proxy")
# a DNS host name (labels of letters, digits, '-', '_'): it reaches a script on the node as one argument
HOST_NAME = r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?$"


@register
class DnsFault(Fault):
    name = "dns_fault"
    help = ("a name fails to resolve on one node: nxdomain (NXDOMAIN for it alone), wrong_address "
            "(a hosts entry to a black-holed 192.0.2.1), slow (its answer arrives delay_s late)")
    default_duration_s = 30.0

    class Params(FaultParams):
        node: str = Field("random", pattern=NODE_NAME)
        name: str = Field(pattern=HOST_NAME, max_length=253, examples=["node-0"])   # rendezvous | etcd | s3 | proxy | a host name
        mode: Literal["nxdomain", "wrong_address", "slow"]
        delay_s: float = Field(5.0, gt=0, le=25)   # slow: glibc waits at most 30 s for an answer

    @classmethod
    def needs_for(cls, params) -> frozenset[str]:
        # the endpoint names are refused up front where the nodes get them as addresses (docker today)
        brk = "break_endpoint_name" if params.name in ENDPOINT_NAMES else "break_name"
        return frozenset({brk, "restore_names"})

    def _inject(self):
        node = self.pick_node(self.p.node)
        self.node = node
        brk = self.cluster.break_endpoint_name if self.p.name in ENDPOINT_NAMES else self.cluster.break_name
        host = brk(node, self.p.name, self.p.mode, self.p.delay_s)
        self.target = f"{node}:{host}"

    def _heal(self):
        self.cluster.restore_names(self.node)
