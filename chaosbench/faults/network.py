"""Network faults: silent partition, loud disconnect, and degraded etcd/S3 links via the fault proxy."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from chaosbench.faults.base import NODE_NAME, PEER_NAME, Fault, FaultParams
from chaosbench.faults.registry import register
from chaosbench.proxy.toxics import build_toxic


class NetParams(FaultParams):
    # names reach iptables scripts and host lookups on the nodes: only harness-given names pass (base.py)
    node: str | None = Field("random", pattern=NODE_NAME)
    nodes: list[Annotated[str, Field(pattern=NODE_NAME)]] | None = None   # a minority of nodes at once (overrides node)
    peers: list[Annotated[str, Field(pattern=PEER_NAME)]] | None = None   # partition only: cut these peers (default: everyone else)


class _NodesFault(Fault):
    Params = NetParams

    def _targets(self) -> list[str]:
        return list(self.p.nodes) if self.p.nodes else [self.pick_node(self.p.node or "random")]

    def _heal(self):
        for node in self.nodes:
            self.cluster.heal_network(node)


@register
class Partition(_NodesFault):
    name = "partition"
    help = "silently drop a node's (or a minority's) traffic to its peers (iptables DROP); healed by heal_network"
    needs = ("partition", "heal_network")

    def _inject(self):
        self.nodes = self._targets()
        self.target = ",".join(self.nodes)
        for node in self.nodes:
            self.cluster.partition(node, self.p.peers)


@register
class Disconnect(_NodesFault):
    name = "disconnect"
    help = "loudly disconnect a node (or a minority) from the network: peers see errors at once"
    needs = ("disconnect", "heal_network")

    def _inject(self):
        self.nodes = self._targets()
        self.target = ",".join(self.nodes)
        for node in self.nodes:
            self.cluster.disconnect(node)


TOXICS = ("latency", "bandwidth", "timeout", "reset_peer", "slow_close", "slicer", "limit_data")


@register
class LinkToxic(Fault):
    name = "link_toxic"
    help = "degrade the etcd or S3 link with a Toxiproxy toxic (latency, bandwidth, timeout, reset_peer, ...)"

    class Params(FaultParams):
        link: Literal["etcd", "s3"]
        toxic: Literal[TOXICS]  # type: ignore[valid-type]
        stream: Literal["upstream", "downstream"] = "downstream"
        toxicity: float = Field(1.0, ge=0, le=1)
        attributes: dict[str, Any] = Field(default_factory=dict,   # what a toxic type needs beyond its defaults
                                           examples=[{"latency": 500, "jitter": 50}, {"average_size": 64}])

        @model_validator(mode="after")
        def _a_toxic_the_proxy_accepts(self):
            bad = [k for k, v in self.attributes.items() if isinstance(v, (int, float)) and v < 0]
            if bad:
                raise ValueError(f"toxic attributes must not be negative: {', '.join(bad)}")
            # the proxy's own rules (unknown attributes, a slicer without average_size, ...), checked
            # when the scenario loads instead of when the fault fires mid-run
            build_toxic({"type": self.toxic, "stream": self.stream, "toxicity": self.toxicity,
                         "attributes": self.attributes})   # ToxicError is a ValueError
            return self

    def _inject(self):
        self.target = self.p.link
        self.toxic_name = f"chaosbench-{self.id}"
        with self.proxy() as proxy:
            proxy.add_toxic(self.p.link, self.p.toxic, self.p.attributes, name=self.toxic_name,
                            stream=self.p.stream, toxicity=self.p.toxicity)

    def _heal(self):
        with self.proxy() as proxy:
            proxy.remove_toxic(self.p.link, self.toxic_name)


@register
class LinkDown(Fault):
    name = "link_down"
    help = "cut the etcd or S3 link (proxy disabled: connections dropped and refused); healed by re-enabling"

    class Params(FaultParams):
        link: Literal["etcd", "s3"]

    def _inject(self):
        self.target = self.p.link
        with self.proxy() as proxy:
            proxy.disable(self.p.link)

    def _heal(self):
        with self.proxy() as proxy:
            proxy.enable(self.p.link)
