"""python -m chaosbench.export k8s SCENARIO [-o DIR]

Prints the manifests as one multi-document YAML, or writes one file per object into DIR
(apply with `kubectl apply -f DIR`). Exit codes: 0 written, 2 bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .k8s import ExportError, load_scenario, render, to_yaml, write


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="chaosbench export", description="render a scenario for another platform")
    sub = p.add_subparsers(dest="target", required=True)
    k = sub.add_parser("k8s", help="Kubernetes manifests: headless Service, Indexed Job, etcd, proxy")
    k.add_argument("scenario", help="scenario YAML file")
    k.add_argument("-o", "--output", metavar="DIR", help="write one YAML file per object here (default: stdout)")
    k.add_argument("--image", help="trainer image, also runs the proxy (default: the scenario's trainer.image, "
                                   "else chaosbench/trainer:latest)")
    k.add_argument("--workdir", default="/workspace",
                   help="where the image holds your project, for trainer.script/module (default /workspace)")
    k.add_argument("--etcd-image", default="quay.io/coreos/etcd:v3.5.17")
    k.add_argument("--proxy-image", help="a real Toxiproxy image instead of chaosbench's proxy")
    k.add_argument("-n", "--namespace")
    args = p.parse_args(argv)
    try:
        objs = render(load_scenario(args.scenario), image=args.image, etcd_image=args.etcd_image,
                      proxy_image=args.proxy_image, namespace=args.namespace, workdir=args.workdir)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.output:
        for path in write(objs, Path(args.output)):
            print(path)
    else:
        sys.stdout.write(to_yaml(objs))
    return 0
