"""What a python that is not ours (a user's trainer.image, a Slurm allocation's) has of the job's packages.

The probe runs there with only the standard library and prints one JSON object: name -> installed
version, or null where the distribution is missing. Distribution names, not modules: `pyyaml` is
imported as `yaml`, and the metadata knows the former.
"""
from __future__ import annotations

import json

from chaosbench.cluster.jobenv.reqs import name_of


def source(reqs: list[str]) -> str:
    names = sorted({name_of(r) for r in reqs})
    return ("import importlib.metadata as m, json\n"
            "def v(n):\n try:\n  return m.version(n)\n except m.PackageNotFoundError:\n  return None\n"
            f"print(json.dumps({{n: v(n) for n in {names!r}}}))")


def missing(output: str) -> list[str] | None:
    """The names the probe found missing; None when its output is not the probe's (python did not run)."""
    try:
        found = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return sorted(n for n, ver in found.items() if ver is None)


def versions(output: str) -> list[str]:
    """name==version of each package the probe found."""
    try:
        found = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return []
    return sorted(f"{n}=={ver}" for n, ver in found.items() if ver)
