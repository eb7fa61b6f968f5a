"""Network primitives, written once as in-node iptables / tc commands (node/scripts.py): a partition
(`_cut_targets`) and a degraded link (`_link_targets`: loss, rate, and netem's delay / jitter / duplicate
/ corrupt / reorder, by a qdisc or by the NFQUEUE handler, nfqueue_link.py). docker implements the hooks;
its disconnect (a node off the network) is docker/backend.py's own."""
from __future__ import annotations

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.node import scripts
from chaosbench.cluster.primitives import nfqueue_link, primitive

NETEM_FIELDS = ("delay_ms", "jitter_ms", "duplicate_pct", "corrupt_pct", "reorder_pct")

# what a link fault does to TCP, from /proc/net/snmp (Tcp:) and /proc/net/netstat (TcpExt:)
TCP_FIGURES = {"OutSegs": "segments_sent", "RetransSegs": "segments_retransmitted",
               "TCPSACKReorder": "reordering_seen_sack", "TCPTSReorder": "reordering_seen_timestamps",
               "TCPDSACKRecv": "spurious_retransmits_dsack", "TCPTimeouts": "retransmit_timeouts",
               "TCPSpuriousRTOs": "spurious_timeouts"}


class LinkPrimitives:
    #: what netem_link carries delay / jitter / duplicate / corrupt / reorder with: 'netem' (a qdisc) or
    #: 'nfqueue' (the in-node handler, node/nfqueue.py, where the nodes' kernel has no sch_netem)
    netem_mechanism: str | None = "netem"

    def _cut_targets(self, node: str, peers: list[str] | None) -> list[str]:
        """Hosts or addresses (as the node resolves them) of `peers`; None: every other node and the services."""
        self._unsupported("partition")

    def _link_targets(self, node: str, to: str, peer: str | None) -> tuple[str, list[str]]:
        """The node's interface and what a degraded link `to` (data | rendezvous | etcd | s3 | all) or to
        `peer` covers, as `ip` or `ip:tcp port` (an endpoint shared by the whole host is no link of one node)."""
        self._unsupported("degrade_link")

    @primitive(via="_cut_targets")
    def partition(self, node: str, peers: list[str] | None = None) -> None:
        """Silent: iptables DROP inside the node towards its peers' and the services' addresses."""
        self._check_node(node)
        self._run_in_node(node, scripts.cut(scripts.DROP), *self._cut_targets(node, peers))

    @primitive(via="_cut_targets")
    def heal_network(self, node: str) -> None:
        """Remove our chain from the node entirely."""
        self._check_node(node)
        self._run_in_node(node, scripts.HEAL)

    @primitive(via="_link_targets")
    def degrade_link(self, node: str, spec: dict) -> dict:
        """A lossy / slow link (spec: to | peer, loss_pct, rate_kbit): loss by iptables `statistic` in
        our own chain, rate by an htb class the node's sends to those addresses go through. Returns
        {'targets', 'mechanism'}: which mechanism carried each effect."""
        return self._degrade(node, spec, netem=False)

    @primitive(via="_link_targets")
    def netem_link(self, node: str, spec: dict) -> dict:
        """degrade_link plus delay / jitter / duplicate / corrupt / reorder: by a netem qdisc under our htb
        class, or where the kernel has no sch_netem by the NFQUEUE handler (netem_mechanism); keep_order:
        jitter that keeps the packets' order (a pfifo under netem, a FIFO in the handler)."""
        return self._degrade(node, spec, netem=True)

    @primitive(via="_link_targets")
    def restore_link(self, node: str) -> dict | None:
        """Remove our chain and qdisc from the node; fails loudly if any of it is left. Returns {'tcp': what
        the node's TCP counted since the link was degraded (tcp_during; None: not read)}."""
        self._check_node(node)
        tcp = tcp_during(self.__dict__.setdefault("_link_tcp", {}).pop(node, None), self._tcp_counters(node))
        self._run_in_node(node, scripts.RESTORE_LINK, self._link_targets(node, "data", None)[0])
        nfqueue_link.reap(self, node)
        return {"tcp": tcp}

    def _degrade(self, node: str, spec: dict, netem: bool) -> dict:
        self._check_node(node)
        dev, targets = self._link_targets(node, spec.get("to") or "data", spec.get("peer"))
        if not targets:
            raise ClusterError(f"degrade_link {node}: no address to degrade (to={spec.get('to')}, peer={spec.get('peer')})")
        before = self._tcp_counters(node)
        via = self.netem_mechanism if netem else None
        loss, rate, args = spec.get("loss_pct"), spec.get("rate_kbit"), netem_args(spec) if via == "netem" else ""
        mechanism = {**({"loss_pct": "iptables statistic"} if loss else {}),
                     **({"rate_kbit": "htb"} if rate else {}),
                     **{k: via for k in (*NETEM_FIELDS, "keep_order") if via and spec.get(k)}}
        queue = nfqueue_link.start(self, node, {k: spec[k] for k in (*NETEM_FIELDS, "keep_order") if spec.get(k)}) \
            if via == "nfqueue" else "-"
        try:
            self._run_in_node(node, scripts.DEGRADE_LINK, dev, f"{loss / 100:.6f}" if loss else "-",
                              str(max(1, round(rate))) if rate else "-", args or "-",
                              "fifo" if args and spec.get("keep_order") else "-", queue, *targets)
        except ClusterError:
            if queue != "-":   # the handler runs already: stop it with whatever rules went in
                self.restore_link(node)
            raise
        self.__dict__.setdefault("_link_tcp", {})[node] = before
        return {"targets": targets, "mechanism": mechanism,
                **({"tcp_congestion_control": before["congestion_control"]} if before and "congestion_control" in before
                   else {})}

    def _tcp_counters(self, node: str) -> dict | None:
        """The node's TCP counters ({figure: count}, TCP_FIGURES) and 'congestion_control', read inside it;
        None where the read fails: the link's degrade and restore record what changed in between."""
        try:
            return tcp_counters(self._run_in_node(node, scripts.TCP_COUNTERS, timeout=30))
        except ClusterError:
            return None


