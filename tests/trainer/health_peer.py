"""One rank of the heartbeat tests: join a 2-rank gloo group, start the HealthChecker, then
`freeze` (rank 1 stops itself: a silent peer; rank 0 reports how long detection took) or
`stop` (rank 1 finishes 3 s after rank 0; both must stop together without a false alarm)."""
import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch.distributed as dist

from trainer.distributed import HealthChecker

mode, rank, timeout_s = sys.argv[1], int(os.environ["RANK"]), float(sys.argv[2])
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
failures = []
checker = HealthChecker(timeout_s, 0.5, lambda exc: failures.append((time.monotonic(), str(exc))))
time.sleep(1.5)                         # a few healthy heartbeats first
result = {"healthy_first": not failures and checker.beats >= 2}
if mode == "freeze":
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)   # connections stay open, nothing answers
    t0 = time.monotonic()
    while not failures and time.monotonic() - t0 < timeout_s * 10:
        time.sleep(0.05)
    result.update(detected=bool(failures), detect_s=failures[0][0] - t0 if failures else None,
                  error=failures[0][1] if failures else None)
else:
    if rank == 1:
        time.sleep(3.0)                 # longer than the heartbeat timeout
    result.update(stopped=checker.close(), failures=[f for _, f in failures], beats=checker.beats)
print(json.dumps(result), flush=True)
os._exit(0)
