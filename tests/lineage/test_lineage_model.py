"""The lineage model over synthetic histories: incarnations, rounds, restores, tracks, the world track."""
from chaosbench.checks.history import History
from chaosbench.checks.lineage import lineage, lineage_summary

from tests.checks.synth import flapping_node, node_loss, observed_node_loss


def test_node_loss_lineage():
    h = node_loss()
    lin = lineage(h)
    assert lineage(h) is lin                      # built once per History
    assert [len(r.members) for r in lin.rounds] == [3, 2]
    assert [r.world_size for r in lin.rounds] == [3, 2]
    assert lin.stride == 1
    second = lin.rounds[1]
    assert second.first_step == 41 and {m.restore.step for m in second.members} == {40}
    assert {m.restore.tier for m in second.members} == {"memory"} and second.members[0].restore.fault_id == "f1"
    assert [w.step for w in lin.world if w.round == 0] == list(range(1, 43))
    assert lin.world[-1].step == 100 and lin.contiguous_top()[0] == 100
    assert {i.ended for i in lin.rounds[0].members if i.node != "node-2"} == {"fatal: DistBackendError Connection reset by peer"}
    assert lin.tracks[0][0][0] == 1 and lin.tracks[2][-1][0] == 42


def test_flapping_rounds_and_history_rounds_agree():
    h = flapping_node()
    lin = lineage(h)
    assert [r.world_size for r in lin.rounds] == [3, 2, 3, 2, 3]
    assert h.rounds() == {i.key: i.round for i in lin.incarnations}


def test_observed_lineage_infers_restores_and_unions_ranks():
    h = observed_node_loss(rank0_only=True)
    lin = lineage(h)
    assert lin.observed and [r.world_size for r in lin.rounds] == [3, 2]
    assert all(m.restore is None or m.restore.kind == "inferred" for m in lin.incarnations)
    assert lin.world and lin.world[-1].step == 100    # a rank-0 print is the world's step here


def test_summary_is_json_shaped():
    import json
    s = lineage_summary(node_loss())
    json.dumps(s)
    assert set(s) == {"observed_only", "stride", "ranks", "rounds", "world"}
    assert [x["restore"]["step"] for x in s["ranks"]["0"] if x["restore"]] == [40]
    assert [(w["first_step"], w["last_step"]) for w in s["world"]] == [(1, 42), (41, 100)]


def test_empty_history():
    lin = lineage(History())
    assert lin.rounds == [] and lin.world == [] and lineage_summary(History())["world"] == []
