"""Saves checkpoints of growing steps to one tier, forever, printing `saved STEP` after each save
returns; the crash-consistency test SIGKILLs it at a random moment (config from CRASH_CFG/CRASH_TIER)."""
import json
import os
import sys

from ckpt_helpers import toy_state
from trainer.checkpoint import CheckpointManager

cfg, tier = json.loads(os.environ["CRASH_CFG"]), os.environ["CRASH_TIER"]
mgr = CheckpointManager(cfg, node="n0", run_id="crash", emit=lambda e, f: None)
step = int(os.environ.get("CRASH_FIRST_STEP", "1"))
while True:
    mgr.save(toy_state(step, n=int(os.environ["CRASH_N"])), tier=tier)
    print(f"saved {step}", flush=True)
    sys.stdout.flush()
    step += 1
