"""`chaosbench doctor [--scenario FILE | --env] [--run RUN_DIR] [--json]`: a typer command like every other
(chaosbench/cli.py mounts it; `python -m chaosbench.doctor` runs it alone).

Exit codes: 0 nothing failed (warnings allowed), 1 a check failed or the run is stuck/failed, 2 bad input,
3 the doctor itself broke (a harness error, not a finding about the setup).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import typer

EXIT_BAD_INPUT, EXIT_HARNESS = 2, 3
# argparse's -h stays (scripts and habits use it); the rest of the CLI has --help only
CONTEXT = {"help_option_names": ["-h", "--help"]}


def doctor(
    scenario: Optional[str] = typer.Option(None, "--scenario", metavar="FILE",
                                           help="check the setup a scenario file describes"),
    env: bool = typer.Option(False, "--env", help="check this environment (launcher variables, PET_* torchrun "
                             "settings, CHAOSBENCH_*); the default without --scenario/--run"),
    run: Optional[str] = typer.Option(None, "--run", metavar="RUN_DIR",
                                      help="diagnose a (possibly stuck) run from reports/<run-id>/"),
    json_: bool = typer.Option(False, "--json", help="machine-readable output"),
    config: Optional[str] = typer.Option(None, "--config", metavar="CONFIG",
                                         help="trainer config YAML (checkpoint and model sections)"),
    rdzv_backend: Optional[str] = typer.Option(None, "--rdzv-backend", metavar="RDZV_BACKEND", help=(
        "c10d | etcd | etcd-v2 | etcd-v3 (default: PET_RDZV_BACKEND / scenario)")),
    rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", metavar="RDZV_ENDPOINT", help=(
        "HOST:PORT of the rendezvous (default: PET_RDZV_ENDPOINT / scenario)")),
    etcd: Optional[str] = typer.Option(None, "--etcd", metavar="URL",
                                       help="etcd endpoint to check, e.g. http://127.0.0.1:2379"),
    run_id: Optional[str] = typer.Option(None, "--run-id", metavar="RUN_ID", help=(
        "rendezvous run id (default: CHAOSBENCH_RUN_ID / TORCHELASTIC_RUN_ID)")),
    wait: float = typer.Option(0.0, "--wait", metavar="S", show_default=False,
                               help="wait up to S seconds for the master to accept connections"),
    gpu: bool = typer.Option(False, "--gpu", help="the setup needs GPUs (FAIL if none are usable)"),
    no_versions: bool = typer.Option(False, "--no-versions", help="skip the torch/NCCL/GPU checks (no torch import)"),
    # None: diagnose's DEFAULT_TIMEOUT_S, not imported here (it costs `chaosbench` 0.2 s at every start);
    # tests/test_cli_wiring.py holds this help to that value
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="TIMEOUT", show_default=False, help=(
        "--run: seconds without progress that count as stuck (default 60)")),
    nodes: Optional[int] = typer.Option(None, "--nodes", metavar="NODES", help=(
        "--run: expected node count (default: from result.json/scenario.yaml)")),
):
    """Preflight checks of a training setup (--env | --scenario FILE) or diagnose a run (--run RUN_DIR)."""
    if scenario is not None and env:   # what argparse's mutually exclusive group said, as a usage error
        raise typer.BadParameter("not allowed with --env", param_hint="'--scenario'")
    args = SimpleNamespace(**locals())   # the options above, by name
    args.json = args.json_
    from .target import DoctorInputError
    try:
        rc = _doctor(args)
    except (DoctorInputError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        rc = EXIT_BAD_INPUT
    except Exception as e:   # checks report their own failures; an exception here is the doctor's bug
        print(f"harness error: {type(e).__name__}: {e}", file=sys.stderr)
        rc = EXIT_HARNESS
    raise typer.Exit(rc)


def main(argv: list[str] | None = None) -> int:
    """`python -m chaosbench.doctor` and tests: the same command, its exit code returned."""
    app = typer.Typer(add_completion=False)
    app.command(context_settings=CONTEXT)(doctor)
    try:
        app(args=list(sys.argv[1:] if argv is None else argv), prog_name="chaosbench doctor")
    except SystemExit as e:   # typer exits 2 on a usage error, as on any bad input
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
    return 0


def _diagnose(args) -> int:
    from .diagnose import DEFAULT_TIMEOUT_S, diagnose_run
    from .target import split_hostport
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
    timeout = DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout
    d = diagnose_run(run_dir, no_progress_timeout_s=timeout, expected_nodes=args.nodes, rendezvous=rendezvous)
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


def _doctor(args) -> int:
    from .preflight import run_preflight
    from .render import checks_json, render_checks
    from .result import Status
    from .target import from_env, from_scenario
    if args.run and not args.scenario and not args.env:
        return _diagnose(args)
    t = from_scenario(args.scenario, config_file=args.config) if args.scenario else from_env(config_file=args.config)
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
