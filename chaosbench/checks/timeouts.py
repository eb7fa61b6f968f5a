"""The timeout a job that never noticed a fault would have waited for, as far as the run record shows it.

Read from the scenario as run (scenario.yaml in the run directory) and the events, never guessed:
- the reference trainer: `elastic.health_check_timeout_s` (a silent peer) and `elastic.pg_timeout_s`
  (a blocked collective), from the scenario's overrides, else from its config file as it reads now,
  else from a `health_check_failed` event's `timeout_s`;
- the user's own job: a timeout variable in the scenario's `cluster.env`. The job's own process-group
  timeout is invisible from outside: then it is unknown, and torch's defaults are only named as what
  applies if the job sets none.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from chaosbench.checks.history import History
from chaosbench.reference_trainer import DEFAULT_CONFIG

TIMEOUT_ENV = ("TORCH_NCCL_TIMEOUT", "NCCL_TIMEOUT")
ELASTIC_KEYS = (("health_check_timeout_s", "a silent peer"), ("pg_timeout_s", "a blocked collective"))
TORCH_DEFAULTS = "torch's default if the job sets none: 1800 s on gloo, 600 s on NCCL"
_REPO = Path(__file__).resolve().parents[2]


def timeout_in_force(h: History) -> str:
    trainer = (h.scenario or {}).get("trainer") or {}
    if any(trainer.get(k) is not None for k in ("script", "module", "command")):
        env = ((h.scenario or {}).get("cluster") or {}).get("env") or {}
        named = [f"{k}={env[k]} (cluster.env)" for k in TIMEOUT_ENV if k in env]
        return ", ".join(named) if named else f"an unknown timeout (the job's own; {TORCH_DEFAULTS})"
    if not h.scenario:
        return "an unknown timeout (no scenario.yaml in the run record)"
    overrides = trainer.get("overrides") or {}
    config = trainer.get("config", DEFAULT_CONFIG)
    from_file = _elastic_section(config) if config else {}
    seen = [e["timeout_s"] for e in h.of("health_check_failed") if isinstance(e.get("timeout_s"), (int, float))]
    parts = []
    for key, what in ELASTIC_KEYS:
        value = overrides.get(f"elastic.{key}")
        where = "override"
        if value is None and key in from_file:
            value, where = from_file[key], str(config)
        if value is None and key == "health_check_timeout_s" and seen:
            value, where = seen[0], "health_check_failed event"
        parts.append(f"elastic.{key} {value:g} s for {what} ({where})" if isinstance(value, (int, float))
                     else f"elastic.{key} unknown")
    return "; ".join(parts)


def _elastic_section(config: str) -> dict:
    """The `elastic:` section of a reference trainer config file (relative to the cwd or the repo)."""
    for base in (Path.cwd(), _REPO):
        try:
            data = yaml.safe_load((base / config).read_text())
        except (OSError, yaml.YAMLError):
            continue
        section = data.get("elastic") if isinstance(data, dict) else None
        return section if isinstance(section, dict) else {}
    return {}
