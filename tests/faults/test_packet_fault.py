"""packet_fault: its parameters (refused at load with file:line), which primitive each variant needs,
the in-node scripts it runs (against recording stand-ins for iptables and tc), the restore's check that
nothing of ours is left, the fault record naming the mechanism, and the refusals where it cannot run."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from chaosbench.cluster.node import scripts
from chaosbench.cluster.base import Cluster, ClusterSpec
from chaosbench.cluster.errors import ClusterError, UnsupportedFault
from chaosbench.cluster.primitives.links import netem_args
from chaosbench.cluster.proctree import completed
from chaosbench.cluster.docker.backend import NO_NETEM, DockerCluster
from chaosbench.cluster.local.backend import LocalCluster
from chaosbench.faults import validate_params
from chaosbench.faults.capabilities import missing_primitives, needs_of
from chaosbench.scenario import ScenarioError, load_scenario
from tests.faults.recording import RecordingCluster, make_fault

ROOT = Path(__file__).resolve().parents[2]

# stand-ins: log every call; `iptables -S` prints $IPT_LEFT, `tc qdisc show` $TC_SHOW until a `tc qdisc del`
FAKE = {"iptables": 'echo "iptables $*" >> "$LOG"\ncase "$1" in -S) printf "%s" "$IPT_LEFT";; -C|-L|-n) exit 1;; esac\n',
        "tc": 'echo "tc $*" >> "$LOG"\n[ "$1 $2" = "qdisc del" ] && touch "$LOG.deleted"\n'
              '[ "$1 $2" = "qdisc show" ] && [ ! -e "$LOG.deleted" ] && printf "%s" "$TC_SHOW"\nexit 0\n'}


class ShellCluster(Cluster):
    """Runs in-node scripts here with iptables and tc replaced by the stand-ins."""
    backend = "shell"

    def __init__(self, tmp: Path, **env):
        super().__init__(ClusterSpec(run_id="t", run_dir=tmp, nodes=3))
        self.bin, self.log = tmp / "bin", tmp / "calls.log"
        self.bin.mkdir(exist_ok=True)
        for name, body in FAKE.items():
            (self.bin / name).write_text("#!/bin/sh\n" + body)
            (self.bin / name).chmod(0o755)
        self.env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "LOG": str(self.log),
                    "IPT_LEFT": "", "TC_SHOW": "", **env}

    def _run_in_node(self, node, script, *args, timeout=120):
        argv = script.argv("python3", *args)
        return completed(argv, subprocess.run(argv, capture_output=True, text=True, env=self.env), node)

    def _link_targets(self, node, to, peer):
        return "eth0", {"data": ["10.0.0.2", "10.0.0.3"], "etcd": ["10.0.0.9:2379"]}[to]

    def start_training(self): pass
    def node_status(self, node): return "running"
    def collect(self): pass

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.mark.parametrize("params, field", [
    ({"loss_pct": 101}, "loss_pct"), ({"loss_pct": -1}, "loss_pct"), ({"corrupt_pct": 100.5}, "corrupt_pct"),
    ({"delay_ms": -5}, "delay_ms"), ({"jitter_ms": -1, "delay_ms": 5}, "jitter_ms"), ({"rate_kbit": 0}, "rate_kbit"),
    ({}, "at least one effect"), ({"loss_pct": 0}, "at least one effect"), ({"to": "dns", "loss_pct": 1}, "to"),
    ({"reorder_pct": 5}, "reorder_pct needs delay_ms"), ({"node": "node-1", "peer": "node-1", "loss_pct": 1}, "itself"),
    ({"peer": "etcd", "loss_pct": 1}, "peer"),
    ({"delay_ms": 50, "jitter_ms": 10, "reorder_pct": 5, "keep_order": True}, "contradict")])
def test_parameters_are_refused(params, field):
    with pytest.raises(ValidationError) as e:
        validate_params("packet_fault", params)
    assert field in str(e.value)


def _scenario(tmp_path, fault: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ncluster: {backend: docker, nodes: 2}\ntrainer: {config: trainer/configs/tiny.yaml}\n"
                    f"faults:\n  - at: {{step: 5}}\n    packet_fault: {fault}\n    duration_s: 10\n"
                    "expect: {reaches_step: 20}\n")
    return path


@pytest.mark.parametrize("fault, where", [
    ("{node: node-0, peer: node-2, loss_pct: 2}", "peer"), ("{node: node-0, loss_pct: 200}", "loss_pct"),
    ("{node: node-3, loss_pct: 2}", "node")])
def test_the_scenario_loader_names_file_line_and_field(tmp_path, monkeypatch, fault, where):
    monkeypatch.chdir(ROOT)
    with pytest.raises(ScenarioError) as e:
        load_scenario(_scenario(tmp_path, fault))
    assert f"s.yaml:6:" in str(e.value) and where in str(e.value), str(e.value)


def test_a_valid_scenario_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    s = load_scenario(_scenario(tmp_path, "{node: node-0, peer: node-1, loss_pct: 2, rate_kbit: 800}"))
    assert s.faults[0].kind == "packet_fault"


def test_needs_follow_the_effects():
    assert needs_of("packet_fault", {"loss_pct": 2, "rate_kbit": 100}) == {"degrade_link", "restore_link"}
    for effect in ("delay_ms", "duplicate_pct", "corrupt_pct"):
        assert needs_of("packet_fault", {effect: 3}) == {"netem_link", "restore_link"}
    assert needs_of("packet_fault", {"delay_ms": 3, "jitter_ms": 3}) == {"netem_link", "restore_link"}


@pytest.mark.parametrize("has", [False, True])
def test_docker_withholds_netem_exactly_when_the_kernel_lacks_netem_and_nfqueue(monkeypatch, has):
    monkeypatch.setattr(scripts, "kernel_has_netem", lambda: False)
    monkeypatch.setattr(scripts, "kernel_has_nfqueue", lambda: has)
    supported = DockerCluster.implemented_faults() - DockerCluster.withheld()
    assert {"degrade_link", "restore_link"} <= supported
    assert ("netem_link" in supported) is has
    entries = [type("F", (), {"id": "p1", "kind": "packet_fault", "params": {"delay_ms": 50}})(),
               type("F", (), {"id": "p2", "kind": "packet_fault", "params": {"loss_pct": 2}})()]
    assert missing_primitives(entries, supported) == ([] if has else ["p1 (packet_fault) needs netem_link"])
    assert "neither sch_netem nor nfnetlink_queue" in NO_NETEM and "loss_pct and rate_kbit work here" in NO_NETEM


def test_the_local_backend_refuses_with_the_reason(tmp_path):
    assert not {"degrade_link", "netem_link", "restore_link"} & LocalCluster.supported_faults
    cluster = LocalCluster.__new__(LocalCluster)
    with pytest.raises(UnsupportedFault, match="shares the host's network"):
        cluster._unsupported("degrade_link")


def test_loss_is_an_iptables_statistic_drop_both_ways_in_our_own_chain(tmp_path):
    c = ShellCluster(tmp_path)
    out = c.degrade_link("node-0", {"to": "data", "loss_pct": 2})
    cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()   # the stand-in node is this host
    assert out == {"targets": ["10.0.0.2", "10.0.0.3"], "mechanism": {"loss_pct": "iptables statistic"},
                   "tcp_congestion_control": cc}
    calls = c.calls()
    drops = [x for x in calls if x.startswith("iptables -A CHAOSBENCH-LINK")]
    for ip in ("10.0.0.2", "10.0.0.3"):
        for way in ("-d", "-s"):
            assert f"iptables -A CHAOSBENCH-LINK {way} {ip} -m statistic --mode random --probability 0.020000 -j DROP" in drops
    assert len(drops) == 4
    assert "iptables -I INPUT -j CHAOSBENCH-LINK" in calls and "iptables -I OUTPUT -j CHAOSBENCH-LINK" in calls
    assert not any(x.startswith("tc ") for x in calls), "loss alone adds no qdisc"
    assert not any(f" {scripts.CHAIN} " in x + " " for x in calls), "never the partition's chain"


def test_rate_is_an_htb_class_with_a_filter_per_peer_port(tmp_path):
    c = ShellCluster(tmp_path)
    out = c.degrade_link("node-0", {"to": "etcd", "rate_kbit": 800})
    assert out["mechanism"] == {"rate_kbit": "htb"}
    calls = c.calls()
    assert "tc qdisc add dev eth0 root handle 1cb: htb default 1" in calls
    assert "tc class add dev eth0 parent 1cb: classid 1cb:1 htb rate 10gbit" in calls   # everything else: unshaped
    assert "tc class add dev eth0 parent 1cb: classid 1cb:10 htb rate 800kbit ceil 800kbit" in calls
    assert ("tc filter add dev eth0 parent 1cb: protocol ip prio 1 u32 match ip dst 10.0.0.9/32 "
            "match ip dport 2379 0xffff flowid 1cb:10") in calls
    assert not any(x.startswith("iptables") for x in calls)
    assert not any("netem" in x for x in calls)


def test_netem_effects_go_under_our_class_where_the_kernel_has_it(tmp_path):
    c = ShellCluster(tmp_path)
    spec = {"to": "data", "delay_ms": 50, "jitter_ms": 10, "duplicate_pct": 1, "corrupt_pct": 30, "reorder_pct": 5}
    assert netem_args(spec) == "delay 50ms 10ms duplicate 1% corrupt 30% reorder 5%"
    out = c.netem_link("node-0", spec)
    assert out["mechanism"] == dict.fromkeys(("delay_ms", "jitter_ms", "duplicate_pct", "corrupt_pct", "reorder_pct"),
                                             "netem")
    assert ("tc qdisc add dev eth0 parent 1cb:10 handle 10cb: netem delay 50ms 10ms duplicate 1% corrupt 30% "
            "reorder 5%") in c.calls()
    assert not any("pfifo" in x for x in c.calls())   # netem's jitter reorders unless asked not to
    # the plain primitive never adds netem, even when asked
    c2 = ShellCluster(tmp_path / "b") if (tmp_path / "b").mkdir() is None else None
    assert c2.degrade_link("node-0", {"loss_pct": 1, "delay_ms": 50})["mechanism"] == {"loss_pct": "iptables statistic"}
    assert not any("netem" in x for x in c2.calls())


def test_keep_order_puts_a_pfifo_under_netem(tmp_path):
    c = ShellCluster(tmp_path)
    out = c.netem_link("node-0", {"to": "data", "delay_ms": 50, "jitter_ms": 20, "keep_order": True})
    calls = c.calls()
    i = calls.index("tc qdisc add dev eth0 parent 1cb:10 handle 10cb: netem delay 50ms 20ms")
    assert calls[i + 1] == "tc qdisc add dev eth0 parent 10cb:1 handle 11cb: pfifo limit 10000"
    assert out["mechanism"] == {"delay_ms": "netem", "jitter_ms": "netem", "keep_order": "netem"}


SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm ActiveOpens OutSegs RetransSegs InErrs
Tcp: 1 7 {out} {retrans} 0
TcpExt: SyncookiesSent TCPSACKReorder TCPTSReorder TCPDSACKRecv TCPTimeouts
TcpExt: 0 {sack} 1 {dsack} 2
Cc: bbr
"""


