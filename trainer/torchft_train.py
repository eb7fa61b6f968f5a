"""The reference trainer in torchft's idiom: one replica group per node, kept in the Lighthouse's quorum by
torchft's Manager; the Manager's own allreduce on the gradients (as torchft's own tests call it) and its
Optimizer wrapper in the loop. No checkpoint is written or read: a group that (re)joins heals from a live
peer (the Manager fetches the peer's state_dict over HTTP and calls `load_state_dict`), and survivors never
restart.

    chaosbench runs it for trainer.launcher torchft (chaosbench/launchers/torchft.py); by hand:
    REPLICA_GROUP_ID=0 TORCHFT_LIGHTHOUSE=http://localhost:29510 torchrun --standalone --nproc-per-node=1 \\
        -m trainer.torchft_train --config trainer/configs/tiny.yaml

Same config, model, data and events as trainer/train.py (docs/events.md); what differs: the step is the
Manager's (committed steps), a heal is a `checkpoint_loaded` with `tier: memory`, `source: peer`, `live: true`
(the peer's state in memory, not a checkpoint), and the checkpoint section is not used. The torchrun path
(trainer/train.py) imports nothing from here or from torchft.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from datetime import timedelta

import torch
import torch.nn.functional as F

from trainer.config import load_config, resolve_path
from trainer.data.dataset import TokenIndex
from trainer.data.sampler import StatefulSampler
from trainer.events import EventWriter
from trainer.model import build_model

log = logging.getLogger("trainer")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m trainer.torchft_train", description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    return ap.parse_args(argv)


def allreduce_grads(manager, params) -> bool:
    """Average the gradients over the quorum's groups with the Manager's own allreduce, waited on here, as torchft's
    own tests call it (`manager.allreduce(t).wait()`), in one flat tensor: one allreduce a step.

    Not torchft's DistributedDataParallel: in torchft 0.2.0 its comm hook asserts on the future of an allreduce that
    failed (`assert fut._fut`, torchft/ddp.py), which kills a survivor whose peer died in the middle of it. Here the
    failure is the Manager's: `wait()` reports it and returns False, the step does not commit (the Optimizer
    wrapper asks should_commit) and the next quorum goes on without the lost group. Returns what wait() said."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return True
    flat = torch.cat([g.reshape(-1) for g in grads])
    ok = manager.allreduce(flat).wait()   # divides by the quorum's participants on success
    at = 0
    for g in grads:
        g.copy_(flat[at:at + g.numel()].view_as(g))
        at += g.numel()
    return ok is not False


def run(events: EventWriter, args: argparse.Namespace) -> None:
    from torchft import Manager, Optimizer, ProcessGroupGloo
    events.emit("phase", {"phase": "config"})
    cfg, _ = load_config(args.config, args.set)
    t, el, d = cfg["training"], cfg["elastic"], cfg["data"]
    torch.manual_seed(t["seed"])   # every group starts from the same weights
    index = TokenIndex(resolve_path(d["index_path"]), [resolve_path(f) for f in d["files"]], d["text_key"])
    group = int(os.environ.get("REPLICA_GROUP_ID", 0))
    sampler = StatefulSampler(index.num_samples(t["seq_len"]), t["seed"] + group)   # each group its own data
    model = build_model(t["model"])
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"])
    healed: dict = {}

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": opt.state_dict(), "sampler": sampler.state_dict()}

    def load_state_dict(sd: dict) -> None:   # a heal: the Manager hands us a live peer's state (before the commit)
        t0 = time.time()
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])
        # logged now, at the heal: the step is the peer's (the Manager took it over), the commit comes after
        events.emit("checkpoint_loaded", {"tier": "memory", "source": "peer", "live": True,
                                          "step": manager.current_step(), "duration_s": round(time.time() - t0, 4),
                                          "checksum_ok": True})
        healed.update(at=t0)

    events.emit("phase", {"phase": "process_group"})
    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=el["pg_timeout_s"])), min_replica_size=1,
                      load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"{events.node}", timeout=timedelta(seconds=el["pg_timeout_s"]))
    optimizer = Optimizer(manager, opt)
    events.emit("phase", {"phase": "training"})
    fresh = True
    while manager.current_step() < t["max_steps"]:
        t0 = time.time()
        batch = index.batch(sampler.next_global_batch(t["per_worker_batch_size"]), t["seq_len"])
        before = manager.current_step()
        optimizer.zero_grad()   # starts this step's quorum; a heal happens inside it
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        loss.backward()
        allreduce_grads(manager, model.parameters())
        optimizer.step()   # steps (and counts) only when every group in the quorum committed
        step = manager.current_step()
        just_healed = bool(healed)
        healed.clear()
        if fresh and not just_healed:
            events.emit("checkpoint_fresh_start", {})
        fresh = False
        if step > before:   # a heal's own step ran its forward pass on the weights from before the heal: no loss
            events.emit("step", {"step": step, **({} if just_healed else {"loss": float(loss)}),
                                 "step_time_s": round(time.time() - t0, 4), "replicas": manager.num_participants()})
        if t["step_sleep_s"]:
            time.sleep(t["step_sleep_s"])
    events.emit("run_complete", {"step": manager.current_step()})


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)   # torchft logs its quorums and heals at INFO
    events = EventWriter()
    try:
        run(events, parse_args(argv))
    except BaseException as exc:  # noqa: BLE001 — reported as `fatal`, then the worker leaves non-zero
        events.emit("fatal", {"error": str(exc), "error_type": type(exc).__name__})
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
