"""Load scenario YAML with errors that name the file, the line, the field and the valid choices.

Nothing is started before a scenario parses: the runner and `chaosbench validate` both come here.
"""
from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from chaosbench import launchers
from chaosbench.cluster.jobenv import Refused, parse_file, requirements_path
from chaosbench.cluster.launch import NODE_ENV_NAMES, REF
from chaosbench.scenario import numbers, rules, yamlfile
from chaosbench.scenario.check_names import asks_for_any
from chaosbench.scenario.model import Scenario


class ScenarioError(ValueError):
    """A scenario file is invalid. `problems` holds one line per error (CLI exit code 2)."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: invalid scenario\n" + "\n".join(f"  {p}" for p in problems))


# -- locations -----------------------------------------------------------------------------------
def _line_for(lines: dict[tuple, int], loc: tuple) -> int | None:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _fmt_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class that holds the field at loc (to list valid keys for a typo)."""
    cls: Any = Scenario
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or part not in cls.model_fields:
            return None
        ann = cls.model_fields[part].annotation
        for cand in (ann, *typing.get_args(ann), *[a for t in typing.get_args(ann) for a in typing.get_args(t)]):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                cls = cand
                break
        else:
            return None
    return cls if isinstance(cls, type) and issubclass(cls, BaseModel) else None


def _explain(err: dict, loc: tuple) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        model = _model_at(loc)
        if model is not None:
            valid = [k for k in model.model_fields if k not in ("kind", "params")]
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            return f"unknown key '{loc[-1]}'{hint}; valid keys: {', '.join(valid)}"
        return f"unknown key '{loc[-1]}'"
    ctx = err.get("ctx") or {}
    if err["type"] == "less_than_equal":   # the sane maxima of model.py
        return (f"{err['input']} is above the largest accepted value, {ctx['le']}: give at most {ctx['le']} "
                f"(docs/scenarios.md, 'Refused up front', says why each bound)")
    if err["type"] == "string_too_long":
        return (f"{len(err['input'])} characters is too long: at most {ctx['max_length']} (it names the run "
                f"directory, one path component); shorten it")
    if err["type"] == "too_short" and not err["input"]:
        return "an empty list can never be seen: give at least one value, or drop the key"
    return msg


def _problems(exc: ValidationError, lines: dict, source: str, prefix: tuple = ()) -> list[str]:
    out = []
    for err in exc.errors():
        loc = prefix + tuple(err["loc"])
        line = _line_for(lines, loc)
        where = f"{source}:{line}" if line else source
        out.append(f"{where}: {_fmt_loc(loc)}: {_explain(err, loc)}")
    return out


# -- entry points -------------------------------------------------------------------------------
def parse_scenario(data: Any, source: str = "<scenario>", lines: dict[tuple, int] | None = None) -> Scenario:
    from chaosbench.faults.registry import get_fault, validate_params
    lines = lines or {}
    if not isinstance(data, dict):
        raise ScenarioError(source, [f"{source}: the top level must be a mapping with at least 'name'"])
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(source, _problems(e, lines, source)) from None
    problems = []
    for i, fault in enumerate(scenario.faults):
        loc = ("faults", i, fault.kind)
        bad = numbers.field_problems(get_fault(fault.kind).Params, fault.params)
        problems += [f"{source}:{_line_for(lines, loc + (k,))}: {_fmt_loc(loc + (k,))}: {why}" for k, why in bad]
        try:
            fault.params = validate_params(fault.kind, fault.params).model_dump()
        except ValidationError as e:
            problems += _problems(e, lines, source, loc)
        if fault.duration_s is not None and not get_fault(fault.kind).healable:
            loc = ("faults", i, "duration_s")
            problems.append(f"{source}:{_line_for(lines, loc)}: {_fmt_loc(loc)}: {fault.kind} is a one-shot fault "
                            f"with nothing to heal; remove duration_s")
        for key in ("node", "nodes", "peers", "peer"):
            names = fault.params.get(key)
            names = [names] if isinstance(names, str) else (names or [])
            valid = scenario.node_names() + ["random"]
            for name in names:
                if name not in valid and fault.kind != "add_node":
                    loc = ("faults", i, fault.kind, key)
                    problems.append(f"{source}:{_line_for(lines, loc)}: {_fmt_loc(loc)}: no node '{name}' in "
                                    f"a {scenario.cluster.nodes}-node cluster; valid: {', '.join(valid)}")
    problems += _cross_checks(scenario, lines, source)
    if problems:
        raise ScenarioError(source, problems)
    return scenario