def test_tcp_counters_read_the_kernels_tables_and_the_difference_names_what_the_fault_did(tmp_path):
    from chaosbench.cluster.primitives.links import tcp_counters, tcp_during
    before = tcp_counters(SNMP.format(out=1000, retrans=3, sack=0, dsack=1))
    assert before == {"segments_sent": 1000, "segments_retransmitted": 3, "reordering_seen_sack": 0,
                      "reordering_seen_timestamps": 1, "spurious_retransmits_dsack": 1, "retransmit_timeouts": 2,
                      "congestion_control": "bbr"}   # TCPSpuriousRTOs: not in this kernel's table, left out
    after = tcp_counters(SNMP.format(out=5000, retrans=403, sack=57, dsack=301))
    assert tcp_during(before, after) == {"segments_sent": 4000, "segments_retransmitted": 400,
                                         "reordering_seen_sack": 57, "reordering_seen_timestamps": 0,
                                         "spurious_retransmits_dsack": 300, "retransmit_timeouts": 0,
                                         "congestion_control": "bbr"}
    assert tcp_during(None, after) is None and tcp_during(before, None) is None   # unread: unknown, not zero
    assert tcp_during(after, before) is None   # counts that went down: the node restarted, its namespace is new


def test_restore_returns_what_the_nodes_tcp_counted_since_the_degrade(tmp_path):
    c = ShellCluster(tmp_path, TC_SHOW="")
    c.degrade_link("node-0", {"to": "data", "loss_pct": 2})
    tcp = c.restore_link("node-0")["tcp"]   # the stand-in node is this host: its own counters
    assert tcp["segments_sent"] >= 0 and tcp["segments_retransmitted"] >= 0 and tcp["congestion_control"]
    assert c.restore_link("node-0") == {"tcp": None}   # a restore without a degrade before it: nothing to compare


