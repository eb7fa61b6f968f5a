"""A job's own dependencies (`trainer.requirements`, `trainer.requirements_file`, a launcher's pins):
merged and normalised here, installed offline from the wheelhouse into a derived docker image
(image.py) or a cached local prefix (local.py), put in front of the job's PYTHONPATH/PATH by env.py.
docs/byo-trainer.md#your-jobs-own-packages says what a user writes and what each backend does.
"""
from __future__ import annotations

from pathlib import Path

from chaosbench.cluster.jobenv.env import PREFIX_IN_IMAGE, job_env
from chaosbench.cluster.jobenv.reqs import Refused, merged, parse_file
from chaosbench.cluster.jobenv.resolve import PipFailed

__all__ = ["PREFIX_IN_IMAGE", "PipFailed", "Refused", "docker_image", "job_env", "local_prefix", "requirements",
           "packages", "requirements_path"]


def requirements_path(requirements_file: str, scenario_dir: Path | None) -> Path:
    """trainer.requirements_file: absolute, or relative to the scenario file's directory (as workdir)."""
    p = Path(requirements_file).expanduser()
    return p if p.is_absolute() or scenario_dir is None else (scenario_dir / p).resolve()


def requirements(trainer_cfg, scenario_dir: Path | None, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The job's requirements: trainer.requirements + trainer.requirements_file's + `extra` (a launcher's
    own pins, e.g. nvidia-resiliency-ext==0.4.1), normalised, deduplicated, sorted. Raises Refused."""
    from_file = []
    if getattr(trainer_cfg, "requirements_file", None):
        from_file = parse_file(requirements_path(trainer_cfg.requirements_file, scenario_dir))
    return merged(list(getattr(trainer_cfg, "requirements", None) or []), from_file, list(extra))


def docker_image(node_image: str, reqs: list[str], origin: str = "") -> str:
    from chaosbench.cluster.jobenv.image import docker_image as build
    return build(node_image, reqs, origin)


def local_prefix(reqs: list[str], origin: str = "") -> Path:
    from chaosbench.cluster.jobenv.local import local_prefix as install
    return install(reqs, origin)


def packages(image_or_prefix: str | Path) -> list[str]:
    """name==version of the job's packages as installed in a job image (a tag) or a local prefix (a Path)."""
    if isinstance(image_or_prefix, Path):
        from chaosbench.cluster.jobenv.local import prefix_packages
        return prefix_packages(image_or_prefix)
    from chaosbench.cluster.jobenv.image import image_packages
    return image_packages(image_or_prefix)
