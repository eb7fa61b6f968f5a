"""A tiny torchrun worker for rendezvous tests: all-reduces once per step and logs what it saw.

Every step appends {"node", "rank", "world", "restart", "pid", "step", "sum"} to EVENTS_DIR/<node>.jsonl;
"sum" is the all-reduced count of ranks, so a line proves the collective really ran at that world
size. All ranks stop together once STOP_FILE exists (the flag is all-reduced too).
"""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    events_dir, stop_file, node = sys.argv[1], sys.argv[2], os.environ["RDZV_TEST_NODE"]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    path = os.path.join(events_dir, f"{node}.jsonl")
    step = 0
    while True:
        t = torch.tensor([1.0, float(os.path.exists(stop_file))])
        dist.all_reduce(t)
        with open(path, "a") as f:
            f.write(json.dumps({"ts": time.time(), "node": node, "rank": rank, "world": world,
                                "restart": restart, "pid": os.getpid(), "step": step,
                                "sum": int(t[0])}) + "\n")
        if t[1] > 0:
            break
        step += 1
        time.sleep(0.2)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