def test_restore_removes_chain_and_qdisc_and_verifies(tmp_path):
    c = ShellCluster(tmp_path, TC_SHOW="qdisc htb 1cb: root refcnt 2 r2q 10 default 0x1\n")
    c.restore_link("node-0")
    calls = c.calls()
    for cmd in ("iptables -D INPUT -j CHAOSBENCH-LINK", "iptables -D OUTPUT -j CHAOSBENCH-LINK",
                "iptables -F CHAOSBENCH-LINK", "iptables -X CHAOSBENCH-LINK", "tc qdisc del dev eth0 root"):
        assert cmd in calls


@pytest.mark.parametrize("left", [{"IPT_LEFT": "-N CHAOSBENCH-LINK\n"},
                                  {"TC_SHOW": "qdisc netem 10cb: parent 1cb:10 limit 1000\n"}])
def test_restore_fails_loudly_when_something_of_ours_is_left(tmp_path, left):
    c = ShellCluster(tmp_path, **left)
    with pytest.raises(ClusterError, match="degraded link not restored"):
        c.restore_link("node-0")


def test_restore_leaves_a_qdisc_that_is_not_ours(tmp_path):
    c = ShellCluster(tmp_path, TC_SHOW="qdisc noqueue 0: root refcnt 2\n")
    c.restore_link("node-0")
    assert not any(x.startswith("tc qdisc del") for x in c.calls())


