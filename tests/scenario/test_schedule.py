"""Trigger logic with synthetic clocks and events: nothing touches a cluster here."""
from chaosbench.scenario import parse_scenario
from chaosbench.scenario.schedule import Schedule


def sched(faults, seed=0):
    s = parse_scenario({"name": "t", "trainer": {"config": None, "command": ["true"]},
                        "cluster": {"nodes": 3}, "faults": faults, "expect": {"no_fatal": True}})
    return Schedule(s.faults, seed)


def fire(sc, now, step=0):
    """Apply whatever is due at `now` the way the runner does; return [(kind, fault_id)]."""
    done = []
    for a in sc.due(now, step):
        (sc.mark_injected if a.kind == "inject" else sc.mark_healed)(a.planned, now)
        done.append((a.kind, a.planned.fault_id))
    return done


def test_step_trigger_fires_once_at_the_step():
    sc = sched([{"at": {"step": 40}, "kill_node": {"node": "node-2"}}])
    assert fire(sc, 1.0, step=39) == []
    assert fire(sc, 1.5, step=41) == [("inject", "f1")]
    assert fire(sc, 2.0, step=80) == []
    assert sc.finished and sc.pending == 0


def test_seconds_trigger_with_delay_and_duration_heal():
    sc = sched([{"at": {"seconds": 5, "delay_s": 1}, "pause_node": {"node": "node-1"}, "duration_s": 3}])
    assert fire(sc, 5.9) == []
    assert fire(sc, 6.0) == [("inject", "f1")]
    assert fire(sc, 8.9) == [] and not sc.finished
    assert fire(sc, 9.0) == [("heal", "f1")]
    assert sc.finished


def test_event_trigger_matches_fields_and_occurrence():
    sc = sched([{"at": {"event": "checkpoint_saved", "where": {"tier": "nvme"}, "occurrence": 2},
                 "fill_nvme": {"node": "node-0"}}])
    sc.observe_event({"event": "checkpoint_saved", "tier": "memory"}, 1.0)
    sc.observe_event({"event": "checkpoint_saved", "tier": "nvme"}, 2.0)
    assert fire(sc, 2.5) == []
    sc.observe_event({"event": "step", "tier": "nvme"}, 3.0)
    sc.observe_event({"event": "checkpoint_saved", "tier": "nvme"}, 4.0)
    assert fire(sc, 4.0) == [("inject", "f1")]


def test_after_fault_waits_for_heal_of_the_other_fault():
    sc = sched([{"id": "cut", "at": {"seconds": 1}, "link_down": {"link": "etcd"}, "duration_s": 10},
                {"at": {"after_fault": "cut", "delay_s": 2}, "kill_node": {"node": "node-1"}}])
    assert fire(sc, 1.0) == [("inject", "cut")]
    assert fire(sc, 5.0) == []
    assert fire(sc, 11.0) == [("heal", "cut")]
    assert fire(sc, 12.9) == []
    assert fire(sc, 13.0) == [("inject", "f2")]


def test_after_one_shot_fault_counts_from_injection():
    sc = sched([{"at": {"step": 10}, "kill_worker": {"node": "node-0"}},
                {"at": {"after_fault": "f1", "delay_s": 3}, "kill_worker": {"node": "node-1"}}])
    assert fire(sc, 2.0, step=10) == [("inject", "f1")]
    assert fire(sc, 4.9, step=20) == []
    assert fire(sc, 5.0, step=20) == [("inject", "f2")]


def test_default_duration_heals_total_failure_at_once():
    sc = sched([{"at": {"seconds": 1}, "kill_all": {"wipe": "all"}}])
    assert fire(sc, 1.0) == [("inject", "f1")]
    assert fire(sc, 1.0) == [("heal", "f1")]


def test_repeat_is_seeded_and_replayable():
    faults = [{"at": {"seconds": 2}, "kill_node": {"node": "random"}, "duration_s": 1,
               "repeat": {"times": 3, "every_s": 10, "jitter_s": 4}}]

    def timeline(seed):
        sc, out = sched(faults, seed), []
        t = 0.0
        while not sc.finished and t < 100:
            out += [(k, fid, round(t, 1)) for k, fid in fire(sc, t)]
            t += 0.1
        return out

    a, b, c = timeline(7), timeline(7), timeline(8)
    assert a == b and a != c
    injects = [x for x in a if x[0] == "inject"]
    assert [x[1] for x in injects] == ["f1", "f1#2", "f1#3"]
    gaps = [injects[i + 1][2] - injects[i][2] for i in range(2)]
    assert all(10 <= g <= 14.1 for g in gaps)
    assert len([x for x in a if x[0] == "heal"]) == 3


def test_unhealed_lists_faults_still_in_place():
    sc = sched([{"at": {"seconds": 0}, "partition": {"node": "node-1"}, "duration_s": 60}])
    fire(sc, 0.0)
    assert [p.fault_id for p in sc.unhealed()] == ["f1"]
