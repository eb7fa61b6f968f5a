"""The checkpointed state survives `torch.load(weights_only=True)` and a restore continues the
run bit-for-bit: same losses with and without a save/load in the middle."""
import io
import random

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer.config import DEFAULTS
from trainer.data.dataset import TokenIndex
from trainer.data.sampler import StatefulSampler
from trainer.model import build_model
from trainer.scaling import plan_batches
from trainer.state import build_state, load_state
from trainer.train import WARMUP_STEPS, train_step


@pytest.fixture(scope="module")
def process_group(tmp_path_factory):
    store = dist.FileStore(str(tmp_path_factory.mktemp("pg") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def fresh(seed=0):
    torch.manual_seed(seed)
    model = build_model(DEFAULTS["training"]["model"])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP_STEPS))
    return model, opt, sched


def run_steps(objs, sampler, index, n):
    model, opt, sched = objs
    ddp = DDP(model)
    plan = plan_batches("variable_batch", 4, 1)
    return [train_step(ddp, index, sampler, plan, 32, 0, 1, opt, sched, torch.device("cpu"))[0] for _ in range(n)]


def test_restore_continues_the_loss_curve_exactly(process_group):
    index = TokenIndex("trainer/data/corpus/tiny_corpus.idx")
    n = index.num_samples(32)

    objs, sampler = fresh(), StatefulSampler(n, 5)
    straight = run_steps(objs, sampler, index, 8)

    objs, sampler = fresh(), StatefulSampler(n, 5)
    first = run_steps(objs, sampler, index, 4)
    buf = io.BytesIO()
    torch.save(build_state(4, *objs, sampler, world_size=1), buf)
    random.random(), torch.rand(3)                                  # disturb the RNGs: restore must undo it
    buf.seek(0)
    state = torch.load(buf, weights_only=True)                      # no pickled classes in the state
    objs2, sampler2 = fresh(seed=99), StatefulSampler(n, 5)         # different init: all must come from state
    assert load_state(state, *objs2, sampler2) == 4
    assert state["samples_seen"] == sampler2.samples_seen == 16 and state["world_size"] == 1
    rest = run_steps(objs2, sampler2, index, 4)
    assert first + rest == pytest.approx(straight, rel=1e-6)
