"""A tiny DDP training script for the multi-process checkpoint test (launched by torchrun).

It uses only the checkpoint package, not the reference trainer. Config comes from env vars:
CKPT_TEST_CFG (JSON checkpoint section), CKPT_TEST_MAX_STEPS, CKPT_TEST_STEP_SLEEP.
Data for (step, rank) is a pure function of the seed, so a replayed step gives the same loss.
"""
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer.checkpoint import CheckpointManager, load_checkpoint_to_model

SEED = 1234


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    node = os.environ["CHAOSBENCH_NODE"]
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    path = os.path.join(os.environ["CHAOSBENCH_EVENTS_DIR"], f"events-{node}-local{local_rank}.jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    out = open(path, "a", buffering=1)

    def emit(event, fields):
        line = {"ts": time.time(), "event": event, "node": node, "rank": rank, "local_rank": local_rank,
                "world_size": world, "restart_count": restart, "pid": os.getpid(),
                "tag": os.environ.get("CKPT_TEST_TAG", ""), **fields}
        out.write(json.dumps(line) + "\n")

    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Dropout(0.1), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1))
    ddp = DDP(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    mgr = CheckpointManager(json.loads(os.environ["CKPT_TEST_CFG"]), node=node, rank=rank,
                            local_rank=local_rank, world_size=world, local_world_size=local_world,
                            run_id=os.environ["CHAOSBENCH_RUN_ID"], emit=emit)
    step = 0
    state = mgr.restore()
    if state is not None:
        load_checkpoint_to_model(state, ddp, opt)
        torch.set_rng_state(state["rng"])
        step = state["step"]
    max_steps, pause = int(os.environ["CKPT_TEST_MAX_STEPS"]), float(os.environ["CKPT_TEST_STEP_SLEEP"])
    while step < max_steps:
        g = torch.Generator().manual_seed(SEED * 100003 + step * 101 + rank)
        x = torch.randn(32, 16, generator=g)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        mgr.maybe_save(step, lambda: {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                                      "rng": torch.get_rng_state()})
        emit("step", {"step": step, "loss": loss.item()})
        time.sleep(pause)
    mgr.close(60)
    emit("run_complete", {"step": step})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
