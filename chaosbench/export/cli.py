"""`chaosbench export k8s SCENARIO [-o DIR]`: a typer command group like every other (chaosbench/cli.py
mounts `app`; `python -m chaosbench.export` runs it alone).

Prints the manifests as one multi-document YAML, or writes one file per object into DIR
(apply with `kubectl apply -f DIR`). Exit codes: 0 written, 2 bad input, 3 the export itself broke.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

EXIT_BAD_INPUT, EXIT_HARNESS = 2, 3

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Export a scenario's cluster for other platforms.")


@app.callback()
def _group() -> None:   # keeps `export` a group with its one command: `export k8s SCENARIO`, not `export SCENARIO`
    pass


# argparse's -h stays (scripts and habits use it); the rest of the CLI has --help only
@app.command("k8s", context_settings={"help_option_names": ["-h", "--help"]})
def k8s(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help="scenario YAML file"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="DIR",
                                          help="write one YAML file per object here (default: stdout)"),
    image: Optional[str] = typer.Option(None, "--image", metavar="IMAGE", help=(
        "trainer image, also runs the proxy (default: the scenario's trainer.image, else chaosbench/trainer:latest)")),
    workdir: str = typer.Option("/workspace", "--workdir", metavar="WORKDIR", show_default=False, help=(
        "where the image holds your project, for trainer.script/module (default /workspace)")),
    etcd_image: str = typer.Option("quay.io/coreos/etcd:v3.5.17", "--etcd-image", metavar="ETCD_IMAGE",
                                   help="etcd image"),
    proxy_image: Optional[str] = typer.Option(None, "--proxy-image", metavar="PROXY_IMAGE",
                                              help="a real Toxiproxy image instead of chaosbench's proxy"),
    namespace: Optional[str] = typer.Option(None, "--namespace", "-n", metavar="NAMESPACE",
                                            help="Kubernetes namespace of every object (default: none set)"),
):
    """Kubernetes manifests (headless Service, Indexed Job, etcd, proxy) for SCENARIO."""
    from .k8s import ExportError, load_scenario, render, to_yaml, write
    try:
        objs = render(load_scenario(scenario), image=image, etcd_image=etcd_image,
                      proxy_image=proxy_image, namespace=namespace, workdir=workdir)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except Exception as e:   # bad input is ExportError; anything else is the exporter's bug
        print(f"harness error: {type(e).__name__}: {e}", file=sys.stderr)
        raise typer.Exit(EXIT_HARNESS) from None
    if output is None:
        sys.stdout.write(to_yaml(objs))
        return
    try:
        paths = write(objs, output)
    except OSError as e:   # -o names a place we cannot write
        print(f"error: --output {output}: cannot write there ({e.strerror or e}); choose a writable directory",
              file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    for path in paths:
        print(path)


def main(argv: list[str] | None = None) -> int:
    """`python -m chaosbench.export` and tests: the same commands, the exit code returned."""
    try:
        app(args=list(sys.argv[1:] if argv is None else argv), prog_name="chaosbench export")
    except SystemExit as e:   # typer exits 2 on a usage error, as on any bad input
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
    return 0
