"""Name-resolution primitives: break a host name on one node only (its own /etc/hosts and resolv.conf,
node/scripts.py BREAK_NAME). Only docker's nodes have resolver files of their own (docker/backend.py)."""
from __future__ import annotations

from chaosbench.cluster.primitives import backend_primitive

SHARED_RESOLVER = ("its nodes share the host's resolver (no /etc/hosts or resolv.conf of their own); the docker "
                   "backend has it")


class NamePrimitives:
    @backend_primitive(why=SHARED_RESOLVER)
    def break_name(self, node: str, name: str, mode: str, delay_s: float = 5.0) -> str:
        """Make `name` (rendezvous | etcd | s3 | proxy, or a host name) fail to resolve on `node` only
        (mode nxdomain | wrong_address | slow); what host was broken. Needs a resolver of the node's own."""

    @backend_primitive(why=SHARED_RESOLVER)
    def restore_names(self, node: str) -> None:
        """Put back the node's resolver files exactly as they were before break_name."""

    @backend_primitive(why=(
        "its nodes are given the rendezvous endpoint, etcd, S3 and the proxy as IP addresses (or share the "
        "host's resolver), so no lookup of them can fail; on docker name a host the node resolves (node-0: the "
        "rank-0 node, whose name the workers' store is reached by)"))
    def break_endpoint_name(self, node: str, name: str, mode: str, delay_s: float = 5.0) -> str:
        """break_name for a name the harness hands the nodes (rendezvous | etcd | s3 | proxy). A backend
        that gives them as host names implements it; none does yet."""