def _cross_checks(s: Scenario, lines: dict, source: str) -> list[str]:
    out = []

    def add(loc: tuple, msg: str):
        out.append(f"{source}:{_line_for(lines, loc)}: {_fmt_loc(loc)}: {msg}")

    e, c = s.expect, s.cluster
    if s.trainer.ray is not None and c.backend not in ("ray", "auto"):
        add(("trainer", "ray"), f"trainer.ray describes a Ray Train job, which backend {c.backend} cannot run: "
                                f"set cluster.backend: ray (or remove trainer.ray)")
    # a launcher the backend or rendezvous cannot run is refused here, not on the nodes
    # (backend ray has none: the job is a Ray Train run, cluster/ray/job.py)
    for why in [] if c.backend == "ray" else launchers.get(s.trainer.launcher).problems(backend=c.backend,
                                                                                         rendezvous=c.rendezvous):
        add(("trainer", "launcher"), why)
    for field, value in (("world_size_after", e.world_size_after),):
        if value is not None and value > c.elastic.max_nodes * c.procs_per_node:
            add(("expect", field), f"{value} exceeds max_nodes x procs_per_node "
                                   f"({c.elastic.max_nodes} x {c.procs_per_node})")
    if e.within_seconds is not None and e.reaches_step is None:
        add(("expect", "within_seconds"), "within_seconds needs reaches_step")
    if e.ends == "reached_step" and e.reaches_step is None:
        add(("expect", "ends"), "ends: reached_step needs expect.reaches_step (or use ends: completed for a "
                                "job that runs to its end)")
    if e.ends in ("stuck", "timeout", "nodes_exited", "completed") and e.reaches_step is not None:
        add(("expect", "ends"), f"ends: {e.ends} with reaches_step: a run stops once it reaches that step, so it "
                                f"cannot end {e.ends}; drop reaches_step (or ends)")
    if e.trains_after_settle is not None and e.reaches_step is not None:
        add(("expect", "trains_after_settle"), "trains_after_settle with reaches_step: the run would stop at "
                                               "whichever comes first; keep one (reaches_step: an absolute step; "
                                               "trains_after_settle: steps after the last fault settled)")
    if e.ends == "settled" and e.trains_after_settle is None:
        add(("expect", "ends"), "ends: settled needs expect.trains_after_settle")
    if e.ends in ("stuck", "timeout", "nodes_exited", "completed") and e.trains_after_settle is not None:
        add(("expect", "ends"), f"ends: {e.ends} with trains_after_settle: a run stops once it trained that many "
                                f"settled steps, so it cannot end {e.ends}; drop trains_after_settle (or ends)")
    for i, f in enumerate(s.faults):
        if e.reaches_step is not None and f.at.step is not None and f.at.step >= e.reaches_step:
            add(("faults", i, "at", "step"), f"trigger step {f.at.step} is not before expect.reaches_step "
                                             f"{e.reaches_step}: the fault would never fire")
    ids = [f.id for f in s.faults]
    for j, ref in enumerate(e.detect_faults or []):
        if ref not in ids:
            add(("expect", "detect_faults", j), f"'{ref}' names no fault; fault ids: {', '.join(ids) or 'none'}")
    for i, f in enumerate(s.faults):
        rank = f.params.get("local_rank")
        if isinstance(rank, int) and rank >= c.procs_per_node:
            add(("faults", i, f.kind, "local_rank"), f"local_rank {rank} does not exist: each node runs "
                                                     f"{c.procs_per_node} worker(s) (cluster.procs_per_node), "
                                                     f"valid: 0-{c.procs_per_node - 1}")
    _cooperative_checks(s, add)
    rules.check(s, add)
    if not asks_for_any(e):
        add(("expect",), "no check to evaluate: a scenario without expectations proves nothing; give at "
                         "least one, e.g. `expect: {reaches_step: 50}` (docs/scenarios.md lists them)")
    for field in ("args", "command"):   # a misspelt $CHAOSBENCH_ name would reach the job as written
        for i, arg in enumerate(getattr(s.trainer, field) or []):
            for m in REF.finditer(arg):
                name = m.group(1) or m.group(2)
                if name not in NODE_ENV_NAMES:
                    near = difflib.get_close_matches(name, NODE_ENV_NAMES, n=1)
                    add(("trainer", field, i), f"${name} is not a variable chaosbench sets"
                        + (f" (did you mean ${near[0]}?)" if near else "")
                        + "; the list is in docs/byo-trainer.md")
    if not s.trainer.user_job and s.trainer.config is None:
        add(("trainer",), "give trainer.config (the reference trainer), or trainer.workdir + trainer.script "
                          "(your own job, docs/byo-trainer.md)")
    return out


