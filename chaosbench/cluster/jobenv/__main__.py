"""`python -m chaosbench.cluster.jobenv`: a job's packages outside a run.

    fetch   -r requirements.txt [SPEC ...]            their wheels into the wheelhouse (set-up: tests run offline)
    image   -r requirements.txt [SPEC ...]            the docker job image for the current node image
    install --prefix DIR [--python PY] -r FILE [SPEC ...]  a prefix for that python (Slurm: on shared storage,
                                                      then CHAOSBENCH_SLURM_JOBENV=DIR; docs/slurm.md)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.jobenv.reqs import Refused, merged, parse_file


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaosbench.cluster.jobenv", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("fetch", "image", "install"):
        p = sub.add_parser(name)
        p.add_argument("-r", "--requirements-file", action="append", default=[])
        p.add_argument("specs", nargs="*")
        if name == "install":
            p.add_argument("--prefix", required=True, type=Path)
            p.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    try:
        reqs = merged(args.specs, *[parse_file(Path(f)) for f in args.requirements_file])
    except (Refused, OSError) as exc:
        print(f"jobenv: error: {exc}", file=sys.stderr)
        return 2
    if not reqs:
        print("jobenv: error: no requirements given (-r FILE or SPEC)", file=sys.stderr)
        return 2
    origin = " ".join(args.requirements_file) or "the command line"
    try:
        from chaosbench.cluster.docker import images
        if args.cmd == "fetch":
            from chaosbench.cluster.jobenv.resolve import fetch
            print("\n".join(fetch(reqs, images.CACHE / "wheels", origin)))
        elif args.cmd == "image":
            from chaosbench.cluster.jobenv.image import docker_image
            print(docker_image(images.node_image(), reqs, origin))
        else:
            from chaosbench.cluster.jobenv.local import install
            print("\n".join(install(reqs, args.prefix.resolve(), origin, args.python)))
    except ClusterError as exc:
        print(f"jobenv: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
