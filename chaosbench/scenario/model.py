"""The scenario file, as a pydantic model.

A scenario names the cluster, the trainer, the faults with their triggers, and the expectations.
Fault parameters are validated per fault type by the fault registry (see `loader.parse_scenario`),
so this module knows only the shape common to every fault entry.
"""
from __future__ import annotations

import difflib
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from chaosbench.cluster.jobenv.reqs import Refused, normalise
from chaosbench import launchers
from chaosbench.cluster.launch import keep_alive_problem
from chaosbench.reference_trainer import DEFAULT_CONFIG
from chaosbench.scenario import names, numbers
from chaosbench.scenario.check_names import INVARIANTS, OPTIONAL

Tier = Literal["memory", "nvme", "s3"]
Backend = Literal["auto", "docker", "local", "slurm", "ray"]
Rendezvous = Literal["c10d", "c10d-links", "etcd-v3", "etcd"]
# How a run ended (result.json `ending`, docs/result.md). The first two are the normal endings; a
# scenario about a hang or a crash names the ending it expects (`expect: {ends: stuck}`), else any
# other ending fails the run whatever the checks say.
Ending = Literal["reached_step", "settled", "completed", "stuck", "timeout", "nodes_exited"]
# Sane maxima (docs/scenarios.md, "Refused up front"): far above any real scenario, low enough that a
# typo (an extra 000, 1e12) is refused at load instead of being tried.
MAX_S = 7 * 86400        # any duration, bound or trigger time: a week
MAX_STEP = 10**9         # any step number or count of steps
MAX_COUNT = 10_000       # occurrences, repetitions, restarts
MAX_NODES = 64
MAX_MB = 1 << 20         # 1 TiB, for a node's nvme / shm size


