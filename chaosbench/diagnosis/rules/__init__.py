"""The findings engine: one small rule per module, each `check(rec) -> list[Finding]` over the recorded
run. A rule that lacks its evidence returns [] (no generic advice). Order: causes of a failed run first."""
from . import (checkpoint_interval, collective_timeout, epoch_restart, missing_dir, missing_package, partial_checkpoint,
               oom_kill, preempt_save, rank0_local, ray_train, rdzv_keepalive, reordering_jitter, workdir_write)

RULES = (missing_package, workdir_write, missing_dir, ray_train, partial_checkpoint, rank0_local, epoch_restart, checkpoint_interval,
         preempt_save, rdzv_keepalive, collective_timeout, oom_kill, reordering_jitter)
