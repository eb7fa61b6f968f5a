"""`chaosbench`: run, validate and list scenarios, re-render reports, build images.

Exit codes: 0 every check passed, 1 a check failed (the system under test), 2 bad input,
3 the cluster or harness broke (we could not run the test).
"""
from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional

import typer
from rich import box
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from chaosbench.doctor.cli import CONTEXT as DOCTOR_CONTEXT
from chaosbench.doctor.cli import doctor
from chaosbench.export.cli import app as export_app
from chaosbench.forecast.cli import forecast
from chaosbench.scenario import ScenarioError, find_scenarios, load_scenario

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Fault-injection harness for elastic distributed PyTorch training.")
images_app = typer.Typer(help="Cluster images (built locally, no registry needed).", no_args_is_help=True)
app.add_typer(images_app, name="images")
console = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=False)

EXIT_BAD_INPUT = 2


def _load_all(paths: list[str]) -> tuple[list[Path], list[str]]:
    files = find_scenarios(paths)
    problems = []
    for p in files:
        try:
            load_scenario(p)
        except ScenarioError as e:
            problems += e.problems
    if not files:
        problems.append(f"no scenario files found in: {' '.join(paths)}")
    return files, problems


@app.command()
def validate(paths: List[str] = typer.Argument(..., help="scenario files or directories")):
    """Check scenario files without starting anything."""
    files, problems = _load_all(paths)
    for p in problems:
        console.print(f"[red]error[/red] {escape(p)}", highlight=False, soft_wrap=True)
    if problems:
        raise typer.Exit(EXIT_BAD_INPUT)
    for f in files:
        out.print(f"[green]ok[/green] {escape(str(f))}", highlight=False)


@app.command("list")
def list_(scenario_dir: str = typer.Option("scenarios", "--scenarios", help="scenario directory")):
    """List the scenario library, the fault types and the checks a scenario can expect, with one-line help."""
    from chaosbench.faults import catalogue
    t = Table(title="scenarios", show_lines=False)
    t.add_column("name"), t.add_column("file"), t.add_column("description")
    for f in find_scenarios([scenario_dir]) if Path(scenario_dir).is_dir() else []:
        try:
            s = load_scenario(f)
            t.add_row(s.name, str(f), s.description)
        except ScenarioError as e:
            t.add_row(f.stem, str(f), f"[red]invalid: {e.problems[0]}[/red]")
    out.print(t)
    ft = Table(title="fault types")
    ft.add_column("fault"), ft.add_column("what it does"), ft.add_column("parameters")
    for name, help_, params in catalogue():
        ft.add_row(name, help_, params)
    out.print(ft)
    out.print(_backend_faults_table())
    out.print(_checks_table())


def _checks_table() -> Table:
    """The check registry: what each check judges, the `expect:` key that asks for it, what it needs."""
    from chaosbench.checks.registry import all_checks
    t = Table(title="checks (expect: KEY asks for one; always: every run is held to it)")
    t.add_column("check", no_wrap=True), t.add_column("asked by"), t.add_column("what it checks")
    t.add_column("needs")
    for d in all_checks():
        keys = ", ".join(d.asked_by)
        t.add_row(d.name, f"always{f' ({keys})' if keys else ''}" if d.always else keys, d.help, d.needs)
    return t


def _backend_faults_table() -> Table:
    """Which fault types each backend can inject here, from the primitives each fault's parameters need."""
    from chaosbench.cluster import backend_primitives
    from chaosbench.faults.capabilities import support_table
    backends = backend_primitives()
    t = Table(title="faults per backend (yes: supported here; only p=v: just those parameter values)")
    t.add_column("fault", no_wrap=True)   # a fault's name is what users grep for: never cut it
    for b in backends:
        t.add_column(b, overflow="fold")
    for name, cells in support_table(backends):
        t.add_row(name, *cells)
    from chaosbench.cluster.node.scripts import netem_mechanism   # docker nodes share this host's kernel
    t.caption = (f"packet_fault's delay / jitter / duplicate / corrupt / reorder on docker here: by "
                 f"{netem_mechanism() or 'nothing (refused)'}")
    return t


def _status_row(name: str, p) -> tuple[str, ...]:
    if p is None:
        return (name, "queued", "", "", "", "", "")
    return (name, p.phase, str(p.step), str(p.world_size or "-"),
            f"{p.faults_injected}/{p.faults_injected + p.faults_pending}",
            f"{p.checks_pending} pending" if p.checks_pending else "evaluated", p.message)