class Strict(BaseModel):
    """Unknown keys are errors (a typo must not silently disable a check)."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers(cls, v: Any, info):
        why = numbers.problem(cls.model_fields[info.field_name].annotation, v)
        if why:
            raise ValueError(why)
        return v


class Elastic(Strict):
    min_nodes: int = Field(1, ge=1, le=MAX_NODES)
    max_nodes: int | None = Field(None, ge=1, le=MAX_NODES)
    max_restarts: int = Field(10, ge=0, le=MAX_COUNT)


class SlurmCfg(Strict):
    """What `--backend slurm` asks sbatch for (CLI flags override; docs/slurm.md). Ignored elsewhere."""
    partition: str | None = None
    account: str | None = None
    time: str | None = Field(None, pattern=r"^[0-9:-]+$")   # sbatch --time: minutes, [D-]HH:MM[:SS]
    gpus_per_node: int | None = Field(None, ge=1, le=64)
    sbatch_options: list[str] = Field(default_factory=list)   # verbatim, e.g. ["--qos=debug"]
    services: Literal["harness", "node"] | None = None   # where etcd/S3/proxy run (default: harness)

    @field_validator("partition", "account")
    @classmethod
    def _slurm_name(cls, v: str | None):
        if v is not None and names.bad(names.SLURM_NAME, v):
            raise ValueError(f"{v!r} is not a Slurm partition/account name: use A-Z a-z 0-9 _ . , : + - "
                             f"(a comma list for several)")
        return v

    @field_validator("sbatch_options")
    @classmethod
    def _options_only(cls, v: list[str]):
        for opt in v:
            if not opt.startswith("-") or "\n" in opt:
                raise ValueError(f"sbatch option {opt!r} is not an option: give each as '--name=value' "
                                 f"(e.g. '--qos=debug'), one per list item")
        return v

    def options(self) -> dict:
        """Keyword arguments for SlurmCluster, the ones set only."""
        return {k: v for k, v in {"partition": self.partition, "account": self.account, "time_limit": self.time,
                                  "gpus_per_node": self.gpus_per_node,
                                  "sbatch_options": self.sbatch_options or None,
                                  "services": self.services}.items() if v is not None}


class ClusterCfg(Strict):
    backend: Backend = "auto"
    nodes: int = Field(2, ge=1, le=MAX_NODES)
    procs_per_node: int = Field(1, ge=1, le=16)
    elastic: Elastic = Field(default_factory=Elastic)
    rendezvous: Rendezvous = "c10d"
    nvme_size_mb: int = Field(256, ge=8, le=MAX_MB)
    shm_size_mb: int = Field(512, ge=8, le=MAX_MB)
    persistent_nvme: bool = True
    rdzv_timeouts: dict[str, int | float] = Field(default_factory=dict)   # ints stay ints: torchrun rejects '120.0'
    warm_start: bool = True   # reference trainer: workers fork from a node-local server with torch imported
    env: dict[str, str] = Field(default_factory=dict)
    slurm: SlurmCfg = Field(default_factory=SlurmCfg)

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]):
        # keys become `env K=V` words (Slurm), docker environment keys and os.environ keys
        for key in v:
            if names.bad(names.ENV_KEY, key):
                raise ValueError(f"environment variable name {key!r} is not valid: use letters, digits and _, "
                                 f"not starting with a digit (e.g. NCCL_DEBUG)")
        return v

    @field_validator("rdzv_timeouts")
    @classmethod
    def _conf_keys(cls, v: dict):
        # joined into torchrun's --rdzv-conf k=v,k=v: a ',' or '=' in a key would set other keys
        for key in v:
            if names.bad(names.CONF_KEY, key):
                raise ValueError(f"rdzv_timeouts key {key!r} is not a torchrun rdzv-conf name: use a-z 0-9 _ "
                                 f"(e.g. last_call_timeout)")
            if not 0 < v[key] <= MAX_S:   # a negative one fails every rendezvous; inf never times out
                raise ValueError(f"rdzv_timeouts.{key} is {v[key]}: give seconds above 0 and at most {MAX_S}")
        return v

    @model_validator(mode="after")
    def _bounds(self):
        if self.elastic.max_nodes is None:
            self.elastic.max_nodes = max(self.nodes, self.elastic.min_nodes)
        if self.elastic.max_nodes < self.elastic.min_nodes:
            raise ValueError(f"elastic.max_nodes ({self.elastic.max_nodes}) must be >= elastic.min_nodes "
                             f"({self.elastic.min_nodes})")
        problem = keep_alive_problem(self.rendezvous, self.rdzv_timeouts)
        if problem:
            raise ValueError(problem)
        if not self.elastic.min_nodes <= self.nodes <= self.elastic.max_nodes:
            raise ValueError(f"nodes ({self.nodes}) must lie within elastic.min_nodes..max_nodes "
                             f"({self.elastic.min_nodes}..{self.elastic.max_nodes})")
        return self


class ProgressCfg(Strict):
    """How to read progress from a job that emits no events: a regex over each worker's output lines."""
    regex: str = Field(description="with a named group 'step' (and optionally 'loss'), e.g. 'step (?P<step>\\d+)'")

    @field_validator("regex")
    @classmethod
    def _has_step(cls, v: str):
        import re
        try:
            pattern = re.compile(v)
        except re.error as e:
            raise ValueError(f"not a valid regular expression: {e}") from None
        if "step" not in pattern.groupindex:
            raise ValueError("the regex needs a named group 'step', e.g. 'step (?P<step>\\d+)'")
        return _tame(v)


# The trainer fields that reach the nodes as one argv word or a docker mount spec: what each must be
# (so that it can never be read as an option or change the mount) and the fix a refusal names.
_TRAINER_WORDS = {
    "image": (lambda v: not names.bad(names.DOCKER_IMAGE, v),   # an argv word of docker run
              "is not a docker image reference: give name[:tag] (e.g. me/train:1), starting with a letter or digit"),
    "module": (lambda v: not names.bad(names.PY_MODULE, v),     # follows torchrun's -m
               "is not a python module name: give dotted identifiers (e.g. my_pkg.train)"),
    "script": (lambda v: not (v.startswith("-") or "\n" in v or "\0" in v),   # torchrun reads '-...' as an option
               "must be a file path relative to trainer.workdir (e.g. train.py), not starting with '-'"),
    "workdir": (lambda v: not any(c in v for c in ":,\n\0"),   # docker mounts it as 'host:container:ro'
                "contains ':', ',' or a control character, which a docker volume cannot mount: rename the "
                "directory or use a symlink without them"),
}


