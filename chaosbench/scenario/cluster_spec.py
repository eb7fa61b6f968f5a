"""The cluster a scenario asks for, as the backends' ClusterSpec."""
from __future__ import annotations

from pathlib import Path

from chaosbench import launchers
from chaosbench.cluster import jobenv
from chaosbench.cluster.base import ClusterSpec
from chaosbench.faults.disks import disk_layers
from chaosbench.scenario.loader import resolve_trainer_config, resolve_workdir
from chaosbench.scenario.model import Scenario

REPO = Path(__file__).resolve().parents[2]


def build_spec(s: Scenario, run_id: str, run_dir: Path, scenario_path: Path | None) -> ClusterSpec:
    c, t = s.cluster, s.trainer
    cfg = t.reference_config
    if cfg:
        # inside the repository: pass it repo-relative, so a container (repo at its own path) finds it too
        resolved = resolve_trainer_config(cfg, scenario_path)
        if resolved is not None:
            cfg = str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(resolved)
    job = [t.script, *t.args] if t.script is not None else ["-m", t.module, *t.args] if t.module is not None else None
    return ClusterSpec(run_id=run_id, run_dir=run_dir, nodes=c.nodes, procs_per_node=c.procs_per_node,
                       min_nodes=c.elastic.min_nodes, max_nodes=c.elastic.max_nodes, rendezvous=c.rendezvous,
                       max_restarts=c.elastic.max_restarts, trainer_config=cfg or "",
                       trainer_overrides=s.trainer_overrides() if cfg else dict(t.overrides), command=t.command, job_argv=job,
                       workdir=str(resolve_workdir(t.workdir, scenario_path)) if t.workdir else None,
                       trainer_image=t.image, progress_regex=t.progress.regex if t.progress else None,
                       checkpoint_tier=t.checkpoint_dir, env=dict(c.env),
                       nvme_size_mb=c.nvme_size_mb, shm_size_mb=c.shm_size_mb, persistent_nvme=c.persistent_nvme,
                       rdzv_timeouts=dict(c.rdzv_timeouts), launcher=t.launcher, launcher_args=list(t.launcher_args),
                       warm_start=c.warm_start and not t.user_job and t.launcher == "torchrun",
                       disk_layers=disk_layers(s.faults, s.node_names()),
                       fake_clock=any(f.kind == "clock_skew" for f in s.faults),
                       ray=t.ray.model_dump() if t.ray else {},
                       requirements=jobenv.requirements(t, scenario_path.parent if scenario_path else None,
                                                                 extra=launchers.get(t.launcher).requirements),
                       requirements_origin=requirements_origin(s, scenario_path))


def requirements_origin(s: Scenario, scenario_path: Path | None) -> str:
    """Where the job's requirements were declared, for pip's errors: the fields and the file."""
    t, where = s.trainer, str(scenario_path or "the scenario")
    parts = ["trainer.requirements"] if t.requirements else []
    if t.requirements_file:
        parts.append(f"trainer.requirements_file ({t.requirements_file})")
    return f"{' and '.join(parts) or 'trainer'} in {where}"