def netem_args(spec: dict) -> str:
    """netem's arguments for a degrade spec ('' when it asks for none of netem's effects)."""
    delay, jitter = spec.get("delay_ms") or 0, spec.get("jitter_ms") or 0
    out = [f"delay {delay}ms" + (f" {jitter}ms" if jitter else "")] if delay or jitter else []
    out += [f"{word} {spec[k]}%" for k, word in (("duplicate_pct", "duplicate"), ("corrupt_pct", "corrupt"),
                                                 ("reorder_pct", "reorder")) if spec.get(k)]
    return " ".join(out)


def tcp_counters(text: str) -> dict:
    """TCP_COUNTERS' output -> {figure: count, 'congestion_control': name}; a counter the kernel lacks is left out."""
    out: dict = {}
    lines = text.splitlines()
    for head, vals in zip(lines, lines[1:]):
        prefix = head.split(":", 1)[0]
        if prefix not in ("Tcp", "TcpExt") or not vals.startswith(prefix + ":") or head == vals:
            continue
        for name, value in zip(head.split()[1:], vals.split()[1:]):
            if name in TCP_FIGURES and value.lstrip("-").isdigit():
                out[TCP_FIGURES[name]] = int(value)
    cc = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Cc:")), "")
    if cc:
        out["congestion_control"] = cc
    return out


def tcp_during(before: dict | None, after: dict | None) -> dict | None:
    """What changed between two tcp_counters reads (counts that both have), with the congestion control;
    None where either read is missing or a count went down (the node restarted: a fresh namespace)."""
    if not before or not after:
        return None
    out = {k: after[k] - before[k] for k in TCP_FIGURES.values() if isinstance(before.get(k), int)
           and isinstance(after.get(k), int)}
    if any(v < 0 for v in out.values()):
        return None
    if after.get("congestion_control"):
        out["congestion_control"] = after["congestion_control"]
    return out