class RayCfg(Strict):
    """trainer.ray: the job is a Ray Train run (backend ray; cluster/ray/job.py, docs/ray.md). The reference
    trainer runs as a Ray Train loop; trainer.module (or script) names a user's loop module."""
    function: str = Field("train_loop_per_worker", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")   # in trainer.module
    max_failures: int = Field(0, ge=-1, le=MAX_COUNT)   # FailureConfig(max_failures): Ray's default 0, -1 unlimited
    # RunConfig(storage_path): shared (a directory every node mounts), s3 (the run's S3 endpoint) or an
    # absolute path inside the nodes (a node-local one is lost with its node: docs/ray.md)
    storage: str = Field("shared", pattern=r"^(shared|s3|/[^\n]*)$")
    config: dict[str, Any] = Field(default_factory=dict)   # train_loop_config for a user's loop


class TrainerCfg(Strict):
    """The reference trainer (`config` + `overrides`), the user's own job launched under the harness's
    torchrun (`workdir` + `script`|`module` + `args`), or a raw per-node `command`."""
    config: str | None = DEFAULT_CONFIG
    overrides: dict[str, Any] = Field(default_factory=dict)
    workdir: str | None = None         # the user's project: cwd of the job (mounted read-only on docker)
    script: str | None = None          # relative to workdir, run by torchrun
    module: str | None = None          # or `python -m module`
    args: list[str] = Field(default_factory=list)
    image: str | None = None           # docker: the user's own image (python + torch) instead of ours
    progress: ProgressCfg | None = None
    checkpoint_dir: Literal["nvme", "memory"] = "nvme"   # where $CHAOSBENCH_CHECKPOINT_DIR points
    command: list[str] | None = None   # raw escape hatch: argv each node runs instead of torchrun + trainer
    # does your job call chaosbench.instrument (cb.step / cb.fault_point)? false: cooperative faults
    # (worker_error, gil_hang, corrupt_replica) are refused at load, since nothing would carry them out
    instrumented: bool | None = None
    ray: RayCfg | None = None          # a Ray Train job (backend ray)
    # what runs the job on each node: torchrun, ft_launcher, dlrover-run or torchft (docs/frameworks.md);
    # launcher_args: more of that launcher's own flags (e.g. --ft-rank-heartbeat-timeout=5), appended as given
    launcher: str = launchers.DEFAULT
    launcher_args: list[str] = Field(default_factory=list)
    # the job's own packages (pip specifiers by name, e.g. omegaconf==2.3.0) and/or a requirements file
    # relative to the scenario file: installed offline beside the node image's (cluster/jobenv)
    requirements: list[str] = Field(default_factory=list)
    requirements_file: str | None = None

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, v: list[str]):
        for spec in v:
            try:
                normalise(spec)
            except Refused as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator(*_TRAINER_WORDS)
    @classmethod
    def _trainer_word(cls, v: str | None, info: ValidationInfo):
        ok, fix = _TRAINER_WORDS[info.field_name]
        if v is not None and not ok(v):
            raise ValueError(f"trainer.{info.field_name} {v!r} {fix}")
        return v

    @field_validator("overrides")
    @classmethod
    def _dotted(cls, v: dict[str, Any]):
        for key in v:
            if "." not in key:
                raise ValueError(f"override '{key}' must be 'section.field' (e.g. checkpoint.checkpoint_interval)")
        return v

    @field_validator("launcher")
    @classmethod
    def _launcher(cls, v: str):
        if v not in launchers.NAMES:
            close = difflib.get_close_matches(v, launchers.NAMES, 1)
            raise ValueError(f"trainer.launcher {v!r} is not a launcher: use "
                             f"{close[0] if close else ' or '.join(launchers.NAMES)}")
        return v

    @model_validator(mode="after")
    def _one_kind(self):
        user = [k for k in ("script", "module") if getattr(self, k) is not None]
        if len(user) == 2:
            raise ValueError("give trainer.script or trainer.module, not both")
        if user and self.command is not None:
            raise ValueError(f"trainer.command and trainer.{user[0]} exclude each other: use {user[0]} to run your "
                             f"job under the harness's torchrun, or command for a raw per-node argv")
        if (user or self.command is not None) and (("config" in self.model_fields_set and self.config)
                                                   or self.overrides):
            which = user[0] if user else "command"
            raise ValueError(f"trainer.config/overrides configure the reference trainer; remove them when "
                             f"trainer.{which} runs your own job")
        if user and not self.workdir:
            raise ValueError(f"trainer.workdir is missing: the directory of your project (relative to the "
                             f"scenario file), where trainer.{user[0]} is found")
        if self.workdir and not user and self.command is None:
            raise ValueError("trainer.workdir needs trainer.script (e.g. train.py) or trainer.module to run")
        if not user and self.command is None:
            extra = sorted(self.model_fields_set & {"args", "image", "progress", "checkpoint_dir", "instrumented"})
            if extra:
                raise ValueError(f"trainer.{extra[0]} applies to your own job: add trainer.script or trainer.module")
        if self.command is not None and ({"launcher", "launcher_args"} & self.model_fields_set):
            raise ValueError("trainer.launcher applies to the reference trainer or trainer.script/module; "
                             "trainer.command is a raw argv that starts its own launcher: remove one of them")
        if self.command is not None and not self.command:
            raise ValueError("trainer.command is empty: give the argv each node runs")
        return self

    @property
    def user_job(self) -> bool:
        """The user's own job (script, module or raw command), not the reference trainer."""
        return self.script is not None or self.module is not None or self.command is not None

    @property
    def reference_config(self) -> str | None:
        return None if self.user_job else self.config