def _cooperative_checks(s: Scenario, add) -> None:
    """Faults the job carries out itself (faults/inprocess.py): a rank the world has, and a job that
    says it makes instrument calls (or says nothing: the harness never guesses from the script)."""
    from chaosbench.faults.inprocess import is_cooperative
    c = s.cluster
    world = c.elastic.max_nodes * c.procs_per_node
    for i, f in enumerate(s.faults):
        if not is_cooperative(f.kind):
            continue
        rank = f.params.get("rank")
        if isinstance(rank, int) and rank >= world:
            add(("faults", i, f.kind, "rank"), f"rank {rank} does not exist: the world has at most {world} rank(s) "
                                               f"(elastic.max_nodes x procs_per_node = {c.elastic.max_nodes} x "
                                               f"{c.procs_per_node}), valid: 0-{world - 1} or random")
        if s.trainer.instrumented is False:
            add(("faults", i, f.kind), f"{f.kind} is a cooperative fault: the job itself carries it out in "
                                       f"cb.step / cb.fault_point (chaosbench.instrument), and trainer.instrumented: "
                                       f"false says this job makes no such call, so it would never fire; add "
                                       f"`cb.step(step)` to the training loop and drop instrumented: false, or use "
                                       f"kill_worker / freeze_worker, which act from outside")


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError(source, [f"{source}: cannot read: {e.strerror}"]) from None
    except UnicodeDecodeError as e:
        line = path.read_bytes()[:e.start].count(b"\n") + 1
        raise ScenarioError(source, [f"{source}:{line}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at "
                                     f"offset {e.start}); save the file as UTF-8"]) from None
    try:
        data, lines = yamlfile.read(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ScenarioError(source, [f"{where}: not valid YAML: {getattr(e, 'problem', e)}"]) from None
    except yamlfile.YamlRefused as e:
        raise ScenarioError(source, [f"{source}:{line}: " + (f"{_fmt_loc(loc)}: " if loc else "") + msg
                                     if line else f"{source}: {msg}" for line, loc, msg in e.problems]) from None
    scenario = parse_scenario(data, source, lines)
    _check_paths(scenario, path, lines, source)
    return scenario


def _check_paths(s: Scenario, path: Path, lines: dict, source: str) -> None:
    t = s.trainer
    if t.requirements_file is not None:
        _check_requirements_file(t, path, lines, source)
    if t.workdir is not None:
        workdir = resolve_workdir(t.workdir, path)
        loc = ("trainer", "workdir")
        if not workdir.is_dir():
            raise ScenarioError(source, [f"{source}:{_line_for(lines, loc)}: trainer.workdir: directory '{t.workdir}' "
                                         f"not found (resolved to {workdir}; relative paths start at {path.parent})"])
        script = (workdir / t.script).resolve() if t.script is not None else None
        if script is not None and not script.is_relative_to(workdir):
            loc = ("trainer", "script")   # docker mounts only the workdir; the job's files live there
            raise ScenarioError(source, [f"{source}:{_line_for(lines, loc)}: trainer.script: '{t.script}' leads out "
                                         f"of trainer.workdir ({workdir}); give a path inside it, relative to it "
                                         f"(e.g. train.py), or make the script's directory the workdir"])
        if t.script is not None and not (workdir / t.script).is_file():
            loc = ("trainer", "script")
            raise ScenarioError(source, [f"{source}:{_line_for(lines, loc)}: trainer.script: '{t.script}' not found "
                                         f"in {workdir}; give a path relative to trainer.workdir"])
    cfg = t.reference_config
    if cfg and resolve_trainer_config(cfg, path) is None:
        loc = ("trainer", "config")
        raise ScenarioError(source, [f"{source}:{_line_for(lines, loc)}: trainer.config: file '{cfg}' not found "
                                     f"(relative to the current directory or {path.parent})"])
    if cfg:
        _check_trainer_config(s, resolve_trainer_config(cfg, path), lines, source)


def _check_requirements_file(t, path: Path, lines: dict, source: str) -> None:
    """trainer.requirements_file: readable, and every line a specifier chaosbench can install offline."""
    req = requirements_path(t.requirements_file, path.parent)
    where = f"{source}:{_line_for(lines, ('trainer', 'requirements_file'))}: trainer.requirements_file"
    try:
        parse_file(req)
    except (OSError, UnicodeDecodeError) as exc:
        why = "not found" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc})"
        raise ScenarioError(source, [f"{where}: '{t.requirements_file}' {why} (resolved to {req}; relative paths "
                                     f"start at {path.parent}); give a pip requirements file, one specifier a line"]) from None
    except Refused as exc:
        raise ScenarioError(source, [f"{where}: {req}{f':{exc.line}' if exc.line else ''}: {exc}"]) from None


