"""The Monte-Carlo simulator: a job's wall time split into training, recoveries and checkpoint stalls.

Model (each choice printed among a forecast's assumptions, docs/plan-a-run.md):
- failures arrive as a Poisson process per cause, in wall time while the job trains (a failure
  that would strike during a recovery is not drawn: the next one is drawn from the recovery's end);
- a failure of fault class k costs one measured recovery of class k, drawn whole from the runs
  (detection, rendezvous, restore, first step, degraded), and the work done since the newest
  durable checkpoint of the tier class k restores from (recomputation);
- tier t saves every T_t seconds of training progress and stalls training s_t per save (a fluid
  approximation: training runs at 1 / (1 + sum s_t / T_t) of wall speed); a save becomes durable
  (save time - stall) later, so a failure just after a save rolls back to the one before.

The failure sequence (times, causes, recoveries) does not depend on the checkpoint intervals, so it
is drawn once and every candidate interval set is evaluated against the same draws (common random
numbers): the optimizer compares intervals, not noise. Vectorised over trajectories x candidates;
the loop is over the failure index only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chaosbench.instrument.tiers import TIERS

from . import ForecastError
from .inputs import PHASES

MAX_CELLS = 300_000_000   # ~2.4 GB of float64 draws


@dataclass
class Spec:
    duration_s: float
    causes: list[str]
    rates_per_s: np.ndarray            # (C,) job failure rate per cause
    cause_class: list[str]             # (C,) fault class of each cause
    recoveries: dict[str, np.ndarray]  # class -> (rows, len(PHASES)) seconds, at the target size
    restore_tier: dict[str, str]       # class -> memory | nvme | s3 | none
    stall_s: dict[str, float]          # tier -> stall per save
    lag_s: dict[str, float]            # tier -> save time after the stall until durable
    trajectories: int = 1000
    seed: int = 0
    speed: float = 1.0                 # training speed between failures / the step time's (a measured ratio)


@dataclass
class Outcome:
    goodput: np.ndarray          # (K, n) useful progress / wall time
    faultfree: np.ndarray        # (K,) goodput of the same job without failures (stalls only)
    stall_s: np.ndarray          # (K, n)
    recompute_by_class: dict[str, np.ndarray]   # class -> (K, n) seconds
    down_by_phase: np.ndarray    # (n, P) seconds
    down_by_cause: np.ndarray    # (n, C) seconds
    count_by_cause: np.ndarray   # (n, C)


def simulate(spec: Spec, intervals: dict[str, np.ndarray]) -> Outcome:
    """intervals: tier -> (K,) candidate intervals in seconds of training (np.inf: never saved)."""
    rng = np.random.default_rng(spec.seed)
    n, D, C, P = spec.trajectories, float(spec.duration_s), len(spec.causes), len(PHASES)
    K = len(next(iter(intervals.values()))) if intervals else 1
    T = {t: np.asarray(intervals.get(t, np.full(K, np.inf)), float).reshape(K, 1) for t in TIERS}
    infl = 1.0 + sum(np.where(np.isfinite(T[t]), spec.stall_s.get(t, 0.0) / T[t], 0.0) for t in TIERS)  # (K,1)
    lam = float(np.sum(spec.rates_per_s))
    classes = sorted(set(spec.cause_class))
    F = int(lam * D + 8 * np.sqrt(lam * D) + 10) if lam > 0 else 0
    if n * F * P > MAX_CELLS:   # the draws are held in memory: n x F x phases floats
        raise ForecastError(f"{lam * D:,.0f} failures per simulated job x {n} jobs is too much to hold; "
                            f"lower --trajectories to {max(1, MAX_CELLS // (F * P))} or fewer")
    X = rng.exponential(1.0 / lam, (n, F)) if F else np.zeros((n, 0))
    cause = rng.choice(C, size=(n, F), p=spec.rates_per_s / lam) if F else np.zeros((n, 0), int)
    cls_of_cause = np.array([classes.index(k) for k in spec.cause_class], int)
    cls = cls_of_cause[cause] if F else np.zeros((n, 0), int)
    phases = np.zeros((n, F, P))
    for j, k in enumerate(classes):
        mask = cls == j
        rows = spec.recoveries[k]
        phases[mask] = rows[rng.integers(0, len(rows), size=int(mask.sum()))]
    down = phases.sum(-1)
    t_fail = np.cumsum(X, 1) + np.cumsum(down, 1) - down     # wall time of each failure
    active = t_fail < D
    if F and active[:, -1].any():
        raise RuntimeError("failure draw bound too small")   # 8 sigma above the Poisson mean
    # a recovery cut by the job's end counts only up to the end
    cut = np.where(active, np.clip((D - t_fail) / np.maximum(down, 1e-12), 0.0, 1.0), 0.0)
    phases *= cut[..., None]
    ends = np.where(active, t_fail + down * cut, 0.0)
    final_seg = np.maximum(D - ends.max(1, initial=0.0), 0.0)     # (n,)
    # progress, candidate by candidate (K) and trajectory by trajectory (n), failure by failure
    tier_of_class = np.array([(TIERS + ("none",)).index(spec.restore_tier[k]) for k in classes], int)
    lag = {t: spec.lag_s.get(t, 0.0) for t in TIERS}
    p = np.zeros((K, n))
    recompute = np.zeros((len(classes), K, n))
    for i in range(F):
        a = active[:, i]
        if not a.any():
            break
        p += np.where(a, X[:, i], 0.0) / infl
        tier_i = tier_of_class[cls[:, i]]
        c = np.zeros((K, n))
        for ti, t in enumerate(TIERS):
            if not (tier_i == ti).any():
                continue
            with np.errstate(invalid="ignore"):
                ct = np.where(np.isfinite(T[t]), np.floor(np.maximum(p - lag[t], 0.0) / T[t]) * T[t], 0.0)
            c = np.where(tier_i == ti, ct, c)
        lost = np.where(a, p - c, 0.0)
        p -= lost
        for j in range(len(classes)):
            recompute[j] += np.where(cls[:, i] == j, lost, 0.0)
    p += final_seg / infl
    train_wall = np.where(active, X, 0.0).sum(1) + final_seg
    down_by_cause = np.zeros((n, C))
    count_by_cause = np.zeros((n, C))
    tot = phases.sum(-1)
    for ci in range(C):
        m = active & (cause == ci)
        count_by_cause[:, ci] = m.sum(1)
        down_by_cause[:, ci] = np.where(m, tot, 0.0).sum(1)
    return Outcome(goodput=p * spec.speed / D, faultfree=(1.0 / infl).ravel(), stall_s=train_wall * (1.0 - 1.0 / infl),
                   recompute_by_class={k: recompute[j] for j, k in enumerate(classes)},
                   down_by_phase=phases.sum(1), down_by_cause=down_by_cause, count_by_cause=count_by_cause)