class Trigger(Strict):
    """When a fault fires. Exactly one condition; `delay_s` waits after it holds."""
    seconds: float | None = Field(None, ge=0, le=MAX_S, description="wall-clock offset from training start")
    step: int | None = Field(None, ge=1, le=MAX_STEP, description="when any rank reports this step")
    event: str | None = Field(None, description="a trainer event name, e.g. checkpoint_saved")
    where: dict[str, Any] = Field(default_factory=dict, description="fields the event must carry")
    occurrence: int = Field(1, ge=1, le=MAX_COUNT, description="fire on the Nth matching event")
    after_fault: str | None = Field(None, description="id of a fault; fires once it healed")
    delay_s: float = Field(0.0, ge=0, le=MAX_S)

    @field_validator("where")
    @classmethod
    def _scalar_values(cls, v: dict[str, Any]):
        # compared with `==` to one event field: a list or mapping could never equal it
        for key, value in v.items():
            if not isinstance(value, (str, int, float, bool)) and value is not None:
                raise ValueError(f"where.{key} is a {type(value).__name__}: each value must be one string, number "
                                 f"or boolean that the event's field equals (e.g. where: {{tier: nvme}})")
        return v

    @model_validator(mode="after")
    def _exactly_one(self):
        set_ = [k for k in ("seconds", "step", "event", "after_fault") if getattr(self, k) is not None]
        if len(set_) != 1:
            raise ValueError("a trigger needs exactly one of: seconds, step, event, after_fault "
                             f"(got {', '.join(set_) or 'none'})")
        if self.where and self.event is None:
            raise ValueError("'where' only applies to an 'event' trigger")
        return self

    def describe(self) -> str:
        if self.step is not None:
            text = f"at step {self.step}"
        elif self.seconds is not None:
            text = f"at {self.seconds:g} s"
        elif self.event is not None:
            where = ", ".join(f"{k}={v}" for k, v in self.where.items())
            text = f"on {self.event}" + (f" ({where})" if where else "") + \
                   (f" #{self.occurrence}" if self.occurrence > 1 else "")
        else:
            text = f"after {self.after_fault} healed"
        return text + (f" +{self.delay_s:g} s" if self.delay_s else "")


class Repeat(Strict):
    times: int = Field(1, ge=1, le=MAX_COUNT, description="total injections")
    every_s: float = Field(30.0, gt=0, le=MAX_S, description="seconds between injections")
    jitter_s: float = Field(0.0, ge=0, le=MAX_S, description="random extra delay per repetition (seeded)")


class FaultEntry(Strict):
    """One fault: `{at: {...}, <fault_type>: {params}, duration_s?, repeat?, id?}`."""
    id: str | None = None
    at: Trigger
    kind: str
    params: dict[str, Any] = Field(default_factory=dict)
    duration_s: float | None = Field(None, ge=0, le=MAX_S, description="heal after this long (None: never, or at once "
                                     "for one-shot faults)")
    repeat: Repeat | None = None

    @field_validator("id")
    @classmethod
    def _safe_id(cls, v: str | None):
        if v is not None:   # it names files under the run directory (inventories/<id>.json)
            problem = names.fault_id_problem(v)
            if problem:
                raise ValueError(problem)
        return v

    @model_validator(mode="before")
    @classmethod
    def _split_kind(cls, data: Any):
        from chaosbench.faults.registry import fault_names
        if not isinstance(data, dict) or "kind" in data:
            return data
        common = set(cls.model_fields) - {"kind", "params"}
        kinds = [k for k in data if k not in common]
        names = fault_names()
        if len(kinds) != 1:
            found = ", ".join(kinds) or "none"
            raise ValueError(f"each fault needs exactly one fault type key (found: {found}); "
                             f"valid fault types: {', '.join(names)}")
        kind = kinds[0]
        if kind not in names:
            close = difflib.get_close_matches(kind, names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ValueError(f"unknown fault type '{kind}'{hint}; valid fault types: {', '.join(names)}")
        out = {k: v for k, v in data.items() if k in common}
        out["kind"] = kind
        out["params"] = data[kind] or {}
        return out


class LogRegex(Strict):
    pattern: str
    expect: Literal["present", "absent"] = "present"
    node: str | None = None   # limit to one node's log; default all logs

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str):
        import re
        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"not a valid regular expression: {e}") from None
        return _tame(v)


