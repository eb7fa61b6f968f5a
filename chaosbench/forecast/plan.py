"""Join the measured side and the failure side into one simulator input, stating every assumption.

Scale: a phase measured on a few nodes is carried to the target node count by a least-squares fit
`a + b * log2(nodes)` per class where the runs cover two or more sizes, else by the stated default:
rendezvous grows with log2(nodes) (one more round of agreement per doubling), detection, restore
(every node restores its own shard from its own tier, in parallel) and first step stay as measured.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from chaosbench.instrument.tiers import TIERS

from . import SCENARIO_FOR_CLASS, ForecastError
from .inputs import PHASES, Measured
from .presets import FailureModel
from .sim import Spec

_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_intervals(text: str | None) -> dict[str, float]:
    """'memory=30s,nvme=10m,s3=1h' -> seconds per tier."""
    out: dict[str, float] = {}
    for part in filter(None, (text or "").split(",")):
        m = re.fullmatch(r"\s*(\w+)\s*=\s*([0-9.]+(?:e-?[0-9]+)?)\s*(s|m|min|h|d)?\s*", part)
        if not m or m.group(1) not in TIERS:
            raise ForecastError(f"--interval: '{part}' is not TIER=DURATION; tiers: {', '.join(TIERS)}, "
                                "durations like 30s, 10m, 1h (e.g. --interval memory=30s,nvme=10m,s3=1h)")
        value = float(m.group(2)) * _UNITS[m.group(3) or ""]
        if value <= 0:
            raise ForecastError(f"--interval: {m.group(1)} interval must be > 0 (got '{part}')")
        out[m.group(1)] = value
    return out


@dataclass
class Plan:
    spec: Spec
    intervals: dict[str, float]        # the policy being forecast (inf: the tier is not saved)
    model: FailureModel
    gpus: int
    gpus_per_node: int
    days: float
    measured: Measured
    assumptions: list[str] = field(default_factory=list)
    assume: dict[str, str] = field(default_factory=dict)   # --assume CLASS=MEASURED, kept for re-builds
    replace_after_s: float | None = None

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)

    def class_rate_per_s(self, klass: str) -> float:
        return float(sum(r for r, k in zip(self.spec.rates_per_s, self.spec.cause_class) if k == klass))


def _scaled(rows, nodes: int, assumptions: list[str], klass: str) -> np.ndarray:
    """Each measured row carried to `nodes`."""
    arr = np.array([[r.phases[p] for p in PHASES] for r in rows], float)
    sizes = np.array([r.nodes for r in rows], float)
    ri, si = PHASES.index("rendezvous"), PHASES.index("restore")
    if len(set(sizes)) >= 2:
        slopes = []
        for idx, name in ((ri, "rendezvous"), (si, "restore")):
            b, _a = np.polyfit(np.log2(np.maximum(sizes, 1)), arr[:, idx], 1)
            # a phase that got faster with more nodes is noise between runs, not a trend to extrapolate
            b = max(float(b), 0.0)
            arr[:, idx] = np.maximum(arr[:, idx] + b * (math.log2(nodes) - np.log2(np.maximum(sizes, 1))), 0.0)
            slopes.append(f"{name} +{b:.3g} s per doubling")
        assumptions.append(f"{klass}: fitted a + b*log2(nodes) over runs at {sorted(set(int(s) for s in sizes))} nodes "
                           f"({', '.join(slopes)}; a negative slope taken as 0), carried to {nodes} nodes")
    else:
        f = math.log2(max(nodes, 2)) / math.log2(max(sizes[0], 2))
        arr[:, ri] *= f
        assumptions.append(f"{klass}: measured on {int(sizes[0])} nodes only; rendezvous assumed to grow with "
                           f"log2(nodes) (x{f:.2f} at {nodes} nodes), detection/restore/first step as measured")
    return arr


NODE_OUT = ("node_loss", "hung_rank")   # classes that take a node out of the job


def _shrink_then_join(arr: np.ndarray, nodes: int, after_s: float) -> np.ndarray:
    """Elastic shrink: 1/nodes of the throughput lost until the replacement, then its join restart
    (the measured join where the run had one, else the loss's rendezvous, restore and first step again)."""
    out = arr.copy()
    unmeasured = out[:, PHASES.index("join")] <= 0
    for p in ("rendezvous", "restore", "first_step"):
        out[:, PHASES.index("join")] += np.where(unmeasured, arr[:, PHASES.index(p)], 0.0)
    out[:, PHASES.index("degraded")] += after_s / max(nodes, 1)
    return out


def build(measured: Measured, model: FailureModel, gpus: int, gpus_per_node: int, days: float,
          intervals: dict[str, float] | None = None, assume: dict[str, str] | None = None,
          trajectories: int = 1000, seed: int = 0, replace_after_s: float | None = None,
          speed: float = 1.0, speed_source: str = "") -> Plan:
    if gpus < 1 or gpus_per_node < 1:
        raise ForecastError(f"--gpus and --gpus-per-node must be >= 1 (got {gpus}, {gpus_per_node})")
    if not days > 0:
        raise ForecastError(f"--days must be > 0 (got {days})")
    if replace_after_s is not None and not replace_after_s >= 0:
        raise ForecastError(f"--replace-after must be >= 0 seconds (got {replace_after_s})")
    if not speed > 0:
        raise ForecastError(f"speed between failures must be > 0 (got {speed})")
    if trajectories < 1:
        raise ForecastError(f"--trajectories must be >= 1 (got {trajectories})")
    nodes = math.ceil(gpus / gpus_per_node)
    rates = model.rates_per_hour(gpus, gpus_per_node)
    for c in model.causes:
        if rates[c.name] < 0 or not math.isfinite(rates[c.name]):
            raise ForecastError(f"--failures {model.name}: cause '{c.name}' has rate {rates[c.name]}; rates are >= 0")
    causes = [c for c in model.causes if rates[c.name] > 0]
    assumptions = list(model.notes)
    have = measured.classes()
    assume = dict(assume or {})
    recs, restore = {}, {}
    missing = [k for k in sorted({c.klass for c in causes}) if k not in have and k not in assume]
    if missing:   # every class at once, each with the scenario that measures it
        raise ForecastError("\n".join(
            f"fault class '{k}' ({', '.join(c.name for c in causes if c.klass == k)}) has no measured run: run "
            f"{SCENARIO_FOR_CLASS[k]} and pass its run directory, or --assume {k}=CLASS to borrow a measured "
            "class's recoveries" for k in missing))
    for klass in sorted({c.klass for c in causes}):
        src = klass
        if klass not in have and klass in assume:
            src = assume[klass]
            if src not in have:
                raise ForecastError(f"--assume {klass}={src}: no measured run of {src} either; "
                                    f"run {SCENARIO_FOR_CLASS.get(src, src)}")
            assumptions.append(f"{klass}: not measured; recoveries of {src} used instead (--assume)")
        recs[klass] = _scaled(have[src], nodes, assumptions, klass)
        restore[klass] = measured.restore_tier(src)
        if replace_after_s is not None and klass in NODE_OUT:
            recs[klass] = _shrink_then_join(recs[klass], nodes, replace_after_s)
    if replace_after_s is not None:
        assumptions.append(f"elastic shrink: a lost node is replaced {replace_after_s:g} s later; until then the job "
                           f"trains on {nodes - 1} of {nodes} nodes (degraded), and the newcomer's join costs its "
                           "measured join round, or where the runs had none a second rendezvous, restore and first "
                           "step, as measured for the loss")
    policy, stall, lag = {}, {}, {}
    intervals = dict(intervals or {})
    for t in TIERS:
        s = measured.median("stall_s", t)
        if t in intervals and s is None:
            raise ForecastError(f"--interval {t}: the runs saved no {t} checkpoint, so its stall is unknown; "
                                f"run a scenario that saves {t} checkpoints (e.g. scenarios/node_loss.yaml)")
        stall[t] = s or 0.0
        lag[t] = max((measured.median("save_s", t) or 0.0) - stall[t], 0.0)
        mi = measured.interval_s(t)
        policy[t] = intervals.get(t, mi if mi is not None else math.inf)
        if t not in intervals and mi is not None:
            assumptions.append(f"{t}: interval as measured in the runs ({policy[t]:.3g} s of training)")
    for klass, t in restore.items():
        if t in TIERS and not math.isfinite(policy[t]):
            raise ForecastError(f"{klass} restores from {t}, but no {t} interval is known; give --interval {t}=DURATION")
    assumptions += [
        f"step time {measured.step_s:.3g} s (median of {len(measured.step_time_s)} runs); {nodes} nodes of {gpus_per_node} GPUs",
        "failures: Poisson per cause in wall time; none strikes during a recovery",
        "a failure costs one whole measured recovery of its class plus the work since the newest durable "
        "checkpoint of the tier that class restored from in the runs: "
        + ", ".join(f"{k} <- {t}" for k, t in sorted(restore.items())),
        *(["a lost node is replaced at once (a spare or the scheduler): its cost is the measured recovery, the "
           f"replacement's join round where the runs had one ({measured.joins} of {len(measured.rows)} measured "
           "recoveries), and the degraded time after it (--replace-after S models a shrink and a later join)"]
          if replace_after_s is None else []),
        *([f"speed between failures x{speed:.3f} of the step time above (measured: {speed_source})"]
          if speed != 1.0 else []),
        "goodput_ci: 2.5th-97.5th percentile of the simulated jobs",
    ]
    spec = Spec(duration_s=days * 86400.0, causes=[c.name for c in causes],
                rates_per_s=np.array([rates[c.name] / 3600.0 for c in causes]),
                cause_class=[c.klass for c in causes], recoveries=recs, restore_tier=restore,
                stall_s=stall, lag_s=lag, trajectories=trajectories, seed=seed, speed=speed)
    return Plan(spec, policy, model, gpus, gpus_per_node, days, measured, assumptions, assume, replace_after_s)