class Degradable(RecordingCluster):
    def _answer(self, name, args):
        if name in ("degrade_link", "netem_link"):
            return {"targets": ["10.0.0.3"], "mechanism": {"loss_pct": "iptables statistic"}}
        return super()._answer(name, args)


def test_the_fault_record_says_which_mechanism_the_node_used(tmp_path):
    cluster = Degradable(tmp_path)
    fault = make_fault("packet_fault", {"node": "node-0", "peer": "node-1", "loss_pct": 2}, cluster, tmp_path / "f.jsonl")
    fault.inject()
    fault.heal()
    assert [n for n, _ in cluster.calls] == ["degrade_link", "restore_link"]
    assert cluster.calls[0][1][0] == "node-0" and cluster.calls[0][1][1]["peer"] == "node-1"
    inject, heal = [json.loads(x) for x in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert inject["target"] == "node-0->node-1"
    assert inject["params"]["mechanism"] == {"loss_pct": "iptables statistic"}
    assert inject["params"]["targets"] == ["10.0.0.3"] and heal["action"] == "heal"


def test_doctor_says_which_packet_mechanisms_the_kernel_offers():
    from chaosbench.doctor import Status
    from chaosbench.doctor.checks_system import packet_check
    here = "CONFIG_NETFILTER_XT_MATCH_STATISTIC=y\nCONFIG_NET_SCH_HTB=y\nCONFIG_NET_SCH_TBF=y\nCONFIG_NET_CLS_U32=y\n" \
           "# CONFIG_NET_SCH_NETEM is not set\n"
    r = packet_check(None, here)
    assert r.status == Status.PASS and "netem: no" in r.evidence and "iptables statistic: yes" in r.evidence
    assert "loss_pct and rate_kbit work here" in r.evidence and "nfqueue: no" in r.evidence
    nfq = here + "CONFIG_NETFILTER_NETLINK_QUEUE=y\nCONFIG_NETFILTER_XT_TARGET_NFQUEUE=m\n"
    r = packet_check(None, nfq)
    assert r.status == Status.PASS and "nfqueue: yes" in r.evidence and "by the NFQUEUE handler" in r.evidence
    r = packet_check(None, here.replace("# CONFIG_NET_SCH_NETEM is not set", "CONFIG_NET_SCH_NETEM=m"), cc="bbr")
    assert "netem: yes" in r.evidence and "refused" not in r.evidence and "reorder by netem" in r.evidence
    assert "TCP congestion control bbr" in r.evidence and "keep_order" in r.evidence
    r = packet_check(None, here.replace("CONFIG_NET_CLS_U32=y", ""))
    assert r.status == Status.WARN and "htb + u32: no" in r.evidence