def _tame(pattern: str) -> str:
    from chaosbench.scenario.regexes import catastrophic
    why = catastrophic(pattern)
    if why:
        raise ValueError(why)
    return pattern


class LossContinuity(Strict):
    max_increase: float = Field(0.25, ge=0, le=1000, description="allowed relative loss increase after a restore")


class Expect(Strict):
    recovered_from: Tier | None = None
    resumed_at_step: int | None = Field(None, ge=0, le=MAX_STEP)
    max_lost_steps: int | None = Field(None, ge=0, le=MAX_STEP)
    max_recovery_seconds: float | None = Field(None, gt=0, le=MAX_S)
    world_size_after: int | None = Field(None, ge=1)
    world_sizes: list[int] | None = Field(None, min_length=1, max_length=MAX_COUNT)
    reaches_step: int | None = Field(None, ge=1, le=MAX_STEP)
    within_seconds: float | None = Field(None, gt=0, le=MAX_S, description="time budget for reaches_step")
    trains_after_settle: int | None = Field(None, ge=5, le=MAX_STEP, description="stop once the job trained this many steps "
                                            "(5 or more: fewer could be a dying round's in-flight steps) in one unbroken stretch (one world size, no restart) after every "
                                            "fault fired and healed, at the final world size when the story names "
                                            "one (scenario/stop.py, checks/settle.py)")
    no_restart: bool | None = None
    loss_continuity: LossContinuity | bool | None = None
    checkpoints_valid: bool | None = None
    no_fatal: bool | None = None
    log_regex: list[LogRegex] = Field(default_factory=list)
    optional: list[str] = Field(default_factory=list, description="checks allowed to be not evaluated")
    ends: Ending | None = Field(None, description="the run's expected ending, when it is not a normal one")
    max_detection_seconds: float | None = Field(None, gt=0, le=MAX_S, description="per fault: injection -> first sign "
                                                "the job noticed it (checks/detection.py)")
    detect_faults: list[str] | None = Field(None, min_length=1, description="the fault ids max_detection_seconds "
                                            "judges (default: every fault)")
    max_slowdown: float | None = Field(None, ge=1, le=10**6, description="per fault: step rate during it >= the rate "
                                       "before it / this (checks/slowdown.py)")
    evicts_straggler_within_s: float | None = Field(None, gt=0, le=MAX_S, description="per throttle_node fault: the job "
                                                    "trains on without the slow node within this (checks/eviction.py)")
    replicas_agree: bool | None = Field(None, description="the ranks' param_digest agree at every step, or the "
                                        "job rolled back to a step where they did (checks/replicas.py)")
    saved_within_grace: bool | None = Field(None, description="per preempt_node fault: a checkpoint saved between "
                                            "the notice and the kill, and restored (checks/grace.py)")
    quorum_recovery: bool | None = Field(None, description="torchft: no survivor restarts, the quorum shrinks at "
                                         "each fault and grows back, the returning group heals from a live peer "
                                         "(checks/quorum.py)")
    max_heal_seconds: float | None = Field(None, gt=0, le=MAX_S, description="torchft: per fault, injection -> the "
                                           "returning group's heal done (implies quorum_recovery)")
    max_stall_seconds: float | None = Field(None, gt=0, allow_inf_nan=False, description="the longest the world may go "
                                            "without a step away from a fault (invariant:liveness; default: from the "
                                            "measured step time, docs/result.md)")
    relax: dict[str, str] = Field(default_factory=dict, description="run-level invariants this story does not hold, "
                                  "by name, each with why (docs/result.md, Run-level invariants)")

    @field_validator("relax")
    @classmethod
    def _known_invariants(cls, v: dict[str, str]):
        for name, why in v.items():
            if name not in INVARIANTS:
                raise ValueError(f"unknown invariant '{name}' in relax; valid invariants: {', '.join(INVARIANTS)}")
            if not str(why).strip():
                raise ValueError(f"relax.{name} needs a reason: say why this story does not hold it")
        return v

    def final_world(self) -> int | None:
        """The world size the story ends at: world_size_after, else the last of world_sizes."""
        return self.world_size_after if self.world_size_after is not None else (self.world_sizes or [None])[-1]

    @model_validator(mode="after")
    def _detect_faults_need_bound(self):
        if self.detect_faults is not None and self.max_detection_seconds is None:
            raise ValueError("detect_faults names the faults max_detection_seconds judges: set "
                             "max_detection_seconds too")
        return self

    @field_validator("optional")
    @classmethod
    def _known_checks(cls, v: list[str]):
        for name in v:
            if name not in OPTIONAL:
                raise ValueError(f"unknown check '{name}'; valid checks: {', '.join(OPTIONAL)}")
        return v


