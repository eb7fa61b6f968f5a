"""A restore in the middle of training continues the loss curve exactly (CPU, same seed)."""
import time

import torch

from trainer.checkpoint import CheckpointManager, load_checkpoint_to_model

STEPS, CRASH_AT = 16, 9


class Sampler:
    """Stateful shuffling sampler: the permutation of an epoch is a function of (seed, epoch)."""

    def __init__(self, n, seed):
        self.n, self.seed, self.epoch, self.offset = n, seed, 0, 0

    def next_batch(self, size):
        perm = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        idx = perm[self.offset:self.offset + size]
        self.offset += size
        if self.offset >= self.n:
            self.epoch, self.offset = self.epoch + 1, 0
        return idx

    def state_dict(self):
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, s):
        self.epoch, self.offset = s["epoch"], s["offset"]


def build(init_seed):
    torch.manual_seed(init_seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.2), torch.nn.GELU(), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    return model, opt, sched, Sampler(40, seed=7)


def train(model, opt, sched, sampler, data, start, stop, mgr=None):
    losses = {}
    for step in range(start + 1, stop + 1):
        x, y = data
        idx = sampler.next_batch(6)
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses[step] = loss.item()
        if mgr is not None:
            mgr.maybe_save(step, lambda step=step: {
                "step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "sampler": sampler.state_dict(), "rng": torch.get_rng_state()})
            time.sleep(0.02)  # let the background save land, as a real step would
    return losses


def test_losses_identical_with_and_without_restore(tmp_path, shm_dir, events):
    g = torch.Generator().manual_seed(3)
    data = (torch.randn(40, 8, generator=g), torch.randn(40, 1, generator=g))
    reference = train(*build(0), data, 0, STEPS)

    cfg = {"memory_snapshot_interval": 4, "checkpoint_interval": 8, "memory_dir": shm_dir,
           "nvme_dir": str(tmp_path / "nvme")}
    mgr = CheckpointManager(cfg, node="n0", run_id="r", emit=events)
    before = train(*build(0), data, 0, CRASH_AT, mgr)
    mgr.close(30)

    # the "restarted worker": different init and RNG, everything must come from the checkpoint
    model, opt, sched, sampler = build(99)
    state = CheckpointManager(cfg, node="n0", run_id="r", emit=events).restore()
    assert state["step"] == 8 and events.of("checkpoint_loaded")[-1]["tier"] == "memory"
    info = load_checkpoint_to_model(state, model, opt, sched)
    assert info["missing_keys"] == [] and info["step"] == 8
    sampler.load_state_dict(state["sampler"])
    torch.set_rng_state(state["rng"])
    after = train(model, opt, sched, sampler, data, state["step"], STEPS)

    assert before == {s: reference[s] for s in before}
    assert after == {s: reference[s] for s in after}  # exact on CPU; replayed step 9 included
