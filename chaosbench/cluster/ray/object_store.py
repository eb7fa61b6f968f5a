"""Fill one Ray node's object store (the fault `fill_object_store`), run on the head as a small Ray job.

Shipped as the source of `python -c` by the Ray backend (faults.py: OBJECT_STORE) and never imported by
the harness (Ray is not installed where it runs; only the stdlib is imported at module level):

    python -c SRC <node ip> <MiB> <fraction> <tag>

It connects to the cluster (`ray.init(address="auto")`), finds the node whose raylet listens on
<node ip>, starts an actor pinned there (`NodeAffinitySchedulingStrategy(soft=False)`, no CPU) that
`ray.put`s <MiB> MiB (or <fraction> of the node's object store capacity; the other is 0) in 4 MiB
arrays and holds their references: the objects' primary copies live in that node's plasma store, and
what does not fit Ray spills to the node's disk. It prints one JSON line once filled (what it put and
what the node's store reported), holds until its stdin closes or it gets SIGTERM, then kills the actor
(its objects are freed, spilled copies deleted) and prints a second JSON line. A line with "error" and
exit 2 when the fill could not start (no such node, the actor never started).
"""
from __future__ import annotations

import json
import signal
import sys
import time

MIB = 1 << 20
CHUNK = 4 * MIB


def store_stats(ip: str, port: int) -> dict:
    """The node's object store as its raylet reports it (MiB), or {} where this Ray cannot say."""
    try:
        from ray._private.internal_api import node_stats
        s = node_stats(ip, port, include_memory_info=False).store_stats
    except Exception as e:   # an internal API: report, never fail the fault on it
        return {"stats_error": f"{type(e).__name__}: {e}"[:200]}
    mib = lambda b: round(b / MIB, 1)   # noqa: E731
    return {"used_mb": mib(s.object_store_bytes_used), "avail_mb": mib(s.object_store_bytes_avail),
            "primary_mb": mib(s.object_store_bytes_primary_copy), "fallback_mb": mib(s.object_store_bytes_fallback),
            "spilled_mb": mib(s.spilled_bytes_total), "spilled_objects": int(s.spilled_objects_total),
            "restored_mb": mib(s.restored_bytes_total)}


def main(argv: list[str]) -> int:
    ip, mb, fraction, tag = argv[0], float(argv[1]), float(argv[2]), argv[3]

    def say(**what):
        print(json.dumps({"tag": tag, **what}), flush=True)

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    ray.init(address="auto", namespace="chaosbench-faults", logging_level="ERROR", log_to_driver=False)
    nodes = [n for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == ip]
    if not nodes:
        say(error=f"no live Ray node at {ip}: " + ", ".join(f"{n['NodeManagerAddress']} alive={n['Alive']}"
                                                             for n in ray.nodes()))
        return 2
    node = nodes[0]
    capacity = float(node["Resources"].get("object_store_memory", 0))
    target = int(mb * MIB) if mb else int(fraction * capacity)
    port = int(node["NodeManagerPort"])
    before = store_stats(ip, port)

    @ray.remote(num_cpus=0, max_restarts=0)
    class Filler:
        def fill(self, nbytes: int) -> dict:
            import numpy as np
            block = np.ones(CHUNK, dtype=np.uint8)
            self.refs, put, error, t0 = [], 0, None, time.monotonic()
            while put < nbytes:
                n = min(CHUNK, nbytes - put)
                try:
                    self.refs.append(ray.put(block[:n]))
                except Exception as e:   # ObjectStoreFullError, OutOfDiskError: what Ray did is the point
                    error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                    break
                put += n
            return {"put_mb": round(put / MIB, 1), "objects": len(self.refs), "put_error": error,
                    "fill_s": round(time.monotonic() - t0, 2), "actor_node": ray.get_runtime_context().get_node_id()}

    filler = Filler.options(name=f"{tag}", scheduling_strategy=NodeAffinitySchedulingStrategy(
        node_id=node["NodeID"], soft=False)).remote()
    try:
        got = ray.get(filler.fill.remote(target), timeout=240)
    except Exception as e:
        say(error=f"the filler actor on {ip} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        return 2
    on_node = got.pop("actor_node") == node["NodeID"]
    say(phase="filled", node_id=node["NodeID"], capacity_mb=round(capacity / MIB, 1), target_mb=round(target / MIB, 1),
        on_node=on_node, **got, before=before, store=store_stats(ip, port))

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        sys.stdin.read()   # held until the harness closes our stdin (or the exec goes)
    finally:
        ray.kill(filler)
        time.sleep(1.0)   # the raylet frees the dead owner's objects asynchronously
        say(phase="released", store=store_stats(ip, port))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
