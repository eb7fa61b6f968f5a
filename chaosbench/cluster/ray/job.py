"""A scenario's Ray Train job (`trainer.ray`) and the driver command that runs it (trainer/ray_driver.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from chaosbench.cluster.base import ClusterSpec

RAY_VERSION = "2.60.0"   # a cp311 manylinux wheel on PyPI
# train: Ray Train; default: the dashboard and its Jobs REST API (the address backend's way in, ray/address.py)
RAY_REQUIREMENT = f"ray[default,train]=={RAY_VERSION}"
REFERENCE_LOOP = "trainer.ray_loop:train_loop_per_worker"
S3_STORAGE = "s3://chaosbench/ray"
# storage_path values a scenario can name besides an absolute path inside the nodes
STORAGE_KINDS = ("shared", "s3")


@dataclass
class RayJob:
    loop: str = REFERENCE_LOOP          # MODULE:FUNCTION of the train_loop_per_worker
    max_failures: int = 0               # Ray Train's default: no retry at all
    storage: str = "shared"             # shared | s3 | an absolute path in the nodes (node-local: lost with a node)
    config: dict = field(default_factory=dict)   # the user's loop's config dict

    @classmethod
    def of(cls, spec: ClusterSpec) -> "RayJob":
        ray = dict(spec.ray or {})
        if spec.job_argv:   # the user's module names the loop; `-m module` as the job's argv
            module = spec.job_argv[1] if spec.job_argv[0] == "-m" else spec.job_argv[0].removesuffix(".py")
            ray.setdefault("loop", f"{module}:{ray.pop('function', 'train_loop_per_worker')}")
        ray.pop("function", None)
        return cls(**ray)

    @property
    def reference(self) -> bool:
        return self.loop == REFERENCE_LOOP


def refused_inputs(spec: ClusterSpec) -> list[str]:
    """What a Ray backend cannot run, each with why: the nodes run Ray's image and Ray starts the workers."""
    return [w for w, bad in (("trainer.image (the nodes run the Ray image)", spec.trainer_image),
                             ("trainer.command (a Ray job is a train loop, not a per-node argv)", spec.command),
                             ("trainer.launcher (Ray starts the workers itself)",
                              getattr(spec, "launcher", "torchrun") != "torchrun"))
            if bad]


def storage_path(job: RayJob, run_id: str, storage_in_node: str) -> str:
    if job.storage == "shared":
        return f"{storage_in_node}/{run_id}"
    if job.storage == "s3":
        return f"{S3_STORAGE}/{run_id}"
    return job.storage


def driver_argv(spec: ClusterSpec, job: RayJob, storage_in_node: str) -> list[str]:
    """`python -m trainer.ray_driver ...` for the head: scaling min..max over the nodes' workers."""
    lo, hi = spec.min_nodes * spec.procs_per_node, spec.max_nodes * spec.procs_per_node
    argv = ["python", "-m", "trainer.ray_driver", "--loop", job.loop, "--workers", f"{lo}:{hi}",
            "--max-failures", str(job.max_failures), "--storage", storage_path(job, spec.run_id, storage_in_node),
            "--name", spec.run_id, "--wait-nodes", str(spec.nodes)]
    if job.reference:
        from chaosbench.cluster.launch import _fmt
        argv += ["--config", spec.trainer_config]
        overrides = {"checkpoint.s3.enabled": True, **spec.trainer_overrides}
        for k, v in overrides.items():
            argv += ["--set", f"{k}={_fmt(v)}"]
        # the gloo group Ray forms: the trainer's own pg timeout, not TorchConfig's 30 minutes
        timeout = spec.trainer_overrides.get("elastic.pg_timeout_s")
        argv += ["--pg-timeout-s", str(timeout or 30)]
    else:
        argv += ["--loop-config", json.dumps(job.config)]
        if spec.progress_regex:
            argv += ["--progress", spec.progress_regex]
    return argv