def _status_table(states: dict[str, dict]) -> Table:
    """One line per scenario at any width (80 columns leave the message 18): no vertical rules, the
    scenario by its file's stem, the message takes what is left and is cut, never wrapped."""
    t = Table(show_header=True, header_style="bold", expand=True, box=box.SIMPLE_HEAD, show_edge=False,
              pad_edge=False, collapse_padding=True)
    for col in ("scenario", "phase", "step", "world", "faults", "checks"):
        t.add_column(col, no_wrap=True, overflow="ellipsis", max_width=18 if col == "scenario" else None)
    t.add_column("message", no_wrap=True, overflow="ellipsis", ratio=1, min_width=10)
    for name, st in states.items():
        t.add_row(*map(escape, _status_row(Path(name).stem, st.get("progress"))))
    return t


class _ProgressView:
    """The live table on a terminal; elsewhere (CI logs, a pipe) one plain line each time a scenario's
    phase, world size, faults or checks change: a log reads top to bottom, without redraws. (Messages
    are printed as they come either way: RunOptions.on_message.)"""

    def __init__(self, states: dict[str, dict], quiet: bool):
        self.states, self._last = states, {}
        self.live = None
        if not quiet and console.is_terminal and out.is_terminal:
            self.live = Live(_status_table(states), console=console, refresh_per_second=4,
                             get_renderable=lambda: _status_table(states))
        self.plain = not quiet and self.live is None

    def update(self, name: str, p) -> None:
        self.states[name]["progress"] = p
        if not self.plain:
            return
        scen, phase, step, world, faults, checks, _ = _status_row(Path(name).stem, p)
        key = (phase, world, faults, checks)   # not the step (every step) nor the message (printed already)
        if self._last.get(name) != key:
            self._last[name] = key
            console.print(f"{scen}: {phase}, step {step}, world {world}, faults {faults}, checks {checks}",
                          markup=False, highlight=False, soft_wrap=True)

    def __enter__(self):
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc):
        if self.live:
            self.live.stop()


def _summary(outcomes) -> None:
    """Final table, then one line per check that failed or could not be evaluated (the why)."""
    from chaosbench.checks.ending import NORMAL as NORMAL_ENDINGS   # the ending check's own list
    t = Table(title="chaosbench summary")
    for col in ("scenario", "verdict", "ended", "checks passed", "report"):
        t.add_column(col, overflow="fold")
    style = {"passed": "green", "failed": "red", "error": "magenta"}
    lines = []
    for o in outcomes:
        r = o.result
        if r is None:
            t.add_row(o.scenario, "[magenta]error[/magenta]" if o.exit_code == 3 else "[red]bad input[/red]", "", "", "")
            continue
        n_ok = sum(c.status == "passed" for c in r.checks)
        ended = r.ending or "?"   # how the run stopped (docs/result.md): a stuck or timed-out run never passes
        ended = ended if ended in NORMAL_ENDINGS else f"[red]{escape(ended)}[/red]"
        t.add_row(r.scenario.name, f"[{style[r.verdict]}]{r.verdict}[/]", ended, f"{n_ok}/{len(r.checks)}",
                  str(o.run_dir / "report.html" if (o.run_dir / "report.html").exists() else o.run_dir))
        if r.error:
            lines.append(f"[magenta]{r.scenario.name}: harness error[/magenta] {escape(r.error)}")
        # what broke and what to change, first (chaosbench/diagnosis; written with the report)
        from chaosbench.diagnosis import load as load_diagnosis
        d = load_diagnosis(o.run_dir) or {}
        cause = [f for f in d.get("findings") or [] if f.get("severity") == "cause"]
        rc = d.get("root_cause") if r.verdict != "passed" else None
        rc = None if rc and rc.get("fault_id") else rc   # the injected fault itself needs no fixing
        if rc:
            lines.append(f"[red]{r.scenario.name}: root cause[/red] " + escape(str(rc.get("summary"))))
        first = (cause or d.get("findings") or [None])[0]
        if first:
            more = len(d.get("findings") or []) - 1
            lines.append(f"[{'red' if first.get('severity') == 'cause' else 'yellow'}]{r.scenario.name}: to fix[/] "
                         + escape(f"{first.get('title')} Change: {first.get('fix')}")
                         + (escape(f" Expected: {first['effect']}") if first.get("effect") else "")
                         + (f" [dim](+{more} more in the report's 'What to fix')[/dim]" if more > 0 else ""))
        for c in r.checks:
            if c.status != "passed":
                tag = "FAILED" if c.status == "failed" else "NOT EVALUATED" + (" (optional)" if c.optional else "")
                lines.append(f"[{'red' if c.blocking else 'yellow'}]{r.scenario.name}: {escape(c.name)} {tag}[/] "
                             + escape(f"expected {c.expected}, observed {c.observed}: {c.reason}"))
    out.print(t)
    for line in lines:
        out.print(line, highlight=False, soft_wrap=True)


