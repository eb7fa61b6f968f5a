"""A tiny worker for the stuck-rendezvous test: writes one `phase` event, as the trainer would.

It only runs if the rendezvous completes, which the test makes impossible."""
import json
import os
import time

d = os.environ["CHAOSBENCH_EVENTS_DIR"]
os.makedirs(d, exist_ok=True)
node = os.environ.get("CHAOSBENCH_NODE", "node-0")
with open(os.path.join(d, f"events-{node}-local{os.environ['LOCAL_RANK']}.jsonl"), "a") as f:
    f.write(json.dumps({"ts": time.time(), "event": "phase", "phase": "training", "node": node,
                        "rank": int(os.environ["RANK"]), "local_rank": int(os.environ["LOCAL_RANK"]),
                        "world_size": int(os.environ["WORLD_SIZE"]), "restart_count": 0}) + "\n")