class RunCfg(Strict):
    timeout_s: float = Field(600.0, gt=0, le=MAX_S, description="hard limit for the whole run")
    stuck_after_s: float = Field(120.0, gt=0, le=MAX_S, description="stop when no rank made progress for this long")
    settle_s: float = Field(0.0, ge=0, le=MAX_S, description="keep observing this long after reaches_step")


class Scenario(Strict):
    # it starts the run directory's name (<name>-<date>-<time>-<hex>): one path component, <= 255 bytes
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=names.MAX_SCENARIO_NAME)
    description: str = ""
    cluster: ClusterCfg = Field(default_factory=ClusterCfg)
    trainer: TrainerCfg = Field(default_factory=TrainerCfg)
    faults: list[FaultEntry] = Field(default_factory=list)
    expect: Expect = Field(default_factory=Expect)
    run: RunCfg = Field(default_factory=RunCfg)
    seed: int = 0
    # An upstream behaviour that makes this scenario fail today (with a link or a one-line cause).
    # The expectations stay honest; pytest reports the scenario as xfail instead of hiding it.
    known_issue: str | None = None

    @model_validator(mode="after")
    def _fault_ids(self):
        seen: set[str] = set()
        for i, f in enumerate(self.faults):
            f.id = f.id or f"f{i + 1}"
            if f.id in seen:
                raise ValueError(f"duplicate fault id '{f.id}'")
            seen.add(f.id)
        for f in self.faults:
            ref = f.at.after_fault
            if ref is not None and (ref not in seen or ref == f.id):
                raise ValueError(f"fault '{f.id}': after_fault '{ref}' names no other fault; "
                                 f"fault ids: {', '.join(sorted(seen))}")
        return self

    def trainer_overrides(self) -> dict[str, Any]:
        """The reference trainer's overrides as run: the cluster's elastic range, then the scenario's own.
        The trainer refuses a world outside its config's elastic.min_nodes..max_nodes, so a cluster wider
        than the config (6 nodes with tiny.yaml's max_nodes: 4) would crash-loop; the cluster is where a
        scenario states the range, so it is handed over (an explicit narrower override is refused)."""
        e = self.cluster.elastic
        return {"elastic.min_nodes": e.min_nodes, "elastic.max_nodes": e.max_nodes, **self.trainer.overrides}

    def node_names(self) -> list[str]:
        return [f"node-{i}" for i in range(self.cluster.nodes)]

    def as_run_yaml(self, backend: str, seed: int) -> str:
        """The scenario as run (reports/<run-id>/scenario.yaml), in the file format (faults as
        `<type>: params`), with the full cluster shape, the backend and the seed, for replay."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        data["cluster"] = {**self.cluster.model_dump(mode="json"), "backend": backend}
        data["seed"] = seed
        data["faults"] = []
        for f in self.faults:
            entry = {"id": f.id, "at": f.at.model_dump(exclude_defaults=True), f.kind: f.params}
            if f.duration_s is not None:
                entry["duration_s"] = f.duration_s
            if f.repeat is not None:
                entry["repeat"] = f.repeat.model_dump()
            data["faults"].append(entry)
        return yaml.safe_dump(data, sort_keys=False)