def _unwritable(directory: Path) -> str | None:
    """Why reports cannot go in `directory` (created if missing), found before any cluster starts."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as e:
        return e.strerror or str(e)
    return None


@app.command()
def run(paths: List[str] = typer.Argument(..., help="scenario files or directories"),
        backend: Optional[str] = typer.Option(None, "--backend", help="docker | local | slurm | ray (default: the scenario's, "
                                              "'auto' = docker if available, else local)"),
        seed: Optional[int] = typer.Option(None, "--seed", help="seed for random targets and jitter (replay)"),
        keep_cluster: bool = typer.Option(False, "--keep-cluster", help="leave the cluster up for debugging"),
        report_dir: Path = typer.Option(Path("reports"), "--report-dir", help="where reports/<run-id>/ go"),
        parallel: int = typer.Option(1, "-n", min=1, help="scenarios to run in parallel"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no live progress (CI)"),
        slurm_partition: Optional[str] = typer.Option(None, "--slurm-partition", help="slurm: sbatch --partition"),
        slurm_account: Optional[str] = typer.Option(None, "--slurm-account", help="slurm: sbatch --account"),
        slurm_time: Optional[str] = typer.Option(None, "--slurm-time", help="slurm: sbatch --time (e.g. 0:30:00)"),
        slurm_gpus: Optional[int] = typer.Option(None, "--slurm-gpus-per-node", min=1,
                                                 help="slurm: sbatch --gpus-per-node"),
        sbatch_option: List[str] = typer.Option([], "--sbatch-option",
                                                help="slurm: an extra sbatch option, verbatim (repeatable)"),
        slurm_services: Optional[str] = typer.Option(None, "--slurm-services",
                                                     help="slurm: where etcd/S3/proxy run: harness | node")):
    """Run scenarios and check that training recovered as expected."""
    from chaosbench.runner import RunOptions, RunOutcome, run_scenario
    files, problems = _load_all(paths)
    if backend is not None and backend not in ("auto", "docker", "local", "slurm", "ray"):
        problems.append(f"--backend: unknown backend '{backend}'; valid: auto, docker, local, slurm, ray")
    slurm = {k: v for k, v in {"partition": slurm_partition, "account": slurm_account, "time_limit": slurm_time,
                               "gpus_per_node": slurm_gpus, "sbatch_options": list(sbatch_option) or None,
                               "services": slurm_services}.items()
             if v is not None}
    if slurm_time is not None and not re.fullmatch(r"[0-9:-]+", slurm_time):
        problems.append(f"--slurm-time: '{slurm_time}' is not a Slurm time; use minutes or [D-]HH:MM[:SS]")
    if slurm_services is not None and slurm_services not in ("harness", "node"):
        problems.append(f"--slurm-services: '{slurm_services}' is not a place; use harness or node")
    bad = [o for o in sbatch_option if not o.startswith("-")]
    if bad:
        problems.append(f"--sbatch-option: {bad[0]!r} is not an option; give it as sbatch takes it, e.g. --qos=debug")
    if not problems:   # reports/<run-id>/ and the record below it must fit in a path (scenario/names.py)
        from chaosbench.scenario.names import run_dir_problem
        problems += [p for f in files if (p := run_dir_problem(report_dir, load_scenario(f).name))]
    problem = None if problems else _unwritable(report_dir)   # created only for a run that starts
    if problem:
        problems.append(f"--report-dir: cannot write reports in '{report_dir}' ({problem}); choose a writable directory")
    if problems:
        for p in problems:
            console.print(f"[red]error[/red] {escape(p)}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    cancel = threading.Event()
    states: dict[str, dict] = {str(f): {} for f in files}
    lock = threading.Lock()

    def one(f: Path):
        cmd = "chaosbench run " + " ".join(shlex.quote(a) for a in
                                           [str(f)] + (["--backend", backend] if backend else []) +
                                           (["--seed", str(seed)] if seed is not None else []))
        opts = RunOptions(backend=backend, seed=seed, keep_cluster=keep_cluster, report_dir=report_dir,
                          command=cmd, cancel=cancel, slurm=slurm,
                          on_progress=lambda p: view.update(str(f), p),
                          on_message=lambda m: console.print(f"[dim]{f.stem}[/dim] {escape(m)}", highlight=False))
        try:
            return run_scenario(f, opts)
        except ScenarioError as e:   # changed on disk since validation
            with lock:
                console.print(escape(str(e)))
            return RunOutcome(f.stem, None, None, EXIT_BAD_INPUT)
        except Exception as e:
            console.print(f"[magenta]harness error[/magenta] {f}: {escape(f'{type(e).__name__}: {e}')}")
            return RunOutcome(f.stem, None, None, 3)

    for sig in (signal.SIGTERM, signal.SIGHUP):   # CI cancelling a job, a closed terminal: tear down too
        signal.signal(sig, _raise_interrupt)
    view = _ProgressView(states, quiet)
    outcomes = []
    with view:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = [pool.submit(one, f) for f in files]
            try:
                outcomes = [fu.result() for fu in futures]
            except KeyboardInterrupt:
                cancel.set()   # each runner tears its cluster down
                # a second Ctrl-C must not abandon the runners' teardowns: note it, keep waiting
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, _still_tearing_down)
                console.print("[yellow]interrupted: tearing clusters down[/yellow]")
                for fu in futures:
                    fu.cancel()
                outcomes = [fu.result() for fu in futures if not fu.cancelled()]
                raise typer.Exit(130)
    _summary(outcomes)
    codes = [o.exit_code for o in outcomes]
    raise typer.Exit(max(codes) if codes else 0)


def _raise_interrupt(*_):
    raise KeyboardInterrupt


def _still_tearing_down(*_):
    console.print("[yellow]still tearing clusters down; SIGKILL leaves them behind "
                  "(then `chaosbench clean`)[/yellow]")


@app.command()
def clean(all_: bool = typer.Option(False, "--all", help="also clusters of live runs and of other hosts"),
          no_docker: bool = typer.Option(False, "--no-docker", help="leave docker alone (local backend only)")):
    """Remove containers, networks, volumes, processes, NVMe loop disks and shm dirs of runs that are gone."""
    from chaosbench.cluster.clean import clean as do_clean
    removed, kept = do_clean(everything=all_, docker=not no_docker)
    for kind, items in removed.items():
        out.print(f"{kind}: {len(items)} removed" + (f" ({', '.join(map(str, items))})" if items else ""),
                  highlight=False, soft_wrap=True)
    for k in kept:
        out.print(f"kept: {k}; `chaosbench clean --all` removes it", highlight=False, soft_wrap=True)


@app.command()
def report(run_dir: Path = typer.Argument(..., help="a reports/<run-id> directory")):
    """Re-render the HTML report of a finished run from its result.json and diagnosis.json (nothing is
    written outside the run directory; `python -m chaosbench.report reports/` writes the runs index)."""
    if not (run_dir / "result.json").is_file():
        console.print(f"[red]error[/red] {run_dir}: no result.json here (give a reports/<run-id> directory)", soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    from chaosbench.report import ReportInputError, render_run
    try:
        path = render_run(run_dir)
    except ReportInputError as e:
        console.print(f"[red]error[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    out.print(f"wrote {path}")


@app.command()
def recheck(run_dirs: List[Path] = typer.Argument(..., help="reports/<run-id> directories"),
            json_: bool = typer.Option(False, "--json", help="machine-readable output"),
            dry_run: bool = typer.Option(False, "--dry-run", help="print the verdict diff, write nothing")):
    """Judge stored runs again with today's checks and their stored scenario; print the verdict diff, rewrite result and report."""
    from chaosbench.recheck import main as recheck_main
    raise typer.Exit(recheck_main([str(d) for d in run_dirs], as_json=json_, write=not dry_run,
                                  echo=lambda s: out.print(s, markup=False, highlight=False, soft_wrap=True)))


app.command("doctor", context_settings=DOCTOR_CONTEXT)(doctor)
app.command("forecast")(forecast)
app.add_typer(export_app, name="export")


@images_app.command("build", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def images_build(ctx: typer.Context):
    """Build the cluster images locally; extra options go to `python -m chaosbench.cluster.docker.images build`."""
    rc = subprocess.call([sys.executable, "-m", "chaosbench.cluster.docker.images", "build", *ctx.args])
    raise typer.Exit(rc)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
