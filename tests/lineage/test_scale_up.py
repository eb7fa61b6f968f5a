"""A restart that only admits a node (every node of the round before stays: a late starter, a
replacement) is an elastic scale-up and explains itself; a restart that loses a node with no fault
behind it does not. Seen in CI: node-2 of a local run started 19 s late and torchrun re-formed the
group around it before any fault."""
from chaosbench.checks import evaluate
from chaosbench.scenario.model import Expect

from tests.checks.synth import ev, node_loss


def _restart_with(nodes: list[str]):
    """After the node_loss recovery (node-0, node-1 at world size 2 to step 100), a third round with
    `nodes` restores memory@100 at t=14 and trains 101..125."""
    h = node_loss()
    world = len(nodes)
    for r, n in enumerate(nodes):
        h.events += [ev(14.0, "phase", n, r, world, restart=2, phase="rendezvous"),
                     ev(14.5, "checkpoint_loaded", n, r, world, restart=2, tier="memory", step=100,
                        source="local" if n != "node-2" else "peer", duration_s=0.05, checksum_ok=True, bytes=1)]
        h.events += [ev(15.0 + 0.1 * i, "step", n, r, world, restart=2, step=101 + i, loss=2.5) for i in range(25)]
    h.events.sort(key=lambda e: e["ts"])
    return {r.name: r for r in evaluate(h, Expect())[1]}["invariant:progress"]


def test_a_node_joining_every_earlier_member_explains_the_restart():
    r = _restart_with(["node-0", "node-1", "node-2"])
    assert r.status == "passed", r.reason
    assert "node-2 joined the job (an elastic scale-up)" in r.reason


def test_a_node_lost_without_a_fault_is_still_unexplained():
    r = _restart_with(["node-0"])
    assert r.status == "failed" and "unexplained restart" in r.reason, r.reason