def resolve_workdir(workdir: str, scenario_path: Path | None) -> Path:
    """trainer.workdir: absolute, or relative to the scenario file (where the user keeps both)."""
    p = Path(workdir).expanduser()
    if not p.is_absolute():
        p = (scenario_path.parent if scenario_path else Path.cwd()) / p
    return p.resolve()


def _check_trainer_config(s: Scenario, cfg_path: Path, lines: dict, source: str) -> None:
    """Validate the reference trainer's config with the scenario's overrides, before anything starts,
    by the trainer's own validator through its CLI (chaosbench.reference_trainer), not an import."""
    import json

    from chaosbench.reference_trainer import check_config
    problems = _elastic_contradictions(s, lines, source)
    if problems:
        raise ScenarioError(source, problems)
    assignments = [f"{k}={json.dumps(v)}" for k, v in s.trainer_overrides().items()]
    loc = ("trainer", "overrides") if s.trainer.overrides else ("trainer", "config")
    answer = check_config(cfg_path, assignments)
    if answer is None:
        return   # the reference trainer is not installed: the cluster will report its own errors
    if not answer.valid:
        why = answer.errors[0]["message"] if answer.errors else "rejected without a reason"
        raise ScenarioError(source, [f"{source}:{_line_for(lines, loc)}: {_fmt_loc(loc)}: {why}"])
    max_steps = (answer.config.get("training") or {}).get("max_steps")
    want = s.expect.reaches_step
    if want is not None and isinstance(max_steps, int) and max_steps < want:
        loc = ("expect", "reaches_step")
        raise ScenarioError(source, [f"{source}:{_line_for(lines, loc)}: expect.reaches_step: {want} is beyond the "
                                     f"trainer's training.max_steps ({max_steps}); add "
                                     f"'training.max_steps: {want}' to trainer.overrides"])
    late = [(i, key, step) for i, f in enumerate(s.faults) if isinstance(max_steps, int)
            for key, step in (("step", f.at.step), ("where", f.at.where.get("step")))
            if isinstance(step, int) and not isinstance(step, bool) and step > max_steps]
    if late:   # an event trigger's `where: {step: N}` past the end never matches either
        i, key, step = late[0]
        loc = ("faults", i, "at", key) if key == "step" else ("faults", i, "at", "where", "step")
        raise ScenarioError(source, [f"{source}:{_line_for(lines, loc)}: {_fmt_loc(loc)}: step {step} is beyond the "
                                     f"trainer's training.max_steps ({max_steps}): the job ends first and the fault "
                                     f"never fires; fire earlier or add 'training.max_steps: {step + 50}' to "
                                     f"trainer.overrides"])


def _elastic_contradictions(s: Scenario, lines: dict, source: str) -> list[str]:
    """The reference trainer refuses a world outside its elastic range (TopologyChangeError, on every
    node, until torchrun gives up), so the cluster's range is handed to it (Scenario.trainer_overrides);
    only an explicit override narrower than the cluster's range contradicts it."""
    e, o, out = s.cluster.elastic, s.trainer.overrides, []
    for key, cluster, narrower in (("elastic.max_nodes", e.max_nodes, lambda v: v < e.max_nodes),
                                   ("elastic.min_nodes", e.min_nodes, lambda v: v > e.min_nodes)):
        v = o.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and narrower(v):
            loc = ("trainer", "overrides", key)
            out.append(f"{source}:{_line_for(lines, loc)}: trainer.overrides.{key}: {v} contradicts cluster.{key} "
                       f"({cluster}): the trainer would refuse a world the cluster forms and every node would exit; "
                       f"drop the override (the cluster's range is handed to the trainer) or change cluster.{key}")
    return out


def resolve_trainer_config(cfg: str, scenario_path: Path | None = None) -> Path | None:
    for base in (Path.cwd(), scenario_path.parent if scenario_path else None, Path(__file__).parents[2]):
        if base is not None and (base / cfg).is_file():
            return (base / cfg).resolve()
    return None


def find_scenarios(paths: list[str | Path]) -> list[Path]:
    """Files as given; directories expanded to their *.yaml / *.yml files, sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml"))
        else:
            out.append(p)
    return out
