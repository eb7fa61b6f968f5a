"""One rank of the health-check test: join a 2-rank gloo group, start the HealthChecker, then
either freeze (rank 1: a silent peer) or submit a check and report how long detection took."""
import json
import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

from trainer.distributed import HealthChecker

rank, timeout_s = int(os.environ["RANK"]), float(sys.argv[1])
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
failures = []
checker = HealthChecker(timeout_s, lambda exc: failures.append((time.monotonic(), str(exc))))
checker.submit(1)                       # a healthy round first: both answer
time.sleep(1.0)
if rank == 1:
    print("frozen", flush=True)
    os.kill(os.getpid(), 19)            # SIGSTOP: connections stay open, nothing answers
    sys.exit(0)
healthy = not failures
t0 = time.monotonic()
checker.submit(2)
while not failures and time.monotonic() - t0 < timeout_s * 10:
    time.sleep(0.05)
print(json.dumps({"healthy_first": healthy, "detected": bool(failures),
                  "detect_s": failures[0][0] - t0 if failures else None,
                  "error": failures[0][1] if failures else None}), flush=True)
os._exit(0)
