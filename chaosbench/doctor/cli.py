"""python -m chaosbench.doctor [--scenario FILE | --env] [--run RUN_DIR] [--json]

Exit codes: 0 nothing failed (warnings allowed), 1 a check failed or the run is stuck/failed, 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .diagnose import DEFAULT_TIMEOUT_S, diagnose_run
from .preflight import run_preflight
from .render import checks_json, render_checks
from .result import Status
from .target import DoctorInputError, from_env, from_scenario, split_hostport


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chaosbench doctor", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--scenario", metavar="FILE", help="check the setup a scenario file describes")
    src.add_argument("--env", action="store_true", help="check this environment (launcher variables, "
                     "PET_* torchrun settings, CHAOSBENCH_*); the default without --scenario/--run")
    p.add_argument("--run", metavar="RUN_DIR", help="diagnose a (possibly stuck) run from reports/<run-id>/")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--config", help="trainer config YAML (checkpoint and model sections)")
    p.add_argument("--rdzv-backend", help="c10d | etcd | etcd-v2 | etcd-v3 (default: PET_RDZV_BACKEND / scenario)")
    p.add_argument("--rdzv-endpoint", help="HOST:PORT of the rendezvous (default: PET_RDZV_ENDPOINT / scenario)")
    p.add_argument("--etcd", metavar="URL", help="etcd endpoint to check, e.g. http://127.0.0.1:2379")
    p.add_argument("--run-id", help="rendezvous run id (default: CHAOSBENCH_RUN_ID / TORCHELASTIC_RUN_ID)")
    p.add_argument("--wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for the master to accept connections")
    p.add_argument("--gpu", action="store_true", help="the setup needs GPUs (FAIL if none are usable)")
    p.add_argument("--no-versions", action="store_true", help="skip the torch/NCCL/GPU checks (no torch import)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"--run: seconds without progress that count as stuck (default {DEFAULT_TIMEOUT_S:.0f})")
    p.add_argument("--nodes", type=int, help="--run: expected node count (default: from result.json/scenario.yaml)")
    return p


def _diagnose(args) -> int:
    rendezvous = None
    run_dir = Path(args.run)
    if args.rdzv_endpoint:   # live c10d state, when the store is still up
        from .rdzv_probe import c10d_state
        host, port = split_hostport(args.rdzv_endpoint, 29400)
        try:
            rendezvous = c10d_state(host, port, args.run_id or run_dir.name)
        except Exception as e:  # an unreachable store is itself evidence; report it, keep diagnosing
            rendezvous = {"error": f"{type(e).__name__}: {e}"}
    elif args.etcd:   # etcd-v3 / etcd rendezvous: who joined, from the state in etcd
        from .checks_etcd import run_info
        host = args.etcd.split("://", 1)[-1]
        info = run_info(host, args.run_id or run_dir.name)
        runs = (info or {}).get("runs") or []
        rendezvous = ({"source": f"etcd {host} ({runs[0].layout})", "participants": runs[0].participants,
                       "closed": runs[0].closed, "heartbeat_age_s": runs[0].heartbeat_age_s} if runs else
                      {"error": f"no rendezvous state for run id {args.run_id or run_dir.name!r} in etcd {host}"})
    d = diagnose_run(run_dir, no_progress_timeout_s=args.timeout, expected_nodes=args.nodes, rendezvous=rendezvous)
    found = _findings(run_dir)
    if args.json:
        print(json.dumps({**d.to_dict(), "diagnosis": found}, indent=2, default=str))
    else:
        from rich.console import Console
        from rich.markup import escape
        c = Console()
        color = "red" if d.stuck or d.phase == "failed" else "green"
        c.print(f"[{color}][bold]{escape(d.cause)}[/bold][/{color}]")
        for line in d.evidence:
            c.print(f"  - {escape(line)}")
        if d.fix:
            c.print(f"[bold]fix:[/bold] {escape(d.fix)}")
        render_findings(c, found)
    return 1 if d.stuck or d.phase == "failed" else 0


def _findings(run_dir: Path) -> dict | None:
    """What broke and what to change (chaosbench/diagnosis), from the recorded run dir, live or finished."""
    try:
        from chaosbench.diagnosis import diagnose
        return diagnose(run_dir).to_dict()
    except Exception as e:   # the stuck/phase diagnosis above stands without it
        return {"error": f"{type(e).__name__}: {e}"}


def render_findings(c, found: dict | None) -> None:
    from rich.markup import escape
    if not found or found.get("error"):
        c.print(f"[yellow]findings not available: {escape(str((found or {}).get('error')))}[/yellow]")
        return
    rc = found.get("root_cause")
    if rc:
        c.print(f"[bold]root cause:[/bold] {escape(str(rc.get('summary')))}")
    if not found.get("findings"):
        c.print("[green]what to fix: no finding (no rule found its evidence in this run)[/green]")
    for f in found.get("findings") or []:
        c.print(f"[{'red' if f.get('severity') == 'cause' else 'yellow'}][bold]what to fix:[/bold][/] {escape(f['title'])}")
        for e in f.get("evidence") or []:
            c.print(f"  - {escape(str(e.get('source')))}: {escape(str(e.get('text'))[:200])}")
        c.print(f"  [bold]change:[/bold] {escape(f['fix'])}")
        if f.get("effect"):
            c.print(f"  [bold]expected:[/bold] {escape(f['effect'])}")


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.run and not args.scenario and not args.env:
            return _diagnose(args)
        t = from_scenario(args.scenario, config_file=args.config) if args.scenario else from_env(config_file=args.config)
    except (DoctorInputError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.rdzv_backend:
        t.rendezvous = args.rdzv_backend
    if args.rdzv_endpoint:
        t.rdzv_endpoint = args.rdzv_endpoint
    if args.etcd:
        t.etcd_endpoint = args.etcd
    if args.run_id:
        t.run_id = args.run_id
    from .target import _derive_etcd
    _derive_etcd(t)
    t.wait_s, t.wants_gpu = args.wait, t.wants_gpu or args.gpu
    results = run_preflight(t, versions=not args.no_versions)
    if args.json:
        print(checks_json(results))
    else:
        render_checks(results)
    rc = 1 if any(r.status == Status.FAIL for r in results) else 0
    if args.run:
        rc = max(rc, _diagnose(args))
    return rc
